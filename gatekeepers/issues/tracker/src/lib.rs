//! The issue tracker as a gatekeeper sees it: the six tools (names,
//! descriptions, schemas, annotations), their arguments, the requests they
//! send and how the tracker's replies map to outputs and `tool-error`s, and
//! the observer access check.
//!
//! Revert: `removeLabel` undoes `addLabel` (same arguments), so `addLabel`
//! declares `reverted-by: removeLabel`. Idempotency: a tracker with this API
//! may or may not honour an `Idempotency-Key` header on its writes, and
//! this gatekeeper cannot know which one it fronts. So it declares
//! `honours-idempotency-key` (and sends the kernel's key) only when the
//! operator said so for the instance (`--set idempotency-key=honoured`);
//! by default it declares none and sends none, and an interrupted send is
//! failed, never re-sent (SPEC P3, P9).
//!
//! `issues` and `issues-sim` both link this library, written on the
//! gatekeeper SDK. They differ only in how reads of issues are answered,
//! which each passes to [`call`]; this crate may not know which one runs.

use gatehouse_gatekeeper::http::{self, HttpError, Request, base_url, encode_query};
use gatehouse_gatekeeper::manifest::{Manifest, ObserverStrategy, tool};
use gatehouse_gatekeeper::text::{kind, one_line};
use gatehouse_gatekeeper::{Args, Denial, Invocation, ObserverCheck, Output, Source, ToolError};
use serde_json::{Map, Value, json};

pub const TOOLS: &str = "listIssues, getIssue, searchIssues, createIssue, addLabel, removeLabel";

/// Whether the instance's service honours idempotency keys: only when the
/// operator stated it (`idempotency-key=honoured`, or `honored`); the
/// kernel reads the same setting as the operator's word (SPEC P9).
pub fn honours_keys(settings: &[(String, String)]) -> bool {
    matches!(
        http::setting(settings, "idempotency-key"),
        Some("honoured" | "honored")
    )
}

/// The manifest of a tracker gatekeeper configured with `settings`;
/// `simulates` says whether it can.
pub fn manifest(simulates: bool, settings: &[(String, String)]) -> Manifest {
    let id = json!({"type": "integer", "minimum": 1, "description": "The issue number."});
    let label = json!({"type": "object",
                       "properties": {"id": id, "label": {"type": "string", "minLength": 1}},
                       "required": ["id", "label"], "additionalProperties": false});
    // The writes carry the kernel's key when the service honours it.
    let keyed = honours_keys(settings);
    let mut manifest = Manifest::builder()
        .tool(
            tool(
                "listIssues",
                "List every issue in the tracker.",
                json!({"type": "object", "properties": {}, "additionalProperties": false}),
            )
            .read_only(),
        )
        .tool(
            tool(
                "getIssue",
                "Read one issue by number.",
                json!({"type": "object", "properties": {"id": id},
                       "required": ["id"], "additionalProperties": false}),
            )
            .read_only(),
        )
        // No hint at all: the kernel treats it as an action (SPEC K2).
        .tool(tool(
            "searchIssues",
            "Find issues whose title contains the text (case-insensitive).",
            json!({"type": "object",
                   "properties": {"q": {"type": "string", "description": "Text to look for."}},
                   "required": ["q"], "additionalProperties": false}),
        ))
        .tool(
            tool(
                "createIssue",
                "Open a new issue.",
                json!({"type": "object",
                       "properties": {"title": {"type": "string", "minLength": 1},
                                      "body": {"type": "string"}},
                       "required": ["title"], "additionalProperties": false}),
            )
            .writes()
            .destructive(false)
            .idempotent(false)
            .honours_idempotency_key(keyed),
        )
        .tool(
            tool(
                "addLabel",
                "Add a label to an issue (adding a label it already has changes nothing).",
                label.clone(),
            )
            .destructive(false)
            .idempotent(true)
            .reverted_by("removeLabel")
            .honours_idempotency_key(keyed),
        )
        // Removing takes something away: destructive, honestly. Doing
        // it twice is the same as once: idempotent.
        .tool(
            tool(
                "removeLabel",
                "Remove a label from an issue (removing a label it does not have changes nothing).",
                label,
            )
            .destructive(true)
            .idempotent(true)
            .honours_idempotency_key(keyed),
        )
        .observers(ObserverStrategy::AccessCheck)
        .webhook(
            "issueOpened",
            "The tracker delivers {\"event\": \"issueOpened\", \"issue\": {...}} when an issue is created (configure its webhook with the hook's URL and secret).",
        )
        .schedule(
            "hourly",
            "Every hour: look over the tracker (the bound gadget decides what to do).",
            3600,
        );
    if simulates {
        manifest = manifest.simulates();
    }
    manifest.build()
}

/// The tools that change the tracker: the requests that carry the key.
pub fn is_write(tool: &str) -> bool {
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
    let args = Args::parse(&invocation.args)?;
    let args = args.as_map();
    let base = || base_url(&invocation.settings).map_err(ToolError::Refused);
    // The kernel's key for this action, passed on where the service
    // honours it: a repeated write then takes effect once.
    let key = invocation
        .idempotency_key
        .as_deref()
        .filter(|_| honours_keys(&invocation.settings) && is_write(&invocation.tool));
    let write = |request: Request| json_reply(request.idempotency_key(key));
    match invocation.tool.as_str() {
        "listIssues" => Ok(Output::read(
            list(&base()?)?,
            Source::public("issues", "Issue tracker: all issues"),
        )),
        "getIssue" => {
            let id = issue_id(args)?;
            Ok(Output::read(
                get(&base()?, id)?,
                Source::public(format!("issue:{id}"), format!("Issue tracker: issue #{id}")),
            ))
        }
        "searchIssues" => {
            let q = text_arg(args, "q", true)?.unwrap_or_default();
            let url = format!("{}/search?q={}", base()?, encode_query(&q));
            let result = json_reply(Request::get(url))?;
            Ok(Output::read(
                result,
                Source::public(
                    "issues",
                    format!("Issue tracker: search for {}", one_line(&q, 80)),
                ),
            ))
        }
        "createIssue" => {
            let title = required(args, "title")?;
            let mut payload = Map::new();
            payload.insert("title".into(), Value::String(title));
            if let Some(body) = text_arg(args, "body", true)? {
                payload.insert("body".into(), Value::String(body));
            }
            let url = format!("{}/issues", base()?);
            Ok(Output::action(write(
                Request::post(url).json(&Value::Object(payload)),
            )?))
        }
        "addLabel" => {
            let id = issue_id(args)?;
            let label = required(args, "label")?;
            let url = format!("{}/issues/{id}/labels", base()?);
            Ok(Output::action(write(
                Request::post(url).json(&json!({ "label": label })),
            )?))
        }
        "removeLabel" => {
            let id = issue_id(args)?;
            let label = required(args, "label")?;
            let url = format!("{}/issues/{id}/labels/{}", base()?, encode_query(&label));
            Ok(Output::action(write(Request::delete(url))?))
        }
        other => Err(ToolError::unknown_tool(other, TOOLS)),
    }
}

/// `GET /issues`: the service's answer, as is.
pub fn fetch_list(base: &str) -> Result<Value, ToolError> {
    json_reply(Request::get(format!("{base}/issues")))
}

/// `GET /issues/{id}`: the service's answer, as is.
pub fn fetch_issue(base: &str, id: u64) -> Result<Value, ToolError> {
    json_reply(Request::get(format!("{base}/issues/{id}")))
}

/// Denies every source the account may not read: all of them unless it may
/// list the tracker's issues. Fails closed: an access check that could not
/// be made admits nobody.
pub fn check_access(check: ObserverCheck) -> Vec<Denial> {
    let reason = match base_url(&check.settings) {
        Err(e) => Some(format!("could not check access to the tracker: {e}")),
        Ok(base) => match Request::get(format!("{base}/issues")).send() {
            Ok(reply) if reply.status == 401 || reply.status == 403 => Some(format!(
                "the account is not allowed to read the tracker (HTTP {})",
                reply.status
            )),
            Ok(reply) if (200..300).contains(&reply.status) => None,
            Ok(reply) => Some(format!(
                "could not check access to the tracker: unexpected HTTP {}",
                reply.status
            )),
            Err(HttpError::NotSent(e) | HttpError::OutcomeUnknown(e)) => {
                Some(format!("could not check access to the tracker: {e}"))
            }
        },
    };
    match reason {
        Some(reason) => Denial::all(check.sources, "issues", &reason),
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
fn json_reply(request: Request) -> Result<Value, ToolError> {
    let what = request.describe();
    let reply = request.send().map_err(HttpError::into_tool_error)?;
    let status = reply.status;
    let text = reply.text();
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
