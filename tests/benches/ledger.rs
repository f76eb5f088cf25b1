//! What an observation's commit costs the home's SQLite file, and what
//! schema 7, schema 9 and the checkpoint thread saved, so that a change
//! to the read path's commit is weighed before it lands.
//!
//! The kernel's own observation `INSERT`, one autocommit each (as the read
//! path makes it), alternated round by round against:
//!
//! - the same on a schema-6 ledger (`AUTOINCREMENT`: its `sqlite_sequence`
//!   row rewritten in every insert), built from the project's own
//!   migrations 1 to 6;
//! - the same on schema 8 (CHECKs with IN-lists: SQLite builds a
//!   temporary b-tree of each list of three or more, every insert);
//! - the same on the newest schema with SQLite's automatic checkpoint in
//!   the commit (as before the checkpoint thread) instead of none on the
//!   path;
//! - a bare one-row insert into an unindexed table (the `fast_path`
//!   baseline's observation commit).
//!
//! Every file is `journal_mode=WAL`, `synchronous=NORMAL`, as the home.
//! Prints the medians and their ratios to the newest schema as it runs now.
//!
//! `cargo bench --locked -p gatehouse-e2e --bench ledger`
//! (`LEDGER_QUICK=1`: fewer rounds).

use rusqlite::Connection;
use std::path::Path;
use std::time::Instant;

const MIGRATIONS: [&str; 9] = [
    include_str!("../../host/src/store/sqlite/migrations/V1__initial.sql"),
    include_str!("../../host/src/store/sqlite/migrations/V2__principals.sql"),
    include_str!("../../host/src/store/sqlite/migrations/V3__hostile_input.sql"),
    include_str!("../../host/src/store/sqlite/migrations/V4__revert_expiry_once.sql"),
    include_str!("../../host/src/store/sqlite/migrations/V5__hooks_notices.sql"),
    include_str!("../../host/src/store/sqlite/migrations/V6__fast_path.sql"),
    include_str!("../../host/src/store/sqlite/migrations/V7__ledger_sequence.sql"),
    include_str!("../../host/src/store/sqlite/migrations/V8__open_by_chat.sql"),
    include_str!("../../host/src/store/sqlite/migrations/V9__ledger_checks.sql"),
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
    let eight = ledger(&dir.path().join("eight.db"), 8);
    let newest = ledger(&dir.path().join("newest.db"), MIGRATIONS.len());
    let inline = ledger(&dir.path().join("inline.db"), MIGRATIONS.len());
    let bare = open(&dir.path().join("bare.db"));
    bare.execute_batch(
        "CREATE TABLE t (id INTEGER PRIMARY KEY, chat TEXT, tool TEXT, args TEXT, state TEXT) STRICT",
    )
    .expect("table");
    // Now: the writer never checkpoints on the path (the store's thread
    // does, between rounds here). Before the thread: SQLite's automatic
    // checkpoint at a thousand pages, in the commit.
    for c in [&six, &eight, &newest] {
        c.pragma_update(None, "wal_autocheckpoint", 0)
            .expect("no checkpoint in the commit");
    }
    let checkpoint = |c: &Connection| {
        c.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
            .expect("checkpoint")
    };
    let (mut t6, mut t8, mut tn, mut ti, mut tb) = (vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        t6.push(per_insert(&six, OBSERVE, per));
        t8.push(per_insert(&eight, OBSERVE, per));
        tn.push(per_insert(&newest, OBSERVE, per));
        ti.push(per_insert(&inline, OBSERVE, per));
        tb.push(per_insert(&bare, BARE, per));
        checkpoint(&six);
        checkpoint(&eight);
        checkpoint(&newest);
    }
    let (t6, t8, tn, ti, tb) = (median(t6), median(t8), median(tn), median(ti), median(tb));
    println!("| observation commit | µs | vs the newest schema, no checkpoint on the path |");
    println!("|---|---|---|");
    for (what, t) in [
        ("schema 6 (AUTOINCREMENT), no checkpoint on the path", t6),
        ("schema 8 (IN-list CHECKs), no checkpoint on the path", t8),
        ("newest, SQLite's checkpoint in the commit", ti),
        ("newest, no checkpoint on the path (now)", tn),
        ("bare one-row insert, no index", tb),
    ] {
        println!("| {what} | {t:.1} | {:.2}× |", t / tn);
    }
}
