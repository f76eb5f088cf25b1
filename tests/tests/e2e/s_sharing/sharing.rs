//! SPEC S1-S5 and the shared-chat half of O3, against the real warehouse
//! gatekeeper and a loopback warehouse whose accounts may read different
//! tables. Alice owns a "salary board" chat; Bob and Carol are collaborators
//! with their own accounts.

use gatehouse::sharing::{OpenOutcome, OpenRequest};
use gatehouse::store::Trust;
use gatehouse_e2e::{World, call, cli_command, stderr, stdout};
use gatehouse_services::warehouse::Warehouse;
use serde_json::{Value, json};
use std::io::Write as _;
use std::process::{Output, Stdio};

const ALICE: &str = "wh-alice-5d02";
const BOB_ANALYST: &str = "wh-bob-analyst-77c1";
const BOB_FINANCE: &str = "wh-bob-finance-0e9a";
const CAROL: &str = "wh-carol-41f8";
const CHAT: &str = "salary-board";

pub struct Shared {
    pub w: World,
    pub warehouse: Warehouse,
}

/// Alice, Bob and Carol with their own warehouse accounts; chat
/// `salary-board` of Alice's with the warehouse introduced as WAREHOUSE.
/// `owner_only`: which tables the warehouse flags owner-only.
pub async fn shared_world(owner_only: &[&str]) -> Shared {
    let w = World::new();
    w.install("script");
    let warehouse = Warehouse::builder()
        .owner_only(owner_only)
        .account(ALICE, &["*"])
        .account(BOB_ANALYST, &["sales", "customers"])
        .account(BOB_FINANCE, &["*"])
        .account(CAROL, &["sales"])
        .start()
        .expect("the warehouse starts");
    let k = &w.kernel;
    // The operator configures no credential: everyone brings their own.
    w.front(
        "wh-prod-7",
        "warehouse",
        Trust::Byo,
        vec![warehouse.host()],
        None,
        Vec::new(),
    )
    .await
    .expect("gatekeeper added");
    w.users(&["alice", "bob", "carol"]);
    k.person("alice")
        .connect_account("wh-prod-7", "main", ALICE, false)
        .expect("account");
    k.person("bob")
        .connect_account("wh-prod-7", "analyst", BOB_ANALYST, false)
        .expect("account");
    k.person("bob")
        .connect_account("wh-prod-7", "finance", BOB_FINANCE, false)
        .expect("account");
    k.person("carol")
        .connect_account("wh-prod-7", "main", CAROL, false)
        .expect("account");
    w.chat_with(CHAT, "alice", &[("wh-prod-7", "WAREHOUSE")]);
    Shared { w, warehouse }
}

fn query(table: &str) -> Value {
    call("WAREHOUSE", "query", json!({ "table": table }))
}

/// The CLI as `user`, with `input` on stdin.
fn cli_as(w: &World, user: &str, args: &[&str], input: &str) -> Output {
    let mut cmd = cli_command(w.home(), args);
    cmd.env("GATEHOUSE_USER", user)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("the gatehouse binary runs");
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(input.as_bytes());
    }
    child
        .wait_with_output()
        .expect("the gatehouse binary finishes")
}

/// Lines of `text` that name a failing binding of `account`.
fn failure_lines<'a>(text: &'a str, account: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| l.contains(&format!("account {account}:")))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_open_re_verifies_each_observed_source_with_the_openers_own_accounts() {
    let Shared { w, warehouse } = shared_world(&[]).await;
    let k = &w.kernel;
    // Alice builds her board: payroll and customers, read with her account.
    let read = w
        .script(CHAT, json!([query("payroll"), query("customers")]))
        .await;
    assert!(read[0].get("done").is_some(), "{}", read[0]);
    assert!(read[1].get("done").is_some(), "{}", read[1]);
    let log = stdout(&w.cli(&["log", "--observations", "--chat", CHAT]));
    assert!(log.contains("account alice/main"), "{log}");
    assert!(log.contains("source table:payroll (Payroll)"), "{log}");
    assert!(log.contains("source table:customers (Customers)"), "{log}");

    k.person("alice").share(CHAT, "bob", false).expect("shared");
    k.person("alice")
        .share(CHAT, "carol", false)
        .expect("shared");
    let before = warehouse.requests().len();

    // Bob's default account may not read payroll: refused with one line
    // naming the source, his account and the reason. He declines the
    // offer of another account (empty answer).
    let refused = cli_as(&w, "bob", &["open", CHAT], "\n");
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    let err = stderr(&refused);
    let lines = failure_lines(&err, "bob/analyst");
    assert!(
        lines.iter().any(
            |l| l.contains("table:payroll") && l.contains("account may not read table payroll")
        ),
        "{err}"
    );
    assert!(
        err.contains("Use another account at wh-prod-7? [finance]"),
        "{err}"
    );
    assert!(
        err.contains("error: bob may not open chat \"salary-board\": 1 source(s) failed"),
        "{err}"
    );
    assert!(
        !err.contains("customers (Customers) at"),
        "customers is allowed: {err}"
    );
    assert!(
        k.inspect().observers(CHAT).unwrap().is_empty(),
        "a refused open stores nothing"
    );
    // The check asked the warehouse with Bob's credential only, and read no data.
    let asked: Vec<_> = warehouse.requests()[before..].to_vec();
    assert!(!asked.is_empty());
    for r in &asked {
        assert_eq!(
            r.authorization.as_deref(),
            Some(&*format!("Bearer {BOB_ANALYST}"))
        );
        assert_eq!(r.path, "/access", "{r:?}");
    }

    // At the one re-prompt he picks his finance account and gets in.
    let opened = cli_as(&w, "bob", &["open", CHAT], "finance\n");
    assert!(opened.status.success(), "{}", stderr(&opened));
    assert!(
        stdout(&opened)
            .contains("opened chat salary-board as bob: 2 observed source(s) re-verified"),
        "{}",
        stdout(&opened)
    );
    let observers = k.inspect().observers(CHAT).unwrap();
    assert_eq!(observers.len(), 1);
    assert_eq!(observers[0].user, "bob");
    assert_eq!(observers[0].account.as_deref(), Some("bob/finance"));

    // Carol fails on two sources and sees both lines; she has no other account.
    let carol = cli_as(&w, "carol", &["open", CHAT], "");
    assert_eq!(carol.status.code(), Some(1));
    let err = stderr(&carol);
    let lines = failure_lines(&err, "carol/main");
    assert_eq!(lines.len(), 2, "{err}");
    assert!(lines.iter().any(|l| l.contains("table:payroll")), "{err}");
    assert!(lines.iter().any(|l| l.contains("table:customers")), "{err}");
    assert!(!err.contains("Use another account"), "{err}");

    // The API form: the same failures, and the choice as a parameter.
    let outcome = k
        .person("carol")
        .open_chat(CHAT, &OpenRequest::default())
        .await
        .unwrap();
    let OpenOutcome::Refused {
        failures,
        alternatives,
    } = outcome
    else {
        panic!("carol must be refused");
    };
    assert_eq!(failures.len(), 2);
    assert!(alternatives.is_empty());
    let mut accounts = std::collections::BTreeMap::new();
    accounts.insert("wh-prod-7".to_owned(), "finance".to_owned());
    let outcome = k
        .person("bob")
        .open_chat(
            CHAT,
            &OpenRequest {
                link: None,
                accounts,
            },
        )
        .await
        .unwrap();
    assert!(
        matches!(outcome, OpenOutcome::Admitted { checked: 2, .. }),
        "{outcome:?}"
    );

    // Bob's turn in Alice's chat runs under the account he opened it with.
    let n = warehouse.requests().len();
    let report = k
        .person("bob")
        .run(
            "script",
            CHAT,
            &json!({"steps": [query("sales")]}).to_string(),
        )
        .await
        .unwrap();
    assert!(report.output.is_ok(), "{:?}", report.output);
    let sent = warehouse.requests();
    let data: Vec<_> = sent[n..]
        .iter()
        .filter(|r| r.path == "/tables/sales")
        .collect();
    assert_eq!(data.len(), 1);
    assert_eq!(
        data[0].authorization.as_deref(),
        Some(&*format!("Bearer {BOB_FINANCE}"))
    );
    let obs = w.observations(CHAT);
    assert_eq!(
        obs.last().and_then(|e| e.account.as_deref()),
        Some("bob/finance")
    );
    // Agent runs resume later under the owner's accounts: owner only.
    let agent = cli_as(&w, "bob", &["agent", "script", "--chat", CHAT, "{}"], "");
    assert_eq!(agent.status.code(), Some(1));
    assert!(
        stderr(&agent).contains("only the owner of chat"),
        "{}",
        stderr(&agent)
    );
    // Carol may not run anything there: her open fails.
    let err = k
        .person("carol")
        .run("script", CHAT, "{\"steps\": []}")
        .await
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("carol may not run gadgets in chat"),
        "{err:#}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_a_collaborator_could_not_see_is_refused_before_it_reaches_the_service() {
    let Shared { w, warehouse } = shared_world(&[]).await;
    let k = &w.kernel;
    let read = w.script(CHAT, json!([query("sales")])).await;
    assert!(read[0].get("done").is_some(), "{}", read[0]);
    k.person("alice").share(CHAT, "bob", false).unwrap();
    let opened = k
        .person("bob")
        .open_chat(CHAT, &OpenRequest::default())
        .await
        .unwrap();
    assert!(matches!(opened, OpenOutcome::Admitted { .. }), "{opened:?}");

    // Bob (analyst) may not see payroll: Alice's read of it is refused and
    // the warehouse receives nothing at all.
    let before = warehouse.requests().len();
    let out = w.script(CHAT, json!([query("payroll")])).await;
    let refused = out[0]["error"]["message"].as_str().unwrap_or_default();
    assert!(
        refused.contains("a collaborator is not permitted to see"),
        "{}",
        out[0]
    );
    assert!(refused.contains("payroll"), "{}", out[0]);
    assert_eq!(
        warehouse.requests().len(),
        before,
        "{:?}",
        &warehouse.requests()[before..]
    );
    let observed = k.inspect().observed_sources(CHAT).unwrap();
    assert!(
        observed.iter().all(|(_, s)| !s.contains("payroll")),
        "{observed:?}"
    );

    // What Bob may see is read as usual.
    let out = w.script(CHAT, json!([query("customers")])).await;
    assert!(out[0].get("done").is_some(), "{}", out[0]);

    // A collaborator who was invited but never opened counts too: Carol
    // (sales only) now blocks customers, checked live with her account.
    k.person("alice").share(CHAT, "carol", false).unwrap();
    let before = warehouse.requests().len();
    let out = w.script(CHAT, json!([query("customers")])).await;
    assert!(
        out[0]["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("not permitted"),
        "{}",
        out[0]
    );
    let sent = &warehouse.requests()[before..];
    assert!(sent.iter().all(|r| r.path == "/access"), "{sent:?}");
    assert!(
        sent.iter()
            .all(|r| r.authorization.as_deref() == Some(&*format!("Bearer {CAROL}"))),
        "{sent:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn owner_only_data_latches_an_unshared_chat_against_sharing_and_is_refused_in_a_shared_one() {
    // The warehouse's own flags: payroll is owner-only.
    let Shared { w, warehouse } = shared_world(&["payroll"]).await;
    let k = &w.kernel;

    // A shared chat: the owner-only read is refused and nothing latches.
    w.chat_with("team", "alice", &[("wh-prod-7", "WAREHOUSE")]);
    k.person("alice").share("team", "bob", false).unwrap();
    // Bob's default account may read every table, so no collaborator is
    // excluded (S3): what refuses the read is O3 itself.
    k.person("bob")
        .connect_account("wh-prod-7", "finance", BOB_FINANCE, true)
        .unwrap();
    let out = w.script("team", json!([query("payroll")])).await;
    let refused = out[0]["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(refused.contains("owner-only"), "{}", out[0]);
    assert!(
        !out.to_string().contains("182000"),
        "no payroll data reached the gadget: {out}"
    );
    let team = k.inspect().chat("team").unwrap().unwrap();
    assert!(!team.latched);
    assert!(k.inspect().observed_sources("team").unwrap().is_empty());

    // An unshared chat: the read latches it.
    let out = w.script(CHAT, json!([query("payroll")])).await;
    assert!(out[0].get("done").is_some(), "{}", out[0]);
    assert!(k.inspect().chat(CHAT).unwrap().unwrap().latched);

    // Under the latch: no sharing, no links, no non-owner open.
    let share = w.cli(&["share", CHAT, "--with", "bob"]);
    assert_eq!(share.status.code(), Some(1));
    assert!(stderr(&share).contains("locked down"), "{}", stderr(&share));
    let link = w.cli(&["share", CHAT, "--link"]);
    assert_eq!(link.status.code(), Some(1));
    assert!(
        stderr(&link).contains("cannot gain collaborators or share links"),
        "{}",
        stderr(&link)
    );
    assert!(k.person("alice").create_share_link(CHAT).is_err());
    // Bob was never let in: he learns nothing, not even that it exists.
    let open = cli_as(&w, "bob", &["open", CHAT], "");
    assert_eq!(open.status.code(), Some(1));
    assert!(
        stderr(&open).contains(&format!("no chat named \"{CHAT}\"")),
        "{}",
        stderr(&open)
    );
    assert!(!stderr(&open).contains("locked"), "{}", stderr(&open));
    assert!(k.inspect().collaborators(CHAT).unwrap().is_empty());
    // The owner still opens it.
    let mine = w.cli(&["open", CHAT]);
    assert!(mine.status.success(), "{}", stderr(&mine));
    drop(warehouse);
}

#[tokio::test(flavor = "multi_thread")]
async fn removing_a_collaborator_removes_their_observers_and_re_adding_re_verifies() {
    let Shared {
        w,
        warehouse: _warehouse,
    } = shared_world(&[]).await;
    let k = &w.kernel;
    let read = w.script(CHAT, json!([query("sales")])).await;
    assert!(read[0].get("done").is_some(), "{}", read[0]);
    k.person("alice").share(CHAT, "bob", false).unwrap();
    let opened = k
        .person("bob")
        .open_chat(CHAT, &OpenRequest::default())
        .await
        .unwrap();
    assert!(matches!(opened, OpenOutcome::Admitted { .. }));
    assert_eq!(k.inspect().observers(CHAT).unwrap().len(), 1);

    // Only the owner removes; removal takes the observers with it.
    let not_owner = cli_as(&w, "bob", &["unshare", CHAT, "--with", "bob"], "");
    assert_eq!(not_owner.status.code(), Some(1));
    assert!(
        stderr(&not_owner).contains("only the owner of chat"),
        "{}",
        stderr(&not_owner)
    );
    let removed = w.cli(&["unshare", CHAT, "--with", "bob"]);
    assert!(removed.status.success(), "{}", stderr(&removed));
    assert!(k.inspect().observers(CHAT).unwrap().is_empty());
    assert!(k.inspect().collaborators(CHAT).unwrap().is_empty());
    let err = k
        .person("bob")
        .open_chat(CHAT, &OpenRequest::default())
        .await
        .unwrap_err();
    assert!(format!("{err}").contains("no chat named"), "{err}");

    // Unshared again, Alice reads payroll freely (nobody to exclude).
    let out = w.script(CHAT, json!([query("payroll")])).await;
    assert!(out[0].get("done").is_some(), "{}", out[0]);

    // Re-added, Bob is verified from scratch: payroll now blocks him.
    k.person("alice").share(CHAT, "bob", false).unwrap();
    let again = k
        .person("bob")
        .open_chat(CHAT, &OpenRequest::default())
        .await
        .unwrap();
    let OpenOutcome::Refused { failures, .. } = again else {
        panic!("bob must be re-verified against payroll");
    };
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].source, "table:payroll");
    assert_eq!(failures[0].account.as_deref(), Some("bob/analyst"));
    assert!(k.inspect().observers(CHAT).unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_share_link_admits_whoever_passes_re_verification_and_nobody_else() {
    let Shared {
        w,
        warehouse: _warehouse,
    } = shared_world(&[]).await;
    let k = &w.kernel;
    let read = w.script(CHAT, json!([query("customers")])).await;
    assert!(read[0].get("done").is_some(), "{}", read[0]);
    let made = w.cli(&["share", CHAT, "--link"]);
    assert!(made.status.success(), "{}", stderr(&made));
    let text = stdout(&made);
    let token = text
        .split_whitespace()
        .skip_while(|t| *t != "--link")
        .nth(1)
        .expect("the link's token is printed")
        .to_owned();

    // Carol (sales only) fails: nothing is stored, not even her membership.
    let carol = cli_as(&w, "carol", &["open", CHAT, "--link", &token], "");
    assert_eq!(carol.status.code(), Some(1));
    assert!(
        stderr(&carol).contains("table:customers"),
        "{}",
        stderr(&carol)
    );
    assert!(k.inspect().collaborators(CHAT).unwrap().is_empty());

    // A wrong token admits nobody, and tells a stranger nothing: the
    // answer for a chat that does not exist (W2).
    let wrong = cli_as(&w, "bob", &["open", CHAT, "--link", "0000"], "");
    assert_eq!(wrong.status.code(), Some(1));
    assert!(
        stderr(&wrong).contains(&format!("no chat named \"{CHAT}\"")),
        "{}",
        stderr(&wrong)
    );

    // Bob passes and becomes a collaborator.
    let bob = cli_as(&w, "bob", &["open", CHAT, "--link", &token], "");
    assert!(bob.status.success(), "{}", stderr(&bob));
    let people = k.inspect().collaborators(CHAT).unwrap();
    assert_eq!(people.len(), 1);
    assert_eq!(people[0].user, "bob");

    // Revoked links admit nobody new.
    assert!(w.cli(&["unshare", CHAT, "--links"]).status.success());
    k.person("carol")
        .connect_account("wh-prod-7", "main", ALICE, true)
        .unwrap();
    let late = cli_as(&w, "carol", &["open", CHAT, "--link", &token], "");
    assert_eq!(late.status.code(), Some(1));
    assert!(
        stderr(&late).contains(&format!("no chat named \"{CHAT}\"")),
        "{}",
        stderr(&late)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn each_observer_strategy_answers_as_its_gatekeeper_declares() {
    // `refuse` (rogue), `access-check` (issues), `no-check` (webfetch); the
    // warehouse's `track-reads` is covered above.
    let w = World::standard(Trust::Byo).await;
    let k = &w.kernel;
    for (component, name) in [("rogue", "rogue"), ("webfetch", "web")] {
        w.add_gatekeeper(component, name, Trust::Byo).await;
        k.person("alice")
            .introduce("work", name, &name.to_uppercase(), None)
            .unwrap();
    }
    w.users(&["alice", "bob", "dave"]);
    // Bob has a working tracker account; Dave's is unknown to the tracker.
    k.person("bob")
        .connect_account("issues", "bob", gatehouse_e2e::TOKEN, false)
        .unwrap();
    k.person("dave")
        .connect_account("issues", "dave", "not-a-token", false)
        .unwrap();
    let url = format!("{}/issues", w.tracker.url());
    let out = w
        .script(
            "work",
            json!([
                call("ISSUES", "listIssues", json!({})),
                call("WEB", "fetch", json!({ "url": url })),
                call("ROGUE", "echo", json!({"text": "hi"})),
            ]),
        )
        .await;
    for step in out.as_array().unwrap() {
        assert!(step.get("done").is_some(), "{step}");
    }
    k.person("alice").share("work", "bob", false).unwrap();
    k.person("alice").share("work", "dave", false).unwrap();
    for (user, expect) in [("bob", vec!["rogue"]), ("dave", vec!["issues", "rogue"])] {
        let OpenOutcome::Refused { failures, .. } = k
            .person(user)
            .open_chat("work", &OpenRequest::default())
            .await
            .unwrap()
        else {
            panic!("{user}: rogue refuses every observer");
        };
        let mut by: Vec<&str> = failures.iter().map(|f| f.gatekeeper.as_str()).collect();
        by.dedup();
        assert_eq!(by, expect, "{user}: {failures:?}");
        assert!(
            failures.iter().all(|f| f.gatekeeper != "web"),
            "no-check never fails"
        );
        if user == "dave" {
            let line = failures
                .iter()
                .find(|f| f.gatekeeper == "issues")
                .unwrap()
                .line();
            assert!(
                line.contains("account dave/dave: the account is not allowed to read the tracker"),
                "{line}"
            );
        }
    }
}

/// Standing is re-checked at every kernel call, not once a turn.
/// Bob, a verified collaborator with his own tracker account, runs a turn;
/// while it waits on a read at the tracker, Alice removes him. The read
/// already admitted finishes; every call after it (stages, reads, the
/// keys, polls) is refused as for a chat that does not exist, and what he
/// staged before is never sent with his token, whoever approves it.
#[tokio::test(flavor = "multi_thread")]
async fn a_collaborator_removed_mid_turn_is_refused_at_the_next_call_and_nothing_is_sent_for_him() {
    const BOB_TOKEN: &str = "tok-bob-5e1c-mid-turn";
    let people = ["alice", "bob"];
    let w = World::with_account(&["script"], Trust::Byo, &people, ("bob", BOB_TOKEN), false).await;
    let k = w.kernel.clone();
    w.chat_with("work", "alice", &[("issues", "ISSUES")]);
    k.person("alice").share("work", "bob", false).unwrap();
    let opened = k
        .person("bob")
        .open_chat("work", &OpenRequest::default())
        .await
        .unwrap();
    assert!(matches!(opened, OpenOutcome::Admitted { .. }), "{opened:?}");

    let issue = |title: &str| call("ISSUES", "createIssue", json!({ "title": title }));
    let list = || call("ISSUES", "listIssues", json!({}));
    let steps = json!({"steps": [
        issue("staged before"),
        list(),
        issue("staged after"),
        list(),
        {"env": true},
        {"poll": 1},
    ]})
    .to_string();
    let hold = w.tracker.hold_reads();
    let reads_before = w.tracker.requests().len();
    let turn = {
        let k = k.clone();
        tokio::spawn(async move { k.person("bob").run("script", "work", &steps).await })
    };
    assert!(
        gatehouse_e2e::wait_until(std::time::Duration::from_secs(60), || w
            .tracker
            .requests()
            .len()
            > reads_before),
        "bob's read reached the tracker"
    );
    assert!(k.person("alice").unshare("work", "bob").unwrap());
    hold.release();
    let report = turn.await.unwrap().expect("the turn ran");
    let out: Value = serde_json::from_str(&report.output.expect("the script answered")).unwrap();

    let before = gatehouse_e2e::pending_id(&out[0]);
    assert!(out[1].get("done").is_some(), "admitted before: {}", out[1]);
    for (i, step) in out.as_array().unwrap().iter().enumerate().skip(2) {
        let said = step.to_string();
        match i {
            4 => assert_eq!(step["keys"], json!([]), "{said}"),
            _ => {
                assert_eq!(step["error"]["kind"], "refused", "step {i}: {said}");
                let message = step["error"]["message"].as_str().unwrap_or_default();
                assert!(
                    message.contains("no chat named \"work\"") || message.contains("no action #"),
                    "step {i}: {message}"
                );
            }
        }
    }
    assert_eq!(
        w.tracker.requests().len(),
        reads_before + 1,
        "nothing after the removal reached the tracker"
    );
    let open = w.kernel.inspect().pending(None).unwrap();
    assert_eq!(
        open.iter().map(|a| a.id).collect::<Vec<_>>(),
        vec![before],
        "only what he staged before"
    );

    // Alice approves what he staged before: it is never sent with his
    // token, and stays for her to reject.
    let o = w.cli(&["approve", &before.to_string()]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let e = stderr(&o);
    assert!(
        e.contains("bob, who staged it, may no longer act in chat \"work\""),
        "{e}"
    );
    assert!(e.contains("nothing was sent"), "{e}");
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    assert!(w.tracker.writes().is_empty(), "nothing sent");
    let a = w.kernel.inspect().action(before).unwrap().unwrap();
    assert_eq!(a.state, gatehouse::store::ActionState::Pending);
    let o = w.cli(&["reject", &before.to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
}
