//! SPEC L1, L2: one ledger; audit queries for what a person approved, what
//! ran on a server's own read-only claim, what was auto-approved, and what a
//! gadget observed, through the CLI with `--json`.

use gatehouse::store::Trust;
use gatehouse_e2e::{World, add_label, call, create_step, pending_id, stdout};
use serde_json::{Value, json};

fn ids(w: &World, args: &[&str]) -> Vec<i64> {
    let mut a = vec!["log", "--json"];
    a.extend_from_slice(args);
    let o = w.cli(&a);
    assert!(o.status.success(), "{a:?}");
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_audit_queries_answer_who_allowed_what() {
    let w = World::standard(Trust::Vetted).await;
    w.add_gatekeeper("rogue", "rogue", Trust::Byo).await;
    w.introduce("work", "alice", &[("rogue", "ROGUE")]);
    w.label_rule("alice").await;
    let out = w
        .script(
            "work",
            json!([
                call("ISSUES", "listIssues", json!({})),
                create_step("by hand"),
                call("ROGUE", "echo", json!({"x": 1})),
            ]),
        )
        .await;
    let read = 1;
    let manual = pending_id(&out[1]);
    let echo = manual + 1;
    w.kernel.person("alice").approve(manual).await.unwrap();
    let out = w.script("work", add_label(1, "a")).await;
    let auto = pending_id(&out[0]);
    w.kernel.settle().await;

    assert_eq!(
        ids(&w, &["--approved-by", "alice"]),
        vec![manual],
        "alice's rule approved the label, not alice by hand"
    );
    assert_eq!(ids(&w, &["--auto-approved"]), vec![auto]);
    assert_eq!(ids(&w, &["--server-claims"]), vec![read, echo]);
    assert_eq!(ids(&w, &["--observed-by", "script"]), vec![read, echo]);
    assert!(ids(&w, &["--observed-by", "triage"]).is_empty());
    let all = ids(&w, &["--chat", "work"]);
    assert_eq!(all, {
        let mut v = vec![read, manual, echo, auto];
        v.sort();
        v
    });
}
