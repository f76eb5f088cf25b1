//! SPEC A1-A4, O1: reads at once and recorded; actions staged, answered
//! `pending`, sent only when approved.

use gatehouse::store::{LedgerFilter, Trust};
use gatehouse_e2e::{World, call, create_step, label_step, pending_id, stdout};
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn one_read_and_three_writes_then_two_approved_and_one_rejected() {
    let w = World::standard(Trust::Byo).await;
    let out = w
        .script(
            "work",
            json!([
                call("ISSUES", "listIssues", json!({})),
                create_step("first"),
                create_step("second"),
                label_step(1, "urgent"),
            ]),
        )
        .await;
    assert!(out[0]["done"].is_array());
    let ids: Vec<i64> = out.as_array().unwrap()[1..]
        .iter()
        .map(pending_id)
        .collect();
    for p in &out.as_array().unwrap()[1..] {
        assert_eq!(
            p["pending"]["await_decision"], true,
            "issues cannot simulate"
        );
        assert!(
            p["pending"]["message"]
                .as_str()
                .unwrap()
                .contains("nothing has been sent")
        );
    }
    assert_eq!(
        w.tracker.requests().len(),
        1,
        "only the read reached the service"
    );
    assert_eq!(w.kernel.inspect().pending(Some("work")).unwrap().len(), 3);

    assert!(w.kernel.person("alice").approve(ids[0]).await.unwrap().ok());
    assert!(w.kernel.person("alice").reject(ids[1]).await.unwrap().ok());
    assert!(w.kernel.person("alice").approve(ids[2]).await.unwrap().ok());

    let writes = w.tracker.writes();
    assert_eq!(writes.len(), 2, "{writes:?}");
    assert!(writes[0].body.contains("first"));
    assert!(writes[1].path.ends_with("/labels"));
    assert!(
        !writes.iter().any(|r| r.body.contains("second")),
        "the rejected write never arrived"
    );
    // The kernel injected the credential; no component ever held it.
    assert!(writes.iter().all(
        |r| r.authorization.as_deref() == Some(&format!("Bearer {}", gatehouse_e2e::TOKEN)[..])
    ));

    // The gadget polls: applied, rejected, and the result is recorded when handed over.
    let polled = w
        .script(
            "work",
            json!([{"poll": ids[0]}, {"poll": ids[1]}, {"poll": ids[2]}]),
        )
        .await;
    assert_eq!(polled[0]["status"], "applied");
    assert_eq!(polled[0]["result"]["title"], "first");
    assert_eq!(polled[1]["status"], "rejected");
    assert!(
        polled[1]["message"]
            .as_str()
            .unwrap()
            .contains("not approved")
    );
    assert_eq!(polled[2]["status"], "applied");
    let handed = w
        .kernel
        .inspect()
        .ledger(&LedgerFilter {
            kind: Some(gatehouse::store::LedgerKind::Observation),
            ..Default::default()
        })
        .unwrap();
    assert!(
        handed.iter().any(|e| e.action_ref == Some(ids[0])),
        "A4: the hand-over is an observation"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn pending_polls_stay_pending_and_other_chats_cannot_poll() {
    let w = World::standard(Trust::Byo).await;
    w.kernel.person("alice").new_chat("elsewhere").unwrap();
    let out = w.script("work", json!([create_step("t")])).await;
    let id = pending_id(&out[0]);
    let polled = w.script("work", json!([{"poll": id}])).await;
    assert_eq!(polled[0]["status"], "pending");
    let foreign = w.script("elsewhere", json!([{"poll": id}])).await;
    assert_eq!(foreign[0]["error"]["kind"], "refused");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_arguments_are_refused_before_staging() {
    let w = World::standard(Trust::Byo).await;
    let out = w
        .script(
            "work",
            json!([
                call("ISSUES", "createIssue", json!([1, 2])),
                call("ISSUES", "createIssue", json!(null)),
                {"call": {"key": "ISSUES", "tool": "createIssue", "raw_args": "{not json"}},
            ]),
        )
        .await;
    for o in out.as_array().unwrap() {
        assert_eq!(o["error"]["kind"], "invalid-args", "{o}");
    }
    assert!(
        out[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("JSON object")
    );
    assert!(
        w.kernel.inspect().pending(None).unwrap().is_empty(),
        "no ghost rows (A3)"
    );
}

/// What the approver sees is what is sent. Arguments that services would
/// read differently (a key named twice, a number beyond a double, an
/// integer past 2^53) are refused before staging, in one line naming the
/// value, and nothing is staged or sent; the same values as strings are
/// staged as given.
#[tokio::test(flavor = "multi_thread")]
async fn ambiguous_arguments_are_refused_in_one_line_and_their_string_forms_are_staged() {
    let w = World::standard(Trust::Byo).await;
    let raw =
        |args: &str| json!({"call": {"key": "ISSUES", "tool": "createIssue", "raw_args": args}});
    let out = w
        .script(
            "work",
            json!([
                raw(r#"{"title": "a", "title": "b"}"#),
                raw(r#"{"title": "big", "labels": [1e400]}"#),
                raw(r#"{"title": "id", "labels": [9007199254740993]}"#),
                raw(r#"{"title": "tiny", "labels": [1e-400]}"#),
                raw(r#"{"title": "1e400", "body": "9007199254740993"}"#),
            ]),
        )
        .await;
    let said: Vec<(&str, &str)> = vec![
        ("key \"title\" appears twice", "send each key once"),
        ("out of range", "send it as a string"),
        ("9007199254740993 is beyond", "send it as a string"),
        ("would be read as 0", "send it as a string"),
    ];
    for (o, (what, todo)) in out.as_array().unwrap().iter().zip(said) {
        assert_eq!(o["error"]["kind"], "invalid-args", "{o}");
        let m = o["error"]["message"].as_str().unwrap();
        assert!(m.starts_with("arguments are ambiguous: "), "{m}");
        assert!(m.contains(what) && m.contains(todo), "{m}");
        assert!(!m.contains('\n'), "{m}");
    }
    let id = pending_id(&out[4]);
    let pending = w.kernel.inspect().pending(None).unwrap();
    assert_eq!(pending.iter().map(|a| a.id).collect::<Vec<_>>(), vec![id]);
    // Shown as staged, and sent as shown.
    let shown = stdout(&w.cli(&["show", &id.to_string()]));
    assert!(shown.contains("\"1e400\""), "{shown}");
    assert!(w.tracker.writes().is_empty());
    w.kernel.person("alice").approve(id).await.unwrap();
    let sent: serde_json::Value =
        serde_json::from_str(&w.tracker.writes()[0].body).expect("a JSON body");
    assert_eq!(sent, json!({"title": "1e400", "body": "9007199254740993"}));
}

/// How many durability barriers the state database has seen (a barrier
/// with no stage beside it in its group commit moves this mark).
fn barriers(w: &World) -> i64 {
    let db = rusqlite::Connection::open(w.dir.path().join("gatehouse.db"))
        .unwrap_or_else(|e| panic!("opening the state database failed: {e}"));
    db.query_row("SELECT n FROM durability_mark WHERE id = 1", [], |r| {
        r.get(0)
    })
    .unwrap_or_else(|e| panic!("reading the durability mark failed: {e}"))
}

/// A turn's stages are made durable together, once, before anything
/// leaves the turn and before it ends (docs/operations.md): three writes
/// wait for one fsync, and a read between writes, which reaches the
/// service, first makes the writes before it durable.
#[tokio::test(flavor = "multi_thread")]
async fn a_turns_writes_are_made_durable_before_anything_leaves_it() {
    let w = World::standard(Trust::Byo).await;
    let write = |t: &str| call("ISSUES", "createIssue", json!({ "title": t }));
    let before = barriers(&w);

    let out = w
        .script("work", json!([write("a"), write("b"), write("c")]))
        .await;
    for answer in out.as_array().expect("three answers") {
        pending_id(answer);
    }
    assert_eq!(
        barriers(&w) - before,
        1,
        "three writes in one turn are made durable by one barrier, at its end"
    );

    let out = w
        .script(
            "work",
            json!([
                write("d"),
                call("ISSUES", "listIssues", json!({})),
                write("e")
            ]),
        )
        .await;
    assert!(out[1]["done"].is_array(), "the read ran: {out}");
    pending_id(&out[0]);
    pending_id(&out[2]);
    assert_eq!(
        barriers(&w) - before,
        3,
        "the write before the read is made durable before the read reaches the service, the one after it at the end"
    );

    let out = w
        .script("work", json!([call("ISSUES", "listIssues", json!({}))]))
        .await;
    assert!(out[0]["done"].is_array(), "the read ran: {out}");
    assert_eq!(
        barriers(&w) - before,
        3,
        "a turn that staged nothing waits for no fsync"
    );
}
