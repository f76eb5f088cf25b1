//! The same gadget in three languages, side by side: the Rust `triage`,
//! `triage-py` (componentize-py) and `triage-js` (componentize-js). Every
//! figure for Python and JavaScript is read as a ratio to Rust's, measured
//! in the same run (these machines are shared and noisy).
//!
//! - `install/*`: `Runtime::admit` into an empty cache: header check,
//!   Cranelift compile, artifact written with its checksum, exports checked,
//!   imports linked. What `gatehouse install` costs the first time.
//! - `load_from_cache/*`: a fresh runtime loading the installed component:
//!   artifact read, checksum verified, deserialised, linked. What every
//!   later `gatehouse run` process pays before the turn.
//! - `instantiate/*`: a fresh instance (the kernel makes one per turn), with
//!   the pooling allocator.
//! - `warm_call/*`: one `run("poll 1")` on a live instance: the language's
//!   call overhead plus one kernel import (answered by a stub here).
//!
//! Run: `cargo bench -p gatehouse-e2e --bench languages` (needs the
//! toolchains of tools/langs/setup.sh).

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use gatehouse::Limits;
use gatehouse::embed::gadget::{GadgetPre, ServiceHandle};
use gatehouse::embed::gadget::{kernel as wit, types as witt};
use gatehouse::embed::{Role, Runtime};
use gatehouse_e2e::{guest, langs};
use std::path::PathBuf;
use std::time::Duration;
use wasmtime::Store;
use wasmtime::component::{Component, HasSelf, Linker, Resource, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// A gadget's store with the kernel stubbed: no service is introduced and
/// every action id is unknown. Enough for `poll`, which is all we time.
struct Stub {
    wasi: WasiCtx,
    table: ResourceTable,
}

impl WasiView for Stub {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl witt::Host for Stub {}

impl wit::Host for Stub {
    async fn env(&mut self) -> wasmtime::Result<Vec<String>> {
        Ok(Vec::new())
    }
    async fn open(
        &mut self,
        key: String,
    ) -> wasmtime::Result<Result<Resource<ServiceHandle>, wit::CallError>> {
        Ok(Err(wit::CallError::UnknownKey(wit::UnknownKey {
            key,
            known: Vec::new(),
        })))
    }
    async fn action_result(
        &mut self,
        _id: u64,
    ) -> wasmtime::Result<Result<wit::ActionStatus, wit::CallError>> {
        Ok(Err(wit::CallError::Refused("no such action".into())))
    }
    gatehouse_e2e::storeless_gadget_store!();
}

impl wit::HostService for Stub {
    gatehouse_e2e::plain_service_handle!();
    async fn call(
        &mut self,
        _this: Resource<ServiceHandle>,
        _tool: String,
        _args: String,
    ) -> wasmtime::Result<Result<wit::Outcome, wit::CallError>> {
        Ok(Err(wit::CallError::Refused("stub".into())))
    }
}

fn stub_store(engine: &wasmtime::Engine) -> Store<Stub> {
    let mut store = Store::new(
        engine,
        Stub {
            wasi: WasiCtx::builder().build(),
            table: ResourceTable::new(),
        },
    );
    store.set_epoch_deadline(1_000_000);
    store
}

/// One language's gadget, installed once into `cache`.
struct Subject {
    label: &'static str,
    bytes: Vec<u8>,
    cache: tempfile::TempDir,
    digest: String,
}

fn subjects() -> Vec<Subject> {
    let built: [(&'static str, PathBuf); 3] = [
        ("rust", guest("triage")),
        ("python", langs::guest("triage-py")),
        ("javascript", langs::guest("triage-js")),
    ];
    built
        .into_iter()
        .map(|(label, path)| {
            let bytes = std::fs::read(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            let cache = tempfile::tempdir().expect("a temporary directory");
            let runtime =
                Runtime::new(cache.path().to_owned(), Limits::default()).expect("a runtime");
            let digest = runtime
                .admit(&bytes, Role::Gadget, &|_| {})
                .unwrap_or_else(|e| panic!("{label} is refused: {e:#}"));
            let compiled: u64 = std::fs::read_dir(cache.path())
                .expect("the cache lists")
                .flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
                .filter_map(|e| e.metadata().ok().map(|m| m.len()))
                .sum();
            eprintln!(
                "{label}: {} KiB component, {} KiB compiled",
                bytes.len() / 1024,
                compiled / 1024
            );
            Subject {
                label,
                bytes,
                cache,
                digest,
            }
        })
        .collect()
}

fn bench_languages(c: &mut Criterion) {
    let subjects = subjects();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");

    let mut group = c.benchmark_group("install");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    for s in &subjects {
        group.bench_function(s.label, |b| {
            b.iter_batched(
                || {
                    let dir = tempfile::tempdir().expect("a temporary directory");
                    let runtime =
                        Runtime::new(dir.path().to_owned(), Limits::default()).expect("runtime");
                    (dir, runtime)
                },
                |(dir, runtime)| {
                    runtime
                        .admit(&s.bytes, Role::Gadget, &|_| {})
                        .expect("admitted");
                    (dir, runtime)
                },
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();

    let mut group = c.benchmark_group("load_from_cache");
    group.sample_size(20);
    for s in &subjects {
        group.bench_function(s.label, |b| {
            b.iter_batched(
                || Runtime::new(s.cache.path().to_owned(), Limits::default()).expect("runtime"),
                |runtime| {
                    runtime.gadget(&s.digest).expect("loaded");
                    runtime
                },
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();

    // The same engine configuration as the kernel's, from a kernel runtime.
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let host = Runtime::new(scratch.path().to_owned(), Limits::default()).expect("runtime");
    let engine = host.engine().clone();
    let mut linker: Linker<Stub> = Linker::new(&engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).expect("wasi links");
    // Only the `gadget` world's interfaces: these gadgets ask for no workflow.
    witt::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).expect("types link");
    wit::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).expect("kernel links");
    let pres: Vec<(&str, GadgetPre<Stub>)> = subjects
        .iter()
        .map(|s| {
            let component = Component::new(&engine, &s.bytes).expect("compiles");
            let pre = linker.instantiate_pre(&component).expect("links");
            (s.label, GadgetPre::new(pre).expect("a gadget"))
        })
        .collect();

    let mut group = c.benchmark_group("instantiate");
    for (label, pre) in &pres {
        group.bench_function(*label, |b| {
            b.iter(|| {
                rt.block_on(async {
                    let mut store = stub_store(&engine);
                    pre.instantiate_async(&mut store).await.expect("instance");
                })
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("warm_call");
    for (label, pre) in &pres {
        let mut store = stub_store(&engine);
        let gadget = rt
            .block_on(pre.instantiate_async(&mut store))
            .expect("instance");
        let answer = rt
            .block_on(gadget.gatehouse_os_run().call_run(&mut store, "poll 1"))
            .expect("no trap");
        assert_eq!(
            answer.as_deref(),
            Ok("#1 error: refused: no such action"),
            "{label}"
        );
        group.bench_function(*label, |b| {
            b.iter(|| {
                rt.block_on(gadget.gatehouse_os_run().call_run(&mut store, "poll 1"))
                    .expect("no trap")
                    .expect("answered")
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_languages);
criterion_main!(benches);
