//! Issue 6: gadgets in Python and JavaScript from the same WIT. Each does
//! what the Rust `triage` gadget does, and the service cannot tell them
//! apart; a Python gadget has no more authority than a Rust one; the big
//! components compile once and are cached safely; `gatehouse new` starters
//! build, install and run as written.
//!
//! The Python and JavaScript components are built by `langs::guest` (cached
//! across runs) with the toolchains `tools/langs/setup.sh` installs.

use gatehouse::store::Trust;
use gatehouse_e2e::langs::{self, Lang};
use gatehouse_e2e::{TOKEN, World, compiled_files, guest, stderr, stdout};
use serde_json::Value;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// What one run of the triage scenario produced: the turns' answers and
/// every request the tracker received (method, path, body).
#[derive(Debug, PartialEq)]
struct Trace {
    outputs: Vec<String>,
    requests: Vec<(String, String, String)>,
}

/// The triage scenario with the component at `path`, installed as
/// `triage`: one run (a read, two staged actions), both approved, then a
/// `poll` turn that sees them applied.
async fn triage_scenario(path: &Path, shared_compile: bool) -> Trace {
    let w = World::new();
    if shared_compile {
        langs::seed_compiled(w.home(), path);
    }
    w.kernel
        .install("triage", &read(path), &|_| {})
        .unwrap_or_else(|e| panic!("{} does not install: {e:#}", path.display()));
    w.add_gatekeeper("issues", "issues", Trust::Byo).await;
    w.kernel.new_chat("work", "alice").expect("chat");
    w.kernel
        .introduce("work", "issues", "ISSUES", None, "alice")
        .expect("introduce");

    let mut outputs = Vec::new();
    let mut turn = async |input: &str| {
        let report = w.turn("triage", "work", input).await;
        let out = report.output.unwrap_or_else(|e| {
            panic!(
                "{} failed on {input:?}: {e}\nstderr: {}",
                path.display(),
                report.stderr
            )
        });
        outputs.push(out.clone());
        out
    };
    let ran = turn("").await;
    assert!(ran.starts_with("Read 2 issues from ISSUES."), "{ran}");
    assert!(
        ran.contains("createIssue: #2 pending") && ran.contains("addLabel triaged to #1: #3 pending"),
        "{ran}"
    );
    assert!(
        w.tracker.writes().is_empty(),
        "nothing is sent before a decision"
    );
    let polled = turn("poll 2 3").await;
    assert_eq!(polled, "#2 pending\n#3 pending");

    for id in [2, 3] {
        let decision = w
            .kernel
            .approve(id, "alice")
            .await
            .unwrap_or_else(|e| panic!("approving #{id}: {e:#}"));
        assert!(decision.ok(), "#{id} was applied");
    }
    let polled = turn("poll #2, 3").await;
    assert!(
        polled.starts_with("#2 applied: {") && polled.contains("\n#3 applied: {"),
        "{polled}"
    );
    let refused = turn("poll 99").await;
    assert!(refused.starts_with("#99 error: refused:"), "{refused}");

    let requests = w
        .tracker
        .requests()
        .into_iter()
        .map(|r| (r.method, r.path, r.body))
        .collect();
    Trace { outputs, requests }
}

/// The Rust triage gadget's trace, computed once per test process.
async fn rust_trace() -> &'static Trace {
    static TRACE: tokio::sync::OnceCell<Trace> = tokio::sync::OnceCell::const_new();
    TRACE
        .get_or_init(async || triage_scenario(&guest("triage"), false).await)
        .await
}

async fn same_requests_as_rust(name: &str) {
    let path = langs::guest(name);
    let size = read(&path).len();
    assert!(
        size > 4 << 20,
        "{name} is a big component ({size} bytes), as toolchains with a bundled runtime make"
    );
    let rust = rust_trace().await;
    let trace = triage_scenario(&path, true).await;
    assert_eq!(
        trace.requests, rust.requests,
        "{name} sends the service exactly what the Rust triage sends"
    );
    assert_eq!(
        trace.requests.len(),
        3,
        "one read and two applied actions: {:?}",
        trace.requests
    );
    assert_eq!(trace.outputs, rust.outputs, "{name} answers as Rust triage");
}

#[tokio::test(flavor = "multi_thread")]
async fn python_triage_sends_the_same_requests_as_rust() {
    same_requests_as_rust("triage-py").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn javascript_triage_sends_the_same_requests_as_rust() {
    same_requests_as_rust("triage-js").await;
}
