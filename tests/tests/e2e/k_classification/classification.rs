//! SPEC K1-K5: one function decides read vs action; the tier is read at use.

use gatehouse::classify::{Kind, classify};
use gatehouse::store::{LedgerFilter, Trust};
use gatehouse_e2e::{World, add_label, call, pending_id};
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn the_classification_table_holds_for_a_real_gatekeeper() {
    let w = World::standard(Trust::Byo).await;
    let g = w.kernel.inspect().gatekeeper("issues").unwrap().unwrap();
    let class = |tool: &str, trust| classify(&g.manifest.tool(tool).unwrap().annotations, trust);

    assert_eq!(class("listIssues", Trust::Byo).kind, Kind::Read);
    // A read-like name with no hint is an action.
    assert_eq!(class("searchIssues", Trust::Vetted).kind, Kind::Action);
    assert!(!class("searchIssues", Trust::Vetted).auto_approvable);
    // addLabel {destructive: false, idempotent: true}: an action, auto-approvable only when vetted.
    assert_eq!(class("addLabel", Trust::Byo).kind, Kind::Action);
    assert!(!class("addLabel", Trust::Byo).auto_approvable);
    assert!(class("addLabel", Trust::Vetted).auto_approvable);
    assert!(!class("createIssue", Trust::Vetted).auto_approvable);

    // Through the kernel: the read runs, the read-like action is staged.
    let out = w
        .script(
            "work",
            json!([
                call("ISSUES", "listIssues", json!({})),
                call("ISSUES", "searchIssues", json!({"q": "login"})),
            ]),
        )
        .await;
    assert!(out[0]["done"].is_array());
    pending_id(&out[1]);
    assert_eq!(
        w.tracker.requests().len(),
        1,
        "only the read reached the service"
    );

    // The ledger records whose word was trusted, and it is stored, not recomputed.
    let log = w.kernel.inspect().ledger(&LedgerFilter::default()).unwrap();
    assert_eq!(log[0].classified_by.as_deref(), Some("server-annotation"));
    assert_eq!(log[1].classified_by.as_deref(), Some("default"));
}

#[tokio::test(flavor = "multi_thread")]
async fn trust_tiers_are_read_at_each_use() {
    let w = World::standard(Trust::Vetted).await;
    let out = w.script("work", add_label(1, "x")).await;
    let first = w
        .kernel
        .inspect()
        .action(pending_id(&out[0]))
        .unwrap()
        .unwrap();
    assert_eq!(first.trust, "vetted");
    w.kernel.operator().set_trust("issues", Trust::Byo).unwrap();
    let out = w.script("work", add_label(1, "y")).await;
    let second = w
        .kernel
        .inspect()
        .action(pending_id(&out[0]))
        .unwrap()
        .unwrap();
    assert_eq!(
        second.trust, "byo",
        "revoking vetted takes effect at the next call"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lying_byo_gatekeeper_writes_as_a_read_and_the_ledger_lists_it() {
    let w = World::standard(Trust::Byo).await;
    w.add_gatekeeper("rogue", "rogue", Trust::Byo).await;
    w.introduce("work", "alice", &[("rogue", "ROGUE")]);
    let before = w.tracker.issues().len();

    let out = w
        .script(
            "work",
            json!([call("ROGUE", "deleteIssue", json!({"id": 1}))]),
        )
        .await;
    assert!(
        out[0].get("done").is_some(),
        "ran with no approval: {}",
        out[0]
    );
    assert_eq!(
        w.tracker.issues().len(),
        before - 1,
        "the 'read' deleted an issue (K5)"
    );
    assert!(w.kernel.inspect().pending(None).unwrap().is_empty());

    let claims = w
        .kernel
        .inspect()
        .ledger(&LedgerFilter {
            server_claims: true,
            ..Default::default()
        })
        .unwrap();
    assert!(
        claims
            .iter()
            .any(|e| e.gatekeeper.as_deref() == Some("rogue")
                && e.tool.as_deref() == Some("deleteIssue")
                && e.trust.as_deref() == Some("byo")),
        "the ledger lists the call as passed on the server's own claim: {claims:?}"
    );
    // And so does the CLI.
    let o = w.cli(&["log", "--server-claims", "--json"]);
    assert!(o.status.success());
    assert!(gatehouse_e2e::stdout(&o).contains("deleteIssue"));
}
