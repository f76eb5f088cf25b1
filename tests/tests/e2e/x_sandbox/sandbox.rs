//! SPEC C1, C4, X1, X2: gadgets and gatekeepers run with no ambient
//! authority; a guest that loops or balloons loses only its own call, and the
//! host carries on serving everyone else.

use gatehouse::Limits;
use gatehouse::store::Trust;
use gatehouse_e2e::{
    TOKEN, World, call, limits_with_deadlines, stderr, stdout, test_limits, wait_until,
};
use gatehouse_services::tracker::Tracker;
use serde_json::{Value, json};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// An environment variable of the test process that no guest may see.
const CANARY_NAME: &str = "GATEHOUSE_TEST_CANARY";
const CANARY_VALUE: &str = "canary-5d1e7a-visible-only-to-the-host";

fn set_canary() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: std serialises its own environment accesses; no test in
        // this binary reads the environment from foreign code, and the value
        // is set once, before any world using it is created.
        unsafe { std::env::set_var(CANARY_NAME, CANARY_VALUE) };
    });
    assert_eq!(std::env::var(CANARY_NAME).as_deref(), Ok(CANARY_VALUE));
}

/// `script` and `hostile` installed, `issues` introduced into chat `work`
/// as ISSUES.
async fn world(limits: Limits) -> World {
    let w = World::with_limits(limits);
    w.install("script");
    w.install("hostile");
    w.add_gatekeeper("issues", "issues", Trust::Byo).await;
    w.chat_with("work", "alice", &[("issues", "ISSUES")]);
    w
}

/// As [`world`], plus the `rogue` gatekeeper (allowed only the tracker, with
/// the tracker's secret) introduced as ROGUE.
async fn world_with_rogue(limits: Limits) -> World {
    let w = world(limits).await;
    w.add_gatekeeper("rogue", "rogue", Trust::Byo).await;
    w.introduce("work", "alice", &[("rogue", "ROGUE")]);
    w
}

fn list_issues_script() -> String {
    json!({"steps": [call("ISSUES", "listIssues", json!({}))]}).to_string()
}

/// The parsed answer of a successful `script` turn.
fn script_answer(report: &gatehouse::TurnReport) -> Value {
    let out = report
        .output
        .as_ref()
        .unwrap_or_else(|e| panic!("the script turn failed: {e}"));
    serde_json::from_str(out).unwrap_or_else(|e| panic!("script output {out:?}: {e}"))
}

/// A `listIssues` answer lists the tracker's two seeded issues.
fn assert_lists_seeded_issues(step: &Value) {
    let titles: Vec<&str> = step["done"]
        .as_array()
        .unwrap_or_else(|| panic!("expected the issue list, got {step}"))
        .iter()
        .filter_map(|i| i["title"].as_str())
        .collect();
    assert_eq!(
        titles,
        [
            "Login page shows a blank screen",
            "Export to CSV drops the header row"
        ],
        "{step}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spinning_gadget_is_interrupted_while_other_gadgets_are_served() {
    let deadline = Duration::from_secs(2);
    let w = world(limits_with_deadlines(deadline, Duration::from_secs(5))).await;
    // Warm up: everything the reads need is loaded before the race starts.
    assert_lists_seeded_issues(
        &w.script("work", json!([call("ISSUES", "listIssues", json!({}))]))
            .await[0],
    );

    let started: Arc<OnceLock<Instant>> = Arc::new(OnceLock::new());
    let spinner = {
        let (kernel, started) = (w.kernel.clone(), started.clone());
        tokio::spawn(async move {
            let _ = started.set(Instant::now());
            let report = kernel.operator().run("hostile", "work", "spin").await;
            (report, Instant::now())
        })
    };
    assert!(
        wait_until(Duration::from_secs(30), || started.get().is_some()),
        "the spinning turn never started"
    );
    let spin_start = *started.get().expect("set above");

    // Five reads in sequence, each its own turn of another gadget.
    let reader = {
        let kernel = w.kernel.clone();
        tokio::spawn(async move {
            let mut finished = Vec::new();
            for _ in 0..5 {
                let report = kernel
                    .operator()
                    .run("script", "work", &list_issues_script())
                    .await;
                finished.push((report, Instant::now()));
            }
            finished
        })
    };
    let reads = reader.await.expect("the reading task did not panic");
    let spinner_still_running = !spinner.is_finished();
    let (spun, spin_end) = spinner.await.expect("the spinning task did not panic");

    for (i, (report, _)) in reads.iter().enumerate() {
        let report = report
            .as_ref()
            .unwrap_or_else(|e| panic!("read turn {i} was not run: {e:#}"));
        assert_lists_seeded_issues(&script_answer(report)[0]);
    }
    let last_read = reads.last().expect("five reads").1;
    assert!(
        spinner_still_running,
        "the reads finished only after the spinner was stopped ({:?} after it started)",
        last_read - spin_start
    );
    assert!(
        last_read < spin_end,
        "the last read finished {:?} after the spinner was stopped",
        last_read - spin_end
    );

    // The spinner was stopped at its deadline, with a message that says so.
    let spun = spun.expect("the kernel ran the spinning turn");
    let err = spun
        .output
        .expect_err("a gadget that loops forever cannot succeed");
    assert!(
        err.contains("hostile") && err.contains("deadline") && err.contains("interrupted"),
        "the error should say the gadget ran past its deadline: {err:?}"
    );
    let spun_for = spin_end - spin_start;
    assert!(
        spun_for >= deadline.mul_f32(0.9) && spun_for < deadline + Duration::from_secs(15),
        "the spinner ran {spun_for:?} for a {deadline:?} deadline"
    );
    assert_eq!(
        w.tracker.requests().len(),
        6,
        "every read reached the service"
    );

    // Afterwards the host serves new turns of both gadgets.
    assert_lists_seeded_issues(
        &w.script("work", json!([call("ISSUES", "listIssues", json!({}))]))
            .await[0],
    );
    let printed = w.turn("hostile", "work", "print").await;
    assert!(printed.output.is_ok(), "{:?}", printed.output);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_memory_bomb_traps_only_its_own_turn() {
    let w = world(test_limits()).await;
    let mib = test_limits().memory_bytes >> 20;
    let ballooned = w.turn("hostile", "work", "balloon").await;
    let err = ballooned
        .output
        .expect_err("a gadget that allocates without bound cannot succeed");
    assert!(
        err.contains("hostile") && err.contains(&format!("memory limit of {mib} MiB")),
        "the error should name the memory limit: {err:?}"
    );

    // The next turn, of another gadget and of the same one, works.
    let out = w
        .script("work", json!([call("ISSUES", "listIssues", json!({}))]))
        .await;
    assert_lists_seeded_issues(&out[0]);
    let printed = w.turn("hostile", "work", "print").await;
    assert!(printed.output.is_ok(), "{:?}", printed.output);
}

/// Every turn gets a fresh instance, and the pooled slot it runs in is
/// reused by the next turn of the same gadget with its pages kept mapped
/// (`runtime::KEEP_RESIDENT`): what one turn wrote must still be gone.
/// `remember` reports what it finds of an earlier instance (a static, and
/// pages it grows) and leaves its own marks there; `balloon` fills every
/// page up to the memory limit first.
#[tokio::test(flavor = "multi_thread")]
async fn a_fresh_instance_remembers_nothing() {
    let w = world(test_limits()).await;
    let clean = json!({ "static": 0, "dirty_bytes": 0 });
    for (i, input) in ["remember", "remember", "balloon", "remember", "remember"]
        .into_iter()
        .enumerate()
    {
        let report = w.turn("hostile", "work", input).await;
        if input == "balloon" {
            assert!(report.output.is_err(), "{:?}", report.output);
            continue;
        }
        let found: Value = serde_json::from_str(
            report
                .output
                .as_deref()
                .unwrap_or_else(|e| panic!("turn {i} ({input}) failed: {e}")),
        )
        .expect("remember answers JSON");
        assert_eq!(
            found, clean,
            "turn {i} found what an earlier instance left in memory"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_looping_or_crashing_gatekeeper_fails_only_that_call() {
    let gatekeeper_deadline = Duration::from_secs(1);
    let w = world_with_rogue(limits_with_deadlines(
        Duration::from_secs(60),
        gatekeeper_deadline,
    ))
    .await;
    let began = Instant::now();
    let out = w
        .script(
            "work",
            json!([
                call("ROGUE", "spin", json!({})),
                call("ISSUES", "listIssues", json!({})),
                call("ROGUE", "crash", json!({})),
                call("ISSUES", "listIssues", json!({})),
            ]),
        )
        .await;
    let took = began.elapsed();

    let spin = &out[0]["error"];
    assert_eq!(spin["kind"], "service", "{}", out[0]);
    let spin_msg = spin["message"].as_str().unwrap_or_default();
    assert!(
        spin_msg.contains("rogue") && spin_msg.contains("deadline") && !spin_msg.contains('\n'),
        "the looping tool's error should be one line naming the gatekeeper and its deadline: {spin_msg:?}"
    );
    assert_lists_seeded_issues(&out[1]);

    let crash = &out[2]["error"];
    assert_eq!(crash["kind"], "service", "{}", out[2]);
    let crash_msg = crash["message"].as_str().unwrap_or_default();
    assert!(
        crash_msg.contains("rogue") && crash_msg.contains("crashed") && !crash_msg.contains('\n'),
        "the crashing tool's error should be one line saying the gatekeeper crashed: {crash_msg:?}"
    );
    assert_lists_seeded_issues(&out[3]);
    assert!(
        took >= gatekeeper_deadline.mul_f32(0.9) && took < Duration::from_secs(30),
        "the turn took {took:?}; the looping tool should cost about its {gatekeeper_deadline:?} deadline"
    );

    // The kernel serves the next call, of the same gatekeeper too.
    let next = w
        .script(
            "work",
            json!([
                call("ISSUES", "listIssues", json!({})),
                call("ROGUE", "peek", json!({}))
            ]),
        )
        .await;
    assert_lists_seeded_issues(&next[0]);
    assert!(next[1]["done"].is_object(), "{}", next[1]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gadget_finds_no_files_directories_environment_or_sockets() {
    set_canary();
    let w = world(test_limits()).await;
    let report = w.turn("hostile", "work", "probe").await;
    let text = report
        .output
        .as_ref()
        .unwrap_or_else(|e| panic!("the probe turn failed: {e}"));
    let found: Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("probe output {text:?}: {e}"));

    let file = found["file"].as_str().unwrap_or_default();
    assert!(
        file.starts_with("error:"),
        "/etc/passwd was readable: {file:?}"
    );
    assert!(
        found["dir"]
            .as_str()
            .is_some_and(|d| d.starts_with("error:")),
        "/ could be listed: {}",
        found["dir"]
    );
    assert_eq!(found["env"], json!([]), "the environment is empty");
    let socket = found["socket"].as_str().unwrap_or_default();
    assert!(
        socket.starts_with("error:"),
        "a socket was opened: {socket:?}"
    );
    assert!(
        !text.contains(CANARY_VALUE) && !text.contains(TOKEN),
        "the host's environment or a secret leaked into the gadget: {text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn gadget_output_is_captured_in_the_turn_report_not_printed_by_the_host() {
    let w = world(test_limits()).await;
    let report = w.turn("hostile", "work", "print").await;
    assert_eq!(
        report.output.as_deref(),
        Ok("printed \"hello from hostile\" to stdout and stderr")
    );
    assert_eq!(report.stdout, "hello from hostile\n");
    assert_eq!(report.stderr, "hello from hostile\n");

    // Through the CLI, the process's stdout carries only the report...
    let o = w.cli(&["run", "hostile", "--chat", "work", "--json", "print"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let parsed: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("stdout must be exactly the JSON report ({e}): {text:?}"));
    assert_eq!(parsed["stdout"], "hello from hostile\n", "{parsed}");
    assert_eq!(parsed["stderr"], "hello from hostile\n", "{parsed}");
    // ...and, without --json, only the gadget's answer.
    let o = w.cli(&["run", "hostile", "--chat", "work", "print"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "printed \"hello from hostile\" to stdout and stderr\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gatekeeper_reaches_only_its_allowed_hosts_and_never_holds_the_secret() {
    set_canary();
    let w = world_with_rogue(test_limits()).await;
    let other = Tracker::builder()
        .token("another-token")
        .issue("Somebody else's issue", &[])
        .start()
        .expect("a second tracker starts");

    let out = w
        .script(
            "work",
            json!([
                call("ROGUE", "fetch", json!({"url": format!("{}/issues", w.tracker.url())})),
                call("ROGUE", "fetch", json!({"url": format!("{}/issues", other.url())})),
                call("ROGUE", "peek", json!({})),
                {"env": true},
                {"tools": "ROGUE"},
            ]),
        )
        .await;

    // The allowed host answers, and the kernel, not the component, signed in.
    assert_eq!(out[0]["done"]["status"], 200, "{}", out[0]);
    let body = out[0]["done"]["body"].as_str().unwrap_or_default();
    assert!(body.contains("Login page shows a blank screen"), "{body}");
    let received = w.tracker.requests();
    assert_eq!(received.len(), 1, "{received:?}");
    assert_eq!(received[0].path, "/issues");
    assert_eq!(
        received[0].authorization.as_deref(),
        Some(format!("Bearer {TOKEN}").as_str()),
        "the kernel injects the stored credential"
    );

    // Any other host is refused before anything is sent.
    let refused = &out[1]["error"];
    assert_eq!(refused["kind"], "service", "{}", out[1]);
    let msg = refused["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains(&other.host())
            && msg.contains("the kernel refused")
            && msg.contains("before it was sent"),
        "the refusal should name the host and say it was denied: {msg:?}"
    );
    assert_eq!(
        other.requests().len(),
        0,
        "nothing reached the host that was not allowed"
    );

    // The gatekeeper's own sandbox holds no environment and no files.
    let peek = &out[2]["done"];
    assert_eq!(peek["env"], json!([]), "{peek}");
    let root = peek["root"].as_array().cloned().unwrap_or_default();
    assert!(
        !root.is_empty()
            && root
                .iter()
                .all(|e| e.as_str().is_some_and(|e| e.starts_with("error:"))),
        "the gatekeeper could list /: {root:?}"
    );
    let peek_text = peek.to_string();
    assert!(
        !peek_text.contains(TOKEN) && !peek_text.contains(CANARY_VALUE),
        "{peek_text}"
    );

    // Nothing any step handed to the gadget contains the secret.
    let everything = out.to_string();
    assert!(
        !everything.contains(TOKEN),
        "the secret reached the gadget: {everything}"
    );
    assert!(!everything.contains(CANARY_VALUE), "{everything}");
}
