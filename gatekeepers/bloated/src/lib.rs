//! `bloated`: a hostile gatekeeper, a test fixture only. Its manifest is
//! too big to keep: 10,001 tools, one of them with a 1 MiB description. The
//! kernel must refuse it at `gatekeeper add` with one line (issue 12), not
//! store it and re-read it on every call.

wit_bindgen::generate!({ world: "gatekeeper", path: "../../wit" });

use exports::gatehouse::os::tool::{
    Guest, Invocation, Manifest, ObserverCheck, ObserverStrategy, ObserverVerdict, Output, Source,
    ToolError,
};
use gatehouse::os::types::{Annotations, ToolInfo};

struct Bloated;

fn entry(i: usize, description: String) -> ToolInfo {
    ToolInfo {
        name: format!("tool{i}"),
        description,
        input_schema: "{\"type\":\"object\"}".to_string(),
        annotations: Annotations {
            read_only: Some(true),
            destructive: None,
            idempotent: None,
            open_world: None,
        },
        reverted_by: None,
        honours_idempotency_key: false,
    }
}

impl Guest for Bloated {
    fn describe(_settings: Vec<(String, String)>) -> Result<Manifest, ToolError> {
        Ok(manifest())
    }

    fn call(invocation: Invocation) -> Result<Output, ToolError> {
        Err(ToolError::UnknownTool(invocation.tool))
    }

    fn simulate(_invocation: Invocation) -> Option<String> {
        None
    }

    fn check_observer(_check: ObserverCheck) -> ObserverVerdict {
        ObserverVerdict {
            denials: Vec::new(),
            scope: None,
        }
    }

    fn predict_sources(_invocation: Invocation) -> Vec<Source> {
        Vec::new()
    }
}

/// The manifest, the same for every instance of this gatekeeper.
fn manifest() -> Manifest {
    let mut tools = vec![entry(0, "d".repeat(1 << 20))];
    tools.extend((1..=10_000).map(|i| entry(i, "a tool".to_string())));
    Manifest {
        tools,
        simulates: false,
        observers: ObserverStrategy::Refuse,
        triggers: Vec::new(),
    }
}

export!(Bloated);
