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
//!   compiled (so that no nesting can overflow the compiler's stack),
//!   against compiling the same component.
//!
//! Run: `cargo bench -p gatehouse-e2e`.

use criterion::{Criterion, criterion_group, criterion_main};
use gatehouse::kernel::Turn;
use gatehouse::store::Trust;
use gatehouse::{Limits, Principal};
use gatehouse_e2e::bare::{Bare, direct_turn, unmediated_call};
use gatehouse_e2e::{World, guest};
use serde_json::json;
use std::time::{Duration, Instant};

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
    w.kernel.person("bench").new_chat("bench").expect("chat");
    w.kernel
        .person("bench")
        .introduce("bench", "rogue", "ROGUE", None)
        .expect("introduce");
    w
}

fn reads_script() -> String {
    let step = json!({"call": {"key": "ROGUE", "tool": "echo", "args": {"n": 1}}});
    json!({ "steps": vec![step; READS_PER_TURN] }).to_string()
}

fn bench_reads(c: &mut Criterion) {
    let rt = runtime();
    let w = world(&rt, Limits::default());
    let input = reads_script();

    // The bare host: its own runtime (same engine settings), no kernel.
    let bare = Bare::new("script", "rogue", Limits::default());
    let (pre, gk_pre, limits) = (&bare.gadget, &bare.gatekeeper, &bare.limits);

    // Both paths answer the same thing.
    let direct = rt.block_on(direct_turn(pre, gk_pre, limits, &input, None));
    let mediated = rt
        .block_on(w.kernel.operator().run("script", "bench", &input))
        .unwrap();
    assert_eq!(Ok(direct), mediated.output);

    let mut group = c.benchmark_group("read");
    group.sample_size(20);
    group.bench_function("turn_of_50_reads/unmediated", |b| {
        b.iter(|| rt.block_on(direct_turn(pre, gk_pre, limits, &input, None)))
    });
    group.bench_function("turn_of_50_reads/kernel", |b| {
        b.iter(|| {
            rt.block_on(w.kernel.operator().run("script", "bench", &input))
                .unwrap()
        })
    });

    let turn = Turn::new("script", "bench", Principal::person("bench"));
    group.bench_function("one_call_from_host/unmediated", |b| {
        b.iter(|| {
            rt.block_on(unmediated_call(
                gk_pre,
                limits,
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
                rt.block_on(w.kernel.person("bench").reject(p.action_id as i64))
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
        rt.block_on(w.kernel.operator().run("script", "bench", empty))
            .unwrap();
        let name = if pooling {
            "gadget_turn/pooled"
        } else {
            "gadget_turn/on_demand"
        };
        group.bench_function(name, |b| {
            b.iter(|| {
                rt.block_on(w.kernel.operator().run("script", "bench", empty))
                    .unwrap()
            })
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
    k.person("bench")
        .publish_workflow(design.to_string().as_bytes())
        .unwrap();
    let run_once = || {
        rt.block_on(async {
            let s = k
                .person("bench")
                .start_workflow("bench", None, &[])
                .await
                .unwrap();
            let request = s.requests[0].id;
            let s = k
                .person("bench")
                .decide_request(request, RequestDecision::Approve)
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
        b.iter(|| {
            rt.block_on(k.operator().run("script", "bench", &input))
                .unwrap()
        })
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
