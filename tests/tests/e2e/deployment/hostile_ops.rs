//! Operations under pressure: a liveness file removed mid-send,
//! two inboxes on one home, a database removed under a running home, a full
//! disk, processes killed while starting, closed pipes, and numbers no
//! float can hold. Real processes on a real home throughout.

use gatehouse::store::{ActionState, Trust};
use gatehouse_e2e::{
    World, call, cli_command, guest, keys_ignored, label_step, pending_id, signal, stderr, stdout,
};
use gatehouse_services::tracker::Fault;
use serde_json::json;
use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant, SystemTime};

const PATIENCE: Duration = Duration::from_secs(60);

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < PATIENCE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run_files(home: &Path, suffix: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(home.join("run"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str().map(str::to_owned))
                .filter(|n| n.ends_with(suffix))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread")]
async fn a_removed_liveness_file_never_makes_approve_print_applied() {
    // Without an idempotency key, recovery fails a claim it takes for
    // interrupted (with one, it would re-send it: see exactly_once.rs).
    let w = World::standard_with(Trust::Byo, keys_ignored()).await;
    let id = w.stage_label_on("work", 1, "slow").await;
    w.tracker.inject(Fault::Slow(Duration::from_secs(3)), 1);
    let approving = cli_command(w.home(), &["approve", &id.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the write to reach the service", || {
        w.tracker.writes().len() == 1
    });
    // Someone tidies `run/` while the send is out...
    let mine = format!("{}-", approving.id());
    for f in run_files(w.home(), ".lock") {
        if f.starts_with(&mine) {
            std::fs::remove_file(w.home().join("run").join(f)).unwrap();
        }
    }
    // ...and the next command takes the claim for an interrupted one.
    let o = w.cli(&["pending"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = approving.wait_with_output().unwrap();
    let a = w.kernel.inspect().action(id).unwrap().unwrap();
    assert_eq!(a.state, ActionState::Failed, "the ledger says failed");
    let printed = format!("{}{}", stdout(&o), stderr(&o));
    assert!(
        !printed.contains("applied:"),
        "approve must print what the ledger says: {printed}"
    );
    assert!(
        printed.contains(&format!(
            "#{id} failed (not retryable): interrupted after sending"
        )),
        "{printed}"
    );
    assert_eq!(o.status.code(), Some(1));
}

/// Start `gatehouse serve --port 0`; returns the process and its address.
fn start_serve(home: &Path) -> (Child, String) {
    let mut child = cli_command(home, &["serve", "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .trim_end_matches('/')
        .to_owned();
    (child, url)
}

#[test]
fn stopping_one_inbox_leaves_the_other_s_address() {
    let home = tempfile::tempdir().unwrap();
    let o = cli_command(home.path(), &["user", "add", "alice"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let (mut first, first_url) = start_serve(home.path());
    let (mut second, second_url) = start_serve(home.path());
    assert_ne!(first_url, second_url);
    signal(first.id(), "TERM");
    assert!(first.wait().unwrap().success());
    let o = cli_command(home.path(), &["token", "create", "alice"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with(&format!("{second_url}/signin?token=")),
        "the link points at the inbox still running ({second_url}): {}",
        stdout(&o)
    );
    assert_eq!(run_files(home.path(), ".url").len(), 1);
    signal(second.id(), "TERM");
    assert!(second.wait().unwrap().success());
    assert!(run_files(home.path(), ".url").is_empty());
}

#[test]
fn a_removed_database_is_never_replaced_by_an_empty_one() {
    let home = tempfile::tempdir().unwrap();
    let o = cli_command(home.path(), &["chat", "new", "work"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let (mut serving, _) = start_serve(home.path());
    for f in ["gatehouse.db", "gatehouse.db-wal", "gatehouse.db-shm"] {
        let _ = std::fs::remove_file(home.path().join(f));
    }
    // The inbox notices and stops, saying why.
    let status = {
        let start = Instant::now();
        loop {
            if let Some(s) = serving.try_wait().unwrap() {
                break s;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "serve kept running on a deleted database"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    assert_eq!(status.code(), Some(1));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut serving.stderr.take().unwrap(), &mut err).unwrap();
    assert!(
        err.contains("was removed or replaced while serving"),
        "{err}"
    );
    // The next command refuses rather than start again empty.
    let o = cli_command(home.path(), &["chats"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("is missing"), "{}", stderr(&o));
    assert!(!home.path().join("gatehouse.db").exists());
}

#[test]
fn a_full_disk_is_reported_as_full_not_as_damage() {
    let home = tempfile::tempdir().unwrap();
    let o = cli_command(home.path(), &["chat", "new", "work"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    // A file-size limit makes every write past it fail as on a full disk
    // (the signal it raises is ignored, as a full disk raises none).
    let bin = gatehouse_e2e::cli_binary();
    let script = format!(
        "trap '' XFSZ; ulimit -f 8; exec '{}' install '{}'",
        bin.display(),
        guest("script").display()
    );
    let out = std::process::Command::new("sh")
        .args(["-c", &script])
        .env("GATEHOUSE_HOME", home.path())
        .env("GATEHOUSE_USER", "alice")
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        !err.contains("damaged") && !err.contains("move it aside"),
        "a full disk is not damage: {err}"
    );
    assert!(err.contains("the disk is full"), "{err}");
    // With room again, the same home works: nothing was damaged.
    let o = cli_command(home.path(), &["chats"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("work"));
}

#[test]
fn a_read_only_database_is_reported_as_read_only_not_as_damage() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let o = cli_command(&home, &["chat", "new", "work"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    // Everything readable, nothing writable.
    let mode =
        |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    mode(dir.path(), 0o755);
    for entry in std::fs::read_dir(&home).unwrap().flatten() {
        let p = entry.path();
        mode(&p, if p.is_dir() { 0o555 } else { 0o444 });
    }
    mode(&home, 0o555);
    // Root may write anything: drop to `nobody` to see what a person sees.
    let root = std::process::Command::new("id").arg("-u").output().unwrap();
    let mut cmd = if stdout(&root).trim() == "0" {
        let mut c = std::process::Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(gatehouse_e2e::cli_binary());
        c
    } else {
        std::process::Command::new(gatehouse_e2e::cli_binary())
    };
    // The home's own key file is owner-only, and one others may read is
    // refused as a key: the person is given the key itself, as an operator
    // holding it would give it.
    let key = std::fs::read_to_string(home.join("gatehouse.key")).unwrap();
    let o = cmd
        .arg("chats")
        .env_clear()
        .env("GATEHOUSE_HOME", &home)
        .env("GATEHOUSE_USER", "alice")
        .env("GATEHOUSE_KEY", key.trim())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("read-only or not writable"), "{err}");
    assert!(
        !err.contains("damaged") && !err.contains("move it aside"),
        "{err}"
    );
    // Writable again, so the directory can be removed.
    mode(&home, 0o755);
    for entry in std::fs::read_dir(&home).unwrap().flatten() {
        let p = entry.path();
        mode(&p, if p.is_dir() { 0o755 } else { 0o644 });
    }
}

#[test]
fn half_made_lock_files_are_swept() {
    let home = tempfile::tempdir().unwrap();
    let o = cli_command(home.path(), &["chats"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let run = home.path().join("run");
    let stale = run.join("4242-deadbeef.lock.new");
    let fresh = run.join("4243-cafe.lock.new");
    std::fs::write(&stale, b"").unwrap();
    std::fs::write(&fresh, b"").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&stale)
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(600))
        .unwrap();
    // Processes killed at once, before they could finish starting.
    for _ in 0..5 {
        let mut c = cli_command(home.path(), &["chats"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let _ = c.kill();
        let _ = c.wait();
    }
    let o = cli_command(home.path(), &["chats"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stale.exists(), "a stale half-made lock file is removed");
    assert!(
        fresh.exists(),
        "a recent one may belong to a process starting now"
    );
    assert!(
        run_files(home.path(), ".lock").is_empty(),
        "{:?}",
        run_files(home.path(), "")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_closed_pipe_never_panics_a_command() {
    let w = World::standard(Trust::Byo).await;
    let out = w
        .script(
            "work",
            json!([call("ISSUES", "listIssues", json!({})), label_step(1, "a"),]),
        )
        .await;
    let id = pending_id(&out[1]).to_string();
    for args in [
        vec!["log", "--json"],
        vec!["log"],
        vec!["pending"],
        vec!["gatekeepers", "--json"],
        vec!["show", id.as_str()],
        vec!["approve", id.as_str()],
    ] {
        let mut child = cli_command(w.home(), &args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The reader goes away before anything is written.
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        let err = stderr(&o);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
    }
    // The approve still did its work.
    let a = w
        .kernel
        .inspect()
        .action(id.parse().unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(a.state, ActionState::Applied);
}

#[tokio::test(flavor = "multi_thread")]
async fn numbers_reach_the_approver_exactly_as_they_will_be_sent() {
    let w = World::new();
    w.install("script");
    w.front(
        "overflow",
        "overflow",
        Trust::Byo,
        vec![w.tracker.host()],
        None,
        Vec::new(),
    )
    .await
    .expect("the gatekeeper is added");
    w.chat_with("work", "alice", &[("overflow", "OVER")]);
    // Numbers past what every reader reads alike are refused (what the
    // approver is shown must be what the service acts on); every number
    // within it reaches the approver and the service as written, digit for
    // digit.
    let beyond = r#"{"amount": 123456789012345678901234567890, "rate": 0.30000000000000001, "id": 18446744073709551617}"#;
    let raw =
        r#"{"amount": 9007199254740991, "rate": 0.30000000000000001, "id": -9007199254740991}"#;
    let out = w
        .script(
            "work",
            json!([
                {"call": {"key": "OVER", "tool": "record", "raw_args": beyond}},
                {"call": {"key": "OVER", "tool": "record", "raw_args": raw}},
            ]),
        )
        .await;
    assert_eq!(out[0]["error"]["kind"], "invalid-args", "{}", out[0]);
    let id = pending_id(&out[1]).to_string();
    let exact = [
        "9007199254740991",
        "0.30000000000000001",
        "-9007199254740991",
    ];
    let shown = stdout(&w.cli(&["show", &id]));
    let stored = stdout(&w.cli(&["show", &id, "--json"]));
    for n in exact {
        assert!(shown.contains(n), "the prompt shows {n} exactly: {shown}");
        assert!(
            stored.contains(n),
            "the stored arguments keep {n}: {stored}"
        );
    }
    let o = w.cli(&["approve", &id]);
    assert!(o.status.success(), "{}", stderr(&o));
    // What the gatekeeper received, as it received it.
    let result = w
        .kernel
        .inspect()
        .action(id.parse().unwrap())
        .unwrap()
        .unwrap()
        .result
        .unwrap();
    let received: serde_json::Value = serde_json::from_str(&result).unwrap();
    let received = received["received"].as_str().unwrap().to_owned();
    for n in exact {
        assert!(received.contains(n), "sent {n} exactly: {received}");
    }
}
