//! SPEC O1-O4 and U4: reading owner-only data latches the chat, durably;
//! a latched chat submits nothing, auto-approves nothing and fetches
//! nothing outbound; other chats are unaffected. SPEC P9: a read's claim
//! that it stays in a closed world exempts it from the latch only where an
//! operator vouched for its gatekeeper.

use gatehouse::store::{ActionState, Trust};
use gatehouse_e2e::{World, call, create_step, label_step, pending_id};
use gatehouse_services::warehouse::Warehouse;
use serde_json::json;

const OWNER: &str = "wh-owner-2b71";

pub(crate) struct Lockdown {
    pub(crate) w: World,
    pub(crate) warehouse: Warehouse,
}

pub(crate) async fn lockdown_world() -> Lockdown {
    let w = World::standard(Trust::Vetted).await;
    let warehouse = Warehouse::builder().account(OWNER, &["*"]).start().unwrap();
    // Vetted: its tools' closed-world claim is believed under the latch.
    let credential = ("warehouse-token", OWNER);
    w.front_service("warehouse", Trust::Vetted, warehouse.host(), credential)
        .await;
    w.add_gatekeeper("webfetch", "web", Trust::Byo).await;
    w.introduce(
        "work",
        "alice",
        &[("warehouse", "WAREHOUSE"), ("web", "WEB")],
    );
    w.chat_with("other", "alice", &[("issues", "ISSUES")]);
    Lockdown { w, warehouse }
}

fn latched(w: &World, chat: &str) -> bool {
    w.kernel.inspect().chat(chat).unwrap().unwrap().latched
}

#[tokio::test(flavor = "multi_thread")]
async fn reading_owner_only_data_locks_the_whole_chat_down() {
    let Lockdown { w, warehouse } = lockdown_world().await;
    let web = json!({"url": format!("{}/issues", w.tracker.url())});

    // Before: public data and outbound fetches are fine; an eligible action waits.
    let before = w
        .script(
            "work",
            json!([
                call("WAREHOUSE", "query", json!({"table": "sales"})),
                call("WEB", "fetch", web.clone()),
                label_step(1, "later"),
            ]),
        )
        .await;
    assert!(before[0].get("done").is_some(), "{}", before[0]);
    assert!(before[1].get("done").is_some(), "{}", before[1]);
    let waiting = pending_id(&before[2]);
    w.kernel.settle().await;
    assert!(!latched(&w, "work"));

    // The owner-only read is admitted, recorded restricted, and latches the chat.
    let read = w
        .script(
            "work",
            json!([call("WAREHOUSE", "query", json!({"table": "payroll"}))]),
        )
        .await;
    assert!(read[0]["done"]["rows"].is_array(), "{}", read[0]);
    assert!(latched(&w, "work"));
    let obs = w.observations("work");
    let last = obs.last().unwrap();
    assert_eq!(last.sources.as_ref().unwrap()[0]["restricted"], true);
    assert_eq!(last.sources.as_ref().unwrap()[0]["id"], "table:payroll");

    // After: any action, even to an unrelated gatekeeper, is refused and leaves no row (O4).
    let open_before = w.kernel.inspect().pending(None).unwrap().len();
    let tracker_requests = w.tracker.requests().len();
    let after = w
        .script(
            "work",
            json!([
                create_step("leak"),
                call("WEB", "fetch", web.clone()),
                call("WAREHOUSE", "query", json!({"table": "sales"})),
            ]),
        )
        .await;
    assert_eq!(after[0]["error"]["kind"], "refused");
    assert!(
        after[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("locked down"),
        "{}",
        after[0]
    );
    assert_eq!(
        w.kernel.inspect().pending(None).unwrap().len(),
        open_before,
        "no pending row"
    );
    assert_eq!(
        after[1]["error"]["kind"], "refused",
        "outbound fetches are refused: {}",
        after[1]
    );
    assert!(
        after[2].get("done").is_some(),
        "closed-world reads still work: {}",
        after[2]
    );
    assert_eq!(
        w.tracker.requests().len(),
        tracker_requests,
        "nothing reached the outside"
    );

    // Nothing is auto-approved, even with both keys (U4).
    let r = w.label_rule("alice").await;
    assert!(r.key_one && r.applied.is_empty());
    assert_eq!(
        w.kernel.inspect().action(waiting).unwrap().unwrap().state,
        ActionState::Pending
    );

    // The latch survives a restart; other chats are unaffected.
    let k = w.reopen();
    assert!(k.inspect().chat("work").unwrap().unwrap().latched);
    let other = w.script("other", json!([create_step("fine")])).await;
    pending_id(&other[0]);
    assert!(!latched(&w, "other"));
    drop(warehouse);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_owner_only_read_latches_nothing() {
    // The latch is written with the observation, only for an admitted read.
    let Lockdown { w, warehouse } = lockdown_world().await;
    w.kernel
        .operator()
        .put_secret("warehouse-token", "not-an-account")
        .unwrap();
    let read = w
        .script(
            "work",
            json!([call("WAREHOUSE", "query", json!({"table": "payroll"}))]),
        )
        .await;
    assert_eq!(read[0]["error"]["kind"], "service", "{}", read[0]);
    assert!(!latched(&w, "work"));
    drop(warehouse);
}

#[tokio::test(flavor = "multi_thread")]
async fn under_the_latch_a_closed_world_claim_counts_only_while_an_operator_vouches_for_it() {
    let Lockdown { w, warehouse } = lockdown_world().await;
    let sales = || json!([call("WAREHOUSE", "query", json!({"table": "sales"}))]);
    let read = w
        .script(
            "work",
            json!([call("WAREHOUSE", "query", json!({"table": "payroll"}))]),
        )
        .await;
    assert!(read[0].get("done").is_some(), "{}", read[0]);
    assert!(latched(&w, "work"));
    let vouched = w.script("work", sales()).await;
    assert!(vouched[0].get("done").is_some(), "{}", vouched[0]);

    // The operator withdraws its word: the same read, whose tool still
    // says `open-world: false`, is now refused before anything is sent.
    w.kernel
        .operator()
        .set_trust("warehouse", Trust::Byo)
        .unwrap();
    let asked = warehouse.requests().len();
    let byo = w.script("work", sales()).await;
    assert_eq!(byo[0]["error"]["kind"], "refused", "{}", byo[0]);
    let message = byo[0]["error"]["message"].as_str().unwrap();
    assert!(message.contains("locked down"), "{message}");
    assert_eq!(
        warehouse.requests().len(),
        asked,
        "nothing reached the service"
    );

    // Vouched for again, it runs again (the tier is read at each use).
    w.kernel
        .operator()
        .set_trust("warehouse", Trust::Vetted)
        .unwrap();
    let again = w.script("work", sales()).await;
    assert!(again[0].get("done").is_some(), "{}", again[0]);
    drop(warehouse);
}
