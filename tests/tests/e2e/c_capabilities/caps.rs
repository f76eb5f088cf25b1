//! SPEC A5, P2, P5: the action store's caps. At most 50 open actions, args
//! of at most 64 KiB, results over 128 KiB replaced by a note, and only the
//! newest 100 finished actions kept while open ones are never pruned.

use gatehouse::overseer::Decision;
use gatehouse::store::{ActionState, LedgerEntry, LedgerFilter, Trust};
use gatehouse_e2e::{World, call, create_step, pending_id};
use serde_json::{Value, json};

/// Stage `n` createIssue actions in one turn; every one must be pending.
async fn stage_issues(w: &World, n: usize, label: &str) -> Vec<i64> {
    let steps: Vec<Value> = (0..n)
        .map(|i| {
            call(
                "ISSUES",
                "createIssue",
                json!({"title": format!("{label} {i}")}),
            )
        })
        .collect();
    let out = w.script("work", Value::Array(steps)).await;
    out.as_array()
        .unwrap_or_else(|| panic!("expected one answer per step, got {out}"))
        .iter()
        .map(pending_id)
        .collect()
}

fn actions(w: &World) -> Vec<LedgerEntry> {
    w.kernel
        .inspect()
        .ledger(&LedgerFilter {
            kind: Some(gatehouse::store::LedgerKind::Action),
            ..Default::default()
        })
        .unwrap_or_else(|e| panic!("reading the ledger failed: {e:#}"))
}

fn pending_ids(w: &World) -> Vec<i64> {
    w.kernel
        .inspect()
        .pending(None)
        .unwrap_or_else(|e| panic!("listing pending actions failed: {e:#}"))
        .into_iter()
        .map(|a| a.id)
        .collect()
}

async fn reject(w: &World, id: i64) {
    let d = w
        .kernel
        .person("alice")
        .reject(id)
        .await
        .unwrap_or_else(|e| panic!("rejecting #{id} failed: {e:#}"));
    assert!(matches!(d, Decision::Rejected { .. }), "#{id}: {d:?}");
}

async fn approve(w: &World, id: i64) -> Decision {
    w.kernel
        .person("alice")
        .approve(id)
        .await
        .unwrap_or_else(|e| panic!("approving #{id} failed: {e:#}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_51st_open_action_is_refused_saying_how_many_await_approval() {
    let w = World::standard(Trust::Byo).await;
    let steps: Vec<Value> = (1..=51)
        .map(|i| {
            call(
                "ISSUES",
                "createIssue",
                json!({"title": format!("cap {i}")}),
            )
        })
        .collect();
    let out = w.script("work", Value::Array(steps)).await;
    let answers = out.as_array().cloned().unwrap_or_default();
    assert_eq!(answers.len(), 51, "{out}");
    let ids: Vec<i64> = answers[..50].iter().map(pending_id).collect();

    let refused = &answers[50]["error"];
    assert_eq!(refused["kind"], "refused", "{}", answers[50]);
    let msg = refused["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("50 actions already await approval") && msg.contains("gatehouse pending"),
        "the refusal should say how many await approval and what to do: {msg:?}"
    );

    // No 51st row: the refused action left nothing behind (A3).
    assert_eq!(pending_ids(&w), ids);
    assert_eq!(actions(&w).len(), 50, "no ghost row for the refused action");
    assert!(w.tracker.writes().is_empty(), "nothing was sent");

    // Deciding one makes room for exactly one more.
    reject(&w, ids[0]).await;
    let more = w
        .script(
            "work",
            json!([create_step("room for one"), create_step("and no more"),]),
        )
        .await;
    let new_id = pending_id(&more[0]);
    assert_eq!(more[1]["error"]["kind"], "refused", "{}", more[1]);
    assert_eq!(pending_ids(&w).len(), 50);
    assert!(pending_ids(&w).contains(&new_id));
}

/// A JSON object whose compact serialization is exactly `n` bytes (keys in
/// sorted order, so normalising it changes nothing).
fn args_of_size(n: usize) -> String {
    let head = r#"{"body":""#;
    let tail = r#"","title":"large arguments"}"#;
    let s = format!("{head}{}{tail}", "x".repeat(n - head.len() - tail.len()));
    let normalised = serde_json::from_str::<Value>(&s)
        .expect("valid JSON")
        .to_string();
    assert_eq!(normalised, s, "the arguments are already in normal form");
    assert_eq!(s.len(), n);
    s
}

#[tokio::test(flavor = "multi_thread")]
async fn args_over_64_kib_are_refused_and_exactly_64_kib_are_accepted() {
    let w = World::standard(Trust::Byo).await;
    let raw = |tool: &str, args: String| json!({"call": {"key": "ISSUES", "tool": tool, "raw_args": args}});
    let out = w
        .script(
            "work",
            json!([
                raw("createIssue", args_of_size(65537)),
                raw("createIssue", args_of_size(65536)),
                raw("listIssues", args_of_size(65537)),
            ]),
        )
        .await;

    let too_big = &out[0]["error"];
    assert_eq!(too_big["kind"], "invalid-args", "{}", out[0]);
    let msg = too_big["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("65537 bytes") && msg.contains("64 KiB"),
        "the refusal should give the size and the limit: {msg:?}"
    );

    let id = pending_id(&out[1]);
    let stored = w
        .kernel
        .inspect()
        .action(id)
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("action #{id} was staged"));
    assert_eq!(stored.args.len(), 65536, "stored whole");
    assert_eq!(pending_ids(&w), [id], "only the accepted one is pending");

    // A read is held to the same limit, before it reaches the service.
    assert_eq!(out[2]["error"]["kind"], "invalid-args", "{}", out[2]);
    assert!(
        w.tracker.requests().is_empty(),
        "nothing reached the service"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_result_over_128_kib_is_replaced_by_a_note_and_a_smaller_one_is_kept() {
    let w = World::new();
    w.install("script");
    w.add_gatekeeper("rogue", "rogue", Trust::Byo).await;
    w.chat_with("work", "alice", &[("rogue", "ROGUE")]);
    let out = w
        .script(
            "work",
            json!([
                call("ROGUE", "bigResult", json!({"kib": 200})),
                call("ROGUE", "bigResult", json!({"kib": 100})),
            ]),
        )
        .await;
    let (big, small) = (pending_id(&out[0]), pending_id(&out[1]));
    let blob = |kib: usize| json!({"blob": "x".repeat(kib * 1024)}).to_string();
    let big_len = blob(200).len();

    for id in [big, small] {
        let d = approve(&w, id).await;
        assert!(matches!(d, Decision::Applied { .. }), "#{id}: {d:?}");
    }

    let stored = |id: i64| {
        w.kernel
            .inspect()
            .action(id)
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("action #{id} exists"))
    };
    let a = stored(big);
    assert_eq!(
        a.state,
        ActionState::Applied,
        "an oversized result is still applied"
    );
    let result = a.result.unwrap_or_default();
    let note: Value = serde_json::from_str(&result)
        .unwrap_or_else(|e| panic!("the stored note is JSON ({e}): {result:?}"));
    let note_text = note["note"].as_str().unwrap_or_default();
    assert!(
        note_text.contains(&format!("{big_len} bytes")),
        "the note should state the result's size ({big_len} bytes): {result:?}"
    );
    assert!(result.len() < 1024, "the blob itself was not kept");

    let b = stored(small);
    assert_eq!(b.state, ActionState::Applied);
    assert!(
        b.result.as_deref() == Some(blob(100).as_str()),
        "a 100 KiB result is kept whole (got {} bytes)",
        b.result.as_ref().map_or(0, String::len)
    );

    // The gadget is handed the same: the note, and the whole small result.
    let polled = w
        .script("work", json!([{"poll": big}, {"poll": small}]))
        .await;
    assert_eq!(polled[0]["status"], "applied", "{}", polled[0]);
    assert_eq!(polled[0]["result"]["note"], note["note"]);
    assert_eq!(polled[1]["status"], "applied");
    assert_eq!(
        polled[1]["result"]["blob"].as_str().map(str::len),
        Some(100 * 1024)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn only_the_newest_100_finished_actions_are_kept_and_open_ones_never_pruned() {
    let w = World::standard(Trust::Byo).await;
    let kept_open = stage_issues(&w, 3, "stays open").await;
    let mut finished = Vec::new();
    for batch in 0..3 {
        let ids = stage_issues(&w, 47, &format!("batch {batch}")).await;
        for (i, &id) in ids.iter().enumerate() {
            if i < 2 {
                let d = approve(&w, id).await;
                assert!(matches!(d, Decision::Applied { .. }), "#{id}: {d:?}");
            } else {
                reject(&w, id).await;
            }
            finished.push(id);
        }
        assert_eq!(
            pending_ids(&w),
            kept_open,
            "after batch {batch}, the open actions are still there"
        );
    }
    assert_eq!(finished.len(), 141);
    assert_eq!(w.tracker.writes().len(), 6, "the approved ones were sent");

    let rows = actions(&w);
    let finished_rows: Vec<i64> = rows
        .iter()
        .filter(|e| matches!(e.state.as_deref(), Some("applied" | "rejected" | "failed")))
        .map(|e| e.id)
        .collect();
    assert_eq!(
        finished_rows,
        finished[41..],
        "exactly the newest 100 finished actions remain"
    );
    let open_rows: Vec<i64> = rows
        .iter()
        .filter(|e| e.state.as_deref() == Some("pending"))
        .map(|e| e.id)
        .collect();
    assert_eq!(open_rows, kept_open, "open actions are never pruned");
    assert_eq!(rows.len(), 103, "{rows:?}");

    // A pruned action is gone, and the gadget is told it may have been pruned.
    let oldest = finished[0];
    assert!(
        matches!(w.kernel.inspect().action(oldest), Ok(None)),
        "#{oldest} was pruned"
    );
    let polled = w.script("work", json!([{"poll": oldest}])).await;
    let msg = polled[0]["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("pruned"), "{}", polled[0]);
}

/// Exactly `n` bytes of JSON without whitespace, full of numbers a float
/// would write out longer (`9e15` as `9000000000000000.0`).
fn args_of_exponents(n: usize) -> String {
    let head = r#"{"n":[9e+15"#;
    let mut s = head.to_owned();
    while s.len() + ",9e+15".len() + r#"],"p":""}"#.len() <= n {
        s.push_str(",9e+15");
    }
    s.push_str(r#"],"p":""#);
    s.push_str(&"x".repeat(n - s.len() - 2));
    s.push_str(r#""}"#);
    assert_eq!(s.len(), n);
    s
}

/// Numbers are kept as the gadget wrote them, so normalising never grows
/// arguments past the cap: 64 KiB of `9e+15` is staged exactly as sent (a
/// float would write each out as `9000000000000000.0`; serde_json spells an
/// unsigned exponent `e+`, which is how it is stored and sent), and one
/// byte more is refused as invalid arguments.
#[tokio::test(flavor = "multi_thread")]
async fn args_are_capped_at_64_kib_as_stored_and_numbers_never_grow() {
    let w = World::standard(Trust::Byo).await;
    // An action whose input schema admits any object: the kernel checks
    // arguments against the tool's schema before staging.
    w.add_gatekeeper("overflow", "overflow", Trust::Byo).await;
    w.introduce("work", "alice", &[("overflow", "OVER")]);
    let args = args_of_exponents(65536);
    let over = args_of_exponents(65537);
    let input = json!({"steps": [
        {"call": {"key": "OVER", "tool": "record", "raw_args": args}},
        {"call": {"key": "OVER", "tool": "record", "raw_args": over}},
        call("ISSUES", "listIssues", json!({})),
    ]})
    .to_string();
    let report = w.turn("script", "work", &input).await;
    let text = report.output.unwrap_or_else(|e| {
        panic!("the whole turn died instead of the one call being refused: {e}")
    });
    let out: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("script output {text:?}: {e}"));
    let id = out[0]["pending"]["action_id"]
        .as_i64()
        .unwrap_or_else(|| panic!("64 KiB is staged: {}", out[0]));
    let stored = w.kernel.inspect().action(id).unwrap().unwrap().args;
    assert_eq!(stored, args, "stored exactly as sent");
    assert_eq!(out[1]["error"]["kind"], "invalid-args", "{}", out[1]);
    let msg = out[1]["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("64 KiB"), "{msg:?}");
    assert!(out[2]["done"].is_array(), "the turn goes on: {}", out[2]);
    assert_eq!(pending_ids(&w), vec![id], "no ghost row");
}

/// The caps are per chat, so no gadget can starve another chat: one
/// chat's gadget filling its 50 open actions never stops another chat
/// from staging, and one person deciding 100 of their own actions never
/// erases another's approval history: `log --approved-by` reads the
/// decision history, which outlives payload pruning.
#[tokio::test(flavor = "multi_thread")]
async fn one_chat_s_caps_never_touch_another_chat_or_another_person_s_history() {
    let w = World::standard(Trust::Byo).await;
    let k = &w.kernel;
    k.operator().add_user("bob").unwrap();
    w.chat_with("bobs", "bob", &[("issues", "ISSUES")]);

    // Alice's one write is approved and sent.
    let mine = stage_issues(&w, 1, "alice's").await[0];
    assert!(matches!(approve(&w, mine).await, Decision::Applied { .. }));

    // Bob's gadget fills his chat's cap...
    let bobs_steps = |n: usize, label: &str| -> Value {
        Value::Array(
            (0..n)
                .map(|i| {
                    call(
                        "ISSUES",
                        "createIssue",
                        json!({"title": format!("{label} {i}")}),
                    )
                })
                .collect(),
        )
    };
    let full = w.script("bobs", bobs_steps(51, "bob fills")).await;
    assert_eq!(full[50]["error"]["kind"], "refused", "{}", full[50]);
    // ...and alice's chat still stages.
    let still = w
        .script(
            "work",
            json!([call(
                "ISSUES",
                "createIssue",
                json!({"title": "alice goes on"})
            )]),
        )
        .await;
    assert!(still[0].get("pending").is_some(), "{}", still[0]);

    // Bob rejects more than 100 of his own: his chat prunes its payloads.
    let mut rejected = 0;
    for round in 0..3 {
        let out = if round == 0 {
            full.clone()
        } else {
            w.script("bobs", bobs_steps(50, &format!("bob round {round}")))
                .await
        };
        for a in out.as_array().unwrap() {
            if a.get("pending").is_some() {
                let d = k.person("bob").reject(pending_id(a)).await.unwrap();
                assert!(matches!(d, Decision::Rejected { .. }), "{d:?}");
                rejected += 1;
            }
        }
    }
    assert!(rejected > 100, "{rejected}");

    // Alice's approval is still on record, payload and history.
    assert!(
        k.inspect().action(mine).unwrap().is_some(),
        "alice's chat kept its action"
    );
    let o = w.cli(&["log", "--json", "--approved-by", "alice"]);
    assert!(o.status.success(), "{}", gatehouse_e2e::stderr(&o));
    let v: Value = serde_json::from_str(&gatehouse_e2e::stdout(&o)).unwrap();
    let ids: Vec<i64> = v
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["id"].as_i64())
        .collect();
    assert_eq!(ids, vec![mine], "{v}");

    // Alice decides 100 more of her own: her approved action's payload is
    // pruned, and her approval is still on record.
    for round in 0..3 {
        for id in stage_issues(&w, 40, &format!("alice round {round}")).await {
            reject(&w, id).await;
        }
    }
    assert!(
        k.inspect().action(mine).unwrap().is_none(),
        "#{mine} was pruned"
    );
    let o = w.cli(&["log", "--json", "--approved-by", "alice"]);
    assert!(o.status.success(), "{}", gatehouse_e2e::stderr(&o));
    let v: Value = serde_json::from_str(&gatehouse_e2e::stdout(&o)).unwrap();
    assert!(
        v.as_array()
            .unwrap()
            .iter()
            .any(|e| e["id"].as_i64() == Some(mine)),
        "the decision history outlives the payload: {v}"
    );
}

/// Stages from many turns at once share commits (group commit);
/// the cap still holds row by row inside each commit, one refused stage
/// never undoes another's, every stage gets its own answer, and what was
/// answered `pending` is on disk for the next process.
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_stages_share_commits_yet_the_cap_holds_and_each_answer_is_its_own() {
    use gatehouse::Principal;
    use gatehouse::kernel::{CallError, CallOutcome, Turn};
    let w = World::standard(Trust::Byo).await;
    let k = &w.kernel;
    w.chat_with("other", "alice", &[("issues", "ISSUES")]);

    // 60 stagers race for "work" (cap 50) while 30 stage into "other".
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..90 {
        let k = k.clone();
        let chat = if i % 3 == 0 { "other" } else { "work" };
        tasks.spawn(async move {
            let turn = Turn::new("script", chat, Principal::person("alice"));
            let args = json!({"title": format!("race {i}")}).to_string();
            let out = k
                .call(&turn, "ISSUES", "createIssue", args)
                .await
                .unwrap_or_else(|e| panic!("stage {i} failed: {e:#}"));
            (chat, out)
        });
    }
    let answers = tasks.join_all().await;
    let mut ids = std::collections::BTreeMap::<&str, Vec<i64>>::new();
    let mut refused = 0;
    for (chat, out) in &answers {
        match out {
            Ok(CallOutcome::Pending(p)) => ids.entry(chat).or_default().push(p.action_id as i64),
            Err(CallError::Refused(m)) => {
                assert_eq!(*chat, "work", "only the full chat refuses: {m}");
                assert!(m.contains("limit is 50 per chat"), "{m}");
                refused += 1;
            }
            other => panic!("unexpected answer in {chat}: {other:?}"),
        }
    }
    let work = ids.get("work").cloned().unwrap_or_default();
    let other = ids.get("other").cloned().unwrap_or_default();
    let racing_work = answers.iter().filter(|(c, _)| *c == "work").count();
    assert_eq!(work.len(), 50, "the full chat took exactly its cap");
    assert_eq!(
        refused,
        racing_work - 50,
        "every other stage there was refused"
    );
    assert_eq!(
        other.len(),
        answers.len() - racing_work,
        "the other chat lost nothing"
    );
    let mut all: Vec<i64> = work.iter().chain(&other).copied().collect();
    all.sort();
    all.dedup();
    assert_eq!(
        all.len(),
        work.len() + other.len(),
        "every answer has its own id"
    );

    // The next process sees exactly the answered actions, in their chats.
    let again = w.reopen();
    for (chat, expected) in [("work", &work), ("other", &other)] {
        let mut stored: Vec<i64> = again
            .inspect()
            .pending(Some(chat))
            .unwrap()
            .into_iter()
            .map(|a| a.id)
            .collect();
        stored.sort();
        let mut expected = expected.clone();
        expected.sort();
        assert_eq!(stored, expected, "{chat}: stored = answered");
    }
}
