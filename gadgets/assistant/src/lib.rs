//! `assistant`: a language-model agent that runs its tool-calling loop
//! inside the sandbox. The model is a service like any other: the chat's
//! `MODEL` key (a `model` gatekeeper). Every other key's tools are offered
//! to the model as functions, and each call the model asks for is made
//! through the kernel: reads are answered and recorded, writes are staged
//! and answered `pending`, and the model is told exactly that.
//!
//! Honest by construction (SPEC V1-V3): a write staged for a person's
//! decision is reported to the model as `PENDING` (with the simulated
//! result when the gatekeeper gave one), never as done. When the write
//! must be decided before the agent may build on it (`await-decision`), the
//! turn ends there with "waiting"; the kernel's agent harness resumes the
//! assistant once the write is applied, with a note naming it, and the
//! assistant starts the conversation again with that note. (Under the
//! naive harness, which exists only to show the harm, the kernel itself
//! answers `{}` and the model cannot tell.)
//!
//! Input: the task, as free text (the harness appends its notes as
//! further lines). Output: the model's final answer, or why it stopped.

use gatehouse_gadget::{CallError, Gadget, Outcome, Service};
use serde_json::{Value, json};

/// The key the model is introduced under.
const MODEL: &str = "MODEL";
/// Model replies per turn at most: a loop that never ends is cut here.
const MAX_STEPS: usize = 16;
/// The most of one tool result given back to the model, in characters.
const MAX_RESULT: usize = 16 * 1024;

const SYSTEM: &str = "You act for a person through Gatehouse. Reads are answered at once. \
Writes are held for the person's approval: a tool result starting with PENDING means the \
write was staged and NOTHING has happened yet; never repeat it, and do not assume its \
effect unless a provisional result is given. A result starting with ERROR means the call \
was refused or failed. Finish with a short answer for the person.";

struct Assistant;

impl Gadget for Assistant {
    fn run(input: String) -> Result<String, String> {
        if input.trim().is_empty() {
            return Err("give the assistant a task, as text".into());
        }
        let model = gatehouse_gadget::open(MODEL).map_err(|e| {
            format!("the assistant needs a model introduced as {MODEL} (a `model` gatekeeper): {e}")
        })?;
        let offered = Offered::gather();
        let mut messages = vec![
            json!({"role": "system", "content": SYSTEM}),
            json!({"role": "user", "content": input}),
        ];
        for _ in 0..MAX_STEPS {
            let reply = complete(&model, &messages, &offered)?;
            let calls = reply["tool_calls"].as_array().cloned().unwrap_or_default();
            if calls.is_empty() {
                return Ok(reply["content"]
                    .as_str()
                    .unwrap_or("(the model answered nothing)")
                    .to_owned());
            }
            messages.push(reply);
            for call in &calls {
                let (content, waiting) = offered.make(call);
                messages.push(json!({
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "content": content,
                }));
                if let Some(waiting) = waiting {
                    return Ok(waiting);
                }
            }
        }
        Ok(format!(
            "stopped: the model asked for tools {MAX_STEPS} times without finishing"
        ))
    }
}

gatehouse_gadget::export!(Assistant);

/// Ask the model for its next message.
fn complete(model: &Service, messages: &[Value], offered: &Offered) -> Result<Value, String> {
    let mut args = json!({ "messages": messages });
    if !offered.functions.is_empty() {
        args["tools"] = Value::Array(offered.functions.clone());
    }
    match model.call("complete", &args) {
        Ok(Outcome::Done(answer)) => {
            let message = answer["message"].clone();
            if message.is_object() {
                Ok(message)
            } else {
                Err("the model answered no message".into())
            }
        }
        Ok(Outcome::Pending(p)) => Err(format!(
            "the model call was staged as action #{} instead of answered: its gatekeeper does not declare it a read",
            p.action_id
        )),
        Err(e) => Err(format!("the model could not be asked: {e}")),
    }
}

/// The tools offered to the model, as functions, and where each goes.
struct Offered {
    /// OpenAI-style function definitions.
    functions: Vec<Value>,
    /// Function name → (key, tool).
    routes: Vec<(String, String, String)>,
}

impl Offered {
    /// Every tool of every introduced key but the model's, named
    /// `KEY__tool` (only names a model endpoint accepts are offered).
    fn gather() -> Offered {
        let mut offered = Offered {
            functions: Vec::new(),
            routes: Vec::new(),
        };
        for key in gatehouse_gadget::env() {
            if key == MODEL {
                continue;
            }
            let Ok(service) = gatehouse_gadget::open(&key) else {
                continue;
            };
            for tool in service.tools() {
                let name = format!("{key}__{}", tool.name);
                let usable = name.len() <= 64
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                if !usable {
                    continue;
                }
                let parameters: Value = serde_json::from_str(&tool.input_schema)
                    .unwrap_or_else(|_| json!({"type": "object"}));
                offered.functions.push(json!({
                    "type": "function",
                    "function": {
                        "name": name,
                        "description": tool.description,
                        "parameters": parameters,
                    }
                }));
                offered.routes.push((name, key.clone(), tool.name));
            }
        }
        offered
    }

    /// Make the call the model asked for, through the kernel. Returns what
    /// the model is told, and, when the turn must end for a decision, the
    /// turn's answer.
    fn make(&self, call: &Value) -> (String, Option<String>) {
        let name = call["function"]["name"].as_str().unwrap_or_default();
        let Some((_, key, tool)) = self.routes.iter().find(|(n, _, _)| n == name) else {
            return (
                format!("ERROR: there is no tool named {name:?}; use one of those offered"),
                None,
            );
        };
        let arguments = call["function"]["arguments"].as_str().unwrap_or("{}");
        // Opened at each call: the kernel checks the introduction then.
        let called = gatehouse_gadget::open(key).and_then(|s| s.call_json(tool, arguments));
        match called {
            Ok(Outcome::Done(result)) => (cut(&result.to_string()), None),
            Ok(Outcome::Pending(p)) => {
                let mut told = format!(
                    "PENDING: staged as action #{}; nothing has been sent. A person decides it.",
                    p.action_id
                );
                if let Some(provisional) = &p.provisional {
                    told.push_str(&format!(
                        " Provisional result (the service's simulation, if approved): {}",
                        cut(&provisional.to_string())
                    ));
                }
                let waiting = p.await_decision.then(|| {
                    format!(
                        "waiting: action #{} ({tool}) awaits a person's decision; I resume once it is applied",
                        p.action_id
                    )
                });
                (told, waiting)
            }
            Err(e) => (format!("ERROR: {}", error(&e)), None),
        }
    }
}

fn error(e: &CallError) -> String {
    cut(&e.to_string())
}

/// `text`, cut to [`MAX_RESULT`] characters with a note.
fn cut(text: &str) -> String {
    let count = text.chars().count();
    if count <= MAX_RESULT {
        return text.to_owned();
    }
    let kept: String = text.chars().take(MAX_RESULT).collect();
    format!("{kept} … (cut: {count} characters in all)")
}
