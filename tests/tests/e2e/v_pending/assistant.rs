//! A language model behind the gate. The `assistant` gadget runs a
//! tool-calling loop inside the sandbox against a scripted
//! OpenAI-compatible model on loopback (through the `model` gatekeeper);
//! every tool call the model asks for goes through the kernel: reads are
//! recorded, writes are staged and the model is told they are pending;
//! under the latch, asking the model at all is egress, refused unless the
//! operator marked the endpoint local and vetted it (SPEC O3, P9). And the
//! experiment ex04 with a model plugged in prints its table.

use gatehouse::kernel::Harness;
use gatehouse::store::Trust;
use gatehouse_e2e::{World, call, cli_command, stderr, stdout};
use gatehouse_services::model::Model;
use gatehouse_services::warehouse::Warehouse;
use serde_json::{Value, json};

const MODEL_TOKEN: &str = "model-token-41aa-never-shown";
const TASK: &str = "ensure Search returns stale results | bug";
const TITLE: &str = "Search returns stale results";

/// The standard world plus the `assistant` gadget and a `model`
/// gatekeeper (`name`, as `trust`, with `settings`) in front of `model`,
/// introduced into `work` as MODEL.
async fn with_model(w: &World, model: &Model, name: &str, trust: Trust, settings: &[(&str, &str)]) {
    w.install("assistant");
    let mut all = vec![("model".to_owned(), "scripted-1".to_owned())];
    all.extend(
        settings
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    let secret = Some(("model-token", MODEL_TOKEN));
    w.front(name, "model", trust, vec![model.host()], secret, all)
        .await
        .expect("the model gatekeeper is added");
    w.introduce("work", "alice", &[(name, "MODEL")]);
}

fn model() -> Model {
    Model::builder().token(MODEL_TOKEN).start().unwrap()
}

/// The tool results the model was last sent, in order.
fn told(model: &Model) -> Vec<String> {
    let last = model.conversations().pop().expect("the model was asked");
    last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

async fn approve_all(w: &World) {
    loop {
        w.kernel.settle().await;
        let pending = w.kernel.inspect().pending(None).unwrap();
        let Some(a) = pending.first() else { break };
        assert!(w.kernel.person("alice").approve(a.id).await.unwrap().ok());
    }
}

fn created(w: &World) -> usize {
    w.tracker
        .issues()
        .iter()
        .filter(|i| i.title == TITLE)
        .count()
}

async fn runs_to_the_end(w: &World, model: &Model) {
    let r = w
        .kernel
        .operator()
        .agent("assistant", "work", TASK, Harness::Honest)
        .await
        .unwrap();
    assert_eq!(r.state, "waiting", "{:?}", r.turn.output);
    let out = r.turn.output.clone().unwrap();
    assert!(out.starts_with("waiting: action #"), "{out}");
    // Nothing was sent: the create waits for a person. The turn ended
    // there (the harness refuses a turn's calls past an awaited write, the
    // model's too), so the model was last sent only the listing.
    assert!(w.tracker.writes().is_empty());
    let pending = w.kernel.inspect().pending(None).unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].tool, "createIssue");
    let said = told(model);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].starts_with('['), "the listing came back: {said:?}");

    approve_all(w).await;
    // Resumed with the harness's note, which the model is given.
    let resumed = model.conversations().iter().any(|c| {
        c["messages"][1]["content"]
            .as_str()
            .is_some_and(|t| t.contains("resumed") && t.contains("createIssue"))
    });
    assert!(resumed, "{:?}", model.conversations());
    let run = w.kernel.inspect().agent_run(r.run).unwrap().unwrap();
    assert_eq!(run.state, "done", "{run:?}");
    assert!(run.last_output.unwrap().starts_with("Done"));
    assert_eq!(created(w), 1, "created once");
    let issue = w
        .tracker
        .issues()
        .into_iter()
        .find(|i| i.title == TITLE)
        .unwrap();
    assert_eq!(issue.labels, ["bug"]);

    // Every model call was a read, recorded as an observation of the
    // model; every request carried the model's credential, which the
    // gadget never saw.
    let observed = w.observations("work");
    assert!(
        observed
            .iter()
            .any(|e| e.tool.as_deref() == Some("complete"))
    );
    let asked = model.requests();
    assert!(asked.len() >= 4, "{}", asked.len());
    for r in &asked {
        assert_eq!(
            r.authorization.as_deref(),
            Some(format!("Bearer {MODEL_TOKEN}").as_str())
        );
        assert!(!r.body.contains(MODEL_TOKEN) && !r.body.contains(gatehouse_e2e::TOKEN));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_assistant_s_tool_calls_pass_the_gate_and_it_is_told_what_is_pending() {
    let w = World::standard(Trust::Byo).await;
    let m = model();
    with_model(&w, &m, "model", Trust::Byo, &[]).await;
    runs_to_the_end(&w, &m).await;
    // The tools the model was offered are the chat's, named KEY__tool.
    let first = &m.conversations()[0];
    let names: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(names.contains(&"ISSUES__createIssue"), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("MODEL__")), "{names:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_answer_is_put_back_together_and_drives_the_same_loop() {
    let w = World::standard(Trust::Byo).await;
    let m = model();
    with_model(&w, &m, "model", Trust::Byo, &[("stream", "true")]).await;
    runs_to_the_end(&w, &m).await;
    assert!(
        m.conversations().iter().all(|c| c["stream"] == true),
        "every request asked for a stream"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_simulated_write_is_told_to_the_model_as_pending_with_its_provisional_result() {
    let w = World::new();
    w.add_gatekeeper("issues_sim", "issues", Trust::Byo).await;
    w.chat_with("work", "alice", &[("issues", "ISSUES")]);
    let m = model();
    with_model(&w, &m, "model", Trust::Byo, &[]).await;
    let r = w
        .kernel
        .operator()
        .agent("assistant", "work", TASK, Harness::Honest)
        .await
        .unwrap();
    assert!(r.awaited.is_empty(), "nothing to await: {r:?}");
    let said = told(&m);
    assert!(
        said.iter()
            .any(|s| s.starts_with("PENDING: staged as action #")
                && s.contains("Provisional result")),
        "{said:?}"
    );
    assert!(
        w.tracker.writes().is_empty(),
        "nothing sent before a decision"
    );
    approve_all(&w).await;
    let issue = w
        .tracker
        .issues()
        .into_iter()
        .find(|i| i.title == TITLE)
        .unwrap();
    assert_eq!(issue.labels, ["bug"], "labelled at the provisional id");
    assert_eq!(created(&w), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hidden_pending_write_makes_the_model_write_twice() {
    let w = World::standard(Trust::Byo).await;
    let m = model();
    with_model(&w, &m, "model", Trust::Byo, &[]).await;
    let r = w
        .kernel
        .operator()
        .agent("assistant", "work", TASK, Harness::Naive)
        .await
        .unwrap();
    let out = r.turn.output.unwrap();
    assert!(out.contains("could not create"), "{out}");
    approve_all(&w).await;
    assert_eq!(created(&w), 2, "the duplicate SPEC V2 warns about");
}

/// Latch chat `chat` (introducing a vetted warehouse into it as
/// WAREHOUSE and reading its owner-only table).
async fn latch(w: &World, warehouse: &Warehouse, chat: &str) {
    if w.kernel
        .inspect()
        .gatekeeper("warehouse")
        .unwrap()
        .is_none()
    {
        let credential = ("wh-token", "wh-owner");
        w.front_service("warehouse", Trust::Vetted, warehouse.host(), credential)
            .await;
    }
    w.introduce(chat, "alice", &[("warehouse", "WAREHOUSE")]);
    let read = w
        .script(
            chat,
            json!([call("WAREHOUSE", "query", json!({"table": "payroll"}))]),
        )
        .await;
    assert!(read[0].get("done").is_some(), "{}", read[0]);
    assert!(w.kernel.inspect().chat(chat).unwrap().unwrap().latched);
}

#[tokio::test(flavor = "multi_thread")]
async fn in_a_locked_down_chat_a_model_is_asked_only_when_marked_local_and_vetted() {
    let w = World::standard(Trust::Byo).await;
    let m = model();
    with_model(&w, &m, "model", Trust::Byo, &[("locality", "local")]).await;
    let warehouse = Warehouse::builder()
        .account("wh-owner", &["*"])
        .start()
        .unwrap();
    latch(&w, &warehouse, "work").await;
    let ask = |chat: &'static str| {
        let k = w.kernel.clone();
        async move {
            k.operator()
                .run("assistant", chat, TASK)
                .await
                .unwrap()
                .output
        }
    };

    // Marked local, but byo: the claim is not believed; nothing reaches
    // the model.
    let refused = ask("work").await.unwrap_err();
    assert!(refused.contains("locked down"), "{refused}");
    assert!(m.requests().is_empty(), "the model was never asked");

    // Vetted and marked local: asked. Its tool calls stay under the latch
    // (listing the byo tracker is an outbound read: refused, and the model
    // is told so), and nothing is staged.
    w.kernel
        .operator()
        .set_trust("model", Trust::Vetted)
        .unwrap();
    let answered = ask("work").await;
    assert!(
        !m.requests().is_empty(),
        "the model was asked: {answered:?}"
    );
    let said = told(&m);
    assert!(
        said.iter()
            .any(|s| s.starts_with("ERROR") && s.contains("locked down")),
        "{said:?}"
    );
    assert!(
        w.tracker.requests().is_empty(),
        "nothing reached the tracker"
    );
    assert!(w.kernel.inspect().pending(None).unwrap().is_empty());

    // Vetted, but remote (the default) in another latched chat: refused.
    let remote = model();
    w.chat_with("vault", "alice", &[("issues", "ISSUES")]);
    w.install("assistant");
    let secret = Some(("model-token", MODEL_TOKEN));
    let settings = vec![("model".into(), "scripted-1".into())];
    w.front(
        "remote-model",
        "model",
        Trust::Vetted,
        vec![remote.host()],
        secret,
        settings,
    )
    .await
    .expect("the remote model is added");
    w.introduce("vault", "alice", &[("remote-model", "MODEL")]);
    latch(&w, &warehouse, "vault").await;
    let refused = ask("vault").await.unwrap_err();
    assert!(refused.contains("locked down"), "{refused}");
    assert!(
        remote.requests().is_empty(),
        "the remote model was never asked"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_pending_writes_experiment_prints_its_table() {
    let home = tempfile::tempdir().unwrap();
    let o = cli_command(home.path(), &["demo", "pending-writes", "--runs", "1"])
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    let row = |label: &str| -> Vec<Value> {
        let line = out
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no row {label}: {out}"));
        line[label.len()..]
            .split_whitespace()
            .map(|n| json!(n.parse::<u64>().unwrap()))
            .collect()
    };
    // runs, issues created, runs with a duplicate, labelled
    assert_eq!(
        row("hides pending writes (naive)"),
        [json!(1), json!(2), json!(1), json!(0)]
    );
    assert_eq!(
        row("waits for the decision (honest)"),
        [json!(1), json!(1), json!(0), json!(1)]
    );
    assert_eq!(
        row("simulates (issues-sim)"),
        [json!(1), json!(1), json!(0), json!(1)]
    );
    assert!(out.contains("As SPEC V2 says"), "{out}");
}
