//! The web inbox and its JSON API: `gatehouse serve` (SPEC R3, L2, U, A).
//!
//! Owns: the HTTP server (bound to 127.0.0.1 only), sign-in with one-time
//! links and sessions (cookie, CSRF, expiry), the JSON API under `/api`
//! (described in `docs/api/openapi.json`), and the page's static assets
//! (HTML, JS and CSS embedded in the binary, no inline script).
//!
//! May not: decide policy, or reach the store or the runtime. Handlers only
//! authenticate and call the kernel's person-scoped API (the inbox, the
//! ledger, [`Kernel::approve`], [`Kernel::reject`], [`Kernel::add_rule`],
//! ...), which applies the one authorization rule (`crate::access`), and
//! render. Every action is shown as its [`crate::inbox::Shown`] prompt, the
//! terminal's sanitised text (R3), and the page inserts it as text, never
//! as HTML.
//!
//! The server works on the same `$GATEHOUSE_HOME` as the CLI: any number of
//! CLI processes may run beside it, and the action store's claim keeps each
//! action to one send whoever approves it (P1).

mod api;
mod assets;
mod session;

use crate::kernel::Kernel;
use anyhow::Context as _;
use axum::Router;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::routing::MethodRouter;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;
use tower_http::set_header::SetResponseHeaderLayer;

/// The port `serve` listens on unless told otherwise.
pub const DEFAULT_PORT: u16 = 8337;
/// How long a one-time sign-in link stays usable.
pub const SIGNIN_TTL: Duration = Duration::from_secs(15 * 60);
/// How long a session lasts after sign-in.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 60 * 60);

/// The page's policy: scripts, styles and requests only from this origin,
/// nothing inline, nothing framed, no plugins, no forms elsewhere.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// How `serve` runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// 0 picks a free port.
    pub port: u16,
    pub session_ttl: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            port: DEFAULT_PORT,
            session_ttl: SESSION_TTL,
        }
    }
}

/// What every handler gets.
#[derive(Clone)]
pub(crate) struct AppState {
    pub kernel: Kernel,
    pub session_ttl_ms: i64,
    /// The port actually bound: only `Host: 127.0.0.1:PORT` and
    /// `localhost:PORT` are answered (a DNS-rebinding page gets nothing).
    pub port: u16,
}

/// A running server. Dropping it stops the server.
pub struct Server {
    addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl Server {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stop accepting, let requests in flight finish (bounded), return.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(Duration::from_secs(5), task)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }

    /// Serve until the server fails (or is stopped from elsewhere).
    pub async fn wait(mut self) -> anyhow::Result<()> {
        match self.task.take() {
            Some(task) => Ok(task.await.context("the web server task panicked")??),
            None => Ok(()),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Bind 127.0.0.1:`config.port` and serve the inbox and API from `kernel`
/// on the current tokio runtime.
pub async fn start(kernel: Kernel, config: Config) -> anyhow::Result<Server> {
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, config.port))
        .await
        .with_context(|| {
            format!(
                "cannot listen on 127.0.0.1:{} (is another server using it? `--port 0` picks a free one)",
                config.port
            )
        })?;
    let addr = listener.local_addr()?;
    let state = AppState {
        kernel,
        session_ttl_ms: i64::try_from(config.session_ttl.as_millis()).unwrap_or(i64::MAX),
        port: addr.port(),
    };
    let app = app(state);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = rx.await;
            })
            .await
    });
    Ok(Server {
        addr,
        shutdown: Some(tx),
        task: Some(task),
    })
}

/// The API's routes, recorded as they are added so that the list the
/// OpenAPI test compares is the router's own, not a copy kept by hand.
pub(crate) struct Routes {
    router: Router<AppState>,
    list: Vec<(Method, &'static str)>,
}

impl Routes {
    fn new() -> Routes {
        Routes {
            router: Router::new(),
            list: Vec::new(),
        }
    }

    fn add(mut self, method: Method, path: &'static str, mr: MethodRouter<AppState>) -> Routes {
        self.list.push((method, path));
        self.router = self.router.route(path, mr);
        self
    }
}

/// Every API route the server answers, as `(METHOD, path)` with OpenAPI's
/// `{param}` syntax (which axum 0.8 shares).
pub fn api_routes() -> Vec<(String, String)> {
    api::routes()
        .list
        .into_iter()
        .map(|(m, p)| (m.as_str().to_owned(), p.to_owned()))
        .collect()
}

fn app(state: AppState) -> Router {
    let api = api::routes().router;
    Router::new()
        .merge(api)
        .merge(assets::routes())
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            only_loopback_hosts,
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::X_FRAME_OPTIONS,
            HeaderValue::from_static("DENY"),
        ))
        // Sign-in links carry their token in the query: never send it on.
        .layer(SetResponseHeaderLayer::overriding(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ))
        .layer(SetResponseHeaderLayer::if_not_present(
            header::CACHE_CONTROL,
            HeaderValue::from_static("no-store"),
        ))
        .with_state(state)
}

/// Answer only requests addressed to this server by a loopback name, so a
/// page on another site that rebinds its DNS name to 127.0.0.1 gets nothing.
async fn only_loopback_hosts(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    let ok = [
        format!("127.0.0.1:{}", state.port),
        format!("localhost:{}", state.port),
    ]
    .iter()
    .any(|h| h == host);
    if !ok {
        return api::ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "this server answers only http://127.0.0.1:{} (got Host {host:?})",
                state.port
            ),
        )
        .into_response_now();
    }
    next.run(req).await
}
