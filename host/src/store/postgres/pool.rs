//! The shared database as a host serves from it: the pool of
//! connections, and the adapter that lets the store's statements (written
//! once against [`Sql`]) run on PostgreSQL.
//!
//! Owns how a store call reaches a pooled connection (one transaction, or
//! each statement its own commit) and how a statement and its values are
//! spelt for the driver. It may not hold policy nor know any table.

use super::{DatabaseUrl, POOL_WAIT, config_and_tls, connect, newest_version, reason, version};
use crate::store::sql::Sql;
use anyhow::{Context as _, bail};

/// The shared database as a host serves from it: a pool of connections
/// (deadpool), each store call one transaction on one of them, run off the
/// executor like every store call. Crate-private, as the embedded store is
/// (no public store handle).
#[derive(Clone)]
pub(crate) struct Shared {
    pool: deadpool_postgres::Pool,
    url: DatabaseUrl,
    /// Round trips made through this pool since it opened: each statement
    /// and each `BEGIN` and `COMMIT` (a statement's first preparation on a
    /// connection is not counted). What a store call costs on a shared
    /// database is mostly these, so the tests hold the hot paths to them.
    trips: std::sync::Arc<std::sync::atomic::AtomicU64>,
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
            trips: Default::default(),
        })
    }

    /// The database's URL (shown without its password).
    pub fn url(&self) -> &DatabaseUrl {
        &self.url
    }

    /// Round trips made through this pool since it opened (see the field).
    pub fn trips(&self) -> u64 {
        self.trips.load(std::sync::atomic::Ordering::Relaxed)
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
            // `BEGIN` and `COMMIT`.
            self.trips
                .fetch_add(2, std::sync::atomic::Ordering::Relaxed);
            let out = f(&super::adapter::Postgres {
                client: &tx,
                rt,
                trips: &self.trips,
            })?;
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
            f(&super::adapter::Postgres {
                client: &*client,
                rt,
                trips: &self.trips,
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
