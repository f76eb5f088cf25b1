//! SPEC B1: a blueprint carries the gadget's code and the services it needs,
//! and nothing of its owner's: no secret, no stored row, no history, no
//! owner or instance id. Another person imports it and runs it on their own
//! accounts.

use crate::s_sharing::sharing::{Shared, shared_world};
use gatehouse_e2e::{call, stderr, stdout};
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn a_blueprint_holds_code_and_requirements_only_and_runs_for_its_importer() {
    let Shared { w, warehouse } = shared_world(&[]).await;
    let k = &w.kernel;
    // Alice's board has history: reads of payroll and customers.
    let out = w
        .script(
            "salary-board",
            json!([
                call("WAREHOUSE", "query", json!({"table": "payroll"})),
                call("WAREHOUSE", "query", json!({"table": "customers"})),
            ]),
        )
        .await;
    assert!(
        out.to_string().contains("182000"),
        "the board read real rows: {out}"
    );

    let file = w.home().join("board.blueprint.json");
    let file_arg = file.to_str().unwrap();
    let exported = w.cli(&["export", "script", "-o", file_arg]);
    assert!(exported.status.success(), "{}", stderr(&exported));
    let bytes = std::fs::read(&file).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    for forbidden in [
        "wh-alice-5d02", // Alice's credential
        "182000",        // a stored row (payroll)
        "Acme Ltd",      // a stored row (customers)
        "salary-board",  // the chat (history lives under it)
        "wh-prod-7",     // the gatekeeper instance
        "alice",         // the owner
        "observation",   // ledger vocabulary: no history at all
    ] {
        assert!(
            !text.contains(forbidden),
            "the blueprint contains {forbidden:?}"
        );
    }
    let b: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(b["requirements"][0]["key"], "WAREHOUSE");
    assert_eq!(
        b["requirements"][0]["tools_offered"],
        json!(["listTables", "query", "exportReport"])
    );

    // Bob imports it: his gadget, his chat, bound to the same kind of service.
    let imported = w.cli(&[
        "--as",
        "bob",
        "import",
        file_arg,
        "--name",
        "board",
        "--chat",
        "bobs-board",
    ]);
    assert!(imported.status.success(), "{}", stderr(&imported));
    assert!(
        stdout(&imported).contains("WAREHOUSE -> wh-prod-7 as bob/analyst"),
        "{}",
        stdout(&imported)
    );
    let chat = k.inspect().chat("bobs-board").unwrap().unwrap();
    assert_eq!(chat.owner, "bob");
    assert!(
        k.inspect()
            .observed_sources("bobs-board")
            .unwrap()
            .is_empty(),
        "no history came along"
    );

    // It runs on Bob's accounts: payroll is refused by the warehouse for
    // him, sales is read with his credential.
    let before = warehouse.requests().len();
    let steps = json!({"steps": [
        call("WAREHOUSE", "query", json!({"table": "sales"})),
        call("WAREHOUSE", "query", json!({"table": "payroll"})),
    ]});
    let ran = w.cli(&[
        "--as",
        "bob",
        "run",
        "board",
        "--chat",
        "bobs-board",
        &steps.to_string(),
    ]);
    assert!(ran.status.success(), "{}", stderr(&ran));
    let answers: serde_json::Value = serde_json::from_str(stdout(&ran).trim()).unwrap();
    assert!(answers[0].get("done").is_some(), "{}", answers[0]);
    assert!(answers[1].get("error").is_some(), "{}", answers[1]);
    assert!(!answers.to_string().contains("182000"));
    for r in &warehouse.requests()[before..] {
        assert_eq!(
            r.authorization.as_deref(),
            Some("Bearer wh-bob-analyst-77c1"),
            "{r:?}"
        );
    }
    let obs = w.observations("bobs-board");
    assert_eq!(obs.len(), 1);
    assert_eq!(obs[0].account.as_deref(), Some("bob/analyst"));

    // A damaged blueprint is refused in one line and installs nothing.
    let mut damaged = b.clone();
    damaged["gadget"]["component"] = json!("AAAA");
    std::fs::write(&file, serde_json::to_vec(&damaged).unwrap()).unwrap();
    let bad = w.cli(&[
        "--as", "bob", "import", file_arg, "--name", "other", "--chat", "other",
    ]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        stderr(&bad).contains("does not match its digest"),
        "{}",
        stderr(&bad)
    );
    assert!(k.inspect().gadget("other").unwrap().is_none());
    assert!(k.inspect().chat("other").unwrap().is_none());
}
