//! What a gadget's sandbox sees of the kernel: a narrow, call-shaped view.
//!
//! The gadget host state ([`super::gadget::GadgetState`]) holds a
//! `Box<dyn KernelView>` rather than the kernel itself, the way
//! wasmtime-wasi reaches its context through `WasiView`: the runtime only
//! translates WIT calls into calls of this trait, and the kernel (which
//! implements it, `crate::kernel::TurnView`) decides what they do. So the
//! runtime never imports the kernel, and nothing here can skip a policy
//! step the kernel owns. This module owns the call-shaped types both sides
//! share (the WIT `call-error`, `outcome` and `action-status` as the host
//! knows them); it may not hold policy.

use crate::classify::Tool;
use crate::grants::Claims;
use std::future::Future;
use std::pin::Pin;

/// A kernel answer to one gadget call, still to be awaited. Boxed so that
/// the trait stays object-safe: the compiled-component cache holds one
/// linker for every turn, whatever the kernel behind it.
pub type Answer<'a, T> = Pin<Box<dyn Future<Output = anyhow::Result<T>> + Send + 'a>>;

/// The kernel as one turn of one gadget sees it: every import of the
/// `gadget`/`step` worlds that needs the kernel goes through here. An
/// `Err` of the outer `anyhow::Result` is the host's fault and traps the
/// call; the inner `Result` is an answer the gadget can handle.
pub trait KernelView: Send + Sync + 'static {
    /// The gadget running the turn, to name it in trap messages.
    fn gadget(&self) -> Option<&str>;
    /// The keys introduced into the turn's chat (`kernel.env`).
    fn env(&self) -> Answer<'_, Vec<String>>;
    /// Whether `key` resolves for the turn's person now (`kernel.open`).
    fn open<'a>(&'a self, key: &'a str) -> Answer<'a, Result<(), CallError>>;
    /// The tools `key`'s introduction grants; none when it no longer
    /// resolves (`service.tools`).
    fn tools<'a>(&'a self, key: &'a str) -> Answer<'a, Vec<Tool>>;
    /// The status of an action of the turn's chat (`kernel.action-result`).
    fn action_result(&self, id: u64) -> Answer<'_, Result<ActionStatus, CallError>>;
    /// A plain call: classify, then read now or stage (`service.call`).
    fn call<'a>(
        &'a self,
        key: &'a str,
        tool: &'a str,
        args: String,
    ) -> Answer<'a, Result<CallOutcome, CallError>>;
    /// The value the turn's gadget stored in the chat under `key`, if the
    /// turn's person may read it (`kernel.store-get`).
    fn store_get<'a>(&'a self, key: &'a str) -> Answer<'a, Result<Option<String>, CallError>>;
    /// Store a value of the turn's gadget in the chat (`kernel.store-put`).
    fn store_put<'a>(&'a self, key: &'a str, value: String) -> Answer<'a, Result<(), CallError>>;
    /// Remove a key of the turn's gadget in the chat (`kernel.store-delete`).
    fn store_delete<'a>(&'a self, key: &'a str) -> Answer<'a, Result<(), CallError>>;
    /// The keys the turn's person may read (`kernel.store-keys`).
    fn store_keys(&self) -> Answer<'_, Result<Vec<String>, CallError>>;
    /// The workflow step's certificate, handed over at most once.
    fn take_certificate(&self) -> Option<(String, Claims)>;
    /// A workflow step asks for approval of a bounded plan.
    fn request_approval<'a>(
        &'a self,
        allowed_calls: &'a str,
        reason: &'a str,
    ) -> Answer<'a, Result<u64, String>>;
    /// A step's call through its certificate (`certificate.call`).
    fn certified_call<'a>(
        &'a self,
        token: &'a str,
        key: &'a str,
        tool: &'a str,
        args: String,
    ) -> Answer<'a, Result<CallOutcome, CallError>>;
}

/// Why a gadget's call was refused. Mirrors the WIT `call-error`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallError {
    /// The key names no introduction of this chat.
    UnknownKey {
        /// The key the gadget asked for.
        key: String,
        /// The keys that are introduced, so the gadget can correct itself.
        known: Vec<String>,
    },
    /// The introduction exists but does not grant this tool.
    NotGranted {
        /// The introduction's key.
        key: String,
        /// The tool the gadget asked for.
        tool: String,
        /// The tools the introduction grants.
        allowed: Vec<String>,
    },
    /// The arguments do not fit the tool's input schema or caps.
    InvalidArgs(String),
    /// The kernel refused the call (lockdown, budget, workflow rules...).
    Refused(String),
    /// The service failed to answer a read.
    Service(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::UnknownKey { key, known } => write!(
                f,
                "no service {key:?} is introduced to this chat; introduced: [{}]",
                known.join(", ")
            ),
            // Names as given (`crate::prompt::as_given`): the gadget (or
            // the person reading its output) corrects its call from them.
            CallError::NotGranted { key, tool, allowed } => write!(
                f,
                "tool {:?} is not granted to {}; allowed: [{}]",
                crate::prompt::as_given(tool),
                crate::prompt::as_given(key),
                allowed
                    .iter()
                    .map(|t| crate::prompt::as_given(t))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            CallError::InvalidArgs(m) | CallError::Refused(m) | CallError::Service(m) => {
                f.write_str(m)
            }
        }
    }
}

/// A staged action, as the gadget learns of it.
#[derive(Clone, Debug)]
pub struct PendingAction {
    /// The action's id, for `action-result`.
    pub action_id: u64,
    /// What the gadget may tell the person (who decides, when).
    pub message: String,
    /// Whether the turn should end and wait for the decision (honest
    /// harness), rather than carry on.
    pub await_decision: bool,
    /// A simulating gatekeeper's predicted result, marked as not yet true.
    pub provisional: Option<String>,
}

/// What a call did: answered now (a read, or an auto-approved action that
/// was sent), or staged for a decision.
#[derive(Clone, Debug)]
pub enum CallOutcome {
    /// The result, as the service returned it.
    Done(String),
    /// The write waits for a person (or a rule).
    Pending(PendingAction),
}

/// Where an action stands, as the gadget may learn it (SPEC A4).
#[derive(Clone, Debug)]
pub enum ActionStatus {
    /// Not decided yet, or being sent.
    Pending,
    /// Refused by a person; never sent.
    Rejected(String),
    /// Sent and failed.
    Failed {
        /// The service's message.
        message: String,
        /// Whether sending it again may succeed.
        retryable: bool,
    },
    /// Sent; the service's result.
    Applied(String),
    /// Nobody decided in time; never sent.
    Expired(String),
}

/// The kernel as seen outside any turn: every call is refused with
/// `why`. What a gadget's code runs against when the kernel asks it for
/// something that must not depend on a chat or a person (a face's page),
/// so that such code can reach nothing.
pub struct NoTurn {
    gadget: String,
    why: &'static str,
}

impl NoTurn {
    /// A view for `gadget` that refuses everything, saying `why`.
    pub fn new(gadget: &str, why: &'static str) -> NoTurn {
        NoTurn {
            gadget: gadget.to_owned(),
            why,
        }
    }

    fn refused<T: Send + 'static>(&self) -> Answer<'_, Result<T, CallError>> {
        let why = self.why.to_owned();
        Box::pin(async move { Ok(Err(CallError::Refused(why))) })
    }
}

impl KernelView for NoTurn {
    fn gadget(&self) -> Option<&str> {
        Some(&self.gadget)
    }
    fn env(&self) -> Answer<'_, Vec<String>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    fn open<'a>(&'a self, _key: &'a str) -> Answer<'a, Result<(), CallError>> {
        self.refused()
    }
    fn tools<'a>(&'a self, _key: &'a str) -> Answer<'a, Vec<Tool>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    fn action_result(&self, _id: u64) -> Answer<'_, Result<ActionStatus, CallError>> {
        self.refused()
    }
    fn call<'a>(
        &'a self,
        _key: &'a str,
        _tool: &'a str,
        _args: String,
    ) -> Answer<'a, Result<CallOutcome, CallError>> {
        self.refused()
    }
    fn store_get<'a>(&'a self, _key: &'a str) -> Answer<'a, Result<Option<String>, CallError>> {
        self.refused()
    }
    fn store_put<'a>(&'a self, _key: &'a str, _value: String) -> Answer<'a, Result<(), CallError>> {
        self.refused()
    }
    fn store_delete<'a>(&'a self, _key: &'a str) -> Answer<'a, Result<(), CallError>> {
        self.refused()
    }
    fn store_keys(&self) -> Answer<'_, Result<Vec<String>, CallError>> {
        self.refused()
    }
    fn take_certificate(&self) -> Option<(String, Claims)> {
        None
    }
    fn request_approval<'a>(
        &'a self,
        _allowed_calls: &'a str,
        _reason: &'a str,
    ) -> Answer<'a, Result<u64, String>> {
        let why = self.why.to_owned();
        Box::pin(async move { Ok(Err(why)) })
    }
    fn certified_call<'a>(
        &'a self,
        _token: &'a str,
        _key: &'a str,
        _tool: &'a str,
        _args: String,
    ) -> Answer<'a, Result<CallOutcome, CallError>> {
        self.refused()
    }
}
