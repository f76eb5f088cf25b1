//! The web inbox and its JSON API: `gatehouse serve` (SPEC R3, L2, U, A).
//!
//! Owns: the HTTP server (on 127.0.0.1 unless the operator exposes it
//! further, with TLS or behind a named proxy and under one public URL:
//! `exposure`, `tls`), sign-in (one-time links, passkeys, OpenID Connect:
//! `signin`, `passkey`, `oidc`, rate-limited per client by `ratelimit`) and
//! sessions (cookie, CSRF, expiry), the JSON API under `/api` (described in
//! `docs/api/openapi.json`), and the page's static assets (HTML, JS and CSS
//! embedded in the binary, no inline script).
//!
//! May not: decide policy, or reach the store or the runtime. Handlers only
//! authenticate and call the kernel's person-scoped API (the inbox, the
//! ledger, [`crate::Person::approve`], [`crate::Person::reject`], [`crate::Person::add_rule`],
//! ...), which applies the one authorization rule (`crate::access`), and
//! render. Every action is shown as its [`crate::inbox::Shown`] prompt, the
//! terminal's sanitised text (R3), and the page inserts it as text, never
//! as HTML.
//!
//! The server works on the same `$GATEHOUSE_HOME` as the CLI: any number of
//! CLI processes may run beside it, and the action store's claim keeps each
//! action to one send whoever approves it (P1).
//!
//! A decision runs to completion whatever the client does (P8): each one is
//! a task of its own that the request merely waits for, so a browser that
//! hangs up drops only its wait, never the claim and the send. Stopping the
//! server stops accepting, lets requests and decisions in flight finish
//! (bounded by [`Config::grace`]), and only then returns. Connections are
//! capped and must send their headers within [`Config::header_read_timeout`].

mod accounts;
mod api;
mod assets;
mod events;
pub mod exposure;
mod faces;
mod hooks;
mod oidc;
mod passkey;
mod push;
mod ratelimit;
mod reply;
mod requests;
mod session;
mod signin;
mod tls;

pub use exposure::{Exposure, PublicUrl, TlsFiles, parse_proxy};
pub use ratelimit::SigninRate;

use crate::kernel::Kernel;
use anyhow::Context as _;
use axum::Router;
use axum::http::{HeaderValue, Method, header};
use axum::routing::MethodRouter;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tower_http::set_header::SetResponseHeaderLayer;

/// The port `serve` listens on unless told otherwise.
pub const DEFAULT_PORT: u16 = 8337;
/// How long a one-time sign-in link stays usable.
pub const SIGNIN_TTL: Duration = Duration::from_secs(15 * 60);
/// How long a session lasts after sign-in.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 60 * 60);

/// The page's policy: scripts, styles and requests only from this origin,
/// nothing inline, the page itself never framed, no plugins, no forms
/// elsewhere.
/// Frames may hold only this origin's documents: the only ones that may be
/// framed are gadgets' faces (`faces::FACE_POLICY`), each an opaque origin.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-src 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Faces' calls that run at once; more wait their turn.
const FACE_TURNS: usize = 4;

/// How `serve` runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// 0 picks a free port.
    pub port: u16,
    /// How long a session lasts after sign-in (default [`SESSION_TTL`]).
    pub session_ttl: Duration,
    /// Connections served at once; more wait to be accepted.
    pub max_connections: usize,
    /// How long a connection may take to send a request's headers
    /// (including the wait for the next request on a kept-alive one).
    pub header_read_timeout: Duration,
    /// How long stopping waits for requests and decisions in flight.
    pub grace: Duration,
    /// The notification batch window (`serve --notify-every`).
    pub notify_every: Duration,
    /// Where notices may go: public addresses only unless the operator
    /// allows private ones (`GATEHOUSE_NOTIFY_ALLOW_PRIVATE=1`, read by
    /// `serve`); checked at every send.
    pub notify_destinations: crate::notify::Destinations,
    /// Hook turns (deliveries and schedules) that run at once; a delivery
    /// beyond them is answered 503, to be retried.
    pub hook_turns: usize,
    /// How often the live view, the schedules and the notices look for
    /// what changed.
    pub tick: Duration,
    /// Web Push (`serve --vapid-subject`): off without it.
    pub push: Option<crate::push::Settings>,
    /// Where it listens and under which name (`--bind`, `--tls-cert`,
    /// `--tls-key`, `--trusted-proxy`, `--public-url`); checked by
    /// [`start`] before anything listens.
    pub exposure: Exposure,
    /// Sign-in attempts allowed per client address.
    pub signin_rate: SigninRate,
    /// OpenID Connect sign-in (`--oidc-issuer`, `--oidc-client-id`,
    /// `--oidc-client-secret`), if offered.
    pub oidc: Option<crate::signin::oidc::OidcSettings>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            port: DEFAULT_PORT,
            session_ttl: SESSION_TTL,
            max_connections: 64,
            header_read_timeout: Duration::from_secs(10),
            // Generous: a batch decision sends one action after another,
            // each within the gatekeeper deadline.
            grace: Duration::from_secs(120),
            notify_every: crate::notify::DEFAULT_WINDOW,
            notify_destinations: crate::notify::Destinations::PublicOnly,
            hook_turns: 4,
            tick: Duration::from_millis(500),
            push: None,
            exposure: Exposure::default(),
            signin_rate: SigninRate::default(),
            oidc: None,
        }
    }
}

/// What every handler gets.
#[derive(Clone)]
pub(crate) struct AppState {
    pub kernel: Kernel,
    pub session_ttl_ms: i64,
    /// The names and origins answered (the public URL, else
    /// `127.0.0.1:PORT` and `localhost:PORT`: a DNS-rebinding page gets
    /// nothing), and the proxy believed.
    pub answering: Arc<exposure::Answering>,
    /// Sign-in attempts per client address.
    pub signin_limit: ratelimit::Limiter,
    /// Passkeys for this server's relying party (none where its name
    /// cannot carry them).
    pub passkeys: Option<Arc<crate::signin::passkey::Passkeys>>,
    /// OpenID Connect sign-in, if the operator configured it.
    pub oidc: Option<Arc<crate::signin::oidc::Oidc>>,
    /// Decisions in flight: each holds a read guard; stopping takes the
    /// write guard, so it waits for all of them.
    pub decisions: Arc<tokio::sync::RwLock<()>>,
    /// Hook turns that may run at once (deliveries and schedules).
    pub hook_turns: Arc<tokio::sync::Semaphore>,
    /// Faces' calls (each a turn) that may run at once, so that pages
    /// calling in a loop wait for each other instead of taking the host.
    pub face_turns: Arc<tokio::sync::Semaphore>,
    /// What changed, chat by chat, for the live view (`/api/events`).
    pub changes: tokio::sync::broadcast::Sender<events::Change>,
    /// Live-view streams that may be open at once (each holds a connection).
    pub streams: Arc<tokio::sync::Semaphore>,
    /// Set when the server stops: live-view streams end, so that stopping
    /// never waits for them.
    pub stopping: tokio::sync::watch::Receiver<bool>,
    /// Web Push, if the operator enabled it.
    pub push: Option<Arc<push::Enabled>>,
    /// OAuth account connections in progress (`accounts`).
    pub oauth_flows: Arc<accounts::Flows>,
}

impl AppState {
    /// Run `work` (a decision: claim and send) as a task of its own and
    /// wait for it. If the request is dropped meanwhile (the client hung
    /// up), the work still runs to completion, and a stopping server waits
    /// for it (SPEC P8).
    pub(crate) async fn to_completion<T: Send + 'static>(
        &self,
        work: impl Future<Output = T> + Send + 'static,
    ) -> anyhow::Result<T> {
        let in_flight = self.decisions.clone().read_owned().await;
        let task = tokio::spawn(async move {
            let out = work.await;
            drop(in_flight);
            out
        });
        task.await
            .map_err(|e| anyhow::anyhow!("a decision stopped unexpectedly: {e}"))
    }
}

/// A running server. Dropping it stops accepting at once; [`Server::stop`]
/// also waits for what is in flight.
pub struct Server {
    addr: SocketAddr,
    url: String,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    /// The live view's watcher, the schedules and the notices.
    background: Vec<tokio::task::JoinHandle<()>>,
    stopping: tokio::sync::watch::Sender<bool>,
}

impl Server {
    /// The address actually bound (the port chosen if 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where people reach it, without a trailing slash: the public URL,
    /// else `http://127.0.0.1:PORT` (`https://` when serving TLS).
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// Stop accepting, let requests and decisions in flight finish
    /// (bounded by [`Config::grace`]), then return.
    pub async fn stop(mut self) {
        let _ = self.stopping.send(true);
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take()
            && let Err(e) = task.await
        {
            tracing::warn!(error = %e, "the web server task stopped unexpectedly");
        }
        // The loops beside the server finish what they started (a hook
        // turn, a notice) and stop.
        for t in std::mem::take(&mut self.background) {
            if let Err(e) = t.await {
                tracing::warn!(error = %e, "a background task of the server stopped unexpectedly");
            }
        }
    }

    /// Serve until the server fails (or is stopped from elsewhere).
    pub async fn wait(mut self) -> anyhow::Result<()> {
        self.finished().await
    }

    /// Wait until the server has stopped by itself (it failed); the server
    /// can still be [`Server::stop`]ped after this was dropped unfinished.
    pub async fn finished(&mut self) -> anyhow::Result<()> {
        match self.task.as_mut() {
            Some(task) => {
                let r = task.await.context("the web server task panicked");
                self.task = None;
                Ok(r??)
            }
            None => Ok(()),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stopping.send(true);
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Check the exposure, then bind `config.exposure.bind`:`config.port` and
/// serve the inbox and API from `kernel` on the current tokio runtime.
pub async fn start(kernel: Kernel, config: Config) -> anyhow::Result<Server> {
    config.exposure.check(config.port)?;
    let tls = config
        .exposure
        .tls
        .as_ref()
        .map(tls::acceptor)
        .transpose()?;
    let oidc = match config.oidc.clone() {
        Some(settings) => Some(Arc::new(kernel.oidc(settings).await?)),
        None => None,
    };
    let bind = SocketAddr::new(config.exposure.bind, config.port);
    let listener = tokio::net::TcpListener::bind(bind).await.with_context(|| {
        format!("cannot listen on {bind} (is another server using it? `--port 0` picks a free one)")
    })?;
    let addr = listener.local_addr()?;
    let answering = Arc::new(exposure::Answering::new(&config.exposure, addr.port()));
    let passkeys = passkey::for_server(&kernel, &answering);
    let decisions = Arc::new(tokio::sync::RwLock::new(()));
    let (stopping_tx, stopping) = tokio::sync::watch::channel(false);
    let (changes, _) = tokio::sync::broadcast::channel(256);
    let push = push::enable(&kernel, &config).await?;
    let state = AppState {
        kernel,
        session_ttl_ms: i64::try_from(config.session_ttl.as_millis()).unwrap_or(i64::MAX),
        answering: answering.clone(),
        signin_limit: ratelimit::Limiter::new(config.signin_rate),
        passkeys,
        oidc,
        decisions: decisions.clone(),
        hook_turns: Arc::new(tokio::sync::Semaphore::new(config.hook_turns.max(1))),
        face_turns: Arc::new(tokio::sync::Semaphore::new(FACE_TURNS)),
        changes,
        streams: Arc::new(tokio::sync::Semaphore::new(
            (config.max_connections / 2).max(1),
        )),
        stopping,
        push,
        oauth_flows: Arc::default(),
    };
    // Listening is in place before the server answers: nothing another
    // host does after this is missed by the live view.
    let elsewhere = state.kernel.decided_elsewhere().await;
    let mut background = vec![
        tokio::spawn(events::watch(state.clone(), config.tick, elsewhere)),
        tokio::spawn(hooks::schedules(state.clone(), config.tick)),
        tokio::spawn(notices(
            state.clone(),
            config.notify_every,
            config.notify_destinations,
            config.tick,
        )),
    ];
    background.extend(push::deliveries(&state, &config));
    let app = app(state);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, tls, app, config, decisions, rx));
    Ok(Server {
        addr,
        url: answering.primary().to_owned(),
        shutdown: Some(tx),
        task: Some(task),
        background,
        stopping: stopping_tx,
    })
}

/// Send the notices that are due (docs/operations.md, "Notifications"),
/// every tick, until the server stops. The kernel decides
/// who is told of what ([`Kernel::notify_pass`]).
async fn notices(
    state: AppState,
    window: Duration,
    allowed: crate::notify::Destinations,
    tick: Duration,
) {
    let mut stopping = state.stopping.clone();
    loop {
        if let Err(e) = state.kernel.notify_pass(window, allowed).await {
            tracing::warn!(error = %format!("{e:#}"), "a notification pass failed");
        }
        tokio::select! {
            _ = tokio::time::sleep(tick.max(Duration::from_millis(100))) => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
    }
}

/// Serve `app` on `listener` with the inbox's connection handling (the cap,
/// header timeout and graceful stop of [`Config`]) until `stop` fires: the
/// MCP surface's HTTP transport (`crate::mcp_serve`) listens this way too.
pub(crate) async fn serve_router(
    listener: tokio::net::TcpListener,
    app: Router,
    config: Config,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> std::io::Result<()> {
    let in_flight = Arc::new(tokio::sync::RwLock::new(()));
    serve(listener, None, app, config, in_flight, stop).await
}

/// An accepted connection, set to send each answer at once
/// (`TCP_NODELAY`). Without it, a small answer written after its headers
/// waits for the client's delayed ACK of the first segment (about 40 ms on
/// Linux): every other request on a kept-alive connection stalled so.
fn answer_at_once(
    (stream, peer): (tokio::net::TcpStream, std::net::SocketAddr),
) -> std::io::Result<(tokio::net::TcpStream, std::net::SocketAddr)> {
    stream.set_nodelay(true)?;
    Ok((stream, peer))
}

/// The accept loop: at most `max_connections` at once, each HTTP/1 with a
/// header-read timeout (over TLS when `tls` is given: the handshake runs in
/// the connection's own task, within the same timeout, so a slow client
/// never holds the loop); each request carries its connection's peer
/// address ([`exposure::Peer`]); on `stop`, stop accepting, finish what is
/// in flight.
async fn serve(
    listener: tokio::net::TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    app: Router,
    config: Config,
    decisions: Arc<tokio::sync::RwLock<()>>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let slots = Arc::new(tokio::sync::Semaphore::new(config.max_connections.max(1)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        // Wait for a free slot first: over the cap, connections wait in the
        // listen backlog rather than being served half.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            _ = &mut stop => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted.and_then(answer_at_once) {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: pass, retry.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stop => break,
        };
        let service = hyper_util::service::TowerToHyperService::new(
            tower_http::add_extension::AddExtension::new(app.clone(), exposure::Peer(peer)),
        );
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(config.header_read_timeout);
        let watcher = graceful.watcher();
        let tls = tls.clone();
        let handshake_within = config.header_read_timeout;
        tokio::spawn(async move {
            let ended = match tls {
                None => {
                    watcher
                        .watch(http.serve_connection(TokioIo::new(stream), service))
                        .await
                }
                Some(acceptor) => {
                    match tokio::time::timeout(handshake_within, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            watcher
                                .watch(http.serve_connection(TokioIo::new(tls), service))
                                .await
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(error = %e, %peer, "TLS handshake failed");
                            Ok(())
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            Ok(())
                        }
                    }
                }
            };
            if let Err(e) = ended {
                tracing::debug!(error = %e, "connection ended");
            }
            drop(slot);
        });
    }
    drop(listener);
    let deadline = Instant::now() + config.grace;
    // Requests in flight finish; idle connections close.
    if tokio::time::timeout(config.grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still open after the grace period; stopping anyway");
    }
    // Decisions whose client left are still running: wait for them too.
    let left = deadline.saturating_duration_since(Instant::now());
    if tokio::time::timeout(left, decisions.write()).await.is_err() {
        tracing::warn!(
            "decisions still running after the grace period; stopping anyway (recovery marks them interrupted)"
        );
    }
    Ok(())
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
    push::routes(api_router())
        .list
        .into_iter()
        .map(|(m, p)| (m.as_str().to_owned(), p.to_owned()))
        .collect()
}

/// The whole JSON API: the inbox's, then sign-in's.
fn api_router() -> Routes {
    faces::routes(signin::routes(passkey::routes(api::routes())))
}

fn app(state: AppState) -> Router {
    let api = push::routes(api_router()).router;
    // The inbox's documents and answers: never framed, under its policy.
    let inbox = Router::new()
        .merge(api)
        .merge(hooks::routes())
        .merge(oidc::routes())
        .route(accounts::CALLBACK, axum::routing::get(accounts::callback))
        .merge(signin::pages())
        .merge(assets::routes())
        .layer(SetResponseHeaderLayer::overriding(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::X_FRAME_OPTIONS,
            HeaderValue::from_static("DENY"),
        ));
    // Faces carry their own policy (`faces::FACE_POLICY`), set by the
    // route; any answer without one (an error, a refusal of the guards
    // below) gets the inbox's.
    Router::new()
        .merge(inbox)
        .merge(faces::documents())
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            ratelimit::limit,
        ))
        // Outermost: a request to another name, or a change from another
        // site, goes no further; the rest carry what they are seen as.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            exposure::guard,
        ))
        .layer(SetResponseHeaderLayer::if_not_present(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ))
        .layer(SetResponseHeaderLayer::if_not_present(
            header::X_FRAME_OPTIONS,
            HeaderValue::from_static("DENY"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
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

#[cfg(test)]
mod tests {
    /// Every connection the accept loop serves (the inbox's and `mcp
    /// serve`'s) sends its answers at once: none waits for a delayed ACK.
    #[test]
    fn accepted_connections_answer_at_once() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("a loopback port");
            let addr = listener.local_addr().expect("its address");
            let client = tokio::spawn(tokio::net::TcpStream::connect(addr));
            let accepted = listener.accept().await.expect("a connection");
            assert!(!accepted.0.nodelay().expect("the option"), "off by default");
            let (stream, _) = super::answer_at_once(accepted).expect("set");
            assert!(stream.nodelay().expect("the option"));
            drop(client.await);
        });
    }
}
