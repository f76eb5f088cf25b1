//! Kernel benchmarks. Every figure has a baseline measured in the same run,
//! so results are read as ratios (these machines are shared and noisy).
//!
//! - `read/*`: a gadget turn of 50 reads through the kernel, against the
//!   same `script` gadget whose `service.call` import is wired straight to
//!   the same gatekeeper with no mediation (no introduction lookup, no
//!   classification, no observation record). Also per call, from the host.
//!   The bare host is built only from `gatehouse::embed` (its own runtime),
//!   never from the kernel's internals.
//! - `stage/*`: staging an action (and the whole action path of a call)
//!   against a bare SQLite INSERT+COMMIT at the same `synchronous` setting.
//! - `instantiate/*`: a fresh gadget instance per turn, pooling allocator
//!   vs on-demand allocation.
//! - `admission/*`: the nesting walk every component gets before it is
//!   compiled (issue 12), against compiling the same component.
//!
//! Run: `cargo bench -p gatehouse-e2e`.

use criterion::{Criterion, criterion_group, criterion_main};
use gatehouse::embed::gadget::{CertificateHandle, GadgetPre, ServiceHandle};
use gatehouse::embed::gadget::{kernel as wit, types as witt, workflow as witw};
use gatehouse::embed::gatekeeper::{self as gk, GatekeeperPre, GatekeeperState, Reach};
use gatehouse::embed::{Role, Runtime};
use gatehouse::kernel::Turn;
use gatehouse::store::Trust;
use gatehouse::{Limits, Principal};
use gatehouse_e2e::{World, guest};
use serde_json::json;
use std::time::{Duration, Instant};
use wasmtime::Store;
use wasmtime::component::{Component, HasSelf, Linker, Resource, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

const READS_PER_TURN: usize = 50;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A world with `script` installed and `rogue` introduced as ROGUE in
/// chat `bench`.
fn world(rt: &tokio::runtime::Runtime, limits: Limits) -> World {
    let w = World::with_limits(limits);
    w.install("script");
    rt.block_on(w.add_gatekeeper("rogue", "rogue", Trust::Byo));
    w.kernel.new_chat("bench", "bench").expect("chat");
    w.kernel
        .introduce("bench", "rogue", "ROGUE", None, "bench")
        .expect("introduce");
    w
}

fn reads_script() -> String {
    let step = json!({"call": {"key": "ROGUE", "tool": "echo", "args": {"n": 1}}});
    json!({ "steps": vec![step; READS_PER_TURN] }).to_string()
}

/// The unmediated wiring: the gadget's import calls the gatekeeper directly.
struct Direct {
    wasi: WasiCtx,
    table: ResourceTable,
    gatekeeper: GatekeeperPre<GatekeeperState>,
    limits: Limits,
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
}

impl wit::HostService for Direct {
    async fn key(&mut self, this: Resource<ServiceHandle>) -> wasmtime::Result<String> {
        Ok(self.table.get(&this)?.key().to_owned())
    }
    async fn tools(
        &mut self,
        _this: Resource<ServiceHandle>,
    ) -> wasmtime::Result<Vec<witt::ToolInfo>> {
        Ok(Vec::new())
    }
    async fn call(
        &mut self,
        _this: Resource<ServiceHandle>,
        tool: String,
        args: String,
    ) -> wasmtime::Result<Result<wit::Outcome, wit::CallError>> {
        let called = unmediated_call(&self.gatekeeper, &self.limits, tool, args).await;
        Ok(match called.outcome {
            Ok(Ok(out)) => Ok(wit::Outcome::Done(out.result)),
            _ => Err(wit::CallError::Service("failed".into())),
        })
    }
    async fn drop(&mut self, this: Resource<ServiceHandle>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}

/// A gatekeeper call with nothing around it: no store, no policy.
async fn unmediated_call(
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
    };
    let reach = Reach::nowhere();
    gk::call(pre, limits, "rogue", reach, invocation).await
}

async fn direct_turn(
    pre: &GadgetPre<Direct>,
    gatekeeper: &GatekeeperPre<GatekeeperState>,
    limits: &Limits,
    input: &str,
) -> String {
    let state = Direct {
        wasi: WasiCtx::builder().build(),
        table: ResourceTable::new(),
        gatekeeper: gatekeeper.clone(),
        limits: limits.clone(),
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

fn bench_reads(c: &mut Criterion) {
    let rt = runtime();
    let w = world(&rt, Limits::default());
    let input = reads_script();

    // The bare host: its own runtime (same engine settings), no kernel.
    let scratch = tempfile::tempdir().unwrap();
    let bare = Runtime::new(scratch.path().to_owned(), Limits::default()).expect("a runtime");
    let engine = bare.engine().clone();
    let mut linker: Linker<Direct> = Linker::new(&engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).expect("wasi");
    gatehouse::embed::gadget::Gadget::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)
        .expect("kernel interface");
    let component = Component::from_file(&engine, guest("script")).expect("script compiles");
    let pre = GadgetPre::new(linker.instantiate_pre(&component).expect("links")).expect("exports");
    let rogue = std::fs::read(guest("rogue")).expect("rogue built");
    let digest = bare
        .admit(&rogue, Role::Gatekeeper, &|_| {})
        .expect("rogue admitted");
    let gk_pre = bare.gatekeeper(&digest).expect("gatekeeper loads");
    let limits = Limits::default();

    // Both paths answer the same thing.
    let direct = rt.block_on(direct_turn(&pre, &gk_pre, &limits, &input));
    let mediated = rt
        .block_on(w.kernel.run("script", "bench", &input))
        .unwrap();
    assert_eq!(Ok(direct), mediated.output);

    let mut group = c.benchmark_group("read");
    group.sample_size(20);
    group.bench_function("turn_of_50_reads/unmediated", |b| {
        b.iter(|| rt.block_on(direct_turn(&pre, &gk_pre, &limits, &input)))
    });
    group.bench_function("turn_of_50_reads/kernel", |b| {
        b.iter(|| {
            rt.block_on(w.kernel.run("script", "bench", &input))
                .unwrap()
        })
    });

    let turn = Turn::new("script", "bench", Principal::person("bench"));
    group.bench_function("one_call_from_host/unmediated", |b| {
        b.iter(|| {
            rt.block_on(unmediated_call(
                &gk_pre,
                &limits,
                "echo".into(),
                r#"{"n":1}"#.into(),
            ))
        })
    });
    group.bench_function("one_call_from_host/kernel", |b| {
        b.iter(|| {
            rt.block_on(w.kernel.call(&turn, "ROGUE", "echo", r#"{"n":1}"#.into()))
                .unwrap()
        })
    });
    group.finish();
}

fn bench_stage(c: &mut Criterion) {
    let rt = runtime();
    let w = world(&rt, Limits::default());

    // The baseline: one row, one transaction, same file settings.
    let dir = tempfile::tempdir().unwrap();
    let bare = rusqlite::Connection::open(dir.path().join("bare.db")).unwrap();
    bare.pragma_update(None, "journal_mode", "WAL").unwrap();
    bare.pragma_update(None, "synchronous", "NORMAL").unwrap();
    bare.execute_batch(
        "CREATE TABLE t (id INTEGER PRIMARY KEY, chat TEXT, tool TEXT, args TEXT, state TEXT) STRICT",
    )
    .unwrap();

    let mut group = c.benchmark_group("stage");
    group.bench_function("bare_insert_commit", |b| {
        b.iter(|| {
            bare.execute(
                "INSERT INTO t (chat, tool, args, state) VALUES ('bench', 'bigResult', '{\"kib\":0}', 'pending')",
                [],
            )
            .unwrap()
        })
    });
    // Each staged action is rejected, untimed, to stay under the cap of 50.
    let turn = Turn::new("script", "bench", Principal::person("bench"));
    group.bench_function("kernel_call_to_pending", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                let out = rt
                    .block_on(
                        w.kernel
                            .call(&turn, "ROGUE", "bigResult", r#"{"kib":0}"#.into()),
                    )
                    .unwrap();
                total += t.elapsed();
                let Ok(gatehouse::kernel::CallOutcome::Pending(p)) = out else {
                    panic!("expected pending")
                };
                rt.block_on(w.kernel.reject(p.action_id as i64, "bench"))
                    .unwrap();
            }
            total
        })
    });
    group.finish();
}

fn bench_instantiate(c: &mut Criterion) {
    let rt = runtime();
    let empty = r#"{"steps":[]}"#;
    let mut group = c.benchmark_group("instantiate");
    for pooling in [true, false] {
        let w = world(
            &rt,
            Limits {
                pooling,
                ..Limits::default()
            },
        );
        // Warm the in-memory component cache.
        rt.block_on(w.kernel.run("script", "bench", empty)).unwrap();
        let name = if pooling {
            "gadget_turn/pooled"
        } else {
            "gadget_turn/on_demand"
        };
        group.bench_function(name, |b| {
            b.iter(|| rt.block_on(w.kernel.run("script", "bench", empty)).unwrap())
        });
    }
    group.finish();
}

/// `grant/*` (SPEC G5): a covered workflow step of 50 reads, each checked
/// against its certificate and the approved allowed-calls list, against a
/// plain turn of the same 50 reads. Each iteration of the covered side is a
/// whole run (its chat, its step, its certificate), amortised over the 50
/// reads.
fn bench_grants(c: &mut Criterion) {
    use gatehouse::workflow::RequestDecision;
    let rt = runtime();
    let w = world(&rt, Limits::default());
    let k = &w.kernel;
    let step = json!({"certcall": {"key": "ROGUE", "tool": "echo", "args": {"n": 1}}});
    let reads = json!({ "steps": vec![step; READS_PER_TURN] }).to_string();
    let ask = json!({"steps": [{"request": {"allowed": {}, "reason": "echo"}}]}).to_string();
    let design = json!({
        "name": "bench",
        "services": {"ROGUE": "rogue"},
        "steps": [
            {"id": "ask", "gadget": "script", "input": ask},
            {"id": "work", "gadget": "script", "tools": ["ROGUE:echo"], "input": reads}
        ],
        "edges": [["ask", "work"]]
    });
    k.publish_workflow(design.to_string().as_bytes(), "bench")
        .unwrap();
    let run_once = || {
        rt.block_on(async {
            let s = k.start_workflow("bench", None, "bench", &[]).await.unwrap();
            let request = s.requests[0].id;
            let s = k
                .decide_request(request, RequestDecision::Approve, "bench")
                .await
                .unwrap();
            assert_eq!(s.state, "done");
        })
    };
    run_once();
    let input = reads_script();
    let mut group = c.benchmark_group("grant");
    group.sample_size(10);
    group.bench_function("turn_of_50_reads/plain", |b| {
        b.iter(|| rt.block_on(k.run("script", "bench", &input)).unwrap())
    });
    group.bench_function("run_with_a_covered_step_of_50_reads", |b| b.iter(run_once));
    group.finish();
}

/// `admission/*`: the iterative nesting walk (`runtime::nesting::check`)
/// against the compile it guards, on a small gadget and on the largest Rust
/// guest (`bloated`, 2.5 MiB).
fn bench_admission(c: &mut Criterion) {
    let engine = wasmtime::Engine::default();
    let mut group = c.benchmark_group("admission");
    group.sample_size(10);
    for name in ["script", "bloated"] {
        let bytes = std::fs::read(guest(name)).expect("guest built");
        gatehouse::embed::check_nesting(&bytes).expect("a real guest passes");
        group.bench_function(format!("{name}/nesting_check"), |b| {
            b.iter(|| gatehouse::embed::check_nesting(&bytes).unwrap())
        });
        group.bench_function(format!("{name}/compile"), |b| {
            b.iter(|| engine.precompile_component(&bytes).unwrap())
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    bench_reads,
    bench_stage,
    bench_instantiate,
    bench_grants,
    bench_admission
);
criterion_main!(benches);
