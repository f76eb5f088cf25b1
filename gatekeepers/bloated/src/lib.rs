//! `bloated`: a hostile gatekeeper, a test fixture only. Its manifest is
//! too big to keep: 10,001 tools, one of them with a 1 MiB description. The
//! kernel must refuse it at `gatekeeper add` with one line, not store it
//! and re-read it on every call (which would let one gatekeeper slow every
//! call of the chats it serves).

use gatehouse_gatekeeper::manifest::{Manifest, ToolInfo, tool};
use gatehouse_gatekeeper::{
    Gatekeeper, Invocation, ObserverCheck, ObserverVerdict, Output, ToolError,
};
use serde_json::json;

struct Bloated;

fn entry(i: usize, description: &str) -> ToolInfo {
    tool(&format!("tool{i}"), description, json!({"type": "object"}))
        .read_only()
        .build()
}

impl Gatekeeper for Bloated {
    fn describe(_settings: &[(String, String)]) -> Result<Manifest, ToolError> {
        Ok(manifest())
    }

    fn call(invocation: Invocation) -> Result<Output, ToolError> {
        Err(ToolError::UnknownTool(invocation.tool))
    }

    fn check_observer(_check: ObserverCheck) -> ObserverVerdict {
        ObserverVerdict::admit()
    }
}

/// The manifest, the same for every instance of this gatekeeper.
fn manifest() -> Manifest {
    let mut manifest = Manifest::builder().tool(entry(0, &"d".repeat(1 << 20)));
    for i in 1..=10_000 {
        manifest = manifest.tool(entry(i, "a tool"));
    }
    manifest.build()
}

gatehouse_gatekeeper::export!(Bloated);
