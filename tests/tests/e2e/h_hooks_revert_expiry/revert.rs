//! SPEC H2: a revert is a new action naming the original, decided and sent
//! like any other; revertibility never weakens either auto-approval key.
//! Real `issues` gatekeeper, real tracker, real CLI processes and the real
//! web API.

use crate::surfaces::web_api::{Api, serve};
use gatehouse::overseer::Decision;
use gatehouse::sharing::OpenRequest;
use gatehouse::store::{ActionState, LedgerFilter, Trust};
use gatehouse_e2e::{World, cli_command, create_step, label_step, pending_id, stderr, stdout};
use serde_json::{Value, json};
use std::process::Output;

const BOB_TOKEN: &str = "tok-bob-7d21-reverts-with-his-own";

/// Stage `addLabel` on issue `issue` in `work` and approve it as alice.
async fn labelled(w: &World, issue: i64, label: &str) -> i64 {
    let id = w.stage_label_on("work", issue, label).await;
    let d = w.kernel.person("alice").approve(id).await.unwrap();
    assert!(matches!(d, Decision::Applied { .. }), "{d:?}");
    id
}

fn labels(w: &World, issue: u64) -> Vec<String> {
    w.tracker
        .issues()
        .into_iter()
        .find(|i| i.id == issue)
        .map(|i| i.labels)
        .unwrap_or_default()
}

/// The DELETEs the tracker applied: the removeLabel requests.
fn removals(w: &World) -> Vec<String> {
    w.tracker
        .writes()
        .into_iter()
        .filter(|r| r.method == "DELETE")
        .map(|r| r.path)
        .collect()
}

/// A refusal: exit 1, one line on stderr, nothing on stdout.
fn refused(o: &Output) -> String {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(1), "{} {e}", stdout(o));
    assert_eq!(e.trim_end().lines().count(), 1, "one line: {e}");
    e
}

fn action_rows(w: &World) -> usize {
    w.kernel
        .inspect()
        .ledger(&LedgerFilter {
            kind: Some(gatehouse::store::LedgerKind::Action),
            ..LedgerFilter::default()
        })
        .unwrap()
        .len()
}

fn cli_as(w: &World, person: &str, args: &[&str]) -> Output {
    let mut all = vec!["--as", person];
    all.extend_from_slice(args);
    cli_command(w.home(), &all).output().expect("the cli runs")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revert_is_a_new_action_and_after_its_approval_the_tracker_got_one_remove_label() {
    let w = World::standard(Trust::Byo).await;
    let original = labelled(&w, 2, "urgent").await;
    assert_eq!(labels(&w, 2), ["urgent"]);

    // Staged, not sent: a new pending action that names the original.
    let o = w.cli(&["revert", &original.to_string(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let staged: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let revert = staged["id"].as_i64().unwrap();
    assert_eq!(staged["reverts"], original);
    assert_eq!(staged["tool"], "removeLabel");
    assert!(revert > original);
    assert!(removals(&w).is_empty(), "nothing is sent by staging");
    let a = w.kernel.inspect().action(revert).unwrap().unwrap();
    let o_row = w.kernel.inspect().action(original).unwrap().unwrap();
    assert_eq!(a.state, ActionState::Pending);
    assert_eq!(a.reverts, Some(original));
    assert_eq!(
        (a.gatekeeper.as_str(), a.tool.as_str()),
        ("issues", "removeLabel")
    );
    assert_eq!(a.args, o_row.args, "the original's arguments");
    assert_eq!(a.caller, "alice", "its principal is the person asking");
    assert_eq!(a.gadget, None);
    assert_eq!(
        o_row.state,
        ActionState::Applied,
        "the original stays applied"
    );

    // The prompt says what it reverts, in the terminal and the same text
    // everywhere else.
    let o = w.cli(&["show", &revert.to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let shown = stdout(&o);
    assert!(
        shown.contains(&format!("Reverts: action #{original}: ")),
        "{shown}"
    );
    assert!(shown.contains("Tool: removeLabel"), "{shown}");
    assert!(shown.contains("Nothing has been sent yet."), "{shown}");
    let web = w
        .kernel
        .person("alice")
        .shown(revert)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(web.prompt, shown);

    // Reverting again while the first revert waits: refused, naming it.
    let e = refused(&w.cli(&["revert", &original.to_string()]));
    assert!(
        e.contains(&format!("already has a revert, #{revert} (pending)")),
        "{e}"
    );

    // Approved like any action: the tracker gets exactly one removeLabel.
    let o = w.cli(&["approve", &revert.to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with(&format!("#{revert} applied")),
        "{}",
        stdout(&o)
    );
    assert_eq!(removals(&w), ["/issues/2/labels/urgent"]);
    assert!(labels(&w, 2).is_empty(), "the label is gone");
    let r = w.kernel.inspect().action(revert).unwrap().unwrap();
    assert_eq!(r.state, ActionState::Applied);
    assert_eq!(r.resolved_by.as_deref(), Some("alice"));

    // Reverting twice sends once: refused after the revert too, and a
    // second approval of the revert sends nothing.
    let e = refused(&w.cli(&["revert", &original.to_string()]));
    assert!(e.contains(&format!("#{revert} (applied)")), "{e}");
    let o = w.cli(&["approve", &revert.to_string()]);
    assert!(stdout(&o).contains("already applied"), "{}", stdout(&o));
    // The revert itself declares no tool that undoes it.
    let e = refused(&w.cli(&["revert", &revert.to_string()]));
    assert!(e.contains("declares no tool that undoes it"), "{e}");
    assert_eq!(removals(&w).len(), 1, "one removeLabel, ever");
    assert_eq!(w.tracker.writes().len(), 2, "one addLabel, one removeLabel");
}

#[tokio::test(flavor = "multi_thread")]
async fn reverting_what_was_not_applied_or_cannot_be_undone_is_refused_in_one_line() {
    let w = World::standard(Trust::Byo).await;
    let out = w
        .script(
            "work",
            json!([
                label_step(1, "rejected"),
                label_step(1, "waiting"),
                create_step("no undo"),
                label_step(1, "fails"),
            ]),
        )
        .await;
    let ids: Vec<i64> = out.as_array().unwrap().iter().map(pending_id).collect();
    let (rejected, waiting, created, failing) = (ids[0], ids[1], ids[2], ids[3]);
    assert!(matches!(
        w.kernel.person("alice").reject(rejected).await.unwrap(),
        Decision::Rejected { .. }
    ));
    assert!(matches!(
        w.kernel.person("alice").approve(created).await.unwrap(),
        Decision::Applied { .. }
    ));
    w.tracker
        .inject(gatehouse_services::tracker::Fault::Status(500), 1);
    assert!(matches!(
        w.kernel.person("alice").approve(failing).await.unwrap(),
        Decision::Failed {
            retryable: false,
            ..
        }
    ));
    let before = (action_rows(&w), w.tracker.requests().len());
    for (id, said) in [
        (rejected, "it was rejected and never sent"),
        (
            waiting,
            "it is still pending, so nothing was sent; reject it instead",
        ),
        (
            created,
            "(issues:createIssue) cannot be reverted: its gatekeeper declares no tool that undoes it",
        ),
        (failing, "it failed, so what it changed is unknown"),
        (9999, "no action #9999 that you may see"),
    ] {
        let e = refused(&w.cli(&["revert", &id.to_string()]));
        assert!(e.contains(said), "#{id}: {e}");
        // Through the kernel, the same words.
        let k = w
            .kernel
            .person("alice")
            .revert(id)
            .await
            .unwrap()
            .unwrap_err();
        assert!(k.to_string().contains(said), "#{id}: {k}");
    }
    assert_eq!(
        (action_rows(&w), w.tracker.requests().len()),
        before,
        "nothing staged, nothing sent"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn revertibility_weakens_neither_auto_approval_key() {
    let w = World::standard(Trust::Vetted).await;
    let k = &w.kernel;
    // addLabel is auto-approvable (vetted, non-destructive, idempotent)
    // and alice's rule covers it: both keys hold.
    let r = w.label_rule("alice").await;
    assert!(r.key_one);
    let original = w.stage_label_on("work", 1, "auto").await;
    k.settle().await;
    let a = k.inspect().action(original).unwrap().unwrap();
    assert_eq!(a.state, ActionState::Applied);
    assert!(a.auto_approved);

    // Its revert is removeLabel, which is honestly destructive: key one
    // does not hold for it, so it waits for a person even with a rule.
    let reverted = k.person("alice").revert(original).await.unwrap().unwrap();
    k.settle().await;
    let r = k
        .person("alice")
        .add_rule("issues:removeLabel", None)
        .await
        .unwrap();
    assert!(!r.key_one, "removing a label is destructive");
    assert!(
        r.missing
            .as_deref()
            .unwrap()
            .contains("not declared non-destructive"),
        "{:?}",
        r.missing
    );
    assert!(r.applied.is_empty(), "{:?}", r.applied);
    k.drain().await.unwrap();
    let pending = k.inspect().action(reverted.id).unwrap().unwrap();
    assert_eq!(pending.state, ActionState::Pending, "never auto-approved");
    assert!(removals(&w).is_empty());
    // Nor does the original's auto-approval carry over: a person decides.
    let d = k.person("alice").approve(reverted.id).await.unwrap();
    assert!(matches!(d, Decision::Applied { .. }), "{d:?}");
    let done = k.inspect().action(reverted.id).unwrap().unwrap();
    assert!(!done.auto_approved);
    assert_eq!(done.resolved_by.as_deref(), Some("alice"));
    assert_eq!(removals(&w), ["/issues/1/labels/auto"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revert_that_meets_a_world_that_moved_on_fails_like_any_action() {
    let w = World::standard(Trust::Byo).await;
    let original = labelled(&w, 1, "gone").await;
    // Someone deletes the issue at the service meanwhile.
    assert!(w.tracker.delete_issue(1));
    let reverted = w
        .kernel
        .person("alice")
        .revert(original)
        .await
        .unwrap()
        .unwrap();
    let d = w.kernel.person("alice").approve(reverted.id).await.unwrap();
    let Decision::Failed {
        message, retryable, ..
    } = &d
    else {
        panic!("expected a failure, got {d:?}")
    };
    assert!(!retryable, "the request reached the service");
    assert!(message.contains("HTTP 404"), "{message}");
    assert!(
        d.line()
            .starts_with(&format!("#{} failed (not retryable)", reverted.id))
    );
    let o = w.cli(&["show", &reverted.id.to_string()]);
    assert!(stdout(&o).contains("Status: failed: "), "{}", stdout(&o));
    let e = refused(&w.cli(&["approve", &reverted.id.to_string()]));
    assert!(e.contains("never resent"), "{e}");
    // A failed revert is not "live": it was sent, so no second one either.
    let e = refused(&w.cli(&["revert", &original.to_string()]));
    assert!(e.contains(&format!("#{} (failed)", reverted.id)), "{e}");
}

#[tokio::test(flavor = "multi_thread")]
async fn who_may_revert_is_who_may_decide_and_it_goes_out_with_their_own_account() {
    let people = ["alice", "bob", "mallory"];
    let w = World::with_account(&["script"], Trust::Byo, &people, ("bob", BOB_TOKEN), false).await;
    let k = &w.kernel;
    w.chat_with("work", "alice", &[("issues", "ISSUES")]);
    let original = labelled(&w, 1, "shared").await;
    k.person("alice").share("work", "bob", false).unwrap();
    let opened = k
        .person("bob")
        .open_chat("work", &OpenRequest::default())
        .await
        .unwrap();
    assert!(
        matches!(opened, gatehouse::sharing::OpenOutcome::Admitted { .. }),
        "{opened:?}"
    );
    let id = original.to_string();

    // A stranger learns nothing; a viewer may not decide, so not revert.
    let e = refused(&cli_as(&w, "mallory", &["revert", &id]));
    assert!(
        e.contains(&format!("no action #{id} that you may see")),
        "{e}"
    );
    let e = refused(&cli_as(&w, "bob", &["revert", &id]));
    assert!(
        e.contains("may see chat \"work\" but not decide in it"),
        "{e}"
    );
    let server = serve(&w).await;
    let web_bob = Api::signed_in(&w, &server.url(), "bob").await;
    let web_mallory = Api::signed_in(&w, &server.url(), "mallory").await;
    let path = format!("/api/actions/{id}/revert");
    let a = web_mallory.post(&path, json!({})).await;
    assert_eq!(a.status, 404, "{}", a.text);
    let a = web_bob.post(&path, json!({})).await;
    assert_eq!(a.status, 403, "{}", a.text);
    assert!(a.error().contains("but not decide"), "{}", a.text);
    let seen = web_bob.get(&format!("/api/actions/{id}")).await.json();
    assert_eq!(seen["revertible"], false, "no button for a viewer");
    assert!(removals(&w).is_empty());

    // Granted the right to decide, bob reverts: the revert is his, and it
    // goes out with his own account, never alice's operator credential.
    k.person("alice").share("work", "bob", true).unwrap();
    let seen = web_bob.get(&format!("/api/actions/{id}")).await.json();
    assert_eq!(seen["revertible"], true, "{seen}");
    let a = web_bob.post(&path, json!({})).await;
    assert_eq!(a.status, 200, "{}", a.text);
    let revert = a.json()["id"].as_i64().unwrap();
    assert_eq!(a.json()["reverts"], original);
    let again = web_bob.post(&path, json!({})).await;
    assert_eq!(again.status, 409, "{}", again.text);
    assert!(
        again
            .error()
            .contains(&format!("already has a revert, #{revert}")),
        "{}",
        again.text
    );
    let r = k.inspect().action(revert).unwrap().unwrap();
    assert_eq!((r.caller.as_str(), r.person.as_str()), ("bob", "bob"));
    assert_eq!(r.account.as_deref(), Some("bob/main"));
    let seen = web_bob.get(&format!("/api/actions/{id}")).await.json();
    assert_eq!(seen["revertible"], false);
    assert_eq!(seen["reverted_by"], revert);
    let shown = web_bob.get(&format!("/api/actions/{revert}")).await.json();
    assert_eq!(shown["reverts"], original);

    let d = k.person("alice").approve(revert).await.unwrap();
    assert!(matches!(d, Decision::Applied { .. }), "{d:?}");
    let sent: Vec<_> = w
        .tracker
        .writes()
        .into_iter()
        .filter(|r| r.method == "DELETE")
        .collect();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].authorization.as_deref(),
        Some(format!("Bearer {BOB_TOKEN}").as_str()),
        "sent with bob's own account"
    );
    // A pending action has nothing to revert, through the web too.
    let waiting = w.stage_label_on("work", 2, "later").await;
    let a = web_bob.act_on(waiting, "revert").await;
    assert_eq!(a.status, 409, "{}", a.text);
    assert!(a.error().contains("still pending"), "{}", a.text);
    server.stop().await;
}
