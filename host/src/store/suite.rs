//! The harness the store's suites run on, once per engine, so that each
//! statement is proven on the engine it will meet: an embedded SQLite file
//! and a real PostgreSQL, a throwaway cluster the test process starts
//! (`gatehouse-pg-cluster`). A suite is written once and loops over
//! [`Backend::both`]; each failure names its engine.

use super::postgres::{self, DatabaseUrl, Shared};
use super::sql::{Sql, args};
use std::sync::Arc;

/// Where a suite runs: one deployment's database on either engine.
#[derive(Clone)]
pub(crate) enum Backend {
    Sqlite(Arc<tempfile::TempDir>),
    Postgres(Shared, DatabaseUrl),
}

impl Backend {
    pub async fn both() -> Vec<Backend> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        // Opening the store creates and migrates the file.
        crate::store::Store::open(&dir.path().join("state.db"), crate::seal::test_key())
            .expect("the embedded store");
        let url = DatabaseUrl::parse(&gatehouse_pg_cluster::cluster().database())
            .expect("the cluster's URL");
        let mut client = postgres::connect(&url).await.expect("a connection");
        postgres::migrate(&mut client, &url)
            .await
            .expect("the schema");
        let shared = Shared::open(&url, 64).await.expect("the shared database");
        vec![
            Backend::Sqlite(Arc::new(dir)),
            Backend::Postgres(shared, url),
        ]
    }

    pub fn name(&self) -> &'static str {
        match self {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(..) => "postgres",
        }
    }

    /// A whole store on this engine's deployment, as a host opens it.
    pub fn store(&self) -> crate::store::Store {
        match self {
            Backend::Sqlite(dir) => {
                crate::store::Store::open(&dir.path().join("state.db"), crate::seal::test_key())
                    .expect("the embedded store")
            }
            Backend::Postgres(shared, _) => {
                crate::store::Store::on_shared(shared.clone(), crate::seal::test_key())
            }
        }
    }

    /// Run `f` in one transaction on a connection of its own, as one
    /// process would: SQLite's `BEGIN IMMEDIATE` as the store's
    /// writers take it, PostgreSQL's READ COMMITTED as a host's pool
    /// does.
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn Sql) -> anyhow::Result<T> + Send + 'static,
    ) -> anyhow::Result<T> {
        match self {
            Backend::Sqlite(dir) => {
                let path = dir.path().join("state.db");
                tokio::task::spawn_blocking(move || {
                    let mut conn = rusqlite::Connection::open(&path)?;
                    conn.busy_timeout(std::time::Duration::from_secs(60))?;
                    let tx =
                        conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                    let out = f(&*tx)?;
                    tx.commit()?;
                    Ok(out)
                })
                .await?
            }
            Backend::Postgres(shared, _) => shared.run(f).await,
        }
    }

    /// The chats `chats` names, each owned by the person beside it.
    pub async fn chats(&self, chats: &[(&str, &str)]) {
        let chats: Vec<(String, String)> = chats
            .iter()
            .map(|(c, o)| ((*c).to_owned(), (*o).to_owned()))
            .collect();
        self.run(move |db| {
            for (chat, owner) in &chats {
                db.exec(
                    "INSERT INTO chats (name, owner, created_at) VALUES (?1, ?2, 0)",
                    args![chat, owner],
                )?;
            }
            Ok(())
        })
        .await
        .expect("the chats");
    }

    /// A pending action of a fresh chat; its id.
    pub async fn pending(&self) -> i64 {
        let chat = format!("chat-{}", crate::entropy::random_hex(8).expect("entropy"));
        self.pending_in(&chat).await
    }

    /// A pending action of `chat` (created if new) at the gatekeeper
    /// `mail`; its id.
    pub async fn pending_in(&self, chat: &str) -> i64 {
        let chat = chat.to_owned();
        self.run(move |db| {
            db.exec(
                "INSERT INTO chats (name, owner, created_at) VALUES (?1, 'ana', 0)
                 ON CONFLICT DO NOTHING",
                args![chat],
            )?;
            db.row(
                "INSERT INTO ledger (chat, kind, caller, person, gatekeeper, tool, args, state, created_at)
                 VALUES (?1, 'action', 'gadget', 'ana', 'mail', 'send', '{}', 'pending', 0)
                 RETURNING id",
                args![chat],
            )?
            .ok_or_else(|| anyhow::anyhow!("no id returned"))?
            .get(0)
        })
        .await
        .expect("a pending action")
    }

    /// Take `gatekeeper`'s drain flight as a process of this engine's
    /// deployment would.
    pub async fn flight(&self, gatekeeper: &str) -> crate::flight::Flight {
        match self {
            Backend::Sqlite(dir) => crate::flight::on_home(dir.path(), gatekeeper).await,
            Backend::Postgres(_, url) => crate::flight::on_database(url, gatekeeper).await,
        }
        .expect("the drain flight")
    }

    pub async fn state(&self, id: i64) -> (String, Option<i64>, Option<String>) {
        self.run(move |db| {
            let r = db
                .row(
                    "SELECT state, retryable, claim_owner FROM ledger WHERE id = ?1",
                    args![id],
                )?
                .ok_or_else(|| anyhow::anyhow!("no action {id}"))?;
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .await
        .expect("the action's state")
    }
}

/// Run `f` as one of the racers `gate` waits for. On PostgreSQL every
/// racer's transaction has begun before any of them reads, and each holds
/// what it wrote a moment before committing, so their reads and writes
/// truly overlap (without this, racers on a pool rarely met); SQLite's
/// writing transactions exclude each other, so there they run one after
/// another (the gate is not used).
pub(crate) fn raced<T>(
    db: &dyn Sql,
    gate: &std::sync::Barrier,
    f: impl FnOnce(&dyn Sql) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    if db.engine() == super::sql::Engine::Sqlite {
        return f(db);
    }
    gate.wait();
    let out = f(db)?;
    std::thread::sleep(std::time::Duration::from_millis(100));
    Ok(out)
}

/// A manifest of one tool, `send`, that declares nothing about itself.
pub(crate) fn send_manifest() -> crate::manifest::Manifest {
    crate::manifest::Manifest {
        tools: vec![crate::manifest::Tool {
            name: "send".into(),
            description: "sends".into(),
            input_schema: "{}".into(),
            annotations: Default::default(),
            reverted_by: None,
            honours_idempotency_key: false,
            title: None,
            output_schema: None,
            task_support: None,
        }],
        ..Default::default()
    }
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// A chat `c` of `ann` with key `K` naming gatekeeper `g` (granting
/// `send`; an operator credential `op`), shared with `bob`, who may decide
/// and observes through his own account `bob/work`: every table
/// resolution and the authorization rule read is in play. Written in the
/// dialect both engines accept.
pub(crate) fn shared_chat(db: &dyn Sql) -> anyhow::Result<()> {
    let manifest = serde_json::to_string(&send_manifest())?;
    for user in ["ann", "bob"] {
        db.exec(
            "INSERT INTO users (name, created_at) VALUES (?1, 0)",
            args![user],
        )?;
    }
    for (name, value) in [
        ("op", "operator-credential"),
        ("bob-work", "bob-credential"),
    ] {
        db.exec(
            "INSERT INTO secrets (name, value) VALUES (?1, ?2)",
            args![name, value],
        )?;
    }
    db.exec(
        "INSERT INTO gatekeepers (name, digest, trust, hosts, secret, settings, manifest, added_at)
         VALUES ('g', ?1, 'byo', '[]', 'op', '{}', ?2, 0)",
        args!["0".repeat(64), manifest],
    )?;
    db.exec(
        "INSERT INTO chats (name, owner, created_at) VALUES ('c', 'ann', 0)",
        args![],
    )?;
    db.exec(
        "INSERT INTO introductions (chat, key, gatekeeper, tools, introduced_by)
         VALUES ('c', 'K', 'g', '[\"send\"]', 'ann')",
        args![],
    )?;
    db.exec(
        "INSERT INTO accounts (\"user\", gatekeeper, label, secret, is_default, created_at)
         VALUES ('bob', 'g', 'work', 'bob-work', 1, 0)",
        args![],
    )?;
    db.exec(
        "INSERT INTO collaborators (chat, \"user\", added_by, added_at, verified_at, may_decide)
         VALUES ('c', 'bob', 'ann', 0, 1, 1)",
        args![],
    )?;
    db.exec(
        "INSERT INTO observers (chat, \"user\", gatekeeper, account, added_at)
         VALUES ('c', 'bob', 'g', 'bob/work', 0)",
        args![],
    )?;
    Ok(())
}
