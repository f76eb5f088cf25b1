//! SPEC V1-V3: hiding a pending write makes agents write twice; awaiting a
//! decision or simulating it does not.

use gatehouse::harness::RunReport;
use gatehouse::kernel::Harness;
use gatehouse::store::Trust;
use gatehouse_e2e::{TOKEN, World, call};
use serde_json::{Value, json};

const TASK: &str = "ensure Flaky login test | ci";

async fn agent_world(gatekeeper: &str) -> World {
    let w = World::new();
    w.install("agent");
    w.add_gatekeeper(gatekeeper, "tracker", Trust::Byo).await;
    w.chat_with("work", "alice", &[("tracker", "ISSUES")]);
    w
}

async fn approve_all(w: &World) {
    loop {
        let pending = w.kernel.inspect().pending(None).unwrap();
        let Some(a) = pending.first() else { break };
        assert!(w.kernel.person("alice").approve(a.id).await.unwrap().ok());
    }
    w.kernel.settle().await;
}

fn created(w: &World) -> usize {
    w.tracker
        .issues()
        .iter()
        .filter(|i| i.title == "Flaky login test")
        .count()
}

/// The issue the agent's task is about, as the tracker holds it.
fn the_issue(w: &World) -> gatehouse_services::tracker::Issue {
    w.tracker
        .issues()
        .into_iter()
        .find(|i| i.title == "Flaky login test")
        .expect("the issue was created")
}

/// One turn of the `agent` gadget on [`TASK`] in `work`, under `harness`.
async fn run_agent(w: &World, harness: Harness) -> RunReport {
    w.kernel
        .operator()
        .agent("agent", "work", TASK, harness)
        .await
        .expect("the agent runs")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_naive_harness_that_hides_pending_writes_creates_the_issue_twice() {
    let w = agent_world("issues").await;
    let r = run_agent(&w, Harness::Naive).await;
    assert!(
        r.turn.output.as_ref().unwrap().starts_with("gave up"),
        "{:?}",
        r.turn.output
    );
    approve_all(&w).await;
    assert_eq!(created(&w), 2, "the duplicate V2 warns about");
}

#[tokio::test(flavor = "multi_thread")]
async fn awaiting_the_decision_creates_it_once_and_resumes_after_approval() {
    let w = agent_world("issues").await;
    let r = run_agent(&w, Harness::Honest).await;
    assert_eq!(r.state, "waiting");
    assert_eq!(r.awaited.len(), 1);
    assert!(
        r.turn.output.as_ref().unwrap().starts_with("waiting"),
        "{:?}",
        r.turn.output
    );

    // Approving the create resumes the run; it then stages the label and waits again.
    assert!(
        w.kernel
            .person("alice")
            .approve(r.awaited[0])
            .await
            .unwrap()
            .ok()
    );
    let run = w.kernel.inspect().agent_run(r.run).unwrap().unwrap();
    assert_eq!(run.state, "waiting", "{run:?}");
    assert_eq!(run.turns, 2);
    assert!(run.last_output.unwrap().contains("addLabel"));

    approve_all(&w).await;
    let run = w.kernel.inspect().agent_run(r.run).unwrap().unwrap();
    assert_eq!(run.state, "done", "{run:?}");
    assert!(
        run.last_output.unwrap().starts_with("done"),
        "resumed once more and found it labelled"
    );
    assert_eq!(created(&w), 1);
    let issue = the_issue(&w);
    assert!(issue.labels.contains(&"ci".to_string()));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rejected_awaited_action_stops_the_run_instead_of_resuming_it() {
    let w = agent_world("issues").await;
    let r = run_agent(&w, Harness::Honest).await;
    assert!(
        w.kernel
            .person("alice")
            .reject(r.awaited[0])
            .await
            .unwrap()
            .ok()
    );
    let run = w.kernel.inspect().agent_run(r.run).unwrap().unwrap();
    assert_eq!(run.state, "stopped");
    assert!(run.last_output.unwrap().contains("rejected"));
    assert_eq!(run.turns, 1, "never resumed");
    assert_eq!(created(&w), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn simulation_creates_it_once_and_the_provisional_id_is_the_real_one() {
    let w = agent_world("issues_sim").await;
    let r = run_agent(&w, Harness::Honest).await;
    // The gatekeeper simulated both writes: nothing to await, the agent finished its turn.
    assert_eq!(r.state, "done", "{:?}", r.turn.output);
    let out = r.turn.output.unwrap();
    assert_eq!(
        out, "labelled: issue #3 (ci)",
        "two issues exist, so the provisional id is 3"
    );
    let pending = w.kernel.inspect().pending(None).unwrap();
    assert_eq!(pending.len(), 2);
    assert!(!pending[0].await_decision);
    assert_eq!(w.tracker.writes().len(), 0, "simulating sent nothing");

    // A second turn sees the world through the overlay and does not create again.
    let again = run_agent(&w, Harness::Honest).await;
    assert!(
        again
            .turn
            .output
            .as_ref()
            .unwrap()
            .starts_with("done: issue #3"),
        "{:?}",
        again.turn.output
    );

    approve_all(&w).await;
    assert_eq!(created(&w), 1);
    let issue = the_issue(&w);
    assert_eq!(
        issue.id, 3,
        "the provisional id is the id that exists after approval"
    );
    assert!(issue.labels.contains(&"ci".to_string()));
}

/// A simulation is a read (SPEC S3, V1): in a shared chat where a
/// collaborator could not see what it would touch, it is not made, and the
/// action is staged to await a decision (docs/security-model.md, "Sharing").
/// Found by the model test (`model.rs`): with the simulation moved behind the
/// egress checks, the forward-exclusion refusal refused the stage itself.
#[tokio::test(flavor = "multi_thread")]
async fn a_simulation_a_collaborator_could_not_see_is_skipped_and_the_action_awaits() {
    let w = World::new();
    w.install("script");
    w.add_gatekeeper("issues-sim", "issues", Trust::Byo).await;
    let k = &w.kernel;
    w.users(&["alice", "carol"])
        .chat_with("work", "alice", &[("issues", "ISSUES")]);
    // Carol has no account at the tracker: she could not see the issues a
    // simulation would read.
    k.person("alice").share("work", "carol", false).unwrap();
    let operator = format!("Bearer {TOKEN}");
    let with_operator = |w: &World| {
        w.tracker
            .requests()
            .iter()
            .filter(|r| r.authorization.as_deref() == Some(operator.as_str()))
            .count()
    };
    let create = |title: &str| call("ISSUES", "createIssue", json!({ "title": title }));

    let out = w.script("work", json!([create("held for a person")])).await;
    let pending = &out[0]["pending"];
    assert!(pending["action_id"].is_i64(), "staged: {}", out[0]);
    assert_eq!(pending["await_decision"], json!(true), "{}", out[0]);
    assert_eq!(pending["provisional"], Value::Null, "{}", out[0]);
    assert_eq!(with_operator(&w), 0, "no simulation was made");
    assert_eq!(w.tracker.writes().len(), 0);

    // Unshared, the same write is simulated again.
    k.person("alice").unshare("work", "carol").unwrap();
    let out = w.script("work", json!([create("simulated")])).await;
    assert!(out[0]["pending"]["provisional"].is_object(), "{}", out[0]);
    assert_eq!(k.inspect().pending(Some("work")).unwrap().len(), 2);
}
