//! The loopback HTTP server under the demo services (the issue tracker and
//! the warehouse): its thread and tokio runtime, binding `127.0.0.1:0`, the
//! ready signal, a bounded graceful shutdown, and the log of every request
//! received, which tests can wait on.
//!
//! Like the services themselves it imports nothing from the rest of the
//! crate: it is part of the stand-in for the outside world.

use std::future::Future;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::Request;
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tokio::sync::oneshot;

/// How long shutdown waits for requests that are still being answered before
/// it tears the runtime down anyway. Bounded so that dropping a service can
/// never hang a test, whatever its clients are doing.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// One request as a demo service received it, before any decision about it.
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
        self.requests.lock().unwrap_or_else(|e| e.into_inner())
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
pub(crate) async fn receive(
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

/// A running server on `127.0.0.1` (ephemeral port), on its own thread with
/// its own tokio runtime, so it works the same from a plain `#[test]`, from
/// inside `#[tokio::test]` and from the CLI, and a blocked client or test
/// thread cannot starve it. Dropping it stops the server and waits for its
/// thread; the port is released and every connection it holds is closed.
pub(crate) struct Server {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Binds `127.0.0.1:0`, starts serving `app` on a thread named
    /// `demo-<name>-<port>` and returns once it is listening, so the first
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
            .name(format!("demo-{name}-{}", addr.port()))
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
                    "demo {name} thread exited before listening"
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
