//! Gadget storage (rule O5): a small key-value store per gadget per chat,
//! through the real `notebook` gadget. Values last across turns, belong to
//! one chat and one gadget, are capped with one-line refusals, and carry
//! the chat's observation set: what was derived from a source goes only
//! where the source may go, and reading it observes the source again.

use crate::s_sharing::sharing::{Shared, shared_world};
use gatehouse::sharing::{OpenOutcome, OpenRequest};
use gatehouse::store::{LedgerFilter, Trust};
use gatehouse_e2e::World;
use serde_json::{Value, json};

const CHAT: &str = "salary-board";

/// One notebook turn as the chat's owner; its JSON answer.
async fn notebook(w: &World, gadget: &str, chat: &str, cmd: Value) -> Value {
    let report = w
        .kernel
        .operator()
        .run(gadget, chat, &cmd.to_string())
        .await
        .expect("the turn runs");
    let out = report
        .output
        .unwrap_or_else(|e| panic!("the notebook failed: {e}"));
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("notebook output {out:?}: {e}"))
}

/// A world with the notebook installed beside the standard setup
/// (chat `work` of Alice's), on the home or on the shared database.
async fn notebook_world(database: Option<&str>) -> World {
    let w = match database {
        Some(url) => World::standard_shared(url, Trust::Byo, Vec::new()).await,
        None => World::standard(Trust::Byo).await,
    };
    w.install("notebook");
    w
}

async fn round_trip_per_chat_and_gadget(w: &World) {
    let saved = notebook(
        w,
        "notebook",
        "work",
        json!({"op": "save", "key": "plan", "text": "ship on friday"}),
    )
    .await;
    assert_eq!(saved["ok"], "plan", "{saved}");
    // A later turn (a fresh instance) reads it back.
    let read = notebook(w, "notebook", "work", json!({"op": "read", "key": "plan"})).await;
    assert_eq!(read["ok"], "ship on friday", "{read}");
    notebook(
        w,
        "notebook",
        "work",
        json!({"op": "save", "key": "plan", "text": "ship on monday"}),
    )
    .await;
    notebook(
        w,
        "notebook",
        "work",
        json!({"op": "save", "key": "owner", "text": "alice"}),
    )
    .await;
    let read = notebook(w, "notebook", "work", json!({"op": "read", "key": "plan"})).await;
    assert_eq!(read["ok"], "ship on monday", "replaced in place: {read}");
    let list = notebook(w, "notebook", "work", json!({"op": "list"})).await;
    assert_eq!(list["ok"], json!(["owner", "plan"]), "{list}");

    // Another chat has its own store.
    w.kernel
        .person("alice")
        .new_chat("elsewhere")
        .expect("chat");
    let other = notebook(
        w,
        "notebook",
        "elsewhere",
        json!({"op": "read", "key": "plan"}),
    )
    .await;
    assert_eq!(other["ok"], Value::Null, "{other}");
    let list = notebook(w, "notebook", "elsewhere", json!({"op": "list"})).await;
    assert_eq!(list["ok"], json!([]), "{list}");

    // Another gadget (the same code installed under another name) too.
    let bytes = std::fs::read(gatehouse_e2e::guest("notebook")).expect("guest built");
    w.kernel
        .operator()
        .install("diary", &bytes, &|_| {})
        .expect("installed again under another name");
    let diary = notebook(w, "diary", "work", json!({"op": "read", "key": "plan"})).await;
    assert_eq!(diary["ok"], Value::Null, "{diary}");

    // Deleting is idempotent and tells nothing.
    for _ in 0..2 {
        let gone = notebook(
            w,
            "notebook",
            "work",
            json!({"op": "delete", "key": "plan"}),
        )
        .await;
        assert_eq!(gone["ok"], "plan", "{gone}");
    }
    let list = notebook(w, "notebook", "work", json!({"op": "list"})).await;
    assert_eq!(list["ok"], json!(["owner"]), "{list}");
}

#[tokio::test(flavor = "multi_thread")]
async fn storage_a_note_lasts_across_turns_in_its_own_chat_and_gadget() {
    let w = notebook_world(None).await;
    round_trip_per_chat_and_gadget(&w).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn storage_a_note_lasts_across_turns_in_its_own_chat_and_gadget_on_postgres() {
    let url = gatehouse_e2e::postgres::cluster().database();
    let w = notebook_world(Some(&url)).await;
    round_trip_per_chat_and_gadget(&w).await;
    limits_are_refused_in_one_line(&w).await;
}

async fn limits_are_refused_in_one_line(w: &World) {
    w.kernel.person("alice").new_chat("limits").expect("chat");
    let one_line = |v: &Value| {
        let e = v["error"].as_str().unwrap_or_default().to_owned();
        assert!(!e.is_empty() && !e.contains('\n'), "one line: {v}");
        e
    };
    let long_key = "k".repeat(257);
    let e = one_line(
        &notebook(
            w,
            "notebook",
            "limits",
            json!({"op": "save", "key": long_key, "text": "x"}),
        )
        .await,
    );
    assert!(e.contains("at most 256 bytes"), "{e}");
    let big = "v".repeat(64 * 1024 + 1);
    let e = one_line(
        &notebook(
            w,
            "notebook",
            "limits",
            json!({"op": "save", "key": "big", "text": big}),
        )
        .await,
    );
    assert!(e.contains("at most 65536 bytes"), "{e}");
    let exactly = "v".repeat(64 * 1024);
    let ok = notebook(
        w,
        "notebook",
        "limits",
        json!({"op": "save", "key": "big", "text": exactly}),
    )
    .await;
    assert_eq!(ok["ok"], "big", "exactly 64 KiB is kept");

    // 256 keys per gadget per chat: 255 more fit, the next is refused and
    // nothing of it is stored; replacing a held key still passes.
    let filled = notebook(
        w,
        "notebook",
        "limits",
        json!({"op": "fill", "prefix": "n", "count": 300}),
    )
    .await;
    assert_eq!(filled["ok"], 255, "{filled}");
    let e = one_line(&json!({"error": filled["error"]}));
    assert!(e.contains("already keeps 256 keys"), "{e}");
    let list = notebook(w, "notebook", "limits", json!({"op": "list"})).await;
    assert_eq!(list["ok"].as_array().map(Vec::len), Some(256));
    let again = notebook(
        w,
        "notebook",
        "limits",
        json!({"op": "save", "key": "n0", "text": "replaced"}),
    )
    .await;
    assert_eq!(again["ok"], "n0", "{again}");
    // Another chat's cap is its own.
    let elsewhere = notebook(
        w,
        "notebook",
        "work",
        json!({"op": "save", "key": "n300", "text": "x"}),
    )
    .await;
    assert_eq!(elsewhere["ok"], "n300", "{elsewhere}");
}

#[tokio::test(flavor = "multi_thread")]
async fn storage_limits_are_refused_in_one_line_and_store_nothing() {
    let w = notebook_world(None).await;
    limits_are_refused_in_one_line(&w).await;
}

/// The warehouse's owner-only table, and a note derived from it.
fn derive(key: &str, table: &str) -> Value {
    json!({
        "op": "derive", "key": key, "service": "WAREHOUSE", "tool": "query",
        "args": {"table": table}
    })
}

fn store_reads(w: &World, chat: &str) -> Vec<String> {
    w.kernel
        .inspect()
        .ledger(&LedgerFilter {
            chat: Some(chat.into()),
            ..Default::default()
        })
        .expect("the ledger")
        .into_iter()
        .filter(|e| e.tool.as_deref() == Some("store-get"))
        .map(|e| serde_json::to_string(&e).expect("an entry"))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn storage_a_note_derived_from_owner_only_data_is_the_owner_s_and_reading_it_observes_the_source()
 {
    let Shared { w, warehouse } = shared_world(&["payroll"]).await;
    w.install("notebook");
    let k = &w.kernel;

    // Alice derives a note from payroll: the read latches the chat.
    let saved = notebook(&w, "notebook", CHAT, derive("pay", "payroll")).await;
    assert_eq!(saved["ok"], "pay", "{saved}");
    assert!(k.inspect().chat(CHAT).unwrap().unwrap().latched);

    // The owner reads it; the read is recorded as observing payroll again,
    // owner-only, exactly as the source was.
    let read = notebook(&w, "notebook", CHAT, json!({"op": "read", "key": "pay"})).await;
    assert!(
        read["ok"].as_str().unwrap_or_default().contains("182000"),
        "{read}"
    );
    let reads = store_reads(&w, CHAT);
    assert_eq!(reads.len(), 1, "{reads:?}");
    assert!(
        reads[0].contains("payroll") && reads[0].contains("\"restricted\":true"),
        "{reads:?}"
    );
    assert!(k.inspect().chat(CHAT).unwrap().unwrap().latched);

    // Bob, who could not be let in to see payroll, cannot read what was
    // derived from it: his turn is refused as the chat itself is.
    let bob = k
        .person("bob")
        .run(
            "notebook",
            CHAT,
            &json!({"op": "read", "key": "pay"}).to_string(),
        )
        .await;
    let refusal = format!("{:#}", bob.expect_err("refused"));
    assert!(
        refusal.contains(&format!("no chat named \"{CHAT}\"")),
        "{refusal}"
    );
    assert!(!refusal.contains("182000"), "{refusal}");
    drop(warehouse);
}

#[tokio::test(flavor = "multi_thread")]
async fn storage_a_note_goes_only_to_a_collaborator_verified_for_its_source_and_is_observed_for_them()
 {
    // Nothing owner-only: payroll is readable by accounts allowed it.
    let Shared { w, warehouse } = shared_world(&[]).await;
    w.install("notebook");
    let k = &w.kernel;
    let saved = notebook(&w, "notebook", CHAT, derive("pay", "payroll")).await;
    assert_eq!(saved["ok"], "pay", "{saved}");
    assert!(!k.inspect().chat(CHAT).unwrap().unwrap().latched);
    k.person("alice").share(CHAT, "bob", false).expect("shared");
    k.person("alice")
        .share(CHAT, "carol", false)
        .expect("shared");

    // Carol's account may not see payroll: she is not let in, so neither
    // the note nor its key reaches her.
    let carol = k
        .person("carol")
        .open_chat(CHAT, &OpenRequest::default())
        .await
        .expect("asked");
    assert!(matches!(carol, OpenOutcome::Refused { .. }), "{carol:?}");
    let turn = k
        .person("carol")
        .run("notebook", CHAT, &json!({"op": "list"}).to_string())
        .await;
    let refusal = format!("{:#}", turn.expect_err("refused"));
    assert!(refusal.contains("payroll"), "{refusal}");

    // Bob with his finance account may: he reads the note, and his read is
    // recorded against payroll, for the next open to verify again.
    let request = OpenRequest {
        link: None,
        accounts: [("wh-prod-7".to_owned(), "finance".to_owned())].into(),
    };
    let bob = k
        .person("bob")
        .open_chat(CHAT, &request)
        .await
        .expect("asked");
    assert!(matches!(bob, OpenOutcome::Admitted { .. }), "{bob:?}");
    let report = k
        .person("bob")
        .run(
            "notebook",
            CHAT,
            &json!({"op": "read", "key": "pay"}).to_string(),
        )
        .await
        .expect("bob's turn runs");
    let read: Value = serde_json::from_str(&report.output.expect("answered")).expect("json");
    assert!(
        read["ok"]
            .as_str()
            .unwrap_or_default()
            .contains("summary of"),
        "{read}"
    );
    let reads = store_reads(&w, CHAT);
    assert_eq!(reads.len(), 1, "{reads:?}");
    assert!(
        reads[0].contains("payroll") && reads[0].contains("bob"),
        "{reads:?}"
    );
    drop(warehouse);
}
