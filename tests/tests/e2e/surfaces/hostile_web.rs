//! The web inbox under hostile clients: a browser that hangs up
//! mid-approve, a SIGTERM during a send, non-members probing chats, forged
//! CSRF tokens, idle and trickling connections, and every error status the
//! API can give documented.

use crate::surfaces::web_api::{Api, PATIENCE, chat_path, people_world, serve, stage_labels};
use gatehouse::store::{ActionState, Trust};
use gatehouse::web;
use gatehouse_e2e::{World, call, cli_command, signal};
use gatehouse_services::tracker::Fault;
use gatehouse_services::warehouse::Warehouse;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use std::io::{BufRead as _, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Wait (without blocking the runtime) until `cond` holds.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < PATIENCE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn state(w: &World, id: i64) -> ActionState {
    w.kernel.inspect().action(id).unwrap().unwrap().state
}

// ----- 2. decisions run to completion -----

#[tokio::test(flavor = "multi_thread")]
async fn a_browser_that_hangs_up_mid_approve_does_not_stop_the_send() {
    let w = people_world(Trust::Byo).await;
    let id = stage_labels(&w, "work", &["slow"]).await[0];
    w.tracker.inject(Fault::Slow(Duration::from_secs(2)), 1);
    let server = serve(&w).await;
    let api = Api::signed_in(&w, &server.url(), "alice").await;

    // A client that sends the approve and hangs up while the send is out.
    let mut stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let request = format!(
        "POST /api/actions/{id}/approve HTTP/1.1\r\nHost: {}\r\nCookie: {}\r\nX-CSRF-Token: {}\r\nContent-Length: 0\r\n\r\n",
        server.addr(),
        api.cookie.as_deref().unwrap(),
        api.csrf.as_deref().unwrap()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    eventually("the service to receive the write", || {
        w.tracker.writes().len() == 1
    })
    .await;
    assert_eq!(state(&w, id), ActionState::Applying);
    drop(stream);

    // The decision finishes anyway: applied, sent once, recorded as alice's.
    eventually("the action to be applied", || {
        state(&w, id) == ActionState::Applied
    })
    .await;
    let a = w.kernel.inspect().action(id).unwrap().unwrap();
    assert_eq!(a.resolved_by.as_deref(), Some("alice"));
    assert_eq!(w.tracker.writes().len(), 1);
    let again = api.act_on(id, "approve").await;
    assert_eq!(again.status, 409, "{}", again.text);
    assert!(again.error().contains("already applied"), "{}", again.text);
    server.stop().await;
    assert_eq!(w.tracker.writes().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_lets_serve_finish_a_send_in_flight() {
    let w = people_world(Trust::Byo).await;
    let id = stage_labels(&w, "work", &["slow"]).await[0];
    w.tracker.inject(Fault::Slow(Duration::from_secs(3)), 1);
    let mut child = cli_command(w.home(), &["serve", "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gatehouse serve starts");
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let base = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("serve prints its address")
        .trim_end_matches('/')
        .to_owned();
    let api = Api::signed_in(&w, &base, "alice").await;
    let path = format!("/api/actions/{id}/approve");
    let approving = tokio::spawn(async move { api.post(&path, json!({})).await });
    eventually("the service to receive the write", || {
        w.tracker.writes().len() == 1
    })
    .await;

    signal(child.id(), "TERM");
    let status = tokio::task::spawn_blocking(move || {
        let status = child.wait().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        (status, err)
    })
    .await
    .unwrap();
    assert!(
        status.0.success(),
        "serve exits 0 after SIGTERM: {status:?}"
    );
    let answer = approving.await.expect("the approve got its answer");
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.json()["outcome"], "applied", "{}", answer.text);
    assert_eq!(state(&w, id), ActionState::Applied);
    assert_eq!(w.tracker.writes().len(), 1);
    // A later start finds nothing interrupted.
    let again = w.reopen();
    assert_eq!(
        again.inspect().action(id).unwrap().unwrap().state,
        ActionState::Applied
    );
}

// ----- 8. what the inbox tells strangers, CSRF, connections -----

#[tokio::test(flavor = "multi_thread")]
async fn opening_a_chat_that_is_not_yours_answers_like_no_such_chat() {
    let w = people_world(Trust::Byo).await;
    // Lock `work` down for real: alice reads owner-only payroll.
    let warehouse = Warehouse::builder()
        .account("wh-owner", &["*"])
        .start()
        .unwrap();
    let credential = ("wh", "wh-owner");
    w.front_service("warehouse", Trust::Byo, warehouse.host(), credential)
        .await;
    w.introduce("work", "alice", &[("warehouse", "WAREHOUSE")]);
    let out = w
        .script(
            "work",
            json!([call("WAREHOUSE", "query", json!({"table": "payroll"}))]),
        )
        .await;
    assert!(out[0].get("done").is_some(), "{}", out[0]);
    assert!(w.kernel.inspect().chat("work").unwrap().unwrap().latched);

    let server = serve(&w).await;
    let bob = Api::signed_in(&w, &server.url(), "bob").await;
    let existing = bob.post(&chat_path("work", "open"), json!({})).await;
    let missing = bob.post("/api/chats/nowork/open", json!({})).await;
    assert_eq!(existing.status, 404, "{}", existing.text);
    assert_eq!(missing.status, existing.status);
    assert_eq!(
        existing.error().replace("work", "CHAT"),
        missing.error().replace("nowork", "CHAT"),
        "the answers differ only by the name asked for"
    );
    assert!(!existing.text.contains("locked"), "{}", existing.text);
    // A made-up share link changes nothing.
    let linked = bob
        .post(&chat_path("work", "open"), json!({"link": "0123abcd"}))
        .await;
    assert_eq!(linked.text, existing.text);
    // Nor does asking the same of the GET routes.
    let got = bob.get("/api/chats/work").await;
    assert_eq!(got.status, 404);
    // The CLI says the same words for both.
    let cli = |chat: &str| {
        let o = cli_command(w.home(), &["--as", "bob", "open", chat])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1));
        String::from_utf8_lossy(&o.stderr).replace(chat, "CHAT")
    };
    assert_eq!(cli("work"), cli("nowork"));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_csrf_token_is_a_secret_of_its_own() {
    let w = people_world(Trust::Byo).await;
    let id = stage_labels(&w, "work", &["x"]).await[0];
    let server = serve(&w).await;
    let mut alice = Api::signed_in(&w, &server.url(), "alice").await;
    let bob = Api::signed_in(&w, &server.url(), "bob").await;
    let cookie = alice.cookie.clone().unwrap();
    let secret = cookie.split_once('=').unwrap().1.to_owned();

    // Nothing derived from the cookie passes, whatever the formula.
    let mut h = Sha256::new();
    h.update(b"gatehouse web csrf v1\0");
    h.update(secret.as_bytes());
    let derived = hex::encode(h.finalize());
    for forged in [
        derived,
        hex::encode(Sha256::digest(secret.as_bytes())),
        secret.clone(),
        bob.csrf.clone().unwrap(),
    ] {
        let a = raw_post(
            &server,
            &cookie,
            &forged,
            &format!("/api/actions/{id}/reject"),
        )
        .await;
        assert_eq!(a.0, 403, "{forged}: {}", a.1);
    }
    assert_eq!(state(&w, id), ActionState::Pending);

    // Each page load gets its own token; both work; sign-out ends them.
    let first = alice.csrf.clone().unwrap();
    let fresh = alice.get("/api/session").await.json()["csrf"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(first, fresh);
    assert!(!fresh.contains(&secret) && !secret.contains(&fresh));
    let ok = raw_post(&server, &cookie, &first, "/api/rules").await;
    assert_ne!(ok.0, 403, "{}", ok.1);
    alice.csrf = Some(fresh.clone());
    let a = alice.act_on(id, "reject").await;
    assert_eq!(a.status, 200, "{}", a.text);
    server.stop().await;
}

/// POST with exactly this cookie and CSRF header (and an empty JSON body).
async fn raw_post(server: &web::Server, cookie: &str, csrf: &str, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\nCookie: {cookie}\r\nX-CSRF-Token: {csrf}\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}",
        server.addr()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(PATIENCE, stream.read_to_string(&mut answer))
        .await
        .expect("an answer in time")
        .unwrap();
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, answer)
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_and_trickling_connections_cannot_hold_the_inbox() {
    let w = World::new();
    let timeout = Duration::from_secs(2);
    let server = crate::surfaces::web_api::serve_with(
        &w,
        web::Config {
            max_connections: 1,
            header_read_timeout: timeout,
            ..web::Config::default()
        },
    )
    .await;
    // A client that starts a request and never finishes its headers.
    let mut idle = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    idle.write_all(b"GET /api/session HTTP/1.1\r\nHost: ")
        .await
        .unwrap();
    let started = Instant::now();
    // A second client, over the cap of one: it waits, and is served only
    // once the first has been cut off by the header-read timeout.
    let mut next = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    next.write_all(
        format!(
            "GET /api/session HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            server.addr()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut answer = String::new();
    tokio::time::timeout(PATIENCE, next.read_to_string(&mut answer))
        .await
        .expect("the second client is served in the end")
        .unwrap();
    let waited = started.elapsed();
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(
        waited >= timeout - Duration::from_millis(300),
        "served after {waited:?}: the cap did not hold"
    );
    // The idle one was closed by the server.
    let mut rest = Vec::new();
    let n = tokio::time::timeout(PATIENCE, idle.read_to_end(&mut rest))
        .await
        .expect("the idle connection is closed")
        .unwrap_or(0);
    assert!(
        !String::from_utf8_lossy(&rest[..n]).contains("200 OK"),
        "{rest:?}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn every_status_the_api_answers_is_documented() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/api/openapi.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let w = people_world(Trust::Byo).await;
    let server = serve(&w).await;
    let api = Api::signed_in(&w, &server.url(), "alice").await;
    // Just over the 2 MiB limit: the server reads all of it before it
    // refuses, so the refusal is never lost to a reset connection.
    let huge = "x".repeat((2 << 20) + 1);
    let mut checked = 0;
    for (p, methods) in doc["paths"].as_object().unwrap() {
        for (m, op) in methods.as_object().unwrap() {
            let method = m.to_uppercase();
            let concrete = p.replace("{id}", "1").replace("{chat}", "work");
            let documented: Vec<u16> = op["responses"]
                .as_object()
                .unwrap()
                .keys()
                .map(|k| k.parse().unwrap())
                .collect();
            let mut answers = vec![
                api.send(&method, &concrete, None, &[("host", "evil.example:80")])
                    .await,
            ];
            assert_eq!(answers[0].status, 421, "{method} {p}: {}", answers[0].text);
            if op.get("requestBody").is_some() {
                for (body, kind) in [
                    (huge.as_str(), "application/json"),
                    ("{}", "text/plain"),
                    (
                        "{\"token\": 7, \"tag\": 7, \"approve\": 7, \"link\": 7}",
                        "application/json",
                    ),
                    ("{not json", "application/json"),
                ] {
                    answers.push(raw(&server, &api, &method, &concrete, body, kind).await);
                }
                let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
                for s in [413, 415, 422] {
                    assert!(statuses.contains(&s), "{method} {p}: {statuses:?}");
                }
            }
            for a in &answers {
                assert!(
                    documented.contains(&a.status),
                    "{method} {p} answered {} ({}), which openapi.json does not list: {documented:?}",
                    a.status,
                    a.text
                );
                a.error();
                checked += 1;
            }
        }
    }
    assert!(checked > 20);
    server.stop().await;
}

/// A request with this exact body and content type, signed in as `api`.
async fn raw(
    server: &web::Server,
    api: &Api,
    method: &str,
    path: &str,
    body: &str,
    kind: &str,
) -> crate::surfaces::web_api::Answer {
    let _ = server;
    let extra = [("content-type", kind)];
    api.send_raw(method, path, body.as_bytes().to_vec(), &extra)
        .await
}
