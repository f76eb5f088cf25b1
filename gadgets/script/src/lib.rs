//! `script`: a test-driver gadget. Its input is a JSON script of kernel
//! calls (`{"steps": [...]}`) and its output is a JSON array with the exact
//! answer to each step, so tests can drive the kernel interface directly.

wit_bindgen::generate!({ world: "gadget", path: "../../wit" });

use gatehouse::os::kernel::{self, ActionStatus, CallError, Outcome};
use serde_json::{Map, Value, json};

struct Script;

impl exports::gatehouse::os::run::Guest for Script {
    fn run(input: String) -> Result<String, String> {
        let script: Value =
            serde_json::from_str(&input).map_err(|e| format!("the script is not JSON: {e}"))?;
        let steps = script
            .get("steps")
            .and_then(Value::as_array)
            .ok_or("the script must be an object with a \"steps\" array")?;
        let answers = steps
            .iter()
            .enumerate()
            .map(|(i, step)| run_step(step).map_err(|e| format!("step {i}: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Value::Array(answers).to_string())
    }
}

export!(Script);

/// Runs one step. `Err` only for a malformed step.
fn run_step(step: &Value) -> Result<Value, String> {
    let step = step.as_object().ok_or("a step must be a JSON object")?;
    if let Some(call) = step.get("call") {
        return run_call(call.as_object().ok_or("\"call\" must be an object")?);
    }
    if let Some(id) = step.get("poll") {
        let id = id
            .as_u64()
            .ok_or("\"poll\" must be a non-negative integer action id")?;
        return Ok(match kernel::action_result(id) {
            Ok(ActionStatus::Pending) => json!({ "status": "pending" }),
            Ok(ActionStatus::Rejected(message)) => {
                json!({ "status": "rejected", "message": message })
            }
            Ok(ActionStatus::Failed(f)) => {
                json!({ "status": "failed", "message": f.message, "retryable": f.retryable })
            }
            Ok(ActionStatus::Applied(result)) => {
                json!({ "status": "applied", "result": parse_or_string(result) })
            }
            Err(e) => error(&e),
        });
    }
    if step.contains_key("env") {
        return Ok(json!({ "keys": kernel::env() }));
    }
    if let Some(key) = step.get("tools") {
        let key = key.as_str().ok_or("\"tools\" must be a service key")?;
        return Ok(match kernel::open(key) {
            Ok(service) => {
                let tools: Vec<Value> = service
                    .tools()
                    .into_iter()
                    .map(|tool| {
                        json!({
                            "name": tool.name,
                            "read_only": tool.annotations.read_only,
                            "destructive": tool.annotations.destructive,
                            "idempotent": tool.annotations.idempotent,
                        })
                    })
                    .collect();
                json!({ "tools": tools })
            }
            Err(e) => error(&e),
        });
    }
    Err("unknown step; expected one of call, poll, env, tools".to_string())
}

fn run_call(call: &Map<String, Value>) -> Result<Value, String> {
    let key = call
        .get("key")
        .and_then(Value::as_str)
        .ok_or("call.key must be a string")?;
    let tool = call
        .get("tool")
        .and_then(Value::as_str)
        .ok_or("call.tool must be a string")?;
    let args = match (call.get("raw_args"), call.get("args")) {
        (Some(Value::String(raw)), _) => raw.clone(),
        (Some(_), _) => return Err("call.raw_args must be a string".to_string()),
        (None, Some(args)) => args.to_string(),
        (None, None) => "{}".to_string(),
    };
    let service = match kernel::open(key) {
        Ok(service) => service,
        Err(e) => return Ok(error(&e)),
    };
    Ok(match service.call(tool, &args) {
        Ok(Outcome::Done(result)) => json!({ "done": parse_or_string(result) }),
        Ok(Outcome::Pending(p)) => json!({
            "pending": {
                "action_id": p.action_id,
                "message": p.message,
                "await_decision": p.await_decision,
                "provisional": p.provisional.map(parse_or_string),
            }
        }),
        Err(e) => error(&e),
    })
}

/// The JSON value of `text`, or `text` itself as a string.
fn parse_or_string(text: String) -> Value {
    serde_json::from_str(&text).unwrap_or(Value::String(text))
}

fn error(error: &CallError) -> Value {
    let body = match error {
        CallError::UnknownKey(e) => json!({
            "kind": "unknown-key",
            "message": format!("unknown key {}; introduced keys: {}", e.key, e.known.join(", ")),
            "known": e.known,
        }),
        CallError::NotGranted(e) => json!({
            "kind": "not-granted",
            "message": format!(
                "tool {} is not granted for {}; allowed: {}",
                e.tool,
                e.key,
                e.allowed.join(", ")
            ),
            "allowed": e.allowed,
        }),
        CallError::InvalidArgs(m) => json!({ "kind": "invalid-args", "message": m }),
        CallError::Refused(m) => json!({ "kind": "refused", "message": m }),
        CallError::Service(m) => json!({ "kind": "service", "message": m }),
    };
    json!({ "error": body })
}
