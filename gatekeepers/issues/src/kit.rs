//! Small helpers every gatekeeper needs: annotations and tool descriptions
//! for its manifest, argument parsing, outputs, errors and denials.
//!
//! Each gatekeeper includes this file with `#[path]` next to `http.rs` (as
//! `mod kit` and `mod http`) and uses the part it needs. It relies on the
//! bindings `wit_bindgen::generate!` puts at the crate root.

use serde_json::{Map, Value};

use crate::exports::gatehouse::os::tool::{Denial, Output, Source, ToolError};
use crate::gatehouse::os::types::{Annotations, ToolInfo};
use crate::http::{Failure, one_line};

/// Annotations with these hints and no `open-world` hint.
pub fn hints(
    read_only: Option<bool>,
    destructive: Option<bool>,
    idempotent: Option<bool>,
) -> Annotations {
    Annotations {
        read_only,
        destructive,
        idempotent,
        open_world: None,
    }
}

/// A tool annotated read-only, with no other hint.
pub fn read_only() -> Annotations {
    hints(Some(true), None, None)
}

/// A tool with no hints at all.
pub fn none() -> Annotations {
    hints(None, None, None)
}

/// A tool's entry in the manifest; `schema` is its JSON input schema.
pub fn tool(name: &str, description: &str, schema: Value, annotations: Annotations) -> ToolInfo {
    ToolInfo {
        name: name.to_string(),
        description: description.to_string(),
        input_schema: schema.to_string(),
        annotations,
        reverted_by: None,
        honours_idempotency_key: false,
    }
}

/// The arguments of a call: a JSON object (no text counts as `{}`).
pub fn parse_args(args: &str) -> Result<Map<String, Value>, ToolError> {
    args_object(args, false)
}

/// As [`parse_args`], but a refusal also says what the arguments were.
pub fn parse_args_naming_kind(args: &str) -> Result<Map<String, Value>, ToolError> {
    args_object(args, true)
}

fn args_object(args: &str, name_kind: bool) -> Result<Map<String, Value>, ToolError> {
    let text = if args.trim().is_empty() { "{}" } else { args };
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) if name_kind => Err(ToolError::InvalidArgs(format!(
            "arguments must be a JSON object, not {}",
            kind(&other)
        ))),
        Ok(_) => Err(ToolError::InvalidArgs(
            "arguments must be a JSON object".into(),
        )),
        Err(e) => Err(ToolError::InvalidArgs(format!(
            "arguments are not valid JSON: {e}"
        ))),
    }
}

/// What a JSON value is, for messages ("a string", "null"...).
pub fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The error for a call of a tool the gatekeeper does not have; `offered`
/// lists its tools.
pub fn unknown_tool(name: &str, offered: &str) -> ToolError {
    ToolError::UnknownTool(format!(
        "unknown tool {}; this gatekeeper offers: {offered}",
        one_line(name, 80)
    ))
}

/// The `tool-error` for a request that failed: refused when it was never
/// sent, an unknown outcome when the service may have acted.
pub fn tool_error(failure: Failure) -> ToolError {
    match failure {
        Failure::NotSent(e) => ToolError::Refused(e),
        Failure::Unknown(e) => ToolError::UnknownOutcome(e),
    }
}

/// As [`tool_error`], but a refusal says that the request was not sent.
pub fn request_error(failure: Failure) -> ToolError {
    match failure {
        Failure::NotSent(e) => ToolError::Refused(format!("the request was not sent: {e}")),
        failure => tool_error(failure),
    }
}

/// A source anyone who may observe the chat may see.
pub fn source(id: impl Into<String>, title: impl Into<String>) -> Source {
    Source {
        id: id.into(),
        title: title.into(),
        restricted: false,
    }
}

/// The output of a read of `source`.
pub fn read(result: Value, source: Source) -> Output {
    Output {
        result: result.to_string(),
        sources: vec![source],
    }
}

/// The output of an action (or of anything that read no source).
pub fn action(result: Value) -> Output {
    Output {
        result: result.to_string(),
        sources: Vec::new(),
    }
}

/// One denial per source (`fallback` when there is none), all for `reason`.
pub fn deny_all(sources: Vec<Source>, fallback: &str, reason: &str) -> Vec<Denial> {
    let mut sources: Vec<String> = sources.into_iter().map(|s| s.id).collect();
    if sources.is_empty() {
        sources.push(fallback.to_string());
    }
    sources
        .into_iter()
        .map(|source| Denial {
            source,
            reason: reason.to_string(),
        })
        .collect()
}
