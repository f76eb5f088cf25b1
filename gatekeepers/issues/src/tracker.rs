//! The issue tracker as a gatekeeper sees it: the six tools (names,
//! descriptions, schemas, annotations), their arguments, the requests they
//! send and how the tracker's replies map to outputs and `tool-error`s, and
//! the observer access check.
//!
//! Revert: `removeLabel` undoes `addLabel` (same arguments), so `addLabel`
//! declares `reverted-by: removeLabel`. Idempotency: the tracker honours an
//! `Idempotency-Key` header on every write (a repeated key gets the first
//! answer and changes nothing), so the writes declare
//! `honours-idempotency-key` and send the kernel's key. An instance added
//! with `--set idempotency-key=ignored` (a tracker that does not honour
//! keys) declares neither and sends none.
//!
//! `issues` and `issues-sim` both include this file (`issues-sim` with
//! `#[path]`), next to `kit.rs` and `http.rs`. They differ only in how reads
//! of issues are answered, which each passes to [`call`].

use serde_json::{Map, Value, json};
use wasi::http::types::Method;

use crate::exports::gatehouse::os::tool::{
    Denial, Invocation, Manifest, ObserverCheck, ObserverStrategy, Output, ToolError, Trigger,
    TriggerKind,
};
use crate::http::{self, Failure, Reply, base_url, encode_query, one_line};
use crate::kit::{
    action, deny_all, hints, kind, parse_args_naming_kind, read, request_error, source, tool,
    unknown_tool,
};

pub const TOOLS: &str = "listIssues, getIssue, searchIssues, createIssue, addLabel, removeLabel";

/// Whether the instance's service honours idempotency keys: yes, unless
/// the operator set `idempotency-key=ignored` (a tracker that does not).
pub fn honours_keys(settings: &[(String, String)]) -> bool {
    http::setting(settings, "idempotency-key") != Some("ignored")
}

/// The manifest of a tracker gatekeeper configured with `settings`;
/// `simulates` says whether it can.
pub fn manifest(simulates: bool, settings: &[(String, String)]) -> Manifest {
    let id = json!({"type": "integer", "minimum": 1, "description": "The issue number."});
    let honours = honours_keys(settings);
    let mut tools = vec![
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
        // Removing takes something away: destructive, honestly. Doing
        // it twice is the same as once: idempotent.
        tool(
            "removeLabel",
            "Remove a label from an issue (removing a label it does not have changes nothing).",
            json!({"type": "object",
                       "properties": {"id": id, "label": {"type": "string", "minLength": 1}},
                       "required": ["id", "label"], "additionalProperties": false}),
            hints(None, Some(true), Some(true)),
        ),
    ];
    for t in &mut tools {
        if t.name == "addLabel" {
            t.reverted_by = Some("removeLabel".to_string());
        }
        t.honours_idempotency_key = honours && is_write(&t.name);
    }
    Manifest {
        tools,
        simulates,
        observers: ObserverStrategy::AccessCheck,
        triggers: vec![
            Trigger {
                name: "issueOpened".into(),
                description: "The tracker delivers {\"event\": \"issueOpened\", \"issue\": {...}} when an issue is created (configure its webhook with the hook's URL and secret).".into(),
                kind: TriggerKind::Webhook,
            },
            Trigger {
                name: "hourly".into(),
                description: "Every hour: look over the tracker (the bound gadget decides what to do).".into(),
                kind: TriggerKind::Schedule(3600),
            },
        ],
    }
}

/// The tools that change the tracker: the requests that carry the key.
fn is_write(tool: &str) -> bool {
    matches!(tool, "createIssue" | "addLabel" | "removeLabel")
}

/// Runs a call. `list(base)` answers `listIssues` and `get(base, id)`
/// answers `getIssue`, `base` being the tracker's base url; every other
/// tool is the same for every tracker gatekeeper.
pub fn call(
    invocation: &Invocation,
    list: impl FnOnce(&str) -> Result<Value, ToolError>,
    get: impl FnOnce(&str, u64) -> Result<Value, ToolError>,
) -> Result<Output, ToolError> {
    let args = parse_args_naming_kind(&invocation.args)?;
    let base = || base_url(&invocation.settings).map_err(ToolError::Refused);
    // The kernel's key for this action, passed on where the service
    // honours it: a repeated write then takes effect once.
    let key = invocation
        .idempotency_key
        .as_deref()
        .filter(|_| honours_keys(&invocation.settings) && is_write(&invocation.tool));
    let write = |method, url: &str, body: &[u8]| request_keyed(method, url, Some(body), key);
    match invocation.tool.as_str() {
        "listIssues" => Ok(read(
            list(&base()?)?,
            source("issues", "Issue tracker: all issues"),
        )),
        "getIssue" => {
            let id = issue_id(&args)?;
            Ok(read(
                get(&base()?, id)?,
                source(format!("issue:{id}"), format!("Issue tracker: issue #{id}")),
            ))
        }
        "searchIssues" => {
            let q = text_arg(&args, "q", true)?.unwrap_or_default();
            let url = format!("{}/search?q={}", base()?, encode_query(&q));
            let result = request(Method::Get, &url, None)?;
            Ok(read(
                result,
                source(
                    "issues",
                    format!("Issue tracker: search for {}", one_line(&q, 80)),
                ),
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
            Ok(action(write(Method::Post, &url, body.as_bytes())?))
        }
        "addLabel" => {
            let id = issue_id(&args)?;
            let label = required(&args, "label")?;
            let body = json!({ "label": label }).to_string();
            let url = format!("{}/issues/{id}/labels", base()?);
            Ok(action(write(Method::Post, &url, body.as_bytes())?))
        }
        "removeLabel" => {
            let id = issue_id(&args)?;
            let label = required(&args, "label")?;
            let url = format!("{}/issues/{id}/labels/{}", base()?, encode_query(&label));
            Ok(action(request_keyed(Method::Delete, &url, None, key)?))
        }
        other => Err(unknown_tool(other, TOOLS)),
    }
}

/// `GET /issues`: the service's answer, as is.
pub fn fetch_list(base: &str) -> Result<Value, ToolError> {
    request(Method::Get, &format!("{base}/issues"), None)
}

/// `GET /issues/{id}`: the service's answer, as is.
pub fn fetch_issue(base: &str, id: u64) -> Result<Value, ToolError> {
    request(Method::Get, &format!("{base}/issues/{id}"), None)
}

/// Denies every source the account may not read: all of them unless it may
/// list the tracker's issues. Fails closed: an access check that could not
/// be made admits nobody.
pub fn check_access(check: ObserverCheck) -> Vec<Denial> {
    let reason = match base_url(&check.settings) {
        Err(e) => Some(format!("could not check access to the tracker: {e}")),
        Ok(base) => match http::send(Method::Get, &format!("{base}/issues"), None) {
            Ok(Reply { status, .. }) if status == 401 || status == 403 => Some(format!(
                "the account is not allowed to read the tracker (HTTP {status})"
            )),
            Ok(Reply { status, .. }) if (200..300).contains(&status) => None,
            Ok(Reply { status, .. }) => Some(format!(
                "could not check access to the tracker: unexpected HTTP {status}"
            )),
            Err(Failure::NotSent(e) | Failure::Unknown(e)) => {
                Some(format!("could not check access to the tracker: {e}"))
            }
        },
    };
    match reason {
        Some(reason) => deny_all(check.sources, "issues", &reason),
        None => Vec::new(),
    }
}

/// The positive integer `id` (a JSON number, or a string of digits).
pub fn issue_id(args: &Map<String, Value>) -> Result<u64, ToolError> {
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
pub fn required(args: &Map<String, Value>, name: &str) -> Result<String, ToolError> {
    text_arg(args, name, false)?
        .ok_or_else(|| ToolError::InvalidArgs(format!("missing string field {name}")))
}

/// The string field `name`; `Ok(None)` when absent and `optional`.
pub fn text_arg(
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
    request_keyed(method, url, body, None)
}

/// [`request`], with the `Idempotency-Key` header when there is a key.
fn request_keyed(
    method: Method,
    url: &str,
    body: Option<&[u8]>,
    key: Option<&str>,
) -> Result<Value, ToolError> {
    let what = format!("{} {url}", http::method_name(&method));
    let headers: Vec<(&str, &str)> = key.map(|k| ("idempotency-key", k)).into_iter().collect();
    let reply = http::send_with(method, url, body, &headers).map_err(request_error)?;
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
