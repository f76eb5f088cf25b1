//! SPEC H3: a pending action older than its chat's expiry is never sent; it
//! becomes `expired`, the gadget sees that through `action-result`, and it
//! counts as closed for the 50-open cap.
//!
//! No clock is faked: the tests use a one-second expiry and wait for the
//! clock to pass it (a condition, never a guessed sleep).

use gatehouse::overseer::Decision;
use gatehouse::store::{ActionState, Trust};
use gatehouse_e2e::{World, cli_command, one_line, pending_id, stderr, stdout, wait_until};
use serde_json::{Value, json};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Wait (on the clock alone, reading nothing) until `ms` have passed since
/// `since` (milliseconds since the epoch), with a little slack.
fn wait_past(since: i64, ms: i64) {
    assert!(
        wait_until(Duration::from_secs(30), || now_ms() > since + ms + 50),
        "the clock did not move"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_action_is_never_sent_even_if_approved_afterwards() {
    let w = World::standard(Trust::Byo).await;
    let o = w.cli(&["chat", "set", "work", "--expire-after", "1s"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("at most 1s"), "{}", stdout(&o));
    let chats: Value = serde_json::from_str(&stdout(&w.cli(&["chats", "--json"]))).unwrap();
    assert_eq!(chats[0]["expire_after_ms"], 1000);

    let id = w.stage_label("late").await;
    let staged_at = w.kernel.inspect().action(id).unwrap().unwrap().created_at;
    wait_past(staged_at, 1000);

    // The claim itself refuses it, whoever approves: nothing is sent.
    let d = w.kernel.person("alice").approve(id).await.unwrap();
    let Decision::Refused { reason, .. } = &d else {
        panic!("expected a refusal, got {d:?}")
    };
    assert!(
        reason.contains("expired before anyone decided it"),
        "{reason}"
    );
    let e = one_line(&w.cli(&["approve", &id.to_string()]));
    assert!(
        e.contains(&format!("#{id} refused: action #{id} expired")),
        "{e}"
    );
    let e = one_line(&w.cli(&["reject", &id.to_string()]));
    assert!(e.contains("expired"), "{e}");
    assert!(
        w.tracker.writes().is_empty(),
        "an expired action is never sent"
    );
    let a = w.kernel.inspect().action(id).unwrap().unwrap();
    assert_eq!(a.state, ActionState::Expired);

    // The gadget sees `expired` through action-result.
    let polled = w.script("work", json!([{"poll": id}])).await;
    assert_eq!(polled[0]["status"], "expired", "{polled}");
    assert!(
        polled[0]["message"]
            .as_str()
            .unwrap()
            .contains("never sent"),
        "{polled}"
    );
    // Nothing waits any more, and the prompt says why.
    assert!(stdout(&w.cli(&["pending"])).contains("nothing awaits"));
    let shown = stdout(&w.cli(&["show", &id.to_string()]));
    assert!(shown.contains("Action #"), "{shown}");
    assert!(shown.contains("(expired)"), "{shown}");
    assert!(shown.contains("Status: expired: "), "{shown}");
    assert!(!shown.contains("Approve: gatehouse approve"), "{shown}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sweep_marks_what_is_due_and_the_drain_sends_none_of_it() {
    // Auto-approval is a sender too: it meets the same claim.
    let w = World::standard(Trust::Vetted).await;
    let o = w.cli(&["chat", "set", "work", "--expire-after", "1s"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let id = w.stage_label("unruled").await;
    let staged_at = w.kernel.inspect().action(id).unwrap().unwrap().created_at;
    wait_past(staged_at, 1000);
    // The rule arrives after the expiry: its drain sends nothing.
    let r = w.label_rule("alice").await;
    assert!(r.key_one);
    assert!(r.applied.is_empty(), "{:?}", r.applied);
    assert!(w.tracker.writes().is_empty());
    assert_eq!(
        w.kernel.inspect().action(id).unwrap().unwrap().state,
        ActionState::Expired
    );
    // A fresh one, staged within the expiry, is auto-approved as usual.
    let fresh = w.stage_label("fresh").await;
    w.kernel.settle().await;
    let a = w.kernel.inspect().action(fresh).unwrap().unwrap();
    if a.state == ActionState::Applied {
        assert_eq!(w.tracker.writes().len(), 1);
    } else {
        // A machine slower than the one-second expiry: still never sent.
        assert_eq!(a.state, ActionState::Expired);
        assert!(w.tracker.writes().is_empty());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_action_counts_as_closed_for_the_cap() {
    let w = World::standard(Trust::Byo).await;
    let out = w.script("work", gatehouse_e2e::labels(51)).await;
    let answers = out.as_array().unwrap();
    assert!(answers[49]["pending"].is_object(), "{}", answers[49]);
    let full = answers[50]["error"]["message"].as_str().unwrap_or_default();
    assert!(
        full.contains("50 actions already await approval"),
        "{}",
        answers[50]
    );
    let last = pending_id(&answers[49]);
    let last_at = w.kernel.inspect().action(last).unwrap().unwrap().created_at;

    // Shortening the expiry below their age expires all fifty at once...
    wait_past(last_at, 1000);
    let o = w.cli(&["chat", "set", "work", "--expire-after", "1s"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(w.kernel.inspect().pending(Some("work")).unwrap().is_empty());
    // ...and the chat takes new work again: expired is closed.
    let id = w.stage_label("after").await;
    assert_eq!(
        w.kernel.inspect().action(id).unwrap().unwrap().state,
        ActionState::Pending
    );
    let polled = w.script("work", json!([{"poll": last}])).await;
    assert_eq!(polled[0]["status"], "expired", "{polled}");
    assert!(w.tracker.writes().is_empty());
}

/// The state of action `id` as the table holds it, read past the kernel
/// (which would mark a due action as it reads it).
fn stored_state(w: &World, id: i64) -> String {
    let db = rusqlite::Connection::open(w.home().join("gatehouse.db")).unwrap();
    db.busy_timeout(Duration::from_secs(30)).unwrap();
    db.query_row("SELECT state FROM ledger WHERE id = ?1", [id], |r| r.get(0))
        .unwrap()
}

/// Lengthening a chat's expiry never brings back an action that
/// was already past the old one, even when nothing had looked at it since
/// it fell due (the table still said `pending`): once due, it is expired
/// for good, and never sent.
#[tokio::test(flavor = "multi_thread")]
async fn lengthening_the_expiry_never_revives_an_action_already_past_it() {
    let w = World::standard(Trust::Byo).await;
    let o = w.cli(&["chat", "set", "work", "--expire-after", "1s"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let id = w.stage_label("due").await;
    let staged_at = w.kernel.inspect().action(id).unwrap().unwrap().created_at;
    wait_past(staged_at, 1000);
    assert_eq!(stored_state(&w, id), "pending", "nothing has marked it yet");

    let o = w.cli(&["chat", "set", "work", "--expire-after", "7d"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stored_state(&w, id), "expired", "marked with the change");
    let e = one_line(&w.cli(&["approve", &id.to_string()]));
    assert!(
        e.contains(&format!("#{id} refused: action #{id} expired")),
        "{e}"
    );
    assert!(w.tracker.writes().is_empty(), "never sent");
    let polled = w.script("work", json!([{"poll": id}])).await;
    assert_eq!(polled[0]["status"], "expired", "{polled}");

    // What is staged under the longer expiry waits, and is sent once
    // approved.
    let fresh = w.stage_label("fresh").await;
    let d = w.kernel.person("alice").approve(fresh).await.unwrap();
    assert!(d.ok(), "{d:?}");
    assert_eq!(w.tracker.writes().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn only_the_owner_sets_an_expiry_and_a_bad_one_is_refused_in_one_line() {
    let w = World::standard(Trust::Byo).await;
    w.kernel.operator().add_user("alice").unwrap();
    w.kernel.operator().add_user("bob").unwrap();
    w.kernel.operator().add_user("mallory").unwrap();
    w.kernel.person("alice").share("work", "bob", true).unwrap();
    let as_ = |person: &str, args: &[&str]| {
        let mut all = vec!["--as", person];
        all.extend_from_slice(args);
        cli_command(w.home(), &all).output().expect("the cli runs")
    };
    let set = ["chat", "set", "work", "--expire-after", "1h"];
    let o = as_("mallory", &set);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        one_line(&o).contains("no chat named \"work\""),
        "{}",
        stderr(&o)
    );
    // Bob, not yet verified, sees nothing; once he opened it, he may
    // decide there but not change the chat.
    let o = as_("bob", &set);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        one_line(&o).contains("no chat named \"work\""),
        "{}",
        stderr(&o)
    );
    let opened = w
        .kernel
        .person("bob")
        .open_chat("work", &gatehouse::sharing::OpenRequest::default())
        .await
        .unwrap();
    assert!(
        matches!(opened, gatehouse::sharing::OpenOutcome::Admitted { .. }),
        "{opened:?}"
    );
    let o = as_("bob", &set);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        one_line(&o).contains("only the owner of chat \"work\""),
        "{}",
        stderr(&o)
    );
    for bad in ["soon", "0s", "400d", "500ms"] {
        let o = w.cli(&["chat", "set", "work", "--expire-after", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}: usage error");
        assert!(
            stderr(&o).contains("--expire-after"),
            "{bad}: {}",
            stderr(&o)
        );
    }
    // Nothing changed: still the default, 7 days.
    let chats: Value = serde_json::from_str(&stdout(&w.cli(&["chats", "--json"]))).unwrap();
    assert_eq!(chats[0]["expire_after_ms"], 7 * 24 * 3600 * 1000);
    let o = as_("alice", &set);
    assert!(o.status.success(), "{}", stderr(&o));
    let chats: Value = serde_json::from_str(&stdout(&w.cli(&["chats", "--json"]))).unwrap();
    assert_eq!(chats[0]["expire_after_ms"], 3600 * 1000);
}
