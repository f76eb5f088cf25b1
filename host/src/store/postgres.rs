//! The PostgreSQL database that several hosts share: connecting, its
//! schema's versions, and moving an embedded home's state into it.
//!
//! Owns every statement run against PostgreSQL and the schema in
//! `migrations/postgres/` (the same tables, checks and triggers as the
//! SQLite schema, written once for this engine, versioned by refinery).
//! It may not decide policy nor read the home's files: what a copy carries
//! besides the tables (component bytes, the certificate authority's key)
//! is handed in by the kernel, which owns where those live.
//!
//! The safe sides chosen here (docs/storage.md): a database written by a
//! newer Gatehouse is refused; a copy goes only into a database that holds
//! no deployment yet, in one transaction, so a failed copy leaves nothing
//! behind; and a table of the home that this module does not know stops
//! the copy instead of being left out.

use super::Store;
pub(crate) use super::sql::reason;
use super::sql::{Cell, Sql, args};
use anyhow::{Context as _, bail};
use rusqlite::types::ValueRef;
use std::time::Duration;
use tokio_postgres::Client;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};

use super::pg_tls::Tls;
pub use super::pg_url::DatabaseUrl;

mod embedded {
    refinery::embed_migrations!("src/store/migrations/postgres");
}

/// Where refinery records the versions applied.
const HISTORY: &str = "gatehouse_schema_history";

/// Taken (as a transaction-level advisory lock) by whoever migrates, so
/// that two hosts starting at once apply each version once. The number is
/// this deployment's own: "GATEHOUS" in ASCII.
const MIGRATION_LOCK: i64 = 0x4741_5445_484f_5553;

/// The tables of a deployment in the order a copy fills them: a table
/// after every table its foreign keys name. A table of the home missing
/// here stops the copy (nothing is silently left behind), and a test
/// checks the list against both schemas.
pub const TABLES: &[&str] = &[
    "users",
    "secrets",
    "gadgets",
    "gatekeepers",
    "chats",
    "introductions",
    "accounts",
    "collaborators",
    "observers",
    "share_links",
    "approvers",
    "ledger",
    "hooks",
    "hook_firings",
    "decisions",
    "rules",
    "agent_runs",
    "workflows",
    "workflow_runs",
    "run_steps",
    "approval_requests",
    "certificates",
    "invocations",
    "web_signin_tokens",
    "web_sessions",
    "web_csrf",
    "web_passkeys",
    "identity_bindings",
    "deployment_secrets",
    "notify_targets",
    "notices",
    "request_notices",
    "push_subscriptions",
    "push_notices",
    "gadget_storage",
    "durability_mark",
    "policy_epoch",
];

/// Tables whose one row the schema itself writes (a counter): a copy
/// replaces it, and it does not make a database "in use".
const SEEDED: &[&str] = &["durability_mark", "policy_epoch"];

/// How long a connection attempt may take when the URL does not say
/// (`connect_timeout`): an unreachable database is reported in seconds,
/// not after the system's TCP timeout of minutes.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a store call waits for a pooled connection before it is
/// refused with an error (every connection busy for that long means the
/// database is stuck, and waiting on would hang the host).
const POOL_WAIT: Duration = Duration::from_secs(60);

/// The driver's configuration for `url` and the TLS connector its
/// `sslmode` asks for: what every connection to the database is made
/// with (the pool's, the listener's, the presence lock's, the flight's,
/// and the `db` commands').
fn config_and_tls(url: &DatabaseUrl) -> anyhow::Result<(tokio_postgres::Config, Tls)> {
    Ok((
        url.config(CONNECT_TIMEOUT)?,
        Tls::new(url.tls(), url.root_cert())?,
    ))
}

/// Why connecting to `url` failed, as one line: a certificate refused is
/// worded by `pg_tls`, anything else names what the driver said.
fn connect_error(
    url: &DatabaseUrl,
    config: &tokio_postgres::Config,
    e: &tokio_postgres::Error,
) -> anyhow::Error {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        _ => "the server".to_owned(),
    };
    match super::pg_tls::refusal(e, url.root_cert(), &host) {
        Some(line) => anyhow::anyhow!("cannot connect to the database {url}: {line}"),
        None => anyhow::anyhow!(
            "cannot connect to the database {url} ({}); check that PostgreSQL runs there and that the URL (GATEHOUSE_DATABASE_URL or --database) is right",
            reason(e)
        ),
    }
}

/// Connect to `url`; the connection's own task runs on the current runtime
/// until the client is dropped.
pub async fn connect(url: &DatabaseUrl) -> anyhow::Result<Client> {
    let (client, connection) = connect_raw(url).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %reason(&e), "the PostgreSQL connection ended");
        }
    });
    Ok(client)
}

/// Connect to `url`, handing back the connection to drive: the one
/// path every connection to the database is made by.
async fn connect_raw(
    url: &DatabaseUrl,
) -> anyhow::Result<(
    Client,
    tokio_postgres::Connection<tokio_postgres::Socket, super::pg_tls::TlsStream>,
)> {
    let (config, tls) = config_and_tls(url)?;
    config
        .connect(tls)
        .await
        .map_err(|e| connect_error(url, &config, &e))
}

/// The schema version this binary brings the database to.
pub fn newest_version() -> i64 {
    embedded::migrations::runner()
        .get_migrations()
        .iter()
        .map(|m| i64::from(m.version()))
        .max()
        .unwrap_or(0)
}

/// The schema version the database is at (0: none yet).
pub async fn version(client: &impl tokio_postgres::GenericClient) -> anyhow::Result<i64> {
    let failed = |e: tokio_postgres::Error| {
        anyhow::anyhow!("cannot read the database's schema version ({})", reason(&e))
    };
    let kept: bool = client
        .query_one(&format!("SELECT to_regclass('{HISTORY}') IS NOT NULL"), &[])
        .await
        .map_err(failed)?
        .get(0);
    if !kept {
        return Ok(0);
    }
    Ok(client
        .query_one(
            &format!("SELECT COALESCE(max(version), 0)::BIGINT FROM {HISTORY}"),
            &[],
        )
        .await
        .map_err(failed)?
        .get(0))
}

/// Bring the database at `url` to the newest schema; the versions it was
/// at before and is at now. A database written by a newer Gatehouse is
/// refused before anything is changed. Two hosts migrating at once take
/// turns on an advisory lock, and the second finds nothing left to do.
pub async fn migrate(client: &mut Client, url: &DatabaseUrl) -> anyhow::Result<(i64, i64)> {
    let newest = newest_version();
    let lock = client.transaction().await?;
    lock.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(|e| anyhow::anyhow!("cannot lock the database for migration ({})", reason(&e)))?;
    let before = version(&lock).await?;
    if before > newest {
        bail!(
            "the database {url} was written by a newer Gatehouse (schema {before}; this one knows {newest}); upgrade gatehouse on this host"
        );
    }
    // refinery runs each version in a transaction of its own on a client
    // it borrows whole, so the lock is held by a second connection.
    let mut worker = connect(url).await?;
    let mut runner = embedded::migrations::runner().set_abort_divergent(true);
    runner.set_migration_table_name(HISTORY);
    runner
        .run_async(&mut worker)
        .await
        .map_err(|e| anyhow::anyhow!("cannot bring the database {url} to schema {newest}: {e}"))?;
    lock.commit().await?;
    Ok((before, version(client).await?))
}

/// Rewrite the tables that keep sealed secrets (`VACUUM FULL`), so that
/// the unsealed values an older Gatehouse kept, replaced by sealing, are
/// not left behind as dead row versions. The tables are small; they are
/// locked for the moment it takes.
pub async fn vacuum_sealed(client: &Client, url: &DatabaseUrl) -> anyhow::Result<()> {
    client
        .batch_execute("VACUUM FULL secrets, deployment_secrets, hooks")
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "the secrets of {url} are sealed, but the tables could not be rewritten to drop the unsealed values ({}); run VACUUM FULL on secrets, deployment_secrets and hooks",
                reason(&e)
            )
        })
}

/// The shared database as a host serves from it: a pool of connections
/// (deadpool), each store call one transaction on one of them, run off the
/// executor like every store call. Crate-private, as the embedded store is
/// (no public store handle).
#[derive(Clone)]
pub(crate) struct Shared {
    pool: deadpool_postgres::Pool,
    url: DatabaseUrl,
}

impl Shared {
    /// Open the database at `url` with at most `connections` connections.
    /// It must be at this binary's schema: opening never migrates (a
    /// status read must not write), so an older one is refused with the
    /// command that brings it up, and a newer one as [`migrate`] refuses it.
    pub async fn open(url: &DatabaseUrl, connections: usize) -> anyhow::Result<Shared> {
        let (at, newest) = (version(&connect(url).await?).await?, newest_version());
        if at > newest {
            bail!(
                "the database {url} was written by a newer Gatehouse (schema {at}; this one knows {newest}); upgrade gatehouse on this host"
            );
        }
        if at < newest {
            bail!(
                "the database {url} is at schema {at} and this gatehouse needs {newest}; run `gatehouse db migrate --database URL` first"
            );
        }
        let (config, tls) = config_and_tls(url)?;
        let manager = deadpool_postgres::Manager::from_config(
            config,
            tls,
            deadpool_postgres::ManagerConfig {
                recycling_method: deadpool_postgres::RecyclingMethod::Fast,
            },
        );
        let pool = deadpool_postgres::Pool::builder(manager)
            .max_size(connections.max(1))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(POOL_WAIT))
            .build()
            .map_err(|e| anyhow::anyhow!("cannot set up connections to {url} ({e})"))?;
        Ok(Shared {
            pool,
            url: url.clone(),
        })
    }

    /// The database's URL (shown without its password).
    pub fn url(&self) -> &DatabaseUrl {
        &self.url
    }

    /// Run `f` in one transaction (READ COMMITTED) on a pooled connection,
    /// on a blocking thread; committed when `f` returns `Ok`, rolled back
    /// otherwise.
    pub async fn run<T, F>(&self, f: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Sql) -> anyhow::Result<T> + Send + 'static,
    {
        let shared = self.clone();
        tokio::task::spawn_blocking(move || shared.run_here(f))
            .await
            .context("a database task panicked")?
    }

    /// [`Shared::run`] on this thread, which must be one that may block
    /// (the store's calls run on the runtime's blocking threads, as the
    /// embedded store's do): the driver's futures are driven to completion
    /// here on the runtime this thread belongs to. Generic over the error,
    /// so that a caller's own refusal (`Err`) also rolls back.
    pub fn run_here<T, E: From<anyhow::Error>>(
        &self,
        f: impl FnOnce(&dyn Sql) -> Result<T, E>,
    ) -> Result<T, E> {
        self.on_connection(|client, rt| {
            let tx = rt
                .block_on(client.transaction())
                .map_err(|e| anyhow::anyhow!("cannot begin a transaction ({})", reason(&e)))?;
            let out = f(&super::sql::Postgres { client: &tx, rt })?;
            rt.block_on(tx.commit())
                .map_err(|e| anyhow::anyhow!("cannot commit ({})", reason(&e)))?;
            Ok(out)
        })
    }

    /// Run `f` on a pooled connection with no transaction around it: each
    /// statement its own commit, as [`super::Store::with`] promises on the
    /// embedded file too. Under READ COMMITTED a transaction gives a run of
    /// reads nothing more (each statement sees what was committed when it
    /// began either way), and saves two round trips (`BEGIN`, `COMMIT`)
    /// per call; whoever needs statements to stand or fall together, or a
    /// row held while deciding, uses [`Shared::run_here`].
    pub fn each_here<T>(&self, f: impl FnOnce(&dyn Sql) -> anyhow::Result<T>) -> anyhow::Result<T> {
        self.on_connection(|client, rt| {
            f(&super::sql::Postgres {
                client: &*client,
                rt,
            })
        })
    }

    /// Run `go` on this thread with a pooled connection and the runtime
    /// that drives the driver's futures (see [`Shared::run_here`]).
    fn on_connection<T, E: From<anyhow::Error>>(
        &self,
        go: impl FnOnce(&mut deadpool_postgres::Object, &tokio::runtime::Handle) -> Result<T, E>,
    ) -> Result<T, E> {
        let rt = tokio::runtime::Handle::try_current().map_err(|_| {
            anyhow::anyhow!("the shared database was used outside the host's runtime")
        })?;
        let run = || -> Result<T, E> {
            let mut client = rt
                .block_on(self.pool.get())
                .map_err(|e| anyhow::anyhow!("cannot reach the database ({e})"))?;
            go(&mut client, &rt)
        };
        // A store call made on one of the executor's own threads (which
        // the embedded store tolerates: SQLite is a library call) would
        // panic in `block_on`; the thread is handed over to blocking work
        // first. On a blocking thread this changes nothing.
        match rt.runtime_flavor() {
            tokio::runtime::RuntimeFlavor::CurrentThread => run(),
            _ => tokio::task::block_in_place(run),
        }
    }
}

/// A connection listening on one channel of the shared database: how a
/// host learns, without polling, that another host decided or finished an
/// action ([`super::actions::DECIDED`]). Notifications arrive only after
/// the transaction that sent them committed; one that rolled back is never
/// heard. Dropping the listener closes its connection.
pub(crate) struct Listener {
    heard: tokio::sync::mpsc::UnboundedReceiver<String>,
    _client: Client,
}

impl Listener {
    /// Listen on `channel` of the database at `url`.
    pub async fn open(url: &DatabaseUrl, channel: &str) -> anyhow::Result<Listener> {
        let (client, mut connection) = connect_raw(url).await?;
        let (tell, heard) = tokio::sync::mpsc::unbounded_channel();
        // The driver hands notifications to whoever polls the connection:
        // this task polls it, and passes each payload on.
        tokio::spawn(async move {
            while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                match message {
                    Ok(tokio_postgres::AsyncMessage::Notification(n)) => {
                        if tell.send(n.payload().to_owned()).is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %reason(&e), "a listening connection ended");
                        return;
                    }
                }
            }
        });
        // A channel name is an identifier: quoted, so no text of ours is
        // ever read as SQL.
        client
            .batch_execute(&format!("LISTEN \"{}\"", channel.replace('"', "\"\"")))
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {url} ({})", reason(&e)))?;
        Ok(Listener {
            heard,
            _client: client,
        })
    }

    /// The next payload heard; `None` once the connection ended.
    pub async fn next(&mut self) -> Option<String> {
        self.heard.recv().await
    }
}

/// A host's presence in the shared database: the liveness signal a claim
/// rests on across machines (SPEC P3). A claim names its host's owner
/// token, as on one machine; there a lock file held for the process's life
/// says the owner lives, and here a session-level advisory lock held on a
/// connection of its own does. When the host dies, however it dies, its
/// connection closes and PostgreSQL releases the lock: the release by a
/// dead connection is the signal, with no clock and no lease to tune. A
/// host that is merely slow keeps its connection, so its claims are never
/// touched.
pub struct Presence {
    owner: String,
    /// The connection holding the lock; dropping it ends the presence.
    _holder: Client,
}

/// The advisory-lock key of `owner`: the first eight bytes of a SHA-256
/// of the token under this purpose's label (other users of advisory locks
/// in the same database are not disturbed by chance).
fn presence_key(owner: &str) -> i64 {
    use sha2::{Digest as _, Sha256};
    let digest = Sha256::digest(format!("gatehouse-presence\0{owner}"));
    let mut eight = [0u8; 8];
    eight.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(eight)
}

/// Whether some session holds the presence lock of the host `?1`/`?2`
/// names (a bigint advisory key is kept as two 32-bit halves).
const PRESENT: &str =
    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND classid::text::bigint = ?1 AND objid::text::bigint = ?2 AND objsubid = 1)";

/// The two halves of `owner`'s presence key, as `pg_locks` shows them.
fn key_halves(owner: &str) -> (i64, i64) {
    let key = presence_key(owner);
    (i64::from((key >> 32) as u32), i64::from(key as u32))
}

/// [`Presence::is_alive`] in a store transaction: whether the host named
/// `owner` is present.
pub(crate) fn present(db: &dyn Sql, owner: &str) -> anyhow::Result<bool> {
    let (high, low) = key_halves(owner);
    db.row(PRESENT, args![high, low])?
        .map_or(Ok(false), |r| r.get(0))
}

impl Presence {
    /// Announce `owner` in the database at `url` for as long as the value
    /// lives.
    pub async fn hold(url: &DatabaseUrl, owner: &str) -> anyhow::Result<Presence> {
        let holder = connect(url).await?;
        let taken: bool = holder
            .query_one("SELECT pg_try_advisory_lock($1)", &[&presence_key(owner)])
            .await
            .map_err(|e| anyhow::anyhow!("cannot announce this host in {url} ({})", reason(&e)))?
            .get(0);
        if !taken {
            bail!("another live host already uses the owner token {owner}; start again");
        }
        Ok(Presence {
            owner: owner.to_owned(),
            _holder: holder,
        })
    }

    /// The owner token this presence announces.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Whether the host named `owner` is present: some session holds its
    /// lock. Reads `pg_locks` only, so it may be asked on any connection,
    /// the holder's own included, and never takes the lock itself.
    pub async fn is_alive(
        client: &impl tokio_postgres::GenericClient,
        owner: &str,
    ) -> anyhow::Result<bool> {
        let (high, low) = key_halves(owner);
        let row = client
            .query_one(&super::sql::postgres_text(PRESENT), &[&high, &low])
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot tell whether host {owner} is present ({})",
                    reason(&e)
                )
            })?;
        Ok(row.get(0))
    }

    /// The advisory-lock key of `owner` (for tests and operators, who may
    /// look it up in `pg_locks`).
    pub fn key(owner: &str) -> i64 {
        presence_key(owner)
    }
}

/// What a copy streams from the SQLite snapshot to PostgreSQL.
enum Part {
    /// The rows that follow belong to this table and these columns.
    Table(&'static str, Vec<String>),
    Row(Vec<Cell>),
    /// The highest id each sequenced table ever handed out: an
    /// AUTOINCREMENT table's `sqlite_sequence`, and the ledger's newest
    /// entry, which is never deleted (schema 7). Ids are never reused
    /// (SPEC L1), so the copy's sequences start above it, not above the
    /// highest id left.
    Sequences(Vec<(String, i64)>),
}

/// What a copy carried, table by table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Copied {
    /// Each table copied, with its row count, in the order copied.
    pub tables: Vec<(String, u64)>,
    /// The id the ledger hands out next in the database.
    pub next_ledger_id: i64,
    /// Installed components whose bytes were copied.
    pub components: usize,
}

/// What besides the tables an embedded home keeps as files, read by the
/// kernel: component bytes by digest. (Secrets are rows, sealed: a copy
/// carries them as they are, so the database's hosts need the home's key.)
pub struct Files {
    /// Component bytes, by their SHA-256 digest.
    pub components: Vec<(String, Vec<u8>)>,
}

impl Store {
    /// Copy every table of this store, as one consistent snapshot, into
    /// the database behind `client` (migrated to the newest schema, and
    /// holding no deployment yet), with `files`, in one transaction: ids,
    /// states and observation sets arrive as they are, and the database's
    /// id sequences continue above every id the home ever handed out.
    pub async fn copy_to(
        &self,
        client: &mut Client,
        url: &DatabaseUrl,
        files: Files,
    ) -> anyhow::Result<Copied> {
        let tx = client.transaction().await?;
        for table in TABLES.iter().filter(|t| !SEEDED.contains(t)) {
            let used: bool = tx
                .query_one(&format!("SELECT EXISTS (SELECT 1 FROM {table})"), &[])
                .await
                .map_err(|e| {
                    anyhow::anyhow!("cannot read table {table} of {url} ({})", reason(&e))
                })?
                .get(0);
            if used {
                bail!(
                    "the database {url} already holds a Gatehouse deployment (its table {table} has rows); copy into an empty database"
                );
            }
        }
        // The snapshot is read on a blocking thread inside one read
        // transaction and streamed here a row at a time, so a large home
        // is never held in memory whole.
        let (send, mut parts) = tokio::sync::mpsc::channel::<Part>(1024);
        let store = self.clone();
        let reader = tokio::task::spawn_blocking(move || store.read(|c| snapshot(c, &send)));
        let mut tables = Vec::new();
        let mut sequences = Vec::new();
        let mut copying: Option<TableCopy> = None;
        while let Some(part) = parts.recv().await {
            match part {
                Part::Table(table, columns) => {
                    if let Some(done) = copying.take() {
                        tables.push(done.finish().await?);
                    }
                    copying = Some(TableCopy::start(&tx, table, &columns).await?);
                }
                Part::Row(cells) => match copying.as_mut() {
                    Some(c) => c.write(cells).await?,
                    None => bail!("a row arrived before its table"),
                },
                Part::Sequences(s) => sequences = s,
            }
        }
        if let Some(done) = copying.take() {
            tables.push(done.finish().await?);
        }
        reader
            .await
            .context("reading the home's state panicked")??;
        for (table, highest) in sequences {
            if highest > 0 {
                tx.execute(
                    "SELECT setval(pg_get_serial_sequence($1, 'id'), $2)",
                    &[&table, &highest],
                )
                .await
                .map_err(|e| {
                    anyhow::anyhow!("cannot continue the ids of {table} ({})", reason(&e))
                })?;
            }
        }
        let now = super::now_ms();
        let components = files.components.len();
        for (digest, bytes) in files.components {
            tx.execute(
                "INSERT INTO components (digest, bytes, added_at) VALUES ($1, $2, $3)",
                &[&digest, &bytes, &now],
            )
            .await
            .map_err(|e| anyhow::anyhow!("cannot copy component {digest} ({})", reason(&e)))?;
        }
        let next_ledger_id: i64 = tx
            .query_one(
                "SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM ledger_id_seq",
                &[],
            )
            .await?
            .get(0);
        tx.commit()
            .await
            .map_err(|e| anyhow::anyhow!("cannot commit the copy into {url} ({})", reason(&e)))?;
        Ok(Copied {
            tables,
            next_ledger_id,
            components,
        })
    }
}

/// One table's rows on their way in, by binary `COPY`.
struct TableCopy {
    table: &'static str,
    types: Vec<Type>,
    writer: std::pin::Pin<Box<BinaryCopyInWriter>>,
    rows: u64,
}

impl TableCopy {
    /// Begin copying `columns` of `table`, typed as the database's own
    /// columns are. A table the schema seeds (a counter) is emptied first.
    async fn start(
        tx: &tokio_postgres::Transaction<'_>,
        table: &'static str,
        columns: &[String],
    ) -> anyhow::Result<TableCopy> {
        let names = columns
            .iter()
            .map(|c| format!("\"{c}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let probe = tx
            .prepare(&format!("SELECT {names} FROM {table} LIMIT 0"))
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "the database's table {table} does not match the home's ({}); run `gatehouse db migrate` with this binary on both",
                    reason(&e)
                )
            })?;
        let types: Vec<Type> = probe.columns().iter().map(|c| c.type_().clone()).collect();
        if SEEDED.contains(&table) {
            tx.execute(&format!("DELETE FROM {table}"), &[]).await?;
        }
        let sink = tx
            .copy_in(&format!("COPY {table} ({names}) FROM STDIN BINARY"))
            .await?;
        Ok(TableCopy {
            table,
            writer: Box::pin(BinaryCopyInWriter::new(sink, &types)),
            types,
            rows: 0,
        })
    }

    async fn write(&mut self, cells: Vec<Cell>) -> anyhow::Result<()> {
        let values = row_values(self.table, &self.types, cells)?;
        let refs: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| v.as_ref() as _).collect();
        self.writer.as_mut().write(&refs).await.map_err(|e| {
            anyhow::anyhow!(
                "cannot copy a row of {} ({}); nothing was copied",
                self.table,
                reason(&e)
            )
        })?;
        self.rows += 1;
        Ok(())
    }

    /// End the COPY: the table and its row count.
    async fn finish(mut self) -> anyhow::Result<(String, u64)> {
        self.writer.as_mut().finish().await.map_err(|e| {
            anyhow::anyhow!(
                "cannot copy table {} ({}); nothing was copied",
                self.table,
                reason(&e)
            )
        })?;
        Ok((self.table.to_owned(), self.rows))
    }
}

/// A row's cells as values of the columns' PostgreSQL types. SQLite's
/// tables are STRICT, so a cell of another kind means the two schemas
/// disagree: the copy stops.
fn row_values(
    table: &str,
    types: &[Type],
    cells: Vec<Cell>,
) -> anyhow::Result<Vec<Box<dyn ToSql + Sync + Send>>> {
    cells
        .into_iter()
        .zip(types)
        .map(|(cell, ty)| -> anyhow::Result<Box<dyn ToSql + Sync + Send>> {
            Ok(match (cell, ty) {
                (Cell::Int(i), &Type::INT8) => Box::new(i),
                (Cell::Null, &Type::INT8) => Box::new(None::<i64>),
                (Cell::Text(s), &Type::TEXT) => Box::new(s),
                (Cell::Null, &Type::TEXT) => Box::new(None::<String>),
                (Cell::Bytes(b), &Type::BYTEA) => Box::new(b),
                (Cell::Null, &Type::BYTEA) => Box::new(None::<Vec<u8>>),
                (_, ty) => bail!(
                    "a value in table {table} does not fit its column's type {ty} in the database; run `gatehouse db migrate` with this binary on both"
                ),
            })
        })
        .collect()
}

/// Stream every table in [`TABLES`] order, then the id sequences, from
/// one read transaction (one snapshot of the whole home).
fn snapshot(
    conn: &rusqlite::Connection,
    send: &tokio::sync::mpsc::Sender<Part>,
) -> anyhow::Result<()> {
    let tx = conn.unchecked_transaction()?;
    let present: Vec<String> = tx
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    if let Some(unknown) = present.iter().find(|t| !TABLES.contains(&t.as_str())) {
        bail!(
            "the home's table {unknown} is not known to this Gatehouse's copy; use the gatehouse that wrote the home"
        );
    }
    let gone = || anyhow::anyhow!("the copy stopped before the whole home was read");
    for table in TABLES.iter().filter(|t| present.iter().any(|p| p == *t)) {
        let columns: Vec<String> = tx
            .prepare(&format!(
                "SELECT name FROM pragma_table_info('{table}') ORDER BY cid"
            ))?
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        let list = columns
            .iter()
            .map(|c| format!("\"{c}\""))
            .collect::<Vec<_>>()
            .join(", ");
        send.blocking_send(Part::Table(table, columns.clone()))
            .map_err(|_| gone())?;
        let mut st = tx.prepare(&format!("SELECT {list} FROM {table}"))?;
        let mut rows = st.query([])?;
        while let Some(row) = rows.next()? {
            let mut cells = Vec::with_capacity(columns.len());
            for i in 0..columns.len() {
                cells.push(match row.get_ref(i)? {
                    ValueRef::Null => Cell::Null,
                    ValueRef::Integer(n) => Cell::Int(n),
                    ValueRef::Text(t) => Cell::Text(
                        std::str::from_utf8(t)
                            .with_context(|| format!("a text in table {table} is not UTF-8"))?
                            .to_owned(),
                    ),
                    ValueRef::Blob(b) => Cell::Bytes(b.to_vec()),
                    ValueRef::Real(_) => {
                        bail!("table {table} holds a real number, which no Gatehouse column has")
                    }
                });
            }
            send.blocking_send(Part::Row(cells)).map_err(|_| gone())?;
        }
    }
    let mut sequences: Vec<(String, i64)> = tx
        .prepare(
            "SELECT m.name, MAX(COALESCE((SELECT seq FROM sqlite_sequence s WHERE s.name = m.name), 0), 0)
             FROM sqlite_master m
             WHERE m.type = 'table' AND (m.sql LIKE '%AUTOINCREMENT%' OR m.name = 'ledger')",
        )?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    for (table, highest) in sequences.iter_mut() {
        let top: i64 = tx.query_row(
            &format!("SELECT COALESCE(max(id), 0) FROM {table}"),
            [],
            |r| r.get(0),
        )?;
        *highest = (*highest).max(top);
    }
    send.blocking_send(Part::Sequences(sequences))
        .map_err(|_| gone())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every table of the embedded schema is copied, in an order that
    /// fills a table after those its foreign keys name.
    #[test]
    fn the_copy_knows_every_table_in_foreign_key_order() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = Store::open(&dir.path().join("gatehouse.db"), crate::seal::test_key())
            .expect("the store opens");
        let conn = store.home().expect("the home").lock();
        let tables: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
            .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
            .expect("the tables");
        let mut known: Vec<&str> = TABLES.to_vec();
        known.sort_unstable();
        assert_eq!(tables, known, "TABLES must list every table of the schema");
        for (i, table) in TABLES.iter().enumerate() {
            let parents: Vec<String> = conn
                .prepare(&format!(
                    "SELECT \"table\" FROM pragma_foreign_key_list('{table}')"
                ))
                .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
                .expect("the foreign keys");
            for parent in parents {
                let at = TABLES.iter().position(|t| *t == parent);
                assert!(
                    at.is_some_and(|at| at < i),
                    "{table} names {parent}, which must come before it"
                );
            }
        }
    }
}
