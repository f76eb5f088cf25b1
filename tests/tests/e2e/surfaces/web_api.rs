//! The web inbox's JSON API, over real loopback HTTP, on a real
//! kernel and home, beside real CLI processes on the same home.
//!
//! Also home to the small HTTP client and sign-in helpers the browser tests
//! share.

use gatehouse::store::Trust;
use gatehouse::web::{self, Server};
use gatehouse_e2e::{
    World, add_label, call, cli_command, create_step, pending_id, stderr, stdout, wait_until,
};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::Duration;

/// The API path of `what` under chat `chat`: `/api/chats/CHAT/WHAT`.
pub(crate) fn chat_path(chat: &str, what: &str) -> String {
    format!("/api/chats/{chat}/{what}")
}

/// What the inbox's scripts never use: every way to make text markup or
/// code, so that attacker text on a page stays text.
pub(crate) const MARKUP_SINKS: [&str; 5] = [
    "innerHTML",
    "outerHTML",
    "insertAdjacentHTML",
    "document.write",
    "eval(",
];

/// Generous: the machine is small and shared.
pub(crate) const PATIENCE: Duration = Duration::from_secs(60);

/// Serve `w`'s kernel on an ephemeral 127.0.0.1 port, in this runtime.
pub(crate) async fn serve(w: &World) -> Server {
    serve_with(w, web::Config::default()).await
}

/// [`serve`] with `config`, whatever port it names: a test's server is
/// always on an ephemeral port, so that tests run side by side.
pub(crate) async fn serve_with(w: &World, config: web::Config) -> Server {
    web::start(w.kernel.clone(), web::Config { port: 0, ..config })
        .await
        .expect("the web server starts on 127.0.0.1:0")
}

/// An answer: status, headers and body (parsed as JSON when it is JSON).
pub(crate) struct Answer {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub text: String,
}

impl Answer {
    /// Read a response whole: its status, headers and body as text.
    pub async fn read(res: http::Response<hyper::body::Incoming>) -> Answer {
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let body = res
            .into_body()
            .collect()
            .await
            .expect("the body is read")
            .to_bytes();
        Answer {
            status,
            headers,
            text: String::from_utf8_lossy(&body).into_owned(),
        }
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.text))
    }

    /// The one-line `{"error"}` of a refusal, checked to be one line.
    pub fn error(&self) -> String {
        let v = self.json();
        let e = v["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error field: {}", self.text))
            .to_owned();
        assert!(!e.contains('\n'), "multi-line error: {e}");
        assert_eq!(
            v.as_object().map(|o| o.len()),
            Some(1),
            "an error is only {{\"error\"}}: {}",
            self.text
        );
        e
    }
}

/// A minimal API client: one person's cookie and CSRF token.
pub(crate) struct Api {
    pub base: String,
    pub cookie: Option<String>,
    pub csrf: Option<String>,
    http: HyperClient<HttpConnector, Full<Bytes>>,
}

impl Api {
    pub fn new(base: &str) -> Api {
        Api {
            base: base.to_owned(),
            cookie: None,
            csrf: None,
            http: HyperClient::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// Sign `user` in through the API with a fresh one-time token.
    pub async fn signed_in(w: &World, base: &str, user: &str) -> Api {
        let token = w.signin_token(user);
        let mut api = Api::new(base);
        let a = api.sign_in(&token).await;
        assert_eq!(a.status, 200, "sign-in failed: {}", a.text);
        api
    }

    pub async fn sign_in(&mut self, token: &str) -> Answer {
        let a = self
            .send("POST", "/api/session", Some(json!({ "token": token })), &[])
            .await;
        if a.status == 200 {
            let set = a
                .headers
                .get("set-cookie")
                .and_then(|v| v.to_str().ok())
                .expect("sign-in sets a cookie")
                .to_owned();
            let pair = set.split(';').next().unwrap_or_default().to_owned();
            self.cookie = Some(pair);
            self.csrf = a.json()["csrf"].as_str().map(str::to_owned);
        }
        a
    }

    pub async fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        extra: &[(&str, &str)],
    ) -> Answer {
        let req = self.request(method, path, method != "GET", extra);
        Answer::read(self.exchange(with_json(req, body)).await).await
    }

    /// A request to `path` signed in as this person: their cookie, their
    /// CSRF token where `csrf`, then the `extra` headers.
    fn request(
        &self,
        method: &str,
        path: &str,
        csrf: bool,
        extra: &[(&str, &str)],
    ) -> http::request::Builder {
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if let Some(c) = &self.cookie {
            req = req.header("cookie", c);
        }
        if csrf && let Some(t) = &self.csrf {
            req = req.header("x-csrf-token", t);
        }
        for (k, v) in extra {
            req = req.header(*k, *v);
        }
        req
    }

    /// `req` sent, answered within [`PATIENCE`].
    async fn exchange(
        &self,
        req: http::Request<Full<Bytes>>,
    ) -> http::Response<hyper::body::Incoming> {
        tokio::time::timeout(PATIENCE, self.http.request(req))
            .await
            .expect("the server answers in time")
            .expect("the request reaches the server")
    }

    /// A request with exactly this body; `extra` carries its headers
    /// (content type included). Signed in like [`Api::send`].
    pub async fn send_raw(
        &self,
        method: &str,
        path: &str,
        body: Vec<u8>,
        extra: &[(&str, &str)],
    ) -> Answer {
        let req = self
            .request(method, path, true, extra)
            .body(Full::new(Bytes::from(body)))
            .expect("a well-formed request");
        let res = self.exchange(req).await;
        // A hostile body may make the server cut the answer short: what
        // arrived is the answer.
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let body = res
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        Answer {
            status,
            headers,
            text: String::from_utf8_lossy(&body).into_owned(),
        }
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.send("GET", path, None, &[]).await
    }

    pub async fn post(&self, path: &str, body: Value) -> Answer {
        self.send("POST", path, Some(body), &[]).await
    }

    /// `verb` (approve, reject, revert) action `id`, as its card's button
    /// does: a POST with an empty JSON body.
    pub async fn act_on(&self, id: i64, verb: &str) -> Answer {
        self.post(&format!("/api/actions/{id}/{verb}"), json!({}))
            .await
    }
}

/// `req` with `body` as JSON (and its content type), or with no body.
pub(crate) fn with_json(
    mut req: http::request::Builder,
    body: Option<Value>,
) -> http::Request<Full<Bytes>> {
    let bytes = match body {
        Some(b) => {
            req = req.header("content-type", "application/json");
            Bytes::from(b.to_string())
        }
        None => Bytes::new(),
    };
    req.body(Full::new(bytes)).expect("a well-formed request")
}

/// The standard world with alice (owner of `work`) and bob known.
pub(crate) async fn people_world(trust: Trust) -> World {
    let w = World::standard(trust).await;
    w.users(&["alice", "bob"]);
    w
}

/// Stage addLabel actions on the seeded issues through a real gadget run.
pub(crate) async fn stage_labels(w: &World, chat: &str, labels: &[&str]) -> Vec<i64> {
    let steps: Vec<Value> = labels
        .iter()
        .enumerate()
        .map(|(i, l)| call("ISSUES", "addLabel", json!({"id": 1 + (i % 2), "label": l})))
        .collect();
    let out = w.script(chat, Value::Array(steps)).await;
    out.as_array()
        .expect("a step per call")
        .iter()
        .map(pending_id)
        .collect()
}

fn sql(w: &World, statement: &str) {
    w.sqlite()
        .execute_batch(statement)
        .expect("the statement runs");
}

#[tokio::test(flavor = "multi_thread")]
async fn web_sign_in_is_one_time_sets_a_strict_cookie_and_sessions_expire() {
    let w = people_world(Trust::Byo).await;
    let server = serve(&w).await;
    let base = server.url();

    // The CLI prints the link; an unknown person is refused in one line.
    let o = w.cli(&["token", "create", "alice", "--url", &base]);
    assert!(o.status.success(), "{}", stderr(&o));
    let link = stdout(&o).trim().to_owned();
    let prefix = format!("{base}/signin?token=");
    assert!(link.starts_with(&prefix), "{link}");
    let token = &link[prefix.len()..];
    let o = w.cli(&["token", "create", "mallory"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o).trim_end().lines().count(), 1, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no person named \"mallory\""),
        "{}",
        stderr(&o)
    );

    let anonymous = Api::new(&base);
    let a = anonymous.get("/api/inbox").await;
    assert_eq!(a.status, 401);
    assert!(a.error().contains("not signed in"), "{}", a.text);

    let mut api = Api::new(&base);
    let a = api.sign_in(token).await;
    assert_eq!(a.status, 200, "{}", a.text);
    let cookie = a.headers["set-cookie"].to_str().unwrap().to_owned();
    for attr in ["HttpOnly", "Secure", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(attr), "cookie lacks {attr}: {cookie}");
    }
    let session = api.get("/api/session").await.json();
    assert_eq!(session["user"], "alice");
    assert_eq!(session["csrf"].as_str().map(str::len), Some(64));

    // Only digests are stored: neither the link's token nor the cookie's
    // session secret appears in the database file.
    let secret = api.cookie.clone().unwrap();
    let secret = secret.split_once('=').unwrap().1.to_owned();
    let db = rusqlite::Connection::open(w.home().join("gatehouse.db")).unwrap();
    let stored: Vec<String> = db
        .prepare("SELECT digest FROM web_sessions UNION ALL SELECT digest FROM web_signin_tokens")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(stored.len(), 2);
    assert!(!stored.iter().any(|d| d == token || *d == secret));

    // A link signs in once.
    let a = Api::new(&base).sign_in(token).await;
    assert_eq!(a.status, 401);
    assert!(a.error().contains("already used"), "{}", a.text);

    // State changes need the CSRF header.
    let mut no_csrf = Api::new(&base);
    no_csrf.cookie = api.cookie.clone();
    let a = no_csrf.send("DELETE", "/api/session", None, &[]).await;
    assert_eq!(a.status, 403);
    assert!(a.error().contains("CSRF"), "{}", a.text);

    // An expired session is told as such.
    sql(&w, "UPDATE web_sessions SET expires_at = 1");
    let a = api.get("/api/inbox").await;
    assert_eq!(a.status, 401);
    assert!(a.error().contains("session expired"), "{}", a.text);

    // Sign out ends the session and clears the cookie.
    let api = Api::signed_in(&w, &base, "alice").await;
    let a = api.send("DELETE", "/api/session", None, &[]).await;
    assert_eq!(a.status, 204, "{}", a.text);
    assert!(
        a.headers["set-cookie"]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    assert_eq!(api.get("/api/session").await.status, 401);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn web_inbox_groups_visible_actions_and_shows_the_terminal_prompt() {
    let w = people_world(Trust::Byo).await;
    // bob's own chat, not shared with alice, with an action pending in it.
    w.chat_with("private", "bob", &[("issues", "ISSUES")]);
    let hidden = stage_labels(&w, "private", &["secret"]).await[0];
    let first = stage_labels(&w, "work", &["a", "b"]).await;
    let server = serve(&w).await;
    let api = Api::signed_in(&w, &server.url(), "alice").await;

    let inbox = api.get("/api/inbox").await.json();
    assert_eq!(inbox["user"], "alice");
    let chats = inbox["chats"].as_array().unwrap();
    assert_eq!(chats.len(), 1, "only alice's chat: {inbox}");
    assert_eq!(chats[0]["name"], "work");
    assert_eq!(chats[0]["may_decide"], true);
    assert_eq!(inbox["total"], 2);
    assert_eq!(inbox["next_after"], Value::Null);
    let cards = inbox["cards"].as_array().unwrap();
    let ids: Vec<i64> = cards.iter().map(|a| a["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, first, "oldest first");
    // A card is the kernel's rendering: summary, table, reasons.
    let a = w.kernel.inspect().action(first[0]).unwrap().unwrap();
    let host = w
        .kernel
        .inspect()
        .gatekeeper("issues")
        .unwrap()
        .unwrap()
        .credential_host()
        .map(str::to_owned);
    let pieces = gatehouse::prompt::summary_pieces(&a, host.as_deref());
    assert_eq!(
        cards[0]["summary"],
        gatehouse::prompt::summary_line(&pieces)
    );
    assert!(
        cards[0]["summary"]
            .as_str()
            .unwrap()
            .starts_with("addLabel on issues at 127.0.0.1:"),
        "{}",
        cards[0]
    );
    assert_eq!(cards[0]["gatekeeper_shown"], "issues");
    assert_eq!(cards[0]["args"][0]["name"], "id");
    assert_eq!(cards[0]["args"][1]["name"], "label");
    assert_eq!(cards[0]["args"][1]["value"], "a");
    let held = cards[0]["held"].as_array().unwrap();
    assert!(
        held[0]
            .as_str()
            .unwrap()
            .starts_with("An action: the tool is not declared read-only"),
        "{held:?}"
    );
    assert!(
        held.iter()
            .any(|h| h.as_str().unwrap().contains("key one is missing")),
        "{held:?}"
    );
    assert!(cards[0]["expires_at"].as_i64().unwrap() > cards[0]["created_at"].as_i64().unwrap());
    assert!(
        cards[0].get("prompt").is_none(),
        "summary first: {}",
        cards[0]
    );

    // Paged: one at a time, oldest first, with a cursor.
    let page = api.get("/api/inbox?limit=1").await.json();
    assert_eq!(page["cards"].as_array().unwrap().len(), 1);
    assert_eq!(page["next_after"], first[0]);
    let page = api
        .get(&format!("/api/inbox?limit=1&after={}", first[0]))
        .await
        .json();
    assert_eq!(page["cards"][0]["id"], first[1]);
    assert_eq!(page["next_after"], Value::Null);
    assert_eq!(api.get("/api/inbox?limit=0").await.status, 400);
    assert_eq!(api.get("/api/inbox?limit=501").await.status, 400);
    let work = api.get("/api/inbox?chat=work").await.json();
    assert_eq!(work["total"], 2);
    let private = api.get("/api/inbox?chat=private").await;
    assert_eq!(private.status, 404, "{}", private.text);

    // R3: exactly the text the terminal prints, one request away.
    let shown = w.cli(&["show", &first[0].to_string()]);
    assert!(shown.status.success());
    let one = api.get(&format!("/api/actions/{}", first[0])).await;
    assert_eq!(one.status, 200);
    assert_eq!(one.json()["prompt"], stdout(&shown));
    assert_eq!(one.json()["card"], cards[0]);

    // bob's chat is invisible to alice, and answers like a missing one.
    for path in [
        format!("/api/actions/{hidden}"),
        "/api/chats/private".to_owned(),
        "/api/chats/private/observations".to_owned(),
        "/api/ledger?chat=private".to_owned(),
        "/api/chats/nosuch".to_owned(),
        "/api/actions/999".to_owned(),
    ] {
        let a = api.get(&path).await;
        assert_eq!(a.status, 404, "{path}: {}", a.text);
        a.error();
    }
    let a = api.act_on(hidden, "approve").await;
    assert_eq!(a.status, 404, "{}", a.text);
    let chats: Vec<String> = api
        .get("/api/chats")
        .await
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(chats, ["work"]);
    let ledger = api.get("/api/ledger").await.json();
    assert!(
        ledger
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["chat"] == "work"),
        "{ledger}"
    );
    // bob sees his own.
    let bob = Api::signed_in(&w, &server.url(), "bob").await;
    let a = bob.get(&format!("/api/actions/{hidden}")).await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert!(w.tracker.writes().is_empty(), "nothing was sent");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn web_decisions_record_the_person_and_already_decided_is_a_clear_409() {
    let w = people_world(Trust::Byo).await;
    let ids = stage_labels(&w, "work", &["one", "two"]).await;
    let server = serve(&w).await;
    let api = Api::signed_in(&w, &server.url(), "alice").await;

    // Without the CSRF header nothing is decided and nothing is sent.
    let mut forged = Api::new(&server.url());
    forged.cookie = api.cookie.clone();
    let a = forged.act_on(ids[0], "approve").await;
    assert_eq!(a.status, 403, "{}", a.text);
    assert!(w.tracker.writes().is_empty());

    let a = api.act_on(ids[0], "approve").await;
    assert_eq!(a.status, 200, "{}", a.text);
    let d = a.json();
    assert_eq!(d["outcome"], "applied");
    assert_eq!(d["ok"], true);
    assert!(
        d["line"]
            .as_str()
            .unwrap()
            .starts_with(&format!("#{} applied", ids[0]))
    );
    assert_eq!(w.tracker.writes().len(), 1);

    let a = api.act_on(ids[0], "approve").await;
    assert_eq!(a.status, 409, "{}", a.text);
    assert!(a.error().contains("already applied"), "{}", a.text);

    let a = api.act_on(ids[1], "reject").await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(a.json()["outcome"], "rejected");
    let a = api.act_on(ids[1], "approve").await;
    assert_eq!(a.status, 409);
    assert!(a.error().contains("was rejected"), "{}", a.text);
    assert_eq!(
        w.tracker.writes().len(),
        1,
        "the rejected one was never sent"
    );

    let a = api.post("/api/actions/x/approve", json!({})).await;
    assert_eq!(a.status, 400);
    a.error();

    // resolved-by is the signed-in person, for both decisions.
    for id in &ids {
        let a = w.kernel.inspect().action(*id).unwrap().unwrap();
        assert_eq!(a.resolved_by.as_deref(), Some("alice"), "{a:?}");
    }
    let approved = api.get("/api/ledger?approved_by=alice").await.json();
    let approved: Vec<i64> = approved
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    assert_eq!(approved, [ids[0]]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn web_batch_with_an_action_claimed_by_the_cli_at_the_same_time_sends_it_once() {
    use gatehouse_services::tracker::Fault;
    let w = people_world(Trust::Byo).await;
    let ids = stage_labels(&w, "work", &["x", "y", "z"]).await;
    let server = serve(&w).await;
    let api = Api::signed_in(&w, &server.url(), "alice").await;

    // The CLI, a separate process on the same home, approves the first one;
    // its write lands and then hangs, so the CLI holds the claim.
    w.tracker.inject(Fault::LandThenHang, 1);
    let cli = cli_command(w.home(), &["approve", &ids[0].to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the CLI starts");
    assert!(
        wait_until(PATIENCE, || w.tracker.writes().len() == 1),
        "the CLI's write reached the tracker"
    );

    // The web batch includes the claimed one.
    let a = api
        .post(
            "/api/decisions",
            json!({"approve": [ids[2], ids[0], ids[1]]}),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    let results = a.json()["results"].as_array().unwrap().clone();
    let got: Vec<(i64, String)> = results
        .iter()
        .map(|r| {
            (
                r["id"].as_i64().unwrap(),
                r["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(got[0].0, ids[0], "oldest first: {got:?}");
    assert_eq!(got[0].1, "refused", "{results:?}");
    assert_eq!(results[0]["ok"], false);
    // Refused by the store's state: while the CLI holds the claim, or (on a
    // very slow machine) after its apply failed for good. Never sent again.
    let line = results[0]["line"].as_str().unwrap();
    assert!(
        line.contains("being applied by another approval") || line.contains("never resent"),
        "{results:?}"
    );
    assert_eq!(got[1], (ids[1], "applied".to_owned()));
    assert_eq!(got[2], (ids[2], "applied".to_owned()));

    let out = tokio::task::spawn_blocking(move || cli.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "the CLI's apply hung and failed"
    );
    assert!(stderr(&out).contains("not retryable"), "{}", stderr(&out));

    // Exactly one send per action: three writes, three distinct labels.
    let writes = w.tracker.writes();
    assert_eq!(writes.len(), 3, "{writes:?}");
    let bodies: BTreeSet<String> = writes.iter().map(|r| r.body.clone()).collect();
    assert_eq!(bodies.len(), 3, "{writes:?}");
    for label in ["x", "y", "z"] {
        assert_eq!(
            writes
                .iter()
                .filter(|r| r.body.contains(&format!("\"{label}\"")))
                .count(),
            1,
            "{label} sent once: {writes:?}"
        );
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn web_batch_reports_each_result_and_refuses_a_malformed_batch() {
    let w = people_world(Trust::Byo).await;
    let ids = stage_labels(&w, "work", &["p", "q", "r", "s"]).await;
    let server = serve(&w).await;
    let api = Api::signed_in(&w, &server.url(), "alice").await;
    let a = api.post("/api/decisions", json!({})).await;
    assert_eq!(a.status, 400);
    a.error();
    let a = api
        .post(
            "/api/decisions",
            json!({"approve": [ids[0]], "reject": [ids[0]]}),
        )
        .await;
    assert_eq!(a.status, 400);
    assert!(a.error().contains("both approved and rejected"));
    let a = api
        .send(
            "POST",
            "/api/decisions",
            None,
            &[("content-type", "text/plain")],
        )
        .await;
    assert_eq!(a.status, 415, "{}", a.text);
    a.error();

    // The first write the tracker sees fails with a 500: the world may have
    // changed, so that one is failed and not retryable (P2); the rest go on.
    w.tracker
        .inject(gatehouse_services::tracker::Fault::Status(500), 1);
    let a = api
        .post(
            "/api/decisions",
            json!({"approve": [ids[3], ids[0], ids[2]], "reject": [ids[1], 4242]}),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    let outcomes: Vec<(i64, String, bool)> = a.json()["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["id"].as_i64().unwrap(),
                r["outcome"].as_str().unwrap().to_owned(),
                r["ok"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            (ids[0], "failed".into(), false),
            (ids[1], "rejected".into(), true),
            (ids[2], "applied".into(), true),
            (ids[3], "applied".into(), true),
            (4242, "not-found".into(), false),
        ]
    );
    let results = a.json()["results"].clone();
    assert_eq!(results[0]["retryable"], false, "{results}");
    assert!(
        results[0]["line"]
            .as_str()
            .unwrap()
            .contains("failed (not retryable)"),
        "{results}"
    );
    assert_eq!(results[1]["retryable"], Value::Null);
    assert!(
        results[4]["line"]
            .as_str()
            .unwrap()
            .contains("no action #4242")
    );
    // The refused 500 is not a write that took effect; the two applied are.
    assert_eq!(w.tracker.writes().len(), 2);
    assert!(
        api.get("/api/inbox").await.json()["cards"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn web_ledger_filters_observations_rules_and_the_lockdown_latch() {
    let w = people_world(Trust::Byo).await;
    // triage reads (an observation) and stages two actions.
    let report = w.kernel.operator().run("triage", "work", "").await.unwrap();
    report.output.unwrap();
    let pending = w.kernel.inspect().pending(Some("work")).unwrap();
    assert_eq!(pending.len(), 2);
    let server = serve(&w).await;
    let api = Api::signed_in(&w, &server.url(), "alice").await;

    let obs = api.get(&chat_path("work", "observations")).await.json();
    let obs = obs.as_array().unwrap();
    assert_eq!(obs.len(), 1, "{obs:?}");
    assert_eq!(obs[0]["caller"], "alice");
    assert_eq!(obs[0]["gadget"], "triage");
    assert!(
        obs[0]["summary"]
            .as_str()
            .unwrap()
            .contains("issues:listIssues")
    );
    // The chat's observation set in brief, as the inbox's chips show it:
    // one read through issues, and the sources it touched.
    let sources = obs[0]["sources"].as_array().unwrap().len();
    assert!(sources > 0, "{obs:?}");
    let chat = api.get("/api/chats/work").await.json();
    assert_eq!(chat["observed"]["reads"], 1, "{chat}");
    assert_eq!(chat["observed"]["sources"], sources, "{chat}");
    assert_eq!(chat["observed"]["restricted"], 0, "{chat}");
    assert_eq!(chat["observed"]["gatekeepers"][0]["gatekeeper"], "issues");
    let inbox = api.get("/api/inbox").await.json();
    assert_eq!(inbox["chats"][0]["observed"], chat["observed"], "{inbox}");

    let ids = |v: Value| -> Vec<i64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_i64().unwrap())
            .collect()
    };
    assert_eq!(
        ids(api.get("/api/ledger?server_claims=true").await.json()),
        [obs[0]["id"].as_i64().unwrap()]
    );
    assert_eq!(
        ids(api.get("/api/ledger?observed_by=triage").await.json()).len(),
        1
    );
    assert_eq!(
        ids(api.get("/api/ledger?kind=action&chat=work").await.json()).len(),
        2
    );
    let a = api.get("/api/ledger?kind=bogus").await;
    assert_eq!(a.status, 400);
    a.error();
    let a = api.get("/api/ledger?server_claims=maybe").await;
    assert_eq!(a.status, 400);
    a.error();

    // A rule on a byo gatekeeper: key two only, and the answer says key one
    // is missing and why.
    let a = api
        .post("/api/rules", json!({"tag": "issues:addLabel"}))
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    let r = a.json();
    assert_eq!(r["key_one"], false);
    assert!(r["missing"].as_str().unwrap().contains("not vetted"), "{r}");
    let text = r["explanation"].to_string();
    assert!(
        text.contains("Key two holds") && text.contains("key one is missing"),
        "{r}"
    );
    assert!(r["applied"].as_array().unwrap().is_empty());
    assert!(
        w.tracker.writes().is_empty(),
        "one key alone approves nothing"
    );
    let a = api.post("/api/rules", json!({"tag": "nocolon"})).await;
    assert_eq!(a.status, 400);
    a.error();

    // The drain stops at the first action that needs a person (U2): the
    // createIssue ahead of the addLabel. Reject it.
    let create = pending.iter().find(|a| a.tool == "createIssue").unwrap().id;
    let a = api.act_on(create, "reject").await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert!(w.tracker.writes().is_empty());

    // Vetted: both keys hold now, but the pending addLabel was staged when
    // the gatekeeper was byo. What it would be sent with changed (SPEC
    // P7): a person decides it, on current facts, and the prompt says so.
    let label = pending.iter().find(|a| a.tool == "addLabel").unwrap().id;
    w.kernel
        .operator()
        .set_trust("issues", Trust::Vetted)
        .unwrap();
    let r = api
        .post("/api/rules", json!({"tag": "issues:addLabel"}))
        .await
        .json();
    assert_eq!(r["key_one"], true, "{r}");
    assert!(
        r["explanation"][1]
            .as_str()
            .unwrap()
            .starts_with("Key one holds")
    );
    assert!(r["applied"].as_array().unwrap().is_empty(), "{r}");
    assert!(w.tracker.writes().is_empty());
    let shown = api.get(&format!("/api/actions/{label}")).await.json();
    assert!(
        shown["prompt"]
            .as_str()
            .unwrap()
            .contains("Changed: gatekeeper issues's trust tier changed from byo to vetted"),
        "{shown}"
    );
    let a = api.act_on(label, "approve").await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(w.tracker.writes().len(), 1);
    // Staged under both keys, the next one is auto-approved, recorded as
    // resolved by alice (her rule).
    w.script("work", add_label(1, "auto")).await;
    w.kernel.settle().await;
    assert_eq!(w.tracker.writes().len(), 2);
    let auto = api.get("/api/ledger?auto_approved=true").await.json();
    assert_eq!(auto.as_array().unwrap().len(), 1, "{auto}");
    assert_eq!(auto[0]["resolved_by"], "alice");
    assert_eq!(auto[0]["tool"], "addLabel");
    let rules = api.get("/api/rules").await.json();
    assert_eq!(rules[0]["tag"], "issues:addLabel");

    // The latch shows on the chat and in the inbox (an action staged
    // before the latch still awaits a person there).
    w.script("work", json!([create_step("t")])).await;
    assert_eq!(api.get("/api/chats/work").await.json()["latched"], false);
    w.lock_down("work");
    assert_eq!(api.get("/api/chats/work").await.json()["latched"], true);
    let inbox = api.get("/api/inbox").await.json();
    assert_eq!(inbox["latched_chats"], json!(["work"]));
    assert_eq!(inbox["chats"][0]["latched"], true);
    assert!(
        inbox["cards"][0]["held"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h.as_str().unwrap().contains("locked down")),
        "{inbox}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn web_openapi_lists_exactly_the_routes_the_router_serves() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/api/openapi.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut documented = BTreeSet::new();
    for (p, methods) in doc["paths"].as_object().unwrap() {
        for m in methods.as_object().unwrap().keys() {
            documented.insert((m.to_uppercase(), p.clone()));
        }
    }
    let served: BTreeSet<(String, String)> = web::api_routes().into_iter().collect();
    assert_eq!(
        served, documented,
        "docs/api/openapi.json and the router disagree"
    );

    // And each documented route really is routed: unauthenticated, each
    // answers 401 (or 400/415 for a sign-in's body or name), never the
    // fallback 404; the one that needs no session (which ways to sign in)
    // answers.
    let w = World::new();
    let server = serve(&w).await;
    let api = Api::new(&server.url());
    for (method, p) in &documented {
        let concrete = p.replace("{id}", "1").replace("{chat}", "work");
        let a = api.send(method, &concrete, None, &[]).await;
        if (method.as_str(), p.as_str()) == ("GET", "/api/signin") {
            assert_eq!(a.status, 200, "{method} {concrete}: {}", a.text);
            continue;
        }
        assert!(
            [400, 401, 415].contains(&a.status),
            "{method} {concrete}: {} {}",
            a.status,
            a.text
        );
        a.error();
    }
    let a = api.get("/api/nosuch").await;
    assert_eq!(a.status, 404);
    assert!(a.error().contains("no such API endpoint"));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn web_pages_carry_a_strict_policy_and_answer_only_loopback_names() {
    let w = World::new();
    let server = serve(&w).await;
    assert!(server.addr().ip().is_loopback());
    let api = Api::new(&server.url());
    for (page, script) in [
        ("/", "app.js"),
        ("/signin", "signin.js"),
        ("/account", "signin.js"),
        ("/ledger", "app.js"),
        ("/rules", "app.js"),
        ("/chats/work", "app.js"),
    ] {
        let a = api.get(page).await;
        assert_eq!(a.status, 200, "{page}");
        assert_eq!(
            a.headers["content-security-policy"],
            web::CONTENT_SECURITY_POLICY
        );
        assert_eq!(a.headers["x-content-type-options"], "nosniff");
        assert_eq!(a.headers["referrer-policy"], "no-referrer");
        let html = a.text.to_lowercase();
        // Scripts and styles only as files.
        let scripts = if script == "app.js" { 2 } else { 1 };
        assert_eq!(html.matches("<script").count(), scripts, "{page}");
        assert!(
            html.contains(&format!("<script src=\"/assets/{script}\"")),
            "{page}"
        );
        if script == "app.js" {
            assert!(html.contains("<script src=\"/assets/push.js\""), "{page}");
        }
        assert!(!html.contains("<style") && !html.contains(" style=") && !html.contains(" onload"));
    }
    let csp = web::CONTENT_SECURITY_POLICY;
    assert!(csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"));
    for script in ["/assets/app.js", "/assets/signin.js"] {
        let js = api.get(script).await;
        assert!(
            js.headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/javascript")
        );
        for forbidden in MARKUP_SINKS {
            assert!(!js.text.contains(forbidden), "{script} uses {forbidden}");
        }
    }
    let js = api.get("/assets/app.js").await;
    // The live view is a server-sent events stream: the page never polls.
    assert!(js.text.contains("new EventSource(\"/api/events\")"));
    assert!(
        !js.text.contains("setInterval"),
        "app.js polls with setInterval"
    );
    // Its one timer is the decision batch's wait before sending.
    assert_eq!(
        js.text.matches("setTimeout").count(),
        1,
        "app.js has one timer, the batch's"
    );
    let css = api.get("/assets/app.css").await;
    assert!(
        css.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/css")
    );
    // A rebinding attack's Host is refused.
    let a = api
        .send("GET", "/api/session", None, &[("host", "evil.example:80")])
        .await;
    assert_eq!(a.status, 421);
    a.error();
    server.stop().await;
}

#[test]
fn serve_runs_beside_the_cli_prints_its_url_and_token_create_links_to_it() {
    let w = World::new();
    w.kernel.operator().add_user("alice").unwrap();
    let serve = gatehouse_e2e::Serving::start(cli_command(w.home(), &["serve", "--port", "0"]));
    // With no --url, the link points at the running server.
    let token = serve.token_from(&w.cli(&["token", "create", "alice"]));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut api = Api::new(&serve.url);
        let a = api.sign_in(&token).await;
        assert_eq!(a.status, 200, "{}", a.text);
        assert_eq!(api.get("/api/session").await.json()["user"], "alice");
    });
    // Dropping `serve` stops it.
}

#[tokio::test(flavor = "multi_thread")]
async fn web_open_re_verifies_and_takes_the_account_choice_as_a_parameter() {
    use crate::s_sharing::sharing::{Shared, shared_world};
    let Shared {
        w,
        warehouse: _warehouse,
    } = shared_world(&[]).await;
    let read = w
        .script(
            "salary-board",
            json!([call("WAREHOUSE", "query", json!({"table": "payroll"}))]),
        )
        .await;
    assert!(read[0].get("done").is_some(), "{}", read[0]);
    w.kernel
        .person("alice")
        .share("salary-board", "bob", false)
        .unwrap();
    let server = serve(&w).await;
    let bob = Api::signed_in(&w, &server.url(), "bob").await;

    let a = bob
        .send("POST", "/api/chats/salary-board/open", Some(json!({})), &[])
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    let v = a.json();
    assert_eq!(v["opened"], false);
    let failures = v["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0]["source"], "table:payroll");
    assert_eq!(failures[0]["account"], "bob/analyst");
    assert!(
        failures[0]["line"]
            .as_str()
            .unwrap()
            .contains("account may not read table payroll")
    );
    assert_eq!(v["alternatives"], json!({"wh-prod-7": ["finance"]}));
    assert!(
        w.kernel
            .inspect()
            .observers("salary-board")
            .unwrap()
            .is_empty()
    );

    let a = bob
        .send(
            "POST",
            "/api/chats/salary-board/open",
            Some(json!({"accounts": {"wh-prod-7": "finance"}})),
            &[],
        )
        .await;
    let v = a.json();
    assert_eq!(v["opened"], true, "{v}");
    assert_eq!(v["checked"], 1);
    assert_eq!(v["observers"][0]["account"], "bob/finance");

    // Someone the chat is not shared with: answered exactly like a chat
    // that does not exist (W2).
    let carol = Api::signed_in(&w, &server.url(), "carol").await;
    let a = carol
        .send("POST", "/api/chats/salary-board/open", Some(json!({})), &[])
        .await;
    let missing = carol
        .send(
            "POST",
            "/api/chats/no-such-board/open",
            Some(json!({})),
            &[],
        )
        .await;
    assert_eq!(a.status, 404, "{}", a.text);
    assert_eq!(missing.status, 404, "{}", missing.text);
    assert_eq!(
        a.error().replace("salary-board", "X"),
        missing.error().replace("no-such-board", "X")
    );
    server.stop().await;
}
