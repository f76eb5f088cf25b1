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

mod adapter;
mod copy;
mod listen;
mod pool;
mod presence;
mod tls;
pub(super) mod trips;
mod url;

pub(crate) use adapter::reason;
pub use copy::{Copied, Files, TABLES};
pub(crate) use listen::Listener;
pub(crate) use pool::Shared;
pub use presence::Presence;
pub(crate) use presence::present;
pub use url::DatabaseUrl;

use anyhow::bail;
use std::time::Duration;
use tls::Tls;
use tokio_postgres::Client;

mod embedded {
    refinery::embed_migrations!("src/store/postgres/migrations");
}

/// Where refinery records the versions applied.
const HISTORY: &str = "gatehouse_schema_history";

/// Taken (as a transaction-level advisory lock) by whoever migrates, so
/// that two hosts starting at once apply each version once. The number is
/// this deployment's own: "GATEHOUS" in ASCII.
const MIGRATION_LOCK: i64 = 0x4741_5445_484f_5553;

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
/// worded by `tls`, anything else names what the driver said.
fn connect_error(
    url: &DatabaseUrl,
    config: &tokio_postgres::Config,
    e: &tokio_postgres::Error,
) -> anyhow::Error {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        _ => "the server".to_owned(),
    };
    match tls::refusal(e, url.root_cert(), &host) {
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
    tokio_postgres::Connection<tokio_postgres::Socket, tls::TlsStream>,
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
