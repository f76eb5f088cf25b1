//! Many hosts, one database: what serving from PostgreSQL costs
//! through the kernel, and how staging scales with host processes.
//!
//! 1. A stage (a gadget's turn that stages one write, answered `pending`)
//!    and an approval (the claim, the send to a real tracker on 127.0.0.1,
//!    the outcome) through the kernel, on a home's SQLite file and on a
//!    durable PostgreSQL cluster this benchmark starts (`fsync` and
//!    `synchronous_commit` on). Rounds alternate the engines; the ratio of
//!    medians is the result.
//! 2. Concurrent staging throughput with 1, 2 and 4 host processes against
//!    one PostgreSQL: each host is this benchmark re-run as a child process
//!    with a home of its own, opening the shared database, warmed up, then
//!    staging from 8 concurrent turns in chats of its own on a common start
//!    signal. Reported in actions/s, as the ratio to one host, and with
//!    the machine's CPU busy share meanwhile (hosts and the database server
//!    share the machine's cores: where they are busy, more hosts cannot
//!    stage more).
//!
//! `cargo bench --locked -p gatehouse-e2e --bench hosts`
//! (`HOSTS_QUICK=1` runs fewer rounds.)

use gatehouse::store::Trust;
use gatehouse::{Home, Kernel};
use gatehouse_e2e::postgres::durable_cluster;
use gatehouse_e2e::{World, call, pending_id, shared_key, test_limits};
use serde_json::{Value, json};
use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Concurrent turns in each host process.
const TURNS: usize = 8;
/// Turns each of them runs, and writes each turn stages (one chat per
/// concurrent turn takes `TURNS_EACH × WRITES` ≤ the open-action cap).
const TURNS_EACH: usize = 5;
const WRITES: usize = 10;
/// The environment variable that makes this benchmark a host process.
const CHILD: &str = "GATEHOUSE_BENCH_HOST";

fn main() {
    if let Ok(spec) = std::env::var(CHILD) {
        return host_process(&spec);
    }
    let quick = std::env::var_os("HOSTS_QUICK").is_some();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let pg = durable_cluster();
    kernel_on_each_engine(&rt, &pg.database(), if quick { 3 } else { 15 });
    scaling(&rt, &pg.database(), if quick { 1 } else { 3 });
}

fn labels(n: usize, tag: &str) -> Value {
    json!({"steps": (0..n)
        .map(|i| call("ISSUES", "addLabel", json!({"id": 1, "label": format!("{tag}{i}")})))
        .collect::<Vec<_>>()})
}

async fn chats(w: &World, names: &[String]) {
    for c in names {
        w.kernel.person("alice").new_chat(c).expect("chat");
        w.kernel
            .person("alice")
            .introduce(c, "issues", "ISSUES", None)
            .expect("introduce");
    }
}

fn kernel_on_each_engine(rt: &tokio::runtime::Runtime, url: &str, rounds: usize) {
    const PER_ROUND: usize = 20;
    let worlds = rt.block_on(async {
        let home = World::standard(Trust::Byo).await;
        let shared = World::standard_shared(url, Trust::Byo, Vec::new()).await;
        let names: Vec<String> = (0..rounds).map(|r| format!("r{r}")).collect();
        for w in [&home, &shared] {
            chats(w, &names).await;
            // Warm: the gadget and gatekeeper compiled and loaded.
            let id = stage(w, "work").await;
            w.kernel.person("alice").approve(id).await.expect("approve");
        }
        [home, shared]
    });
    let (mut stages, mut approvals) = ([vec![], vec![]], [vec![], vec![]]);
    // The shared database's round trips of each, over every round.
    let (mut stage_trips, mut approval_trips) = (0, 0);
    let trips = |w: &World| w.kernel.inspect().round_trips().unwrap_or(0);
    for r in 0..rounds {
        for (e, w) in worlds.iter().enumerate() {
            let chat = format!("r{r}");
            let (t, before) = (Instant::now(), trips(w));
            let ids: Vec<i64> = (0..PER_ROUND)
                .map(|_| rt.block_on(stage(w, &chat)))
                .collect();
            stages[e].push(t.elapsed() / PER_ROUND as u32);
            stage_trips += trips(w) - before;
            let (t, before) = (Instant::now(), trips(w));
            for id in ids {
                let d = rt
                    .block_on(w.kernel.person("alice").approve(id))
                    .expect("approve");
                assert!(d.ok(), "{d:?}");
            }
            approvals[e].push(t.elapsed() / PER_ROUND as u32);
            approval_trips += trips(w) - before;
        }
    }
    println!(
        "\n| through the kernel | SQLite home | PostgreSQL host | ratio | PostgreSQL round trips |"
    );
    println!("|---|---|---|---|---|");
    let each = (rounds * PER_ROUND) as f64;
    for (what, [s, p], trips) in [
        ("a turn staging one write", &mut stages, stage_trips),
        (
            "an approval (claim, send, outcome)",
            &mut approvals,
            approval_trips,
        ),
    ] {
        let (s, p) = (median(s), median(p));
        println!(
            "| {what} | {:.0} µs | {:.0} µs | {:.2}× | {:.1} |",
            s.as_secs_f64() * 1e6,
            p.as_secs_f64() * 1e6,
            p.as_secs_f64() / s.as_secs_f64(),
            trips as f64 / each
        );
    }
}

async fn stage(w: &World, chat: &str) -> i64 {
    w.stage_label_on(chat, 1, "s0").await
}

fn scaling(rt: &tokio::runtime::Runtime, url: &str, rounds: usize) {
    let w = rt.block_on(World::standard_shared(url, Trust::Byo, Vec::new()));
    let mut rates: Vec<(usize, Vec<f64>)> = [1, 2, 4].iter().map(|n| (*n, vec![])).collect();
    let mut busy: Vec<Vec<f64>> = vec![vec![]; rates.len()];
    let mut next_chat = 0;
    for _ in 0..rounds {
        for (i, (hosts, rate)) in rates.iter_mut().enumerate() {
            let mut children = Vec::new();
            for _ in 0..*hosts {
                let names: Vec<String> = (0..TURNS)
                    .map(|_| {
                        next_chat += 1;
                        format!("h{next_chat}")
                    })
                    .collect();
                rt.block_on(chats(&w, &names));
                let home = tempfile::tempdir().expect("a home");
                let child = Command::new(std::env::current_exe().expect("this benchmark"))
                    .env_clear()
                    .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                    .env(
                        CHILD,
                        format!("{url} {} {}", home.path().display(), names.join(",")),
                    )
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::inherit())
                    .spawn()
                    .expect("a host process");
                children.push((child, home));
            }
            // Every host warmed up and waiting; then one start signal.
            let mut lines: Vec<_> = children
                .iter_mut()
                .map(|(c, _)| BufReader::new(c.stdout.take().expect("stdout")).lines())
                .collect();
            for l in &mut lines {
                assert_eq!(l.next().and_then(Result::ok).as_deref(), Some("ready"));
            }
            let t = Instant::now();
            let cpu = Cpu::now();
            for (c, _) in &mut children {
                writeln!(c.stdin.as_mut().expect("stdin"), "go").expect("go");
            }
            let mut staged = 0usize;
            for l in &mut lines {
                let n = l.next().and_then(Result::ok).expect("a count");
                staged += n.trim().parse::<usize>().expect("a count");
            }
            let elapsed = t.elapsed();
            busy[i].push(cpu.busy_since());
            for (mut c, _) in children {
                drop(c.stdin.take());
                assert!(c.wait().expect("the host ends").success());
            }
            assert_eq!(staged, *hosts * TURNS * TURNS_EACH * WRITES);
            rate.push(staged as f64 / elapsed.as_secs_f64());
        }
    }
    let one = median_f(&mut rates[0].1.clone());
    println!(
        "\n| host processes | staged actions/s | vs one host | machine CPU busy ({} cores) |",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("|---|---|---|---|");
    for ((hosts, rate), busy) in rates.iter_mut().zip(&mut busy) {
        let r = median_f(rate);
        println!(
            "| {hosts} | {r:.0} | {:.2}× | {:.0}% |",
            r / one,
            median_f(busy) * 100.0
        );
    }
}

/// The machine's CPU time as `/proc/stat` counts it: busy and all.
struct Cpu {
    busy: u64,
    all: u64,
}

impl Cpu {
    fn now() -> Cpu {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let ticks: Vec<u64> = stat
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .skip(1)
            .filter_map(|t| t.parse().ok())
            .collect();
        let all: u64 = ticks.iter().sum();
        // idle and iowait are the fourth and fifth.
        let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
        Cpu {
            busy: all - idle,
            all,
        }
    }

    /// The share of the machine's CPU time that was busy since `self`
    /// (every process, the database server's included).
    fn busy_since(&self) -> f64 {
        let now = Cpu::now();
        (now.busy - self.busy) as f64 / (now.all - self.all).max(1) as f64
    }
}

/// A host process: open the shared database on a home of its own, warm
/// up, say `ready`, wait for `go`, stage from [`TURNS`] concurrent turns,
/// print how many were staged.
fn host_process(spec: &str) {
    let mut parts = spec.splitn(3, ' ');
    let (url, home, chats) = (
        parts.next().expect("url").to_owned(),
        parts.next().expect("home").to_owned(),
        parts.next().expect("chats").to_owned(),
    );
    let chats: Vec<String> = chats.split(',').map(str::to_owned).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async move {
        let k = Kernel::open_shared(Home::at(&home), &url, test_limits(), shared_key())
            .await
            .expect("the host opens");
        let empty = json!({"steps": []}).to_string();
        k.operator()
            .run("script", &chats[0], &empty)
            .await
            .expect("warm-up");
        println!("ready");
        let mut go = String::new();
        std::io::stdin().read_line(&mut go).expect("go");
        let turns: Vec<_> = chats
            .into_iter()
            .map(|chat| {
                let k = k.clone();
                tokio::spawn(async move {
                    let input = labels(WRITES, "x").to_string();
                    let mut staged = 0;
                    for _ in 0..TURNS_EACH {
                        let r = k
                            .operator()
                            .run("script", &chat, &input)
                            .await
                            .expect("turn");
                        let out: Value =
                            serde_json::from_str(&r.output.expect("output")).expect("JSON");
                        staged += out
                            .as_array()
                            .expect("steps")
                            .iter()
                            .map(pending_id)
                            .count();
                    }
                    staged
                })
            })
            .collect();
        let mut staged = 0;
        for t in turns {
            staged += t.await.expect("a turn task");
        }
        println!("{staged}");
        std::io::stdout().flush().expect("flush");
    });
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn median_f(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
