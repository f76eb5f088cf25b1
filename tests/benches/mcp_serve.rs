//! `gatehouse mcp serve` against the server it fronts: one MCP
//! client, the official Python SDK's (tests/mcp/client.py), makes the same
//! read two ways, alternated in one run so that a ratio never depends on
//! the machine's noise:
//!
//! - gated: client → `gatehouse mcp serve` → kernel (turn admitted,
//!   classified, recorded as an observation) → `mcp` gatekeeper (wasm) →
//!   the loopback MCP server (tests/mcp/server.py);
//! - direct: the same client → the same server.
//!
//! Both over Streamable HTTP (the server's only transport), and the gated
//! one over stdio too. Prints one table of per-call medians.
//!
//! Run: `cargo bench -p gatehouse-e2e --bench mcp_serve`
//! (`MCP_SERVE_QUICK=1`: fewer rounds, a smoke run).

use gatehouse::store::Trust;
use gatehouse_e2e::World;
use gatehouse_e2e::mcp::{McpClient, McpHttpServe, McpServer, stdio_connect};
use serde_json::{Value, json};

const TOKEN: &str = "bench-mcp-token";

fn main() {
    let quick = std::env::var_os("MCP_SERVE_QUICK").is_some();
    let (rounds, calls) = if quick { (3, 10) } else { (15, 40) };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");

    let server = McpServer::start(TOKEN);
    let w = World::new();
    rt.block_on(w.front(
        "svc",
        "mcp",
        Trust::Byo,
        vec![server.host()],
        Some(("mcp-token", TOKEN)),
        vec![("url".into(), server.url())],
    ))
    .expect("the mcp gatekeeper is added");
    w.chat_with("bench", "alice", &[("svc", "SVC")]);

    // The client negotiates per connection: `legacy` is the initialize
    // handshake (protocol 2025-11-25, what the `mcp` gatekeeper speaks to
    // the server), `auto` the SDK's default (2026-07-28 where offered).
    // Both connections of a row use the same mode.
    let step = |mode: &str| {
        json!({"bench": {
            "direct": {"http": {"url": server.url(), "token": TOKEN}, "mode": mode},
            "gated_call": {"call": "SVC__get_item", "arguments": {"id": 1}},
            "direct_call": {"call": "get_item", "arguments": {"id": 1}},
            "rounds": rounds,
            "calls": calls,
        }})
    };
    let mut rows = Vec::new();
    let serve = McpHttpServe::start(w.home(), "bench", "alice");
    for mode in ["legacy", "auto"] {
        let connect = json!({"http": {"url": serve.url, "token": serve.token}, "mode": mode});
        let mut c = McpClient::connect(&connect).expect("the client connects");
        let what = format!("read over HTTP, {mode} ({})", c.protocol);
        rows.push(measure(&what, &c.step(&step(mode))));
    }
    drop(serve);

    let log = w.home().join("mcp-serve.stderr");
    let mut connect = stdio_connect(w.home(), "bench", "alice", &log);
    connect["mode"] = json!("legacy");
    let mut c = McpClient::connect(&connect).expect("the client connects over stdio");
    let what = format!("read over stdio, legacy ({}; direct: HTTP)", c.protocol);
    rows.push(measure(&what, &c.step(&step("legacy"))));
    drop(c);

    let reads = w
        .kernel
        .inspect()
        .ledger(&gatehouse::store::LedgerFilter {
            chat: Some("bench".into()),
            kind: Some(gatehouse::store::LedgerKind::Observation),
            ..Default::default()
        })
        .expect("ledger")
        .len();
    println!(
        "\n{reads} gated reads recorded; {calls} calls per round, {rounds} rounds, alternated"
    );
    println!("\n| measure | through mcp serve | direct | ratio |");
    println!("|---|---|---|---|");
    for r in rows {
        println!("{r}");
    }
}

/// One table row from the client's timings: medians per call.
fn measure(what: &str, answer: &Value) -> String {
    let median = |k: &str| {
        let mut v: Vec<f64> = answer[k]
            .as_array()
            .unwrap_or_else(|| panic!("the bench step failed: {answer}"))
            .iter()
            .filter_map(Value::as_f64)
            .collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (gated, direct) = (median("gated"), median("direct"));
    format!(
        "| {what} | {:.2} ms | {:.2} ms | {:.2}× |",
        gated * 1e3,
        direct * 1e3,
        gated / direct
    )
}
