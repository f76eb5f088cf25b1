//! The durable state: one SQLite file.
//!
//! Owns the schema, the connection settings and every SQL statement. The
//! action store's guarantees live here, in the database's own state: staging
//! with its caps (SPEC A5), the claim written with `synchronous=FULL` before
//! anything is sent (P1), recovery of interrupted claims (P3) and retention
//! (P5). It may not call components or decide policy: callers (the kernel and
//! the overseer) decide, this module records.
//!
//! Calls are synchronous and short; async callers go through
//! [`Store::run`], which moves them off the executor.

mod actions;
pub mod dispatch;
mod ledger;
mod registry;
mod rules;
mod sessions;
mod sharing;
pub mod workflows;

pub use actions::{
    Action, ActionState, Claim, ClaimBy, ClaimRefusal, NewAction, StageError, Staged, args_digest,
    validate_args,
};
pub use dispatch::{Facts, Resolved, Unresolved};
pub use ledger::{LedgerEntry, LedgerFilter, NewObservation};
pub use registry::{Chat, GadgetRecord, GatekeeperRecord, Introduction, Trust};
pub use rules::{AgentRun, Rule};
pub use sessions::{Redeemed, SessionLookup, SigninRefusal, new_secret, secret_digest};
pub use sharing::{Account, Collaborator, Observed, Observer, ShareRefusal};

use anyhow::Context as _;
use rusqlite::{Connection, OpenFlags};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// At most this many actions of one chat may be pending or applying
/// (SPEC A5); one chat never blocks another.
pub const MAX_OPEN_ACTIONS: i64 = 50;
/// Staged arguments are capped at 64 KiB of JSON (SPEC A5).
pub const MAX_ARGS_BYTES: usize = 64 * 1024;
/// A result over this size is replaced by a note with its size (SPEC P2).
pub const MAX_RESULT_BYTES: usize = 128 * 1024;
/// The newest finished actions kept per chat (SPEC P5).
pub const RETAINED_FINISHED: i64 = 100;

/// A handle on the state database, cheap to clone. Crate-private: only the
/// kernel holds one, and surfaces reach the state only through the kernel
/// (issue 11: no public store handle).
#[derive(Clone)]
pub(crate) struct Store {
    conn: Arc<Mutex<Connection>>,
}

impl Store {
    /// Open (creating if needed) the database at `path`.
    ///
    /// A file that is not a Gatehouse database, or is damaged, is refused
    /// with a message that says so; it is never overwritten.
    pub fn open(path: &Path) -> anyhow::Result<Store> {
        let mut conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .with_context(|| format!("cannot open the state database {}", path.display()))?;
        conn.busy_timeout(Duration::from_secs(30))?;
        let corrupt = |e: rusqlite::Error| {
            anyhow::anyhow!(
                "the state database {} is unreadable ({e}); move it aside or restore a backup, then retry",
                path.display()
            )
        };
        // WAL: readers never block the writer; several CLI processes and the
        // web inbox share the file. NORMAL is enough for staging (a lost
        // staged row was never sent, so at-most-once still holds); the claim
        // raises it to FULL for its own commit. (Issue 17 makes staging
        // durable too.)
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(corrupt)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(corrupt)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(corrupt)?;
        let check: String = conn
            .query_row("PRAGMA quick_check(1)", [], |r| r.get(0))
            .map_err(corrupt)?;
        if check != "ok" {
            anyhow::bail!(
                "the state database {} is damaged ({check}); move it aside or restore a backup, then retry",
                path.display()
            );
        }
        migrate(&mut conn, path)?;
        Ok(Store {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// Run `f` on a blocking thread: SQLite never runs on the async executor.
    pub async fn run<T, F>(&self, f: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> anyhow::Result<T> + Send + 'static,
    {
        let store = self.clone();
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .context("a state database task panicked")?
    }

    /// Resolve `key` in `chat` for `person` (see [`dispatch::resolve`]),
    /// with the chat's pending actions at that gatekeeper when it
    /// simulates (its reads overlay them, SPEC V1): one trip, one lock.
    pub fn resolve(
        &self,
        chat: &str,
        key: &str,
        person: &str,
    ) -> anyhow::Result<Result<(Resolved, Vec<Action>), Unresolved>> {
        let conn = self.lock();
        let resolved = match dispatch::resolve(&conn, chat, key, person)? {
            Ok(r) => r,
            Err(e) => return Ok(Err(e)),
        };
        let overlay = if resolved.gatekeeper.manifest.simulates {
            actions::pending_at(&conn, chat, &resolved.gatekeeper.name)?
        } else {
            Vec::new()
        };
        Ok(Ok((resolved, overlay)))
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves SQLite itself consistent (each
        // statement is atomic), so the connection stays usable.
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The schema's versions, oldest first: each file moves the database from
/// the version before it to its own. Named as refinery names migrations
/// (`V<n>__<name>.sql`).
const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("migrations/V1__initial.sql")),
    (2, include_str!("migrations/V2__principals.sql")),
];

/// Bring the database to the newest schema, one version per transaction,
/// recorded in `PRAGMA user_version`. A database made by a newer Gatehouse
/// is refused: this binary would not understand its rows.
fn migrate(conn: &mut Connection, path: &Path) -> anyhow::Result<()> {
    let newest = MIGRATIONS.last().map(|m| m.0).unwrap_or(0);
    let mut version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version == 0 {
        // Gatehouse before versioned schemas left user_version at 0: a
        // database that already has the ledger is version 1.
        let has_ledger: bool = conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ledger')",
            [],
            |r| r.get(0),
        )?;
        if has_ledger {
            version = 1;
        }
    }
    if version > newest {
        anyhow::bail!(
            "the state database {} was written by a newer Gatehouse (schema {version}; this one knows {newest}); upgrade gatehouse or point GATEHOUSE_HOME elsewhere",
            path.display()
        );
    }
    for (v, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > version) {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Exclusive)?;
        // Another process may have migrated while this one waited.
        let now: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if now >= *v {
            continue;
        }
        tx.execute_batch(sql)
            .with_context(|| format!("cannot bring the state database to schema {v}"))?;
        tx.pragma_update(None, "user_version", v)?;
        tx.commit()?;
    }
    Ok(())
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
