//! `model`: a language model behind an OpenAI-compatible chat completions
//! API (any hosted or local endpoint that speaks it), as a gatekeeper. Its
//! one tool, `complete`, sends a conversation (and the tool definitions the
//! caller offers the model) and returns the model's next message: text, or
//! the tool calls it asks for. Those calls are not made here: the caller
//! (the `assistant` gadget) makes each one through the kernel, so every
//! tool call a model asks for passes the same gate as any other call.
//!
//! A completion changes nothing in the world, so `complete` is a read. But
//! it sends the chat's content to the endpoint: it is egress. It declares
//! `open-world: false` only when the operator said the endpoint is local
//! (`--set locality=local`), and the kernel believes that only from a
//! vetted instance (SPEC P9): so in a locked-down chat (O3) a completion is
//! refused unless the operator marked the endpoint local *and* vetted it.
//!
//! Settings (`gatekeeper add model.wasm --set KEY=VALUE`):
//! - `model` (required): the model's name, sent with every request;
//! - `base-url`: the endpoint's base (default: the first allowed host);
//!   requests go to `BASE/v1/chat/completions`, or `BASE/chat/completions`
//!   when the base already ends in `/v1`;
//! - `stream`: `true` to ask for server-sent events and put the message
//!   back together (default `false`);
//! - `locality`: `local` or `remote` (default `remote`).
//!
//! The credential (the operator's `--secret`, or a person's own account)
//! is added by the kernel as `Authorization: Bearer ...`, as OpenAI-style
//! endpoints expect; this component never sees it.

use gatehouse_gatekeeper::http::{self, Request, Response, base_url};
use gatehouse_gatekeeper::manifest::{Manifest, ObserverStrategy, tool};
use gatehouse_gatekeeper::text::one_line;
use gatehouse_gatekeeper::{
    Args, Gatekeeper, Invocation, ObserverCheck, ObserverVerdict, Output, Source, ToolError,
};
use serde_json::{Map, Value, json};

/// The most of a streamed answer read, in bytes.
const MAX_STREAM: usize = 4 << 20;

struct ModelGatekeeper;

impl Gatekeeper for ModelGatekeeper {
    fn describe(settings: &[(String, String)]) -> Result<Manifest, ToolError> {
        let config = Config::of(settings)?;
        Ok(manifest(&config))
    }

    fn call(invocation: Invocation) -> Result<Output, ToolError> {
        if invocation.tool != "complete" {
            return Err(ToolError::unknown_tool(&invocation.tool, "complete"));
        }
        let config = Config::of(&invocation.settings)?;
        let args = Args::parse(&invocation.args)?;
        let body = request_body(&config, args.as_map())?;
        let url = config.url(&invocation.settings)?;
        let answer = if config.stream {
            streamed(&url, &body)?
        } else {
            whole(Request::post(&url).json(&body).send()?)?
        };
        Ok(Output::read(
            answer,
            Source::public(
                format!("model:{}", config.model),
                format!("Language model {}", one_line(&config.model, 80)),
            ),
        ))
    }

    fn check_observer(_check: ObserverCheck) -> ObserverVerdict {
        // What a model answers is not data of the service's to withhold.
        ObserverVerdict::admit()
    }
}

gatehouse_gatekeeper::export!(ModelGatekeeper);

/// What the operator configured.
struct Config {
    model: String,
    stream: bool,
    local: bool,
}

impl Config {
    fn of(settings: &[(String, String)]) -> Result<Config, ToolError> {
        let model = http::setting(settings, "model")
            .ok_or_else(|| {
                ToolError::Refused(
                    "no model named: add the gatekeeper with --set model=NAME (the endpoint's model name)"
                        .into(),
                )
            })?
            .to_owned();
        let flag = |name: &str, yes: &str, no: &str| match http::setting(settings, name) {
            None => Ok(false),
            Some(v) if v == yes => Ok(true),
            Some(v) if v == no => Ok(false),
            Some(v) => Err(ToolError::Refused(format!(
                "--set {name}={} is not understood: say {name}={yes} or {name}={no}",
                one_line(v, 40)
            ))),
        };
        Ok(Config {
            model,
            stream: flag("stream", "true", "false")?,
            local: flag("locality", "local", "remote")?,
        })
    }

    fn url(&self, settings: &[(String, String)]) -> Result<String, ToolError> {
        let base = base_url(settings).map_err(ToolError::Refused)?;
        Ok(if base.ends_with("/v1") {
            format!("{base}/chat/completions")
        } else {
            format!("{base}/v1/chat/completions")
        })
    }
}

fn manifest(config: &Config) -> Manifest {
    let message = json!({
        "type": "object",
        "properties": {
            "role": {"enum": ["system", "user", "assistant", "tool"]},
            "content": {"type": ["string", "null"]},
            "tool_calls": {"type": "array"},
            "tool_call_id": {"type": "string"},
            "name": {"type": "string"}
        },
        "required": ["role"]
    });
    let where_to = if config.local {
        "an endpoint the operator marked local"
    } else {
        "a remote endpoint"
    };
    Manifest::builder()
        .tool(
            tool(
                "complete",
                &format!(
                    "Ask the language model {} ({where_to}) for the next assistant message of a conversation (OpenAI-compatible chat completions). Everything in `messages` is sent to the model's endpoint. Returns {{\"message\", \"finish_reason\", \"model\"}}; the message holds the text or the tool calls the model asks for, which this tool does not make.",
                    one_line(&config.model, 80)
                ),
                json!({
                    "type": "object",
                    "properties": {
                        "messages": {"type": "array", "items": message, "minItems": 1},
                        "tools": {"type": "array", "items": {"type": "object"}},
                        "tool_choice": {},
                        "temperature": {"type": "number", "minimum": 0, "maximum": 2},
                        "max_tokens": {"type": "integer", "minimum": 1}
                    },
                    "required": ["messages"],
                    "additionalProperties": false
                }),
            )
            .read_only()
            // Believed only from a vetted instance (SPEC P9).
            .open_world(!config.local),
        )
        .observers(ObserverStrategy::NoCheck)
        .build()
}

/// The request as the endpoint wants it: the caller's conversation and
/// tools, the configured model, and whether to stream.
fn request_body(config: &Config, args: &Map<String, Value>) -> Result<Value, ToolError> {
    let mut body = Map::new();
    for field in [
        "messages",
        "tools",
        "tool_choice",
        "temperature",
        "max_tokens",
    ] {
        if let Some(v) = args.get(field) {
            body.insert(field.to_owned(), v.clone());
        }
    }
    if !body.contains_key("messages") {
        return Err(ToolError::InvalidArgs(
            "missing array field messages".into(),
        ));
    }
    body.insert("model".into(), json!(config.model));
    body.insert("stream".into(), json!(config.stream));
    Ok(Value::Object(body))
}

/// A failed answer, said in one line: whether the endpoint refused the
/// request (nothing to undo either way: a completion changes nothing).
fn failed(status: u16, text: &str) -> ToolError {
    let detail = serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| {
            v["error"]["message"]
                .as_str()
                .or(v["error"].as_str())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| text.to_owned());
    ToolError::Refused(format!(
        "the model endpoint answered HTTP {status}: {}",
        one_line(&detail, 200)
    ))
}

/// The answer of a plain (not streamed) request.
fn whole(reply: Response) -> Result<Value, ToolError> {
    let text = reply.text();
    if reply.status >= 300 {
        return Err(failed(reply.status, &text));
    }
    let v: Value = serde_json::from_str(&text).map_err(|e| {
        ToolError::UnknownOutcome(format!(
            "the model endpoint's answer is not JSON ({e}): {}",
            one_line(&text, 120)
        ))
    })?;
    let choice = &v["choices"][0];
    if !choice["message"].is_object() {
        return Err(ToolError::UnknownOutcome(format!(
            "the model endpoint's answer holds no message: {}",
            one_line(&text, 120)
        )));
    }
    Ok(json!({
        "message": choice["message"],
        "finish_reason": choice["finish_reason"],
        "model": v["model"],
    }))
}

/// A streamed answer, put back together: the text's pieces in order, and
/// each tool call's id, name and arguments by its index.
fn streamed(url: &str, body: &Value) -> Result<Value, ToolError> {
    let mut incoming = Request::post(url)
        .header("accept", "text/event-stream")
        .json(body)
        .open()?;
    let status = incoming.status();
    if status >= 300 {
        let mut text = Vec::new();
        while let Ok(Some(chunk)) = incoming.read() {
            text.extend_from_slice(&chunk);
            if text.len() > 64 * 1024 {
                break;
            }
        }
        return Err(failed(status, &String::from_utf8_lossy(&text)));
    }
    let mut message = Assembled::default();
    for data in incoming.events(MAX_STREAM) {
        let data = data.map_err(ToolError::UnknownOutcome)?;
        if data.trim() == "[DONE]" {
            return Ok(message.finish());
        }
        let chunk: Value = serde_json::from_str(&data).map_err(|e| {
            ToolError::UnknownOutcome(format!(
                "an event of the model's stream is not JSON ({e}): {}",
                one_line(&data, 120)
            ))
        })?;
        if let Some(error) = chunk.get("error") {
            return Err(ToolError::Refused(format!(
                "the model endpoint failed mid-stream: {}",
                one_line(&error.to_string(), 200)
            )));
        }
        message.add(&chunk);
    }
    // A stream cut before `[DONE]` may have lost the end of the message.
    Err(ToolError::UnknownOutcome(
        "the model's stream ended before [DONE]; its answer may be incomplete".into(),
    ))
}

/// A message being put back together from streamed deltas.
#[derive(Default)]
struct Assembled {
    content: Option<String>,
    calls: Vec<(Value, String, String)>,
    finish: Value,
    model: Value,
}

impl Assembled {
    fn add(&mut self, chunk: &Value) {
        if let Some(m) = chunk.get("model") {
            self.model = m.clone();
        }
        let choice = &chunk["choices"][0];
        if !choice["finish_reason"].is_null() {
            self.finish = choice["finish_reason"].clone();
        }
        let delta = &choice["delta"];
        if let Some(text) = delta["content"].as_str() {
            self.content.get_or_insert_with(String::new).push_str(text);
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().unwrap_or(0) as usize;
            // An index far beyond the calls so far is a broken stream:
            // never grow the list to it.
            if index > self.calls.len() {
                continue;
            }
            if index == self.calls.len() {
                self.calls.push((Value::Null, String::new(), String::new()));
            }
            let slot = &mut self.calls[index];
            if !call["id"].is_null() {
                slot.0 = call["id"].clone();
            }
            if let Some(name) = call["function"]["name"].as_str() {
                slot.1.push_str(name);
            }
            if let Some(arguments) = call["function"]["arguments"].as_str() {
                slot.2.push_str(arguments);
            }
        }
    }

    fn finish(self) -> Value {
        let mut message = json!({"role": "assistant", "content": self.content});
        if !self.calls.is_empty() {
            message["tool_calls"] = self
                .calls
                .into_iter()
                .map(|(id, name, arguments)| {
                    json!({"id": id, "type": "function",
                           "function": {"name": name, "arguments": arguments}})
                })
                .collect();
        }
        json!({"message": message, "finish_reason": self.finish, "model": self.model})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn only_the_operators_word_makes_the_endpoint_closed_world() {
        let ann = |pairs: &[(&str, &str)]| {
            let config = Config::of(&settings(pairs)).unwrap_or_else(|_| panic!("configured"));
            manifest(&config).tools[0].annotations.open_world
        };
        assert_eq!(ann(&[("model", "m")]), Some(true));
        assert_eq!(ann(&[("model", "m"), ("locality", "remote")]), Some(true));
        assert_eq!(ann(&[("model", "m"), ("locality", "local")]), Some(false));
        assert!(Config::of(&settings(&[("model", "m"), ("locality", "near")])).is_err());
        assert!(Config::of(&settings(&[])).is_err(), "a model must be named");
    }

    #[test]
    fn the_url_adds_the_completions_path_once() {
        let config =
            Config::of(&settings(&[("model", "m")])).unwrap_or_else(|_| panic!("configured"));
        let url = |base: &str| {
            config
                .url(&settings(&[("base-url", base)]))
                .unwrap_or_else(|_| panic!("a url"))
        };
        assert_eq!(url("http://h:1"), "http://h:1/v1/chat/completions");
        assert_eq!(url("https://h/v1/"), "https://h/v1/chat/completions");
    }

    #[test]
    fn streamed_deltas_are_put_back_together_by_index() {
        let mut m = Assembled::default();
        for c in [
            json!({"model": "x", "choices": [{"delta": {"role": "assistant"}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "a", "function": {"name": "K__t", "arguments": ""}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"id\""}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"index": 9, "function": {"arguments": "x"}}]}}]}),
            json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}),
        ] {
            m.add(&c);
        }
        let done = m.finish();
        assert_eq!(done["finish_reason"], "tool_calls");
        assert_eq!(done["model"], "x");
        let calls = done["message"]["tool_calls"].as_array().expect("calls");
        assert_eq!(calls.len(), 1, "a stray index is ignored");
        assert_eq!(calls[0]["function"]["arguments"], "{\"id\": 1}");
        assert_eq!(calls[0]["id"], "a");
    }
}
