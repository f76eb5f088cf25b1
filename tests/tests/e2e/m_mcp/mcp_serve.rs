//! SPEC M2: `gatehouse mcp serve`, driven by the official Python SDK's MCP
//! client (tests/mcp/client.py) over stdio and Streamable HTTP, in front of
//! the real `issues` gatekeeper and its loopback tracker. The surface is
//! one more caller of the kernel: reads run and are recorded, writes answer
//! `pending #N` and wait for a person, and lockdown, forward exclusion,
//! sharing and auto-approval apply as they do to a gadget.

use gatehouse::store::{LedgerFilter, Trust};
use gatehouse_e2e::mcp::{McpClient, McpHttpServe, raw_http, stdio_connect};
use gatehouse_e2e::{World, add_hook, call, cli_command, stderr, stdout, wait_until};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::Duration;

fn server_log(w: &World) -> PathBuf {
    w.home().join("mcp-serve.stderr")
}

fn text(result: &Value) -> String {
    result["content"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

fn is_error(result: &Value) -> bool {
    result["isError"] == true
}

fn tool<'a>(tools: &'a [Value], name: &str) -> &'a Value {
    tools
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no tool {name} in {tools:?}"))
}

fn poll(c: &mut McpClient, id: i64) -> Value {
    c.call("gatehouse_action_result", json!({"id": id}))
}

/// The listing, a read, a held write, approval through the real CLI, the
/// poll: the whole round an agent makes. `c` is connected as alice to
/// chat `work` of [`World::standard`].
fn the_round_of_an_agent(w: &World, c: &mut McpClient) {
    let tools = c.list();
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "ISSUES__listIssues",
            "ISSUES__getIssue",
            "ISSUES__searchIssues",
            "ISSUES__createIssue",
            "ISSUES__addLabel",
            "ISSUES__removeLabel",
            "gatehouse_action_result",
            // The triage gadget's face (an MCP App) and its functions.
            "triage.face",
            "triage.board",
            "triage.label",
        ]
    );
    // Annotations, descriptions and schemas as the manifest stores them.
    let g = w.kernel.inspect().gatekeeper("issues").unwrap().unwrap();
    for entry in &g.manifest.tools {
        let t = tool(&tools, &format!("ISSUES__{}", entry.name));
        assert_eq!(t["description"], entry.description.as_str());
        let schema: Value = serde_json::from_str(&entry.input_schema).unwrap();
        assert_eq!(t["inputSchema"], schema, "{}", entry.name);
        let a = &entry.annotations;
        for (hint, v) in [
            ("readOnlyHint", a.read_only),
            ("destructiveHint", a.destructive),
            ("idempotentHint", a.idempotent),
            ("openWorldHint", a.open_world),
        ] {
            assert_eq!(
                t["annotations"].get(hint).and_then(Value::as_bool),
                v,
                "{} {hint}: {t}",
                entry.name
            );
        }
    }
    assert_eq!(
        tool(&tools, "ISSUES__getIssue")["annotations"]["readOnlyHint"],
        true
    );
    assert_eq!(
        tool(&tools, "ISSUES__createIssue")["annotations"],
        json!({"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false})
    );

    // A read runs at once, and is recorded under the external principal.
    let read = c.call("ISSUES__getIssue", json!({"id": 1}));
    assert!(!is_error(&read), "{read}");
    assert!(
        text(&read).contains("Login page shows a blank screen"),
        "{read}"
    );
    assert_eq!(read["structuredContent"]["id"], 1, "{read}");
    let log = w.observations("work");
    let seen = log.last().expect("the read is recorded");
    assert_eq!(seen.caller, "external agent in work, acting for alice");
    assert_eq!(
        (seen.person.as_str(), seen.gadget.as_deref()),
        ("alice", None)
    );
    assert_eq!(seen.tool.as_deref(), Some("getIssue"));

    // A write answers pending at once, not as an error; nothing was sent.
    let issues_before = w.tracker.issues().len();
    let write = c.call("ISSUES__createIssue", json!({"title": "Filed by an agent"}));
    assert!(!is_error(&write), "a held write is not an error: {write}");
    let said = text(&write);
    let id = write["structuredContent"]["action_id"]
        .as_i64()
        .unwrap_or_else(|| panic!("{write}"));
    assert!(said.starts_with(&format!("pending #{id}:")), "{said}");
    assert!(said.contains("nothing has been sent"), "{said}");
    assert!(said.contains("gatehouse_action_result"), "{said}");
    assert_eq!(write["structuredContent"]["state"], "pending");
    assert_eq!(write["structuredContent"]["sent"], false);
    assert_eq!(
        write["structuredContent"]["poll"],
        json!({"tool": "gatehouse_action_result", "arguments": {"id": id}})
    );
    assert!(w.tracker.writes().is_empty(), "{:?}", w.tracker.writes());
    assert_eq!(w.tracker.issues().len(), issues_before);
    let polled = poll(c, id);
    assert!(!is_error(&polled), "{polled}");
    assert_eq!(polled["structuredContent"]["state"], "pending", "{polled}");

    // The approver sees who staged it; approval through the CLI sends it once.
    let shown = w.cli(&["show", &id.to_string()]);
    assert!(
        stdout(&shown).contains("external agent in work, acting for alice"),
        "{}",
        stdout(&shown)
    );
    let o = w.cli(&["approve", &id.to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(w.tracker.writes().len(), 1);
    assert_eq!(w.tracker.issues().len(), issues_before + 1);

    // Polling returns the service's answer; asking again sends nothing.
    let applied = poll(c, id);
    assert!(!is_error(&applied), "{applied}");
    assert_eq!(
        applied["structuredContent"]["state"], "applied",
        "{applied}"
    );
    assert!(text(&applied).contains("Filed by an agent"), "{applied}");
    let _ = w.cli(&["approve", &id.to_string()]);
    assert_eq!(w.tracker.writes().len(), 1, "sent once");
    assert_eq!(poll(c, id)["structuredContent"]["state"], "applied");

    // A rejected write is never sent, and the poll says so.
    let write = c.call("ISSUES__addLabel", json!({"id": 2, "label": "later"}));
    let id = write["structuredContent"]["action_id"].as_i64().unwrap();
    let o = w.cli(&["reject", &id.to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rejected = poll(c, id);
    assert!(is_error(&rejected), "{rejected}");
    assert_eq!(rejected["structuredContent"]["state"], "rejected");
    assert_eq!(w.tracker.writes().len(), 1);

    // A malformed write is refused at once (the kernel's schema check).
    let bad = c.call("ISSUES__createIssue", json!({"title": 7}));
    assert!(is_error(&bad), "{bad}");
    assert_eq!(bad["structuredContent"]["error"]["kind"], "invalid-args");
    // A tool outside the chat's grant is the kernel's answer too.
    let unknown = c.call("NOPE__createIssue", json!({}));
    assert!(is_error(&unknown), "{unknown}");
    assert!(text(&unknown).contains("introduced: [ISSUES]"), "{unknown}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_mcp_client_over_stdio_reads_at_once_and_its_writes_wait_for_a_person() {
    let w = World::standard(Trust::Byo).await;
    let mut c = McpClient::stdio(w.home(), "work", "alice", &server_log(&w));
    the_round_of_an_agent(&w, &mut c);
    // An older client (the initialize handshake) is served too.
    drop(c);
    let mut legacy = stdio_connect(w.home(), "work", "alice", &server_log(&w));
    legacy["mode"] = json!("legacy");
    let mut c = McpClient::connect(&legacy).expect("a legacy client connects");
    let read = c.call("ISSUES__listIssues", json!({}));
    assert!(!is_error(&read), "{read}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_mcp_client_over_http_needs_the_bearer_token() {
    let w = World::standard(Trust::Byo).await;
    let serve = McpHttpServe::start(w.home(), "work", "alice");
    assert!(serve.url.starts_with("http://127.0.0.1:"), "{}", serve.url);
    assert!(serve.url.ends_with("/mcp"), "{}", serve.url);
    assert_eq!(serve.token.len(), 64, "{}", serve.token);

    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}})
    .to_string();
    let accept = ("accept", "application/json, text/event-stream");
    let json_body = ("content-type", "application/json");
    let wrong = format!("Bearer {}", "0".repeat(64));
    let right = format!("Bearer {}", serve.token);
    for auth in [None, Some(wrong.as_str()), Some(serve.token.as_str())] {
        let mut headers = vec![accept, json_body];
        if let Some(a) = auth {
            headers.push(("authorization", a));
        }
        let (status, _) = raw_http(&serve.authority(), "POST", "/mcp", &headers, &init);
        assert_eq!(status, 401, "authorization {auth:?}");
    }
    let (status, body) = raw_http(
        &serve.authority(),
        "POST",
        "/mcp",
        &[accept, json_body, ("authorization", &right)],
        &init,
    );
    assert_eq!(status, 200, "{body}");
    // With the token, but addressed by another name (DNS rebinding) or
    // from a browser page: refused too.
    let port = serve.authority().rsplit(':').next().unwrap().to_owned();
    let rebound = format!("attacker.example:{port}");
    for extra in [
        ("host", rebound.as_str()),
        ("origin", "http://attacker.example"),
    ] {
        let (status, body) = raw_http(
            &serve.authority(),
            "POST",
            "/mcp",
            &[accept, json_body, ("authorization", &right), extra],
            &init,
        );
        assert!((400..500).contains(&status), "{extra:?}: {status} {body}");
    }
    // The SDK's client with a wrong token does not get in either.
    let refused = McpClient::http(&serve.url, Some("not-the-token")).err();
    assert!(refused.is_some(), "a wrong token opens no session");
    // Nothing was staged or sent by any of that.
    assert!(w.tracker.writes().is_empty());

    let mut c = McpClient::http(&serve.url, Some(&serve.token)).expect("the client connects");
    the_round_of_an_agent(&w, &mut c);
    drop(c);
    let status = serve.stop();
    assert!(
        status.success(),
        "SIGTERM stops the server cleanly: {status:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn stdout_carries_only_json_rpc() {
    use std::io::{Read as _, Write as _};
    let w = World::standard(Trust::Byo).await;
    let mut child = cli_command(w.home(), &["mcp", "serve", "--chat", "work"])
        .env("GATEHOUSE_LOG", "debug")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for m in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "ISSUES__createIssue", "arguments": {"title": "raw"}}}),
    ] {
        writeln!(stdin, "{m}").unwrap();
    }
    // Wait for the three answers, then close stdin: the server ends.
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut lines: Vec<Value> = Vec::new();
    while lines.len() < 3 {
        let l = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("an answer on stdout");
        lines.push(serde_json::from_str(&l).unwrap_or_else(|e| panic!("{l:?} is not JSON: {e}")));
    }
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(rx.try_recv().is_err(), "nothing else on stdout");
    assert!(lines.iter().all(|m| m["jsonrpc"] == "2.0"), "{lines:?}");
    let answer = |id: i64| {
        lines
            .iter()
            .find(|m| m["id"] == id)
            .unwrap_or_else(|| panic!("{lines:?}"))
    };
    assert!(answer(2)["result"]["tools"].is_array(), "{lines:?}");
    assert_eq!(answer(3)["result"]["isError"], false, "{lines:?}");
    assert!(
        answer(3)["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("pending #")),
        "{lines:?}"
    );
    assert_eq!(w.kernel.inspect().pending(None).unwrap().len(), 1);
    let mut logs = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut logs)
        .unwrap();
    assert!(!logs.is_empty(), "the debug log went to stderr");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_latched_chat_refuses_outbound_calls_through_mcp_exactly_as_through_a_gadget() {
    use gatehouse_services::warehouse::Warehouse;
    let w = World::standard(Trust::Vetted).await;
    let warehouse = Warehouse::builder()
        .account("wh-owner-9d3a", &["*"])
        .start()
        .unwrap();
    let k = &w.kernel;
    k.operator()
        .put_secret("warehouse-token", "wh-owner-9d3a")
        .unwrap();
    let bytes = |name: &str| std::fs::read(gatehouse_e2e::guest(name)).unwrap();
    k.operator()
        .add_gatekeeper(
            "warehouse",
            &bytes("warehouse"),
            Trust::Byo,
            vec![warehouse.host()],
            Some("warehouse-token".into()),
            Vec::new(),
            &|_| {},
        )
        .await
        .unwrap();
    k.operator()
        .add_gatekeeper(
            "web",
            &bytes("webfetch"),
            Trust::Byo,
            vec![w.tracker.host()],
            Some("tracker-token".into()),
            Vec::new(),
            &|_| {},
        )
        .await
        .unwrap();
    k.person("alice")
        .introduce("work", "warehouse", "WAREHOUSE", None)
        .unwrap();
    k.person("alice")
        .introduce("work", "web", "WEB", None)
        .unwrap();
    // Both keys for addLabel: without the latch it would be auto-approved.
    w.label_rule("alice").await;
    let mut c = McpClient::stdio(w.home(), "work", "alice", &server_log(&w));

    // The agent reads owner-only data itself: admitted, and the chat latches.
    let read = c.call("WAREHOUSE__query", json!({"table": "payroll"}));
    assert!(!is_error(&read), "{read}");
    assert!(k.inspect().chat("work").unwrap().unwrap().latched);

    let web = json!({"url": format!("{}/issues", w.tracker.url())});
    let calls = [
        ("ISSUES", "createIssue", json!({"title": "leak"})),
        ("ISSUES", "addLabel", json!({"id": 1, "label": "leak"})),
        ("WEB", "fetch", web),
    ];
    let requests = w.tracker.requests().len();
    let gadget = w
        .script(
            "work",
            Value::Array(
                calls
                    .iter()
                    .map(|(k, t, a)| call(k, t, a.clone()))
                    .collect(),
            ),
        )
        .await;
    for (i, (key, tool, args)) in calls.iter().enumerate() {
        let through_mcp = c.call(&format!("{key}__{tool}"), args.clone());
        assert!(is_error(&through_mcp), "{through_mcp}");
        let error = &through_mcp["structuredContent"]["error"];
        assert_eq!(error["kind"], gadget[i]["error"]["kind"], "{tool}");
        assert_eq!(error["message"], gadget[i]["error"]["message"], "{tool}");
        assert!(text(&through_mcp).contains("locked down"), "{through_mcp}");
    }
    assert!(
        k.inspect().pending(None).unwrap().is_empty(),
        "nothing staged"
    );
    assert_eq!(w.tracker.requests().len(), requests, "nothing left");
    drop(warehouse);
}

#[tokio::test(flavor = "multi_thread")]
async fn who_may_use_a_chat_over_mcp_is_the_one_rule() {
    let crate::s_sharing::sharing::Shared { w, warehouse } =
        crate::s_sharing::sharing::shared_world(&[]).await;
    let chat = "salary-board";
    let k = &w.kernel;

    // Someone the chat is not shared with is told exactly what a missing
    // chat tells, and what `run` tells them.
    k.operator().add_user("mallory").unwrap();
    let as_mallory = |args: &[&str]| {
        cli_command(w.home(), args)
            .env("GATEHOUSE_USER", "mallory")
            .output()
            .unwrap()
    };
    let served = as_mallory(&["mcp", "serve", "--chat", chat]);
    let missing = as_mallory(&["mcp", "serve", "--chat", "no-such-board"]);
    let ran = as_mallory(&["run", "script", "--chat", chat, "{}"]);
    assert_eq!(served.status.code(), Some(1));
    assert!(served.stdout.is_empty(), "stdout carries only JSON-RPC");
    assert_eq!(
        stderr(&served),
        "error: no chat named \"salary-board\"; `gatehouse chats` lists the chats you may see\n"
    );
    assert_eq!(stderr(&served), stderr(&ran));
    assert_eq!(
        stderr(&missing),
        stderr(&served).replace("salary-board", "no-such-board")
    );
    let refused = McpClient::connect(&stdio_connect(w.home(), chat, "mallory", &server_log(&w)));
    assert!(refused.is_err(), "the SDK's client gets no session");

    // Forward exclusion (S3) applies to the owner's agent: once bob, whose
    // account may not see payroll, collaborates, that read is refused
    // before it reaches the warehouse.
    let mut alice = McpClient::stdio(w.home(), chat, "alice", &server_log(&w));
    let sales = alice.call("WAREHOUSE__query", json!({"table": "sales"}));
    assert!(!is_error(&sales), "{sales}");
    k.person("alice").share(chat, "bob", false).unwrap();
    let before = warehouse.requests().len();
    let payroll = alice.call("WAREHOUSE__query", json!({"table": "payroll"}));
    assert!(is_error(&payroll), "{payroll}");
    assert!(
        text(&payroll).contains("a collaborator is not permitted to see"),
        "{payroll}"
    );
    // Bob has not opened the chat yet: the check asks the warehouse, with
    // his account, whether he may see it; the query itself never goes.
    let sent = &warehouse.requests()[before..];
    assert!(sent.iter().all(|r| r.path == "/access"), "{sent:?}");

    // A collaborator is re-verified with their own accounts, as for `run`:
    // bob's agent reads under bob's account.
    let mut bob = McpClient::stdio(w.home(), chat, "bob", &server_log(&w));
    let customers = bob.call("WAREHOUSE__query", json!({"table": "customers"}));
    assert!(!is_error(&customers), "{customers}");
    let last = w.observations(chat).pop().unwrap();
    assert_eq!(
        last.caller,
        "external agent in salary-board, acting for bob"
    );
    assert_eq!(last.account.as_deref(), Some("bob/analyst"));

    // Removed, bob's open session loses the chat at the next request.
    assert!(k.person("alice").unshare(chat, "bob").unwrap());
    let after = bob.call("WAREHOUSE__query", json!({"table": "customers"}));
    assert!(is_error(&after), "{after}");
    assert_eq!(
        text(&after),
        "no chat named \"salary-board\"; `gatehouse chats` lists the chats you may see"
    );
    let listed = bob.step(&json!({"list": true}));
    assert!(
        listed["error"]
            .as_str()
            .is_some_and(|e| e.contains("no chat named")),
        "{listed}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn two_key_auto_approval_applies_to_an_agents_writes_unchanged() {
    let w = World::standard(Trust::Vetted).await;
    w.label_rule("alice").await;
    let mut c = McpClient::stdio(w.home(), "work", "alice", &server_log(&w));
    let write = c.call("ISSUES__addLabel", json!({"id": 1, "label": "triaged"}));
    assert!(!is_error(&write), "{write}");
    let id = write["structuredContent"]["action_id"].as_i64().unwrap();
    assert!(
        wait_until(Duration::from_secs(30), || {
            poll(&mut c, id)["structuredContent"]["state"] == "applied"
        }),
        "auto-approved and applied: {}",
        poll(&mut c, id)
    );
    let entry = w
        .kernel
        .inspect()
        .ledger(&LedgerFilter {
            auto_approved: true,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(entry.len(), 1, "{entry:?}");
    assert_eq!(entry[0].resolved_by.as_deref(), Some("alice"));
    assert_eq!(w.tracker.writes().len(), 1);
    // Key one alone does not suffice: createIssue is not idempotent.
    let held = c.call("ISSUES__createIssue", json!({"title": "held"}));
    let id = held["structuredContent"]["action_id"].as_i64().unwrap();
    assert_eq!(poll(&mut c, id)["structuredContent"]["state"], "pending");
    assert_eq!(w.tracker.writes().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_remote_mcp_servers_tools_pass_through_the_gate_unchanged() {
    // Both edges at once: an MCP client → `mcp serve` → kernel → the `mcp`
    // gatekeeper → a real MCP server (tests/mcp/server.py).
    use gatehouse_e2e::mcp::McpServer;
    const TOKEN: &str = "mcp-tok-serve-4e1a";
    let server = McpServer::start(TOKEN);
    let w = World::new();
    w.kernel.operator().put_secret("mcp-token", TOKEN).unwrap();
    let bytes = std::fs::read(gatehouse_e2e::guest("mcp")).unwrap();
    w.kernel
        .operator()
        .add_gatekeeper(
            "svc",
            &bytes,
            Trust::Byo,
            vec![server.host()],
            Some("mcp-token".into()),
            vec![("url".into(), server.url())],
            &|_| {},
        )
        .await
        .unwrap();
    w.kernel.person("alice").new_chat("work").unwrap();
    w.kernel
        .person("alice")
        .introduce("work", "svc", "SVC", None)
        .unwrap();
    let log = server_log(&w);
    let mut c = McpClient::stdio(w.home(), "work", "alice", &log);

    let tools = c.list();
    assert_eq!(
        tool(&tools, "SVC__get_item")["annotations"],
        json!({"readOnlyHint": true})
    );
    assert_eq!(
        tool(&tools, "SVC__tag_item")["annotations"],
        json!({"destructiveHint": false, "idempotentHint": true})
    );
    assert!(tool(&tools, "SVC__ping_item").get("annotations").is_none());
    // The tool whose name forges a prompt is not offered under a name an
    // agent could not call back; the log says so, harmlessly.
    assert_eq!(tools.len(), 7, "six tools and the poll: {tools:?}");
    assert!(
        wait_until(Duration::from_secs(10), || std::fs::read_to_string(&log)
            .is_ok_and(|l| l.contains("not offered over MCP"))),
        "{:?}",
        std::fs::read_to_string(&log)
    );
    let logged = std::fs::read_to_string(&log).unwrap();
    // (The log's own colours aside) the name's escape and line break are gone.
    assert!(!logged.contains("\u{1b}[2J"), "{logged:?}");
    assert!(!logged.contains("\nApprove"), "{logged:?}");

    // A read is offered with its title and its own output schema; a
    // write with its title and the envelope every held write answers with,
    // whatever the server declared. Neither is offered as a task: `mcp
    // serve` runs none, and without `execution` a client reads forbidden.
    let g = w.kernel.inspect().gatekeeper("svc").unwrap().unwrap();
    let declared = |n: &str| -> Value {
        serde_json::from_str(
            g.manifest
                .tool(n)
                .unwrap()
                .output_schema
                .as_deref()
                .unwrap(),
        )
        .unwrap()
    };
    let get = tool(&tools, "SVC__get_item");
    assert_eq!(get["title"], "Get an item");
    assert_eq!(get["outputSchema"], declared("get_item"));
    assert_eq!(
        tool(&tools, "SVC__find_items")["outputSchema"],
        declared("find_items")
    );
    let delete = tool(&tools, "SVC__delete_item");
    assert_eq!(delete["title"], "Delete an item");
    assert_ne!(delete["outputSchema"], declared("delete_item"));
    assert_eq!(
        delete["outputSchema"]["properties"]["state"],
        json!({"const": "pending"})
    );
    assert_eq!(
        delete["outputSchema"],
        tool(&tools, "SVC__ping_item")["outputSchema"],
        "one envelope for every write"
    );
    for t in &tools {
        assert!(t.get("execution").is_none(), "{t}");
    }

    // The server's result comes back as it gave it (the SDK's client
    // checks it against the output schema it was offered).
    let read = c.call("SVC__get_item", json!({"id": 7}));
    assert!(!is_error(&read), "{read}");
    assert_eq!(text(&read), "item 7");
    assert_eq!(read["structuredContent"]["result"], "item 7");
    let found = c.call("SVC__find_items", json!({"query": "books"}));
    assert!(!is_error(&found), "{found}");
    assert_eq!(found["structuredContent"], json!({"items": [1, 2]}));
    // An answer outside its declared shape is not handed over: the read
    // happened (the server saw it), the agent gets one line saying why.
    let broken = c.call("SVC__find_items", json!({"query": "broken"}));
    assert!(is_error(&broken), "{broken}");
    assert_eq!(broken["structuredContent"]["error"]["kind"], "service");
    let said = text(&broken);
    assert!(
        said.contains("not in the shape its output schema declares") && said.contains("/items"),
        "{said}"
    );
    assert!(!said.contains('\n'), "{said}");
    assert!(!said.contains("one, two"), "the answer is withheld: {said}");
    assert_eq!(server.calls_of("find_items"), 2);

    // A destructive write waits; the server receives it once, on approval.
    let write = c.call("SVC__delete_item", json!({"id": 7}));
    assert!(!is_error(&write), "{write}");
    let id = write["structuredContent"]["action_id"].as_i64().unwrap();
    assert_eq!(server.calls_of("delete_item"), 0);
    let o = w.cli(&["approve", &id.to_string()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(server.calls_of("delete_item"), 1);
    let applied = poll(&mut c, id);
    assert_eq!(
        applied["structuredContent"]["state"], "applied",
        "{applied}"
    );
    assert!(text(&applied).contains("deleted 7"), "{applied}");
    assert_eq!(
        applied["structuredContent"]["result"]["structuredContent"]["result"],
        "deleted 7"
    );
}

/// A refusal quotes a tool name as it was given. An agent that
/// writes `ISSUES_listIssues` (one underscore, not the separator) is told
/// exactly that name, not `ISSUESlistIssues` with its `_` taken for
/// markup; and a gadget's or a person's misspelt name comes back the same
/// way, from every surface.
#[tokio::test(flavor = "multi_thread")]
async fn a_refusal_quotes_the_tool_name_as_given() {
    use std::io::Write as _;
    let w = World::standard(Trust::Byo).await;
    let mut child = cli_command(w.home(), &["mcp", "serve", "--chat", "work"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for m in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "ISSUES_listIssues", "arguments": {}}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "ISSUES__list_issues", "arguments": {}}}),
    ] {
        writeln!(stdin, "{m}").unwrap();
    }
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut answers = std::collections::BTreeMap::new();
    while answers.len() < 2 {
        let l = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("an answer on stdout");
        let m: Value = serde_json::from_str(&l).unwrap_or_else(|e| panic!("{l:?}: {e}"));
        if let Some(id @ (2 | 3)) = m["id"].as_i64() {
            answers.insert(id, m);
        }
    }
    drop(stdin);
    assert!(child.wait().unwrap().success());
    let message = |id: i64| {
        let a = &answers[&id]["result"];
        let m = a["structuredContent"]["error"]["message"]
            .as_str()
            .unwrap_or_else(|| panic!("{a}"))
            .to_owned();
        assert_eq!(text(a), m);
        m
    };
    let unknown = message(2);
    assert!(
        unknown.starts_with(r#"no tool "ISSUES_listIssues" in chat "work""#),
        "{unknown}"
    );
    // A tool the binding does not grant, through the kernel's refusal.
    let refused = message(3);
    assert!(
        refused
            .starts_with(r#"tool "list_issues" is not granted to ISSUES; allowed: [listIssues,"#),
        "{refused}"
    );
    // A person's hook of a trigger the gatekeeper does not declare.
    let o = w.cli(&add_hook("issue_opened", &[]));
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(r#"declares no trigger "issue_opened"; it declares: issueOpened"#),
        "{}",
        stderr(&o)
    );
    // A rule for a tool the gatekeeper does not have.
    let o = w.cli(&["rules", "add", "issues:add_label"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(r#"has no tool "add_label"; it offers: listIssues"#),
        "{}",
        stderr(&o)
    );
}
