//! A gated read of a remote MCP server against the same SDK client
//! calling that server directly. The server (tests/mcp/server.py, the
//! official Python SDK) serves HTTPS under a certificate authority made
//! here, behind a relay that holds every byte 20 ms each way
//! (`gatehouse_e2e::remote`), so a round trip costs 40 ms, as across a
//! network, and a TCP or TLS handshake costs what it would there too:
//!
//! - gated: the client → `gatehouse mcp serve` (loopback) → kernel (turn
//!   admitted, classified, recorded as an observation) → `mcp` gatekeeper
//!   (wasm) → relay → server;
//! - direct: the same client → relay → server, its session and
//!   connection kept.
//!
//! Alternated in one run, so the ratio does not depend on the machine's
//! noise. A fresh gatekeeper instance per call would otherwise pay a TCP
//! and a TLS handshake and `initialize` + `initialized` before every
//! `tools/call`; the host keeps the connection and holds the session, so
//! a gated read is one round trip, as the direct one. Goal: ≤ 1.15×.
//!
//! Run: `cargo bench -p gatehouse-e2e --bench mcp_remote`
//! (`MCP_REMOTE_QUICK=1`: fewer rounds, a smoke run).

use gatehouse::store::Trust;
use gatehouse::{Limits, Roots};
use gatehouse_e2e::mcp::{McpClient, McpHttpServe, McpServer};
use gatehouse_e2e::remote::{Delayed, TestCa};
use gatehouse_e2e::{World, test_limits};
use serde_json::{Value, json};
use std::time::Duration;

const TOKEN: &str = "bench-remote-token";
const ONE_WAY: Duration = Duration::from_millis(20);
const GOAL: f64 = 1.15;

fn main() {
    let quick = std::env::var_os("MCP_REMOTE_QUICK").is_some();
    let (rounds, calls) = if quick { (3, 5) } else { (9, 15) };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");

    let ca = TestCa::new();
    let server = McpServer::start_tls(TOKEN, &ca.cert, &ca.key);
    let relay = Delayed::start(server.port(), ONE_WAY);
    let url = format!("https://localhost:{}/mcp", relay.port);

    let roots = Roots::with_file(&ca.roots).expect("the test authority is a PEM file");
    let w = World::with_limits(Limits {
        roots,
        ..test_limits()
    });
    rt.block_on(w.front(
        "svc",
        "mcp",
        Trust::Byo,
        vec![format!("localhost:{}", relay.port)],
        Some(("mcp-token", TOKEN)),
        vec![("url".into(), url.clone())],
    ))
    .expect("the mcp gatekeeper is added over TLS through the relay");
    w.chat_with("bench", "alice", &[("svc", "SVC")]);

    let serve = McpHttpServe::start_with(
        w.home(),
        "bench",
        "alice",
        &[("GATEHOUSE_TRUST_ROOTS", ca.roots.as_os_str())],
    );
    let mut rows = Vec::new();
    for mode in ["legacy", "auto"] {
        let connect = json!({"http": {"url": serve.url, "token": serve.token}, "mode": mode});
        let mut c = McpClient::connect(&connect).expect("the client connects");
        let step = json!({"bench": {
            "direct": {"http": {"url": url, "token": TOKEN, "ca": ca.roots}, "mode": mode},
            "gated_call": {"call": "SVC__get_item", "arguments": {"id": 1}},
            "direct_call": {"call": "get_item", "arguments": {"id": 1}},
            "rounds": rounds,
            "calls": calls,
        }});
        let what = format!("remote read, {mode} ({})", c.protocol);
        let before = relay.connections();
        rows.push(measure(&what, &c.step(&step)));
        println!(
            "{what}: {} connections through the relay for {} calls",
            relay.connections() - before,
            2 * rounds * calls
        );
    }
    drop(serve);

    println!(
        "\nHTTPS behind a relay adding {} ms each way; {calls} calls per round, {rounds} rounds, alternated",
        ONE_WAY.as_millis()
    );
    println!("\n| measure | gated | direct | ratio | goal ≤ {GOAL}× |");
    println!("|---|---|---|---|---|");
    for (row, ratio) in rows {
        let met = if ratio <= GOAL { "met" } else { "not met" };
        println!("{row} {met} |");
    }
}

/// One table row from the client's timings (medians per call), and the
/// ratio.
fn measure(what: &str, answer: &Value) -> (String, f64) {
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
    let ratio = gated / direct;
    (
        format!(
            "| {what} | {:.1} ms | {:.1} ms | {ratio:.2}× |",
            gated * 1e3,
            direct * 1e3,
        ),
        ratio,
    )
}
