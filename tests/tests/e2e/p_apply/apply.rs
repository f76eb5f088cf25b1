//! SPEC P1-P4: claim before send, failure classes, recovery; at most once.

use gatehouse::overseer::Decision;
use gatehouse::store::{ActionState, Trust};
use gatehouse_e2e::{
    World, call, cli_command, create_step, keys_honoured, label_step, pending_id, stderr, stdout,
    wait_until,
};
use gatehouse_services::tracker::Fault;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// A CLI `approve` of `id` in its own process, caught between its send
/// and its record: the tracker applies the write and never answers, so
/// the process waits (with a long deadline) holding the claim. Returns
/// once the write reached the service; the caller kills the process.
fn approval_hung_after_its_send(w: &World, id: i64) -> std::process::Child {
    w.tracker.inject(Fault::LandThenHang, 1);
    let child = cli_command(w.home(), &["approve", &id.to_string()])
        .env("GATEHOUSE_GATEKEEPER_DEADLINE_MS", "600000")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(60), || w.tracker.writes().len() == 1),
        "the write reached the service"
    );
    child
}

/// SIGKILL: the process dies where it stands, as a crashed host would.
fn kill(mut child: std::process::Child) {
    child.kill().expect("the process is killed");
    child.wait().expect("the process is reaped");
}

async fn staged_issue(w: &World, title: &str) -> i64 {
    let out = w.script("work", json!([create_step(title)])).await;
    pending_id(&out[0])
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_concurrent_approvals_send_once() {
    let w = World::standard(Trust::Byo).await;
    let id = staged_issue(&w, "exactly once").await;

    // Ten separate processes...
    let children: Vec<_> = (0..10)
        .map(|_| {
            cli_command(w.home(), &["approve", &id.to_string(), "--json"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
    // ...and ten kernels in this process, each with its own connection.
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let k = w.reopen();
        tasks.push(tokio::spawn(async move {
            k.person("alice").approve(id).await.unwrap()
        }));
    }
    let mut applied = 0;
    let mut refused = 0;
    for t in tasks {
        match t.await.unwrap() {
            Decision::Applied { .. } => applied += 1,
            Decision::Refused { reason, .. } => {
                assert!(reason.contains("being applied"), "{reason}");
                refused += 1
            }
            Decision::AlreadyApplied { .. } => refused += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    for c in children {
        let o = c.wait_with_output().unwrap();
        let text = stdout(&o);
        if text.contains("\"outcome\": \"applied\"") {
            applied += 1;
            assert!(o.status.success());
        } else {
            assert!(
                text.contains("already-applied") || text.contains("being applied"),
                "a losing approval says why: {text} {}",
                stderr(&o)
            );
            refused += 1;
        }
    }
    assert_eq!(applied, 1, "exactly one approval succeeds");
    assert_eq!(refused, 19);
    assert_eq!(
        w.tracker.writes().len(),
        1,
        "one request reached the service"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_that_lands_then_times_out_is_final() {
    let w = World::standard(Trust::Byo).await;
    let id = staged_issue(&w, "lands then hangs").await;
    w.tracker.inject(Fault::LandThenHang, 1);
    let d = w.kernel.person("alice").approve(id).await.unwrap();
    match &d {
        Decision::Failed {
            retryable, message, ..
        } => {
            assert!(!retryable);
            assert!(message.contains("check issues"), "{message}");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    assert_eq!(w.tracker.writes().len(), 1);
    let again = w.kernel.person("alice").approve(id).await.unwrap();
    match again {
        Decision::Refused { reason, .. } => {
            assert!(reason.contains("check the service"), "{reason}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(w.tracker.writes().len(), 1, "never resent");
    // The gadget sees the stored error and that it cannot be retried.
    let polled = w.script("work", json!([{"poll": id}])).await;
    assert_eq!(polled[0]["status"], "failed");
    assert_eq!(polled[0]["retryable"], false);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_403_is_retryable_and_the_retry_succeeds() {
    let w = World::standard(Trust::Byo).await;
    let id = staged_issue(&w, "forbidden once").await;
    w.tracker.inject(Fault::Status(403), 1);
    match w.kernel.person("alice").approve(id).await.unwrap() {
        Decision::Failed { retryable, .. } => assert!(retryable),
        other => panic!("expected a retryable failure, got {other:?}"),
    }
    assert_eq!(w.tracker.writes().len(), 0, "the 403 took no effect");
    assert!(matches!(
        w.kernel.person("alice").approve(id).await.unwrap(),
        Decision::Applied { .. }
    ));
    assert_eq!(w.tracker.writes().len(), 1);
    assert_eq!(
        w.kernel.inspect().action(id).unwrap().unwrap().state,
        ActionState::Applied
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn server_errors_and_garbage_are_not_retryable() {
    let w = World::standard(Trust::Byo).await;
    for fault in [Fault::Status(500), Fault::Garbage, Fault::Status(401)] {
        let id = staged_issue(&w, "faulty").await;
        w.tracker.inject(fault, 1);
        let d = w.kernel.person("alice").approve(id).await.unwrap();
        let Decision::Failed { retryable, .. } = d else {
            panic!("{fault:?}: {d:?}")
        };
        assert_eq!(retryable, matches!(fault, Fault::Status(401)), "{fault:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_killed_after_the_claim_never_sends_again() {
    // An instance whose operator stated nothing about keys (the default):
    // at most once, even though the instance is vetted (SPEC P9).
    let w = World::standard(Trust::Vetted).await;
    let id = staged_issue(&w, "killed mid-apply").await;
    let child = approval_hung_after_its_send(&w, id);
    assert_eq!(
        w.kernel.inspect().action(id).unwrap().unwrap().state,
        ActionState::Applying
    );
    kill(child);

    // A new start recovers: failed, not retryable, never sent again.
    let k = w.reopen();
    let a = k.inspect().action(id).unwrap().unwrap();
    assert_eq!(a.state, ActionState::Failed);
    assert_eq!(a.retryable, Some(false));
    assert!(a.error.unwrap().contains("interrupted after sending"));
    assert!(matches!(
        k.person("alice").approve(id).await.unwrap(),
        Decision::Refused { .. }
    ));
    let o = w.cli(&["approve", &id.to_string()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("never resent"), "{}", stderr(&o));
    assert_eq!(w.tracker.writes().len(), 1);
    assert!(
        w.tracker.writes()[0].idempotency_key.is_none(),
        "an instance that declares no key sends none"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_killed_after_the_claim_is_resent_with_its_key_and_applied_once() {
    // The tracker honours idempotency keys, the gatekeeper declares it,
    // the operator stated it and vouched for the instance (SPEC P9):
    // recovery re-sends the interrupted claim with the same key.
    let w = World::standard_with(Trust::Vetted, keys_honoured()).await;
    let id = staged_issue(&w, "killed mid-apply, resent").await;
    kill(approval_hung_after_its_send(&w, id));
    let key = w.tracker.writes()[0]
        .idempotency_key
        .clone()
        .expect("the send carried the kernel's key");
    assert_eq!(key.len(), 64, "{key}");

    // The next command resumes the send before it runs, with the same key.
    let o = w.cli(&["approve", &id.to_string()]);
    assert!(o.status.success(), "{} {}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("already applied"), "{}", stdout(&o));
    let a = w.kernel.inspect().action(id).unwrap().unwrap();
    assert_eq!(a.state, ActionState::Applied);
    assert_eq!(w.tracker.writes().len(), 1, "applied once at the service");
    let replays = w.tracker.replays();
    assert_eq!(replays.len(), 1, "the re-send was answered from its key");
    assert_eq!(replays[0].idempotency_key.as_deref(), Some(key.as_str()));
    let created: Vec<_> = w
        .tracker
        .issues()
        .into_iter()
        .filter(|i| i.title == "killed mid-apply, resent")
        .collect();
    assert_eq!(created.len(), 1, "one issue, not two");
    // The result handed over is the first answer: the created issue.
    let result: serde_json::Value = serde_json::from_str(a.result.as_deref().unwrap()).unwrap();
    assert_eq!(result["id"], created[0].id);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_byo_gatekeeper_declaring_keys_is_not_believed_and_its_interrupted_send_fails() {
    // The instance declares that its service honours keys and sends them,
    // but nobody vouched for it (byo): its word alone never makes a
    // re-send (SPEC P9), so the claim is failed for good.
    let w = World::standard_with(Trust::Byo, keys_honoured()).await;
    let id = staged_issue(&w, "byo keys").await;
    kill(approval_hung_after_its_send(&w, id));
    assert!(
        w.tracker.writes()[0].idempotency_key.is_some(),
        "the instance sent a key"
    );
    let o = w.cli(&["approve", &id.to_string()]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stderr(&o).contains("never resent"), "{}", stderr(&o));
    let a = w.kernel.inspect().action(id).unwrap().unwrap();
    assert_eq!((a.state, a.retryable), (ActionState::Failed, Some(false)));
    assert_eq!(w.posts_received(), 1, "sent once");
    assert!(w.tracker.replays().is_empty(), "never re-sent");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_claim_survives_another_process_starting() {
    // Recovery must not fail a claim whose process is still applying.
    let w = World::standard(Trust::Byo).await;
    let id = staged_issue(&w, "slow").await;
    w.tracker.inject(Fault::LandThenHang, 1);
    let k = w.reopen();
    let approving = tokio::spawn(async move { k.person("alice").approve(id).await.unwrap() });
    assert!(wait_until(Duration::from_secs(60), || w
        .tracker
        .writes()
        .len()
        == 1));
    let o = w.cli(&["pending"]);
    assert!(o.status.success());
    assert_eq!(
        w.kernel.inspect().action(id).unwrap().unwrap().state,
        ActionState::Applying
    );
    let d = approving.await.unwrap();
    assert!(
        matches!(
            d,
            Decision::Failed {
                retryable: false,
                ..
            }
        ),
        "{d:?}"
    );
}

/// A TCP proxy to `to` that counts the connections made through it.
async fn counting_proxy(to: std::net::SocketAddr) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let host = listener.local_addr().expect("its address").to_string();
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (host, count)
}

/// Reads keep their connections for the next read (no new handshake per
/// call); an approved action's send always opens one of its own, so that
/// a kept connection the server closed at that moment can never make an
/// approved write fail for good (P2).
#[tokio::test(flavor = "multi_thread")]
async fn reads_reuse_a_kept_connection_and_every_send_opens_its_own() {
    let w = World::new();
    w.install("script");
    let (host, connections) = counting_proxy(w.tracker.addr()).await;
    let k = &w.kernel;
    w.front(
        "issues",
        "issues",
        Trust::Byo,
        vec![host],
        Some(("tracker-token", gatehouse_e2e::TOKEN)),
        Vec::new(),
    )
    .await
    .expect("the gatekeeper is added");
    w.chat_with("work", "alice", &[("issues", "ISSUES")]);
    let count = || connections.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(count(), 0);

    // Five reads, one after another: one connection.
    let reads: Vec<Value> = (0..5)
        .map(|_| call("ISSUES", "listIssues", json!({})))
        .collect();
    let out = w.script("work", Value::Array(reads)).await;
    for r in out.as_array().unwrap() {
        assert!(r.get("done").is_some(), "{r}");
    }
    assert_eq!(count(), 1, "five reads over one kept connection");

    // Two approved writes: a connection each, never a kept one.
    let out = w
        .script("work", json!([label_step(1, "a"), label_step(2, "b"),]))
        .await;
    for r in out.as_array().unwrap() {
        let id = gatehouse_e2e::pending_id(r);
        k.person("alice").approve(id).await.unwrap();
    }
    assert_eq!(w.tracker.writes().len(), 2);
    assert_eq!(count(), 3, "each send on a connection of its own");
}
