//! `script`: a test-driver gadget. Its input is a JSON script of kernel
//! calls (`{"steps": [...]}`) and its output is a JSON array with the exact
//! answer to each step, so tests can drive the kernel interface directly.

// A test driver: it must show exactly what the kernel answers (text that
// is not JSON included), so it works on the SDK's raw bindings.
use gatehouse_gadget::bindings::gatehouse::os::kernel::{self, ActionStatus, CallError, Outcome};
use gatehouse_gadget::bindings::gatehouse::os::workflow::{self, Certificate};
use std::cell::RefCell;

thread_local! {
    /// The step's certificate, once taken (workflow steps only).
    static CERT: RefCell<Option<Certificate>> = const { RefCell::new(None) };
}
use serde_json::{Map, Value, json};

struct Script;

impl gatehouse_gadget::Gadget for Script {
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

gatehouse_gadget::export!(Script);

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
            Ok(ActionStatus::Expired(message)) => {
                json!({ "status": "expired", "message": message })
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
    if let Some(request) = step.get("request") {
        let allowed = request.get("allowed").cloned().unwrap_or(Value::Null);
        let allowed = match allowed {
            Value::String(raw) => raw,
            v => v.to_string(),
        };
        let reason = request.get("reason").and_then(Value::as_str).unwrap_or("");
        return Ok(match workflow::request_approval(&allowed, reason) {
            Ok(id) => json!({ "request": id }),
            Err(e) => json!({ "error": { "kind": "refused", "message": e } }),
        });
    }
    if step.contains_key("certificate") {
        return Ok(with_certificate(|c| {
            json!({
                "run": c.run(), "step": c.step(), "authority": c.authority(),
                "tools": c.tools(), "expires_at": c.expires_at(), "encoded": c.encoded(),
            })
        }));
    }
    if step.contains_key("dropcert") {
        CERT.with(|c| c.borrow_mut().take());
        return Ok(json!({ "dropped": true }));
    }
    if let Some(call) = step.get("certcall") {
        return run_certified(call.as_object().ok_or("\"certcall\" must be an object")?);
    }
    Err("unknown step; expected one of call, poll, env, tools, request, certificate, certcall, dropcert".to_string())
}

/// Runs `f` on the step's certificate, taking it from the kernel once.
fn with_certificate(f: impl FnOnce(&Certificate) -> Value) -> Value {
    CERT.with(|cell| {
        let mut cert = cell.borrow_mut();
        if cert.is_none() {
            *cert = workflow::step_certificate();
        }
        match cert.as_ref() {
            Some(c) => f(c),
            None => json!({ "error": { "kind": "refused", "message": "no certificate: not a workflow step, or it was dropped" } }),
        }
    })
}

/// A call made under the step's certificate.
fn run_certified(call: &Map<String, Value>) -> Result<Value, String> {
    let (key, tool, args) = call_parts(call)?;
    let service = match kernel::open(key) {
        Ok(service) => service,
        Err(e) => return Ok(error(&e)),
    };
    Ok(with_certificate(|c| outcome(c.call(&service, tool, &args))))
}

fn call_parts(call: &Map<String, Value>) -> Result<(&str, &str, String), String> {
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
    Ok((key, tool, args))
}

fn outcome(result: Result<Outcome, CallError>) -> Value {
    match result {
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
    }
}

fn run_call(call: &Map<String, Value>) -> Result<Value, String> {
    let (key, tool, args) = call_parts(call)?;
    let service = match kernel::open(key) {
        Ok(service) => service,
        Err(e) => return Ok(error(&e)),
    };
    Ok(outcome(service.call(tool, &args)))
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
