//! One gate, no side doors. One test per way around the gate (a surface,
//! a rule or a workflow that could act without the one rule or the one
//! send path), each asserting on what the loopback services received and on
//! what a person can see and do through the CLI and the web API.
//!
//! Alice owns chat `work` with the `issues` gatekeeper (whose operator
//! credential is `TOKEN`); Bob and Carol are other people, Mallory a
//! stranger.

use crate::surfaces::web_api::{Api, chat_path, serve};
use gatehouse::overseer::Decision;
use gatehouse::sharing::OpenRequest;
use gatehouse::store::{LedgerFilter, Trust};
use gatehouse_e2e::{TOKEN, World, add_label, call, cli_command, pending_id, stderr, stdout};
use gatehouse_services::warehouse::Warehouse;
use serde_json::json;

const BOB_TOKEN: &str = "tok-bob-5e1c-own-account";
const WAREHOUSE_TOKEN: &str = "wh-owner-31c7";

/// The standard world, plus Bob, Carol and Mallory; Bob has his own
/// tracker account.
async fn people(trust: Trust) -> World {
    let gadgets = ["script", "triage"];
    let people = ["alice", "bob", "carol", "mallory"];
    let w = World::with_account(&gadgets, trust, &people, ("bob", BOB_TOKEN), false).await;
    w.chat_with("work", "alice", &[("issues", "ISSUES")]);
    w
}

/// Run the script gadget as `person` in `chat`; its JSON answer.
async fn script_as(
    w: &World,
    person: &str,
    chat: &str,
    steps: serde_json::Value,
) -> serde_json::Value {
    let input = json!({ "steps": steps }).to_string();
    let report = w
        .kernel
        .person(person)
        .run("script", chat, &input)
        .await
        .unwrap_or_else(|e| panic!("{person}'s turn was refused: {e:#}"));
    let out = report
        .output
        .unwrap_or_else(|e| panic!("script gadget failed: {e}"));
    serde_json::from_str(&out).expect("script answers JSON")
}

fn create(title: &str) -> serde_json::Value {
    call("ISSUES", "createIssue", json!({ "title": title }))
}

fn open(w: &World, chat: &str, person: &str) -> impl Future<Output = bool> {
    let k = w.kernel.clone();
    let (chat, person) = (chat.to_owned(), person.to_owned());
    async move {
        matches!(
            k.person(&person)
                .open_chat(&chat, &OpenRequest::default())
                .await
                .expect("open runs"),
            gatehouse::sharing::OpenOutcome::Admitted { .. }
        )
    }
}

/// Side door 1: a collaborator's write went out under the owner's
/// credential. Now it goes out with the collaborator's own account, the
/// prompt says who staged it, and a collaborator without an account is
/// refused at staging.
#[tokio::test(flavor = "multi_thread")]
async fn a_collaborators_write_is_sent_with_their_own_account_never_the_owners() {
    let w = people(Trust::Byo).await;
    let k = &w.kernel;
    k.person("alice")
        .share("work", "bob", false)
        .expect("share");
    k.person("alice")
        .share("work", "carol", false)
        .expect("share");
    assert!(open(&w, "work", "bob").await, "bob passes re-verification");

    let staged = script_as(&w, "bob", "work", json!([create("from bob")])).await;
    let id = pending_id(&staged[0]);
    let shown = k
        .person("alice")
        .shown(id)
        .await
        .unwrap()
        .expect("alice sees it");
    assert!(
        shown.prompt.contains("Staged by: bob in chat work"),
        "{}",
        shown.prompt
    );
    assert!(
        shown
            .prompt
            .contains("Sent with: bob's credential (bob/main)"),
        "{}",
        shown.prompt
    );
    let before = w.tracker.requests().len();

    // Carol has no account at the tracker: refused at staging, nothing
    // reached the tracker, nothing was staged.
    let carol = k
        .person("carol")
        .open_chat("work", &OpenRequest::default())
        .await;
    // Her open is refused too (the tracker does not know her), so she may
    // not run anything there.
    assert!(carol.is_ok());
    let refused = k
        .person("carol")
        .run(
            "script",
            "work",
            &json!({"steps": [create("from carol")]}).to_string(),
        )
        .await;
    match refused {
        Err(e) => assert!(format!("{e:#}").contains("carol"), "{e:#}"),
        Ok(r) => {
            let out: serde_json::Value = serde_json::from_str(&r.output.unwrap()).unwrap();
            let msg = out[0]["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            assert!(msg.contains("carol has no account at issues"), "{out}");
        }
    }
    assert_eq!(
        w.tracker.requests().len(),
        before,
        "carol's write reached nothing"
    );
    assert_eq!(k.inspect().pending(Some("work")).unwrap().len(), 1);

    // Alice approves Bob's write: it is sent with Bob's token.
    let d = k.person("alice").approve(id).await.unwrap();
    assert!(matches!(d, Decision::Applied { .. }), "{d:?}");
    let writes = w.tracker.writes();
    assert_eq!(writes.len(), 1);
    assert_eq!(
        writes[0].authorization.as_deref(),
        Some(format!("Bearer {BOB_TOKEN}").as_str()),
        "sent with bob's own account"
    );
    assert!(
        !writes
            .iter()
            .any(|r| r.authorization.as_deref() == Some(&format!("Bearer {TOKEN}")))
    );
}

/// Side door 2: auto-approval rules were deployment-wide. A rule belongs
/// to its person and applies only in the chats they own (or one named
/// chat where they may decide).
#[tokio::test(flavor = "multi_thread")]
async fn a_rule_auto_approves_only_in_its_persons_own_chats() {
    let w = people(Trust::Vetted).await;
    let k = &w.kernel;
    // Mallory enables a rule for the tag: it covers nothing of Alice's.
    w.label_rule("mallory").await;
    // ... and may not scope one to Alice's chat, through the kernel or the
    // web API (answered like a chat that does not exist).
    let err = k
        .person("mallory")
        .add_rule("issues:addLabel", Some("work"))
        .await
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("no chat named \"work\""),
        "{err:#}"
    );
    let server = serve(&w).await;
    let mallory = Api::signed_in(&w, &server.url(), "mallory").await;
    let a = mallory
        .send(
            "POST",
            "/api/rules",
            Some(json!({"tag": "issues:addLabel", "chat": "work"})),
            &[],
        )
        .await;
    assert_eq!(a.status, 404, "{}", a.text);

    let id = w.stage_label_on("work", 1, "triaged").await;
    k.settle().await;
    k.drain().await.unwrap();
    assert_eq!(
        w.tracker.writes().len(),
        0,
        "mallory's rule approved nothing"
    );
    assert_eq!(
        k.inspect().action(id).unwrap().unwrap().state.as_str(),
        "pending"
    );

    // Alice's own rule applies in her chat, recorded as resolved by her.
    let r = w.label_rule("alice").await;
    assert!(r.key_one);
    let a = k.inspect().action(id).unwrap().unwrap();
    assert_eq!(a.state.as_str(), "applied");
    assert!(a.auto_approved);
    assert_eq!(a.resolved_by.as_deref(), Some("alice"));
    assert_eq!(w.tracker.writes().len(), 1);

    // In Bob's own chat, Alice's rule does nothing.
    w.chat_with("bobs", "bob", &[("issues", "ISSUES")]);
    let staged = script_as(&w, "bob", "bobs", add_label(2, "x")).await;
    let bobs = pending_id(&staged[0]);
    k.settle().await;
    k.drain().await.unwrap();
    assert_eq!(
        k.inspect().action(bobs).unwrap().unwrap().state.as_str(),
        "pending"
    );
    assert_eq!(w.tracker.writes().len(), 1);
    server.stop().await;
}

/// Side door 3: the web inbox skipped re-verification. A collaborator sees
/// nothing until they pass it, loses it when a check fails or they are
/// removed, and decides only if the owner granted it.
#[tokio::test(flavor = "multi_thread")]
async fn the_web_inbox_shows_a_collaborator_nothing_until_they_pass_re_verification() {
    let w = people(Trust::Byo).await;
    let k = &w.kernel;
    // Alice reads the tracker (an observed source), stages a write.
    let out = w
        .script(
            "work",
            json!([
                call("ISSUES", "listIssues", json!({})),
                create("secret plan")
            ]),
        )
        .await;
    let id = pending_id(&out[1]);
    k.person("alice").share("work", "carol", false).unwrap();
    let server = serve(&w).await;
    let carol = Api::signed_in(&w, &server.url(), "carol").await;
    // Shared but never opened: nothing.
    nothing(&carol, id).await;
    // Her open is refused (the tracker does not know her): still nothing.
    assert!(!open(&w, "work", "carol").await);
    nothing(&carol, id).await;
    assert_eq!(w.tracker.writes().len(), 0);

    // Bob passes with his own account: he sees the action but may not
    // decide, until Alice grants it; then he decides; removed, he sees
    // nothing again.
    k.person("alice").share("work", "bob", false).unwrap();
    let bob = Api::signed_in(&w, &server.url(), "bob").await;
    nothing(&bob, id).await;
    assert!(open(&w, "work", "bob").await);
    let a = bob.get(&format!("/api/actions/{id}")).await;
    assert_eq!(a.status, 200, "{}", a.text);
    let a = bob.act_on(id, "approve").await;
    assert_eq!(a.status, 409, "{}", a.text);
    assert!(
        a.error().contains("may see chat \"work\" but not decide"),
        "{}",
        a.text
    );
    assert_eq!(w.tracker.writes().len(), 0);
    k.person("alice").share("work", "bob", true).unwrap();
    let a = bob.act_on(id, "reject").await;
    assert_eq!(a.status, 200, "{}", a.text);
    k.person("alice").unshare("work", "bob").unwrap();
    nothing(&bob, id).await;
    server.stop().await;
}

/// What a person who may not see chat `work` gets from the web API:
/// nothing, answered like things that do not exist.
async fn nothing(api: &Api, id: i64) {
    let inbox = api.get("/api/inbox").await.json();
    assert_eq!(inbox["cards"], json!([]), "{inbox}");
    assert_eq!(inbox["chats"], json!([]), "{inbox}");
    assert_eq!(inbox["total"], 0, "{inbox}");
    for path in [
        format!("/api/actions/{id}"),
        "/api/chats/work".to_owned(),
        chat_path("work", "observations"),
        "/api/ledger?chat=work".to_owned(),
    ] {
        let a = api.get(&path).await;
        assert_eq!(a.status, 404, "{path}: {}", a.text);
    }
    let ledger = api.get("/api/ledger").await.json();
    assert_eq!(ledger, json!([]), "{ledger}");
    let a = api.act_on(id, "approve").await;
    assert_eq!(a.status, 404, "{}", a.text);
}

/// Side door 4a: a simulating gatekeeper was asked to simulate (an
/// outbound request with the arguments) before the stage checked the
/// latch. Now nothing leaves a latched chat, not even a simulation.
#[tokio::test(flavor = "multi_thread")]
async fn a_latched_chat_asks_a_simulating_gatekeeper_nothing() {
    let w = people(Trust::Byo).await;
    let k = &w.kernel;
    w.add_gatekeeper("issues-sim", "issues-sim", Trust::Byo)
        .await;
    w.chat_with("sim", "alice", &[("issues-sim", "ISSUES")]);
    // Simulation works before the latch.
    let out = w.script("sim", json!([create("before")])).await;
    assert!(out[0]["pending"]["provisional"].is_object(), "{}", out[0]);
    // Alice reads owner-only payroll in that chat: it is locked down.
    let warehouse = Warehouse::builder()
        .account(WAREHOUSE_TOKEN, &["*"])
        .start()
        .expect("the warehouse starts");
    let credential = ("warehouse-token", WAREHOUSE_TOKEN);
    w.front_service("warehouse", Trust::Byo, warehouse.host(), credential)
        .await;
    w.introduce("sim", "alice", &[("warehouse", "WAREHOUSE")]);
    let read = w
        .script(
            "sim",
            json!([call("WAREHOUSE", "query", json!({"table": "payroll"}))]),
        )
        .await;
    assert!(read[0].get("done").is_some(), "{}", read[0]);
    assert!(k.inspect().chat("sim").unwrap().unwrap().latched);
    let before = w.tracker.requests().len();
    let out = w.script("sim", json!([create("after the latch")])).await;
    let msg = out[0]["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("locked down"), "{}", out[0]);
    assert_eq!(
        w.tracker.requests().len(),
        before,
        "no simulation request left"
    );
}

/// Side door 6: approvals were dispatched against whatever was current.
/// A re-added gatekeeper (another component, other hosts), a narrower
/// grant or a trust change means nothing is sent: the action is pending
/// again with a note of what changed.
#[tokio::test(flavor = "multi_thread")]
async fn an_approval_is_sent_only_with_what_was_staged() {
    let w = people(Trust::Byo).await;
    let k = &w.kernel;
    let out = w
        .script("work", json!([create("one"), create("two")]))
        .await;
    let (one, two) = (pending_id(&out[0]), pending_id(&out[1]));

    // Another component under the same name.
    w.add_gatekeeper("issues-sim", "issues", Trust::Byo).await;
    let d = k.person("alice").approve(one).await.unwrap();
    let Decision::Held { note, .. } = &d else {
        panic!("expected held, got {d:?}")
    };
    assert!(note.contains("now runs another component"), "{note}");
    assert_eq!(w.tracker.writes().len(), 0, "nothing was sent");
    let shown = k.person("alice").shown(one).await.unwrap().unwrap();
    assert!(shown.prompt.contains("Changed: "), "{}", shown.prompt);
    // Decided again on current facts, it is sent.
    assert!(matches!(
        k.person("alice").approve(one).await.unwrap(),
        Decision::Applied { .. }
    ));
    assert_eq!(w.tracker.writes().len(), 1);

    // A narrower grant: createIssue is no longer granted; never sent.
    k.person("alice")
        .introduce("work", "issues", "ISSUES", Some(vec!["listIssues".into()]))
        .unwrap();
    let d = k.person("alice").approve(two).await.unwrap();
    assert!(
        d.line().contains("no longer grants the tool createIssue"),
        "{}",
        d.line()
    );
    assert_eq!(w.tracker.writes().len(), 1);

    // A trust change between staging and sending.
    w.introduce("work", "alice", &[("issues", "ISSUES")]);
    let out = w.script("work", json!([create("three")])).await;
    let three = pending_id(&out[0]);
    k.operator().set_trust("issues", Trust::Vetted).unwrap();
    let d = k.person("alice").approve(three).await.unwrap();
    assert!(
        d.line().contains("trust tier changed from byo to vetted"),
        "{}",
        d.line()
    );
    // Other hosts: re-added pointing elsewhere.
    let operator = Some(("tracker-token", TOKEN));
    w.front(
        "issues",
        "issues-sim",
        Trust::Vetted,
        vec!["127.0.0.1:9".into()],
        operator,
        Vec::new(),
    )
    .await
    .expect("issues is added again, pointing elsewhere");
    let d = k.person("alice").approve(three).await.unwrap();
    assert!(d.line().contains("other hosts"), "{}", d.line());
    assert_eq!(w.tracker.writes().len(), 1, "nothing more was sent");
}

/// Side door 7: "who may decide" lived only in the web handlers; the CLI
/// approved as any `--as` person.
#[tokio::test(flavor = "multi_thread")]
async fn the_cli_asks_the_same_rule_as_the_web() {
    let w = people(Trust::Byo).await;
    let k = &w.kernel;
    let out = w.script("work", json!([create("held")])).await;
    let id = pending_id(&out[0]).to_string();
    k.person("alice").share("work", "bob", false).unwrap();
    assert!(open(&w, "work", "bob").await);

    let as_ = |person: &str, args: &[&str]| {
        let mut all = vec!["--as", person];
        all.extend_from_slice(args);
        cli_command(w.home(), &all).output().expect("cli runs")
    };
    let m = as_("mallory", &["approve", &id]);
    assert_eq!(m.status.code(), Some(1));
    assert!(stderr(&m).contains("that you may see"), "{}", stderr(&m));
    let m = as_("mallory", &["show", &id]);
    assert_eq!(m.status.code(), Some(1));
    let m = as_("mallory", &["pending"]);
    assert!(stdout(&m).contains("nothing awaits"), "{}", stdout(&m));
    let m = as_("mallory", &["log", "--chat", "work"]);
    assert_eq!(m.status.code(), Some(1));
    assert!(
        stderr(&m).contains("no chat named \"work\""),
        "{}",
        stderr(&m)
    );
    let b = as_("bob", &["approve", &id]);
    assert_eq!(b.status.code(), Some(1));
    assert!(stderr(&b).contains("but not decide"), "{}", stderr(&b));
    assert_eq!(
        w.tracker.writes().len(),
        0,
        "nobody without the right sent anything"
    );
    let a = as_("alice", &["approve", &id]);
    assert!(a.status.success(), "{}", stderr(&a));
    assert_eq!(w.tracker.writes().len(), 1);

    // The decision history keeps who decided, beyond payload pruning.
    let approved = k
        .person("alice")
        .ledger(LedgerFilter {
            approved_by: Some("alice".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(approved.len(), 1);
}
