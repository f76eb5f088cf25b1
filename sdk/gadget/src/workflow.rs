//! A gadget running as a step of a workflow (SPEC G): its step certificate
//! and approval requests. Owns only the typed view; whether a call under a
//! certificate passes is checked by the kernel on every use.

use serde::Serialize;
use serde_json::Value;

use crate::bindings::gatehouse::os::workflow;
use crate::call::{CallError, Outcome, Service};

/// This step's certificate. Holding it is the proof: its bytes grant
/// nothing, and it cannot be copied into another gadget.
pub struct Certificate(workflow::Certificate);

/// This step's certificate, handed over once; `None` outside a workflow
/// step or once handed over (keep it for the whole turn).
pub fn step_certificate() -> Option<Certificate> {
    workflow::step_certificate().map(Certificate)
}

/// Asks a person to approve a bounded plan. `allowed_calls` is the JSON
/// object `{"KEY:tool": {"input": CONSTRAINT, ...}}` (a constraint is
/// `{"eq": v}`, `{"in": [...]}`, `{"range": [min, max]}` or `{"pattern":
/// "regex"}`, each optionally with `"optional": true`). The request covers
/// this step and every later one up to the next request. Returns its id.
pub fn request_approval(allowed_calls: &Value, reason: &str) -> Result<u64, String> {
    workflow::request_approval(&allowed_calls.to_string(), reason)
}

impl Certificate {
    /// The workflow run it belongs to.
    pub fn run(&self) -> u64 {
        self.0.run()
    }

    /// The step it belongs to.
    pub fn step(&self) -> String {
        self.0.step()
    }

    /// Whose authority the step's calls run under.
    pub fn authority(&self) -> String {
        self.0.authority()
    }

    /// The signed tool set, as `KEY:tool` entries.
    pub fn tools(&self) -> Vec<String> {
        self.0.tools()
    }

    /// When it expires, in milliseconds since the Unix epoch.
    pub fn expires_at(&self) -> u64 {
        self.0.expires_at()
    }

    /// The signed certificate as text, for display only.
    pub fn encoded(&self) -> String {
        self.0.encoded()
    }

    /// Calls `tool` of `service` under this certificate: checked against
    /// the certificate and the approved allowed-calls lists before anything
    /// reaches a gatekeeper.
    pub fn call(
        &self,
        service: &Service,
        tool: &str,
        args: &impl Serialize,
    ) -> Result<Outcome, CallError> {
        let args = serde_json::to_string(args).map_err(|e| {
            CallError::InvalidArgs(format!("the arguments do not serialise to JSON: {e}"))
        })?;
        let outcome = self
            .0
            .call(service.raw(), tool, &args)
            .map_err(CallError::from)?;
        Outcome::from_raw(outcome)
    }

    /// The raw handle, for the bindings.
    pub fn raw(&self) -> &workflow::Certificate {
        &self.0
    }
}
