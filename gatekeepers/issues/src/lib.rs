//! `issues`: the example gatekeeper. It fronts the issue-tracker HTTP service
//! (list, get, search, create, label, unlabel) over `wasi:http`; the kernel adds the
//! credential and limits where its requests may go.
//!
//! The tools themselves live in the `issues-tracker` library (`tracker/`),
//! shared with `issues-sim`; this gatekeeper answers reads with what the
//! service says and never simulates.

use gatehouse_gatekeeper::manifest::Manifest;
use gatehouse_gatekeeper::{
    Gatekeeper, Invocation, ObserverCheck, ObserverVerdict, Output, ToolError,
};

struct Issues;

impl Gatekeeper for Issues {
    fn describe(settings: &[(String, String)]) -> Result<Manifest, ToolError> {
        Ok(issues_tracker::manifest(false, settings))
    }

    fn call(invocation: Invocation) -> Result<Output, ToolError> {
        issues_tracker::call(
            &invocation,
            issues_tracker::fetch_list,
            issues_tracker::fetch_issue,
        )
    }

    fn check_observer(check: ObserverCheck) -> ObserverVerdict {
        ObserverVerdict::deny(issues_tracker::check_access(check))
    }

    // One access check covers everything (`access-check`): no prediction,
    // the SDK's default.
}

gatehouse_gatekeeper::export!(Issues);
