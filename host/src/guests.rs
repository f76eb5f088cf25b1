//! The guest components built from this repository (by `build.rs`): the
//! bundled examples the demo installs, and the paths tests install from.

use std::path::PathBuf;

/// Where the build put the guest components.
pub fn dir() -> PathBuf {
    PathBuf::from(env!("GATEHOUSE_GUESTS_DIR"))
}

/// The built component for a guest crate, e.g. `path("triage")`.
pub fn path(name: &str) -> PathBuf {
    dir().join(format!("{}.wasm", name.replace('-', "_")))
}

/// The example gadget, embedded so the demo needs nothing on disk.
pub const TRIAGE: &[u8] = include_bytes!(concat!(env!("GATEHOUSE_GUESTS_DIR"), "/triage.wasm"));
/// The example issue-tracker gatekeeper.
pub const ISSUES: &[u8] = include_bytes!(concat!(env!("GATEHOUSE_GUESTS_DIR"), "/issues.wasm"));
/// The test-driver gadget (runs a JSON script of kernel calls).
pub const SCRIPT: &[u8] = include_bytes!(concat!(env!("GATEHOUSE_GUESTS_DIR"), "/script.wasm"));
/// The scripted agent ("make sure an issue exists, then label it").
pub const AGENT: &[u8] = include_bytes!(concat!(env!("GATEHOUSE_GUESTS_DIR"), "/agent.wasm"));
/// The tracker gatekeeper that can simulate its actions.
pub const ISSUES_SIM: &[u8] =
    include_bytes!(concat!(env!("GATEHOUSE_GUESTS_DIR"), "/issues_sim.wasm"));
/// The language-model agent: its tool calls pass the gate.
pub const ASSISTANT: &[u8] =
    include_bytes!(concat!(env!("GATEHOUSE_GUESTS_DIR"), "/assistant.wasm"));
/// The gatekeeper for an OpenAI-compatible chat completions endpoint.
pub const MODEL: &[u8] = include_bytes!(concat!(env!("GATEHOUSE_GUESTS_DIR"), "/model.wasm"));
/// The data-warehouse gatekeeper (owner-only payroll table).
pub const WAREHOUSE: &[u8] =
    include_bytes!(concat!(env!("GATEHOUSE_GUESTS_DIR"), "/warehouse.wasm"));
/// A gatekeeper that lies: it declares a destructive tool read-only (the
/// demo's lecture exercise ex02 shows what the audit makes of it).
pub const ROGUE: &[u8] = include_bytes!(concat!(env!("GATEHOUSE_GUESTS_DIR"), "/rogue.wasm"));
