//! The issue tracker: a small, in-memory HTTP service so that the `demo`
//! command and the end-to-end tests have a real "outside world" for a WASM
//! gatekeeper to talk to.
//!
//! What this module owns: the tracker's in-memory issues, its tokens, the
//! idempotency keys it honours, its webhook, and the faults a test asked it
//! to simulate; the server, its thread and its request log are the shared
//! [`Service`] skeleton's.
//!
//! The API: `GET /issues`, `GET /issues/{id}`, `GET /search?q=`,
//! `POST /issues`, `POST /issues/{id}/labels`, `DELETE
//! /issues/{id}/labels/{label}` (percent-encoded) and `DELETE
//! /issues/{id}`. A write carrying an `Idempotency-Key` header the tracker
//! has seen is answered with the first answer to that key and applied no
//! second time (a different request under a seen key: 422), unless the
//! tracker was built to ignore keys, like a service that does not know
//! them. It is
//! deliberately not a fake or a mock: the gatekeeper reaches it through the
//! same sockets and HTTP stack it would use against a real tracker, so a test
//! that passes against it has exercised the real outbound path.
//!
//! What it may not touch: nothing of the kernel. It imports nothing but the
//! skeleton it shares with the other services (`service`; no policy, no
//! approval queue, no store, no runtime for gadgets) and the kernel must
//! never depend on it to make a decision. It is
//! a stand-in for a third-party service and has to stay on the far side of
//! the boundary the host enforces; if it could reach into the kernel, tests
//! against it would prove nothing about that boundary.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::extract::{Query, Request, State};
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

pub use crate::service::Received;
use crate::service::{self, Service, error, lock};

/// What the tracker's handler sees: its state and the request log.
type Shared = service::Shared<TrackerState>;

/// Largest request body the tracker reads. Anything bigger is answered 413
/// (and still logged, with an empty body), so a runaway client cannot make a
/// test process allocate without bound.
const MAX_BODY: usize = 1024 * 1024;

/// The body of a [`Fault::Garbage`] answer: served as `application/json`
/// but not parseable as JSON, which is the misbehaviour clients have to
/// survive.
const GARBAGE: &str = "<html><body>502 Bad Gateway... just kidding {\"id\":";

/// One issue, as the tracker stores it and as it appears on the wire.
///
/// The JSON field order (`id`, `title`, `body`, `labels`) is the order of the
/// fields here, so tests can compare bodies byte for byte if they need to.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Issue {
    /// Assigned by the tracker: starts at 1 and increases, never reused, so
    /// a test can tell "created once" from "created twice".
    pub id: u64,
    /// Never empty: creating an issue with an empty title is refused (400).
    pub title: String,
    /// Free text; empty when the creator gave none.
    pub body: String,
    /// Distinct labels in the order they were first added.
    pub labels: Vec<String>,
}

/// A misbehaviour the tracker simulates on demand, see [`Tracker::inject`].
///
/// Each variant is a failure a real service can produce and that a
/// gatekeeper must handle without losing or duplicating a write.
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    /// Answer this status (401, 403, 500, ...) with a JSON error body
    /// WITHOUT applying the write: the service refused or failed before
    /// acting. A code outside 100..=999 is answered as 500.
    Status(u16),
    /// APPLY the write, then answer 200 with a body that is not JSON: the
    /// service acted but its answer cannot be understood.
    Garbage,
    /// APPLY the write, then never answer; the connection stays open until
    /// the tracker shuts down. The client cannot know whether the write
    /// landed, which is exactly the case that tempts a blind retry.
    LandThenHang,
    /// APPLY the write, then answer normally only after this long: a slow
    /// service, so that a test can act while a send is in flight.
    Slow(Duration),
}

/// Configuration for a [`Tracker`]; obtained from [`Tracker::builder`].
///
/// A builder (rather than constructor arguments) because tests need
/// different mixes of tokens and seeded issues, and reading
/// `.token("t").issue("crash", &["bug"])` says what the world looks like.
#[derive(Clone, Debug, Default)]
pub struct TrackerBuilder {
    tokens: HashMap<String, Access>,
    seeds: Vec<(String, Vec<String>)>,
    ignore_keys: bool,
}

/// A running tracker on `127.0.0.1` (ephemeral port); see [`Service`] for
/// what every service does. Its [`Service::shutdown`] never hangs for
/// longer than a short grace period, even with connections parked by
/// [`Fault::LandThenHang`].
pub type Tracker = Service<TrackerState>;

/// What a token is allowed to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    ReadWrite,
    ReadOnly,
}

/// Where the tracker tells of new issues, like a real service's webhook
/// setting: a URL and the secret it signs each delivery with.
#[derive(Clone, Debug)]
struct Webhook {
    url: String,
    secret: String,
}

/// One webhook delivery the tracker attempted.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// The delivery's body, as signed and sent.
    pub body: String,
    /// What the receiver answered; `None` when it could not be reached.
    pub status: Option<u16>,
}

/// The tracker's own state, which the server thread and the test thread
/// both see (opaque: reached through [`Tracker`]'s methods).
pub struct TrackerState {
    webhook: Mutex<Option<Webhook>>,
    deliveries: Mutex<Vec<Delivery>>,
    tokens: HashMap<String, Access>,
    /// Whether a write's `Idempotency-Key` is honoured (the default).
    honours_keys: bool,
    state: Mutex<World>,
    /// Handlers currently running, not counting ones parked by
    /// `LandThenHang`; shutdown waits for these to drain.
    in_flight: AtomicUsize,
    /// Handlers parked forever by `LandThenHang`; shutdown does not wait for
    /// these, it closes their connections.
    hanging: AtomicUsize,
    /// While set, every read waits until it says `true` (see
    /// [`Tracker::hold_reads`]).
    read_hold: Mutex<Option<tokio::sync::watch::Receiver<bool>>>,
}

/// Reads held at the tracker (see [`Tracker::hold_reads`]); released when
/// this is released or dropped.
pub struct ReadHold {
    release: tokio::sync::watch::Sender<bool>,
}

impl ReadHold {
    /// Answers the held reads, and every read from now on.
    pub fn release(self) {}
}

impl Drop for ReadHold {
    fn drop(&mut self) {
        self.release.send_replace(true);
    }
}

/// The mutable state, guarded by one mutex so that "take a fault, apply the
/// write, log it" is atomic with respect to other requests.
struct World {
    issues: BTreeMap<u64, Issue>,
    next_id: u64,
    writes: Vec<Received>,
    /// The first request (method, uri, body) and answer under each
    /// idempotency key, kept for the tracker's life.
    keys: HashMap<String, (Fingerprint, Answer)>,
    /// Writes answered from `keys`: repeated keys, applied no second time.
    replays: Vec<Received>,
    /// Pending faults: (fault, how many more writes get it), oldest first.
    faults: VecDeque<(Fault, u32)>,
}

impl Service<TrackerState> {
    /// Starts configuring a tracker. No tokens are accepted until some are
    /// added, so a tracker never answers anonymous requests by accident.
    pub fn builder() -> TrackerBuilder {
        TrackerBuilder::default()
    }

    /// The non-GET requests that got past authentication and were handed to
    /// the tracker's logic, in order: the writes that took effect, or would
    /// have if they had changed anything. Excluded: requests refused by auth
    /// (401/403) or by an injected [`Fault::Status`]. Included: writes under
    /// [`Fault::Garbage`] and [`Fault::LandThenHang`] (they landed), and
    /// writes the logic itself answered 400 or 404 (they reached it; check
    /// [`Tracker::issues`] for the resulting state). This is the list to
    /// count when asserting "the write happened exactly once".
    pub fn writes(&self) -> Vec<Received> {
        self.state().lock().writes.clone()
    }

    /// The current issues, in ascending id order.
    pub fn issues(&self) -> Vec<Issue> {
        self.state().lock().issues.values().cloned().collect()
    }

    /// The writes that carried an `Idempotency-Key` already seen, in
    /// order: answered with the first answer, applied no second time.
    /// Each is also in [`Tracker::requests`], never in [`Tracker::writes`].
    pub fn replays(&self) -> Vec<Received> {
        self.state().lock().replays.clone()
    }

    /// Deletes issue `id` as someone else at the service would (the world
    /// moving on under a pending action); whether it existed.
    pub fn delete_issue(&self, id: u64) -> bool {
        self.state().lock().issues.remove(&id).is_some()
    }

    /// Makes the next `times` authorised write requests (any method but GET)
    /// suffer `fault`. Reads are never affected, so a gatekeeper can still
    /// look around while its writes fail. Requests refused by authentication
    /// do not use up a fault. Faults injected by successive calls queue up
    /// in call order; `times == 0` does nothing.
    pub fn inject(&self, fault: Fault, times: u32) {
        if times > 0 {
            self.state().lock().faults.push_back((fault, times));
        }
    }

    /// From now on, hold every read (GET) unanswered until the returned
    /// hold is released: a test can act while a gatekeeper's read is in
    /// flight, without guessing how long it takes. Each held read is in
    /// [`Tracker::requests`] as it arrives.
    pub fn hold_reads(&self) -> ReadHold {
        let (release, held) = tokio::sync::watch::channel(false);
        *lock(&self.state().read_hold) = Some(held);
        ReadHold { release }
    }

    /// From now on, deliver `{"event": "issueOpened", "delivery": N,
    /// "issue": {...}}` to `url` (plain http, loopback) whenever an issue
    /// is created, signed as `X-Gatehouse-Signature: sha256=HEX` (the
    /// HMAC-SHA256 of the body keyed with `secret`), as a service's webhook
    /// setting would. Each delivery runs beside the create's answer.
    pub fn set_webhook(&self, url: &str, secret: &str) {
        *lock(&self.state().webhook) = Some(Webhook {
            url: url.to_owned(),
            secret: secret.to_owned(),
        });
    }

    /// Every webhook delivery attempted so far, in order.
    pub fn deliveries(&self) -> Vec<Delivery> {
        lock(&self.state().deliveries).clone()
    }
}

impl TrackerBuilder {
    /// Accepts `t` as a bearer token allowed to read and write.
    pub fn token(mut self, t: &str) -> Self {
        self.tokens.insert(t.to_owned(), Access::ReadWrite);
        self
    }

    /// Accepts `t` as a bearer token allowed only to read: writes with it
    /// are answered 403, so tests can check that a gatekeeper forwards the
    /// service's refusal instead of retrying with other credentials.
    pub fn read_only_token(mut self, t: &str) -> Self {
        self.tokens.insert(t.to_owned(), Access::ReadOnly);
        self
    }

    /// A tracker that does not honour `Idempotency-Key` (like many real
    /// services): every write is applied, whatever key it carries.
    pub fn ignore_idempotency_keys(mut self) -> Self {
        self.ignore_keys = true;
        self
    }

    /// Seeds an issue with an empty body; seeds get ids 1, 2, ... in the
    /// order given, so tests know their ids without asking.
    pub fn issue(mut self, title: &str, labels: &[&str]) -> Self {
        self.seeds.push((
            title.to_owned(),
            labels.iter().map(|l| (*l).to_owned()).collect(),
        ));
        self
    }

    /// Binds `127.0.0.1:0`, starts the server on its own thread and runtime,
    /// and returns once it is listening, so the first request cannot race
    /// the start. Works with or without a surrounding tokio runtime.
    ///
    /// # Errors
    ///
    /// Whatever binding the loopback port, or building the server's
    /// runtime, fails with; no thread is left behind in that case.
    pub fn start(self) -> io::Result<Tracker> {
        let mut world = World {
            issues: BTreeMap::new(),
            next_id: 1,
            writes: Vec::new(),
            keys: HashMap::new(),
            replays: Vec::new(),
            faults: VecDeque::new(),
        };
        for (title, labels) in self.seeds {
            let id = world.create(title, String::new());
            if let Some(issue) = world.issues.get_mut(&id) {
                for label in labels {
                    issue.add_label(label);
                }
            }
        }
        let state = TrackerState {
            webhook: Mutex::new(None),
            deliveries: Mutex::new(Vec::new()),
            tokens: self.tokens,
            honours_keys: !self.ignore_keys,
            state: Mutex::new(world),
            in_flight: AtomicUsize::new(0),
            hanging: AtomicUsize::new(0),
            read_hold: Mutex::new(None),
        };
        Service::start("Tracker", state, handle, only_parked_left)
    }
}

/// At shutdown: graceful shutdown finishes once every connection is done,
/// which a connection parked by LandThenHang never is. So also stop once
/// nothing but parked handlers remain (plus a moment to flush the last
/// answers); the server's runtime then closes the parked ones.
async fn only_parked_left(counters: Arc<Shared>) {
    loop {
        if counters.hanging.load(Ordering::SeqCst) > 0
            && counters.in_flight.load(Ordering::SeqCst) == 0
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Holds one unit of a handler counter for the shutdown logic; gives it back
/// on drop, so early returns and cancellation (a client hanging up, the
/// runtime going away) are both accounted for.
struct Counted<'a>(&'a AtomicUsize);

impl<'a> Counted<'a> {
    fn new(counter: &'a AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        Counted(counter)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl TrackerState {
    /// Locks the state (see [`lock`]).
    fn lock(&self) -> MutexGuard<'_, World> {
        lock(&self.state)
    }

    /// What the `Authorization` header grants, if anything. Only the
    /// `Bearer` scheme (case-insensitive) with a known, non-empty token.
    fn access(&self, authorization: Option<&str>) -> Option<Access> {
        self.tokens.get(service::bearer(authorization)?).copied()
    }
}

/// The single handler: all routing is done here so that every request,
/// matched or not, is logged, authenticated and subjected to faults the
/// same way.
async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let busy = Counted::new(&shared.in_flight);
    let (parts, bytes, received) = match shared.receive(request, MAX_BODY).await {
        Ok(received) => received,
        Err(too_large) => return too_large,
    };
    let is_write = parts.method != Method::GET;
    match shared.access(received.authorization.as_deref()) {
        None => return service::unauthorized(),
        Some(Access::ReadOnly) if is_write => {
            return error(StatusCode::FORBIDDEN, "this token may only read");
        }
        Some(_) => {}
    }

    if !is_write {
        let held = lock(&shared.read_hold).clone();
        if let Some(mut held) = held {
            // A dropped hold released it too.
            let _ = held.wait_for(|released| *released).await;
        }
        return shared
            .lock()
            .route(&parts.method, &parts.uri, &bytes)
            .into_response();
    }
    let key = received
        .idempotency_key
        .clone()
        .filter(|_| shared.honours_keys);

    // Taking the fault, applying the write, remembering its key and
    // logging it happen under one lock, so concurrent writes cannot both
    // claim the same fault, nor both apply under the same key.
    let (fault, answer) = {
        let mut world = shared.lock();
        let fingerprint = (
            parts.method.as_str().to_owned(),
            parts.uri.to_string(),
            bytes.to_vec(),
        );
        if let Some(key) = &key
            && let Some(first) = world.keys.get(key)
        {
            // A repeated key: the first answer again, and nothing applied.
            if first.0 != fingerprint {
                return error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "this Idempotency-Key was used for another request",
                );
            }
            let answer = first.1.clone();
            world.replays.push(received);
            return answer.into_response();
        }
        let fault = world.take_fault();
        if let Some(Fault::Status(code)) = fault {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return error(status, "injected fault");
        }
        let answer = world.route(&parts.method, &parts.uri, &bytes);
        if let Some(key) = key {
            world.keys.insert(key, (fingerprint, answer.clone()));
        }
        world.writes.push(received);
        // A created issue is told of to the webhook, if one is set.
        if parts.method == Method::POST
            && parts.uri.path().trim_end_matches('/') == "/issues"
            && answer.status == StatusCode::CREATED
            && let Some(issue) = world.issues.values().next_back().cloned()
        {
            let hook = lock(&shared.webhook).clone();
            if let Some(hook) = hook {
                tokio::spawn(deliver(Arc::clone(&shared), hook, issue));
            }
        }
        (fault, answer)
    };

    match fault {
        Some(Fault::Garbage) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            GARBAGE,
        )
            .into_response(),
        Some(Fault::LandThenHang) => {
            let _parked = Counted::new(&shared.hanging);
            drop(busy);
            // Parked until the runtime is dropped at shutdown, which closes
            // the connection without an answer.
            std::future::pending::<Response>().await
        }
        Some(Fault::Slow(delay)) => {
            tokio::time::sleep(delay).await;
            answer.into_response()
        }
        Some(Fault::Status(_)) | None => answer.into_response(),
    }
}

/// What makes two writes the same request: method, URI and body.
type Fingerprint = (String, String, Vec<u8>);

/// An answer of the tracker's API: a status and its JSON body, kept as
/// they are so that a repeated idempotency key gets the very same answer.
#[derive(Clone, Debug, PartialEq)]
struct Answer {
    status: StatusCode,
    body: String,
}

impl Answer {
    fn json(status: StatusCode, value: &impl Serialize) -> Answer {
        match serde_json::to_string(value) {
            Ok(body) => Answer { status, body },
            Err(_) => Answer::error(StatusCode::INTERNAL_SERVER_ERROR, "cannot write JSON"),
        }
    }

    fn ok(value: &impl Serialize) -> Answer {
        Answer::json(StatusCode::OK, value)
    }

    fn error(status: StatusCode, message: &str) -> Answer {
        Answer {
            status,
            body: serde_json::json!({ "error": message }).to_string(),
        }
    }
}

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        (
            self.status,
            [(header::CONTENT_TYPE, "application/json")],
            self.body,
        )
            .into_response()
    }
}

/// Deliver one `issueOpened` event to `hook`, signed with its secret, and
/// log the attempt. Plain HTTP/1.1 over a loopback socket: the tracker is a
/// stand-in for a service and needs no client library beyond hyper.
async fn deliver(shared: Arc<Shared>, hook: Webhook, issue: Issue) {
    use hmac::{Hmac, Mac as _};
    let n = lock(&shared.deliveries).len() + 1;
    let body =
        serde_json::json!({ "event": "issueOpened", "delivery": n, "issue": issue }).to_string();
    let signature = match Hmac::<sha2::Sha256>::new_from_slice(hook.secret.as_bytes()) {
        Ok(mut mac) => {
            mac.update(body.as_bytes());
            format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
        }
        Err(_) => String::new(),
    };
    let status = post(&hook.url, &body, &signature).await.ok();
    lock(&shared.deliveries).push(Delivery { body, status });
}

/// POST `body` to the plain-http `url` with the signature header; the
/// answer's status.
async fn post(url: &str, body: &str, signature: &str) -> Result<u16, String> {
    use hyper_util::rt::TokioIo;
    let uri: Uri = url.parse().map_err(|e| format!("{e}"))?;
    let authority = uri.authority().ok_or("no host")?.clone();
    let port = authority.port_u16().unwrap_or(80);
    let tcp = tokio::net::TcpStream::connect((authority.host(), port))
        .await
        .map_err(|e| e.to_string())?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| e.to_string())?;
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let path = uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".into());
    let request = axum::http::Request::post(path)
        .header(header::HOST, authority.as_str())
        .header(header::CONTENT_TYPE, "application/json")
        .header("x-gatehouse-signature", signature)
        .body(http_body_util::Full::new(axum::body::Bytes::from(
            body.to_owned(),
        )))
        .map_err(|e| e.to_string())?;
    let answered = tokio::time::timeout(Duration::from_secs(30), sender.send_request(request))
        .await
        .map_err(|_| "no answer in time".to_owned())?
        .map_err(|e| e.to_string())?;
    let status = answered.status().as_u16();
    drop(answered);
    driver.abort();
    Ok(status)
}

#[derive(Deserialize)]
struct NewIssue {
    title: Option<String>,
    body: Option<String>,
}

#[derive(Deserialize)]
struct NewLabel {
    label: Option<String>,
}

impl World {
    fn take_fault(&mut self) -> Option<Fault> {
        let (fault, left) = self.faults.front_mut()?;
        let fault = *fault;
        *left -= 1;
        if *left == 0 {
            self.faults.pop_front();
        }
        Some(fault)
    }

    fn create(&mut self, title: String, body: String) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.issues.insert(
            id,
            Issue {
                id,
                title,
                body,
                labels: Vec::new(),
            },
        );
        id
    }

    /// The API proper, for an authenticated request whose body was read.
    fn route(&mut self, method: &Method, uri: &Uri, body: &[u8]) -> Answer {
        let segments: Vec<&str> = uri.path().trim_start_matches('/').split('/').collect();
        let not_found = || Answer::error(StatusCode::NOT_FOUND, "not found");
        // Unparseable ids simply name no issue.
        let id_of = |s: &str| s.parse::<u64>().ok();

        match (method, segments.as_slice()) {
            (&Method::GET, ["issues"]) => Answer::ok(&self.issues.values().collect::<Vec<_>>()),
            (&Method::GET, ["issues", id]) => match id_of(id).and_then(|id| self.issues.get(&id)) {
                Some(issue) => Answer::ok(issue),
                None => not_found(),
            },
            (&Method::GET, ["search"]) => {
                let Ok(Query(params)) = Query::<HashMap<String, String>>::try_from_uri(uri) else {
                    return Answer::error(StatusCode::BAD_REQUEST, "malformed query string");
                };
                let Some(q) = params.get("q") else {
                    return Answer::error(StatusCode::BAD_REQUEST, "missing query parameter q");
                };
                let q = q.to_lowercase();
                let hits: Vec<&Issue> = self
                    .issues
                    .values()
                    .filter(|issue| issue.title.to_lowercase().contains(&q))
                    .collect();
                Answer::ok(&hits)
            }
            (&Method::POST, ["issues"]) => {
                let Ok(new) = serde_json::from_slice::<NewIssue>(body) else {
                    return Answer::error(
                        StatusCode::BAD_REQUEST,
                        "expected {\"title\": ..., \"body\": ...}",
                    );
                };
                let title = new.title.unwrap_or_default();
                if title.trim().is_empty() {
                    return Answer::error(StatusCode::BAD_REQUEST, "title must not be empty");
                }
                let id = self.create(title, new.body.unwrap_or_default());
                match self.issues.get(&id) {
                    Some(issue) => Answer::json(StatusCode::CREATED, issue),
                    None => Answer::error(StatusCode::INTERNAL_SERVER_ERROR, "issue vanished"),
                }
            }
            (&Method::POST, ["issues", id, "labels"]) => {
                let Some(issue) = id_of(id).and_then(|id| self.issues.get_mut(&id)) else {
                    return not_found();
                };
                let Ok(NewLabel { label: Some(label) }) = serde_json::from_slice::<NewLabel>(body)
                else {
                    return Answer::error(StatusCode::BAD_REQUEST, "expected {\"label\": ...}");
                };
                if label.trim().is_empty() {
                    return Answer::error(StatusCode::BAD_REQUEST, "label must not be empty");
                }
                issue.add_label(label);
                Answer::ok(&*issue)
            }
            (&Method::DELETE, ["issues", id, "labels", label]) => {
                let Some(issue) = id_of(id).and_then(|id| self.issues.get_mut(&id)) else {
                    return not_found();
                };
                let Ok(label) = percent_encoding::percent_decode_str(label).decode_utf8() else {
                    return Answer::error(StatusCode::BAD_REQUEST, "the label is not UTF-8");
                };
                if label.trim().is_empty() {
                    return Answer::error(StatusCode::BAD_REQUEST, "label must not be empty");
                }
                issue.labels.retain(|l| *l != label);
                Answer::ok(&*issue)
            }
            (&Method::DELETE, ["issues", id]) => {
                match id_of(id).and_then(|id| self.issues.remove(&id)) {
                    Some(issue) => Answer::ok(&serde_json::json!({ "deleted": issue.id })),
                    None => not_found(),
                }
            }
            _ => not_found(),
        }
    }
}

impl Issue {
    /// Adds `label` unless present: labelling is idempotent, so a retried
    /// label request is harmless and tests can tell retries from damage.
    fn add_label(&mut self, label: String) {
        if !self.labels.contains(&label) {
            self.labels.push(label);
        }
    }
}

#[cfg(test)]
mod tests {
    //! Talks to the tracker with hand-written HTTP/1.1 over a blocking
    //! `std::net::TcpStream`, so these tests need no HTTP client crate and
    //! double as proof that the tracker works from plain `#[test]`s.

    use super::*;
    use crate::service::SHUTDOWN_GRACE;
    use crate::service::testing::{head, parse, response};
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Instant;

    /// Sends one request with `Connection: close` and returns (status, body).
    fn call(
        t: &Tracker,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> (u16, String) {
        response(&mut send(t, method, path, token, body))
    }

    fn send(
        t: &Tracker,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> TcpStream {
        crate::service::testing::send(t.addr(), method, path, token, body)
    }

    fn json(body: &str) -> serde_json::Value {
        serde_json::from_str(body).expect("JSON body")
    }

    fn wait_for_writes(t: &Tracker, n: usize) -> bool {
        let started = Instant::now();
        while t.writes().len() < n {
            if started.elapsed() > Duration::from_secs(30) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }

    /// A write with an `Idempotency-Key` header; (status, body).
    fn keyed(t: &Tracker, method: &str, path: &str, key: &str, body: &str) -> (u16, String) {
        let mut stream = TcpStream::connect(t.addr()).expect("connect");
        let mut head = head(&t.host(), method, path, Some("rw"));
        head.push_str(&format!(
            "Idempotency-Key: {key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        ));
        stream.write_all(head.as_bytes()).expect("write head");
        stream.write_all(body.as_bytes()).expect("write body");
        response(&mut stream)
    }

    #[test]
    fn remove_label_takes_a_label_away_and_is_idempotent() {
        let t = Tracker::builder()
            .token("rw")
            .issue("Crash", &["bug", "needs info"])
            .start()
            .expect("start");
        let (status, body) = call(
            &t,
            "DELETE",
            "/issues/1/labels/needs%20info",
            Some("rw"),
            None,
        );
        assert_eq!(status, 200, "{body}");
        assert_eq!(json(&body)["labels"], serde_json::json!(["bug"]));
        let (status, body) = call(
            &t,
            "DELETE",
            "/issues/1/labels/needs%20info",
            Some("rw"),
            None,
        );
        assert_eq!(status, 200, "removing an absent label changes nothing");
        assert_eq!(json(&body)["labels"], serde_json::json!(["bug"]));
        assert_eq!(
            call(&t, "DELETE", "/issues/9/labels/bug", Some("rw"), None).0,
            404
        );
        assert_eq!(t.issues()[0].labels, ["bug"]);
    }

    #[test]
    fn a_repeated_idempotency_key_gets_the_first_answer_and_applies_once() {
        let t = tracker();
        let first = keyed(&t, "POST", "/issues", "k-1", r#"{"title":"once"}"#);
        assert_eq!(first.0, 201);
        let again = keyed(&t, "POST", "/issues", "k-1", r#"{"title":"once"}"#);
        assert_eq!(again, first, "the very same answer");
        assert_eq!(t.issues().len(), 3, "one issue created, not two");
        assert_eq!(t.writes().len(), 1);
        assert_eq!(t.replays().len(), 1);
        assert_eq!(t.replays()[0].idempotency_key.as_deref(), Some("k-1"));
        // The same key for another request is refused, and applies nothing.
        let other = keyed(&t, "POST", "/issues", "k-1", r#"{"title":"other"}"#);
        assert_eq!(other.0, 422);
        // A key seen while the first answer is still on its way (a slow
        // service) gets that answer at once.
        t.inject(Fault::Slow(Duration::from_secs(2)), 1);
        let label = r#"{"label":"x"}"#;
        let (a, b) = std::thread::scope(|scope| {
            let first = scope.spawn(|| keyed(&t, "POST", "/issues/1/labels", "k-2", label));
            assert!(wait_for_writes(&t, 2), "the slow write was applied");
            let started = Instant::now();
            let b = keyed(&t, "POST", "/issues/1/labels", "k-2", label);
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "answered at once"
            );
            (first.join().expect("the first write"), b)
        });
        assert_eq!(a, b);
        assert_eq!(t.writes().len(), 2);
        assert_eq!(t.replays().len(), 2);
    }

    #[test]
    fn a_tracker_that_ignores_keys_applies_every_write() {
        let t = Tracker::builder()
            .token("rw")
            .ignore_idempotency_keys()
            .start()
            .expect("start");
        keyed(&t, "POST", "/issues", "k", r#"{"title":"twice"}"#);
        keyed(&t, "POST", "/issues", "k", r#"{"title":"twice"}"#);
        assert_eq!(t.issues().len(), 2);
        assert!(t.replays().is_empty());
    }

    fn tracker() -> Tracker {
        Tracker::builder()
            .token("rw")
            .read_only_token("ro")
            .issue("Crash on start", &["bug"])
            .issue("Dark mode", &[])
            .start()
            .expect("start tracker")
    }

    #[test]
    fn addresses_are_loopback() {
        let t = tracker();
        assert!(t.addr().ip().is_loopback());
        assert_ne!(t.addr().port(), 0);
        assert_eq!(t.host(), format!("127.0.0.1:{}", t.addr().port()));
        assert_eq!(t.url(), format!("http://127.0.0.1:{}", t.addr().port()));
    }

    #[test]
    fn missing_or_unknown_token_is_401_and_logged() {
        let t = tracker();
        let (status, body) = call(&t, "GET", "/issues", None, None);
        assert_eq!(status, 401);
        assert!(json(&body)["error"].is_string());
        assert_eq!(call(&t, "GET", "/issues", Some("nope"), None).0, 401);
        assert_eq!(
            call(
                &t,
                "POST",
                "/issues",
                Some("nope"),
                Some(r#"{"title":"x"}"#)
            )
            .0,
            401
        );
        // Basic auth with a valid-looking secret is not a bearer token.
        let mut s = TcpStream::connect(t.addr()).expect("connect");
        s.write_all(b"GET /issues HTTP/1.1\r\nHost: x\r\nAuthorization: Basic rw\r\nConnection: close\r\n\r\n")
            .expect("write");
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).expect("read");
        assert_eq!(parse(&raw).0, 401);
        // Unknown routes are not revealed to strangers either.
        assert_eq!(call(&t, "GET", "/nowhere", None, None).0, 401);

        let requests = t.requests();
        assert_eq!(requests.len(), 5);
        assert_eq!(requests[0].authorization, None);
        assert_eq!(requests[1].authorization.as_deref(), Some("Bearer nope"));
        assert_eq!(requests[2].body, r#"{"title":"x"}"#);
        assert!(t.writes().is_empty());
        assert_eq!(t.issues().len(), 2);
    }

    #[test]
    fn read_only_token_reads_but_write_is_403() {
        let t = tracker();
        assert_eq!(call(&t, "GET", "/issues", Some("ro"), None).0, 200);
        let (status, body) = call(&t, "POST", "/issues", Some("ro"), Some(r#"{"title":"x"}"#));
        assert_eq!(status, 403);
        assert!(json(&body)["error"].is_string());
        assert_eq!(call(&t, "DELETE", "/issues/1", Some("ro"), None).0, 403);
        assert_eq!(t.issues().len(), 2);
        assert!(t.writes().is_empty());
        assert_eq!(t.requests().len(), 3);
    }

    #[test]
    fn crud() {
        let t = tracker();
        let (status, body) = call(&t, "GET", "/issues", Some("rw"), None);
        assert_eq!(status, 200);
        assert_eq!(
            json(&body),
            serde_json::json!([
                {"id": 1, "title": "Crash on start", "body": "", "labels": ["bug"]},
                {"id": 2, "title": "Dark mode", "body": "", "labels": []},
            ])
        );

        let (status, body) = call(&t, "GET", "/issues/1", Some("rw"), None);
        assert_eq!(status, 200);
        assert_eq!(json(&body)["title"], "Crash on start");
        assert_eq!(call(&t, "GET", "/issues/99", Some("rw"), None).0, 404);
        assert_eq!(call(&t, "GET", "/issues/abc", Some("rw"), None).0, 404);

        let (status, body) = call(
            &t,
            "POST",
            "/issues",
            Some("rw"),
            Some(r#"{"title":"New","body":"details"}"#),
        );
        assert_eq!(status, 201);
        let created: Issue = serde_json::from_str(&body).expect("issue");
        assert_eq!(
            created,
            Issue {
                id: 3,
                title: "New".into(),
                body: "details".into(),
                labels: vec![]
            }
        );
        let (status, body) = call(
            &t,
            "POST",
            "/issues",
            Some("rw"),
            Some(r#"{"title":"No body"}"#),
        );
        assert_eq!(status, 201);
        assert_eq!(json(&body)["id"], 4);
        assert_eq!(json(&body)["body"], "");

        assert_eq!(
            call(
                &t,
                "POST",
                "/issues",
                Some("rw"),
                Some(r#"{"body":"no title"}"#)
            )
            .0,
            400
        );
        assert_eq!(
            call(&t, "POST", "/issues", Some("rw"), Some(r#"{"title":""}"#)).0,
            400
        );
        assert_eq!(
            call(&t, "POST", "/issues", Some("rw"), Some("not json")).0,
            400
        );
        assert_eq!(call(&t, "POST", "/issues", Some("rw"), None).0, 400);

        let (status, body) = call(
            &t,
            "POST",
            "/issues/3/labels",
            Some("rw"),
            Some(r#"{"label":"ui"}"#),
        );
        assert_eq!(status, 200);
        assert_eq!(json(&body)["labels"], serde_json::json!(["ui"]));
        let (status, body) = call(
            &t,
            "POST",
            "/issues/3/labels",
            Some("rw"),
            Some(r#"{"label":"ui"}"#),
        );
        assert_eq!(status, 200, "adding an existing label is a no-op");
        assert_eq!(json(&body)["labels"], serde_json::json!(["ui"]));
        assert_eq!(
            call(
                &t,
                "POST",
                "/issues/99/labels",
                Some("rw"),
                Some(r#"{"label":"ui"}"#)
            )
            .0,
            404
        );
        assert_eq!(
            call(&t, "POST", "/issues/3/labels", Some("rw"), Some(r#"{}"#)).0,
            400
        );

        let (status, body) = call(&t, "DELETE", "/issues/2", Some("rw"), None);
        assert_eq!(status, 200);
        assert_eq!(json(&body), serde_json::json!({"deleted": 2}));
        assert_eq!(call(&t, "DELETE", "/issues/2", Some("rw"), None).0, 404);
        assert_eq!(call(&t, "GET", "/issues/2", Some("rw"), None).0, 404);

        // Ids are never reused.
        let (_, body) = call(
            &t,
            "POST",
            "/issues",
            Some("rw"),
            Some(r#"{"title":"Later"}"#),
        );
        assert_eq!(json(&body)["id"], 5);

        let ids: Vec<u64> = t.issues().iter().map(|i| i.id).collect();
        assert_eq!(ids, vec![1, 3, 4, 5]);
        let (_, body) = call(&t, "GET", "/issues", Some("rw"), None);
        let listed: Vec<Issue> = serde_json::from_str(&body).expect("issues");
        assert_eq!(listed, t.issues());
    }

    #[test]
    fn anything_else_is_404() {
        let t = tracker();
        for (method, path) in [
            ("GET", "/"),
            ("GET", "/issue"),
            ("GET", "/issues/1/labels"),
            ("PUT", "/issues/1"),
            ("PATCH", "/issues/1"),
            ("POST", "/issues/1"),
            ("DELETE", "/issues"),
        ] {
            let (status, body) = call(&t, method, path, Some("rw"), Some("{}"));
            assert_eq!(status, 404, "{method} {path}");
            assert!(json(&body)["error"].is_string());
        }
        assert_eq!(t.issues().len(), 2);
    }

    #[test]
    fn search_is_case_insensitive_on_titles() {
        let t = Tracker::builder()
            .token("rw")
            .issue("Crash on start", &[])
            .issue("Dark mode", &[])
            .issue("crash in settings", &[])
            .start()
            .expect("start");
        let (status, body) = call(&t, "GET", "/search?q=CRASH", Some("rw"), None);
        assert_eq!(status, 200);
        let hits: Vec<Issue> = serde_json::from_str(&body).expect("issues");
        assert_eq!(hits.iter().map(|i| i.id).collect::<Vec<_>>(), vec![1, 3]);

        let (_, body) = call(&t, "GET", "/search?q=dark%20MODE", Some("rw"), None);
        assert_eq!(json(&body).as_array().map(Vec::len), Some(1));
        let (_, body) = call(&t, "GET", "/search?q=on+start", Some("rw"), None);
        assert_eq!(json(&body)[0]["id"], 1);
        let (_, body) = call(&t, "GET", "/search?q=zebra", Some("rw"), None);
        assert_eq!(json(&body), serde_json::json!([]));
        assert_eq!(call(&t, "GET", "/search", Some("rw"), None).0, 400);
        assert_eq!(t.requests()[0].path, "/search?q=CRASH");
    }

    #[test]
    fn writes_lists_only_authorised_non_get_requests() {
        let t = tracker();
        call(&t, "GET", "/issues", Some("rw"), None);
        call(&t, "POST", "/issues", None, Some(r#"{"title":"a"}"#));
        call(&t, "POST", "/issues", Some("ro"), Some(r#"{"title":"b"}"#));
        call(&t, "POST", "/issues", Some("rw"), Some(r#"{"title":"c"}"#));
        call(&t, "DELETE", "/issues/1", Some("rw"), None);
        let writes = t.writes();
        assert_eq!(writes.len(), 2);
        assert_eq!(writes[0].method, "POST");
        assert_eq!(writes[0].body, r#"{"title":"c"}"#);
        assert_eq!(writes[0].authorization.as_deref(), Some("Bearer rw"));
        assert_eq!(writes[1].method, "DELETE");
        assert_eq!(writes[1].path, "/issues/1");
        assert_eq!(t.requests().len(), 5);
    }

    #[test]
    fn status_fault_refuses_writes_without_applying_them_and_spares_reads() {
        let t = tracker();
        t.inject(Fault::Status(500), 2);
        assert_eq!(
            call(&t, "GET", "/issues", Some("rw"), None).0,
            200,
            "reads are never affected"
        );
        // A refused login does not use up a fault.
        assert_eq!(
            call(&t, "POST", "/issues", Some("ro"), Some(r#"{"title":"x"}"#)).0,
            403
        );
        let (status, body) = call(&t, "POST", "/issues", Some("rw"), Some(r#"{"title":"x"}"#));
        assert_eq!(status, 500);
        assert!(json(&body)["error"].is_string());
        assert_eq!(call(&t, "DELETE", "/issues/1", Some("rw"), None).0, 500);
        assert_eq!(t.issues().len(), 2, "nothing applied");
        assert!(t.writes().is_empty());

        let (status, body) = call(&t, "POST", "/issues", Some("rw"), Some(r#"{"title":"x"}"#));
        assert_eq!(status, 201, "faults are used up");
        assert_eq!(json(&body)["id"], 3);
        assert_eq!(t.writes().len(), 1);
        assert_eq!(t.requests().len(), 5);

        // Successive injections queue; odd codes still answer something.
        t.inject(Fault::Status(401), 1);
        t.inject(Fault::Status(0), 1);
        t.inject(Fault::Status(403), 0);
        assert_eq!(call(&t, "DELETE", "/issues/1", Some("rw"), None).0, 401);
        assert_eq!(call(&t, "DELETE", "/issues/1", Some("rw"), None).0, 500);
        assert_eq!(call(&t, "DELETE", "/issues/1", Some("rw"), None).0, 200);
    }

    #[test]
    fn garbage_fault_applies_the_write_then_answers_non_json() {
        let t = tracker();
        t.inject(Fault::Garbage, 1);
        let (status, body) = call(
            &t,
            "POST",
            "/issues",
            Some("rw"),
            Some(r#"{"title":"landed"}"#),
        );
        assert_eq!(status, 200);
        assert!(
            serde_json::from_str::<serde_json::Value>(&body).is_err(),
            "{body}"
        );
        assert_eq!(t.issues().last().map(|i| i.title.as_str()), Some("landed"));
        assert_eq!(t.writes().len(), 1);
        // Next write is normal again.
        assert_eq!(
            call(
                &t,
                "POST",
                "/issues/1/labels",
                Some("rw"),
                Some(r#"{"label":"x"}"#)
            )
            .0,
            200
        );
    }

    #[test]
    fn land_then_hang_applies_the_write_never_answers_and_does_not_block_reads() {
        let t = tracker();
        t.inject(Fault::LandThenHang, 1);
        let mut hung = send(
            &t,
            "POST",
            "/issues",
            Some("rw"),
            Some(r#"{"title":"limbo"}"#),
        );
        hung.set_read_timeout(Some(Duration::from_millis(300)))
            .expect("timeout");
        let mut buf = [0u8; 64];
        match hung.read(&mut buf) {
            Err(e) => assert!(
                matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ),
                "{e}"
            ),
            Ok(n) => panic!("expected no answer, got {n} bytes"),
        }

        // The write landed, and the tracker keeps serving others.
        assert_eq!(t.writes().len(), 1);
        let (status, body) = call(&t, "GET", "/issues/3", Some("rw"), None);
        assert_eq!(status, 200);
        assert_eq!(json(&body)["title"], "limbo");
        assert_eq!(
            call(
                &t,
                "POST",
                "/issues",
                Some("rw"),
                Some(r#"{"title":"after"}"#)
            )
            .0,
            201
        );

        // Shutdown is prompt despite the parked request, and closes it.
        let started = Instant::now();
        t.shutdown();
        assert!(
            started.elapsed() < Duration::from_millis(1500),
            "{:?}",
            started.elapsed()
        );
        hung.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        match hung.read(&mut buf) {
            Ok(n) => assert_eq!(n, 0, "no answer after shutdown either"),
            Err(e) => assert!(
                !matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ),
                "connection should be closed: {e}"
            ),
        }
    }

    #[test]
    fn wait_for_requests_blocks_until_reached_or_times_out() {
        let t = tracker();
        assert!(t.wait_for_requests(0, Duration::ZERO));
        let started = Instant::now();
        assert!(!t.wait_for_requests(1, Duration::from_millis(200)));
        assert!(started.elapsed() >= Duration::from_millis(200));

        let addr = t.addr();
        let client = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            for _ in 0..3 {
                let mut s = TcpStream::connect(addr).expect("connect");
                s.write_all(b"GET /issues HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    .expect("write");
                let mut raw = Vec::new();
                s.read_to_end(&mut raw).expect("read");
            }
        });
        assert!(t.wait_for_requests(3, Duration::from_secs(10)));
        assert!(t.requests().len() >= 3);
        client.join().expect("client");
    }

    #[test]
    fn oversized_body_is_413_and_still_logged() {
        let t = tracker();
        let big = format!(r#"{{"title":"{}"}}"#, "x".repeat(MAX_BODY));
        let (status, _) = call(&t, "POST", "/issues", Some("rw"), Some(&big));
        assert_eq!(status, 413);
        assert_eq!(t.requests().len(), 1);
        assert_eq!(t.requests()[0].body, "");
        assert!(t.writes().is_empty());
        assert_eq!(t.issues().len(), 2);
    }

    #[test]
    fn no_tokens_means_nobody_gets_in() {
        let t = Tracker::builder().start().expect("start");
        assert_eq!(call(&t, "GET", "/issues", Some(""), None).0, 401);
        assert_eq!(call(&t, "GET", "/issues", Some("anything"), None).0, 401);
    }

    #[test]
    fn drop_stops_the_server() {
        let t = tracker();
        let addr = t.addr();
        drop(t);
        assert!(TcpStream::connect(addr).is_err(), "port should be closed");
    }

    #[test]
    fn shutdown_is_prompt_with_idle_and_silent_connections() {
        let t = tracker();
        // A keep-alive connection that got its answer and stays open...
        let mut idle = TcpStream::connect(t.addr()).expect("connect");
        idle.write_all(b"GET /issues HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer rw\r\n\r\n")
            .expect("write");
        let mut buf = [0u8; 4096];
        assert!(idle.read(&mut buf).expect("answer") > 0);
        // ...and one that never says anything.
        let _silent = TcpStream::connect(t.addr()).expect("connect");
        assert!(t.wait_for_requests(1, Duration::from_secs(10)));
        let started = Instant::now();
        t.shutdown();
        assert!(
            started.elapsed() <= SHUTDOWN_GRACE + Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn client_giving_up_on_a_hung_write_is_fine() {
        let t = tracker();
        t.inject(Fault::LandThenHang, 1);
        let hung = send(&t, "POST", "/issues", Some("rw"), Some(r#"{"title":"x"}"#));
        assert!(t.wait_for_requests(1, Duration::from_secs(10)));
        drop(hung);
        assert_eq!(call(&t, "GET", "/issues/3", Some("rw"), None).0, 200);
        let started = Instant::now();
        t.shutdown();
        assert!(started.elapsed() < Duration::from_millis(1500));
    }

    #[tokio::test]
    async fn starts_and_stops_inside_a_current_thread_runtime() {
        let t = tracker();
        let addr = t.addr();
        let status = tokio::task::spawn_blocking(move || {
            let mut s = TcpStream::connect(addr).expect("connect");
            s.write_all(b"GET /issues HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer rw\r\nConnection: close\r\n\r\n")
                .expect("write");
            let mut raw = Vec::new();
            s.read_to_end(&mut raw).expect("read");
            parse(&raw).0
        })
        .await
        .expect("client");
        assert_eq!(status, 200);
        t.shutdown();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn starts_and_drops_inside_a_multi_thread_runtime() {
        let t = tracker();
        t.inject(Fault::LandThenHang, 1);
        let _hung = send(&t, "POST", "/issues", Some("rw"), Some(r#"{"title":"x"}"#));
        assert!(t.wait_for_requests(1, Duration::from_secs(10)));
        assert_eq!(call(&t, "GET", "/issues", Some("rw"), None).0, 200);
        drop(t);
    }
}
