//! The bare forwarding host the benchmarks measure the kernel against: the
//! same guest components, wired with nothing between them. A gadget's
//! `service.call` import calls the gatekeeper directly: no introduction
//! lookup, no classification, no observation record, no store at all.
//!
//! Built only from `gatehouse::embed` (its own runtime, the same engine
//! settings), never from the kernel's internals, so that a ratio against it
//! is the price of policy and durability alone.

use crate::guest;
use gatehouse::Limits;
use gatehouse::embed::gadget::{CertificateHandle, GadgetPre, ServiceHandle};
use gatehouse::embed::gadget::{kernel as wit, types as witt, workflow as witw};
use gatehouse::embed::gatekeeper::{self as gk, GatekeeperPre, GatekeeperState, Reach};
use gatehouse::embed::{Role, Runtime};
use wasmtime::Store;
use wasmtime::component::{Component, HasSelf, Linker, Resource, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// The `store-*` imports of a gadget host that keeps nothing between
/// turns: a read finds nothing, a write is refused, a delete or a listing
/// is empty. Items for an `impl kernel::Host` block: the bare host and
/// the language benchmark's stub answer a gadget's store alike, so that
/// neither measures storage.
#[macro_export]
macro_rules! storeless_gadget_store {
    () => {
        async fn store_get(
            &mut self,
            _key: String,
        ) -> wasmtime::Result<Result<Option<String>, gatehouse::embed::gadget::kernel::CallError>> {
            Ok(Ok(None))
        }
        async fn store_put(
            &mut self,
            _key: String,
            _value: String,
        ) -> wasmtime::Result<Result<(), gatehouse::embed::gadget::kernel::CallError>> {
            Ok(Err(gatehouse::embed::gadget::kernel::CallError::Refused(
                "no storage here".into(),
            )))
        }
        async fn store_delete(
            &mut self,
            _key: String,
        ) -> wasmtime::Result<Result<(), gatehouse::embed::gadget::kernel::CallError>> {
            Ok(Ok(()))
        }
        async fn store_keys(
            &mut self,
        ) -> wasmtime::Result<Result<Vec<String>, gatehouse::embed::gadget::kernel::CallError>> {
            Ok(Ok(Vec::new()))
        }
    };
}

/// A service handle's `key`, `tools` (none listed) and `drop`, for an
/// `impl kernel::HostService` block of a host whose handles live in its
/// `table`: all but `call`, which is what the bare host and the
/// benchmark's stub do differently.
#[macro_export]
macro_rules! plain_service_handle {
    () => {
        async fn key(
            &mut self,
            this: wasmtime::component::Resource<gatehouse::embed::gadget::ServiceHandle>,
        ) -> wasmtime::Result<String> {
            Ok(self.table.get(&this)?.key().to_owned())
        }
        async fn tools(
            &mut self,
            _this: wasmtime::component::Resource<gatehouse::embed::gadget::ServiceHandle>,
        ) -> wasmtime::Result<Vec<gatehouse::embed::gadget::types::ToolInfo>> {
            Ok(Vec::new())
        }
        async fn drop(
            &mut self,
            this: wasmtime::component::Resource<gatehouse::embed::gadget::ServiceHandle>,
        ) -> wasmtime::Result<()> {
            self.table.delete(this)?;
            Ok(())
        }
    };
}

/// A gadget and a gatekeeper, prepared for the bare host.
pub struct Bare {
    pub gadget: GadgetPre<Direct>,
    pub gatekeeper: GatekeeperPre<GatekeeperState>,
    pub limits: Limits,
    /// The bare host's own runtime (its engine and compiled cache).
    pub runtime: Runtime,
    _scratch: tempfile::TempDir,
}

impl Bare {
    /// `gadget` wired straight to `gatekeeper` (both built guests).
    pub fn new(gadget: &str, gatekeeper: &str, limits: Limits) -> Bare {
        let scratch = tempfile::tempdir().expect("a temporary directory");
        let runtime = Runtime::new(scratch.path().to_owned(), limits.clone()).expect("a runtime");
        let engine = runtime.engine().clone();
        let mut linker: Linker<Direct> = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).expect("wasi");
        gatehouse::embed::gadget::Gadget::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)
            .expect("kernel interface");
        let component = Component::from_file(&engine, guest(gadget)).expect("the gadget compiles");
        let gadget =
            GadgetPre::new(linker.instantiate_pre(&component).expect("links")).expect("exports");
        let bytes = std::fs::read(guest(gatekeeper)).expect("the gatekeeper is built");
        let digest = runtime
            .admit(&bytes, Role::Gatekeeper, &|_| {})
            .expect("the gatekeeper is admitted");
        let gatekeeper = runtime.gatekeeper(&digest).expect("the gatekeeper loads");
        Bare {
            gadget,
            gatekeeper,
            limits,
            runtime,
            _scratch: scratch,
        }
    }

    /// One gadget turn on the bare host.
    pub async fn turn(&self, input: &str) -> String {
        direct_turn(&self.gadget, &self.gatekeeper, &self.limits, input, None).await
    }

    /// One gadget turn on the bare host, which runs `after_call` after
    /// each call it forwards, before it answers the gadget: where the
    /// kernel records a read, so a baseline's commit runs amid the same
    /// calls as the kernel's does, not in a batch after the turn.
    pub async fn turn_recording(&self, input: &str, after_call: AfterCall) -> String {
        direct_turn(
            &self.gadget,
            &self.gatekeeper,
            &self.limits,
            input,
            Some(after_call),
        )
        .await
    }
}

/// What the bare host does after each call it forwards (a benchmark's
/// bare commit), on the thread that forwarded it.
pub type AfterCall = std::sync::Arc<dyn Fn() + Send + Sync>;

/// A gatekeeper component linked with nothing but WASI and WASI HTTP, in
/// the bare host's engine (the same pooling allocator): the baseline for a
/// fresh instance.
pub struct BareGatekeeper {
    pre: wasmtime::component::InstancePre<Plain>,
}

/// The least a gatekeeper's store can hold.
pub struct Plain {
    wasi: WasiCtx,
    http: wasmtime_wasi_http::WasiHttpCtx,
    table: ResourceTable,
}

impl WasiView for Plain {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl wasmtime_wasi_http::WasiHttpView for Plain {
    fn http(&mut self) -> wasmtime_wasi_http::WasiHttpCtxView<'_> {
        wasmtime_wasi_http::WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: Default::default(),
        }
    }
}

impl BareGatekeeper {
    /// `gatekeeper` (a built guest) prepared in `runtime`'s engine.
    pub fn new(runtime: &Runtime, gatekeeper: &str) -> BareGatekeeper {
        let engine = runtime.engine();
        let mut linker: Linker<Plain> = Linker::new(engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).expect("wasi");
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).expect("wasi http");
        let component =
            Component::from_file(engine, guest(gatekeeper)).expect("the gatekeeper compiles");
        BareGatekeeper {
            pre: linker.instantiate_pre(&component).expect("links"),
        }
    }

    /// A fresh instance, made and dropped.
    pub async fn instantiate(&self) {
        let state = Plain {
            wasi: WasiCtx::builder().build(),
            http: wasmtime_wasi_http::WasiHttpCtx::new(),
            table: ResourceTable::new(),
        };
        let mut store = Store::new(self.pre.engine(), state);
        store.set_epoch_deadline(1_000_000);
        self.pre
            .instantiate_async(&mut store)
            .await
            .expect("instantiate");
    }
}

/// The unmediated wiring: the gadget's import calls the gatekeeper directly.
pub struct Direct {
    wasi: WasiCtx,
    table: ResourceTable,
    gatekeeper: GatekeeperPre<GatekeeperState>,
    limits: Limits,
    after_call: Option<AfterCall>,
}

impl WasiView for Direct {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl witt::Host for Direct {}

// The unmediated wiring has no workflows: no certificate, no requests.
impl witw::Host for Direct {
    async fn step_certificate(&mut self) -> wasmtime::Result<Option<Resource<CertificateHandle>>> {
        Ok(None)
    }
    async fn request_approval(
        &mut self,
        _allowed: String,
        _reason: String,
    ) -> wasmtime::Result<Result<u64, String>> {
        Ok(Err("no workflows here".into()))
    }
}

impl witw::HostCertificate for Direct {
    async fn run(&mut self, _: Resource<CertificateHandle>) -> wasmtime::Result<u64> {
        Ok(0)
    }
    async fn step(&mut self, _: Resource<CertificateHandle>) -> wasmtime::Result<String> {
        Ok(String::new())
    }
    async fn authority(&mut self, _: Resource<CertificateHandle>) -> wasmtime::Result<String> {
        Ok(String::new())
    }
    async fn tools(&mut self, _: Resource<CertificateHandle>) -> wasmtime::Result<Vec<String>> {
        Ok(Vec::new())
    }
    async fn expires_at(&mut self, _: Resource<CertificateHandle>) -> wasmtime::Result<u64> {
        Ok(0)
    }
    async fn encoded(&mut self, _: Resource<CertificateHandle>) -> wasmtime::Result<String> {
        Ok(String::new())
    }
    async fn call(
        &mut self,
        _: Resource<CertificateHandle>,
        _: Resource<ServiceHandle>,
        _: String,
        _: String,
    ) -> wasmtime::Result<Result<wit::Outcome, wit::CallError>> {
        Ok(Err(wit::CallError::Refused("no workflows here".into())))
    }
    async fn drop(&mut self, this: Resource<CertificateHandle>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}

impl wit::Host for Direct {
    async fn env(&mut self) -> wasmtime::Result<Vec<String>> {
        Ok(vec!["ROGUE".into()])
    }
    async fn open(
        &mut self,
        key: String,
    ) -> wasmtime::Result<Result<Resource<ServiceHandle>, wit::CallError>> {
        Ok(Ok(self.table.push(ServiceHandle::new(key))?))
    }
    async fn action_result(
        &mut self,
        _id: u64,
    ) -> wasmtime::Result<Result<wit::ActionStatus, wit::CallError>> {
        Ok(Ok(wit::ActionStatus::Pending))
    }
    // No store at all: the bare host keeps nothing between turns.
    crate::storeless_gadget_store!();
}

impl wit::HostService for Direct {
    crate::plain_service_handle!();
    async fn call(
        &mut self,
        _this: Resource<ServiceHandle>,
        tool: String,
        args: String,
    ) -> wasmtime::Result<Result<wit::Outcome, wit::CallError>> {
        let called = unmediated_call(&self.gatekeeper, &self.limits, tool, args).await;
        if let Some(after_call) = &self.after_call {
            after_call();
        }
        Ok(match called.outcome {
            Ok(Ok(out)) => Ok(wit::Outcome::Done(out.result)),
            _ => Err(wit::CallError::Service("failed".into())),
        })
    }
}

impl Bare {
    /// A fresh gadget instance on the bare host, made and dropped.
    pub async fn instantiate_gadget(&self) {
        let state = Direct {
            wasi: WasiCtx::builder().build(),
            table: ResourceTable::new(),
            gatekeeper: self.gatekeeper.clone(),
            limits: self.limits.clone(),
            after_call: None,
        };
        let mut store = Store::new(self.gadget.engine(), state);
        store.set_epoch_deadline(1_000_000);
        self.gadget
            .instantiate_async(&mut store)
            .await
            .expect("instantiate");
    }
}

/// A gatekeeper call with nothing around it: no store, no policy.
pub async fn unmediated_call(
    pre: &GatekeeperPre<GatekeeperState>,
    limits: &Limits,
    tool: String,
    args: String,
) -> gk::Called<Result<gk::wit::Output, gk::wit::ToolError>> {
    let invocation = gk::wit::Invocation {
        tool,
        args,
        settings: Vec::new(),
        account: None,
        pending: Vec::new(),
        idempotency_key: None,
    };
    let reach = Reach::nowhere();
    gk::call(pre, limits, "rogue", reach, invocation).await
}

pub async fn direct_turn(
    pre: &GadgetPre<Direct>,
    gatekeeper: &GatekeeperPre<GatekeeperState>,
    limits: &Limits,
    input: &str,
    after_call: Option<AfterCall>,
) -> String {
    let state = Direct {
        wasi: WasiCtx::builder().build(),
        table: ResourceTable::new(),
        gatekeeper: gatekeeper.clone(),
        limits: limits.clone(),
        after_call,
    };
    let mut store = Store::new(pre.engine(), state);
    store.set_epoch_deadline(1_000_000);
    let g = pre
        .instantiate_async(&mut store)
        .await
        .expect("instantiate");
    g.gatehouse_os_run()
        .call_run(&mut store, input)
        .await
        .expect("no trap")
        .expect("turn ok")
}
