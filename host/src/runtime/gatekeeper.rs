//! Gatekeeper instances: the sandbox a driver runs in, and its one way out.
//!
//! A gatekeeper gets WASI without authority plus `wasi:http` outgoing
//! requests, filtered here: only to the hosts its operator allowed (SPEC C4),
//! with the credential added by the kernel (the component never holds it and
//! may not set `Authorization` itself), and only to the one host the
//! credential is for, never over plain HTTP except to loopback. Every
//! request is written down in a [`Witness`], so that the kernel, not the
//! gatekeeper, decides whether a failed action provably never took effect
//! (P2).
//!
//! Everything a gatekeeper hands back crosses [`Scrub`] before any other
//! part of the kernel sees it: the injected credential is cut out wherever
//! a service echoed it (C4), and texts and lists over their caps are cut or
//! refused with a note (A5). So no caller can forget to.
//!
//! May not touch the store or decide policy: it runs one call and reports.

use super::{Limiter, Limits, explain_trap};
use crate::manifest::{
    Annotations, Manifest, ObserverStrategy, TaskSupport, Tool, Trigger, TriggerKind,
};
use http::HeaderValue;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wasmtime::Store;
use wasmtime::component::{Linker, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView};

// The generated items carry the WIT's own docs; bindgen's glue (the world
// struct, its `Pre`, the linker functions) has none to give, so the lint is
// lifted for the generated module alone, and its items are re-exported here.
#[allow(missing_docs)]
mod bindings {
    wasmtime::component::bindgen!({
        world: "gatekeeper",
        path: "../wit",
        exports: { default: async },
    });
}
pub use bindings::*;

pub use exports::gatehouse::os::tool as wit;

/// What happened to one outgoing request, as the kernel saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sent {
    /// Refused by the kernel before dispatch (host not allowed).
    Denied(String),
    /// Refused by the kernel before dispatch: it would have carried the
    /// credential over plain HTTP to a host that is not loopback.
    Insecure(String),
    /// No connection could be made: nothing reached the service.
    NotConnected,
    /// The service answered with this status.
    Answered(u16),
    /// Sent, but no answer came back: the outcome is unknown.
    NoAnswer,
    /// An MCP session's set-up (`initialize`, `notifications/initialized`,
    /// `tools/list`, `ping`), answered with this 2xx status: the protocol
    /// gives none of these an effect on the service (see `mcp_setup`).
    Setup(u16),
}

/// Everything a gatekeeper tried to send during one call.
#[derive(Clone, Debug, Default)]
pub struct Witness {
    /// Each request the gatekeeper attempted, in order.
    pub sent: Vec<Sent>,
    /// The MCP session its last request carried, if any.
    pub session: Option<super::sessions::HeldSession>,
}

impl Witness {
    /// True when nothing that left could have taken effect: every request
    /// was refused before dispatch, never connected, or answered 401/403.
    pub fn proves_no_effect(&self) -> bool {
        self.sent.iter().all(|s| {
            matches!(
                s,
                Sent::Denied(_)
                    | Sent::Insecure(_)
                    | Sent::NotConnected
                    | Sent::Answered(401)
                    | Sent::Answered(403)
                    | Sent::Setup(_)
            )
        })
    }
}

/// The largest request body the kernel reads to see whether it is an MCP
/// session's set-up; a larger one is never taken for set-up.
const MAX_SETUP_BODY: u64 = 64 * 1024;

/// Whether `body` is one JSON-RPC message whose method only sets up or
/// reads an MCP session: `initialize`, `notifications/initialized`,
/// `tools/list` or `ping`. Such a request, answered 2xx, does not stop a
/// later 401/403 from proving that a tool call took no effect (SPEC M1:
/// the MCP gatekeeper opens a session before every `tools/call`).
///
/// **Decision**: the kernel trusts the method a request names, not what
/// the server did with it; a gatekeeper that sent `initialize` to a
/// service that acts on it anyway could make a failed action look
/// retryable. A retry is still a person's decision, never automatic.
pub fn mcp_setup(body: &[u8]) -> bool {
    let Ok(serde_json::Value::Object(m)) = serde_json::from_slice::<serde_json::Value>(body) else {
        return false;
    };
    m.get("jsonrpc").and_then(|v| v.as_str()) == Some("2.0")
        && matches!(
            m.get("method").and_then(|v| v.as_str()),
            Some("initialize" | "notifications/initialized" | "tools/list" | "ping")
        )
}

/// Whether a request may be an MCP session's set-up, so that the kernel
/// reads its (small, JSON) body before sending it.
fn may_be_setup(request: &http::Request<wasmtime_wasi_http::WasiBody>) -> bool {
    let json = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let small = request
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|n| n <= MAX_SETUP_BODY);
    request.method() == http::Method::POST && json && small
}

/// The kernel's side of a gatekeeper's outgoing HTTP.
struct Egress {
    allowed_hosts: Vec<String>,
    credential: Option<String>,
    /// The one allowed host the credential goes to.
    credential_host: Option<String>,
    witness: Arc<Mutex<Witness>>,
    /// Connections kept from earlier calls, when this call may use them.
    kept: Option<KeptClient>,
    /// Which authorities this call's HTTPS trusts.
    roots: Roots,
    /// The drains of answers on kept connections this call left unread
    /// ([`Drained`]), awaited before the call returns.
    drains: Drains,
}

/// Drains in flight, shared between a call's egress and its end.
type Drains = Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>;

/// The client every request of a gatekeeper leaves through: hyper's, with
/// rustls. Pooling (kept) or not (fresh), it is the one send path.
pub type KeptClient = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    wasmtime_wasi_http::WasiBody,
>;

/// How long a kept connection may wait idle for the next call. Shorter
/// than the keep-alive of common servers (5 s and up), so that a server
/// seldom closes a connection just as a request is written on it.
const KEPT_IDLE: Duration = Duration::from_secs(4);
/// How long making a connection may take, when the guest names no limit.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Which certificate authorities a gatekeeper's HTTPS trusts: Mozilla's
/// (the web PKI, as wasi-http's own sender trusts), plus those an operator
/// added for services behind a private authority (`GATEHOUSE_TRUST_ROOTS`,
/// a PEM file). One configuration for kept and fresh connections alike,
/// so a read and a send to the same service trust the same authorities.
#[derive(Clone)]
pub struct Roots {
    config: Arc<rustls::ClientConfig>,
    /// The client of every request that keeps no connection, made once.
    fresh: KeptClient,
}

impl Roots {
    /// The web PKI only.
    pub fn web() -> Roots {
        // Not influenced by any input: ring offers TLS 1.2 and 1.3, and
        // Mozilla's roots are well formed.
        Roots::of(Vec::new()).expect("the web PKI makes a client configuration")
    }

    /// The web PKI and every certificate in the PEM file at `pem`. A file
    /// that cannot be read or holds no certificate is an error, never a
    /// silent fallback to the web PKI alone.
    pub fn with_file(pem: &std::path::Path) -> anyhow::Result<Roots> {
        use anyhow::Context as _;
        use rustls::pki_types::pem::PemObject as _;
        let bytes = std::fs::read(pem)
            .with_context(|| format!("cannot read the trusted roots file {}", pem.display()))?;
        let certs = rustls::pki_types::CertificateDer::pem_slice_iter(&bytes)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| {
                anyhow::anyhow!(
                    "{} is not a PEM file of certificates ({e}); give one or more -----BEGIN CERTIFICATE----- blocks",
                    pem.display()
                )
            })?;
        if certs.is_empty() {
            anyhow::bail!(
                "{} holds no certificate; give one or more -----BEGIN CERTIFICATE----- blocks",
                pem.display()
            );
        }
        Roots::of(certs)
    }

    fn of(extra: Vec<rustls::pki_types::CertificateDer<'static>>) -> anyhow::Result<Roots> {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        for cert in extra {
            roots
                .add(cert)
                .map_err(|e| anyhow::anyhow!("a trusted root was refused: {e}"))?;
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
        // No ALPN here: the connector names HTTP/1.1 itself.
        let config = Arc::new(config);
        Ok(Roots {
            fresh: client(&config, false),
            config,
        })
    }

    /// A client whose connections wait for the next request (for
    /// [`KEPT_IDLE`]).
    fn keeping(&self) -> KeptClient {
        client(&self.config, true)
    }
}

/// A client trusting `config`; `keep`: its connections wait for the next
/// request (for [`KEPT_IDLE`]), else each request has its own.
fn client(config: &Arc<rustls::ClientConfig>, keep: bool) -> KeptClient {
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(CONNECT_TIMEOUT));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config((**config).clone())
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    let mut b = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new());
    if keep {
        // The timer closes idle connections when their time is up,
        // not only when the next call finds them expired.
        b.pool_timer(hyper_util::rt::TokioTimer::new())
            .pool_idle_timeout(KEPT_IDLE)
            .pool_max_idle_per_host(4);
    } else {
        b.pool_max_idle_per_host(0);
    }
    b.build(https)
}

impl Default for Roots {
    fn default() -> Roots {
        Roots::web()
    }
}

impl std::fmt::Debug for Roots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Roots")
    }
}

/// How long, and how far, the rest of a kept connection's answer is read
/// after the gatekeeper stopped reading it ([`Drained`]).
const DRAIN_TIME: Duration = Duration::from_secs(2);
const DRAIN_BYTES: usize = 64 << 10;

/// The body of an answer on a kept connection. A connection goes back to
/// the pool only once its answer was read to the end, but a gatekeeper
/// may stop at what it awaited: an MCP client stops at the response in a
/// server-sent event stream, which the server ends just after. So what the
/// gatekeeper left unread is read in the background and thrown away, at
/// most [`DRAIN_BYTES`] within [`DRAIN_TIME`]; an answer that goes on
/// longer closes its connection, as before. Nobody sees what is read. The
/// call's next request, and the call's end, wait for its drains, so that
/// the connection is back in the pool when it is wanted.
struct Drained {
    body: Option<wasmtime_wasi_http::WasiBody>,
    ended: bool,
    drains: Drains,
}

impl Drained {
    fn new(body: wasmtime_wasi_http::WasiBody, drains: Drains) -> Drained {
        Drained {
            body: Some(body),
            ended: false,
            drains,
        }
    }
}

impl hyper::body::Body for Drained {
    type Data = bytes::Bytes;
    type Error = wasmtime_wasi_http::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, Self::Error>>> {
        let Some(body) = self.body.as_mut() else {
            return std::task::Poll::Ready(None);
        };
        let polled = std::pin::Pin::new(body).poll_frame(cx);
        if matches!(polled, std::task::Poll::Ready(None | Some(Err(_)))) {
            self.ended = true;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body
            .as_ref()
            .map(|b| b.size_hint())
            .unwrap_or_default()
    }
}

impl Drop for Drained {
    fn drop(&mut self) {
        let Some(mut body) = self.body.take() else {
            return;
        };
        if self.ended || hyper::body::Body::is_end_stream(&body) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let drain = runtime.spawn(async move {
            use http_body_util::BodyExt as _;
            let _ = tokio::time::timeout(DRAIN_TIME, async move {
                let mut read = 0usize;
                while let Some(Ok(frame)) = body.frame().await {
                    read += frame.data_ref().map_or(0, |d| d.len());
                    if read > DRAIN_BYTES {
                        return;
                    }
                }
            })
            .await;
        });
        self.drains
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(drain);
    }
}

/// Connections kept across a gatekeeper's calls, so that a read does not
/// pay a new TCP (and TLS) handshake each time: one pool per gatekeeper
/// and credential, so that a connection never carries one account's
/// requests for another, nor one gatekeeper's for another.
///
/// Only reads use them (see [`Reach::keeping`]): a request written on a
/// kept connection that the server closed at that moment cannot be told
/// apart from one it received, which a read may simply fail, but an
/// approved action's send must not risk (P2: it would fail for good). A
/// send opens a connection of its own, as before.
pub struct Connections {
    roots: Roots,
    clients: Mutex<HashMap<String, KeptClient>>,
}

impl Connections {
    /// No connection kept yet; those made will trust `roots`.
    pub fn new(roots: &Roots) -> Connections {
        Connections {
            roots: roots.clone(),
            clients: Mutex::new(HashMap::new()),
        }
    }

    /// The kept client of `gatekeeper` under `credential`.
    pub fn client(&self, gatekeeper: &str, credential: Option<&str>) -> anyhow::Result<KeptClient> {
        use sha2::Digest as _;
        let account = credential
            .map(|c| hex::encode(sha2::Sha256::digest(c.as_bytes())))
            .unwrap_or_default();
        let key = format!("{gatekeeper}\n{account}");
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = clients.get(&key) {
            return Ok(c.clone());
        }
        let client = self.roots.keeping();
        clients.insert(key, client.clone());
        Ok(client)
    }
}

/// Whether `host` (as in a URL's authority, brackets and all) is the loopback
/// interface: plain HTTP to it never leaves the machine.
pub fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Whether the allowed-host entry `entry` admits a request to `host` on
/// `port` with `scheme`. **Decision** (C4): an entry with a port admits that
/// port; an entry without one admits only HTTPS on 443, never plain HTTP on
/// 80, so naming a host can never send anything (a credential least of all)
/// in clear text by default.
fn admits(entry: &str, host: &str, port: u16, scheme: Option<&str>) -> bool {
    let entry = entry.to_ascii_lowercase();
    match entry.parse::<http::uri::Authority>() {
        Ok(a) => match a.port_u16() {
            Some(p) => a.host() == host && p == port,
            None => a.host() == host && port == 443 && scheme == Some("https"),
        },
        Err(_) => false,
    }
}

impl Egress {
    fn record(witness: &Arc<Mutex<Witness>>, s: Sent) {
        witness
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .sent
            .push(s);
    }

    /// The request's `host:port` if an allowed host admits it, and whether
    /// it goes to the credential's host.
    fn allows(&self, uri: &http::Uri) -> Option<(String, bool)> {
        let authority = uri.authority()?;
        let scheme = uri.scheme_str();
        let port = authority.port_u16().unwrap_or(match scheme {
            Some("https") => 443,
            _ => 80,
        });
        let host = authority.host().to_ascii_lowercase();
        if !self
            .allowed_hosts
            .iter()
            .any(|a| admits(a, &host, port, scheme))
        {
            return None;
        }
        let for_credential = self
            .credential_host
            .as_deref()
            .is_some_and(|c| admits(c, &host, port, scheme));
        Some((format!("{host}:{port}"), for_credential))
    }
}

impl WasiHttpHooks for Egress {
    fn forbidden_header_filter(&mut self) -> wasmtime_wasi_http::ForbiddenHeaderFilter {
        // A gatekeeper may not set credentials itself: the kernel owns them.
        Arc::new(|name| {
            *name == http::header::AUTHORIZATION
                || wasmtime_wasi_http::DEFAULT_FORBIDDEN_HEADERS.contains(name)
        })
    }

    fn send_request(
        &mut self,
        mut request: http::Request<wasmtime_wasi_http::WasiBody>,
        options: Option<wasmtime_wasi_http::RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ) -> Box<
        dyn Future<
                Output = Result<
                    (
                        http::Response<wasmtime_wasi_http::WasiBody>,
                        Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
                    ),
                    wasmtime_wasi_http::Error,
                >,
            > + Send,
    > {
        _ = fut;
        let witness = self.witness.clone();
        let Some((target, for_credential)) = self.allows(request.uri()) else {
            let target = request
                .uri()
                .authority()
                .map(|a| a.to_string())
                .unwrap_or_else(|| "(no host)".into());
            tracing::warn!(%target, "gatekeeper request to a host it was not allowed");
            Egress::record(&witness, Sent::Denied(target));
            return Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) });
        };
        // The credential goes to its own host only (C4), and never in clear
        // text over a network: plain HTTP carries it only to loopback.
        if let Some(secret) = self.credential.as_ref().filter(|_| for_credential) {
            let host = request.uri().host().unwrap_or("");
            if request.uri().scheme_str() != Some("https") && !is_loopback(host) {
                tracing::warn!(%target, "refused to send a credential over plain http");
                Egress::record(&witness, Sent::Insecure(target));
                return Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) });
            }
            if let Ok(mut v) = HeaderValue::from_str(&format!("Bearer {secret}")) {
                v.set_sensitive(true);
                request.headers_mut().insert(http::header::AUTHORIZATION, v);
            }
        }
        // The MCP session the request carries, held for a later read if
        // this call succeeds (`super::sessions`).
        if let Some(session) = super::sessions::HeldSession::from_headers(request.headers()) {
            witness.lock().unwrap_or_else(|e| e.into_inner()).session = Some(session);
        }
        // Written down before it leaves: if the call is cut off while the
        // request is in flight, the witness still shows "no answer".
        let slot = {
            let mut w = witness.lock().unwrap_or_else(|e| e.into_inner());
            w.sent.push(Sent::NoAnswer);
            w.sent.len() - 1
        };
        let settle = move |s: Sent| {
            witness.lock().unwrap_or_else(|e| e.into_inner()).sent[slot] = s;
        };
        let probe = may_be_setup(&request);
        let kept = self.kept.clone();
        let roots = self.roots.clone();
        let drains = self.drains.clone();
        Box::new(async move {
            use http_body_util::BodyExt;
            // A small JSON body is read whole before it leaves, to see
            // whether it only sets up an MCP session.
            let (request, setup) = if probe {
                let (parts, body) = request.into_parts();
                let bytes = match body.collect().await {
                    Ok(c) => c.to_bytes(),
                    Err(e) => {
                        settle(Sent::NotConnected);
                        return Err(e);
                    }
                };
                let setup = mcp_setup(&bytes);
                let body = http_body_util::Full::new(bytes)
                    .map_err(|never: std::convert::Infallible| match never {})
                    .boxed_unsync();
                (http::Request::from_parts(parts, body), setup)
            } else {
                (request, false)
            };
            // Kept (a read) or fresh (anything else): one path out, so
            // both trust the same authorities and report alike.
            let keeping = kept.is_some();
            if keeping {
                // An answer this call left unread holds its connection
                // until it is drained: finish that first, so the request
                // goes on that connection rather than opening another.
                let pending: Vec<_> =
                    std::mem::take(&mut *drains.lock().unwrap_or_else(|e| e.into_inner()));
                for drain in pending {
                    let _ = drain.await;
                }
            }
            let client = kept.unwrap_or(roots.fresh);
            let connect = options
                .and_then(|o| o.connect_timeout)
                .unwrap_or(CONNECT_TIMEOUT);
            let first_byte = options
                .and_then(|o| o.first_byte_timeout)
                .unwrap_or(Duration::from_secs(600));
            let answered =
                tokio::time::timeout(connect + first_byte, client.request(request)).await;
            match answered {
                Ok(Ok(res)) => {
                    let status = res.status().as_u16();
                    settle(if setup && res.status().is_success() {
                        Sent::Setup(status)
                    } else {
                        Sent::Answered(status)
                    });
                    let res = res.map(|body| {
                        let body = body.map_err(wasmtime_wasi_http::Error::from).boxed_unsync();
                        if keeping {
                            Drained::new(body, drains).boxed_unsync()
                        } else {
                            body
                        }
                    });
                    let io: Box<dyn Future<Output = _> + Send> = Box::new(async { Ok(()) });
                    Ok((res, io))
                }
                Ok(Err(e)) if e.is_connect() => {
                    settle(Sent::NotConnected);
                    Err(wasmtime_wasi_http::Error::Connect(std::io::Error::other(
                        e.to_string(),
                    )))
                }
                // Written, or perhaps written: the service may have it.
                Ok(Err(_)) => {
                    settle(Sent::NoAnswer);
                    Err(wasmtime_wasi_http::Error::ConnectionTerminated)
                }
                Err(_) => {
                    settle(Sent::NoAnswer);
                    Err(wasmtime_wasi_http::Error::ConnectionReadTimeout)
                }
            }
        })
    }
}

/// The `T` of a gatekeeper's store.
pub struct GatekeeperState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    table: ResourceTable,
    egress: Egress,
    limiter: Limiter,
}

impl WasiView for GatekeeperState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for GatekeeperState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.egress,
        }
    }
}

pub fn linker(engine: &wasmtime::Engine) -> anyhow::Result<Linker<GatekeeperState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    Ok(linker)
}

/// A WASI context that grants nothing: no files, no environment, no
/// sockets, no name lookup; output discarded.
pub fn powerless_wasi() -> wasmtime_wasi::WasiCtxBuilder {
    let mut b = WasiCtx::builder();
    b.allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .socket_addr_check(|_, _| Box::pin(async { false }));
    b
}

/// Where and as whom a gatekeeper call may reach out.
pub struct Reach {
    /// The `host:port`s its operator allowed (`--allow-host`); any other
    /// request is refused before dispatch.
    pub allowed_hosts: Vec<String>,
    /// The secret the kernel injects as `Authorization`, chosen from the
    /// principal ([`crate::principal`]); the component never sees it.
    pub credential: Option<String>,
    /// The one allowed host the credential is sent to (SPEC C4).
    pub credential_host: Option<String>,
    /// Connections kept from earlier calls, if this call may use them
    /// ([`Reach::keeping`]); `None`: every request on a connection of its
    /// own.
    pub kept: Option<KeptClient>,
}

impl Reach {
    /// A gatekeeper's own reach: its allowed hosts, and `credential` bound
    /// to its credential host.
    pub fn of(g: &crate::store::GatekeeperRecord, credential: Option<String>) -> Reach {
        Reach {
            allowed_hosts: g.hosts.clone(),
            credential,
            credential_host: g.credential_host().map(str::to_owned),
            kept: None,
        }
    }

    /// This reach, its requests on `connections` kept for `gatekeeper`
    /// under its credential: for reads only (see [`Connections`]).
    pub fn keeping(mut self, connections: &Connections, gatekeeper: &str) -> anyhow::Result<Reach> {
        self.kept = Some(connections.client(gatekeeper, self.credential.as_deref())?);
        Ok(self)
    }

    /// No network at all (predicting).
    pub fn nowhere() -> Reach {
        Reach {
            allowed_hosts: Vec::new(),
            credential: None,
            credential_host: None,
            kept: None,
        }
    }
}

/// Why a call produced no answer.
#[derive(Debug)]
pub enum Fault {
    /// The component trapped, ran out of time or memory.
    Crashed(String),
}

/// The outcome of one gatekeeper call, with what the kernel saw leave.
pub struct Called<T> {
    /// The gatekeeper's answer, or why it gave none.
    pub outcome: Result<T, Fault>,
    /// What the kernel saw leave during the call, whatever the outcome.
    pub witness: Witness,
}

/// What a gatekeeper hands back, on its way into the kernel: the credential
/// the kernel injected is replaced by `[redacted]` wherever it appears (a
/// service may echo request headers, SPEC C4), then long messages are cut
/// (A5). Redaction comes first, so a cut can never leave half a secret.
///
/// **Decision**: the credential is found as written, JSON-escaped and
/// percent-encoded; a service that transforms it otherwise (base64,
/// reversed, split) defeats this, which is why a gatekeeper never holds the
/// credential in the first place. A very short credential is redacted all
/// the same, at the cost of the text around it.
pub struct Scrub {
    needles: Vec<String>,
}

/// What replaces a credential a service echoed back.
pub const REDACTED: &str = "[redacted]";

impl Scrub {
    pub fn new(credential: Option<&str>) -> Scrub {
        let mut needles: Vec<String> = Vec::new();
        if let Some(c) = credential.filter(|c| !c.is_empty()) {
            let json = serde_json::to_string(c).unwrap_or_default();
            let json = json
                .strip_prefix('"')
                .and_then(|j| j.strip_suffix('"'))
                .unwrap_or(c)
                .to_owned();
            for n in [
                c.to_owned(),
                json,
                percent_encoded(c, false),
                percent_encoded(c, true),
            ] {
                if !n.is_empty() && !needles.contains(&n) {
                    needles.push(n);
                }
            }
            // Longest first, so no shorter form leaves a part of a longer one.
            needles.sort_by_key(|n| std::cmp::Reverse(n.len()));
        }
        Scrub { needles }
    }

    /// `s` with every form of the credential replaced.
    pub fn text(&self, s: &str) -> String {
        let mut out = s.to_owned();
        for n in &self.needles {
            if out.contains(n.as_str()) {
                out = out.replace(n.as_str(), REDACTED);
            }
        }
        out
    }

    /// A message (an error, a refusal): redacted, then capped.
    pub fn message(&self, s: &str) -> String {
        crate::store::cut(&self.text(s), crate::store::MAX_FAILURE_BYTES, "message")
    }

    fn output(&self, o: wit::Output) -> wit::Output {
        wit::Output {
            result: self.text(&o.result),
            sources: o
                .sources
                .into_iter()
                .map(|s| wit::Source {
                    id: self.text(&s.id),
                    title: self.text(&s.title),
                    restricted: s.restricted,
                })
                .collect(),
        }
    }

    fn tool_error(&self, e: wit::ToolError) -> wit::ToolError {
        match e {
            wit::ToolError::InvalidArgs(m) => wit::ToolError::InvalidArgs(self.message(&m)),
            wit::ToolError::UnknownTool(m) => wit::ToolError::UnknownTool(self.message(&m)),
            wit::ToolError::Refused(m) => wit::ToolError::Refused(self.message(&m)),
            wit::ToolError::UnknownOutcome(m) => wit::ToolError::UnknownOutcome(self.message(&m)),
        }
    }

    fn called<T>(&self, c: Called<T>, f: impl FnOnce(&Scrub, T) -> Result<T, Fault>) -> Called<T> {
        let outcome = match c.outcome {
            Ok(v) => f(self, v),
            Err(Fault::Crashed(m)) => Err(Fault::Crashed(self.message(&m))),
        };
        let sent = c
            .witness
            .sent
            .into_iter()
            .map(|s| match s {
                Sent::Denied(t) => Sent::Denied(self.message(&t)),
                Sent::Insecure(t) => Sent::Insecure(self.message(&t)),
                other => other,
            })
            .collect();
        Called {
            outcome,
            witness: Witness {
                sent,
                session: c.witness.session,
            },
        }
    }
}

/// `s` percent-encoded, every byte but RFC 3986's unreserved ones.
fn percent_encoded(s: &str, lower: bool) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else if lower {
            out.push_str(&format!("%{b:02x}"));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

async fn instantiate(
    pre: &GatekeeperPre<GatekeeperState>,
    limits: &Limits,
    reach: Reach,
) -> wasmtime::Result<(Store<GatekeeperState>, Gatekeeper, Arc<Mutex<Witness>>)> {
    let witness = Arc::new(Mutex::new(Witness::default()));
    let state = GatekeeperState {
        wasi: powerless_wasi().build(),
        http: WasiHttpCtx::new(),
        table: ResourceTable::new(),
        egress: Egress {
            allowed_hosts: reach.allowed_hosts,
            credential: reach.credential,
            credential_host: reach.credential_host,
            witness: witness.clone(),
            kept: reach.kept,
            roots: limits.roots.clone(),
            drains: Drains::default(),
        },
        limiter: Limiter::new(limits),
    };
    let mut store = Store::new(pre.engine(), state);
    store.limiter(|s| &mut s.limiter);
    store.set_epoch_deadline(Limits::ticks(limits.gatekeeper_deadline));
    store.epoch_deadline_trap();
    let instance = pre.instantiate_async(&mut store).await?;
    Ok((store, instance, witness))
}

/// Make a fresh sandboxed instance and drop it: what every call pays
/// before the guest runs. Public so that the benchmarks can weigh it
/// against a bare `InstancePre::instantiate` of the same component.
pub async fn instantiate_fresh(
    pre: &GatekeeperPre<GatekeeperState>,
    limits: &Limits,
) -> wasmtime::Result<()> {
    instantiate(pre, limits, Reach::nowhere()).await.map(drop)
}

/// Run `f` against a fresh instance under the gatekeeper deadline. The
/// deadline covers host I/O too (epochs do not interrupt host code).
async fn with_instance<T, F>(
    pre: &GatekeeperPre<GatekeeperState>,
    limits: &Limits,
    name: &str,
    reach: Reach,
    f: F,
) -> Called<T>
where
    F: for<'a> FnOnce(
        &'a mut Store<GatekeeperState>,
        &'a Gatekeeper,
    )
        -> std::pin::Pin<Box<dyn Future<Output = wasmtime::Result<T>> + Send + 'a>>,
{
    let who = format!("gatekeeper {name:?}");
    let (mut store, instance, witness) = match instantiate(pre, limits, reach).await {
        Ok(x) => x,
        Err(e) => {
            return Called {
                outcome: Err(Fault::Crashed(explain_trap(&e, &who, limits, false))),
                witness: Witness::default(),
            };
        }
    };
    let deadline = limits.gatekeeper_deadline;
    let result = tokio::time::timeout(deadline, f(&mut store, &instance)).await;
    let hit_memory = store.data().limiter.hit_memory;
    let outcome = match result {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(Fault::Crashed(explain_trap(&e, &who, limits, hit_memory))),
        Err(_) => Err(Fault::Crashed(format!(
            "{who} did not answer within {} ms and was stopped",
            deadline.as_millis()
        ))),
    };
    // The instance goes, and with it any answer it left unread: those on
    // kept connections are read to their end before the call returns, so
    // that the next read finds the connection back in the pool (bounded by
    // the drain's own limits; usually the end arrived with the answer).
    let drains = store.data().egress.drains.clone();
    drop(store);
    let pending: Vec<_> = std::mem::take(&mut *drains.lock().unwrap_or_else(|e| e.into_inner()));
    for drain in pending {
        let _ = drain.await;
    }
    let witness = witness.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Called { outcome, witness }
}

/// Call a tool. The output and any error are scrubbed (see `Scrub`).
pub async fn call(
    pre: &GatekeeperPre<GatekeeperState>,
    limits: &Limits,
    name: &str,
    reach: Reach,
    invocation: wit::Invocation,
) -> Called<Result<wit::Output, wit::ToolError>> {
    let scrub = Scrub::new(reach.credential.as_deref());
    let called = with_instance(pre, limits, name, reach, move |store, gk| {
        Box::pin(async move { gk.gatehouse_os_tool().call_call(store, &invocation).await })
    })
    .await;
    scrub.called(called, |s, r| {
        Ok(r.map(|o| s.output(o)).map_err(|e| s.tool_error(e)))
    })
}

/// Ask for a simulated result (SPEC V1). One over the result cap (A5) is
/// not handed over: the call fails with a note, and the gadget waits for
/// the decision instead.
pub async fn simulate(
    pre: &GatekeeperPre<GatekeeperState>,
    limits: &Limits,
    name: &str,
    reach: Reach,
    invocation: wit::Invocation,
) -> Called<Option<String>> {
    let scrub = Scrub::new(reach.credential.as_deref());
    let called = with_instance(pre, limits, name, reach, move |store, gk| {
        Box::pin(async move {
            gk.gatehouse_os_tool()
                .call_simulate(store, &invocation)
                .await
        })
    })
    .await;
    let name = name.to_owned();
    scrub.called(called, move |s, r| match r {
        Some(r) if r.len() > crate::store::MAX_RESULT_BYTES => Err(Fault::Crashed(format!(
            "gatekeeper {name:?} simulated a result of {} bytes, over the {}-byte limit; it was not kept, and the action awaits a decision instead",
            r.len(),
            crate::store::MAX_RESULT_BYTES
        ))),
        r => Ok(r.map(|r| s.text(&r))),
    })
}

/// Ask whether an account may observe sources (SPEC S2, S3); `reach`
/// carries the *observer's* credential, never the chat owner's. A scope
/// longer than [`crate::store::MAX_SCOPE`] is dropped (later reads are then
/// checked with the service), never stored.
pub async fn check_observer(
    pre: &GatekeeperPre<GatekeeperState>,
    limits: &Limits,
    name: &str,
    reach: Reach,
    check: wit::ObserverCheck,
) -> Called<wit::ObserverVerdict> {
    let scrub = Scrub::new(reach.credential.as_deref());
    let called = with_instance(pre, limits, name, reach, move |store, gk| {
        Box::pin(async move {
            gk.gatehouse_os_tool()
                .call_check_observer(store, &check)
                .await
        })
    })
    .await;
    scrub.called(called, |s, v| {
        if v.denials.len() > crate::store::MAX_SOURCES {
            return Err(Fault::Crashed(format!(
                "the gatekeeper denied {} sources in one answer; at most {} are accepted",
                v.denials.len(),
                crate::store::MAX_SOURCES
            )));
        }
        Ok(wit::ObserverVerdict {
            denials: v
                .denials
                .into_iter()
                .map(|d| wit::Denial {
                    source: s.message(&d.source),
                    reason: s.message(&d.reason),
                })
                .collect(),
            scope: v
                .scope
                .filter(|scope| {
                    scope.len() <= crate::store::MAX_SCOPE
                        && scope
                            .iter()
                            .all(|id| id.len() <= crate::store::MAX_SOURCE_ID_BYTES)
                })
                .map(|scope| scope.iter().map(|id| s.text(id)).collect()),
        })
    })
}

/// Ask which sources a read would touch (SPEC S3). The gatekeeper may not
/// reach anything while it answers: a prediction touches no service. More
/// than [`crate::store::MAX_SOURCES`] is no prediction (fail closed).
pub async fn predict_sources(
    pre: &GatekeeperPre<GatekeeperState>,
    limits: &Limits,
    name: &str,
    invocation: wit::Invocation,
) -> Called<Vec<wit::Source>> {
    let called = with_instance(pre, limits, name, Reach::nowhere(), move |store, gk| {
        Box::pin(async move {
            gk.gatehouse_os_tool()
                .call_predict_sources(store, &invocation)
                .await
        })
    })
    .await;
    Scrub::new(None).called(called, |_, v| {
        if v.len() > crate::store::MAX_SOURCES {
            return Err(Fault::Crashed(format!(
                "the gatekeeper predicted {} sources for one read; at most {} are accepted",
                v.len(),
                crate::store::MAX_SOURCES
            )));
        }
        Ok(v)
    })
}

/// Read a gatekeeper's manifest (at `gatekeeper add` and `refresh`), for
/// the instance configured with `settings`, reaching only what `reach`
/// allows (a gatekeeper may ask its service, like an MCP server's
/// `tools/list`). A manifest over its caps (A5: tools, name and description
/// lengths, schema and total size) is refused with one line saying which;
/// so is a gatekeeper's own refusal, scrubbed like any message.
pub async fn describe(
    pre: &GatekeeperPre<GatekeeperState>,
    limits: &Limits,
    name: &str,
    reach: Reach,
    settings: Vec<(String, String)>,
) -> anyhow::Result<Manifest> {
    use crate::store::{
        MAX_DESCRIPTION_BYTES, MAX_MANIFEST_BYTES, MAX_SCHEMA_BYTES, MAX_TOOL_NAME_BYTES,
        MAX_TOOLS, MAX_TRIGGERS,
    };
    let scrub = Scrub::new(reach.credential.as_deref());
    let called = with_instance(pre, limits, name, reach, move |store, gk| {
        Box::pin(async move { gk.gatehouse_os_tool().call_describe(store, &settings).await })
    })
    .await;
    let m = match called.outcome {
        Ok(Ok(m)) => m,
        Ok(Err(e)) => anyhow::bail!(
            "gatekeeper {name:?} could not describe its tools: {}",
            scrub.message(&describe_tool_error(&e))
        ),
        Err(Fault::Crashed(msg)) => {
            anyhow::bail!("{} while describing its tools", scrub.message(&msg))
        }
    };
    if m.tools.len() > MAX_TOOLS {
        anyhow::bail!(
            "gatekeeper {name:?} declares {} tools; at most {MAX_TOOLS} are accepted: split it into several gatekeepers",
            m.tools.len()
        );
    }
    let shown = |t: &str| format!("{:?}", crate::prompt::as_given(t));
    let mut total = 0usize;
    let mut seen = std::collections::HashSet::new();
    let mut tools = Vec::new();
    for t in m.tools {
        if t.name.len() > MAX_TOOL_NAME_BYTES {
            anyhow::bail!(
                "gatekeeper {name:?} declares a tool name of {} bytes ({}); at most {MAX_TOOL_NAME_BYTES} are accepted",
                t.name.len(),
                shown(&t.name)
            );
        }
        if t.description.len() > MAX_DESCRIPTION_BYTES {
            anyhow::bail!(
                "gatekeeper {name:?}: the description of tool {} is {} bytes; at most {MAX_DESCRIPTION_BYTES} are accepted",
                shown(&t.name),
                t.description.len()
            );
        }
        if t.input_schema.len() > MAX_SCHEMA_BYTES {
            anyhow::bail!(
                "gatekeeper {name:?}: the input schema of tool {} is {} bytes; at most {MAX_SCHEMA_BYTES} are accepted",
                shown(&t.name),
                t.input_schema.len()
            );
        }
        if let Some(title) = &t.title
            && title.len() > MAX_DESCRIPTION_BYTES
        {
            anyhow::bail!(
                "gatekeeper {name:?}: the title of tool {} is {} bytes; at most {MAX_DESCRIPTION_BYTES} are accepted",
                shown(&t.name),
                title.len()
            );
        }
        if let Some(schema) = &t.output_schema
            && schema.len() > MAX_SCHEMA_BYTES
        {
            anyhow::bail!(
                "gatekeeper {name:?}: the output schema of tool {} is {} bytes; at most {MAX_SCHEMA_BYTES} are accepted",
                shown(&t.name),
                schema.len()
            );
        }
        total += t.name.len()
            + t.description.len()
            + t.input_schema.len()
            + t.title.as_ref().map_or(0, String::len)
            + t.output_schema.as_ref().map_or(0, String::len);
        if total > MAX_MANIFEST_BYTES {
            anyhow::bail!(
                "gatekeeper {name:?} describes more than {MAX_MANIFEST_BYTES} bytes of tools; a manifest that large is refused: split it into several gatekeepers"
            );
        }
        if !seen.insert(t.name.clone()) {
            anyhow::bail!(
                "gatekeeper {name:?} declares the tool {} twice; tool names must be unique",
                shown(&t.name)
            );
        }
        // A service may echo the credential anywhere (C4).
        tools.push(Tool {
            name: scrub.text(&t.name),
            description: scrub.text(&t.description),
            input_schema: scrub.text(&t.input_schema),
            annotations: Annotations {
                read_only: t.annotations.read_only,
                destructive: t.annotations.destructive,
                idempotent: t.annotations.idempotent,
                open_world: t.annotations.open_world,
            },
            reverted_by: t.reverted_by.map(|r| scrub.text(&r)),
            honours_idempotency_key: t.honours_idempotency_key,
            title: t.title.map(|title| scrub.text(&title)),
            output_schema: t.output_schema.map(|schema| scrub.text(&schema)),
            task_support: t.task_support.map(|s| match s {
                gatehouse::os::types::TaskSupport::Forbidden => TaskSupport::Forbidden,
                gatehouse::os::types::TaskSupport::Optional => TaskSupport::Optional,
                gatehouse::os::types::TaskSupport::Required => TaskSupport::Required,
            }),
        });
    }
    for t in &tools {
        if let Some(r) = &t.reverted_by
            && !seen.contains(r)
        {
            anyhow::bail!(
                "gatekeeper {name:?}: tool {} is reverted by {}, which it does not declare",
                shown(&t.name),
                shown(r)
            );
        }
    }
    if m.triggers.len() > MAX_TRIGGERS {
        anyhow::bail!(
            "gatekeeper {name:?} declares {} triggers; at most {MAX_TRIGGERS} are accepted",
            m.triggers.len()
        );
    }
    let mut triggers = Vec::new();
    let mut trigger_names = std::collections::HashSet::new();
    for t in m.triggers {
        if t.name.is_empty() || t.name.len() > MAX_TOOL_NAME_BYTES {
            anyhow::bail!(
                "gatekeeper {name:?} declares a trigger name of {} bytes ({}); 1 to {MAX_TOOL_NAME_BYTES} are accepted",
                t.name.len(),
                shown(&t.name)
            );
        }
        if t.description.len() > MAX_DESCRIPTION_BYTES {
            anyhow::bail!(
                "gatekeeper {name:?}: the description of trigger {} is {} bytes; at most {MAX_DESCRIPTION_BYTES} are accepted",
                shown(&t.name),
                t.description.len()
            );
        }
        if !trigger_names.insert(t.name.clone()) {
            anyhow::bail!(
                "gatekeeper {name:?} declares the trigger {} twice; trigger names must be unique",
                shown(&t.name)
            );
        }
        let kind = match t.kind {
            wit::TriggerKind::Webhook => TriggerKind::Webhook,
            wit::TriggerKind::Schedule(0) => anyhow::bail!(
                "gatekeeper {name:?}: trigger {} has a schedule of 0 seconds; at least 1 is needed",
                shown(&t.name)
            ),
            wit::TriggerKind::Schedule(seconds) => TriggerKind::Schedule { seconds },
        };
        triggers.push(Trigger {
            name: scrub.text(&t.name),
            description: scrub.text(&t.description),
            kind,
        });
    }
    let observers = match m.observers {
        wit::ObserverStrategy::Refuse => ObserverStrategy::Refuse,
        wit::ObserverStrategy::AccessCheck => ObserverStrategy::AccessCheck,
        wit::ObserverStrategy::TrackReads => ObserverStrategy::TrackReads,
        wit::ObserverStrategy::NoCheck => ObserverStrategy::NoCheck,
    };
    Ok(Manifest {
        tools,
        simulates: m.simulates,
        observers,
        triggers,
    })
}

/// A tool error as one line for people.
pub fn describe_tool_error(e: &wit::ToolError) -> String {
    match e {
        wit::ToolError::InvalidArgs(m) => format!("invalid arguments: {m}"),
        wit::ToolError::UnknownTool(m) => format!("unknown tool: {m}"),
        wit::ToolError::Refused(m) => format!("refused by the service: {m}"),
        wit::ToolError::UnknownOutcome(m) => format!("outcome unknown: {m}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_mcp_sessions_set_up_counts_as_set_up() {
        for m in [
            "initialize",
            "notifications/initialized",
            "tools/list",
            "ping",
        ] {
            let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": m});
            assert!(mcp_setup(body.to_string().as_bytes()), "{m}");
        }
        for body in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"initialize"}]"#,
            r#"{"method":"initialize"}"#,
            "not json",
        ] {
            assert!(!mcp_setup(body.as_bytes()), "{body}");
        }
        let w = Witness {
            sent: vec![Sent::Setup(200), Sent::Setup(202), Sent::Answered(401)],
            ..Witness::default()
        };
        assert!(w.proves_no_effect());
        let w = Witness {
            sent: vec![Sent::Answered(200), Sent::Answered(401)],
            ..Witness::default()
        };
        assert!(!w.proves_no_effect());
    }
}
