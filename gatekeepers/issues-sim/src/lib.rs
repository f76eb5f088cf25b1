//! `issues-sim`: the `issues` gatekeeper (the same tracker, the same five
//! tools with the same annotations and schemas, the same requests) that can
//! also *simulate* (SPEC V1). Its manifest says `simulates: true`, so a gadget
//! that stages an action gets a provisional result instead of being told to
//! wait, and its reads show the chat's pending actions as if they had
//! happened:
//!
//! - `simulate(createIssue)` predicts the issue the tracker will create, with
//!   `"provisional": true`; `simulate(addLabel)` predicts the labelled issue.
//!   Nothing is sent but a `GET /issues`. Other tools: no prediction.
//! - `listIssues` and `getIssue` overlay the pending actions the kernel passes
//!   in `invocation.pending` (oldest first): each pending `createIssue` adds
//!   its predicted issue and each pending `addLabel` adds its label, and every
//!   issue so changed is marked `"pending": true`.
//!
//! The id rule (the tracker's ids start at 1, increase and are never reused):
//! the k-th pending `createIssue` (k = 0, 1, ...) is predicted to get id
//! `highest id the service lists now + 1 + k`, and a new one being simulated
//! gets `highest + 1 + (number of pending createIssue actions)`. It is a
//! prediction: an issue created elsewhere before these are applied, or a
//! deleted issue that had the highest id, makes it wrong.

#[path = "../../issues/src/http.rs"]
mod http;

wit_bindgen::generate!({ world: "gatekeeper", path: "../../wit" });

use exports::gatehouse::os::tool::{
    Denial, Guest, Invocation, Manifest, ObserverCheck, ObserverStrategy, Output, Source, Staged,
    ToolError,
};
use gatehouse::os::types::{Annotations, ToolInfo};
use http::{Failure, Reply, base_url, encode_query, one_line};
use serde_json::{Map, Value, json};
use wasi::http::types::Method;

const TOOLS: &str = "listIssues, getIssue, searchIssues, createIssue, addLabel";

struct IssuesSim;

impl Guest for IssuesSim {
    fn describe() -> Manifest {
        let hints = |read_only, destructive, idempotent| Annotations {
            read_only,
            destructive,
            idempotent,
            open_world: None,
        };
        let tool = |name: &str, description: &str, schema: Value, annotations| ToolInfo {
            name: name.to_string(),
            description: description.to_string(),
            input_schema: schema.to_string(),
            annotations,
        };
        let id = json!({"type": "integer", "minimum": 1, "description": "The issue number."});
        Manifest {
            tools: vec![
                tool(
                    "listIssues",
                    "List every issue in the tracker.",
                    json!({"type": "object", "properties": {}, "additionalProperties": false}),
                    hints(Some(true), None, None),
                ),
                tool(
                    "getIssue",
                    "Read one issue by number.",
                    json!({"type": "object", "properties": {"id": id},
                           "required": ["id"], "additionalProperties": false}),
                    hints(Some(true), None, None),
                ),
                tool(
                    "searchIssues",
                    "Find issues whose title contains the text (case-insensitive).",
                    json!({"type": "object",
                           "properties": {"q": {"type": "string", "description": "Text to look for."}},
                           "required": ["q"], "additionalProperties": false}),
                    hints(None, None, None),
                ),
                tool(
                    "createIssue",
                    "Open a new issue.",
                    json!({"type": "object",
                           "properties": {"title": {"type": "string", "minLength": 1},
                                          "body": {"type": "string"}},
                           "required": ["title"], "additionalProperties": false}),
                    hints(Some(false), Some(false), Some(false)),
                ),
                tool(
                    "addLabel",
                    "Add a label to an issue (adding a label it already has changes nothing).",
                    json!({"type": "object",
                           "properties": {"id": id, "label": {"type": "string", "minLength": 1}},
                           "required": ["id", "label"], "additionalProperties": false}),
                    hints(None, Some(false), Some(true)),
                ),
            ],
            simulates: true,
            observers: ObserverStrategy::AccessCheck,
        }
    }

    fn call(invocation: Invocation) -> Result<Output, ToolError> {
        let args = parse_args(&invocation.args)?;
        let base = || base_url(&invocation.settings).map_err(ToolError::Refused);
        let read = |result: Value, id: String, title: String| Output {
            result: result.to_string(),
            sources: vec![Source {
                id,
                title,
                restricted: false,
            }],
        };
        let pending = &invocation.pending;
        match invocation.tool.as_str() {
            "listIssues" => {
                let world = overlay(list(&base()?)?, pending);
                Ok(read(
                    Value::Array(world.issues),
                    "issues".into(),
                    "Issue tracker: all issues".into(),
                ))
            }
            "getIssue" => {
                let id = issue_id(&args)?;
                // Only pending writes need the whole list (for the id rule).
                let result = if pending.iter().any(|s| is_write(&s.tool)) {
                    overlay(list(&base()?)?, pending)
                        .issues
                        .into_iter()
                        .find(|issue| id_of(issue) == Some(id))
                        .ok_or_else(|| {
                            ToolError::UnknownOutcome(format!(
                                "issue #{id} not found, neither at the service nor among \
                                 this chat's pending actions"
                            ))
                        })?
                } else {
                    request(Method::Get, &format!("{}/issues/{id}", base()?), None)?
                };
                Ok(read(
                    result,
                    format!("issue:{id}"),
                    format!("Issue tracker: issue #{id}"),
                ))
            }
            "searchIssues" => {
                let q = text_arg(&args, "q", true)?.unwrap_or_default();
                let url = format!("{}/search?q={}", base()?, encode_query(&q));
                let result = request(Method::Get, &url, None)?;
                Ok(read(
                    result,
                    "issues".into(),
                    format!("Issue tracker: search for {}", one_line(&q, 80)),
                ))
            }
            "createIssue" => {
                let title = required(&args, "title")?;
                let mut payload = Map::new();
                payload.insert("title".into(), Value::String(title));
                if let Some(body) = text_arg(&args, "body", true)? {
                    payload.insert("body".into(), Value::String(body));
                }
                let body = Value::Object(payload).to_string();
                let url = format!("{}/issues", base()?);
                Ok(action(request(Method::Post, &url, Some(body.as_bytes()))?))
            }
            "addLabel" => {
                let id = issue_id(&args)?;
                let label = required(&args, "label")?;
                let body = json!({ "label": label }).to_string();
                let url = format!("{}/issues/{id}/labels", base()?);
                Ok(action(request(Method::Post, &url, Some(body.as_bytes()))?))
            }
            other => Err(ToolError::UnknownTool(format!(
                "unknown tool {}; this gatekeeper offers: {TOOLS}",
                one_line(other, 80)
            ))),
        }
    }

    fn simulate(invocation: Invocation) -> Option<String> {
        if !is_write(&invocation.tool) {
            return None;
        }
        let args = parse_args(&invocation.args).ok()?;
        let service = list(&base_url(&invocation.settings).ok()?).ok()?;
        predict(&invocation.tool, &args, service, &invocation.pending).map(|v| v.to_string())
    }

    fn check_observer(check: ObserverCheck) -> Vec<Denial> {
        let reason = match base_url(&check.settings) {
            Err(e) => Some(format!("could not check access to the tracker: {e}")),
            Ok(base) => match http::send(Method::Get, &format!("{base}/issues"), None) {
                Ok(Reply { status, .. }) if status == 401 || status == 403 => Some(format!(
                    "the account is not allowed to read the tracker (HTTP {status})"
                )),
                Ok(Reply { status, .. }) if (200..300).contains(&status) => None,
                // Fail closed: an access check that could not be made admits nobody.
                Ok(Reply { status, .. }) => Some(format!(
                    "could not check access to the tracker: unexpected HTTP {status}"
                )),
                Err(Failure::NotSent(e) | Failure::Unknown(e)) => {
                    Some(format!("could not check access to the tracker: {e}"))
                }
            },
        };
        let Some(reason) = reason else {
            return Vec::new();
        };
        let mut sources: Vec<String> = check.sources.into_iter().map(|s| s.id).collect();
        if sources.is_empty() {
            sources.push("issues".to_string());
        }
        sources
            .into_iter()
            .map(|source| Denial {
                source,
                reason: reason.clone(),
            })
            .collect()
    }
}

export!(IssuesSim);

// ----- simulation: pure functions over the service's issues -----

/// The tools whose pending calls change what reads show.
fn is_write(tool: &str) -> bool {
    matches!(tool, "createIssue" | "addLabel")
}

/// The tracker as the chat will see it once its pending actions are applied.
struct World {
    issues: Vec<Value>,
    /// The id the next created issue is predicted to get.
    next_id: u64,
}

/// Overlays `pending` (oldest first) on the service's `issues`: a pending
/// `createIssue` appends its predicted issue (ids per the crate's id rule),
/// a pending `addLabel` adds its label; changed issues get `"pending": true`.
fn overlay(mut issues: Vec<Value>, pending: &[Staged]) -> World {
    let highest = issues.iter().filter_map(id_of).max().unwrap_or(0);
    let mut next_id = highest.saturating_add(1);
    for staged in pending {
        // The kernel stages only JSON objects; anything else reads as `{}`.
        let args = parse_args(&staged.args).unwrap_or_default();
        match staged.tool.as_str() {
            "createIssue" => {
                let text = |name| args.get(name).and_then(Value::as_str).unwrap_or_default();
                issues.push(json!({
                    "id": next_id, "title": text("title"), "body": text("body"),
                    "labels": [], "pending": true,
                }));
                next_id = next_id.saturating_add(1);
            }
            "addLabel" => {
                let (Ok(id), Ok(label)) = (issue_id(&args), required(&args, "label")) else {
                    continue;
                };
                if let Some(issue) = issues.iter_mut().find(|i| id_of(i) == Some(id))
                    && add_label(issue, &label)
                    && let Some(fields) = issue.as_object_mut()
                {
                    fields.insert("pending".into(), Value::Bool(true));
                }
            }
            _ => {}
        }
    }
    World { issues, next_id }
}

/// The predicted result of the action `tool`, or `None` when it cannot be
/// predicted (another tool, bad arguments, an issue that will not exist).
fn predict(
    tool: &str,
    args: &Map<String, Value>,
    service: Vec<Value>,
    pending: &[Staged],
) -> Option<Value> {
    let world = overlay(service, pending);
    match tool {
        "createIssue" => Some(json!({
            "id": world.next_id,
            "title": required(args, "title").ok()?,
            "body": text_arg(args, "body", true).ok()?.unwrap_or_default(),
            "labels": [],
            "provisional": true,
        })),
        "addLabel" => {
            let id = issue_id(args).ok()?;
            let label = required(args, "label").ok()?;
            let mut issue = world.issues.into_iter().find(|i| id_of(i) == Some(id))?;
            add_label(&mut issue, &label);
            let fields = issue.as_object_mut()?;
            fields.remove("pending");
            fields.insert("provisional".into(), Value::Bool(true));
            Some(issue)
        }
        _ => None,
    }
}

fn id_of(issue: &Value) -> Option<u64> {
    issue.get("id").and_then(Value::as_u64)
}

/// Adds `label` unless the issue has it; whether the issue changed.
fn add_label(issue: &mut Value, label: &str) -> bool {
    let Some(fields) = issue.as_object_mut() else {
        return false;
    };
    match fields.entry("labels").or_insert_with(|| json!([])) {
        Value::Array(labels) if !labels.iter().any(|l| l == label) => {
            labels.push(Value::String(label.to_string()));
            true
        }
        _ => false,
    }
}

// ----- arguments and requests (as in `issues`) -----

fn action(result: Value) -> Output {
    Output {
        result: result.to_string(),
        sources: Vec::new(),
    }
}

fn parse_args(args: &str) -> Result<Map<String, Value>, ToolError> {
    let text = if args.trim().is_empty() { "{}" } else { args };
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(ToolError::InvalidArgs(format!(
            "arguments must be a JSON object, not {}",
            kind(&other)
        ))),
        Err(e) => Err(ToolError::InvalidArgs(format!(
            "arguments are not valid JSON: {e}"
        ))),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The positive integer `id` (a JSON number, or a string of digits).
fn issue_id(args: &Map<String, Value>) -> Result<u64, ToolError> {
    let id = match args.get("id") {
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.trim().parse::<u64>().ok(),
        Some(_) => None,
        None => return Err(ToolError::InvalidArgs("missing field id".into())),
    };
    match id {
        Some(id) if id > 0 => Ok(id),
        _ => Err(ToolError::InvalidArgs(
            "id must be a positive integer issue number".into(),
        )),
    }
}

/// The non-empty string field `name`.
fn required(args: &Map<String, Value>, name: &str) -> Result<String, ToolError> {
    text_arg(args, name, false)?
        .ok_or_else(|| ToolError::InvalidArgs(format!("missing string field {name}")))
}

/// The string field `name`; `Ok(None)` when absent and `optional`.
fn text_arg(
    args: &Map<String, Value>,
    name: &str,
    optional: bool,
) -> Result<Option<String>, ToolError> {
    match args.get(name) {
        Some(Value::String(s)) if optional || !s.trim().is_empty() => Ok(Some(s.clone())),
        Some(Value::String(_)) => Err(ToolError::InvalidArgs(format!("{name} must not be empty"))),
        Some(Value::Null) | None if optional => Ok(None),
        Some(other) => Err(ToolError::InvalidArgs(format!(
            "{name} must be a string, not {}",
            kind(other)
        ))),
        None => Err(ToolError::InvalidArgs(format!(
            "missing string field {name}"
        ))),
    }
}

/// `GET /issues`: the service's issues.
fn list(base: &str) -> Result<Vec<Value>, ToolError> {
    match request(Method::Get, &format!("{base}/issues"), None)? {
        Value::Array(issues) => Ok(issues),
        other => Err(ToolError::UnknownOutcome(format!(
            "GET {base}/issues: expected a JSON list of issues, got {}",
            kind(&other)
        ))),
    }
}

/// Sends a request and returns the reply's JSON, mapping every failure to
/// the `tool-error` the kernel needs to decide about retries.
fn request(method: Method, url: &str, body: Option<&[u8]>) -> Result<Value, ToolError> {
    let what = format!("{} {url}", http::method_name(&method));
    let reply = http::send(method, url, body).map_err(|failure| match failure {
        Failure::NotSent(e) => ToolError::Refused(format!("the request was not sent: {e}")),
        Failure::Unknown(e) => ToolError::UnknownOutcome(e),
    })?;
    let status = reply.status;
    let text = String::from_utf8_lossy(&reply.body);
    let detail = one_line(&text, 120);
    match status {
        200..=299 => serde_json::from_str(&text).map_err(|e| {
            ToolError::UnknownOutcome(format!(
                "{what}: HTTP {status}, but the reply is not JSON ({e}): {detail}"
            ))
        }),
        401 | 403 => Err(ToolError::Refused(format!(
            "{what}: the service refused the request (HTTP {status}): {detail}"
        ))),
        404 => Err(ToolError::UnknownOutcome(format!(
            "{what}: not found (HTTP 404): {detail}"
        ))),
        _ => Err(ToolError::UnknownOutcome(format!(
            "{what}: unexpected HTTP {status}: {detail}"
        ))),
    }
}

#[cfg(test)]
mod sim_tests {
    use super::*;

    fn staged(tool: &str, args: Value) -> Staged {
        Staged {
            action_id: 0,
            tool: tool.to_string(),
            args: args.to_string(),
        }
    }

    fn object(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    /// Issues 1 and 3 at the service (2 was deleted).
    fn service() -> Vec<Value> {
        vec![
            json!({"id": 1, "title": "Crash", "body": "", "labels": ["bug"]}),
            json!({"id": 3, "title": "Dark mode", "body": "", "labels": []}),
        ]
    }

    #[test]
    fn pending_creates_get_the_next_ids_in_order() {
        let pending = [
            staged("createIssue", json!({"title": "A"})),
            staged("addLabel", json!({"id": 4, "label": "x"})),
            staged("createIssue", json!({"title": "B", "body": "b"})),
        ];
        let world = overlay(service(), &pending);
        assert_eq!(world.next_id, 6);
        let ids: Vec<_> = world.issues.iter().filter_map(id_of).collect();
        assert_eq!(ids, [1, 3, 4, 5]);
        assert_eq!(
            world.issues[2],
            json!({"id": 4, "title": "A", "body": "", "labels": ["x"], "pending": true})
        );
        assert_eq!(world.issues[3]["body"], "b");
        assert_eq!(world.issues[0].get("pending"), None, "untouched");

        let create = object(json!({"title": "C"}));
        assert_eq!(
            predict("createIssue", &create, service(), &pending),
            Some(json!({"id": 6, "title": "C", "body": "", "labels": [], "provisional": true}))
        );
        assert_eq!(
            predict("createIssue", &create, Vec::new(), &[]).map(|v| v["id"].clone()),
            Some(json!(1)),
            "an empty tracker starts at 1"
        );
    }

    #[test]
    fn labels_overlay_only_when_they_change_something() {
        let pending = [
            staged("addLabel", json!({"id": 1, "label": "bug"})),
            staged("addLabel", json!({"id": "3", "label": "ui"})),
            staged("addLabel", json!({"id": 99, "label": "ui"})),
            staged("addLabel", "not an object".into()),
        ];
        let world = overlay(service(), &pending);
        assert_eq!(world.issues[0].get("pending"), None);
        assert_eq!(world.issues[1]["labels"], json!(["ui"]));
        assert_eq!(world.issues[1]["pending"], true);
        assert_eq!(world.issues.len(), 2);
    }

    #[test]
    fn add_label_predicts_the_labelled_issue() {
        let pending = [staged("createIssue", json!({"title": "New"}))];
        let args = object(json!({"id": 4, "label": "p1"}));
        assert_eq!(
            predict("addLabel", &args, service(), &pending),
            Some(
                json!({"id": 4, "title": "New", "body": "", "labels": ["p1"], "provisional": true})
            )
        );
        let args = object(json!({"id": 1, "label": "p1"}));
        assert_eq!(
            predict("addLabel", &args, service(), &[]).map(|v| v["labels"].clone()),
            Some(json!(["bug", "p1"]))
        );
        let missing = object(json!({"id": 2, "label": "p1"}));
        assert_eq!(predict("addLabel", &missing, service(), &pending), None);
        let no_title = object(json!({"body": "x"}));
        assert_eq!(predict("createIssue", &no_title, service(), &[]), None);
        assert_eq!(predict("searchIssues", &Map::new(), service(), &[]), None);
    }
}
