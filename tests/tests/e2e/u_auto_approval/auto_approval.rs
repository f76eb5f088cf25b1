//! SPEC U1-U3, A6: auto-approval needs two keys; the drain is ordered per
//! gatekeeper, single-flight, and stops at the first action that needs a
//! person or fails.

use gatehouse::overseer::Decision;
use gatehouse::store::{ActionState, LedgerFilter, Trust};
use gatehouse_e2e::{World, add_label, call, label_step, labels, pending_id};
use gatehouse_services::tracker::Fault;
use serde_json::json;

/// A script of `n` eligible writes, labels `l0`, `l1`, ... on issue 1.
fn state(w: &World, id: i64) -> ActionState {
    w.kernel.inspect().action(id).unwrap().unwrap().state
}

#[tokio::test(flavor = "multi_thread")]
async fn an_eligible_action_waits_behind_a_manual_one_then_follows_it_in_order() {
    let w = World::standard(Trust::Vetted).await;
    let r = w.label_rule("alice").await;
    assert!(r.key_one && r.missing.is_none());

    let (manual, eligible) = w.stage_manual_then_eligible().await;
    w.kernel.settle().await;
    assert_eq!(state(&w, manual), ActionState::Pending);
    assert_eq!(
        state(&w, eligible),
        ActionState::Pending,
        "never approved past an earlier manual action (U2)"
    );
    assert_eq!(w.tracker.writes().len(), 0);

    assert!(matches!(
        w.kernel.person("alice").approve(manual).await.unwrap(),
        Decision::Applied { .. }
    ));
    assert_eq!(
        state(&w, eligible),
        ActionState::Applied,
        "approving the manual one drains the queue (U3)"
    );
    let writes = w.tracker.writes();
    assert_eq!(writes.len(), 2);
    assert_eq!(writes[0].path, "/issues", "in id order");
    assert!(writes[1].path.ends_with("/labels"));

    let a = w.kernel.inspect().action(eligible).unwrap().unwrap();
    assert!(a.auto_approved);
    assert_eq!(
        a.resolved_by.as_deref(),
        Some("alice"),
        "resolved-by is the person who enabled the rule (U1)"
    );
    let auto = w
        .kernel
        .inspect()
        .ledger(&LedgerFilter {
            auto_approved: true,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(
        auto.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![eligible]
    );
    let by_alice = w
        .kernel
        .inspect()
        .ledger(&LedgerFilter {
            approved_by: Some("alice".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(
        by_alice.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![manual]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_submitted_eligible_action_is_applied_beside_the_gadget() {
    let w = World::standard(Trust::Vetted).await;
    w.label_rule("alice").await;
    let out = w.script("work", add_label(2, "auto")).await;
    // The gadget got `pending` at once (A1); the drain runs beside it.
    let id = pending_id(&out[0]);
    w.kernel.settle().await;
    assert_eq!(state(&w, id), ActionState::Applied);
    let polled = w.script("work", json!([{"poll": id}])).await;
    assert_eq!(polled[0]["status"], "applied");
}

#[tokio::test(flavor = "multi_thread")]
async fn either_key_alone_never_suffices() {
    // Key two without key one: a byo gatekeeper with a rule.
    let w = World::standard(Trust::Byo).await;
    let r = w.label_rule("alice").await;
    assert!(!r.key_one);
    assert!(r.missing.unwrap().contains("not vetted"));
    let out = w.script("work", add_label(1, "x")).await;
    w.kernel.settle().await;
    assert_eq!(state(&w, pending_id(&out[0])), ActionState::Pending);

    // Key one without key two: vetted, eligible tool, no rule.
    w.kernel
        .operator()
        .set_trust("issues", Trust::Vetted)
        .unwrap();
    w.kernel
        .person("alice")
        .remove_rule("issues:addLabel", None)
        .unwrap();
    let out = w.script("work", add_label(1, "y")).await;
    w.kernel.settle().await;
    w.kernel.drain().await.unwrap();
    assert_eq!(state(&w, pending_id(&out[0])), ActionState::Pending);
    assert_eq!(w.tracker.writes().len(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rule_for_one_gatekeeper_does_not_cover_the_same_tool_of_another() {
    let w = World::standard(Trust::Vetted).await;
    w.add_gatekeeper("issues", "mirror", Trust::Vetted).await;
    w.introduce("work", "alice", &[("mirror", "MIRROR")]);
    w.kernel
        .person("alice")
        .add_rule("mirror:addLabel", None)
        .await
        .unwrap();
    let out = w
        .script(
            "work",
            json!([
                label_step(1, "a"),
                call("MIRROR", "addLabel", json!({"id": 1, "label": "b"})),
            ]),
        )
        .await;
    w.kernel.settle().await;
    assert_eq!(
        state(&w, pending_id(&out[0])),
        ActionState::Pending,
        "issues:addLabel has no rule (A6)"
    );
    assert_eq!(state(&w, pending_id(&out[1])), ActionState::Applied);
}

#[tokio::test(flavor = "multi_thread")]
async fn enabling_a_rule_drains_and_an_apply_failure_stops_the_drain() {
    let w = World::standard(Trust::Vetted).await;
    let out = w
        .script("work", json!([label_step(1, "one"), label_step(1, "two"),]))
        .await;
    let (first, second) = (pending_id(&out[0]), pending_id(&out[1]));
    w.kernel.settle().await; // the submit-time drains found no rule
    w.tracker.inject(Fault::Status(500), 1);
    let r = w.label_rule("alice").await;
    assert_eq!(
        r.applied.len(),
        1,
        "the drain stopped at the failure: {:?}",
        r.applied
    );
    assert_eq!(state(&w, first), ActionState::Failed);
    assert_eq!(state(&w, second), ActionState::Pending);
}

#[tokio::test(flavor = "multi_thread")]
async fn ten_concurrent_drains_apply_each_action_once() {
    let w = World::standard(Trust::Vetted).await;
    let out = w.script("work", labels(8)).await;
    w.kernel.settle().await;
    // Nine drains spin, in this kernel (single flight) and in separate
    // kernels (claims), while the rule that makes the actions eligible is
    // enabled (its own drain is the tenth).
    let ids: Vec<i64> = out.as_array().unwrap().iter().map(pending_id).collect();
    let mut tasks = Vec::new();
    for i in 0..9 {
        let k = if i % 2 == 0 {
            w.kernel.clone()
        } else {
            w.reopen()
        };
        let (ids, probe) = (ids.clone(), w.reopen());
        tasks.push(tokio::spawn(async move {
            let mut applied = Vec::new();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            loop {
                applied.extend(k.drain().await.unwrap());
                let done = ids.iter().all(|id| {
                    probe.inspect().action(*id).unwrap().unwrap().state == ActionState::Applied
                });
                if done || std::time::Instant::now() > deadline {
                    return applied;
                }
                tokio::task::yield_now().await;
            }
        }));
    }
    let rule = w.label_rule("alice").await;
    let mut applied = rule
        .applied
        .iter()
        .filter(|d| matches!(d, Decision::Applied { .. }))
        .count();
    for t in tasks {
        applied += t
            .await
            .unwrap()
            .iter()
            .filter(|d| matches!(d, Decision::Applied { .. }))
            .count();
    }
    assert_eq!(applied, 8);
    assert_eq!(w.tracker.writes().len(), 8, "each action sent once");
    for o in out.as_array().unwrap() {
        assert_eq!(state(&w, pending_id(o)), ActionState::Applied);
    }
}

/// U2 and U3 across processes: four kernels on one home (each its own
/// owner token, as four `gatehouse` processes would be) drain the same
/// gatekeeper at once while every send is slow. Each action is sent once,
/// in id order, and no drain claims the next action before the one before
/// it has finished: the order holds in the claim's own transaction (a rule
/// never approves past an earlier action still pending or being sent), and
/// the home's drain flight makes a drain wait its turn instead of giving
/// up, so the actions another process staged are picked up too.
#[tokio::test(flavor = "multi_thread")]
async fn drains_in_four_processes_send_each_action_once_in_order_one_at_a_time() {
    let w = World::standard(Trust::Vetted).await;
    w.label_rule("alice").await;
    w.tracker
        .inject(Fault::Slow(std::time::Duration::from_millis(150)), 6);
    // Four other processes drain over and over while the gadget stages
    // (its own kernel drains beside it, as after every submit).
    let drainers = gatehouse_e2e::Drainers::start((0..4).map(|_| w.reopen()).collect());
    let out = w.script("work", labels(6)).await;
    let ids: Vec<i64> = out.as_array().unwrap().iter().map(pending_id).collect();
    let all_applied = gatehouse_e2e::wait_until(std::time::Duration::from_secs(60), || {
        ids.iter().all(|id| state(&w, *id) == ActionState::Applied)
    });
    drainers.stop().await;
    w.kernel.settle().await;
    assert!(all_applied, "every action was applied");
    w.assert_sent_once_in_order(&ids);
}
