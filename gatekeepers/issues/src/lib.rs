//! `issues`: the example gatekeeper. It fronts the issue-tracker HTTP service
//! (list, get, search, create, label, unlabel) over `wasi:http`; the kernel adds the
//! credential and limits where its requests may go.
//!
//! The tools themselves live in `tracker.rs`, shared with `issues-sim`; this
//! gatekeeper answers reads with what the service says and never simulates.

mod http;
// Shared with the other gatekeepers; this one uses only part of it.
#[allow(dead_code)]
mod kit;
mod tracker;

wit_bindgen::generate!({ world: "gatekeeper", path: "../../wit" });

use exports::gatehouse::os::tool::{
    Guest, Invocation, Manifest, ObserverCheck, ObserverVerdict, Output, Source, ToolError,
};

struct Issues;

impl Guest for Issues {
    fn describe(settings: Vec<(String, String)>) -> Result<Manifest, ToolError> {
        Ok(tracker::manifest(false, &settings))
    }

    fn call(invocation: Invocation) -> Result<Output, ToolError> {
        tracker::call(&invocation, tracker::fetch_list, tracker::fetch_issue)
    }

    fn simulate(_invocation: Invocation) -> Option<String> {
        None
    }

    fn check_observer(check: ObserverCheck) -> ObserverVerdict {
        ObserverVerdict {
            denials: tracker::check_access(check),
            scope: None,
        }
    }

    /// One access check covers everything (`access-check`): no prediction.
    fn predict_sources(_invocation: Invocation) -> Vec<Source> {
        Vec::new()
    }
}

export!(Issues);
