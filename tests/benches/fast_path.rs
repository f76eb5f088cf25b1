//! The fast path: every kernel figure beside its baseline, measured in the
//! same run and alternated with it, so that a ratio never depends on the
//! machine's noise. Prints one table.
//!
//! | row | kernel | baseline | goal |
//! |---|---|---|---|
//! | read (turn of 50) | a `script` turn of 50 `echo` reads through the kernel, each recorded | the same turn on the bare forwarding host (`gatehouse_e2e::bare`) plus 50 bare WAL commits | ≤ 1.5× |
//! | read (one, from host) | `Kernel::call` of `echo` | the gatekeeper called bare, plus one bare WAL commit | ≤ 1.5× |
//! | read vs Extism | `Kernel::call` of `echo` | the Extism peer's plugin → host → plugin round trip, both plugins live (`tests/peers/extism`, when `GATEHOUSE_EXTISM_PEER` names it) | < 1× |
//! | the read's baseline vs Extism (no goal) | the bare host's call plus one bare WAL commit | the Extism round trip | shows the floor of the Extism row |
//! | one bare WAL commit vs Extism (no goal) | one bare WAL commit (`synchronous=NORMAL`) | the Extism round trip | shows what O1's commit alone costs against it |
//! | stage | `Kernel::call` of a write to `pending`, durable | one bare INSERT+COMMIT at `synchronous=FULL` | ≤ 1.2× |
//! | stage vs its own row (no goal) | the same stage | that stage's ledger row, inserted and committed bare at FULL in a copy of the kernel's file | shows the row's share |
//! | its own row vs the bare row (no goal) | that row, committed bare | the stage row's bare commit | shows the floor of the stage row |
//! | stage, time on a CPU only (no goal) | the same stage, timed by the calling thread's time on a CPU (`/proc/thread-self/schedstat`: its system calls in, the wait for the disk out) | the bare commit, timed the same way | shows the kernel's work apart from the disk's |
//! | its own row vs without its facts (no goal) | that row, committed bare | the same row with no facts, committed bare | shows the facts' share |
//! | stage ×64 | 64 concurrent stagers in 64 chats, actions/s (the median of five rounds) | bare FULL commits/s, one per row (likewise) | ≥ 2× (throughput) |
//! | turn 1 read + 3 writes | p50 of a whole gadget turn | the same turn on the bare host, one observation commit and three rows, the last fsynced (the floor, reported beside it) | < 0.5 ms |
//! | turn, writes key one allows | the same turn, its writes of a vetted gatekeeper's auto-approvable tool, no rule enabled | — | < 0.5 ms |
//! | stage, 50,000 pending | staging with 1,000 chats × 50 pending stored | staging in an empty store | ≤ 1.2× |
//! | drain 10,000 | auto-approving 10,000 actions (the median of three) | auto-approving 1,000 (the median of five, alternated with the large ones) | ≤ 10.5× |
//! | gatekeeper instance | the kernel's sandboxed fresh instance | a bare pooled `InstancePre::instantiate` (WASI + HTTP, nothing else) | ≤ 1.3× |
//! | gadget instance | the kernel's sandboxed turn instance | a bare pooled `InstancePre::instantiate` | ≤ 1.3× |
//! | cached load (Python, JavaScript; measured after every durable row) | `Runtime::gadget` of an installed component in a fresh runtime | `Component::deserialize_file` of the same artifact | ≤ 2× |
//! | start-up, 1 GB database (measured last) | `gatehouse gadgets` (the real binary) on a 1 GB state database | the same on a fresh one | ≤ 1.2× |
//!
//! Run: `cargo bench --workspace --bench fast_path` (about 3 minutes).
//! `FAST_PATH_QUICK=1` runs fewer rounds (a smoke run); `FAST_PATH_ROUNDS=n`
//! sets the rounds; `FAST_PATH_ONLY=reads` stops after the read rows (the
//! noisiest ratios, worth many rounds), `FAST_PATH_ONLY=stages` runs only
//! the two staging rows, `FAST_PATH_ONLY=stage` only the one durable stage
//! against the bare commit (so that a tracer of fsyncs sees no group
//! commit of the 64 stagers), `FAST_PATH_ONLY=turn` only the turn rows,
//! `FAST_PATH_ONLY=drain` only the drain.
//! `FAST_PATH_PROFILE=read|reads|stage|stage64|turn` runs only that kernel loop, many
//! times and without a baseline, for a profiler
//! (`valgrind --tool=callgrind target/release/deps/fast_path-*`);
//! `FAST_PATH_PROFILE=bare-read|bare-reads|bare-stage|bare-turn` runs the
//! baseline of that row the same way, for a profile beside the kernel's.

use gatehouse::embed::gadget::instantiate_fresh as gadget_instance;
use gatehouse::embed::gatekeeper::instantiate_fresh as gatekeeper_instance;
use gatehouse::embed::{Role, Runtime};
use gatehouse::kernel::{CallOutcome, Turn};
use gatehouse::store::Trust;
use gatehouse::{Kernel, Limits, Principal};
use gatehouse_e2e::bare::{Bare, BareGatekeeper, unmediated_call};
use gatehouse_e2e::{World, cli_command, guest, langs};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() {
    let quick = std::env::var_os("FAST_PATH_QUICK").is_some();
    let rounds = std::env::var("FAST_PATH_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(if quick { 3 } else { 15 });
    let only = std::env::var("FAST_PATH_ONLY").unwrap_or_default();
    let (only_reads, only_stage) = (only == "reads", only == "stage");
    let only_stages = only == "stages" || only_stage;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut table = Table::default();

    if only == "drain" {
        // Its own worlds: nothing else to build.
        drain(&rt, quick, &mut table);
        table.print();
        return;
    }
    let w = world(&rt, "bench");
    let bare = Bare::new("script", "rogue", Limits::default());
    let baseline_db = Arc::new(BareDb::new());
    let turn = Turn::new("script", "bench", Principal::person("bench"));
    warm(&rt, &w, &turn);
    if let Ok(what) = std::env::var("FAST_PATH_PROFILE") {
        profile(&rt, &w, &turn, &bare, &baseline_db, &what);
        return;
    }
    if only == "turn" {
        turn_row(&rt, &w, &bare, &baseline_db, quick, &mut table);
        table.print();
        return;
    }

    if !only_stages {
        // Read: a turn of 50, and one call from the host.
        let reads = fifty_reads();
        let kernel_turn = || {
            let report = rt
                .block_on(w.kernel.operator().run("script", "bench", &reads))
                .expect("turn");
            assert!(report.output.is_ok(), "{:?}", report.output);
        };
        let bare_turn = || bare_reads(&rt, &bare, &baseline_db, &reads);
        kernel_turn();
        let (k, b) = alternate(rounds, 5, kernel_turn, bare_turn);
        table.ratio(
            "read, turn of 50 (per read)",
            k / 50.0,
            b / 50.0,
            "≤ 1.5×",
            1.5,
        );

        let kernel_read = || {
            let out = rt
                .block_on(w.kernel.call(&turn, "ROGUE", "echo", r#"{"n":1}"#.into()))
                .expect("read");
            assert!(matches!(out, Ok(CallOutcome::Done(_))), "{out:?}");
        };
        let bare_read = || bare_read(&rt, &bare, &baseline_db);
        let peer_before = extism_peer(rounds);
        let (k, b) = alternate(rounds, 50, kernel_read, bare_read);
        table.ratio("read, one from the host", k, b, "≤ 1.5×", 1.5);
        // The peer, run before and after in the same session; its faster run
        // is the bar (the comparison that favours the peer).
        if let Some(extism) = peer_before
            .into_iter()
            .chain(extism_peer(rounds))
            .reduce(f64::min)
        {
            table.ratio(
                "read vs an Extism plugin → host → plugin round trip",
                k,
                extism,
                "< 1× (faster)",
                1.0,
            );
            // What any read that keeps SPEC O1 (its observation committed
            // before its data) on a fresh gatekeeper instance per call
            // (DESIGN) costs before the kernel's own work, against the
            // same round trip: the read's own baseline, and its commit
            // alone.
            let (commit, _) = alternate(rounds, 50, || baseline_db.commit_observation(), || {});
            table.beside(
                "the read's baseline (bare host + bare WAL commit) vs Extism",
                b,
                extism,
                "no goal: the floor of the Extism row",
            );
            table.beside(
                "one bare WAL commit alone vs Extism",
                commit,
                extism,
                "no goal: O1's commit alone",
            );
        }

        if only_reads {
            table.print();
            return;
        }
    }

    if !only_stages {
        // A fresh instance: the kernel's sandbox (limits, powerless WASI,
        // egress hooks, deadline) against a bare instantiate, one engine.
        let bare_gatekeeper = BareGatekeeper::new(&bare.runtime, "rogue");
        let (k, b) = alternate(
            rounds,
            200,
            || {
                rt.block_on(gatekeeper_instance(&bare.gatekeeper, &bare.limits))
                    .expect("a gatekeeper instance")
            },
            || rt.block_on(bare_gatekeeper.instantiate()),
        );
        table.ratio("gatekeeper instance, fresh", k, b, "≤ 1.3×", 1.3);
        let script = std::fs::read(guest("script")).expect("the script gadget is built");
        let script = bare
            .runtime
            .admit(&script, Role::Gadget, &|_| {})
            .expect("script is admitted");
        let script = bare.runtime.gadget(&script).expect("script loads");
        let (k, b) = alternate(
            rounds,
            200,
            || {
                rt.block_on(gadget_instance(
                    &script,
                    &bare.limits,
                    Box::new(w.kernel.view(turn.clone())),
                ))
                .expect("a gadget instance")
            },
            || rt.block_on(bare.instantiate_gadget()),
        );
        table.ratio("gadget instance, fresh", k, b, "≤ 1.3×", 1.3);
    }
    // Stage, durable, against a durable bare commit. Spread over 20 chats
    // to stay under the cap of 50 each; rejected afterwards, untimed.
    let stage_turns = stage_turns(&w, "s", 20);
    let mut staged = Vec::new();
    let (k, b) = alternate(
        rounds,
        20,
        || stage_next(&rt, &w.kernel, &stage_turns, &mut staged),
        || baseline_db.commit_durable(),
    );
    table.ratio("stage (synchronous=FULL)", k, b, "≤ 1.2×", 1.2);
    // How much of that is the ledger's row itself: a row the kernel just
    // staged, inserted and committed bare at FULL into a copy of the
    // kernel's file (its columns and their CHECKs, its index, its page
    // size), beside the same stage. No goal: it shows what of the stage
    // is the row a stage must keep, and what is the kernel's own.
    let row = SameRow::of(&w, staged[0], Facts::Kept);
    let without_facts = SameRow::of(&w, staged[0], Facts::Left);
    reject(&rt, &w.kernel, &std::mem::take(&mut staged));
    let (k, b) = stages_beside(&rt, &w.kernel, &stage_turns, Clock::Wall, rounds, || {
        row.commit()
    });
    table.beside(
        "stage vs its own ledger row committed bare (FULL)",
        k,
        b,
        "no goal: the row's share of the stage row",
    );
    // The row alone against the bare row of the stage row: what a stage
    // costs before any work of the kernel's, on this machine.
    let (own, bare_row) = alternate(rounds, 20, || row.commit(), || baseline_db.commit_durable());
    table.beside(
        "its own row vs the bare row (both bare, FULL)",
        own,
        bare_row,
        "no goal: the floor of the stage row",
    );
    // The stage row again, timing only the calling thread's time on a CPU
    // (its system calls included, the wait for the disk not): the kernel's
    // own work, apart from how long the disk takes with what it commits.
    let (k, b) = stages_beside(&rt, &w.kernel, &stage_turns, Clock::OnCpu, rounds, || {
        baseline_db.commit_durable()
    });
    table.beside(
        "stage vs bare commit, time on a CPU only (FULL)",
        k,
        b,
        "no goal: the kernel's work without the disk's wait",
    );
    // And what of that row is its facts (SPEC P7: about 370 of its 590
    // bytes, four fingerprints with their names): the same row committed
    // without them, beside it.
    let (with, without) = alternate(rounds, 20, || row.commit(), || without_facts.commit());
    table.beside(
        "its own row vs that row without its facts (bare, FULL)",
        with,
        without,
        "no goal: the facts' share of the row",
    );
    if only_stage {
        table.print();
        return;
    }

    // 64 concurrent stagers in 64 chats.
    let chats = stage_chats(&w, "c", 64);
    let per_chat = if quick { 10 } else { 40 };
    // Five rounds of the 64 stagers, then the bare commits, and the median
    // rate of each: a round lasts a few tens of milliseconds, and a moment
    // of the machine's noise in a round timed once moved the ratio from
    // 5× to 2×.
    let (mut kernel_rates, mut bare_rates) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let started = Instant::now();
        let ids = stage_concurrently(&rt, &w.kernel, &chats, per_chat);
        kernel_rates.push(ids.len() as f64 / started.elapsed().as_secs_f64());
        reject(&rt, &w.kernel, &ids);
        let n = 200;
        let started = Instant::now();
        for _ in 0..n {
            baseline_db.commit_durable();
        }
        bare_rates.push(n as f64 / started.elapsed().as_secs_f64());
    }
    table.throughput(
        "stage ×64 concurrent (actions/s)",
        median_rate(&mut kernel_rates),
        median_rate(&mut bare_rates),
        "≥ 2×",
        2.0,
    );
    if only_stages {
        table.print();
        return;
    }

    turn_row(&rt, &w, &bare, &baseline_db, quick, &mut table);

    // Staging with 1,000 chats × 50 pending already stored.
    let (c, p) = if quick { (100, 50) } else { (1000, 50) };
    let full = full_world(&rt, c, p);
    let turn_full = Turn::new("script", "bench", Principal::person("bench"));
    let empty = world(&rt, "bench");
    let (mut in_full, mut in_empty) = (Vec::new(), Vec::new());
    // Every stage lands in chat `bench` of each world: stay under its cap.
    let (k, b) = alternate(
        rounds,
        45 / rounds,
        || in_full.push(stage(&rt, &full.kernel, &turn_full)),
        || in_empty.push(stage(&rt, &empty.kernel, &turn_full)),
    );
    reject(&rt, &full.kernel, &in_full);
    reject(&rt, &empty.kernel, &in_empty);
    table.ratio(
        &format!("stage with {c} chats × {p} pending"),
        k,
        b,
        "≤ 1.2×",
        1.2,
    );

    drain(&rt, quick, &mut table);

    // Loading a cached Python or JavaScript gadget, as every later process
    // does, against wasmtime's own load of the same artifact. After every
    // row that times a durable commit: each compiles its artifact (35 MB
    // for Python) into a cache that is removed afterwards, and a durable
    // commit timed in the seconds after writing or freeing that much
    // measures the disk's backlog (see the start-up row below): one full
    // run that timed the stage row just after them gave 1.54×, with the
    // bare commit at 183 µs against 130-160 µs otherwise.
    for (label, name) in [("Python", "triage-py"), ("JavaScript", "triage-js")] {
        let (k, b) = cached_load(rounds, &langs::guest(name));
        table.ratio(&format!("cached load, {label}"), k, b, "≤ 2×", 2.0);
    }

    // Start-up of a CLI command as the state database grows. Last: after
    // the gigabyte it writes, and again after its home is removed, a 4 KB
    // fsync on the machines measured took up to 4 ms, on and off, for
    // seconds (against about 130 µs), and a durable commit timed then
    // measured the disk's backlog.
    let (small, large) = startup(quick);
    table.ratio(
        &format!("start-up, {} MB database", large.1 >> 20),
        large.0,
        small.0,
        "≤ 1.2×",
        1.2,
    );
    table.print();
}

/// The turn rows: a gadget turn of one read and three durable writes, p50,
/// with the same turn on the bare host alternated as its floor; and the
/// same turn whose three writes auto-approval could take (key one: the
/// `issues` gatekeeper vetted, `addLabel` neither destructive nor
/// repeatable in effect), with no rule enabled (key two missing), as most
/// writes of a vetted gatekeeper are staged. The writes are rejected
/// untimed, every 13 turns, as a person deciding in a batch would, so each
/// chat holds 3 to 39 pending actions while a turn is timed (alone:
/// `FAST_PATH_ONLY=turn`).
fn turn_row(
    rt: &tokio::runtime::Runtime,
    w: &World,
    bare: &Bare,
    baseline_db: &BareDb,
    quick: bool,
    table: &mut Table,
) {
    rt.block_on(w.add_gatekeeper("issues", "issues", Trust::Vetted));
    w.kernel.person("bench").new_chat("vetted").expect("chat");
    for (gatekeeper, key) in [("rogue", "ROGUE"), ("issues", "ISSUES")] {
        w.kernel
            .person("bench")
            .introduce("vetted", gatekeeper, key, None)
            .expect("introduce");
    }
    let (mixed, vetted) = (turn_of_writes(), turn_of_vetted_writes());
    let mut samples = [Vec::new(), Vec::new(), Vec::new()];
    let mut pending = [Vec::new(), Vec::new()];
    for _ in 0..(if quick { 20 } else { 200 }) {
        for (i, (chat, turn)) in [("bench", &mixed), ("vetted", &vetted)]
            .into_iter()
            .enumerate()
        {
            let t = Instant::now();
            let report = rt
                .block_on(w.kernel.operator().run("script", chat, turn))
                .expect("turn");
            samples[i].push(t.elapsed());
            let out: serde_json::Value =
                serde_json::from_str(report.output.as_deref().expect("turn ok")).expect("json");
            let ids: Vec<i64> = out
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| {
                    s.get("pending")
                        .and_then(|p| p.get("action_id"))
                        .and_then(|i| i.as_i64())
                })
                .collect();
            assert_eq!(ids.len(), 3, "three writes pending: {out}");
            pending[i].extend(ids);
            if pending[i].len() >= 39 {
                reject(rt, &w.kernel, &pending[i]);
                pending[i].clear();
            }
        }
        // The floor on this machine, alternated ([`bare_turn`]).
        let t = Instant::now();
        bare_turn(rt, bare, baseline_db, &mixed);
        samples[2].push(t.elapsed());
    }
    for ids in &pending {
        reject(rt, &w.kernel, ids);
    }
    let [turn, vetted_turn, bare_turn] = &mut samples;
    let (turn_p50, vetted_p50, bare_p50) = (median(turn), median(vetted_turn), median(bare_turn));
    table.absolute(
        "turn: 1 read + 3 durable writes (p50)",
        turn_p50,
        "< 0.5 ms",
        Duration::from_micros(500),
    );
    table.floor(
        "turn vs the same on the bare host (floor)",
        turn_p50,
        bare_p50,
    );
    table.absolute(
        "turn, its writes key one allows, no rule (p50)",
        vetted_p50,
        "< 0.5 ms",
        Duration::from_micros(500),
    );
}

/// Draining 10,000 approved actions vs 1,000 (alone: `FAST_PATH_ONLY=drain`).
fn drain(rt: &tokio::runtime::Runtime, quick: bool, table: &mut Table) {
    let (small, large) = if quick { (100, 1000) } else { (1000, 10_000) };
    // Each side is the median of drains alternated with the other's: the
    // small drain five times, the large one three. Timed once, the small
    // one (under a second) moved the ratio by a tenth with a moment of the
    // machine's noise (the same kernel gave 9.3× to 10.9× in six runs),
    // and the large one by a twentieth (8.0 to 9.0 s: 9.65× to 10.52× in
    // eight runs of one kernel, a linear drain being 10×).
    let (mut smalls, mut larges) = (Vec::new(), Vec::new());
    for i in 0..5 {
        smalls.push(drain_time(rt, small));
        if i < 3 {
            larges.push(drain_time(rt, large));
        }
    }
    let (t_small, t_large) = (median(&mut smalls), median(&mut larges));
    table.ratio(
        &format!("drain {large} vs {small} (time)"),
        t_large.as_secs_f64(),
        t_small.as_secs_f64(),
        "≤ 10.5×",
        (large / small) as f64 * 1.05,
    );
}

/// One kernel loop under a profiler: `read` (host calls of `echo`),
/// `reads` (turns of 50 `echo` reads, `FAST_PATH_N` reads in all),
/// `stage` (writes spread over chats of 40), `turn`
/// (gadget turns of 1 read + 3 writes, rejected in batches), `stage64` (64 concurrent
/// stagers in 64 chats, 40 writes each, rejected after each round), or a
/// baseline: `bare-read`, `bare-reads`, `bare-stage`, `bare-turn`.
fn profile(
    rt: &tokio::runtime::Runtime,
    w: &World,
    turn: &Turn,
    bare: &Bare,
    baseline_db: &Arc<BareDb>,
    what: &str,
) {
    let n: usize = std::env::var("FAST_PATH_N")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2000);
    match what {
        "read" => {
            for _ in 0..n {
                let out = rt
                    .block_on(w.kernel.call(turn, "ROGUE", "echo", r#"{"n":1}"#.into()))
                    .expect("read");
                assert!(matches!(out, Ok(CallOutcome::Done(_))), "{out:?}");
            }
        }
        // The baselines of the two read rows, for a profile beside the
        // kernel's.
        "bare-read" => {
            for _ in 0..n {
                bare_read(rt, bare, baseline_db);
            }
        }
        "bare-stage" => {
            for _ in 0..n {
                baseline_db.commit_durable();
            }
        }
        "bare-turn" => {
            let mixed = turn_of_writes();
            for _ in 0..n {
                bare_turn(rt, bare, baseline_db, &mixed);
            }
        }
        "bare-reads" => {
            let reads = fifty_reads();
            for _ in 0..n / 50 {
                bare_reads(rt, bare, baseline_db, &reads);
            }
        }
        "reads" => {
            let reads = fifty_reads();
            for _ in 0..n / 50 {
                let report = rt
                    .block_on(w.kernel.operator().run("script", "bench", &reads))
                    .expect("turn");
                assert!(report.output.is_ok(), "{:?}", report.output);
            }
        }
        // Spread over chats of 40 writes each, as the stage row spreads
        // its writes, and never rejected: a rejection costs more than a
        // stage, and would fill the profile.
        "stage" => {
            let turns = stage_turns(w, "profile", n.div_ceil(40));
            for i in 0..n {
                stage(rt, &w.kernel, &turns[i % turns.len()]);
            }
        }
        "turn" => {
            let mixed = turn_of_writes();
            let mut ids = Vec::new();
            for _ in 0..n {
                let report = rt
                    .block_on(w.kernel.operator().run("script", "bench", &mixed))
                    .expect("turn");
                let out: serde_json::Value =
                    serde_json::from_str(report.output.as_deref().expect("turn ok")).expect("json");
                ids.extend(
                    out.as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|s| s.pointer("/pending/action_id").and_then(|i| i.as_i64())),
                );
                if ids.len() >= 39 {
                    reject(rt, &w.kernel, &ids);
                    ids.clear();
                }
            }
            reject(rt, &w.kernel, &ids);
        }
        "stage64" => {
            let chats = stage_chats(w, "p", 64);
            for _ in 0..n.div_ceil(64 * 40) {
                let ids = stage_concurrently(rt, &w.kernel, &chats, 40);
                reject(rt, &w.kernel, &ids);
            }
        }
        other => panic!(
            "FAST_PATH_PROFILE={other}: say read, reads, stage, stage64, turn, bare-read, bare-reads, bare-stage or bare-turn"
        ),
    }
}

/// A world with `script` installed and `rogue` introduced as ROGUE in
/// `chat`, owned by `bench`. Unlimited per-turn calls: a bench turn may
/// make many.
fn world(rt: &tokio::runtime::Runtime, chat: &str) -> World {
    let w = World::with_limits(Limits::default());
    w.install("script");
    rt.block_on(w.add_gatekeeper("rogue", "rogue", Trust::Byo));
    w.kernel.person("bench").new_chat(chat).expect("chat");
    w.kernel
        .person("bench")
        .introduce(chat, "rogue", "ROGUE", None)
        .expect("introduce");
    w
}

async fn stage_async(k: &Kernel, turn: &Turn) -> i64 {
    match k
        .call(turn, "ROGUE", "bigResult", r#"{"kib":0}"#.into())
        .await
        .expect("stage")
    {
        Ok(CallOutcome::Pending(p)) => p.action_id as i64,
        other => panic!("expected pending, got {other:?}"),
    }
}

/// Stage one more write into the next of `turns` (round robin), and note
/// its id in `staged`.
fn stage_next(rt: &tokio::runtime::Runtime, k: &Kernel, turns: &[Turn], staged: &mut Vec<i64>) {
    let turn = &turns[staged.len() % turns.len()];
    staged.push(stage(rt, k, turn));
}

/// Stages spread over `turns` ([`stage_next`]) alternated with
/// `baseline`, 20 of each per round, timed by `clock`; the stages are
/// rejected afterwards, untimed, so that the chats are empty again.
fn stages_beside(
    rt: &tokio::runtime::Runtime,
    k: &Kernel,
    turns: &[Turn],
    clock: Clock,
    rounds: usize,
    baseline: impl FnMut(),
) -> (f64, f64) {
    let mut staged = Vec::new();
    let times = alternate_on(
        clock,
        rounds,
        20,
        || stage_next(rt, k, turns, &mut staged),
        baseline,
    );
    reject(rt, k, &staged);
    times
}

/// A turn of `bench` in each of `count` new chats ([`stage_chats`]).
fn stage_turns(w: &World, prefix: &str, count: usize) -> Vec<Turn> {
    stage_chats(w, prefix, count)
        .iter()
        .map(|chat| Turn::new("script", chat, Principal::person("bench")))
        .collect()
}

/// `count` chats named `prefix0`.., each with `rogue` introduced as ROGUE.
fn stage_chats(w: &World, prefix: &str, count: usize) -> Vec<String> {
    let chats: Vec<String> = (0..count).map(|i| format!("{prefix}{i}")).collect();
    for c in &chats {
        w.kernel.person("bench").new_chat(c).expect("chat");
        w.kernel
            .person("bench")
            .introduce(c, "rogue", "ROGUE", None)
            .expect("introduce");
    }
    chats
}

/// One stager per chat, all at once, each staging `per_chat` writes one
/// after another; the ids of everything staged.
fn stage_concurrently(
    rt: &tokio::runtime::Runtime,
    kernel: &Kernel,
    chats: &[String],
    per_chat: usize,
) -> Vec<i64> {
    let kernel = Arc::new(kernel.clone());
    rt.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for c in chats {
            let (k, turn) = (
                kernel.clone(),
                Turn::new("script", c, Principal::person("bench")),
            );
            tasks.spawn(async move {
                let mut ids = Vec::new();
                for _ in 0..per_chat {
                    ids.push(stage_async(&k, &turn).await);
                }
                ids
            });
        }
        tasks.join_all().await.concat()
    })
}

fn stage(rt: &tokio::runtime::Runtime, k: &Kernel, turn: &Turn) -> i64 {
    rt.block_on(stage_async(k, turn))
}

fn reject(rt: &tokio::runtime::Runtime, k: &Kernel, ids: &[i64]) {
    for id in ids {
        rt.block_on(k.person("bench").reject(*id)).expect("reject");
    }
}

/// `chats` chats with `per` pending copies each of the staged action
/// `seed`, written into the state database directly: filling it through
/// the kernel would take longer than the measurement.
fn fill(w: &World, seed: i64, chats: usize, per: usize) {
    let db = rusqlite::Connection::open(w.home().join("gatehouse.db")).expect("db");
    db.busy_timeout(Duration::from_secs(30)).expect("timeout");
    let tx = db.unchecked_transaction().expect("tx");
    let columns: Vec<String> = tx
        .prepare("SELECT name FROM pragma_table_info('ledger') WHERE name NOT IN ('id', 'chat')")
        .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
        .expect("ledger columns");
    let columns = columns.join(", ");
    let chat_columns: Vec<String> = tx
        .prepare("SELECT name FROM pragma_table_info('chats') WHERE name <> 'name'")
        .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
        .expect("chat columns");
    let chat_columns = chat_columns.join(", ");
    let intro_columns: Vec<String> = tx
        .prepare("SELECT name FROM pragma_table_info('introductions') WHERE name <> 'chat'")
        .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
        .expect("introduction columns");
    let intro_columns = intro_columns.join(", ");
    let source_chat: String = tx
        .query_row("SELECT chat FROM ledger WHERE id = ?1", [seed], |r| {
            r.get(0)
        })
        .expect("the seed action");
    for i in 0..chats {
        let chat = format!("full{i}");
        tx.execute(
            &format!("INSERT INTO chats (name, {chat_columns}) SELECT ?1, {chat_columns} FROM chats WHERE name = ?2"),
            [&chat, &source_chat],
        )
        .expect("chat row");
        tx.execute(
            &format!("INSERT INTO introductions (chat, {intro_columns}) SELECT ?1, {intro_columns} FROM introductions WHERE chat = ?2"),
            [&chat, &source_chat],
        )
        .expect("introduction rows");
        for _ in 0..per {
            tx.execute(
                &format!("INSERT INTO ledger (chat, {columns}) SELECT ?1, {columns} FROM ledger WHERE id = ?2"),
                rusqlite::params![chat, seed],
            )
            .expect("action row");
        }
    }
    tx.commit().expect("commit");
}

/// `per` more pending copies of the staged action `seed` in `chat`.
fn fill_chat(w: &World, seed: i64, chat: &str, per: usize) {
    let db = rusqlite::Connection::open(w.home().join("gatehouse.db")).expect("db");
    let columns: Vec<String> = db
        .prepare("SELECT name FROM pragma_table_info('ledger') WHERE name NOT IN ('id', 'chat')")
        .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
        .expect("ledger columns");
    let columns = columns.join(", ");
    for _ in 0..per {
        db.execute(
            &format!("INSERT INTO ledger (chat, {columns}) SELECT ?1, {columns} FROM ledger WHERE id = ?2"),
            rusqlite::params![chat, seed],
        )
        .expect("action row");
    }
}

/// A world with 1,000 × 50 (or `chats` × `per`) pending actions of
/// `rogue:bigResult` in other chats than `bench`.
fn full_world(rt: &tokio::runtime::Runtime, chats: usize, per: usize) -> World {
    let w = world(rt, "bench");
    w.kernel.person("bench").new_chat("seed").expect("chat");
    w.kernel
        .person("bench")
        .introduce("seed", "rogue", "ROGUE", None)
        .expect("introduce");
    let seed = stage(
        rt,
        &w.kernel,
        &Turn::new("script", "seed", Principal::person("bench")),
    );
    fill(&w, seed, chats, per);
    w
}

/// Time to auto-approve `n` pending `issues:addLabel` actions (in chats of
/// 50), each sent to the loopback tracker.
fn drain_time(rt: &tokio::runtime::Runtime, n: usize) -> Duration {
    let w = World::with_limits(Limits::default());
    w.install("script");
    rt.block_on(w.add_gatekeeper("issues", "issues", Trust::Vetted));
    w.kernel.person("bench").new_chat("seed").expect("chat");
    w.kernel
        .person("bench")
        .introduce("seed", "issues", "ISSUES", None)
        .expect("introduce");
    let turn = Turn::new("script", "seed", Principal::person("bench"));
    let seed = match rt
        .block_on(w.kernel.call(
            &turn,
            "ISSUES",
            "addLabel",
            r#"{"id":1,"label":"bench"}"#.into(),
        ))
        .expect("stage")
    {
        Ok(CallOutcome::Pending(p)) => p.action_id as i64,
        other => panic!("expected pending, got {other:?}"),
    };
    fill(&w, seed, n / 50 - 1, 50);
    // With the seed chat's 49 more: `n` in all.
    fill_chat(&w, seed, "seed", 49);
    // What the fill and the rows before wrote is on the disk before the
    // drain is timed: otherwise the drain's fsyncs wait for it too, and
    // the larger fill (ten times the rows) weighs on its own drain more.
    let synced = std::process::Command::new("sync").status();
    assert!(
        synced.as_ref().is_ok_and(|s| s.success()),
        "sync: {synced:?}"
    );
    let started = Instant::now();
    let report = rt
        .block_on(w.kernel.person("bench").add_rule("issues:addLabel", None))
        .expect("rule");
    let took = started.elapsed();
    assert_eq!(report.applied.len(), n, "every action was auto-approved");
    took
}

/// The Extism peer's round trip in seconds (tests/peers/extism), when
/// `GATEHOUSE_EXTISM_PEER` names its built binary; `None` otherwise.
fn extism_peer(rounds: usize) -> Option<f64> {
    let peer = std::path::PathBuf::from(std::env::var_os("GATEHOUSE_EXTISM_PEER")?);
    let target = peer.parent()?.parent()?;
    let wasm = |name: &str| {
        target
            .join("wasm32-unknown-unknown/release")
            .join(format!("{name}.wasm"))
    };
    let out = std::process::Command::new(&peer)
        .arg(wasm("extism_peer_gadget"))
        .arg(wasm("extism_peer_gatekeeper"))
        .arg(rounds.to_string())
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", peer.display()));
    assert!(
        out.status.success(),
        "the Extism peer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let us: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("EXTISM_ROUND_TRIP_US "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("the Extism peer printed no figure: {text}"));
    Some(us / 1e6)
}

/// Median seconds to load the installed component at `path` in a fresh
/// runtime (the runtime is made untimed: a process pays that once), and to
/// `Component::deserialize_file` its compiled artifact, alternated.
fn cached_load(rounds: usize, path: &Path) -> (f64, f64) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let cache = tempfile::tempdir().expect("a temporary directory");
    let runtime = Runtime::new(cache.path().to_owned(), Limits::default()).expect("a runtime");
    let digest = runtime
        .admit(&bytes, Role::Gadget, &|_| {})
        .unwrap_or_else(|e| panic!("{} is refused: {e:#}", path.display()));
    let artifact = std::fs::read_dir(cache.path())
        .expect("the cache lists")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .expect("a compiled artifact");
    let (mut kernel, mut bare) = (Vec::new(), Vec::new());
    for _ in 0..rounds.max(5) {
        let fresh = Runtime::new(cache.path().to_owned(), Limits::default()).expect("a runtime");
        let t = Instant::now();
        fresh.gadget(&digest).expect("loaded from the cache");
        kernel.push(t.elapsed());
        drop(fresh);
        let t = Instant::now();
        // SAFETY: written by `precompile_component` of an engine with the
        // same configuration, a moment ago, in a directory only we use.
        let c = unsafe {
            wasmtime::component::Component::deserialize_file(runtime.engine(), &artifact)
        }
        .expect("deserialised");
        bare.push(t.elapsed());
        drop(c);
    }
    (
        median(&mut kernel).as_secs_f64(),
        median(&mut bare).as_secs_f64(),
    )
}

/// Median seconds of `gatehouse gadgets` (the real binary: open the state
/// database, migrate-check, list) on a fresh home and on one whose state
/// database holds about 1 GB (100 MB when quick), alternated; with the
/// large file's size.
fn startup(quick: bool) -> ((f64, u64), (f64, u64)) {
    let small = World::with_limits(Limits::default());
    small.install("script");
    let large = World::with_limits(Limits::default());
    large.install("script");
    let target: u64 = if quick { 100 << 20 } else { 1 << 30 };
    grow(&large, target);
    let db = large.home().join("gatehouse.db");
    let size = std::fs::metadata(&db).expect("the database").len();
    let time = |w: &World| {
        let t = Instant::now();
        let out = cli_command(w.home(), &["gadgets"])
            .output()
            .expect("gatehouse runs");
        let took = t.elapsed();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        took
    };
    // Warm the page cache for both, as a machine that just used them has.
    time(&small);
    time(&large);
    let (mut s, mut l) = (Vec::new(), Vec::new());
    for _ in 0..if quick { 5 } else { 15 } {
        s.push(time(&small));
        l.push(time(&large));
    }
    (
        (median(&mut s).as_secs_f64(), 0),
        (median(&mut l).as_secs_f64(), size),
    )
}

/// Grow `w`'s state database to about `bytes` with finished actions of
/// 60 KiB arguments, 100 per chat (within retention, so they stay), as a
/// long-lived deployment's would.
fn grow(w: &World, bytes: u64) {
    let db = rusqlite::Connection::open(w.home().join("gatehouse.db")).expect("db");
    db.busy_timeout(Duration::from_secs(30)).expect("timeout");
    let filler = "x".repeat(60 * 1024);
    let args = json!({ "note": filler }).to_string();
    let per_chat = 100;
    let rows = (bytes / (args.len() as u64)).max(1) as usize;
    let tx = db.unchecked_transaction().expect("tx");
    for i in 0..rows.div_ceil(per_chat) {
        let chat = format!("old{i}");
        tx.execute(
            "INSERT INTO chats (name, owner, created_at) VALUES (?1, 'bench', 0)",
            [&chat],
        )
        .expect("chat row");
        for _ in 0..per_chat {
            tx.execute(
                "INSERT INTO ledger (chat, kind, caller, person, gatekeeper, tool, classified_by, trust, args, state, await_decision, created_at, finished_at)
                 VALUES (?1, 'action', 'bench', 'bench', 'rogue', 'bigResult', 'default', 'byo', ?2, 'applied', 0, 0, 0)",
                rusqlite::params![chat, args],
            )
            .expect("action row");
        }
    }
    tx.commit().expect("commit");
}

/// Commits that take a write-ahead log past its first checkpoint.
const WARM_COMMITS: usize = 1500;

/// Take the kernel's state database past its first checkpoints, as the
/// bare file is ([`BareDb::new`]): until then every commit makes the log
/// longer, and an fsync that has to record a longer file costs up to
/// twice one that overwrites a log already that long (`synchronous=FULL`
/// on this machine: about 270 µs against 145 µs). A durable commit of
/// either side is then timed as it runs in a store in use, and a ratio
/// no longer depends on which side's log happens to be growing.
fn warm(rt: &tokio::runtime::Runtime, w: &World, turn: &Turn) {
    for _ in 0..WARM_COMMITS {
        rt.block_on(w.kernel.call(turn, "ROGUE", "echo", r#"{"n":1}"#.into()))
            .expect("read")
            .expect("warm read");
    }
    // The store checkpoints on a thread of its own, which looks every
    // 100 ms: give it its turn before anything is timed.
    std::thread::sleep(Duration::from_millis(300));
}

/// A bare SQLite file with the same settings as the state database.
struct BareDb {
    /// At `synchronous=NORMAL`, as the kernel's observations commit.
    /// Locked only to be shared with the bare host's calls
    /// ([`bare_reads`]); nothing contends for it.
    conn: std::sync::Mutex<rusqlite::Connection>,
    /// The same file at `synchronous=FULL`, as the kernel's writer stays
    /// for its durable commits: a bare durable commit is its INSERT alone,
    /// with no `PRAGMA` before or after it (one per commit made the
    /// baseline a few µs slower than the commit it stands for).
    durable: std::sync::Mutex<rusqlite::Connection>,
    _dir: tempfile::TempDir,
}

impl BareDb {
    /// A bare file past its first checkpoint (see [`warm`]).
    fn new() -> BareDb {
        let dir = tempfile::tempdir().expect("dir");
        let path = Path::new(dir.path()).join("bare.db");
        let conn = rusqlite::Connection::open(&path).expect("db");
        conn.pragma_update(None, "journal_mode", "WAL")
            .expect("wal");
        conn.pragma_update(None, "synchronous", "NORMAL")
            .expect("normal");
        conn.execute_batch(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, chat TEXT, tool TEXT, args TEXT, state TEXT) STRICT",
        )
        .expect("table");
        let durable = rusqlite::Connection::open(&path).expect("db");
        durable
            .pragma_update(None, "synchronous", "FULL")
            .expect("full");
        let db = BareDb {
            conn: std::sync::Mutex::new(conn),
            durable: std::sync::Mutex::new(durable),
            _dir: dir,
        };
        // SQLite's own checkpoint comes at 1,000 pages; one page a commit.
        for _ in 0..WARM_COMMITS {
            db.insert();
        }
        db
    }

    /// One row on `conn`, one commit.
    fn insert_on(conn: &std::sync::Mutex<rusqlite::Connection>) {
        conn.lock()
            .expect("the bare database")
            .prepare_cached(
                "INSERT INTO t (chat, tool, args, state) VALUES ('bench', 'echo', '{\"n\":1}', 'done')",
            )
            .and_then(|mut st| st.execute([]))
            .expect("insert");
    }

    fn insert(&self) {
        BareDb::insert_on(&self.conn);
    }

    /// One row, one WAL commit (no fsync): an observation's price.
    fn commit_observation(&self) {
        self.insert();
    }

    /// One row, one fsynced commit.
    fn commit_durable(&self) {
        BareDb::insert_on(&self.durable);
    }
}

/// One staged ledger row, inserted again and again, each in a commit of
/// its own at `synchronous=FULL`, into a copy of the kernel's state file
/// (`VACUUM INTO`: the same schema and page size), by a bare connection;
/// spread over 20 chats, as the stage row spreads its stages.
struct SameRow {
    conn: rusqlite::Connection,
    insert: String,
    values: std::cell::RefCell<Vec<rusqlite::types::Value>>,
    /// Which of `values` is the chat, and how many rows were committed.
    chat: usize,
    made: std::cell::Cell<usize>,
    _dir: tempfile::TempDir,
}

/// Whether [`SameRow`] keeps the staged row's facts, or leaves them out.
enum Facts {
    Kept,
    Left,
}

impl SameRow {
    fn of(w: &World, id: i64, facts: Facts) -> SameRow {
        let dir = tempfile::tempdir().expect("dir");
        let copy = dir.path().join("copy.db");
        let source = rusqlite::Connection::open(w.home().join("gatehouse.db")).expect("db");
        source
            .execute("VACUUM INTO ?1", [copy.to_str().expect("a UTF-8 path")])
            .expect("copy");
        let columns: Vec<String> = source
            .prepare("SELECT name FROM pragma_table_info('ledger') WHERE name <> 'id'")
            .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
            .expect("ledger columns");
        let mut values: Vec<rusqlite::types::Value> = source
            .query_row(
                &format!("SELECT {} FROM ledger WHERE id = ?1", columns.join(", ")),
                [id],
                |r| (0..columns.len()).map(|i| r.get(i)).collect(),
            )
            .expect("the staged row");
        if let Facts::Left = facts {
            let at = columns.iter().position(|c| c == "facts").expect("facts");
            values[at] = rusqlite::types::Value::Null;
        }
        let conn = rusqlite::Connection::open(&copy).expect("the copy");
        conn.pragma_update(None, "journal_mode", "WAL")
            .expect("wal");
        conn.pragma_update(None, "synchronous", "FULL")
            .expect("full");
        let marks: Vec<String> = (1..=columns.len()).map(|i| format!("?{i}")).collect();
        let insert = format!(
            "INSERT INTO ledger ({}) VALUES ({})",
            columns.join(", "),
            marks.join(", ")
        );
        let row = SameRow {
            conn,
            insert,
            values: values.into(),
            chat: columns
                .iter()
                .position(|c| c == "chat")
                .expect("a chat column"),
            made: 0.into(),
            _dir: dir,
        };
        for _ in 0..WARM_COMMITS {
            row.commit();
        }
        row
    }

    fn commit(&self) {
        let n = self.made.replace(self.made.get() + 1);
        let mut values = self.values.borrow_mut();
        values[self.chat] = rusqlite::types::Value::Text(format!("s{}", n % 20));
        self.conn
            .prepare_cached(&self.insert)
            .and_then(|mut st| st.execute(rusqlite::params_from_iter(values.iter())))
            .expect("insert");
    }
}

/// The floor of the turn row: the same turn on the bare host (its calls
/// forwarded), one observation commit and three rows, the last fsynced.
fn bare_turn(rt: &tokio::runtime::Runtime, bare: &Bare, db: &BareDb, turn: &str) {
    rt.block_on(bare.turn(turn));
    db.commit_observation();
    db.insert();
    db.insert();
    db.commit_durable();
}

/// The script gadget's turn of one read (`echo`) and three writes
/// (`bigResult`, classified as an action) of the rogue gatekeeper.
fn turn_of_writes() -> String {
    json!({ "steps": [
        {"call": {"key": "ROGUE", "tool": "echo", "args": {"n": 1}}},
        {"call": {"key": "ROGUE", "tool": "bigResult", "args": {"kib": 0}}},
        {"call": {"key": "ROGUE", "tool": "bigResult", "args": {"kib": 0}}},
        {"call": {"key": "ROGUE", "tool": "bigResult", "args": {"kib": 0}}},
    ]})
    .to_string()
}

/// [`turn_of_writes`] with writes auto-approval could take: `issues`'s
/// `addLabel` (staged without a request: `issues` never simulates).
fn turn_of_vetted_writes() -> String {
    let label =
        json!({"call": {"key": "ISSUES", "tool": "addLabel", "args": {"id": 1, "label": "bench"}}});
    json!({ "steps": [
        {"call": {"key": "ROGUE", "tool": "echo", "args": {"n": 1}}},
        label, label, label,
    ]})
    .to_string()
}

/// The script gadget's turn of 50 reads of the rogue gatekeeper's `echo`.
fn fifty_reads() -> String {
    json!({ "steps": vec![json!({"call": {"key": "ROGUE", "tool": "echo", "args": {"n": 1}}}); 50] })
        .to_string()
}

/// The baseline of one read: the same call through the bare host, and one
/// bare observation commit.
fn bare_read(rt: &tokio::runtime::Runtime, bare: &Bare, db: &BareDb) {
    rt.block_on(unmediated_call(
        &bare.gatekeeper,
        &bare.limits,
        "echo".into(),
        r#"{"n":1}"#.into(),
    ));
    db.commit_observation();
}

/// The baseline of a turn of reads: the same turn on the bare host, which
/// makes one bare observation commit after each read it forwards, where
/// the kernel records its own.
fn bare_reads(rt: &tokio::runtime::Runtime, bare: &Bare, db: &Arc<BareDb>, reads: &str) {
    let db = db.clone();
    rt.block_on(bare.turn_recording(reads, Arc::new(move || db.commit_observation())));
}

/// Run `a` and `b` in alternation, `per` times each per round, and return
/// the median seconds per call of each.
fn alternate(rounds: usize, per: usize, a: impl FnMut(), b: impl FnMut()) -> (f64, f64) {
    alternate_on(Clock::Wall, rounds, per, a, b)
}

/// What [`alternate_on`] times: the time that passed, or only the time
/// the calling thread spent on a CPU (its own code and the system calls
/// it made, not the wait for the disk: `/proc/thread-self/schedstat`).
#[derive(Clone, Copy)]
enum Clock {
    Wall,
    OnCpu,
}

impl Clock {
    fn now(self, since: Instant) -> Duration {
        match self {
            Clock::Wall => since.elapsed(),
            Clock::OnCpu => {
                let stat = std::fs::read_to_string("/proc/thread-self/schedstat")
                    .expect("this thread's scheduler statistics (Linux)");
                let ns = stat
                    .split_whitespace()
                    .next()
                    .and_then(|ns| ns.parse().ok())
                    .expect("the time on a CPU, in nanoseconds");
                Duration::from_nanos(ns)
            }
        }
    }
}

/// `rounds` rounds of `per` calls of `a`, each followed by `per` of `b`:
/// the median over rounds of each one's time per call, as `clock` tells it.
fn alternate_on(
    clock: Clock,
    rounds: usize,
    per: usize,
    mut a: impl FnMut(),
    mut b: impl FnMut(),
) -> (f64, f64) {
    let since = Instant::now();
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = clock.now(since);
        for _ in 0..per {
            a();
        }
        ta.push((clock.now(since) - t) / per as u32);
        let t = clock.now(since);
        for _ in 0..per {
            b();
        }
        tb.push((clock.now(since) - t) / per as u32);
    }
    (median(&mut ta).as_secs_f64(), median(&mut tb).as_secs_f64())
}

fn median_rate(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[derive(Default)]
struct Table {
    rows: Vec<[String; 5]>,
}

fn us(secs: f64) -> String {
    format!("{:.1} µs", secs * 1e6)
}

impl Table {
    fn ratio(&mut self, what: &str, kernel: f64, baseline: f64, goal: &str, max: f64) {
        let r = kernel / baseline;
        self.rows.push([
            what.into(),
            us(kernel),
            us(baseline),
            format!("{r:.2}×"),
            format!("{goal} {}", if r <= max { "met" } else { "MISSED" }),
        ]);
    }

    fn throughput(&mut self, what: &str, kernel: f64, baseline: f64, goal: &str, min: f64) {
        let r = kernel / baseline;
        self.rows.push([
            what.into(),
            format!("{kernel:.0}/s"),
            format!("{baseline:.0}/s"),
            format!("{r:.2}×"),
            format!("{goal} {}", if r >= min { "met" } else { "MISSED" }),
        ]);
    }

    /// A ratio with no goal of its own, shown to explain another.
    fn beside(&mut self, what: &str, kernel: f64, baseline: f64, said: &str) {
        self.rows.push([
            what.into(),
            us(kernel),
            us(baseline),
            format!("{:.2}×", kernel / baseline),
            said.into(),
        ]);
    }

    /// A kernel figure beside what the bare host needs for the same work
    /// on this machine: no goal of its own, it shows how far an absolute
    /// goal is reachable here.
    fn floor(&mut self, what: &str, kernel: Duration, bare: Duration) {
        let (k, b) = (kernel.as_secs_f64(), bare.as_secs_f64());
        self.rows.push([
            what.into(),
            us(k),
            us(b),
            format!("{:.2}×", k / b),
            format!(
                "bare p50 {} the 0.5 ms goal",
                if b < 5e-4 { "is under" } else { "is over" }
            ),
        ]);
    }

    fn absolute(&mut self, what: &str, took: Duration, goal: &str, max: Duration) {
        self.rows.push([
            what.into(),
            us(took.as_secs_f64()),
            "—".into(),
            "—".into(),
            format!("{goal} {}", if took <= max { "met" } else { "MISSED" }),
        ]);
    }

    fn print(&self) {
        println!("\n| measure | kernel | baseline | ratio | goal |");
        println!("|---|---|---|---|---|");
        for r in &self.rows {
            println!("| {} | {} | {} | {} | {} |", r[0], r[1], r[2], r[3], r[4]);
        }
    }
}
