//! Many hosts, one truth. Several hosts, each with a home of its
//! own (only its compiled components), serve one deployment from a real
//! PostgreSQL database (a throwaway cluster the tests start), and SPEC P,
//! U and L hold across them as they do across the processes of one home.
//!
//! - 50 concurrent approvals of one action, as separate `gatehouse`
//!   processes spread over three homes: one send, one decision.
//! - A host killed with SIGKILL after its claim: while it lives no other
//!   host touches the claim; once its connection is gone, the next host to
//!   start fails it (P3), and it is never sent again.
//! - What a turn and an approval cost, in round trips to the database.
//! - Two host processes draining one gatekeeper at once: each eligible
//!   action sent once, in id order, one at a time (U2, U3); one staged on one
//!   host is sent by the drain another host starts when a person decides
//!   the action it waited behind.
//! - A decision in one host's web inbox resumes an agent run parked by
//!   another host (the resuming host fetches the gadget from the database;
//!   once in kernels of their own, once as `serve` and `agent` processes),
//!   and that inbox's live view hears another host's changes with its
//!   polling tick set to an hour: the database's notifications wake it.

use crate::h_hooks_revert_expiry::notices::{open_stream, read_until};
use crate::surfaces::web_api::Api;
use gatehouse::kernel::Harness;
use gatehouse::store::{ActionState, Trust};
use gatehouse::web;
use gatehouse_e2e::postgres::{cluster, name_of};
use gatehouse_e2e::{
    Keys, Serving, World, keys_honoured, labels, pending_id, stderr, stdout, wait_until,
};
use gatehouse_services::tracker::Fault;
use serde_json::Value;
use std::process::Stdio;
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(120);

fn state(w: &World, id: i64) -> ActionState {
    w.kernel.inspect().action(id).unwrap().unwrap().state
}

/// A world on a fresh database of the tests' cluster.
async fn shared_world(trust: Trust, settings: Vec<(String, String)>) -> World {
    let url = cluster().database();
    World::standard_shared(&url, trust, settings).await
}

#[tokio::test(flavor = "multi_thread")]
async fn fifty_approvals_of_one_action_over_three_hosts_send_it_once() {
    let w = shared_world(Trust::Byo, Vec::new()).await;
    let id = w.stage_label("once").await;
    let homes: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let id_arg = id.to_string();
    let approvers: Vec<_> = (0..50)
        .map(|i| {
            w.cli_host(homes[i % 3].path(), &["approve", &id_arg])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("gatehouse starts")
        })
        .collect();
    let outs: Vec<_> = approvers
        .into_iter()
        .map(|c| c.wait_with_output().expect("gatehouse ends"))
        .collect();
    // One process applied it; every other was told, in one line, that
    // it was being applied or already was, and sent nothing.
    let (mut applied, mut told) = (0, 0);
    for o in &outs {
        let (out, err) = (stdout(o), stderr(o));
        if o.status.success() && !out.contains("already applied") {
            assert!(out.contains(&format!("#{id} applied")), "{out}");
            applied += 1;
            continue;
        }
        let said = if o.status.success() { out } else { err };
        assert_eq!(said.trim_end().lines().count(), 1, "one line: {said}");
        assert!(
            said.contains("nothing was sent again"),
            "the loser names what happened: {said}"
        );
        told += 1;
    }
    assert_eq!((applied, told), (1, 49));
    assert_eq!(w.tracker.writes().len(), 1, "sent once");
    assert_eq!(state(&w, id), ActionState::Applied);
    let url = w.database.as_deref().unwrap();
    let decisions = cluster().psql(
        name_of(url),
        &format!("SELECT count(*) FROM decisions WHERE action = {id}"),
    );
    assert_eq!(decisions.trim(), "1", "one decision");
}

/// The claims in flight as `db status --json` on the shared database
/// shows them: (action, host, present).
fn in_flight(w: &World, home: &std::path::Path) -> Vec<(i64, String, bool)> {
    let o = w
        .cli_host(home, &["db", "status", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    v["in_flight"]
        .as_array()
        .unwrap_or_else(|| panic!("claims in flight: {v}"))
        .iter()
        .map(|c| {
            (
                c["action"].as_i64().unwrap(),
                c["host"].as_str().unwrap_or_default().to_owned(),
                c["present"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// Host A, a process on `home`, approves action `id` of `w`; the service
/// takes the write and is slow to answer. Returns A, still running, with
/// its claim held, once the write reached the service.
fn sending_host(w: &World, id: i64, home: &std::path::Path) -> std::process::Child {
    w.tracker.inject(Fault::Slow(Duration::from_secs(60)), 1);
    let host_a = w
        .cli_host(home, &["approve", &id.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_until(PATIENCE, || w.tracker.writes().len() == 1),
        "host A's send reached the service"
    );
    assert_eq!(state(w, id), ActionState::Applying);
    host_a
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_killed_after_its_claim_is_failed_by_another_and_never_sent_again() {
    // A byo instance declares that its service honours idempotency keys
    // (its settings say so) before a service that ignores them: the
    // guest's word is not believed without key one (SPEC P9), so the
    // interrupted send is failed (P3), never re-sent by another host.
    let url = cluster().database();
    let w = World::standard_shared_before(&url, Trust::Byo, keys_honoured(), Keys::Ignored).await;
    let id = w.stage_label("interrupted").await;
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());

    // Host A claims and sends; the service takes the write and is slow to
    // answer, so A is killed with its claim held.
    let mut host_a = sending_host(&w, id, a.path());

    // While A lives, host B starting (it recovers claims as every host
    // does) leaves A's claim alone, and sees A present.
    let flight = in_flight(&w, b.path());
    assert_eq!(flight.len(), 1, "{flight:?}");
    assert_eq!(flight[0].0, id);
    assert!(flight[0].2, "host {} is present", flight[0].1);
    let o = w.cli_host(b.path(), &["pending"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        state(&w, id),
        ActionState::Applying,
        "a live host's claim is never touched"
    );

    host_a.kill().unwrap(); // SIGKILL
    host_a.wait().unwrap();

    // Once A's connection is gone, the next host to start fails the claim.
    assert!(
        wait_until(PATIENCE, || {
            let o = w.cli_host(b.path(), &["pending"]).output().unwrap();
            assert!(o.status.success(), "{}", stderr(&o));
            state(&w, id) == ActionState::Failed
        }),
        "another host failed the dead host's claim"
    );
    let action = w.kernel.inspect().action(id).unwrap().unwrap();
    assert_eq!(action.retryable, Some(false), "failed for good: {action:?}");
    assert!(
        action
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("interrupted"),
        "{action:?}"
    );
    assert!(in_flight(&w, b.path()).is_empty());
    // More hosts starting, and an approval tried again, send nothing.
    let o = w
        .cli_host(b.path(), &["approve", &id.to_string()])
        .output()
        .unwrap();
    assert!(!o.status.success(), "a failed action is not approved again");
    assert_eq!(w.tracker.writes().len(), 1, "never sent again");
    assert_eq!(w.posts_received(), 1, "no re-send reached the service");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_vetted_host_s_interrupted_claim_is_resent_once_by_another_host_where_keys_are_honoured()
{
    // The other way: an operator vouched for the instance and stated that
    // its service honours keys, and it does. Another host re-sends the
    // dead host's claim under the same key; the service answers from the
    // key, and the action ends applied once.
    let w = shared_world(Trust::Vetted, keys_honoured()).await;
    let id = w.stage_label("resent").await;
    let a = tempfile::tempdir().unwrap();
    let mut host_a = sending_host(&w, id, a.path());
    host_a.kill().unwrap(); // SIGKILL
    host_a.wait().unwrap();
    let key = w.tracker.writes()[0]
        .idempotency_key
        .clone()
        .expect("the send carried the kernel's key");
    let b = tempfile::tempdir().unwrap();
    assert!(
        wait_until(PATIENCE, || {
            let o = w.cli_host(b.path(), &["pending"]).output().unwrap();
            assert!(o.status.success(), "{}", stderr(&o));
            state(&w, id) == ActionState::Applied
        }),
        "another host resumed the dead host's claim"
    );
    assert_eq!(w.tracker.writes().len(), 1, "applied once at the service");
    let replays = w.tracker.replays();
    assert_eq!(replays.len(), 1, "the re-send was answered from its key");
    assert_eq!(replays[0].idempotency_key.as_deref(), Some(key.as_str()));
    assert!(in_flight(&w, b.path()).is_empty());
}

/// What serving from PostgreSQL costs, in round trips counted at the
/// driver (each statement is one): a gadget's turn staging one write is 4
/// (the chat's owner, the gadget with its chat, the policy epoch its kept
/// resolution stands on, the stage), and a person's approval of it, with
/// nothing else pending, 8 (the claim's three reads and its take, the
/// outcome, the chat's expiry sweep and its pending actions, the waiting
/// agent runs). A change that adds a trip to either fails here and says
/// how many it took.
#[tokio::test(flavor = "multi_thread")]
async fn a_turn_staging_one_write_is_four_round_trips_and_its_approval_eight() {
    let w = shared_world(Trust::Byo, Vec::new()).await;
    let trips = || {
        w.kernel
            .inspect()
            .round_trips()
            .expect("a host of a shared database counts its round trips")
    };
    // Warm: the components compiled, the pooled connections' statements
    // prepared.
    for i in 0..4 {
        let id = w.stage_label(&format!("warm{i}")).await;
        let d = w.kernel.person("alice").approve(id).await.unwrap();
        assert!(d.ok(), "{d:?}");
    }
    w.kernel.settle().await;
    let before = trips();
    let id = w.stage_label("counted").await;
    let turn = trips() - before;
    let before = trips();
    let d = w.kernel.person("alice").approve(id).await.unwrap();
    assert!(d.ok(), "{d:?}");
    let approval = trips() - before;
    assert_eq!(
        (turn, approval),
        (4, 8),
        "round trips of (a turn staging one write, its approval)"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn two_hosts_draining_one_gatekeeper_send_each_action_once_in_id_order() {
    let w = shared_world(Trust::Vetted, Vec::new()).await;
    // Six eligible writes wait for a rule; each send is slow, so the two
    // hosts' drains overlap.
    w.tracker.inject(Fault::Slow(Duration::from_millis(150)), 6);
    let out = w.script("work", labels(6)).await;
    let ids: Vec<i64> = out.as_array().unwrap().iter().map(pending_id).collect();
    w.kernel.settle().await;
    assert!(w.tracker.writes().is_empty(), "no rule yet: nothing sent");

    // Two host processes, each enabling the rule (a drain starts with
    // it) at the same moment.
    let homes: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let hosts: Vec<_> = homes
        .iter()
        .map(|h| {
            w.cli_host(h.path(), &["rules", "add", "issues:addLabel"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for h in hosts {
        let o = h.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    }
    for id in &ids {
        assert_eq!(state(&w, *id), ActionState::Applied, "action #{id}");
    }
    w.assert_sent_once_in_order(&ids);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_eligible_action_staged_on_one_host_is_sent_by_a_drain_on_another() {
    let w = shared_world(Trust::Vetted, Vec::new()).await;
    w.label_rule("alice").await;
    // Host A (this world's kernel) stages a write that needs a person,
    // then an eligible one, which waits behind it (U2).
    let (manual, eligible) = w.stage_manual_then_eligible().await;
    w.kernel.settle().await;
    assert_eq!(state(&w, eligible), ActionState::Pending);

    // A person approves the first on host B, a process of its own: B's
    // drain then sends the one A staged, in order.
    let b = tempfile::tempdir().unwrap();
    let o = w
        .cli_host(b.path(), &["approve", &manual.to_string()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(state(&w, manual), ActionState::Applied);
    assert_eq!(
        state(&w, eligible),
        ActionState::Applied,
        "host B's drain sent it"
    );
    let a = w.kernel.inspect().action(eligible).unwrap().unwrap();
    assert!(a.auto_approved, "{a:?}");
    let writes = w.tracker.writes();
    assert_eq!(writes.len(), 2);
    assert_eq!(writes[0].path, "/issues", "in id order");
    assert!(writes[1].path.ends_with("/labels"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_decision_in_one_hosts_inbox_resumes_a_run_parked_by_another_and_wakes_its_live_view() {
    let w = shared_world(Trust::Byo, Vec::new()).await;
    w.install("agent");
    w.kernel.operator().add_user("alice").unwrap();

    // Host A serves the web inbox; its live view looks for changes once an
    // hour, so only the database's notifications can wake it in time.
    let home_a = tempfile::tempdir().unwrap();
    let host_a = w.host(home_a.path()).await;
    let server = web::start(
        host_a,
        web::Config {
            port: 0,
            tick: Duration::from_secs(3600),
            ..web::Config::default()
        },
    )
    .await
    .unwrap();
    let alice = Api::signed_in(&w, &server.url(), "alice").await;
    let mut stream = open_stream(&alice).await.into_body();
    let mut buffer = String::new();
    assert!(read_until(&mut stream, &mut buffer, |n, _| n == "ready").await);

    // Host B (this world's kernel) runs an agent that stages a write and
    // parks, awaiting the decision.
    let run = w
        .kernel
        .operator()
        .agent(
            "agent",
            "work",
            "ensure Flaky login test | ci",
            Harness::Honest,
        )
        .await
        .unwrap();
    assert_eq!(run.state.to_string(), "waiting");
    let awaited = run.awaited[0];
    assert!(
        read_until(&mut stream, &mut buffer, |n, d| n == "change"
            && d.contains("\"chat\":\"work\""))
        .await,
        "host A's live view heard host B's stage"
    );

    // Alice approves in host A's inbox: A sends it and resumes B's run,
    // loading the agent gadget from the database into its own cache.
    let cached =
        |dir: &std::path::Path| std::fs::read_dir(dir.join("components")).map_or(0, |d| d.count());
    let before = cached(home_a.path());
    let a = alice.act_on(awaited, "approve").await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert!(
        wait_until(PATIENCE, || resumed_once(&w, run.run)),
        "the parked run was resumed"
    );
    assert!(
        cached(home_a.path()) > before,
        "host A fetched the agent gadget into its own cache"
    );
    assert_eq!(
        w.tracker
            .issues()
            .iter()
            .filter(|i| i.title == "Flaky login test")
            .count(),
        1
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_in_a_serve_process_resumes_a_run_parked_by_an_agent_process() {
    let w = shared_world(Trust::Byo, Vec::new()).await;
    w.install("agent");
    w.kernel.operator().add_user("alice").unwrap();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());

    // Host A: `gatehouse serve`, a process of its own.
    let serve = Serving::start(w.cli_host(a.path(), &["serve", "--port", "0"]));

    // Host B: an agent run in a process of its own, which parks.
    let o = w
        .cli_host(
            b.path(),
            &[
                "agent",
                "agent",
                "--chat",
                "work",
                "ensure Flaky login test | ci",
                "--json",
            ],
        )
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let run: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(run["state"], "waiting", "{run}");
    let awaited = run["awaited"][0].as_i64().unwrap();
    let id = run["run"].as_i64().unwrap();

    // Alice signs in at A, with a link made by another process on A's
    // home (it finds the running `serve`'s address there), and approves.
    let token = serve.token_from(
        &w.cli_host(a.path(), &["token", "create", "alice"])
            .output()
            .unwrap(),
    );
    let mut alice = Api::new(&serve.url);
    assert_eq!(alice.sign_in(&token).await.status, 200);
    let d = alice.act_on(awaited, "approve").await;
    assert_eq!(d.status, 200, "{}", d.text);

    // A sent it and resumed B's run: its second turn staged the label.
    assert!(resumed_once(&w, id), "the parked run was resumed");
}

/// Whether agent run `id` has taken its second turn, which stages the
/// label (the run was resumed once after its first write was applied).
fn resumed_once(w: &World, id: i64) -> bool {
    let r = w.kernel.inspect().agent_run(id).unwrap().unwrap();
    r.turns == 2
        && r.last_output
            .as_deref()
            .unwrap_or_default()
            .contains("addLabel")
}
