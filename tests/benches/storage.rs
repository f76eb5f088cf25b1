//! The two engines' floor for what staging and claiming write.
//!
//! The same statements, against the same schema, on the embedded SQLite
//! file and on a PostgreSQL cluster this benchmark starts itself (durable:
//! `fsync` and `synchronous_commit` on, as a production server runs):
//!
//! - stage: in one transaction, the per-chat cap's count and the INSERT of
//!   a pending action, committed durably (SQLite `synchronous=FULL`);
//! - claim: in one transaction, the conditional UPDATE from pending to
//!   applying that makes a send at most once (SPEC P1), committed durably.
//!
//! These are the floors the PostgreSQL backend will be measured against
//! once it serves stages and claims: what the database alone costs, before
//! any of Gatehouse's work. Each figure is a median of rounds that
//! alternate the engines, so both see the same noise; the ratio is the
//! result. `STORAGE_QUICK=1` runs fewer rounds.
//!
//! `cargo bench --locked -p gatehouse-e2e --bench storage`

use gatehouse::store::postgres::{self, DatabaseUrl};
use gatehouse_e2e::postgres::durable_cluster;
use std::time::{Duration, Instant};

/// Operations per round and engine.
const PER_ROUND: usize = 50;
/// Chats the actions are spread over: the open-action cap never refuses.
const CHATS: usize = 1000;

const COUNT_OPEN: &str = "SELECT count(*) FROM ledger WHERE chat = $1 AND kind = 'action' AND state IN ('pending', 'applying')";
const STAGE: &str = "INSERT INTO ledger (chat, kind, caller, person, gatekeeper, tool, args, args_digest, state, created_at) \
     VALUES ($1, 'action', 'bench', 'bench', 'issues', 'addLabel', '{\"id\":1,\"label\":\"x\"}', \
     '0000000000000000000000000000000000000000000000000000000000000000', 'pending', 0) RETURNING id";
const CLAIM: &str =
    "UPDATE ledger SET state = 'applying', claim_owner = $1 WHERE id = $2 AND state = 'pending'";

fn main() {
    let quick = std::env::var_os("STORAGE_QUICK").is_some();
    let rounds = if quick { 5 } else { 40 };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");

    // PostgreSQL: a durable cluster of its own, migrated by Gatehouse.
    let pg = durable_cluster();
    let url = DatabaseUrl::parse(&pg.database()).expect("a postgres URL");
    rt.block_on(gatehouse::moving::migrate_database(&url, None))
        .expect("the database migrates");
    let mut client = rt.block_on(postgres::connect(&url)).expect("connects");
    // Prepared once, as the SQLite side's statements are cached.
    let statements = rt.block_on(async {
        Statements {
            count_open: client.prepare(COUNT_OPEN).await.expect("prepare"),
            stage: client.prepare(STAGE).await.expect("prepare"),
            claim: client.prepare(CLAIM).await.expect("prepare"),
        }
    });

    // SQLite: a home made by Gatehouse, written with the store's settings.
    let home = tempfile::tempdir().expect("a temporary directory");
    drop(
        gatehouse::kernel::Kernel::open(
            gatehouse::home::Home::at(home.path()),
            gatehouse::Limits::default(),
        )
        .expect("the home opens"),
    );
    let mut sqlite =
        rusqlite::Connection::open(home.path().join("gatehouse.db")).expect("the database opens");
    sqlite
        .pragma_update(None, "synchronous", "FULL")
        .expect("FULL");

    let mut n = 0usize;
    let mut sqlite_ids = Vec::new();
    let mut pg_ids = Vec::new();
    let mut stage_sqlite = Vec::new();
    let mut stage_pg = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..PER_ROUND {
            n += 1;
            sqlite_ids.push(stage_on_sqlite(&mut sqlite, &format!("c{}", n % CHATS)));
        }
        stage_sqlite.push(t.elapsed() / PER_ROUND as u32);
        let t = Instant::now();
        for _ in 0..PER_ROUND {
            n += 1;
            let chat = format!("c{}", n % CHATS);
            pg_ids.push(rt.block_on(stage_on_postgres(&mut client, &statements, &chat)));
        }
        stage_pg.push(t.elapsed() / PER_ROUND as u32);
    }

    let mut claim_sqlite = Vec::new();
    let mut claim_pg = Vec::new();
    for (s, p) in sqlite_ids.chunks(PER_ROUND).zip(pg_ids.chunks(PER_ROUND)) {
        let t = Instant::now();
        for id in s {
            claim_on_sqlite(&mut sqlite, *id);
        }
        claim_sqlite.push(t.elapsed() / s.len() as u32);
        let t = Instant::now();
        for id in p {
            rt.block_on(claim_on_postgres(&mut client, &statements, *id));
        }
        claim_pg.push(t.elapsed() / p.len() as u32);
    }

    println!("\n| durable commit of | SQLite (FULL) | PostgreSQL | ratio |");
    println!("|---|---|---|---|");
    for (what, s, p) in [
        (
            "stage (cap count + insert)",
            &mut stage_sqlite,
            &mut stage_pg,
        ),
        (
            "claim (pending → applying)",
            &mut claim_sqlite,
            &mut claim_pg,
        ),
    ] {
        let (s, p) = (median(s), median(p));
        println!(
            "| {what} | {:.1} µs | {:.1} µs | {:.2}× |",
            s.as_secs_f64() * 1e6,
            p.as_secs_f64() * 1e6,
            p.as_secs_f64() / s.as_secs_f64()
        );
    }
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn stage_on_sqlite(conn: &mut rusqlite::Connection, chat: &str) -> i64 {
    let tx = conn.transaction().expect("begin");
    let open: i64 = tx
        .prepare_cached(&COUNT_OPEN.replace('$', "?"))
        .and_then(|mut st| st.query_row([chat], |r| r.get(0)))
        .expect("count");
    assert!(open < 50);
    let id: i64 = tx
        .prepare_cached(&STAGE.replace('$', "?"))
        .and_then(|mut st| st.query_row([chat], |r| r.get(0)))
        .expect("stage");
    tx.commit().expect("commit");
    id
}

fn claim_on_sqlite(conn: &mut rusqlite::Connection, id: i64) {
    let tx = conn.transaction().expect("begin");
    let n = tx
        .prepare_cached(&CLAIM.replace('$', "?"))
        .and_then(|mut st| st.execute(rusqlite::params!["bench-host", id]))
        .expect("claim");
    assert_eq!(n, 1);
    tx.commit().expect("commit");
}

struct Statements {
    count_open: tokio_postgres::Statement,
    stage: tokio_postgres::Statement,
    claim: tokio_postgres::Statement,
}

async fn stage_on_postgres(
    client: &mut tokio_postgres::Client,
    st: &Statements,
    chat: &str,
) -> i64 {
    let tx = client.transaction().await.expect("begin");
    let open: i64 = tx
        .query_one(&st.count_open, &[&chat])
        .await
        .expect("count")
        .get(0);
    assert!(open < 50);
    let id: i64 = tx
        .query_one(&st.stage, &[&chat])
        .await
        .expect("stage")
        .get(0);
    tx.commit().await.expect("commit");
    id
}

async fn claim_on_postgres(client: &mut tokio_postgres::Client, st: &Statements, id: i64) {
    let tx = client.transaction().await.expect("begin");
    let n = tx
        .execute(&st.claim, &[&"bench-host", &id])
        .await
        .expect("claim");
    assert_eq!(n, 1);
    tx.commit().await.expect("commit");
}
