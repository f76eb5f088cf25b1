//! Notifications and the live view. `serve` tells the people who
//! may decide an action that it waits (a Slack-compatible webhook per
//! person, batched, the summary line only), and the inbox's live view is a
//! server-sent events stream that tells each person only of chats they may
//! see.

use crate::surfaces::web_api::{Api, PATIENCE, people_world, stage_labels};
use gatehouse::notify::Destinations;
use gatehouse::store::Trust;
use gatehouse_e2e::{stderr, wait_until};
use serde_json::Value;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A loopback webhook receiver: keeps each request's body and when it came.
pub(crate) struct Receiver {
    addr: std::net::SocketAddr,
    got: Arc<Mutex<Vec<(Instant, String, String)>>>,
}

impl Receiver {
    pub(crate) fn start() -> Receiver {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let got = Arc::new(Mutex::new(Vec::new()));
        let log = got.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
                let mut length = 0;
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).is_err() || h.trim().is_empty() {
                        break;
                    }
                    if let Some((k, v)) = h.split_once(':')
                        && k.trim().eq_ignore_ascii_case("content-length")
                    {
                        length = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0u8; length];
                let _ = reader.read_exact(&mut body);
                log.lock().unwrap().push((
                    Instant::now(),
                    path,
                    String::from_utf8_lossy(&body).into_owned(),
                ));
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                );
            }
        });
        Receiver { addr, got }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub(crate) fn got(&self) -> Vec<(Instant, String, String)> {
        self.got.lock().unwrap().clone()
    }
}

/// The CLI on `w`'s home with the operator's allowance of private
/// notification addresses in its environment.
pub(crate) fn allowing_private(w: &gatehouse_e2e::World, args: &[&str]) -> std::process::Output {
    gatehouse_e2e::cli_command(w.home(), args)
        .env(gatehouse::notify::ALLOW_PRIVATE_VAR, "1")
        .output()
        .expect("the cli runs")
}

#[tokio::test(flavor = "multi_thread")]
async fn notices_are_batched_per_person_and_carry_no_argument_text() {
    let w = people_world(Trust::Byo).await;
    let receiver = Receiver::start();
    // Only the person themselves sets where their notices go; plain http
    // only to loopback.
    let o = w.cli(&["user", "set", "bob", "--notify-url", &receiver.url("/bob")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("only bob may set"), "{}", stderr(&o));
    let o = w.cli(&[
        "user",
        "set",
        "alice",
        "--notify-url",
        "http://example.com/x",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("use https"), "{}", stderr(&o));
    // The receiver is on loopback: a private destination, which the
    // operator allows here (where URLs are set and where `serve` runs).
    for (who, path) in [("alice", "/alice"), ("bob", "/bob")] {
        let o = allowing_private(
            &w,
            &[
                "--as",
                who,
                "user",
                "set",
                who,
                "--notify-url",
                &receiver.url(path),
            ],
        );
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let window = Duration::from_secs(3);
    let server = crate::surfaces::web_api::serve_with(
        &w,
        gatehouse::web::Config {
            notify_every: window,
            notify_destinations: Destinations::AlsoPrivate,
            tick: Duration::from_millis(100),
            ..gatehouse::web::Config::default()
        },
    )
    .await;

    // Five actions at once: one notice to alice (she decides in `work`);
    // bob may not decide there and hears nothing.
    const PLANTED: &str = "label-with-secret-text-5f1e";
    let labels: Vec<String> = (0..5).map(|i| format!("{PLANTED}-{i}")).collect();
    let refs: Vec<&str> = labels.iter().map(String::as_str).collect();
    let ids = stage_labels(&w, "work", &refs).await;
    assert!(
        wait_until(PATIENCE, || !receiver.got().is_empty()),
        "a notice came"
    );
    let first = receiver.got();
    assert_eq!(first.len(), 1, "{first:?}");
    let (at, path, body) = &first[0];
    assert_eq!(path, "/alice");
    let v: Value = serde_json::from_str(body).unwrap();
    assert_eq!(v.as_object().unwrap().len(), 1, "Slack-compatible: {body}");
    let text = v["text"].as_str().unwrap();
    assert!(
        text.starts_with("Gatehouse: 5 actions wait for your decision"),
        "{text}"
    );
    for id in &ids {
        assert!(
            text.contains(&format!(
                "Action #{id} waits for a decision: issues:addLabel in chat work"
            )),
            "{text}"
        );
    }
    assert!(!text.contains(PLANTED), "no argument text: {text}");

    // One more, right after: it waits for the next window.
    let late = stage_labels(&w, "work", &["late"]).await[0];
    assert!(wait_until(PATIENCE, || receiver.got().len() >= 2));
    let got = receiver.got();
    assert_eq!(got.len(), 2, "{got:?}");
    let (later, path, body) = &got[1];
    assert_eq!(path, "/alice");
    assert!(
        *later >= *at + window - Duration::from_millis(200),
        "batched: {:?}",
        *later - *at
    );
    let text = serde_json::from_str::<Value>(body).unwrap()["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(text.starts_with("Gatehouse: 1 action waits"), "{text}");
    assert!(text.contains(&format!("Action #{late} ")), "{text}");
    assert!(
        !got.iter().any(|(_, p, _)| p == "/bob"),
        "bob may not decide in work"
    );
    server.stop().await;
}

/// A notification URL leads only to a public address unless the
/// operator allows private ones. Refused when set (a private, loopback,
/// link-local, unique-local, shared or unspecified address, as written or
/// as its name resolves, IPv4 inside IPv6 too); and checked again at every
/// send, so a URL set while the operator allowed private addresses (or
/// whose name now resolves elsewhere) receives nothing once they do not.
#[tokio::test(flavor = "multi_thread")]
async fn notices_go_to_private_addresses_only_where_the_operator_allows() {
    let w = people_world(Trust::Byo).await;
    for url in [
        "https://10.1.2.3/hook",
        "https://169.254.169.254/latest",
        "https://100.64.0.7/x",
        "https://[::ffff:192.168.1.1]/x",
        "https://[fe80::1]/x",
        "https://[fd00::1]/x",
        "https://0.0.0.0/x",
        "https://localhost/x",
        "http://127.0.0.1:9/x",
    ] {
        let o = w.cli(&["user", "set", "alice", "--notify-url", url]);
        assert_eq!(o.status.code(), Some(1), "{url}: {}", stdout_of(&o));
        let e = stderr(&o);
        assert_eq!(e.trim_end().lines().count(), 1, "{url}: one line: {e}");
        assert!(
            e.contains("notices go only to public addresses")
                && e.contains("GATEHOUSE_NOTIFY_ALLOW_PRIVATE=1"),
            "{url}: {e}"
        );
    }
    assert_eq!(
        w.kernel.person("alice").notify_url().unwrap(),
        None,
        "nothing was set"
    );
    // A value of the setting that is neither 1 nor 0 is refused, not guessed.
    let o = gatehouse_e2e::cli_command(
        w.home(),
        &["user", "set", "alice", "--notify-url", "https://10.1.2.3/x"],
    )
    .env(gatehouse::notify::ALLOW_PRIVATE_VAR, "yes")
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("is not 1 or 0"), "{}", stderr(&o));

    // Allowed by the operator, a loopback receiver is taken...
    let receiver = Receiver::start();
    let o = allowing_private(
        &w,
        &["user", "set", "alice", "--notify-url", &receiver.url("/a")],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    stage_labels(&w, "work", &["one"]).await;
    // ...but a `serve` whose operator does not allow private addresses
    // sends it nothing: the check is made again at the send.
    let sent = w
        .kernel
        .notify_pass(Duration::ZERO, Destinations::PublicOnly)
        .await
        .unwrap();
    assert!(sent.is_empty(), "{sent:?}");
    assert!(receiver.got().is_empty(), "{:?}", receiver.got());
    // Where it is allowed, the same notice goes (it was not lost).
    let sent = w
        .kernel
        .notify_pass(Duration::ZERO, Destinations::AlsoPrivate)
        .await
        .unwrap();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(wait_until(PATIENCE, || receiver.got().len() == 1));
}

fn stdout_of(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Read server-sent events from a stream until `want` returns true for one
/// (its `event:` name and `data:`), or `PATIENCE` passes.
pub(crate) async fn read_until(
    body: &mut hyper::body::Incoming,
    buffer: &mut String,
    mut want: impl FnMut(&str, &str) -> bool,
) -> bool {
    use http_body_util::BodyExt as _;
    let start = Instant::now();
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let mut name = "message".to_owned();
            let mut data = String::new();
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event:") {
                    name = n.trim().to_owned();
                } else if let Some(d) = line.strip_prefix("data:") {
                    data.push_str(d.trim());
                }
            }
            if want(&name, &data) {
                return true;
            }
        }
        let left = PATIENCE.saturating_sub(start.elapsed());
        match tokio::time::timeout(left, body.frame()).await {
            Ok(Some(Ok(frame))) => {
                if let Some(d) = frame.data_ref() {
                    buffer.push_str(&String::from_utf8_lossy(d));
                }
            }
            _ => return false,
        }
    }
}

pub(crate) async fn open_stream(api: &Api) -> hyper::Response<hyper::body::Incoming> {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<hyper::body::Bytes>>();
    let req = http::Request::get(format!("{}/api/events", api.base))
        .header("cookie", api.cookie.clone().unwrap())
        .header("accept", "text/event-stream")
        .body(http_body_util::Empty::new())
        .unwrap();
    let res = client.request(req).await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(
        res.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    res
}

#[tokio::test(flavor = "multi_thread")]
async fn live_view_tells_each_person_only_of_chats_they_may_see() {
    let w = people_world(Trust::Byo).await;
    w.chat_with("bobs", "bob", &[("issues", "ISSUES")]);
    let server = crate::surfaces::web_api::serve(&w).await;
    let alice = Api::signed_in(&w, &server.url(), "alice").await;
    let bob = Api::signed_in(&w, &server.url(), "bob").await;
    assert_eq!(Api::new(&server.url()).get("/api/events").await.status, 401);

    let mut a = open_stream(&alice).await.into_body();
    let mut b = open_stream(&bob).await.into_body();
    let (mut abuf, mut bbuf) = (String::new(), String::new());
    assert!(read_until(&mut a, &mut abuf, |n, _| n == "ready").await);
    assert!(read_until(&mut b, &mut bbuf, |n, _| n == "ready").await);

    // A change in alice's chat reaches alice; bob hears of his own chat's
    // change and never of alice's.
    stage_labels(&w, "work", &["seen-by-alice"]).await;
    assert!(
        read_until(&mut a, &mut abuf, |n, d| n == "change"
            && d.contains("\"chat\":\"work\""))
        .await,
        "alice hears of work"
    );
    stage_labels(&w, "bobs", &["bobs-own"]).await;
    let mut chats = Vec::new();
    assert!(
        read_until(&mut b, &mut bbuf, |n, d| {
            if n == "change" {
                chats.push(d.to_owned());
            }
            n == "change" && d.contains("\"chat\":\"bobs\"")
        })
        .await
    );
    assert!(
        chats.iter().all(|d| !d.contains("\"work\"")),
        "bob never hears of work: {chats:?}"
    );

    // Signing out ends the stream with `signed-out`.
    let o = bob.send("DELETE", "/api/session", None, &[]).await;
    assert_eq!(o.status, 204);
    assert!(read_until(&mut b, &mut bbuf, |n, _| n == "signed-out").await);
    server.stop().await;
}
