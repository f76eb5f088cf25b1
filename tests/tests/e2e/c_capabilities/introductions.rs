//! SPEC C2, C3, C5: capabilities only by introduction.

use gatehouse::store::{LedgerFilter, Trust};
use gatehouse_e2e::{World, call, create_step};
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn a_gadget_sees_only_what_was_introduced_to_its_chat() {
    let w = World::new();
    w.install("script");
    w.add_gatekeeper("issues", "issues", Trust::Byo).await;
    // Both chats start with nothing introduced.
    w.chat_with("work", "alice", &[])
        .chat_with("other", "alice", &[]);

    let before = w
        .script(
            "work",
            json!([{"env": true}, call("ISSUES", "listIssues", json!({}))]),
        )
        .await;
    assert_eq!(before[0]["keys"], json!([]));
    assert_eq!(before[1]["error"]["kind"], "unknown-key");
    assert_eq!(w.tracker.requests().len(), 0, "nothing reached the service");

    w.introduce("work", "alice", &[("issues", "ISSUES")]);
    let after = w
        .script(
            "work",
            json!([{"env": true}, call("ISSUES", "listIssues", json!({}))]),
        )
        .await;
    assert_eq!(after[0]["keys"], json!(["ISSUES"]));
    assert!(after[1]["done"].is_array(), "{}", after[1]);

    // Another chat still sees nothing, and an unknown key lists what exists.
    let other = w.script("other", json!([{"env": true}])).await;
    assert_eq!(other[0]["keys"], json!([]));
    let unknown = w
        .script("work", json!([call("PAYROLL", "listIssues", json!({}))]))
        .await;
    assert_eq!(unknown[0]["error"]["kind"], "unknown-key");
    assert_eq!(unknown[0]["error"]["known"], json!(["ISSUES"]));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_outside_the_grant_fails_naming_the_allowed_tools() {
    let w = World::new();
    w.install("script");
    w.add_gatekeeper("issues", "issues", Trust::Byo).await;
    w.kernel.person("alice").new_chat("work").unwrap();
    w.kernel
        .person("alice")
        .introduce(
            "work",
            "issues",
            "ISSUES",
            Some(vec!["listIssues".into(), "getIssue".into()]),
        )
        .unwrap();

    let out = w
        .script("work", json!([create_step("x"), {"tools": "ISSUES"}]))
        .await;
    assert_eq!(out[0]["error"]["kind"], "not-granted");
    assert_eq!(
        out[0]["error"]["allowed"],
        json!(["listIssues", "getIssue"])
    );
    let names: Vec<_> = out[1]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].clone())
        .collect();
    assert_eq!(names, vec![json!("listIssues"), json!("getIssue")]);
    assert!(
        w.kernel.inspect().pending(None).unwrap().is_empty(),
        "nothing was staged"
    );

    // Granting a tool the gatekeeper does not have is refused at introduce.
    let err = w
        .kernel
        .person("alice")
        .introduce(
            "work",
            "issues",
            "ISSUES",
            Some(vec!["dropDatabase".into()]),
        )
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("no tool \"dropDatabase\""),
        "{err:#}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_call_records_its_caller() {
    let w = World::standard(Trust::Byo).await;
    w.script(
        "work",
        json!([
            call("ISSUES", "listIssues", json!({})),
            create_step("from script")
        ]),
    )
    .await;
    let entries = w
        .kernel
        .inspect()
        .ledger(&LedgerFilter {
            chat: Some("work".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(entries.len(), 2);
    for e in &entries {
        // The principal (the chat's owner ran the turn), the person it
        // acted for, and the gadget (SPEC C5).
        assert_eq!(e.caller, "alice");
        assert_eq!(e.person, "alice");
        assert_eq!(e.gadget.as_deref(), Some("script"));
        assert_eq!(e.chat, "work");
    }
    assert_eq!(entries[0].kind, "observation");
    assert_eq!(entries[1].kind, "action");
}

/// A world where alice's chat `work` has `issues` introduced as ISSUES,
/// and a turn of hers there.
async fn alices_work() -> (World, gatehouse::kernel::Turn) {
    let w = World::new();
    w.add_gatekeeper("issues", "issues", Trust::Byo).await;
    w.chat_with("work", "alice", &[("issues", "ISSUES")]);
    let turn =
        gatehouse::kernel::Turn::new("script", "work", gatehouse::Principal::person("alice"));
    (w, turn)
}

/// Another process (the command line) introduces `issues` into `work`
/// again, granting `tools` (all when empty).
fn introduce_elsewhere(w: &World, tools: &[&str]) {
    let mut args = vec![
        "introduce",
        "work",
        "issues",
        "--key",
        "ISSUES",
        "--as",
        "alice",
    ];
    if !tools.is_empty() {
        args.push("--tools");
        args.extend(tools);
    }
    let o = w.cli(&args);
    assert!(o.status.success(), "{}", gatehouse_e2e::stderr(&o));
}

/// A stage starts from the binding the host kept for the call, and reads
/// the policy epoch only inside its staging transaction. What
/// another process changes between two calls of one turn is still seen:
/// with the grant narrowed from the command line, the next stage is
/// refused and stages nothing; granted again, the next one stages.
#[tokio::test(flavor = "multi_thread")]
async fn a_grant_narrowed_by_another_process_refuses_the_next_stage() {
    use gatehouse::kernel::{CallError, CallOutcome};
    let (w, turn) = alices_work().await;
    let create = |title: &str| {
        let args = json!({ "title": title }).to_string();
        w.kernel.call(&turn, "ISSUES", "createIssue", args)
    };
    let pending = |w: &World| w.kernel.inspect().pending(Some("work")).unwrap().len();

    let first = create("kept").await.unwrap();
    assert!(matches!(first, Ok(CallOutcome::Pending(_))), "{first:?}");
    assert_eq!(pending(&w), 1);

    introduce_elsewhere(&w, &["listIssues"]);
    let refused = create("after narrowing").await.unwrap();
    assert!(
        matches!(&refused, Err(CallError::NotGranted { allowed, .. }) if allowed == &["listIssues"]),
        "{refused:?}"
    );
    assert_eq!(pending(&w), 1, "nothing was staged");

    introduce_elsewhere(&w, &[]);
    let again = create("granted again").await.unwrap();
    assert!(matches!(again, Ok(CallOutcome::Pending(_))), "{again:?}");
    assert_eq!(pending(&w), 2);
    assert_eq!(w.tracker.requests().len(), 0, "nothing reached the service");
}

/// Reads one after another reuse the binding they kept only while the
/// deployment's epoch stands (one statement per read, docs/operations.md);
/// a grant narrowed by another process between two reads moves it, and
/// the next read is refused before it reaches the service.
#[tokio::test(flavor = "multi_thread")]
async fn a_grant_narrowed_by_another_process_refuses_the_next_read() {
    use gatehouse::kernel::{CallError, CallOutcome};
    let (w, turn) = alices_work().await;
    let list = || w.kernel.call(&turn, "ISSUES", "listIssues", "{}".into());
    for _ in 0..3 {
        let read = list().await.unwrap();
        assert!(matches!(read, Ok(CallOutcome::Done(_))), "{read:?}");
    }
    let reached = w.tracker.requests().len();
    assert_eq!(reached, 3, "each read reached the service");

    introduce_elsewhere(&w, &["createIssue"]);
    let refused = list().await.unwrap();
    assert!(
        matches!(&refused, Err(CallError::NotGranted { allowed, .. }) if allowed == &["createIssue"]),
        "{refused:?}"
    );
    assert_eq!(
        w.tracker.requests().len(),
        reached,
        "the refused read was not sent"
    );
}
