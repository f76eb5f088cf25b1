//! The one skeleton under every loopback service (the issue tracker, the
//! warehouse, the cloud): [`Service`], a running server on its own thread
//! and tokio runtime bound to `127.0.0.1:0`, with the ready signal, a
//! bounded graceful shutdown, the log of every request received (which
//! tests read and wait on) and what each service's handler does first
//! (read the body under a cap, log the request, find its bearer token).
//!
//! A service module adds only its own state, its API and its builder: the
//! accessors every service has (`addr`, `host`, `url`, `requests`,
//! `wait_for_requests`, `shutdown`) are written here once.

use std::future::Future;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::ops::Deref;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::Request;
use axum::handler::Handler;
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tokio::sync::oneshot;

/// How long shutdown waits for requests that are still being answered before
/// it tears the runtime down anyway. Bounded so that dropping a service can
/// never hang a test, whatever its clients are doing.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Locks `mutex`. A poisoned lock only means some thread panicked while
/// holding it; the data is still the best record of what happened, and a
/// test fixture must keep answering.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running loopback service whose own state is `S`: the tracker, the
/// warehouse and the cloud are each a `Service` of their state type, with
/// their own methods beside the ones every service has.
///
/// The server runs on its own thread with its own tokio runtime, so it works
/// the same from a plain `#[test]`, from inside `#[tokio::test]` and from the
/// `demo` command, and a blocked client or test thread cannot starve it. It
/// stops when dropped, or explicitly via [`Service::shutdown`]; either way
/// the port is released and every connection it holds is closed.
pub struct Service<S> {
    name: &'static str,
    shared: Arc<Shared<S>>,
    server: Server,
}

/// What a service's handlers and its owner both see: the service's own
/// state (reached through `Deref`) and the log of requests.
pub(crate) struct Shared<S> {
    requests: RequestLog,
    state: S,
}

impl<S> Deref for Shared<S> {
    type Target = S;

    fn deref(&self) -> &S {
        &self.state
    }
}

impl<S> Shared<S> {
    /// Reads `request`, its body up to `max_body` bytes, and logs it. Its
    /// parts, its body and what was logged; or, when the body is unreadable
    /// or over the cap (it is then logged as empty), the 413 to answer.
    pub(crate) async fn receive(
        &self,
        request: Request,
        max_body: usize,
    ) -> Result<(Parts, Bytes, Received), Response> {
        match receive(request, max_body, &self.requests).await {
            (parts, Some(bytes), received) => Ok((parts, bytes, received)),
            (_, None, _) => Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("request body unreadable or larger than {}", size(max_body)),
            )),
        }
    }
}

/// `1 MiB`, `64 KiB`: a body cap as a person reads it.
fn size(bytes: usize) -> String {
    const MIB: usize = 1024 * 1024;
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= 1024 && bytes.is_multiple_of(1024) {
        format!("{} KiB", bytes / 1024)
    } else {
        format!("{bytes} bytes")
    }
}

impl<S: Send + Sync + 'static> Service<S> {
    /// Starts a service named `name` (for its thread and its `Debug`) with
    /// `state`, every request going to `handler`, and returns once it is
    /// listening, so the first request cannot race the start. `settled`
    /// makes the future that says, at shutdown, when nothing is left to
    /// wait for (see [`Server::start`]); most services never park a
    /// handler and pass `std::future::pending()`.
    ///
    /// # Errors
    ///
    /// Whatever binding the loopback port, or building the server's
    /// runtime, fails with; no thread is left behind in that case.
    pub(crate) fn start<H, T, F>(
        name: &'static str,
        state: S,
        handler: H,
        settled: impl FnOnce(Arc<Shared<S>>) -> F,
    ) -> io::Result<Self>
    where
        H: Handler<T, Arc<Shared<S>>>,
        T: 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        let shared = Arc::new(Shared {
            requests: RequestLog::default(),
            state,
        });
        let app = Router::new()
            .fallback(handler)
            .with_state(Arc::clone(&shared));
        let server = Server::start(name, app, settled(Arc::clone(&shared)))?;
        Ok(Service {
            name,
            shared,
            server,
        })
    }
}

impl<S> Service<S> {
    /// The service's own state, as its handlers see it.
    pub(crate) fn state(&self) -> &S {
        &self.shared.state
    }

    /// The socket the service listens on (always `127.0.0.1`, never a
    /// public interface, since it holds test credentials).
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// `"127.0.0.1:PORT"`: the form an allow-list of hosts or a `Host`
    /// header needs.
    pub fn host(&self) -> String {
        self.server.host()
    }

    /// `"http://127.0.0.1:PORT"`: the base URL to hand to a gatekeeper.
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// Every request received so far, in arrival order, including those
    /// refused by authentication, by the body cap or by an injected fault:
    /// tests need to see what was attempted, not only what succeeded (for
    /// example that an access check sent no data request).
    pub fn requests(&self) -> Vec<Received> {
        self.shared.requests.all()
    }

    /// Blocks the calling thread (no async needed) until at least `n`
    /// requests have been received or `timeout` has passed; returns whether
    /// `n` was reached. Lets a test wait for a gatekeeper that works in the
    /// background without sleeping for a guessed duration.
    pub fn wait_for_requests(&self, n: usize, timeout: Duration) -> bool {
        self.shared.requests.wait_for(n, timeout)
    }

    /// Stops the server and waits for its thread. Same as dropping the
    /// service; exists so that a test can say it on purpose. Never hangs
    /// for longer than [`SHUTDOWN_GRACE`], whatever its clients are doing.
    pub fn shutdown(self) {
        drop(self);
    }
}

impl<S> std::fmt::Debug for Service<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(self.name)
            .field("addr", &self.addr())
            .finish_non_exhaustive()
    }
}

/// One request as a service received it, before any decision about it.
///
/// Tests use these to assert what actually left the host: which method and
/// path, which credentials the gatekeeper attached, and the exact bytes.
#[derive(Clone, Debug, Serialize)]
pub struct Received {
    /// The HTTP method, upper case as sent (`"GET"`, `"POST"`, ...).
    pub method: String,
    /// Path including the query string, e.g. `/search?q=crash`.
    pub path: String,
    /// The raw `Authorization` header, if any (lossily decoded), so tests can
    /// check that a secret was or was not attached.
    pub authorization: Option<String>,
    /// The request body, lossily decoded as UTF-8; empty when the body was
    /// over the service's cap or could not be read.
    pub body: String,
    /// The `Idempotency-Key` header, if any (lossily decoded).
    pub idempotency_key: Option<String>,
}

/// Every request a service received, in arrival order.
#[derive(Default)]
pub(crate) struct RequestLog {
    requests: Mutex<Vec<Received>>,
    /// Signalled whenever a request is logged, for [`RequestLog::wait_for`].
    logged: Condvar,
}

impl RequestLog {
    /// Locks the log. A poisoned lock only means a thread panicked while
    /// holding it; the log is still the best record there is.
    fn lock(&self) -> MutexGuard<'_, Vec<Received>> {
        lock(&self.requests)
    }

    fn record(&self, received: Received) {
        self.lock().push(received);
        self.logged.notify_all();
    }

    /// Every request so far.
    pub(crate) fn all(&self) -> Vec<Received> {
        self.lock().clone()
    }

    /// Blocks the calling thread until at least `n` requests have been
    /// logged or `timeout` has passed; returns whether `n` was reached.
    pub(crate) fn wait_for(&self, n: usize, timeout: Duration) -> bool {
        let guard = self.lock();
        let (guard, _) = self
            .logged
            .wait_timeout_while(guard, timeout, |requests| requests.len() < n)
            .unwrap_or_else(|e| e.into_inner());
        guard.len() >= n
    }
}

/// Reads `request`, its body up to `max_body` bytes, and logs it in `log`.
/// Returns its parts, its body (`None` when unreadable or over the cap; it
/// is then logged as empty) and what was logged.
async fn receive(
    request: Request,
    max_body: usize,
    log: &RequestLog,
) -> (Parts, Option<Bytes>, Received) {
    let (parts, body) = request.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map(|pq| pq.as_str().to_owned())
        .unwrap_or_else(|| parts.uri.path().to_owned());
    let authorization = parts
        .headers
        .get(header::AUTHORIZATION)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let idempotency_key = parts
        .headers
        .get("idempotency-key")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let bytes = axum::body::to_bytes(body, max_body).await.ok();
    let received = Received {
        method: parts.method.as_str().to_owned(),
        path,
        authorization,
        body: String::from_utf8_lossy(bytes.as_deref().unwrap_or_default()).into_owned(),
        idempotency_key,
    };
    log.record(received.clone());
    (parts, bytes, received)
}

/// The token of an `Authorization` header: only the `Bearer` scheme
/// (case-insensitive) with a non-empty token.
pub(crate) fn bearer(authorization: Option<&str>) -> Option<&str> {
    let (scheme, token) = authorization?.trim().split_once(' ')?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return None;
    }
    Some(token)
}

/// A JSON error answer: `{"error": "..."}`.
pub(crate) fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(serde_json::json!({ "error": message }))).into_response()
}

/// The answer to a request without a known bearer token.
pub(crate) fn unauthorized() -> Response {
    let mut response = error(StatusCode::UNAUTHORIZED, "missing or unknown bearer token");
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// The server under a [`Service`]: `127.0.0.1` (ephemeral port), its thread
/// and runtime. Dropping it stops the server and waits for its thread.
pub(crate) struct Server {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Binds `127.0.0.1:0`, starts serving `app` on a thread named
    /// `service-<name>-<port>` and returns once it is listening, so the first
    /// request cannot race the start. Works with or without a surrounding
    /// tokio runtime.
    ///
    /// At shutdown the server stops taking connections and waits, at most
    /// [`SHUTDOWN_GRACE`], for the open ones to finish, or until `settled`
    /// (polled only then) completes: a service whose handlers can park
    /// forever says with it when nothing else is left to wait for.
    ///
    /// # Errors
    ///
    /// Whatever binding the loopback port, or building the server's
    /// runtime, fails with; no thread is left behind in that case.
    pub(crate) fn start(
        name: &str,
        app: Router,
        settled: impl Future<Output = ()> + Send + 'static,
    ) -> io::Result<Server> {
        // Bound here, on the caller's thread, so that bind errors surface
        // from `start` and the address is known before the thread runs.
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;

        let (stop_tx, stop_rx) = oneshot::channel();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(format!("service-{name}-{}", addr.port()))
            .spawn(move || serve(listener, app, settled, stop_rx, ready_tx))?;

        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Server {
                addr,
                stop: Some(stop_tx),
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(io::Error::other(format!(
                    "service {name} thread exited before listening"
                )))
            }
        }
    }

    /// The socket the server listens on (always `127.0.0.1`, never a public
    /// interface, since the services hold test credentials).
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `"127.0.0.1:PORT"`.
    pub(crate) fn host(&self) -> String {
        self.addr.to_string()
    }

    /// `"http://127.0.0.1:PORT"`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            // The server may already be gone; nothing to do then.
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Body of the server thread: builds a runtime, serves until told to stop,
/// then tears everything down within [`SHUTDOWN_GRACE`].
fn serve(
    listener: std::net::TcpListener,
    app: Router,
    settled: impl Future<Output = ()>,
    stop: oneshot::Receiver<()>,
    ready: std::sync::mpsc::Sender<io::Result<()>>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(listener) => listener,
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        };
        let (drain_tx, drain_rx) = oneshot::channel::<()>();
        let mut server = tokio::spawn(
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = drain_rx.await;
                })
                .into_future(),
        );
        let _ = ready.send(Ok(()));

        // Either an explicit stop or the `Server` being dropped (sender gone).
        tokio::select! {
            _ = stop => {}
            _ = &mut server => return,
        }
        let _ = drain_tx.send(());

        // Bounded: a client holding a connection open cannot stall shutdown.
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, async {
            tokio::select! {
                _ = &mut server => {}
                _ = settled => {}
            }
        })
        .await;
    });
    // Dropping the runtime cancels every remaining task, closing any
    // connection still open (parked handlers included).
    drop(runtime);
}

/// Hand-written HTTP/1.1 over a blocking `std::net::TcpStream`, for the
/// services' tests: they need no HTTP client crate and prove that the
/// services work from plain `#[test]`s.
#[cfg(test)]
pub(crate) mod testing {
    use std::io::Read;
    use std::net::TcpStream;
    use std::time::Duration;

    /// The start of a request head to `host` with `Connection: close` and,
    /// if given, a bearer `token`; the caller adds headers and the blank line.
    pub(crate) fn head(host: &str, method: &str, path: &str, token: Option<&str>) -> String {
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
        if let Some(token) = token {
            head.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        head
    }

    /// Sends a request with an optional JSON `body` to the service at
    /// `addr` (a bearer `token` if given) and returns the open stream,
    /// for [`response`].
    pub(crate) fn send(
        addr: std::net::SocketAddr,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> TcpStream {
        use std::io::Write as _;
        let mut stream = TcpStream::connect(addr).expect("connect");
        let mut head = head(&addr.to_string(), method, path, token);
        let body = body.unwrap_or("");
        if !body.is_empty() || method != "GET" {
            head.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).expect("write head");
        stream.write_all(body.as_bytes()).expect("write body");
        stream
    }

    /// Reads the whole response from `stream` (within 10 s) as (status, body).
    pub(crate) fn response(stream: &mut TcpStream) -> (u16, String) {
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("set timeout");
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).expect("read response");
        parse(&raw)
    }

    /// A complete raw response as (status, body).
    pub(crate) fn parse(raw: &[u8]) -> (u16, String) {
        let text = String::from_utf8_lossy(raw);
        let (head, body) = text.split_once("\r\n\r\n").expect("complete response");
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("status line");
        (status, body.to_owned())
    }
}
