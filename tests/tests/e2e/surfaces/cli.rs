//! The README tour, command by command, through the real binary as separate
//! processes; and the CLI's contract for errors (one line, exit codes).

use gatehouse_e2e::{TOKEN, World, cli_command, guest, stderr, stdout};
use std::io::Write as _;
use std::process::Stdio;

fn ok(w: &World, args: &[&str]) -> String {
    let o = w.cli(args);
    assert!(
        o.status.success(),
        "gatehouse {args:?} failed: {}{}",
        stdout(&o),
        stderr(&o)
    );
    stdout(&o)
}

#[test]
fn the_readme_tour_works_as_written() {
    let w = World::new();
    let triage = guest("triage");
    let issues = guest("issues");
    let host = w.tracker.host();

    assert!(ok(&w, &["install", triage.to_str().unwrap()]).contains("installed gadget triage"));
    let mut secret = cli_command(w.home(), &["secret", "set", "tracker-token"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    secret
        .stdin
        .take()
        .unwrap()
        .write_all(TOKEN.as_bytes())
        .unwrap();
    assert!(secret.wait().unwrap().success());
    let added = ok(
        &w,
        &[
            "gatekeeper",
            "add",
            issues.to_str().unwrap(),
            "--name",
            "issues",
            "--trust",
            "byo",
            "--allow-host",
            &host,
            "--secret",
            "tracker-token",
        ],
    );
    assert!(added.contains("listIssues"), "{added}");
    ok(&w, &["chat", "new", "work"]);
    ok(&w, &["introduce", "work", "issues", "--key", "ISSUES"]);

    let ran = ok(&w, &["run", "triage", "--chat", "work"]);
    assert!(ran.contains("Read 2 issues"), "{ran}");
    assert!(
        ran.contains("#2 pending") && ran.contains("#3 pending"),
        "{ran}"
    );
    assert_eq!(
        w.tracker.writes().len(),
        0,
        "nothing sent before a decision"
    );

    let pending = ok(&w, &["pending"]);
    assert!(
        pending.contains("#2") && pending.contains("issues:createIssue"),
        "{pending}"
    );
    assert!(
        pending.contains("#3") && pending.contains("issues:addLabel"),
        "{pending}"
    );

    let shown = ok(&w, &["show", "3"]);
    assert!(
        shown.starts_with("Action #3 (pending)\nGatekeeper: issues"),
        "{shown}"
    );
    assert!(shown.contains("Nothing has been sent yet"), "{shown}");

    let approved = ok(&w, &["approve", "3"]);
    assert!(approved.starts_with("#3 applied"), "{approved}");
    let writes = w.tracker.writes();
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0].path, "/issues/1/labels");
    assert!(
        w.tracker.issues()[0]
            .labels
            .contains(&"triaged".to_string())
    );

    let log: serde_json::Value =
        serde_json::from_str(&ok(&w, &["log", "--chat", "work", "--json"])).unwrap();
    let states: Vec<_> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["id"].as_i64().unwrap(),
                e["kind"].as_str().unwrap().to_owned(),
                e["state"].clone(),
            )
        })
        .collect();
    assert_eq!(
        states[0],
        (1, "observation".into(), serde_json::Value::Null)
    );
    assert_eq!(states[1], (2, "action".into(), "pending".into()));
    assert_eq!(states[2], (3, "action".into(), "applied".into()));
    assert_eq!(log[2]["resolved_by"], "alice");
    assert_eq!(log[2]["caller"], "alice");
    assert_eq!(log[2]["gadget"], "triage");

    // The gadget polls its results in a later turn.
    let polled = ok(&w, &["run", "triage", "--chat", "work", "poll 2 3"]);
    assert!(polled.contains("#2 pending"), "{polled}");
    assert!(polled.contains("#3 applied"), "{polled}");

    // Reject, then a second decision on the same action is refused by state.
    assert!(ok(&w, &["reject", "2"]).contains("#2 rejected"));
    let again = w.cli(&["approve", "2"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains("was rejected"),
        "{}",
        stderr(&again)
    );
    assert_eq!(
        w.tracker.writes().len(),
        1,
        "the rejected action was never sent"
    );

    // People, accounts, sharing and blueprints, as the README shows them.
    ok(&w, &["user", "add", "bob"]);
    let mut connect = cli_command(
        w.home(),
        &["account", "connect", "bob", "issues", "--name", "bob"],
    )
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    connect
        .stdin
        .take()
        .unwrap()
        .write_all(TOKEN.as_bytes())
        .unwrap();
    assert!(connect.wait().unwrap().success());
    assert!(ok(&w, &["share", "work", "--with", "bob"]).contains("shared chat work with bob"));
    let opened = ok(&w, &["--as", "bob", "open", "work"]);
    assert!(opened.contains("opened chat work as bob"), "{opened}");
    assert!(
        opened.contains("observing through issues as bob/bob"),
        "{opened}"
    );
    let observations = ok(&w, &["log", "--observations", "--chat", "work"]);
    assert!(observations.contains("issues:listIssues"), "{observations}");
    let blueprint = w.home().join("triage.blueprint.json");
    let blueprint = blueprint.to_str().unwrap();
    ok(&w, &["export", "triage", "-o", blueprint]);
    let imported = ok(
        &w,
        &["--as", "bob", "import", blueprint, "--chat", "bobs-work"],
    );
    assert!(
        imported.contains("ISSUES -> issues as bob/bob"),
        "{imported}"
    );
}

#[test]
fn errors_are_one_line_with_exit_code_1_and_usage_errors_exit_2() {
    let w = World::new();
    for args in [
        vec!["run", "nosuch", "--chat", "work"],
        vec!["introduce", "nochat", "issues", "--key", "X"],
        vec!["show", "99"],
        vec!["approve", "99"],
        vec!["gatekeeper", "trust", "nosuch", "vetted"],
    ] {
        let o = w.cli(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{args:?} printed more than one line: {err}"
        );
    }
    let o = w.cli(&["approve"]);
    assert_eq!(o.status.code(), Some(2), "usage errors exit 2");
    let o = w.cli(&["frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
}

/// `gatehouse log --json | head -1` must not panic when the reader has
/// gone. The reading end of stdout is closed before the command writes, so
/// every line it prints meets a closed pipe; it still finishes its work and
/// exits 0, with nothing on stderr.
#[test]
fn a_closed_pipe_on_stdout_stops_the_printing_not_the_command() {
    let w = World::new();
    ok(&w, &["chat", "new", "work"]);
    ok(&w, &["user", "add", "bob"]);
    for args in [
        vec!["log", "--json"],
        vec!["log"],
        vec!["chats", "--json"],
        vec!["chats"],
        vec!["users"],
    ] {
        let mut child = cli_command(w.home(), &args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // `| head -1` that read nothing: the pipe is closed at once.
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// The log's lines carry no colour escapes when stderr is not a
/// terminal (a pipe here, as under a service manager or a log collector).
/// A damaged compiled-cache entry makes the next process warn as it
/// rebuilds it: that warning line must read as plain text.
#[test]
fn a_warning_on_a_piped_stderr_carries_no_escape_sequences() {
    let w = World::new();
    w.install("script");
    w.kernel.person("alice").new_chat("work").expect("chat");
    let compiled = gatehouse_e2e::compiled_files(w.home());
    assert_eq!(compiled.len(), 1, "{compiled:?}");
    std::fs::write(&compiled[0], b"not a compiled component ".repeat(400))
        .expect("the cache entry is writable");
    let o = cli_command(
        w.home(),
        &["run", "script", "--chat", "work", r#"{"steps": []}"#],
    )
    .stderr(Stdio::piped())
    .output()
    .expect("the cli runs");
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    let warning = err
        .lines()
        .find(|l| l.contains("compiled cache entry is damaged"))
        .unwrap_or_else(|| panic!("the rebuild is logged as a warning: {err:?}"));
    assert!(warning.contains("WARN"), "{warning:?}");
    assert!(!err.contains('\u{1b}'), "no escape sequence: {err:?}");
}
