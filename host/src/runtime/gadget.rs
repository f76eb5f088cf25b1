//! Gadget instances: the sandbox a gadget runs in.
//!
//! A gadget's imports are the kernel interface and WASI without authority
//! (SPEC C1): no preopened directory, an empty environment, sockets and name
//! lookup denied, stdout/stderr captured for the kernel's log. This module
//! only translates between the WIT types and the kernel's view
//! ([`super::view::KernelView`]); what a call *does* is decided by the
//! kernel behind it, which this module never names.

use super::view::{self as kernel, KernelView};
use super::{Limiter, Limits, explain_trap};
use wasmtime::Store;
use wasmtime::component::{Linker, Resource, ResourceTable};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

// The `step` world is the `gadget` world plus the workflow interface, so
// one linker serves plain gadgets and workflow steps alike. The generated
// items carry the WIT's own docs; bindgen's glue (the world struct, its
// `Pre`, the linker functions) has none to give, so the lint is lifted for
// the generated module alone, and its items are re-exported here.
#[allow(missing_docs)]
mod bindings {
    pub use super::{CertificateHandle, ServiceHandle};
    wasmtime::component::bindgen!({
        world: "step",
        path: "../wit",
        imports: { default: async | trappable },
        exports: { default: async },
        with: {
            "gatehouse:os/kernel.service": ServiceHandle,
            "gatehouse:os/workflow.certificate": CertificateHandle,
        },
    });
}
pub use bindings::*;

// A face (`face` interface) is looked up on a gadget's instance by name,
// beside `run`: a gadget without one instantiates exactly as before, so
// the face needs no world of its own at link time.
#[allow(missing_docs)]
mod face_bindings {
    wasmtime::component::bindgen!({
        world: "face-only",
        path: "../wit",
        exports: { default: async },
    });
}
use face_bindings::FaceOnlyIndices;

/// The generated world's name as the rest of the host knows it.
pub type Gadget = Step;
/// A gadget component linked and ready to instantiate, once per turn.
pub type GadgetPre<T> = StepPre<T>;

use self::gatehouse::os::kernel as wit;
use self::gatehouse::os::types as witt;
use self::gatehouse::os::workflow as witw;

/// The host side of a step's `certificate` resource: the signed token.
/// Only the kernel creates one, in the step's own store.
pub struct CertificateHandle {
    token: String,
    claims: crate::grants::Claims,
}

/// The host side of a `service` resource: which introduction it names.
pub struct ServiceHandle {
    key: String,
}

impl ServiceHandle {
    /// A handle naming the introduction under `key`, for an embedder's own
    /// `open` (the kernel makes its handles itself, after checking the key).
    pub fn new(key: impl Into<String>) -> ServiceHandle {
        ServiceHandle { key: key.into() }
    }

    /// The key the handle names (such as `ISSUES`).
    pub fn key(&self) -> &str {
        &self.key
    }
}

/// The `T` of a gadget's store.
pub struct GadgetState {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: Limiter,
    /// The kernel, as this turn sees it.
    kernel: Box<dyn KernelView>,
    /// Kernel calls made in this turn, against `budget` (`Limits::turn_calls`).
    calls: u32,
    budget: u32,
}

impl GadgetState {
    /// Count one call into the kernel; past the turn's budget, the refusal
    /// the gadget gets instead.
    fn charge(&mut self) -> Option<String> {
        self.calls = self.calls.saturating_add(1);
        (self.calls > self.budget).then(|| {
            format!(
                "this turn has used its budget of {} kernel calls (GATEHOUSE_TURN_CALLS), so the call was refused and nothing was asked of any service; finish the turn and carry on in a later one",
                self.budget
            )
        })
    }
}

impl WasiView for GadgetState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

pub fn linker(engine: &wasmtime::Engine) -> anyhow::Result<Linker<GadgetState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    Gadget::add_to_linker::<_, wasmtime::component::HasSelf<_>>(&mut linker, |s| s)?;
    Ok(linker)
}

/// What a turn printed and returned.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TurnReport {
    /// The gadget's answer, or why the turn failed.
    pub output: Result<String, String>,
    /// What the gadget wrote to stdout, captured and capped
    /// ([`Limits::output_bytes`](crate::Limits::output_bytes)), never printed by the host.
    pub stdout: String,
    /// What the gadget wrote to stderr, captured and capped likewise.
    pub stderr: String,
}

/// What a turn runs: the gadget's `run`, or one call of its face.
#[derive(Clone, Copy, Debug)]
pub enum Entry<'a> {
    /// `run(input)`.
    Run(&'a str),
    /// `face.call(name, args)`.
    Face {
        /// The function the page called.
        name: &'a str,
        /// Its arguments, a JSON object.
        args: &'a str,
    },
}

/// A face's page as its gadget gave it, not yet checked.
#[derive(Clone, Debug)]
pub struct RawPage {
    /// Its title.
    pub title: String,
    /// Its HTML document.
    pub html: String,
    /// The functions it may call.
    pub functions: Vec<String>,
}

/// Run one turn of a gadget: `run`, or a call of its face (a gadget
/// without one answers that it has none, and nothing runs).
pub async fn turn(
    pre: &GadgetPre<GadgetState>,
    limits: &Limits,
    kernel: Box<dyn KernelView>,
    entry: Entry<'_>,
) -> TurnReport {
    let who = format!("gadget {:?}", kernel.gadget().unwrap_or("(none)"));
    // The face is found before anything runs: a gadget without one runs
    // nothing for a face call.
    let face = match entry {
        Entry::Run(_) => None,
        Entry::Face { .. } => match FaceOnlyIndices::new(pre.instance_pre()) {
            Ok(face) => Some(face),
            Err(_) => {
                return TurnReport {
                    output: Err(format!(
                        "{who} has no face (it exports no `face` interface)"
                    )),
                    stdout: String::new(),
                    stderr: String::new(),
                };
            }
        },
    };
    let (mut store, stdout, stderr) = sandbox(pre, limits, kernel);
    let deadline = limits.gadget_deadline;
    let result = tokio::time::timeout(deadline, async {
        match (entry, face) {
            (Entry::Face { name, args }, Some(face)) => {
                let instance = pre.instance_pre().instantiate_async(&mut store).await?;
                let face = face.load(&mut store, &instance)?;
                face.gatehouse_os_face()
                    .call_call(&mut store, name, args)
                    .await
            }
            (Entry::Face { .. }, None) => Ok(Err(format!("{who} has no face"))),
            (Entry::Run(input), _) => {
                let gadget = pre.instantiate_async(&mut store).await?;
                gadget.gatehouse_os_run().call_run(&mut store, input).await
            }
        }
    })
    .await;
    let output = outcome(result, &who, limits, &store).and_then(|answer| answer);
    let text = |p: &MemoryOutputPipe| String::from_utf8_lossy(&p.contents()).into_owned();
    TurnReport {
        output,
        stdout: text(&stdout),
        stderr: text(&stderr),
    }
}

/// The gadget's face page, asked for outside any turn (`kernel` refuses
/// every call); `Ok(None)` when the gadget has no face. An `Err` says in
/// one line why its code failed to answer.
pub async fn page(
    pre: &GadgetPre<GadgetState>,
    limits: &Limits,
    kernel: Box<dyn KernelView>,
) -> Result<Option<RawPage>, String> {
    let Ok(face) = FaceOnlyIndices::new(pre.instance_pre()) else {
        return Ok(None);
    };
    let who = format!("gadget {:?}", kernel.gadget().unwrap_or("(none)"));
    let (mut store, _, _) = sandbox(pre, limits, kernel);
    let deadline = limits.gadget_deadline;
    let result = tokio::time::timeout(deadline, async {
        let instance = pre.instance_pre().instantiate_async(&mut store).await?;
        let face = face.load(&mut store, &instance)?;
        face.gatehouse_os_face().call_show(&mut store).await
    })
    .await;
    outcome(result, &who, limits, &store).map(|p| {
        Some(RawPage {
            title: p.title,
            html: p.html,
            functions: p.functions,
        })
    })
}

/// What a run of a gadget's code under its deadline came to: its answer,
/// or why there is none (a trap, explained, or the deadline).
fn outcome<T>(
    result: Result<wasmtime::Result<T>, tokio::time::error::Elapsed>,
    who: &str,
    limits: &Limits,
    store: &Store<GadgetState>,
) -> Result<T, String> {
    match result {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(e)) => Err(explain_trap(
            &e,
            who,
            limits,
            store.data().limiter.hit_memory,
        )),
        Err(_) => Err(format!(
            "{who} did not finish within {} ms and was stopped",
            limits.gadget_deadline.as_millis()
        )),
    }
}

/// A turn's store: WASI that grants nothing but captured output, the
/// turn's kernel view, the memory and table limits, the epoch deadline.
fn sandbox(
    pre: &GadgetPre<GadgetState>,
    limits: &Limits,
    kernel: Box<dyn KernelView>,
) -> (Store<GadgetState>, MemoryOutputPipe, MemoryOutputPipe) {
    let stdout = MemoryOutputPipe::new(limits.output_bytes);
    let stderr = MemoryOutputPipe::new(limits.output_bytes);
    let wasi = super::gatekeeper::powerless_wasi()
        .stdout(stdout.clone())
        .stderr(stderr.clone())
        .build();
    let state = GadgetState {
        wasi,
        table: ResourceTable::new(),
        limiter: Limiter::new(limits),
        kernel,
        calls: 0,
        budget: limits.turn_calls,
    };
    let mut store = Store::new(pre.engine(), state);
    store.limiter(|s| &mut s.limiter);
    store.set_epoch_deadline(Limits::ticks(limits.gadget_deadline));
    store.epoch_deadline_trap();
    (store, stdout, stderr)
}

/// Make a turn's sandboxed instance and drop it: what every turn pays
/// before the gadget runs. Public so that the benchmarks can weigh it
/// against a bare `InstancePre::instantiate` of the same component.
pub async fn instantiate_fresh(
    pre: &GadgetPre<GadgetState>,
    limits: &Limits,
    kernel: Box<dyn KernelView>,
) -> wasmtime::Result<()> {
    let (mut store, _, _) = sandbox(pre, limits, kernel);
    pre.instantiate_async(&mut store).await.map(drop)
}

/// A kernel failure becomes a trap of this call (it is the host's fault,
/// not the gadget's, and the gadget cannot handle it meaningfully).
fn host(e: anyhow::Error) -> wasmtime::Error {
    wasmtime::Error::from_anyhow(e)
}

fn to_wit_error(e: kernel::CallError) -> wit::CallError {
    match e {
        kernel::CallError::UnknownKey { key, known } => {
            wit::CallError::UnknownKey(wit::UnknownKey { key, known })
        }
        kernel::CallError::NotGranted { key, tool, allowed } => {
            wit::CallError::NotGranted(wit::NotGranted { key, tool, allowed })
        }
        kernel::CallError::InvalidArgs(m) => wit::CallError::InvalidArgs(m),
        kernel::CallError::Refused(m) => wit::CallError::Refused(m),
        kernel::CallError::Service(m) => wit::CallError::Service(m),
    }
}

impl wit::Host for GadgetState {
    async fn env(&mut self) -> wasmtime::Result<Vec<String>> {
        if let Some(refusal) = self.charge() {
            return Err(wasmtime::Error::msg(refusal));
        }
        self.kernel.env().await.map_err(host)
    }

    async fn open(
        &mut self,
        key: String,
    ) -> wasmtime::Result<Result<Resource<ServiceHandle>, wit::CallError>> {
        if let Some(refusal) = self.charge() {
            return Ok(Err(wit::CallError::Refused(refusal)));
        }
        match self.kernel.open(&key).await.map_err(host)? {
            Ok(()) => Ok(Ok(self.table.push(ServiceHandle { key })?)),
            Err(e) => Ok(Err(to_wit_error(e))),
        }
    }

    async fn action_result(
        &mut self,
        action_id: u64,
    ) -> wasmtime::Result<Result<wit::ActionStatus, wit::CallError>> {
        if let Some(refusal) = self.charge() {
            return Ok(Err(wit::CallError::Refused(refusal)));
        }
        let status = self.kernel.action_result(action_id).await.map_err(host)?;
        Ok(status
            .map(|s| match s {
                kernel::ActionStatus::Pending => wit::ActionStatus::Pending,
                kernel::ActionStatus::Rejected(m) => wit::ActionStatus::Rejected(m),
                kernel::ActionStatus::Failed { message, retryable } => {
                    wit::ActionStatus::Failed(wit::Failure { message, retryable })
                }
                kernel::ActionStatus::Applied(r) => wit::ActionStatus::Applied(r),
                kernel::ActionStatus::Expired(m) => wit::ActionStatus::Expired(m),
            })
            .map_err(to_wit_error))
    }

    async fn store_get(
        &mut self,
        key: String,
    ) -> wasmtime::Result<Result<Option<String>, wit::CallError>> {
        if let Some(refusal) = self.charge() {
            return Ok(Err(wit::CallError::Refused(refusal)));
        }
        let got = self.kernel.store_get(&key).await.map_err(host)?;
        Ok(got.map_err(to_wit_error))
    }

    async fn store_put(
        &mut self,
        key: String,
        value: String,
    ) -> wasmtime::Result<Result<(), wit::CallError>> {
        if let Some(refusal) = self.charge() {
            return Ok(Err(wit::CallError::Refused(refusal)));
        }
        let put = self.kernel.store_put(&key, value).await.map_err(host)?;
        Ok(put.map_err(to_wit_error))
    }

    async fn store_delete(&mut self, key: String) -> wasmtime::Result<Result<(), wit::CallError>> {
        if let Some(refusal) = self.charge() {
            return Ok(Err(wit::CallError::Refused(refusal)));
        }
        let deleted = self.kernel.store_delete(&key).await.map_err(host)?;
        Ok(deleted.map_err(to_wit_error))
    }

    async fn store_keys(&mut self) -> wasmtime::Result<Result<Vec<String>, wit::CallError>> {
        if let Some(refusal) = self.charge() {
            return Ok(Err(wit::CallError::Refused(refusal)));
        }
        let keys = self.kernel.store_keys().await.map_err(host)?;
        Ok(keys.map_err(to_wit_error))
    }
}

impl wit::HostService for GadgetState {
    async fn key(&mut self, this: Resource<ServiceHandle>) -> wasmtime::Result<String> {
        Ok(self.table.get(&this)?.key.clone())
    }

    async fn tools(
        &mut self,
        this: Resource<ServiceHandle>,
    ) -> wasmtime::Result<Vec<witt::ToolInfo>> {
        if let Some(refusal) = self.charge() {
            return Err(wasmtime::Error::msg(refusal));
        }
        let key = self.table.get(&this)?.key.clone();
        let tools = self.kernel.tools(&key).await.map_err(host)?;
        Ok(tools
            .into_iter()
            .map(|t| witt::ToolInfo {
                name: t.name,
                description: t.description,
                input_schema: t.input_schema,
                annotations: witt::Annotations {
                    read_only: t.annotations.read_only,
                    destructive: t.annotations.destructive,
                    idempotent: t.annotations.idempotent,
                    open_world: t.annotations.open_world,
                },
                reverted_by: t.reverted_by,
                honours_idempotency_key: t.honours_idempotency_key,
                title: t.title,
                output_schema: t.output_schema,
                task_support: t.task_support.map(|s| match s {
                    crate::manifest::TaskSupport::Forbidden => witt::TaskSupport::Forbidden,
                    crate::manifest::TaskSupport::Optional => witt::TaskSupport::Optional,
                    crate::manifest::TaskSupport::Required => witt::TaskSupport::Required,
                }),
            })
            .collect())
    }

    async fn call(
        &mut self,
        this: Resource<ServiceHandle>,
        tool: String,
        args: String,
    ) -> wasmtime::Result<Result<wit::Outcome, wit::CallError>> {
        if let Some(refusal) = self.charge() {
            return Ok(Err(wit::CallError::Refused(refusal)));
        }
        let key = self.table.get(&this)?.key.clone();
        let outcome = self.kernel.call(&key, &tool, args).await.map_err(host)?;
        Ok(outcome.map(to_wit_outcome).map_err(to_wit_error))
    }

    async fn drop(&mut self, this: Resource<ServiceHandle>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}

impl witt::Host for GadgetState {}

fn to_wit_outcome(o: kernel::CallOutcome) -> wit::Outcome {
    match o {
        kernel::CallOutcome::Done(r) => wit::Outcome::Done(r),
        kernel::CallOutcome::Pending(p) => wit::Outcome::Pending(wit::Pending {
            action_id: p.action_id,
            message: p.message,
            await_decision: p.await_decision,
            provisional: p.provisional,
        }),
    }
}

impl witw::Host for GadgetState {
    async fn step_certificate(&mut self) -> wasmtime::Result<Option<Resource<CertificateHandle>>> {
        let Some((token, claims)) = self.kernel.take_certificate() else {
            return Ok(None);
        };
        Ok(Some(self.table.push(CertificateHandle { token, claims })?))
    }

    async fn request_approval(
        &mut self,
        allowed_calls: String,
        reason: String,
    ) -> wasmtime::Result<Result<u64, String>> {
        if let Some(refusal) = self.charge() {
            return Ok(Err(refusal));
        }
        self.kernel
            .request_approval(&allowed_calls, &reason)
            .await
            .map_err(host)
    }
}

impl witw::HostCertificate for GadgetState {
    async fn run(&mut self, this: Resource<CertificateHandle>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&this)?.claims.run.max(0) as u64)
    }

    async fn step(&mut self, this: Resource<CertificateHandle>) -> wasmtime::Result<String> {
        Ok(self.table.get(&this)?.claims.step.clone())
    }

    async fn authority(&mut self, this: Resource<CertificateHandle>) -> wasmtime::Result<String> {
        Ok(self.table.get(&this)?.claims.authority.clone())
    }

    async fn tools(&mut self, this: Resource<CertificateHandle>) -> wasmtime::Result<Vec<String>> {
        Ok(self.table.get(&this)?.claims.tools.clone())
    }

    async fn expires_at(&mut self, this: Resource<CertificateHandle>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&this)?.claims.expires_at.max(0) as u64)
    }

    async fn encoded(&mut self, this: Resource<CertificateHandle>) -> wasmtime::Result<String> {
        Ok(self.table.get(&this)?.token.clone())
    }

    async fn call(
        &mut self,
        this: Resource<CertificateHandle>,
        svc: Resource<ServiceHandle>,
        tool: String,
        args: String,
    ) -> wasmtime::Result<Result<wit::Outcome, wit::CallError>> {
        if let Some(refusal) = self.charge() {
            return Ok(Err(wit::CallError::Refused(refusal)));
        }
        let token = self.table.get(&this)?.token.clone();
        let key = self.table.get(&svc)?.key.clone();
        let outcome = self
            .kernel
            .certified_call(&token, &key, &tool, args)
            .await
            .map_err(host)?;
        Ok(outcome.map(to_wit_outcome).map_err(to_wit_error))
    }

    async fn drop(&mut self, this: Resource<CertificateHandle>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}
