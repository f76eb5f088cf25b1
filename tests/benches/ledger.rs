//! What an observation's commit costs the home's SQLite file, and what the
//! two changes of schema 7 and the checkpoint thread saved (issue 17).
//!
//! The kernel's own observation `INSERT`, one autocommit each (as the read
//! path makes it), alternated round by round against:
//!
//! - the same on a schema-6 ledger (`AUTOINCREMENT`: its `sqlite_sequence`
//!   row rewritten in every insert), built from the project's own
//!   migrations 1 to 6;
//! - the same on schema 7 with SQLite's automatic checkpoint in the commit
//!   (as before the checkpoint thread) instead of none on the path;
//! - a bare one-row insert into an unindexed table (the `fast_path`
//!   baseline's observation commit).
//!
//! Every file is `journal_mode=WAL`, `synchronous=NORMAL`, as the home.
//! Prints the medians and their ratios to schema 7 as it runs now.
//!
//! `cargo bench --locked -p gatehouse-e2e --bench ledger`
//! (`LEDGER_QUICK=1`: fewer rounds).

use rusqlite::Connection;
use std::path::Path;
use std::time::Instant;

const MIGRATIONS: [&str; 8] = [
    include_str!("../../host/src/store/migrations/V1__initial.sql"),
    include_str!("../../host/src/store/migrations/V2__principals.sql"),
    include_str!("../../host/src/store/migrations/V3__hostile_input.sql"),
    include_str!("../../host/src/store/migrations/V4__revert_expiry_once.sql"),
    include_str!("../../host/src/store/migrations/V5__hooks_notices.sql"),
    include_str!("../../host/src/store/migrations/V6__fast_path.sql"),
    include_str!("../../host/src/store/migrations/V7__ledger_sequence.sql"),
    include_str!("../../host/src/store/migrations/V8__open_by_chat.sql"),
];

/// The read path's observation, as `store::ledger` writes it.
const OBSERVE: &str = "INSERT INTO ledger (chat, kind, caller, person, gadget, gatekeeper, tool, classified_by,
    trust, sources, account, action_ref, result_bytes, created_at, hook)
  VALUES ('bench', 'observation', 'bench', 'bench', 'script', 'rogue', 'echo', 'server-annotation',
    'byo', '[{\"id\":\"rogue\",\"title\":\"gatekeeper rogue\",\"restricted\":false}]', NULL, NULL, 9, 0, NULL)";

const BARE: &str =
    "INSERT INTO t (chat, tool, args, state) VALUES ('bench', 'echo', '{\"n\":1}', 'done')";

fn open(path: &Path) -> Connection {
    let conn = Connection::open(path).expect("a file");
    conn.pragma_update(None, "journal_mode", "WAL")
        .expect("wal");
    conn.pragma_update(None, "synchronous", "NORMAL")
        .expect("normal");
    conn
}

/// A ledger at `schema`, migrated as the store migrates (foreign keys off).
fn ledger(path: &Path, schema: usize) -> Connection {
    let mut conn = open(path);
    for sql in &MIGRATIONS[..schema] {
        let tx = conn.transaction().expect("a transaction");
        tx.execute_batch(sql).expect("the migration applies");
        tx.commit().expect("commit");
    }
    conn
}

fn per_insert(conn: &Connection, sql: &str, n: usize) -> f64 {
    let mut st = conn.prepare_cached(sql).expect("prepare");
    let t = Instant::now();
    for _ in 0..n {
        st.execute([]).expect("insert");
    }
    t.elapsed().as_secs_f64() * 1e6 / n as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let quick = std::env::var_os("LEDGER_QUICK").is_some();
    let (rounds, per) = if quick { (5, 1000) } else { (15, 3000) };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let six = ledger(&dir.path().join("six.db"), 6);
    // "Schema 7" below is the newest schema: later versions change no
    // index an observation enters.
    let seven = ledger(&dir.path().join("seven.db"), MIGRATIONS.len());
    let inline = ledger(&dir.path().join("inline.db"), MIGRATIONS.len());
    let bare = open(&dir.path().join("bare.db"));
    bare.execute_batch(
        "CREATE TABLE t (id INTEGER PRIMARY KEY, chat TEXT, tool TEXT, args TEXT, state TEXT) STRICT",
    )
    .expect("table");
    // Schema 7 now: the writer never checkpoints on the path (the
    // store's thread does, between rounds here). Before the thread: SQLite's
    // automatic checkpoint at a thousand pages, in the commit.
    seven
        .pragma_update(None, "wal_autocheckpoint", 0)
        .expect("no checkpoint in the commit");
    six.pragma_update(None, "wal_autocheckpoint", 0)
        .expect("no checkpoint in the commit");
    let checkpoint = |c: &Connection| {
        c.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
            .expect("checkpoint")
    };
    let (mut t6, mut t7, mut ti, mut tb) = (vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        t6.push(per_insert(&six, OBSERVE, per));
        t7.push(per_insert(&seven, OBSERVE, per));
        ti.push(per_insert(&inline, OBSERVE, per));
        tb.push(per_insert(&bare, BARE, per));
        checkpoint(&six);
        checkpoint(&seven);
    }
    let (t6, t7, ti, tb) = (median(t6), median(t7), median(ti), median(tb));
    println!("| observation commit | µs | vs schema 7, no checkpoint on the path |");
    println!("|---|---|---|");
    for (what, t) in [
        ("schema 6 (AUTOINCREMENT), no checkpoint on the path", t6),
        ("schema 7, SQLite's checkpoint in the commit", ti),
        ("schema 7, no checkpoint on the path (now)", t7),
        ("bare one-row insert, no index", tb),
    ] {
        println!("| {what} | {t:.1} | {:.2}× |", t / t7);
    }
}
