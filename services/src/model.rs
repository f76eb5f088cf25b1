//! A scripted language model behind an OpenAI-compatible chat completions
//! API (`POST /v1/chat/completions`, plain JSON or server-sent events with
//! `"stream": true`), so that the `model` gatekeeper and the `assistant`
//! gadget's tool-calling loop are tested against a real HTTP service, and
//! the pending-writes experiment runs without a hosted model.
//!
//! What this module owns: the endpoint's wire format (its answers and its
//! stream of chunks) and one deterministic agent policy. The policy plays a
//! reasonable model given the task `ensure <TITLE> | <LABEL>` and tools
//! whose names end in `listIssues`, `createIssue` and `addLabel`: it reads
//! only the conversation it is sent (it keeps no memory between requests,
//! like a real model), looks for the issue, creates it when it is missing,
//! and labels it. What it believes comes from the tool results in the
//! conversation, which is the point of the experiment: a harness that
//! answers a staged write with `{}` (hiding that it is pending) leads it to
//! look again, find nothing, and create the issue a second time; one that
//! says `PENDING` leads it to wait.
//!
//! What it may not touch: nothing of the kernel. Like the other services it
//! stands on the far side of the boundary the host enforces.

use std::collections::HashSet;
use std::io;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

pub use crate::service::Received;
use crate::service::{self, Service, error};

/// What the model's handler sees: its state and the request log.
type Shared = service::Shared<ModelState>;

/// Largest request body read: a long conversation fits easily.
const MAX_BODY: usize = 4 * 1024 * 1024;

/// How many issues the policy creates at most for one task, as a cautious
/// model would: the first, and one more when it believes the first failed.
const MAX_CREATES: usize = 2;

/// A running scripted model on `127.0.0.1` (ephemeral port); see
/// [`Service`] for what every service does.
pub type Model = Service<ModelState>;

/// The model's own state (opaque: reached through [`Model`]'s methods).
pub struct ModelState {
    tokens: HashSet<String>,
    name: String,
}

/// Configuration for a [`Model`]; obtained from [`Model::builder`].
#[derive(Clone, Debug, Default)]
pub struct ModelBuilder {
    tokens: HashSet<String>,
    name: Option<String>,
}

impl Service<ModelState> {
    /// Starts configuring a model. No token is accepted until one is
    /// added, so it never answers an anonymous request by accident.
    pub fn builder() -> ModelBuilder {
        ModelBuilder::default()
    }

    /// The completions requests received so far, parsed, in order.
    pub fn conversations(&self) -> Vec<Value> {
        self.requests()
            .iter()
            .filter(|r| r.method == "POST")
            .filter_map(|r| serde_json::from_str(&r.body).ok())
            .collect()
    }
}

impl ModelBuilder {
    /// Accepts `t` as a bearer token.
    pub fn token(mut self, t: &str) -> Self {
        self.tokens.insert(t.to_owned());
        self
    }

    /// The model's name, as answered in `model` (default `scripted-1`).
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.to_owned());
        self
    }

    /// Starts the model on an ephemeral loopback port.
    ///
    /// # Errors
    ///
    /// Whatever binding the port or starting its thread fails with.
    pub fn start(self) -> io::Result<Model> {
        let state = ModelState {
            tokens: self.tokens,
            name: self.name.unwrap_or_else(|| "scripted-1".to_owned()),
        };
        Service::start("Model", state, handle, |_| std::future::pending())
    }
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, bytes, received) = match shared.receive(request, MAX_BODY).await {
        Ok(received) => received,
        Err(too_large) => return too_large,
    };
    let known = service::bearer(received.authorization.as_deref())
        .is_some_and(|t| shared.tokens.contains(t));
    if !known {
        return service::unauthorized();
    }
    if parts.method != Method::POST
        || parts.uri.path().trim_end_matches('/') != "/v1/chat/completions"
    {
        return error(
            StatusCode::NOT_FOUND,
            "only POST /v1/chat/completions is served",
        );
    }
    let Ok(body) = serde_json::from_slice::<Value>(&bytes) else {
        return error(StatusCode::BAD_REQUEST, "the body is not JSON");
    };
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return error(StatusCode::BAD_REQUEST, "messages must be an array");
    };
    let tools = Tools::offered(body.get("tools"));
    let message = policy(messages, &tools);
    if body.get("stream") == Some(&Value::Bool(true)) {
        return stream(&shared.name, &message);
    }
    let finish = finish_reason(&message);
    let answer = json!({
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "model": shared.name,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    });
    (StatusCode::OK, axum::Json(answer)).into_response()
}

fn finish_reason(message: &Value) -> &'static str {
    if message.get("tool_calls").is_some() {
        "tool_calls"
    } else {
        "stop"
    }
}

/// The answer as server-sent events, as OpenAI streams it: the role, then
/// the content or each tool call's name and its arguments in small pieces
/// (a client must put them back together by index), the finish reason,
/// then `[DONE]`.
fn stream(model: &str, message: &Value) -> Response {
    let chunk = |delta: Value, finish: Option<&str>| {
        let c = json!({
            "id": "chatcmpl-scripted",
            "object": "chat.completion.chunk",
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        });
        format!("data: {c}\n\n")
    };
    let mut out = chunk(json!({"role": "assistant"}), None);
    if let Some(text) = message.get("content").and_then(Value::as_str) {
        for piece in pieces(text) {
            out.push_str(&chunk(json!({"content": piece}), None));
        }
    }
    if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
        for (index, call) in calls.iter().enumerate() {
            let name = &call["function"]["name"];
            out.push_str(&chunk(
                json!({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                       "function": {"name": name, "arguments": ""}}]}),
                None,
            ));
            let arguments = call["function"]["arguments"].as_str().unwrap_or("{}");
            for piece in pieces(arguments) {
                out.push_str(&chunk(
                    json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                    None,
                ));
            }
        }
    }
    out.push_str(&chunk(json!({}), Some(finish_reason(message))));
    out.push_str("data: [DONE]\n\n");
    let mut response = (StatusCode::OK, out).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    response
}

/// `text` in pieces of at most 7 characters (never splitting one).
fn pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(7).map(|c| c.iter().collect()).collect()
}

/// The functions a request offers, found by how their names end.
#[derive(Default)]
struct Tools {
    list: Option<String>,
    create: Option<String>,
    label: Option<String>,
}

impl Tools {
    fn offered(tools: Option<&Value>) -> Tools {
        let mut found = Tools::default();
        let names = tools
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|t| t["function"]["name"].as_str());
        for name in names {
            let slot = if name.ends_with("listIssues") {
                &mut found.list
            } else if name.ends_with("createIssue") {
                &mut found.create
            } else if name.ends_with("addLabel") {
                &mut found.label
            } else {
                continue;
            };
            slot.get_or_insert_with(|| name.to_owned());
        }
        found
    }
}

/// One tool call the conversation holds, with its result.
struct Step {
    name: String,
    result: String,
}

/// The next assistant message for `messages`: a final answer, or one tool
/// call.
fn policy(messages: &[Value], tools: &Tools) -> Value {
    let task = messages
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .find_map(|text| text.lines().find_map(|l| l.trim().strip_prefix("ensure ")));
    let Some((title, label)) = task.and_then(|t| t.split_once('|')) else {
        return say(
            "I can only ensure that an issue exists and carries a label: ensure <TITLE> | <LABEL>",
        );
    };
    let (title, label) = (title.trim(), label.trim());
    let (Some(list), Some(create), Some(add_label)) = (&tools.list, &tools.create, &tools.label)
    else {
        return say("I need tools to list issues, create one and add a label; none were offered.");
    };
    let steps = steps(messages);
    let creates = steps.iter().filter(|s| &s.name == create).count();
    let Some(last) = steps.last() else {
        return call(list, json!({}), steps.len());
    };
    let n = steps.len();
    if &last.name == list {
        let Some(issue) = find(&last.result, title) else {
            if creates >= MAX_CREATES {
                return say(&format!(
                    "I could not create the issue {title:?}: it is still not listed."
                ));
            }
            return call(create, json!({ "title": title }), n);
        };
        if labelled(&issue, label) {
            return say(&format!(
                "Done: issue {title:?} exists and carries {label:?}."
            ));
        }
        if steps
            .iter()
            .any(|s| &s.name == add_label && pending(&s.result))
        {
            return say(&format!(
                "Waiting: the label {label:?} is staged and awaits a person's decision."
            ));
        }
        return call(add_label, json!({ "id": issue["id"], "label": label }), n);
    }
    if &last.name == create {
        if let Some(id) = created_id(&last.result) {
            return call(add_label, json!({ "id": id, "label": label }), n);
        }
        if pending(&last.result) {
            return say(&format!(
                "Waiting: creating {title:?} is staged and awaits a person's decision; I will not create it again."
            ));
        }
        // No id and no word of a pending write: look whether it is there.
        return call(list, json!({}), n);
    }
    if &last.name == add_label {
        if pending(&last.result) {
            return say(&format!(
                "Waiting: the label {label:?} is staged and awaits a person's decision."
            ));
        }
        return say(&format!("Done: issue {title:?} is labelled {label:?}."));
    }
    call(list, json!({}), n)
}

/// The tool calls of `messages` in order, each with its result.
fn steps(messages: &[Value]) -> Vec<Step> {
    let mut out = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let Some(calls) = m["tool_calls"].as_array() else {
            continue;
        };
        for c in calls {
            let id = &c["id"];
            let result = messages[i + 1..]
                .iter()
                .find(|r| r["role"] == "tool" && &r["tool_call_id"] == id)
                .and_then(|r| r["content"].as_str())
                .unwrap_or_default();
            out.push(Step {
                name: c["function"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                result: result.to_owned(),
            });
        }
    }
    out
}

/// Whether a tool result says the write is staged, not done.
fn pending(result: &str) -> bool {
    result.trim_start().starts_with("PENDING")
}

/// The issue titled `title` in a listing (any JSON holding objects with a
/// `title`), provisional ones included.
fn find(result: &str, title: &str) -> Option<Value> {
    fn walk(v: &Value, title: &str) -> Option<Value> {
        match v {
            Value::Object(o) if o.get("title").and_then(Value::as_str) == Some(title) => {
                Some(v.clone())
            }
            Value::Object(o) => o.values().find_map(|v| walk(v, title)),
            Value::Array(a) => a.iter().find_map(|v| walk(v, title)),
            _ => None,
        }
    }
    walk(&serde_json::from_str(result).ok()?, title)
}

fn labelled(issue: &Value, label: &str) -> bool {
    issue["labels"]
        .as_array()
        .is_some_and(|l| l.iter().any(|x| x.as_str() == Some(label)))
}

/// The id a create's result names: the created issue's, or a simulated
/// (provisional) one after `PENDING ... {json}`.
fn created_id(result: &str) -> Option<Value> {
    let json = match result.find('{') {
        Some(at) if pending(result) => &result[at..],
        _ => result,
    };
    let v: Value = serde_json::from_str(json.trim()).ok()?;
    v.get("id").filter(|id| id.is_u64()).cloned()
}

fn say(text: &str) -> Value {
    json!({"role": "assistant", "content": text})
}

fn call(name: &str, arguments: Value, n: usize) -> Value {
    json!({
        "role": "assistant",
        "content": null,
        "tool_calls": [{
            "id": format!("call_{n}"),
            "type": "function",
            "function": {"name": name, "arguments": arguments.to_string()},
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> Tools {
        Tools::offered(Some(&json!([
            {"type": "function", "function": {"name": "ISSUES__listIssues"}},
            {"type": "function", "function": {"name": "ISSUES__createIssue"}},
            {"type": "function", "function": {"name": "ISSUES__addLabel"}},
        ])))
    }

    /// The conversation after `results`, each the answer to the policy's
    /// own next call.
    fn after(results: &[&str]) -> Value {
        let mut messages = vec![json!({"role": "user", "content": "ensure Crash | bug"})];
        for r in results {
            let next = policy(&messages, &tools());
            let id = next["tool_calls"][0]["id"].clone();
            messages.push(next);
            messages.push(json!({"role": "tool", "tool_call_id": id, "content": r}));
        }
        policy(&messages, &tools())
    }

    fn called(m: &Value) -> &str {
        m["tool_calls"][0]["function"]["name"]
            .as_str()
            .unwrap_or("(none)")
    }

    #[test]
    fn it_lists_creates_and_labels() {
        assert_eq!(called(&after(&[])), "ISSUES__listIssues");
        assert_eq!(called(&after(&["[]"])), "ISSUES__createIssue");
        let created = after(&["[]", r#"{"id": 7, "title": "Crash", "labels": []}"#]);
        assert_eq!(called(&created), "ISSUES__addLabel");
        assert_eq!(
            created["tool_calls"][0]["function"]["arguments"],
            r#"{"id":7,"label":"bug"}"#
        );
    }

    #[test]
    fn a_hidden_pending_write_makes_it_create_twice_and_an_honest_one_makes_it_wait() {
        // The naive harness answers `{}`: it looks, finds nothing, creates again.
        assert_eq!(called(&after(&["[]", "{}"])), "ISSUES__listIssues");
        assert_eq!(called(&after(&["[]", "{}", "[]"])), "ISSUES__createIssue");
        let gave_up = after(&["[]", "{}", "[]", "{}", "[]"]);
        assert!(
            gave_up["content"]
                .as_str()
                .unwrap()
                .contains("could not create")
        );
        // Told it is pending, it waits.
        let waits = after(&["[]", "PENDING: staged as action #4; nothing has been sent."]);
        assert!(waits["content"].as_str().unwrap().starts_with("Waiting"));
        // Told the simulated result, it labels the provisional issue.
        let simulated = after(&[
            "[]",
            r#"PENDING: staged as action #4. Provisional result: {"id": 3, "title": "Crash"}"#,
        ]);
        assert_eq!(called(&simulated), "ISSUES__addLabel");
    }

    #[test]
    fn streamed_pieces_never_split_a_character() {
        assert_eq!(pieces("héllo wörld!"), vec!["héllo w", "örld!"]);
        assert!(pieces("").is_empty());
    }
}
