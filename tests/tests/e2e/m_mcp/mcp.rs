//! SPEC M1, K, P2, P7, A5, R1 for the `mcp` gatekeeper in front of a real
//! MCP server (the official Python SDK, tests/mcp/server.py), through the
//! real `script` gadget.

use gatehouse::classify::{Kind, classify};
use gatehouse::overseer::Decision;
use gatehouse::store::{LedgerFilter, Trust};
use gatehouse_e2e::mcp::McpServer;
use gatehouse_e2e::{World, call, guest, pending_id, stderr, stdout};
use serde_json::{Value, json};

const TOKEN: &str = "mcp-tok-5b1e-never-shown";

/// A world with the `mcp` gatekeeper in front of a fresh server, added
/// as `trust` and introduced into chat `work` as SVC.
async fn mcp_world(trust: Trust) -> (World, McpServer) {
    let server = McpServer::start(TOKEN);
    let w = World::new();
    w.install("script");
    add_mcp(&w, trust, &server.host(), &server.url())
        .await
        .expect("the mcp gatekeeper is added");
    w.chat_with("work", "alice", &[("svc", "SVC")]);
    (w, server)
}

async fn stage(w: &World, tool: &str, args: Value) -> i64 {
    let out = w.script("work", json!([call("SVC", tool, args)])).await;
    pending_id(&out[0])
}

#[tokio::test(flavor = "multi_thread")]
async fn the_classification_table_holds_for_a_real_mcp_server() {
    let (w, server) = mcp_world(Trust::Byo).await;
    let g = w.kernel.inspect().gatekeeper("svc").unwrap().unwrap();
    // Every page of tools/list was read (the server pages by two).
    let names: Vec<_> = g.manifest.tools.iter().map(|t| t.name.as_str()).collect();
    for t in [
        "get_item",
        "delete_item",
        "tag_item",
        "ping_item",
        "peek_item",
        "find_items",
    ] {
        assert!(names.contains(&t), "{t} missing from {names:?}");
    }
    assert_eq!(g.manifest.tools.len(), 7, "{names:?}");
    assert!(!g.manifest.simulates);
    let tool = |n: &str| g.manifest.tool(n).unwrap().annotations.clone();
    // Passed through unchanged: only classify judges them.
    assert_eq!(tool("get_item").read_only, Some(true));
    assert_eq!(tool("delete_item").destructive, Some(true));
    assert_eq!(tool("tag_item").destructive, Some(false));
    assert_eq!(tool("tag_item").idempotent, Some(true));
    assert_eq!(tool("ping_item"), Default::default());
    assert_eq!(classify(&tool("get_item"), Trust::Byo).kind, Kind::Read);
    assert_eq!(classify(&tool("ping_item"), Trust::Byo).kind, Kind::Action);
    assert!(!classify(&tool("tag_item"), Trust::Byo).auto_approvable);
    assert!(classify(&tool("tag_item"), Trust::Vetted).auto_approvable);
    assert!(!classify(&tool("delete_item"), Trust::Vetted).auto_approvable);
    let schema: Value = serde_json::from_str(&g.manifest.tool("get_item").unwrap().input_schema)
        .expect("the schema is JSON");
    assert_eq!(schema["properties"]["id"]["type"], "integer");
    // What later protocol versions added is passed through as given: the
    // title, the output schema (derived by the server's SDK, or declared)
    // and task support; nothing is made up for a tool that has none.
    let entry = |n: &str| g.manifest.tool(n).unwrap();
    assert_eq!(entry("get_item").title.as_deref(), Some("Get an item"));
    assert_eq!(
        entry("delete_item").title.as_deref(),
        Some("Delete an item")
    );
    let output = |n: &str| -> Value {
        serde_json::from_str(entry(n).output_schema.as_deref().expect("an output schema")).unwrap()
    };
    assert_eq!(output("get_item")["required"], json!(["result"]));
    assert_eq!(
        output("find_items")["properties"]["items"],
        json!({"type": "array", "items": {"type": "integer"}})
    );
    use gatehouse::manifest::TaskSupport;
    assert_eq!(entry("get_item").task_support, Some(TaskSupport::Optional));
    assert_eq!(
        entry("find_items").task_support,
        Some(TaskSupport::Forbidden)
    );
    assert_eq!(entry("ping_item").title, None);
    assert_eq!(entry("ping_item").task_support, None);

    let out = w
        .script(
            "work",
            json!([
                call("SVC", "get_item", json!({"id": 7})),
                call("SVC", "delete_item", json!({"id": 7})),
                call("SVC", "tag_item", json!({"id": 7, "tag": "x"})),
                call("SVC", "ping_item", json!({"id": 7})),
            ]),
        )
        .await;
    // The read ran at once and was recorded; its result is MCP's.
    assert_eq!(out[0]["done"]["content"][0]["text"], "item 7", "{out}");
    assert_eq!(out[0]["done"]["isError"], false);
    assert_eq!(out[0]["done"]["structuredContent"]["result"], "item 7");
    let ids: Vec<i64> = out.as_array().unwrap()[1..]
        .iter()
        .map(pending_id)
        .collect();
    for step in &out.as_array().unwrap()[1..] {
        assert_eq!(step["pending"]["await_decision"], true, "never simulated");
    }
    assert_eq!(
        server.calls(),
        vec![json!({"tool": "get_item", "args": {"id": 7}})],
        "only the read reached the server"
    );
    let log = w.kernel.inspect().ledger(&LedgerFilter::default()).unwrap();
    assert!(
        log.iter().any(|e| e.tool.as_deref() == Some("get_item")
            && e.classified_by.as_deref() == Some("server-annotation")),
        "the read is recorded: {log:?}"
    );

    // An approved write reaches the server exactly once.
    let d = w.kernel.person("alice").approve(ids[0]).await.unwrap();
    match &d {
        Decision::Applied { result, .. } => assert!(result.contains("deleted 7"), "{result}"),
        other => panic!("expected applied, got {other:?}"),
    }
    assert!(matches!(
        w.kernel.person("alice").approve(ids[0]).await.unwrap(),
        Decision::AlreadyApplied { .. }
    ));
    assert_eq!(server.calls_of("delete_item"), 1);
    assert_eq!(server.calls_of("tag_item"), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lying_tool_of_a_byo_server_runs_as_a_read_and_the_ledger_lists_it() {
    // SPEC K5: a byo gatekeeper's readOnlyHint is trusted (documented
    // trade-off); the call is listable afterwards as passed on the
    // server's own claim.
    let (w, server) = mcp_world(Trust::Byo).await;
    let out = w
        .script("work", json!([call("SVC", "peek_item", json!({"id": 3}))]))
        .await;
    assert!(out[0].get("done").is_some(), "{}", out[0]);
    assert_eq!(server.calls_of("peek_item"), 1);
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
            .any(|e| e.gatekeeper.as_deref() == Some("svc")
                && e.tool.as_deref() == Some("peek_item")),
        "{claims:?}"
    );
}

/// Approve `id` as alice, which must fail: whether the failure may be
/// retried (SPEC P2), and its message.
async fn approve_failing(w: &World, id: i64) -> (bool, String) {
    match w.kernel.person("alice").approve(id).await.unwrap() {
        Decision::Failed {
            retryable, message, ..
        } => (retryable, message),
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn failures_follow_p2_a_401_is_retryable_a_500_after_receipt_is_never_resent() {
    let (w, server) = mcp_world(Trust::Byo).await;

    let id = stage(&w, "tag_item", json!({"id": 1, "tag": "a"})).await;
    server.fault("401");
    let (retryable, message) = approve_failing(&w, id).await;
    assert!(retryable, "a 401 took no effect: {message}");
    assert_eq!(server.calls_of("tag_item"), 0);
    assert!(matches!(
        w.kernel.person("alice").approve(id).await.unwrap(),
        Decision::Applied { .. }
    ));
    assert_eq!(server.calls_of("tag_item"), 1, "the retry landed once");

    let id = stage(&w, "delete_item", json!({"id": 2})).await;
    server.fault("500-after");
    let (retryable, message) = approve_failing(&w, id).await;
    assert!(!retryable, "{message}");
    assert!(
        gatehouse_e2e::wait_until(std::time::Duration::from_secs(10), || server
            .calls_of("delete_item")
            == 1),
        "the server received it"
    );
    assert!(matches!(
        w.kernel.person("alice").approve(id).await.unwrap(),
        Decision::Refused { .. }
    ));
    assert_eq!(server.calls_of("delete_item"), 1, "never resent");

    // A session that expires under a write: never retried blindly.
    let id = stage(&w, "ping_item", json!({"id": 3})).await;
    server.fault("expire");
    let (retryable, message) = approve_failing(&w, id).await;
    assert!(!retryable, "{message}");
    assert!(message.contains("session"), "{message}");
    assert_eq!(
        server.calls_of("ping_item"),
        0,
        "not resent on a new session"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_session_is_reestablished_for_a_read() {
    let (w, server) = mcp_world(Trust::Byo).await;
    server.fault("expire");
    let out = w
        .script("work", json!([call("SVC", "get_item", json!({"id": 5}))]))
        .await;
    assert_eq!(out[0]["done"]["content"][0]["text"], "item 5", "{out}");
    assert_eq!(server.calls_of("get_item"), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn refresh_reports_a_changed_annotation_and_the_pending_action_is_held() {
    let (w, server) = mcp_world(Trust::Byo).await;
    let id = stage(&w, "tag_item", json!({"id": 4, "tag": "b"})).await;

    let o = w.cli(&["gatekeeper", "refresh", "svc"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("no tool changed"), "{}", stdout(&o));

    server.flip();
    let o = w.cli(&["gatekeeper", "refresh", "svc"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        // Names pass the sanitiser, which drops markup such as `_` (R1).
        out.lines()
            .any(|l| l.starts_with("tool tagitem: annotations changed")
                && l.contains("to [destructiveHint=true, idempotentHint=true]")),
        "{out}"
    );
    let g = w.kernel.inspect().gatekeeper("svc").unwrap().unwrap();
    assert_eq!(
        g.manifest.tool("tag_item").unwrap().annotations.destructive,
        Some(true),
        "the new manifest is stored"
    );

    // Not sent as if unchanged: the claim's revalidation holds it (P7).
    match w.kernel.person("alice").approve(id).await.unwrap() {
        Decision::Held { note, .. } => assert!(note.contains("tag_item"), "{note}"),
        other => panic!("expected the action held, got {other:?}"),
    }
    assert_eq!(server.calls_of("tag_item"), 0);
    // A person who approves it again, on the current facts, sends it once.
    assert!(matches!(
        w.kernel.person("alice").approve(id).await.unwrap(),
        Decision::Applied { .. }
    ));
    assert_eq!(server.calls_of("tag_item"), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_write_is_refused_at_staging() {
    let (w, server) = mcp_world(Trust::Byo).await;
    let out = w
        .script(
            "work",
            json!([call("SVC", "tag_item", json!({"id": "seven", "tag": "x"}))]),
        )
        .await;
    let err = &out[0]["error"];
    assert_eq!(err["kind"], "invalid-args", "{out}");
    let msg = err["message"].as_str().unwrap();
    assert!(msg.contains("/id"), "names the field: {msg}");
    assert_eq!(msg.lines().count(), 1, "{msg}");
    let out = w
        .script("work", json!([call("SVC", "tag_item", json!({"id": 1}))]))
        .await;
    assert_eq!(out[0]["error"]["kind"], "invalid-args", "{out}");
    assert!(w.kernel.inspect().pending(None).unwrap().is_empty());
    assert!(server.calls().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hostile_server_cannot_break_the_host() {
    let (w, server) = mcp_world(Trust::Byo).await;

    // Malformed JSON-RPC: one clear failure.
    server.fault("malformed");
    let out = w
        .script("work", json!([call("SVC", "get_item", json!({"id": 1}))]))
        .await;
    assert_eq!(out[0]["error"]["kind"], "service", "{out}");
    assert!(
        out[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not JSON"),
        "{out}"
    );

    // An event stream that never ends: bounded by the gatekeeper deadline.
    server.fault("hang-sse");
    let out = w
        .script("work", json!([call("SVC", "get_item", json!({"id": 2}))]))
        .await;
    assert_eq!(out[0]["error"]["kind"], "service", "{out}");
    assert!(
        out[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("did not answer within"),
        "{out}"
    );
    // The host is up and the next read works.
    let out = w
        .script("work", json!([call("SVC", "get_item", json!({"id": 3}))]))
        .await;
    assert_eq!(out[0]["done"]["content"][0]["text"], "item 3", "{out}");

    // A 10 MB tool list: the add is refused with one line.
    server.fault("huge-list");
    let o = w.cli(&[
        "gatekeeper",
        "add",
        guest("mcp").to_str().unwrap(),
        "--name",
        "svc2",
        "--allow-host",
        &server.host(),
        "--secret",
        "mcp-token",
        "--set",
        &format!("url={}", server.url()),
    ]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let err: Vec<_> = stderr(&o)
        .lines()
        .filter(|l| !l.starts_with("compiling"))
        .map(str::to_owned)
        .collect();
    assert_eq!(err.len(), 1, "{err:?}");
    assert!(err[0].contains("larger than"), "{err:?}");

    // Prompt-forgery payloads in a tool's name and description are shown
    // harmless.
    let g = w.kernel.inspect().gatekeeper("svc").unwrap().unwrap();
    let forged = g
        .manifest
        .tools
        .iter()
        .find(|t| t.name.starts_with("evil"))
        .expect("the forged tool is listed")
        .name
        .clone();
    let id = stage(&w, &forged, json!({"id": 1})).await;
    let shown = w.cli(&["show", &id.to_string()]);
    assert!(shown.status.success(), "{}", stderr(&shown));
    let text = stdout(&shown);
    assert!(!text.contains('\u{1b}'), "{text:?}");
    let approve: Vec<_> = text.lines().filter(|l| l.starts_with("Approve")).collect();
    assert_eq!(
        approve,
        vec![format!(
            "Approve: gatehouse approve {id}    Reject: gatehouse reject {id}"
        )],
        "{text}"
    );
    assert!(
        !text.lines().any(|l| l.starts_with("Endpoint: trusted")),
        "{text}"
    );
    assert!(server.calls().iter().all(|c| c["tool"] != "forged"));
}

/// The session ids the server's `tools/call`s carried, in order.
fn call_sessions(server: &McpServer) -> Vec<Value> {
    server
        .methods()
        .into_iter()
        .filter(|m| m["method"] == "tools/call")
        .map(|m| m["session"].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn reads_resume_one_held_session_per_chat_and_account_and_a_send_sets_up_its_own() {
    let (w, server) = mcp_world(Trust::Byo).await;
    w.chat_with("home", "alice", &[("svc", "SVC")]);
    w.kernel.operator().add_user("bob").unwrap();
    w.kernel
        .person("bob")
        .connect_account("svc", "main", TOKEN, true)
        .unwrap();
    w.chat_with("bobs", "bob", &[("svc", "SVC")]);
    // Adding the gatekeeper read the tool list over a session of its own.
    let base = server.initializations();
    let read = |chat: &'static str, id: i64| {
        let w = &w;
        async move {
            let out = w
                .script(chat, json!([call("SVC", "get_item", json!({"id": id}))]))
                .await;
            assert_eq!(
                out[0]["done"]["content"][0]["text"],
                format!("item {id}"),
                "{out}"
            );
        }
    };

    // Three turns, three fresh instances: one session, set up once.
    for id in 1..=3 {
        read("work", id).await;
    }
    assert_eq!(server.initializations(), base + 1);
    let sessions = call_sessions(&server);
    assert_eq!(sessions.len(), 3);
    assert!(sessions[0].is_string(), "{sessions:?}");
    assert!(sessions.iter().all(|s| *s == sessions[0]), "{sessions:?}");

    // Another chat of the same person, and another person's chat: each
    // sets up its own, never reuses work's.
    read("home", 4).await;
    read("bobs", 5).await;
    assert_eq!(server.initializations(), base + 3);
    let sessions = call_sessions(&server);
    assert_ne!(sessions[3], sessions[0]);
    assert_ne!(sessions[4], sessions[0]);
    assert_ne!(sessions[4], sessions[3]);

    // An approved write sets up a session of its own, and takes nothing
    // from the reads: work's next read resumes work's session.
    let id = stage(&w, "tag_item", json!({"id": 1, "tag": "a"})).await;
    assert!(matches!(
        w.kernel.person("alice").approve(id).await.unwrap(),
        Decision::Applied { .. }
    ));
    assert_eq!(server.initializations(), base + 4);
    let sessions = call_sessions(&server);
    assert_ne!(sessions[5], sessions[0], "the send's own session");
    read("work", 6).await;
    let sessions = call_sessions(&server);
    assert_eq!(sessions[6], sessions[0]);
    assert_eq!(server.initializations(), base + 4);

    // A held session the server has forgotten: answered 404, set up anew,
    // and the read made; the new one is held from then on.
    server.fault("expire");
    read("work", 7).await;
    assert_eq!(server.initializations(), base + 5);
    read("work", 8).await;
    assert_eq!(server.initializations(), base + 5);
    assert_eq!(
        server.calls_of("get_item"),
        8,
        "eight reads, each run once: the 404 was not run"
    );
}

/// Add the `mcp` gatekeeper `svc` in front of the server at `url`, on
/// `host`, with the test's token.
async fn add_mcp(w: &World, trust: Trust, host: &str, url: &str) -> anyhow::Result<()> {
    w.front(
        "svc",
        "mcp",
        trust,
        vec![host.to_owned()],
        Some(("mcp-token", TOKEN)),
        vec![("url".into(), url.to_owned())],
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_private_authority_is_trusted_only_where_the_operator_names_it() {
    use gatehouse::{Limits, Roots};
    use gatehouse_e2e::remote::TestCa;
    let ca = TestCa::new();
    let server = McpServer::start_tls(TOKEN, &ca.cert, &ca.key);
    // The web's roots alone do not vouch for the test's authority.
    let w = World::new();
    let refused = add_mcp(&w, Trust::Byo, &server.host(), &server.url())
        .await
        .expect_err("an unknown authority is refused");
    assert!(format!("{refused:#}").contains("initialize"), "{refused:#}");

    // Named by the operator, it is trusted for reads and sends alike.
    let w = World::with_limits(Limits {
        roots: Roots::with_file(&ca.roots).expect("a PEM file"),
        ..gatehouse_e2e::test_limits()
    });
    w.install("script");
    add_mcp(&w, Trust::Byo, &server.host(), &server.url())
        .await
        .expect("added over TLS");
    w.chat_with("work", "alice", &[("svc", "SVC")]);
    let out = w
        .script("work", json!([call("SVC", "get_item", json!({"id": 3}))]))
        .await;
    assert_eq!(out[0]["done"]["content"][0]["text"], "item 3", "{out}");
    let id = stage(&w, "tag_item", json!({"id": 3, "tag": "t"})).await;
    assert!(matches!(
        w.kernel.person("alice").approve(id).await.unwrap(),
        Decision::Applied { .. }
    ));

    // A file that names no authority stops the kernel, in one line.
    let not_pem = w.home().join("roots.txt");
    std::fs::write(&not_pem, "not a certificate").unwrap();
    let e = Roots::with_file(&not_pem).expect_err("no certificate in it");
    assert!(format!("{e:#}").contains("holds no certificate"), "{e:#}");
    let o = gatehouse_e2e::cli_command(w.home(), &["gatekeepers"])
        .env("GATEHOUSE_TRUST_ROOTS", w.home().join("missing.pem"))
        .output()
        .expect("the cli runs");
    assert!(!o.status.success());
    let err = stderr(&o);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("GATEHOUSE_TRUST_ROOTS"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn reads_answered_as_event_streams_keep_their_connection() {
    use gatehouse_e2e::remote::Delayed;
    let server = McpServer::start(TOKEN);
    // A relay without delay, to count the connections made to the server.
    let relay = Delayed::start(server.port(), std::time::Duration::ZERO);
    let at = format!("127.0.0.1:{}", relay.port);
    let w = World::new();
    w.install("script");
    add_mcp(&w, Trust::Byo, &at, &format!("http://{at}/mcp"))
        .await
        .expect("added through the relay");
    w.chat_with("work", "alice", &[("svc", "SVC")]);
    let before = relay.connections();
    // One turn of five reads: each a fresh gatekeeper instance, none far
    // enough from the last for a kept connection to go idle.
    let steps: Vec<Value> = (1..=5)
        .map(|id| call("SVC", "get_item", json!({"id": id})))
        .collect();
    let out = w.script("work", Value::Array(steps)).await;
    for (i, id) in (1..=5).enumerate() {
        assert_eq!(
            out[i]["done"]["content"][0]["text"],
            format!("item {id}"),
            "{out}"
        );
    }
    assert_eq!(relay.connections() - before, 1, "one kept connection");
    assert_eq!(server.calls_of("get_item"), 5);
}
