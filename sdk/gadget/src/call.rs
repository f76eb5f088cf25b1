//! Calls through the kernel, typed: the introduced keys, opening a service,
//! calling a tool with serialisable arguments, and where a staged action
//! stands. Owns the translation between the contract's JSON text and
//! `serde_json` values, and the one-line text of a refused call; it may not
//! interpret an answer (a pending action is what the kernel says it is).

use std::fmt;

use serde::Serialize;
use serde_json::Value;

use crate::bindings::gatehouse::os::kernel;
use crate::bindings::gatehouse::os::types::ToolInfo;

/// The keys of the services introduced to this gadget's chat (like
/// `ISSUES`).
pub fn env() -> Vec<String> {
    kernel::env()
}

/// Opens the service introduced under `key`.
pub fn open(key: &str) -> Result<Service, CallError> {
    kernel::open(key).map(Service).map_err(CallError::from)
}

/// Where the action `action_id` (staged by this chat) stands.
pub fn action_result(action_id: u64) -> Result<ActionResult, CallError> {
    kernel::action_result(action_id)
        .map(ActionResult::from)
        .map_err(CallError::from)
}

/// An introduced service. The handle belongs to this gadget's instance: it
/// cannot be forged or handed to another gadget.
pub struct Service(kernel::Service);

impl Service {
    /// The key it was introduced under.
    pub fn key(&self) -> String {
        self.0.key()
    }

    /// The tools this introduction grants, with their annotations.
    pub fn tools(&self) -> Vec<ToolInfo> {
        self.0.tools()
    }

    /// Calls `tool` with `args`, which must serialise to a JSON object.
    /// A read answers [`Outcome::Done`]; an action answers
    /// [`Outcome::Pending`] and nothing has been sent yet.
    pub fn call(&self, tool: &str, args: &impl Serialize) -> Result<Outcome, CallError> {
        let args = serde_json::to_string(args).map_err(|e| {
            CallError::InvalidArgs(format!("the arguments do not serialise to JSON: {e}"))
        })?;
        self.call_json(tool, &args)
    }

    /// As [`Service::call`], with the arguments as JSON text, passed on
    /// exactly as given.
    pub fn call_json(&self, tool: &str, args: &str) -> Result<Outcome, CallError> {
        let outcome = self.0.call(tool, args).map_err(CallError::from)?;
        Outcome::from_raw(outcome)
    }

    /// The raw handle, for [`crate::Certificate::call`] and the bindings.
    pub fn raw(&self) -> &kernel::Service {
        &self.0
    }
}

/// The answer to a call.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// A read: the service's answer, recorded as an observation.
    Done(Value),
    /// An action: staged, waiting for a decision; nothing was sent.
    Pending(Pending),
}

/// An action that was staged: nothing has been sent to the service.
#[derive(Clone, Debug, PartialEq)]
pub struct Pending {
    /// Poll it with [`action_result`].
    pub action_id: u64,
    /// A note for people ("staged as #3, nothing sent yet ...").
    pub message: String,
    /// True when the gatekeeper cannot simulate the action: do not build
    /// on its effect (do not retry it, do not use its result) before a
    /// decision.
    pub await_decision: bool,
    /// The gatekeeper's predicted result, when it simulates; its reads then
    /// show the pending action as if it had happened.
    pub provisional: Option<Value>,
}

impl Outcome {
    /// The typed view of the contract's `outcome`.
    pub fn from_raw(outcome: kernel::Outcome) -> Result<Outcome, CallError> {
        Ok(match outcome {
            kernel::Outcome::Done(json) => Outcome::Done(parse(&json)?),
            kernel::Outcome::Pending(p) => Outcome::Pending(Pending {
                action_id: p.action_id,
                message: p.message,
                await_decision: p.await_decision,
                provisional: p.provisional.as_deref().map(parse).transpose()?,
            }),
        })
    }
}

/// Where a staged action stands.
#[derive(Clone, Debug, PartialEq)]
pub enum ActionResult {
    /// Waiting for a decision, or being applied right now.
    Pending,
    /// A person rejected it (the reason); it was never sent.
    Rejected(String),
    /// Nobody decided it before its chat's expiry; it was never sent and
    /// never will be.
    Expired(String),
    /// It was sent (or tried) and failed.
    Failed {
        /// What went wrong, for people.
        message: String,
        /// True only when the kernel can prove it never took effect.
        retryable: bool,
    },
    /// It was applied: the service's answer (text that is not JSON is
    /// kept as a JSON string).
    Applied(Value),
}

impl From<kernel::ActionStatus> for ActionResult {
    fn from(status: kernel::ActionStatus) -> Self {
        match status {
            kernel::ActionStatus::Pending => ActionResult::Pending,
            kernel::ActionStatus::Rejected(m) => ActionResult::Rejected(m),
            kernel::ActionStatus::Expired(m) => ActionResult::Expired(m),
            kernel::ActionStatus::Failed(f) => ActionResult::Failed {
                message: f.message,
                retryable: f.retryable,
            },
            kernel::ActionStatus::Applied(json) => {
                ActionResult::Applied(serde_json::from_str(&json).unwrap_or(Value::String(json)))
            }
        }
    }
}

/// A call the kernel refused or could not complete. Displays as one line
/// that says what was wrong.
#[derive(Clone, Debug, PartialEq)]
pub enum CallError {
    /// No service with this key is introduced to the chat.
    UnknownKey {
        /// The key asked for.
        key: String,
        /// The keys introduced to the chat.
        known: Vec<String>,
    },
    /// The introduction does not grant this tool.
    NotGranted {
        /// The service's key.
        key: String,
        /// The tool asked for.
        tool: String,
        /// The tools the introduction grants.
        allowed: Vec<String>,
    },
    /// The arguments are not acceptable.
    InvalidArgs(String),
    /// A policy refused the call (too many pending actions, the chat is
    /// locked down, no such action...).
    Refused(String),
    /// The gatekeeper failed while serving a read, or answered something
    /// that is not JSON.
    Service(String),
}

impl From<kernel::CallError> for CallError {
    fn from(error: kernel::CallError) -> Self {
        match error {
            kernel::CallError::UnknownKey(e) => CallError::UnknownKey {
                key: e.key,
                known: e.known,
            },
            kernel::CallError::NotGranted(e) => CallError::NotGranted {
                key: e.key,
                tool: e.tool,
                allowed: e.allowed,
            },
            kernel::CallError::InvalidArgs(m) => CallError::InvalidArgs(m),
            kernel::CallError::Refused(m) => CallError::Refused(m),
            kernel::CallError::Service(m) => CallError::Service(m),
        }
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |items: &[String]| {
            if items.is_empty() {
                "(none)".to_string()
            } else {
                items.join(", ")
            }
        };
        let text = match self {
            CallError::UnknownKey { key, known } => {
                format!("unknown key {key}; introduced keys: {}", list(known))
            }
            CallError::NotGranted { key, tool, allowed } => format!(
                "tool {tool} is not granted for {key}; allowed: {}",
                list(allowed)
            ),
            CallError::InvalidArgs(m) => format!("invalid arguments: {m}"),
            CallError::Refused(m) => format!("refused: {m}"),
            CallError::Service(m) => format!("service error: {m}"),
        };
        f.write_str(&text.split_whitespace().collect::<Vec<_>>().join(" "))
    }
}

impl std::error::Error for CallError {}

fn parse(json: &str) -> Result<Value, CallError> {
    serde_json::from_str(json)
        .map_err(|e| CallError::Service(format!("the answer is not JSON: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_error_is_one_line_naming_what_is_known() {
        let e = CallError::UnknownKey {
            key: "ISSUES".into(),
            known: vec![],
        };
        assert_eq!(e.to_string(), "unknown key ISSUES; introduced keys: (none)");
        let e = CallError::Refused("too many\npending actions".into());
        assert_eq!(e.to_string(), "refused: too many pending actions");
    }

    #[test]
    fn an_applied_answer_that_is_not_json_is_kept_as_text() {
        let r = ActionResult::from(kernel::ActionStatus::Applied("not json".into()));
        assert_eq!(r, ActionResult::Applied(Value::String("not json".into())));
    }
}
