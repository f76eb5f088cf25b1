//! Exactly once where the service allows it, and only where an operator
//! vouched for that (SPEC P9).
//!
//! A sweep SIGKILLs real `gatehouse approve` processes at varied points
//! (before the claim, after it, while the request is at the service, after
//! the answer) and restarts them. Three deployments:
//! - a vetted `issues` instance whose operator stated that the tracker
//!   honours idempotency keys, before a tracker that does: every approved
//!   action ends applied exactly once at the tracker;
//! - a vetted instance with no such statement (the default): its tools
//!   declare no key and send none; every action is sent at most once, and
//!   an interrupted one ends failed, not retryable;
//! - a `byo` instance that declares keys (its settings say so) before a
//!   tracker that ignores them: the guest's word is not believed without
//!   key one, so recovery never re-sends, and nothing is sent twice.
//!
//! The action is `createIssue`, which is not idempotent by nature: a second
//! application would make a second issue, so counting issues by title
//! counts applications.

use gatehouse::store::{ActionState, Trust};
use gatehouse_e2e::{
    Keys, World, call, cli_command, keys_honoured, pending_id, stderr, stdout, wait_until,
};
use gatehouse_services::tracker::{Fault, Received};
use serde_json::{Value, json};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// How a round interrupts its approval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kill {
    /// After a random delay: before, during or after the claim and send.
    Random(u64),
    /// Once the claim is on disk (`applying`), before or while sending.
    AfterClaim,
    /// While the service holds the request (it applied it, and answers
    /// only later).
    AtTheService,
    /// Once the outcome is recorded (the process is finishing up).
    AfterTheAnswer,
}

/// A small deterministic generator: the same plan on every run (the kill
/// timing itself still varies with the machine, which is the point).
struct Plan(u64);

impl Plan {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn kill(&mut self, round: usize) -> Kill {
        match round % 4 {
            0 => Kill::Random(self.next() % 150),
            1 => Kill::AfterClaim,
            2 => Kill::AtTheService,
            _ if self.next().is_multiple_of(2) => Kill::AfterTheAnswer,
            _ => Kill::Random(self.next() % 150),
        }
    }
}

fn approve(w: &World, id: i64) -> Child {
    cli_command(w.home(), &["approve", &id.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("gatehouse approve starts")
}

fn state(w: &World, id: i64) -> ActionState {
    w.kernel.inspect().action(id).unwrap().unwrap().state
}

fn title_of(r: &Received) -> Option<String> {
    serde_json::from_str::<Value>(&r.body)
        .ok()
        .and_then(|v| v["title"].as_str().map(str::to_owned))
}

/// The requests for `title` the tracker received, and how many it applied.
fn at_tracker(w: &World, title: &str) -> (Vec<Received>, usize) {
    let received: Vec<Received> = w
        .tracker
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && title_of(r).as_deref() == Some(title))
        .collect();
    let applied = w
        .tracker
        .writes()
        .iter()
        .filter(|r| title_of(r).as_deref() == Some(title))
        .count();
    (received, applied)
}

/// Interrupt one approval of `id` as `kill` says. Returns whether the kill
/// found the process still running (it may have finished first).
fn interrupt(w: &World, id: i64, title: &str, kill: Kill) -> bool {
    const PATIENCE: Duration = Duration::from_secs(60);
    if kill == Kill::AtTheService {
        w.tracker.inject(Fault::Slow(Duration::from_millis(400)), 1);
    }
    let mut child = approve(w, id);
    let started = Instant::now();
    match kill {
        Kill::Random(ms) => std::thread::sleep(Duration::from_millis(ms)),
        Kill::AfterClaim => {
            wait_until(PATIENCE, || state(w, id) != ActionState::Pending);
        }
        Kill::AtTheService => {
            assert!(
                wait_until(PATIENCE, || !at_tracker(w, title).0.is_empty()),
                "the request for {title} reached the tracker"
            );
        }
        Kill::AfterTheAnswer => {
            wait_until(PATIENCE, || state(w, id).is_final());
        }
    }
    let running = child.try_wait().expect("the child's status").is_none();
    child.kill().ok(); // SIGKILL
    child.wait().expect("the killed child is reaped");
    assert!(started.elapsed() < PATIENCE, "{kill:?} took too long");
    running
}

struct Swept {
    ids: Vec<(i64, String)>,
    /// Kills that found the process running.
    killed: usize,
    /// Final approvals, by exit status.
    succeeded: usize,
    refused: usize,
}

/// Stage `rounds` createIssue actions, interrupt each approval (some
/// twice: the restart is killed too, mid-recovery), then restart once more
/// and let it finish.
async fn sweep(w: &World, rounds: usize, seed: u64) -> Swept {
    let titles: Vec<String> = (0..rounds).map(|i| format!("sweep {seed} #{i}")).collect();
    let steps: Vec<Value> = titles
        .iter()
        .map(|t| call("ISSUES", "createIssue", json!({ "title": t })))
        .collect();
    let out = w.script("work", Value::Array(steps)).await;
    let ids: Vec<(i64, String)> = out
        .as_array()
        .unwrap()
        .iter()
        .map(pending_id)
        .zip(titles)
        .collect();
    let mut plan = Plan(seed);
    let mut swept = Swept {
        ids: ids.clone(),
        killed: 0,
        succeeded: 0,
        refused: 0,
    };
    for (round, (id, title)) in ids.iter().enumerate() {
        let kill = plan.kill(round);
        swept.killed += usize::from(interrupt(w, *id, title, kill));
        if plan.next().is_multiple_of(3) {
            // The restart dies too, perhaps while it re-sends.
            let again = Kill::Random(plan.next() % 150);
            swept.killed += usize::from(interrupt(w, *id, title, again));
        }
        let o = cli_command(w.home(), &["approve", &id.to_string()])
            .output()
            .expect("the restart runs");
        if o.status.success() {
            let said = stdout(&o);
            assert_eq!(said.trim_end().lines().count(), 1, "one line: {said}");
            assert!(said.contains("applied"), "{said}");
            swept.succeeded += 1;
        } else {
            assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
            assert!(stderr(&o).contains("never resent"), "{}", stderr(&o));
            swept.refused += 1;
        }
    }
    swept
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_sweep_applies_every_action_exactly_once_where_the_service_honours_keys() {
    let started = Instant::now();
    let w = World::standard_with(Trust::Vetted, keys_honoured()).await;
    let swept = sweep(&w, 24, 0x9e37_79b9_7f4a_7c15).await;
    for (id, title) in &swept.ids {
        let a = w.kernel.inspect().action(*id).unwrap().unwrap();
        assert_eq!(
            a.state,
            ActionState::Applied,
            "#{id} {title}: {:?}",
            a.error
        );
        let (received, applied) = at_tracker(&w, title);
        assert_eq!(applied, 1, "#{id} {title} applied exactly once");
        let created = w
            .tracker
            .issues()
            .iter()
            .filter(|i| &i.title == title)
            .count();
        assert_eq!(created, 1, "#{id} {title}: one issue");
        // Every send of the action carried one and the same key.
        let keys: std::collections::BTreeSet<_> =
            received.iter().map(|r| r.idempotency_key.clone()).collect();
        assert_eq!(keys.len(), 1, "#{id}: {keys:?}");
        assert!(
            keys.iter()
                .all(|k| k.as_deref().is_some_and(|k| k.len() == 64))
        );
    }
    println!(
        "sweep with keys: {} actions, {} kills of running approvals, {} re-sends answered from their key, {:?}",
        swept.ids.len(),
        swept.killed,
        w.tracker.replays().len(),
        started.elapsed()
    );
    assert_eq!(swept.succeeded, swept.ids.len(), "every restart ended well");
    assert!(swept.killed > 0, "the sweep killed running approvals");
    assert!(
        !w.tracker.replays().is_empty(),
        "some interrupted send was resumed and answered from its key"
    );
    let keys: std::collections::BTreeSet<_> = swept
        .ids
        .iter()
        .map(|(_, title)| at_tracker(&w, title).0[0].idempotency_key.clone())
        .collect();
    assert_eq!(
        keys.len(),
        swept.ids.len(),
        "one key per action, none shared"
    );
    assert!(
        started.elapsed() < Duration::from_secs(90),
        "{:?}",
        started.elapsed()
    );
}

/// Every action of `swept` was sent at most once; each interrupted one
/// ended failed, not retryable, and its restart said so. Returns how many
/// failed. `keyed`: whether the sends carried the kernel's key.
fn assert_at_most_once(w: &World, swept: &Swept, keyed: bool) -> usize {
    let mut failed = 0;
    for (id, title) in &swept.ids {
        let a = w.kernel.inspect().action(*id).unwrap().unwrap();
        let (received, applied) = at_tracker(w, title);
        assert!(
            received.len() <= 1,
            "#{id} {title} sent at most once: {received:?}"
        );
        assert!(applied <= 1, "#{id} {title} applied at most once");
        assert!(
            received
                .iter()
                .all(|r| r.idempotency_key.is_some() == keyed),
            "#{id}: {received:?}"
        );
        match a.state {
            ActionState::Applied => assert_eq!(applied, 1, "#{id} {title}"),
            ActionState::Failed => {
                failed += 1;
                assert_eq!(a.retryable, Some(false), "#{id}");
                assert!(
                    a.error
                        .as_deref()
                        .unwrap_or("")
                        .contains("interrupted after sending"),
                    "#{id}: {:?}",
                    a.error
                );
            }
            other => panic!("#{id} {title} ended {other}"),
        }
    }
    assert!(failed > 0, "an interrupted send is failed, as before");
    assert_eq!(
        swept.refused, failed,
        "each failed one was refused on restart"
    );
    assert!(w.tracker.replays().is_empty());
    failed
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_sweep_without_the_key_sends_at_most_once_and_fails_the_interrupted() {
    // Vetted, but the operator stated nothing about keys (the default):
    // key one alone does not make a re-send.
    let started = Instant::now();
    let w = World::standard(Trust::Vetted).await;
    let swept = sweep(&w, 24, 0x2545_f491_4f6c_dd1d).await;
    let failed = assert_at_most_once(&w, &swept, false);
    println!(
        "sweep without keys: {} actions, {} kills of running approvals, {failed} failed, {:?}",
        swept.ids.len(),
        swept.killed,
        started.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(90),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_sweep_of_a_byo_gatekeeper_claiming_keys_before_a_service_ignoring_them_never_sends_twice()
 {
    // The instance declares keys and sends them (its settings say the
    // service honours them), but nobody vouched for it, and the tracker
    // ignores keys: believing the guest would apply a re-send twice.
    let started = Instant::now();
    let w = World::standard_before(Trust::Byo, keys_honoured(), Keys::Ignored).await;
    let swept = sweep(&w, 24, 0x6a09_e667_f3bc_c909).await;
    let failed = assert_at_most_once(&w, &swept, true);
    let doubles = swept
        .ids
        .iter()
        .filter(|(_, t)| w.tracker.issues().iter().filter(|i| &i.title == t).count() > 1)
        .count();
    println!(
        "sweep of a byo gatekeeper claiming keys: {} actions, {} kills of running approvals, {failed} failed, {doubles} double sends, {:?}",
        swept.ids.len(),
        swept.killed,
        started.elapsed()
    );
    assert_eq!(doubles, 0, "no action made two issues");
    assert!(
        started.elapsed() < Duration::from_secs(90),
        "{:?}",
        started.elapsed()
    );
}
