//! `issues`: the example gatekeeper. It fronts the issue-tracker HTTP service
//! (list, get, search, create, label) over `wasi:http`; the kernel adds the
//! credential and limits where its requests may go.

mod http;

wit_bindgen::generate!({ world: "gatekeeper", path: "../../wit" });

use exports::gatehouse::os::tool::{
    Denial, Guest, Invocation, Manifest, ObserverCheck, ObserverStrategy, Output, Source, ToolError,
};
use gatehouse::os::types::{Annotations, ToolInfo};
use http::{Failure, Reply, base_url, encode_query, one_line};
use serde_json::{Map, Value, json};
use wasi::http::types::Method;

const TOOLS: &str = "listIssues, getIssue, searchIssues, createIssue, addLabel";

struct Issues;

impl Guest for Issues {
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
            simulates: false,
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
        match invocation.tool.as_str() {
            "listIssues" => {
                let result = request(Method::Get, &format!("{}/issues", base()?), None)?;
                Ok(read(
                    result,
                    "issues".into(),
                    "Issue tracker: all issues".into(),
                ))
            }
            "getIssue" => {
                let id = issue_id(&args)?;
                let result = request(Method::Get, &format!("{}/issues/{id}", base()?), None)?;
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
                let title = text_arg(&args, "title", false)?
                    .ok_or_else(|| ToolError::InvalidArgs("missing string field title".into()))?;
                let mut payload = Map::new();
                payload.insert("title".into(), Value::String(title));
                if let Some(body) = text_arg(&args, "body", true)? {
                    payload.insert("body".into(), Value::String(body));
                }
                let body = Value::Object(payload).to_string();
                let url = format!("{}/issues", base()?);
                let result = request(Method::Post, &url, Some(body.as_bytes()))?;
                Ok(action(result))
            }
            "addLabel" => {
                let id = issue_id(&args)?;
                let label = text_arg(&args, "label", false)?
                    .ok_or_else(|| ToolError::InvalidArgs("missing string field label".into()))?;
                let body = json!({ "label": label }).to_string();
                let url = format!("{}/issues/{id}/labels", base()?);
                let result = request(Method::Post, &url, Some(body.as_bytes()))?;
                Ok(action(result))
            }
            other => Err(ToolError::UnknownTool(format!(
                "unknown tool {}; this gatekeeper offers: {TOOLS}",
                one_line(other, 80)
            ))),
        }
    }

    fn simulate(_invocation: Invocation) -> Option<String> {
        None
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

export!(Issues);

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
    match status {
        200..=299 => serde_json::from_str(&text).map_err(|e| {
            ToolError::UnknownOutcome(format!(
                "{what}: HTTP {status}, but the reply is not JSON ({e}): {}",
                one_line(&text, 120)
            ))
        }),
        401 | 403 => Err(ToolError::Refused(format!(
            "{what}: the service refused the request (HTTP {status}): {}",
            one_line(&text, 120)
        ))),
        404 => Err(ToolError::UnknownOutcome(format!(
            "{what}: not found (HTTP 404): {}",
            one_line(&text, 120)
        ))),
        _ => Err(ToolError::UnknownOutcome(format!(
            "{what}: unexpected HTTP {status}: {}",
            one_line(&text, 120)
        ))),
    }
}
