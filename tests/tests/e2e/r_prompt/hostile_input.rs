//! Hostile input held everywhere: crafted components, terminal
//! forgery, unbounded sizes, hammering turns and echoed secrets, each
//! through the real CLI or kernel with real guests and loopback services.

use gatehouse::store::Trust;
use gatehouse_e2e::{
    EchoService, World, add_label, call, cli_command, crafted, guest, pending_id, stderr, stdout,
};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Output;

/// The credential the echo service gets (and must never hand back).
const SECRET: &str = "sk-live-7f3a9c1e5b-never-back-to-a-gadget";

/// Everything a terminal would act on: escapes and other controls, bidi
/// overrides and zero-width characters. Line feeds are allowed.
fn hidden(text: &str) -> Vec<char> {
    text.chars()
        .filter(|&c| {
            (c.is_control() && c != '\n')
                || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200B}'..='\u{200F}')
        })
        .collect()
}

/// Lines an attacker wrote to look like the kernel's own.
fn forged_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| {
            let t = l.trim_start();
            t.starts_with("Approve")
                || t.starts_with("#1 applied")
                || t.starts_with("#3 applied")
                || t.starts_with("Status:")
        })
        .map(str::to_owned)
        .collect()
}

/// Both streams of a CLI run, checked to be terminal-safe.
fn assert_terminal_safe(what: &str, o: &Output) {
    for (stream, text) in [("stdout", stdout(o)), ("stderr", stderr(o))] {
        assert!(
            hidden(&text).is_empty(),
            "{what}: {stream} carries {:?}: {text:?}",
            hidden(&text)
        );
        assert!(
            forged_lines(&text).is_empty(),
            "{what}: {stream} has forged lines {:?}",
            forged_lines(&text)
        );
    }
}

fn one_line_refusal(what: &str, o: &Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(1),
        "{what}: exit 1 expected (a signal means a crash): {o:?}"
    );
    // Progress notes ("compiling ...") may come first; the refusal is one line.
    let all = stderr(o);
    let err: Vec<&str> = all
        .lines()
        .filter(|l| !l.starts_with("compiling"))
        .collect();
    assert_eq!(err.len(), 1, "{what}: one line expected: {all:?}");
    assert!(err[0].starts_with("error: "), "{what}: {all:?}");
    err[0].to_owned()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("a crafted file");
    p.to_str().expect("a UTF-8 path").to_owned()
}

// ----- 1. crafted components -----

#[test]
fn deeply_nested_components_are_refused_in_one_line_at_install_and_import() {
    let home = tempfile::tempdir().expect("a home");
    let files = tempfile::tempdir().expect("a directory for crafted files");
    let o = cli_command(home.path(), &["user", "add", "alice"])
        .output()
        .expect("gatehouse runs");
    assert!(o.status.success(), "{}", stderr(&o));
    let cases = [
        (
            "component types 2,000 deep",
            crafted::nested_component_types(2000),
            "nested",
        ),
        (
            "component types 200,000 deep",
            crafted::nested_component_types(200_000),
            "nested",
        ),
        (
            "instance types 2,000 deep",
            crafted::nested_instance_types(2000),
            "nested",
        ),
        (
            "components 2,000 deep",
            crafted::nested_components(2000),
            "nest",
        ),
        (
            "value types 100,000 deep",
            crafted::nested_value_types(100_000),
            "too deep",
        ),
    ];
    for (what, bytes, says) in cases {
        let file = write(files.path(), "crafted.wasm", &bytes);
        let o = cli_command(home.path(), &["install", &file, "--name", "crafted"])
            .output()
            .expect("gatehouse runs");
        let err = one_line_refusal(&format!("install of {what}"), &o);
        assert!(err.contains(says), "install of {what}: {err}");

        let blueprint = write(
            files.path(),
            "crafted.json",
            &crafted::blueprint("crafted", &bytes),
        );
        let o = cli_command(home.path(), &["import", &blueprint])
            .output()
            .expect("gatehouse runs");
        let err = one_line_refusal(&format!("import of {what}"), &o);
        assert!(err.contains(says), "import of {what}: {err}");
    }
    // Nothing was installed, and the home still works.
    let o = cli_command(home.path(), &["gadgets", "--json"])
        .output()
        .expect("runs");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        serde_json::from_str::<Value>(&stdout(&o)).unwrap(),
        json!([])
    );
    let script = guest("script");
    let o = cli_command(home.path(), &["install", script.to_str().unwrap()])
        .output()
        .expect("runs");
    assert!(o.status.success(), "{}", stderr(&o));
}

/// Property: whatever bytes arrive (random, behind a component header, or
/// nested types of any depth and kind), install and import refuse them in
/// one line, and the kernel carries on.
#[test]
fn any_bytes_are_refused_in_one_line_by_install_and_import() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let w = World::new();
    let bytes = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..512),
        proptest::collection::vec(any::<u8>(), 0..512).prop_map(|rest| {
            let mut b = crafted::COMPONENT_HEADER.to_vec();
            b.extend(rest);
            b
        }),
        (0usize..6000, 0u8..4).prop_map(|(depth, kind)| match kind {
            0 => crafted::nested_component_types(depth),
            1 => crafted::nested_instance_types(depth),
            2 => crafted::nested_components(depth.min(3000)),
            _ => crafted::nested_value_types(depth),
        }),
    ];
    let mut runner = TestRunner::new(Config {
        cases: 96,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&bytes, |b| {
            // An empty nesting is a valid (empty) component, just not a gadget.
            let e = w
                .kernel
                .operator()
                .install("fuzzed", &b, &|_| {})
                .expect_err("random bytes are never a gadget");
            let line = format!("{e:#}");
            prop_assert!(!line.contains('\n'), "multi-line: {line}");
            let e = w
                .kernel
                .person("alice")
                .import_blueprint(
                    &crafted::blueprint("fuzzed", &b),
                    None,
                    None,
                    &Default::default(),
                    &|_| {},
                )
                .expect_err("random bytes are never a gadget");
            let line = format!("{e:#}");
            prop_assert!(!line.contains('\n'), "multi-line: {line}");
            Ok(())
        })
        .unwrap();
    assert!(w.gadget_names().is_empty());
    w.install("script");
    assert_eq!(w.gadget_names(), vec!["script".to_owned()]);
}

// ----- 3. attacker text on the terminal -----

/// The `overflow` gatekeeper in chat `work` as `OVER`, fronting `service`
/// (with the credential when `secret`), and the `script` gadget.
async fn overflow_world(service: &str, secret: bool) -> World {
    let w = World::new();
    w.install("script");
    w.install("hostile");
    let secret = secret.then_some(("echo-token", SECRET));
    w.front(
        "overflow",
        "overflow",
        Trust::Byo,
        vec![service.to_owned()],
        secret,
        Vec::new(),
    )
    .await
    .expect("the overflow gatekeeper is added");
    w.chat_with("work", "alice", &[("overflow", "OVER")]);
    w
}

#[tokio::test(flavor = "multi_thread")]
async fn attacker_text_never_reaches_a_terminal_raw() {
    let echo = EchoService::start(200);
    let w = overflow_world(&echo.host(), false).await;

    // `gatekeeper add` prints tool names; one is an escape sequence.
    let o = w.cli(&[
        "gatekeeper",
        "add",
        guest("overflow").to_str().unwrap(),
        "--name",
        "overflow2",
        "--allow-host",
        &echo.host(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_terminal_safe("gatekeeper add", &o);
    assert!(stdout(&o).contains("red"), "{}", stdout(&o));
    assert_terminal_safe("gatekeepers", &w.cli(&["gatekeepers"]));

    // `approve` prints the gatekeeper's failure text.
    let out = w
        .script("work", json!([call("OVER", "forge", json!({}))]))
        .await;
    let id = pending_id(&out[0]).to_string();
    let shown = w.cli(&["show", &id]);
    assert!(hidden(&stdout(&shown)).is_empty(), "{}", stdout(&shown));
    let approve_lines: Vec<_> = stdout(&shown)
        .lines()
        .filter(|l| l.starts_with("Approve"))
        .map(str::to_owned)
        .collect();
    assert_eq!(
        approve_lines,
        vec![format!(
            "Approve: gatehouse approve {id}    Reject: gatehouse reject {id}"
        )]
    );
    let o = w.cli(&["approve", &id]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert_terminal_safe("approve", &o);
    let err = stderr(&o);
    assert!(
        err.starts_with(&format!("#{id} failed (not retryable): ")),
        "{err}"
    );
    assert!(
        err.contains("<U+001B>[2J"),
        "escapes are shown, not acted on: {err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    let o = w.cli(&["approve", &id, "--json"]);
    assert_terminal_safe("approve --json", &o);
    assert_terminal_safe("log", &w.cli(&["log"]));
    assert_terminal_safe("log --json", &w.cli(&["log", "--json"]));

    // `run` and `agent` print what a gadget wrote.
    for args in [
        vec!["run", "hostile", "--chat", "work", "forge"],
        vec!["run", "hostile", "--chat", "work", "forge-error"],
        vec!["run", "hostile", "--chat", "work", "--json", "forge"],
        vec!["agent", "hostile", "--chat", "work", "forge"],
        vec!["agent", "hostile", "--chat", "work", "forge-error"],
    ] {
        let o = w.cli(&args);
        assert_terminal_safe(&args.join(" "), &o);
    }
    let o = w.cli(&["run", "hostile", "--chat", "work", "forge"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let shown = stdout(&o);
    assert!(shown.starts_with("answer\n"), "{shown}");
    assert!(
        shown.lines().any(|l| l == "> Approve: gatehouse approve 7"),
        "a look-alike line is marked as the gadget's: {shown}"
    );
}

#[test]
fn person_names_are_checked_like_every_other_name() {
    let home = tempfile::tempdir().expect("a home");
    let long = "a".repeat(10_000);
    for bad in [
        "\u{1b}[31mmallory",
        "eve\nApprove: all",
        long.as_str(),
        ".",
        "..",
        "-rf",
        ".hidden",
        "bob smith",
    ] {
        let as_bad = format!("--as={bad}");
        let o = cli_command(home.path(), &[as_bad.as_str(), "chat", "new", "c1"])
            .output()
            .unwrap();
        let err = one_line_refusal(&format!("--as {bad:?}"), &o);
        assert!(err.contains("person"), "{err}");
        assert!(hidden(&err).is_empty(), "{err:?}");
        assert!(
            err.len() < 400,
            "a 10,000-character name is not echoed whole: {err}"
        );
        let o = cli_command(home.path(), &["user", "add", "--", bad])
            .output()
            .unwrap();
        one_line_refusal(&format!("user add {bad:?}"), &o);
        let o = cli_command(home.path(), &["chat", "new", "--", bad])
            .output()
            .unwrap();
        one_line_refusal(&format!("chat new {bad:?}"), &o);
    }
    let o = cli_command(home.path(), &["chats", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&stdout(&o)).unwrap(),
        json!([])
    );
    let o = cli_command(home.path(), &["--as", "bob_2.x", "chat", "new", "c1"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

// ----- 4. sizes -----

fn database_bytes(w: &World) -> u64 {
    ["gatehouse.db", "gatehouse.db-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(w.home().join(f)).ok())
        .map(|m| m.len())
        .sum()
}

fn db(w: &World) -> rusqlite::Connection {
    let c = rusqlite::Connection::open(w.home().join("gatehouse.db")).expect("the database");
    c.busy_timeout(std::time::Duration::from_secs(30)).unwrap();
    c
}

#[tokio::test(flavor = "multi_thread")]
async fn every_size_a_component_controls_is_capped_with_a_note() {
    let echo = EchoService::start(200);
    let w = overflow_world(&echo.host(), false).await;
    let before = database_bytes(&w);

    // A 10 MiB failure: cut to a few KiB, in the answer and in the ledger.
    let out = w
        .script("work", json!([call("OVER", "fail", json!({"kib": 10240}))]))
        .await;
    let message = out[0]["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.len() < 5 * 1024, "{} bytes", message.len());
    assert!(
        message.contains("[…cut: the message was 10485760 bytes"),
        "{}",
        &message[message.len() - 120..]
    );
    // An action failing with 10 MiB: `approve` prints one short line, and
    // the ledger keeps a few KiB.
    let out = w
        .script(
            "work",
            json!([call("OVER", "forge", json!({"kib": 10240}))]),
        )
        .await;
    let id = pending_id(&out[0]);
    let o = w.cli(&["approve", &id.to_string()]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o).lines().count(), 1);
    assert!(stderr(&o).len() < 5 * 1024, "{}", stderr(&o).len());
    let error: String = db(&w)
        .query_row("SELECT error FROM ledger WHERE id = ?1", [id], |r| r.get(0))
        .unwrap();
    assert!(
        error.len() < 5 * 1024 && error.contains("[…cut"),
        "{} bytes",
        error.len()
    );

    // A read naming 100,000 sources is refused, nothing recorded.
    let observations = |w: &World| -> i64 {
        db(w)
            .query_row(
                "SELECT count(*) FROM ledger WHERE kind = 'observation'",
                [],
                |r| r.get(0),
            )
            .unwrap()
    };
    let seen = observations(&w);
    let out = w
        .script(
            "work",
            json!([call("OVER", "get", json!({"sources": 100_000}))]),
        )
        .await;
    let message = out[0]["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("100000 sources") && message.contains("at most 1000"),
        "{}",
        out[0]
    );
    assert_eq!(observations(&w), seen, "a refused read records nothing");

    // A 10 MiB simulation is not handed over or kept: the action awaits.
    let out = w
        .script(
            "work",
            json!([call("OVER", "post", json!({"simulate_kib": 10240}))]),
        )
        .await;
    let pending = &out[0]["pending"];
    assert_eq!(pending["await_decision"], true, "{}", out[0]);
    assert_eq!(pending["provisional"], Value::Null);
    let stored: Option<String> = db(&w)
        .query_row(
            "SELECT provisional FROM ledger WHERE id = ?1",
            [pending["action_id"].as_i64().unwrap()],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(stored, None);

    // An agent turn answering 20 MiB is kept as 64 KiB and a note.
    let o = w.cli(&["agent", "hostile", "--chat", "work", "flood"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let kept: String = db(&w)
        .query_row(
            "SELECT last_output FROM agent_runs ORDER BY id DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(kept.len() < 65 * 1024, "{} bytes kept", kept.len());
    assert!(
        kept.contains("the output was 20971520 bytes"),
        "{}",
        &kept[kept.len() - 100..]
    );

    // Everything above added far less than the megabytes it was offered.
    let grown = database_bytes(&w).saturating_sub(before);
    assert!(grown < 2 << 20, "the database grew by {grown} bytes");

    // A manifest of 10,001 tools (one with a 1 MiB description) is refused.
    let o = w.cli(&[
        "gatekeeper",
        "add",
        guest("bloated").to_str().unwrap(),
        "--name",
        "bloated",
    ]);
    let err = one_line_refusal("gatekeeper add bloated", &o);
    assert!(
        err.contains("10001 tools") && err.contains("at most 1000"),
        "{err}"
    );
    assert!(!w.gatekeeper_names().contains(&"bloated".to_owned()));
}

// ----- 5. polls and the call budget -----

#[tokio::test(flavor = "multi_thread")]
async fn a_hand_over_is_recorded_once_and_a_turn_has_a_call_budget() {
    let w = World::standard(Trust::Byo).await;
    let out = w.script("work", add_label(1, "x")).await;
    let id = pending_id(&out[0]);
    let o = w.cli(&["approve", &id.to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let polls: Vec<Value> = (0..50).map(|_| json!({"poll": id})).collect();
    let out = w.script("work", Value::Array(polls)).await;
    assert!(
        out.as_array()
            .unwrap()
            .iter()
            .all(|p| p["status"] == "applied")
    );
    let _ = w.script("work", json!([{"poll": id}])).await;
    let handovers: i64 = db(&w)
        .query_row(
            "SELECT count(*) FROM ledger WHERE kind = 'observation' AND action_ref = ?1",
            [id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(handovers, 1, "51 polls, one hand-over");

    // A turn of 150 reads under a budget of 100 calls: the service sees
    // 100, the rest are refused with a note naming the budget.
    let before = w.tracker.requests().len();
    let reads: Vec<Value> = (0..150)
        .map(|_| call("ISSUES", "listIssues", json!({})))
        .collect();
    let script = json!({ "steps": reads }).to_string();
    let o = cli_command(w.home(), &["run", "script", "--chat", "work", &script])
        .env("GATEHOUSE_TURN_CALLS", "100")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let answers: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let answers = answers.as_array().unwrap();
    // `open` counts too: each call step opens the key, then calls.
    let done = answers.iter().filter(|a| a.get("done").is_some()).count();
    assert_eq!(done, 50, "100 kernel calls: 50 opens and 50 reads");
    let refused = &answers[149]["error"];
    assert_eq!(refused["kind"], "refused", "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("budget of 100 kernel calls"),
        "{refused}"
    );
    assert_eq!(w.tracker.requests().len() - before, 50);
}

// ----- 7. credentials -----

#[tokio::test(flavor = "multi_thread")]
async fn an_echoed_credential_never_reaches_the_gadget() {
    let echo = EchoService::start(200);
    let w = overflow_world(&echo.host(), true).await;
    let steps = json!([
        call("OVER", "get", json!({"echo_source": true})),
        call("OVER", "fail", json!({"echo": true})),
        call("OVER", "post", json!({"simulate_echo": true})),
        call("OVER", "post", json!({"path": "/write"})),
    ]);
    let out = w.script("work", steps).await;
    let text = out.to_string();
    assert!(
        !text.contains(SECRET),
        "the secret reached the gadget: {text}"
    );
    // The service really got (and echoed) it: redaction did the work.
    let seen = echo.requests();
    assert!(!seen.is_empty());
    assert!(
        seen.iter()
            .all(|r| r["headers"]["authorization"] == format!("Bearer {SECRET}")),
        "{seen:?}"
    );
    assert!(text.contains("Bearer [redacted]"), "{text}");
    assert_eq!(out[2]["pending"]["await_decision"], false, "{}", out[2]);

    // The applied result, its hand-over, and the ledger hold no secret.
    let id = pending_id(&out[3]).to_string();
    let o = w.cli(&["approve", &id]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stdout(&o).contains(SECRET), "{}", stdout(&o));
    let polled = w
        .script("work", json!([{"poll": pending_id(&out[3])}]))
        .await
        .to_string();
    assert!(
        polled.contains("[redacted]") && !polled.contains(SECRET),
        "{polled}"
    );
    let dump: String = db(&w)
        .query_row(
            "SELECT group_concat(coalesce(result, '') || coalesce(error, '') || coalesce(sources, '') || coalesce(provisional, ''), ' ') FROM ledger",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(!dump.contains(SECRET), "the ledger holds the secret");
    assert!(dump.contains("[redacted]"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_credential_goes_to_its_one_host_and_never_in_clear_text() {
    let home_host = EchoService::start(200);
    let other = EchoService::start(200);
    let w = World::new();
    w.install("script");
    w.kernel
        .operator()
        .put_secret("echo-token", SECRET)
        .unwrap();
    let overflow = guest("overflow");
    let overflow = overflow.to_str().unwrap();

    // Two hosts and a secret: the operator must say which host gets it.
    let o = w.cli(&[
        "gatekeeper",
        "add",
        overflow,
        "--name",
        "two",
        "--allow-host",
        &home_host.host(),
        "--allow-host",
        &other.host(),
        "--secret",
        "echo-token",
    ]);
    let err = one_line_refusal("two hosts, no credential host", &o);
    assert!(err.contains("--credential-host"), "{err}");
    let o = w.cli(&[
        "gatekeeper",
        "add",
        overflow,
        "--name",
        "two",
        "--allow-host",
        &home_host.host(),
        "--allow-host",
        &other.host(),
        "--secret",
        "echo-token",
        "--credential-host",
        &home_host.host(),
        "--set",
        &format!("base-url=http://{}", other.host()),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // Plain http to a host that is not loopback would carry it in clear.
    let o = w.cli(&[
        "gatekeeper",
        "add",
        overflow,
        "--name",
        "clear",
        "--allow-host",
        "192.0.2.10:80",
        "--secret",
        "echo-token",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // A host without a port admits https on 443 only, never http on 80.
    let o = w.cli(&[
        "gatekeeper",
        "add",
        overflow,
        "--name",
        "portless",
        "--allow-host",
        "localhost",
        "--secret",
        "echo-token",
        "--set",
        "base-url=http://localhost",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    w.kernel.person("alice").new_chat("work").unwrap();
    for (g, key) in [("two", "TWO"), ("clear", "CLEAR"), ("portless", "PORTLESS")] {
        w.introduce("work", "alice", &[(g, key)]);
    }
    let out = w
        .script(
            "work",
            json!([
                call("TWO", "get", json!({})),
                call("CLEAR", "get", json!({})),
                call("PORTLESS", "get", json!({"path": "/"})),
            ]),
        )
        .await;
    // The other host got the request, without the credential.
    let seen = other.requests();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0]["headers"].get("authorization"), None, "{seen:?}");
    assert!(out[0].get("done").is_some(), "{}", out[0]);
    assert!(home_host.requests().is_empty());
    let clear = out[1]["error"]["message"].as_str().unwrap_or_default();
    assert!(
        clear.contains("before it was sent") && clear.contains("plain http"),
        "{}",
        out[1]
    );
    // portless: its base url is http://localhost (port 80): not admitted.
    let portless = out[2]["error"]["message"].as_str().unwrap_or_default();
    assert!(
        portless.contains("refused") && portless.contains("before it was sent"),
        "{}",
        out[2]
    );
}
