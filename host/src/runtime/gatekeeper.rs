//! Gatekeeper instances: the sandbox a driver runs in, and its one way out.
//!
//! A gatekeeper gets WASI without authority plus `wasi:http` outgoing
//! requests, filtered here: only to the hosts its operator allowed (SPEC C4),
//! with the credential added by the kernel (the component never holds it and
//! may not set `Authorization` itself). Every request is written down in a
//! [`Witness`], so that the kernel, not the gatekeeper, decides whether a
//! failed action provably never took effect (P2).
//!
//! May not touch the store or decide policy: it runs one call and reports.

use super::{Limiter, Limits, explain_trap};
use crate::classify::{Annotations, Manifest, Tool};
use http::HeaderValue;
use std::sync::{Arc, Mutex};
use wasmtime::Store;
use wasmtime::component::{Linker, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView};

wasmtime::component::bindgen!({
    world: "gatekeeper",
    path: "../wit",
    exports: { default: async },
});

pub use exports::gatehouse::os::tool as wit;

/// What happened to one outgoing request, as the kernel saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sent {
    /// Refused by the kernel before dispatch (host not allowed).
    Denied(String),
    /// No connection could be made: nothing reached the service.
    NotConnected,
    /// The service answered with this status.
    Answered(u16),
    /// Sent, but no answer came back: the outcome is unknown.
    NoAnswer,
}

/// Everything a gatekeeper tried to send during one call.
#[derive(Clone, Debug, Default)]
pub struct Witness {
    pub sent: Vec<Sent>,
}

impl Witness {
    /// True when nothing that left could have taken effect: every request
    /// was refused before dispatch, never connected, or answered 401/403.
    pub fn proves_no_effect(&self) -> bool {
        self.sent.iter().all(|s| {
            matches!(
                s,
                Sent::Denied(_) | Sent::NotConnected | Sent::Answered(401) | Sent::Answered(403)
            )
        })
    }
}

/// The kernel's side of a gatekeeper's outgoing HTTP.
struct Egress {
    allowed_hosts: Vec<String>,
    credential: Option<String>,
    witness: Arc<Mutex<Witness>>,
}

impl Egress {
    fn record(witness: &Arc<Mutex<Witness>>, s: Sent) {
        witness
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .sent
            .push(s);
    }

    fn allows(&self, uri: &http::Uri) -> Option<String> {
        let authority = uri.authority()?;
        let port = authority.port_u16().unwrap_or(match uri.scheme_str() {
            Some("https") => 443,
            _ => 80,
        });
        let host = authority.host().to_ascii_lowercase();
        let with_port = format!("{host}:{port}");
        self.allowed_hosts
            .iter()
            .any(|a| {
                let a = a.to_ascii_lowercase();
                a == with_port || (a == host && authority.port().is_none())
            })
            .then_some(with_port)
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
        let Some(_host) = self.allows(request.uri()) else {
            let target = request
                .uri()
                .authority()
                .map(|a| a.to_string())
                .unwrap_or_else(|| "(no host)".into());
            tracing::warn!(%target, "gatekeeper request to a host it was not allowed");
            Egress::record(&witness, Sent::Denied(target));
            return Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) });
        };
        if let Some(secret) = &self.credential
            && let Ok(v) = HeaderValue::from_str(&format!("Bearer {secret}"))
        {
            let mut v = v;
            v.set_sensitive(true);
            request.headers_mut().insert(http::header::AUTHORIZATION, v);
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
        Box::new(async move {
            use http_body_util::BodyExt;
            match wasmtime_wasi_http::default_send_request(request, options).await {
                Ok((res, io)) => {
                    settle(Sent::Answered(res.status().as_u16()));
                    Ok((
                        res.map(BodyExt::boxed_unsync),
                        Box::new(io) as Box<dyn Future<Output = _> + Send>,
                    ))
                }
                Err(e) => {
                    let s = match &e {
                        wasmtime_wasi_http::Error::Connect(_)
                        | wasmtime_wasi_http::Error::ConnectionRefused
                        | wasmtime_wasi_http::Error::ConnectionTimeout
                        | wasmtime_wasi_http::Error::DnsTimeout
                        | wasmtime_wasi_http::Error::DnsError { .. }
                        | wasmtime_wasi_http::Error::DestinationNotFound
                        | wasmtime_wasi_http::Error::DestinationUnavailable
                        | wasmtime_wasi_http::Error::HttpRequestUriInvalid => Sent::NotConnected,
                        _ => Sent::NoAnswer,
                    };
                    settle(s);
                    Err(e)
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
    pub allowed_hosts: Vec<String>,
    pub credential: Option<String>,
}

/// Why a call produced no answer.
#[derive(Debug)]
pub enum Fault {
    /// The component trapped, ran out of time or memory.
    Crashed(String),
}

/// The outcome of one gatekeeper call, with what the kernel saw leave.
pub struct Called<T> {
    pub outcome: Result<T, Fault>,
    pub witness: Witness,
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
            witness: witness.clone(),
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
    let witness = witness.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Called { outcome, witness }
}

/// Call a tool.
pub async fn call(
    pre: &GatekeeperPre<GatekeeperState>,
    limits: &Limits,
    name: &str,
    reach: Reach,
    invocation: wit::Invocation,
) -> Called<Result<wit::Output, wit::ToolError>> {
    with_instance(pre, limits, name, reach, move |store, gk| {
        Box::pin(async move { gk.gatehouse_os_tool().call_call(store, &invocation).await })
    })
    .await
}

/// Ask for a simulated result (SPEC V1).
pub async fn simulate(
    pre: &GatekeeperPre<GatekeeperState>,
    limits: &Limits,
    name: &str,
    reach: Reach,
    invocation: wit::Invocation,
) -> Called<Option<String>> {
    with_instance(pre, limits, name, reach, move |store, gk| {
        Box::pin(async move {
            gk.gatehouse_os_tool()
                .call_simulate(store, &invocation)
                .await
        })
    })
    .await
}

/// Ask whether an account may observe sources (SPEC S2, S3); `reach`
/// carries the *observer's* credential, never the chat owner's.
pub async fn check_observer(
    pre: &GatekeeperPre<GatekeeperState>,
    limits: &Limits,
    name: &str,
    reach: Reach,
    check: wit::ObserverCheck,
) -> Called<wit::ObserverVerdict> {
    with_instance(pre, limits, name, reach, move |store, gk| {
        Box::pin(async move {
            gk.gatehouse_os_tool()
                .call_check_observer(store, &check)
                .await
        })
    })
    .await
}

/// Ask which sources a read would touch (SPEC S3). The gatekeeper may not
/// reach anything while it answers: a prediction touches no service.
pub async fn predict_sources(
    pre: &GatekeeperPre<GatekeeperState>,
    limits: &Limits,
    name: &str,
    invocation: wit::Invocation,
) -> Called<Vec<wit::Source>> {
    let reach = Reach {
        allowed_hosts: Vec::new(),
        credential: None,
    };
    with_instance(pre, limits, name, reach, move |store, gk| {
        Box::pin(async move {
            gk.gatehouse_os_tool()
                .call_predict_sources(store, &invocation)
                .await
        })
    })
    .await
}

/// Read a gatekeeper's manifest (at `gatekeeper add`).
pub async fn describe(
    pre: &GatekeeperPre<GatekeeperState>,
    limits: &Limits,
    name: &str,
) -> anyhow::Result<Manifest> {
    let reach = Reach {
        allowed_hosts: Vec::new(),
        credential: None,
    };
    let called = with_instance(pre, limits, name, reach, |store, gk| {
        Box::pin(async move { gk.gatehouse_os_tool().call_describe(store).await })
    })
    .await;
    let m = match called.outcome {
        Ok(m) => m,
        Err(Fault::Crashed(msg)) => anyhow::bail!("{msg} while describing its tools"),
    };
    let mut seen = std::collections::HashSet::new();
    let mut tools = Vec::new();
    for t in m.tools {
        if !seen.insert(t.name.clone()) {
            anyhow::bail!(
                "gatekeeper {name:?} declares the tool {:?} twice; tool names must be unique",
                t.name
            );
        }
        tools.push(Tool {
            name: t.name,
            description: t.description,
            input_schema: t.input_schema,
            annotations: Annotations {
                read_only: t.annotations.read_only,
                destructive: t.annotations.destructive,
                idempotent: t.annotations.idempotent,
                open_world: t.annotations.open_world,
            },
        });
    }
    let observers = match m.observers {
        wit::ObserverStrategy::Refuse => "refuse",
        wit::ObserverStrategy::AccessCheck => "access-check",
        wit::ObserverStrategy::TrackReads => "track-reads",
        wit::ObserverStrategy::NoCheck => "no-check",
    };
    Ok(Manifest {
        tools,
        simulates: m.simulates,
        observers: observers.into(),
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
