//! `mcp`: any remote MCP server (Streamable HTTP) behind the gate.
//!
//! One component, many servers: each instance names its server with the
//! setting `url` (`gatekeeper add mcp.wasm --set url=https://host/mcp
//! --allow-host host --secret NAME`); the kernel limits where it may
//! connect and injects the credential. `describe` reads the server's
//! `tools/list` (every page) into the manifest with the annotations passed
//! through unchanged: only the kernel's `classify` judges them. A tool's
//! `title`, `outputSchema` and `execution.taskSupport` are passed through
//! too, as the protocol gives them (the kernel checks, sanitises and
//! decides what to do with each). `call` runs
//! `tools/call` and hands back `content`, `structuredContent` and `isError`.
//! It never simulates: a pending write awaits a decision.
//!
//! Failure classes (SPEC M1, P2): not sent, 401, 403 -> `refused`; a
//! JSON-RPC error to `tools/call`, another non-2xx, a broken or oversized
//! reply, a session that expired after the request was sent, or anything
//! else -> `unknown-outcome`. An expired session is re-established and the
//! call retried once only when the server declares the tool read-only; a
//! write is never retried.
//!
//! Sessions across calls: for a read, the host may hand over the session an
//! earlier read of the same chat, introduction and account set up (setting
//! `held-mcp-session`); the call then skips `initialize` and
//! `notifications/initialized`, and sets up a new session only if the
//! server no longer knows that one.

mod session;
mod wire;

use gatehouse_gatekeeper::manifest::{
    Annotations, Manifest, ObserverStrategy, TaskSupport, ToolInfo,
};
use gatehouse_gatekeeper::{
    Denial, Gatekeeper, Invocation, ObserverCheck, ObserverVerdict, Output, ToolError,
};
use serde_json::{Map, Value, json};
use session::{Error, Session};

/// The most pages of `tools/list` read, and the most bytes of tools kept.
const MAX_PAGES: usize = 100;
const MAX_LIST_BYTES: usize = 4 << 20;

struct Mcp;

/// The server's url, from the instance's settings.
fn url(settings: &[(String, String)]) -> Result<String, ToolError> {
    settings
        .iter()
        .find(|(k, _)| k == "url")
        .map(|(_, v)| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| {
            ToolError::Refused(
                "no server configured: add the gatekeeper with --set url=https://HOST/mcp (and --allow-host HOST)".into(),
            )
        })
}

/// The session the host held from an earlier read (setting
/// `held-mcp-session`: the protocol version, a space, the session id).
fn held_session(settings: &[(String, String)], url: &str) -> Option<Session> {
    let (_, held) = settings.iter().find(|(k, _)| k == "held-mcp-session")?;
    let (version, id) = held.split_once(' ')?;
    Session::resume(url, version, id)
}

/// Every tool the server lists, as the protocol gives them (all pages).
fn list_tools(s: &mut Session) -> Result<Vec<Map<String, Value>>, Error> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    let mut bytes = 0usize;
    for _ in 0..MAX_PAGES {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let page = s.request("tools/list", params)?;
        bytes += page.to_string().len();
        if bytes > MAX_LIST_BYTES {
            return Err(Error::Unknown(format!(
                "tools/list: the server lists more than {MAX_LIST_BYTES} bytes of tools"
            )));
        }
        let Some(items) = page.get("tools").and_then(Value::as_array) else {
            return Err(Error::Unknown(
                "tools/list: the result has no `tools` list".into(),
            ));
        };
        for t in items {
            let Some(t) = t.as_object() else {
                return Err(Error::Unknown(
                    "tools/list: a tool is not a JSON object".into(),
                ));
            };
            tools.push(t.clone());
        }
        match page.get("nextCursor").and_then(Value::as_str) {
            Some(c) if !c.is_empty() => cursor = Some(c.to_owned()),
            _ => return Ok(tools),
        }
    }
    Err(Error::Unknown(format!(
        "tools/list: the server kept paging past {MAX_PAGES} pages"
    )))
}

/// One hint: `some` only for a JSON boolean; anything else is no hint, so
/// the kernel falls back to its safe default (SPEC K2).
fn hint(t: &Map<String, Value>, name: &str) -> Option<bool> {
    t.get("annotations")
        .and_then(|a| a.get(name))
        .and_then(Value::as_bool)
}

/// `execution.taskSupport`, when it is one of the three values MCP
/// defines; anything else is no hint (which MCP reads as `forbidden`).
fn task_support(t: &Map<String, Value>) -> Option<TaskSupport> {
    match t
        .get("execution")
        .and_then(|e| e.get("taskSupport"))
        .and_then(Value::as_str)?
    {
        "forbidden" => Some(TaskSupport::Forbidden),
        "optional" => Some(TaskSupport::Optional),
        "required" => Some(TaskSupport::Required),
        _ => None,
    }
}

fn tool_info(t: &Map<String, Value>) -> Result<ToolInfo, ToolError> {
    let name = t
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::UnknownOutcome("tools/list: a tool has no name".into()))?;
    Ok(ToolInfo {
        name: name.to_owned(),
        description: t
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        input_schema: t
            .get("inputSchema")
            .cloned()
            .unwrap_or_else(|| json!({"type": "object"}))
            .to_string(),
        annotations: Annotations {
            read_only: hint(t, "readOnlyHint"),
            destructive: hint(t, "destructiveHint"),
            idempotent: hint(t, "idempotentHint"),
            open_world: hint(t, "openWorldHint"),
        },
        // MCP has no revert or idempotency-key convention: neither is
        // claimed for a remote server's tool.
        reverted_by: None,
        honours_idempotency_key: false,
        // The title is the tool's own, else the one its annotations carry
        // (where older servers put it).
        title: t
            .get("title")
            .or_else(|| t.get("annotations").and_then(|a| a.get("title")))
            .and_then(Value::as_str)
            .map(str::to_owned),
        // Only a schema object is a schema; anything else is no schema,
        // rather than one that would fail every result.
        output_schema: t
            .get("outputSchema")
            .filter(|s| s.is_object())
            .map(Value::to_string),
        task_support: task_support(t),
    })
}

/// A failure before `tools/call` was sent: it never reached the tool.
fn before_call(e: Error) -> ToolError {
    match e {
        Error::NotTaken(m) => ToolError::Refused(m),
        other => ToolError::Refused(format!(
            "the call was not sent, the session could not be opened: {}",
            other.text()
        )),
    }
}

/// A failure of `tools/call` itself.
fn of_call(e: Error) -> ToolError {
    match e {
        Error::NotTaken(m) => ToolError::Refused(m),
        Error::Expired(m) => ToolError::UnknownOutcome(format!(
            "{m}, after the request was sent: it may have taken effect; check the service before staging it again"
        )),
        Error::Unknown(m) => ToolError::UnknownOutcome(format!(
            "{m}; it may have taken effect: check the service before staging it again"
        )),
        e @ Error::Rpc { .. } => ToolError::UnknownOutcome(format!(
            "{}; it may have taken effect: check the service before staging it again",
            e.text()
        )),
    }
}

/// Whether the server declares `tool` read-only, asked on a fresh session.
fn declared_read_only(s: &mut Session, tool: &str) -> bool {
    list_tools(s).is_ok_and(|tools| {
        tools.iter().any(|t| {
            t.get("name").and_then(Value::as_str) == Some(tool)
                && hint(t, "readOnlyHint") == Some(true)
        })
    })
}

fn result_output(result: Value) -> Output {
    let mut out = Map::new();
    for key in ["content", "structuredContent", "isError"] {
        if let Some(v) = result.get(key) {
            out.insert(key.to_owned(), v.clone());
        }
    }
    Output {
        result: Value::Object(out).to_string(),
        sources: Vec::new(),
    }
}

impl Gatekeeper for Mcp {
    fn describe(settings: &[(String, String)]) -> Result<Manifest, ToolError> {
        let url = url(settings)?;
        let describe_error = |e: Error| ToolError::Refused(e.text());
        let mut s = Session::open(&url).map_err(describe_error)?;
        let tools = list_tools(&mut s).map_err(describe_error)?;
        Ok(Manifest {
            tools: tools.iter().map(tool_info).collect::<Result<_, _>>()?,
            simulates: false,
            // A generic server says nothing about who may see what.
            observers: ObserverStrategy::Refuse,
            triggers: Vec::new(),
        })
    }

    fn call(invocation: Invocation) -> Result<Output, ToolError> {
        let url = url(&invocation.settings)?;
        let args: Value = if invocation.args.trim().is_empty() {
            json!({})
        } else {
            serde_json::from_str(&invocation.args)
                .map_err(|e| ToolError::InvalidArgs(format!("the arguments are not JSON: {e}")))?
        };
        if !args.is_object() {
            return Err(ToolError::InvalidArgs(
                "the arguments must be a JSON object".into(),
            ));
        }
        let params = json!({"name": invocation.tool, "arguments": args});
        if let Some(mut held) = held_session(&invocation.settings, &url) {
            return match held.request("tools/call", params.clone()) {
                Ok(result) => Ok(result_output(result)),
                // The host hands a held session to reads only, and a server
                // answers 404 to a session it ended without taking the
                // request (Streamable HTTP): set up a new one, call again.
                Err(Error::Expired(_)) => Session::open(&url)
                    .map_err(before_call)?
                    .request("tools/call", params)
                    .map(result_output)
                    .map_err(of_call),
                Err(e) => Err(of_call(e)),
            };
        }
        let mut s = Session::open(&url).map_err(before_call)?;
        match s.request("tools/call", params.clone()) {
            Ok(result) => Ok(result_output(result)),
            Err(Error::Expired(m)) => {
                // Retried once, on a new session, only for a tool the server
                // itself declares read-only; a write is never resent.
                let mut fresh = Session::open(&url).map_err(|e| {
                    of_call(Error::Expired(format!(
                        "{m}; re-establishing it failed: {}",
                        e.text()
                    )))
                })?;
                if !declared_read_only(&mut fresh, &invocation.tool) {
                    return Err(of_call(Error::Expired(m)));
                }
                fresh
                    .request("tools/call", params)
                    .map(result_output)
                    .map_err(of_call)
            }
            Err(e) => Err(of_call(e)),
        }
    }

    /// Observers are refused (`refuse`): nothing to check with.
    fn check_observer(check: ObserverCheck) -> ObserverVerdict {
        let denials = Denial::all(
            check.sources,
            "mcp",
            "an MCP server cannot say who may observe its data",
        );
        ObserverVerdict::deny(denials)
    }
}

gatehouse_gatekeeper::export!(Mcp);
