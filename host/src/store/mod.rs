//! The durable state: one SQLite file.
//!
//! Owns the schema, the connection settings and every SQL statement. The
//! action store's guarantees live here, in the database's own state: durable
//! staging with its caps (SPEC A5; group commit), the claim written with `synchronous=FULL` before
//! anything is sent (P1), recovery of interrupted claims (P3) and retention
//! (P5). It may not call components or decide policy: callers (the kernel and
//! the overseer) decide, this module records.
//!
//! Calls are synchronous and short; async callers go through
//! `Store::run`, which moves them off the executor, or, on the read path,
//! `Store::run_now`, which runs them in place when that cannot wait, and
//! `Store::read_now`, which reads on a read-only connection of its own
//! so that a read never queues behind a durable commit.

mod action;
mod actions;
mod checkpoint;
pub(crate) mod claims;
mod deployment;
pub mod dispatch;
mod gadget_storage;
mod hooks;
mod identities;
mod ledger;
mod notices;
mod pg_tls;
mod pg_url;
pub mod postgres;
mod push;
mod registry;
pub(crate) mod rules;
pub(crate) mod sealed;
mod sessions;
mod sharing;
pub(crate) mod sql;
mod stages;
#[cfg(test)]
pub(crate) mod suite;
mod unambiguous;
pub mod words;
pub mod workflows;

pub(crate) use actions::DECIDED;
pub use actions::{
    Action, ActionState, Args, Claim, ClaimBy, ClaimRefusal, NewAction, Recovered, RevertRefusal,
    StageError, Staged, action_tag, args_digest, validate_args,
};
pub use claims::InFlight;
pub use dispatch::{Facts, Resolved, Unresolved};
pub(crate) use gadget_storage::StoragePut;
pub use hooks::{Firing, FiringRefusal, Hook, NewHook};
pub use identities::{IdentityBinding, PASSKEYS_PER_PERSON, StoredPasskey};
pub use ledger::{LedgerEntry, LedgerFilter, NewObservation, Source, Sources};
pub use notices::{NoticeTarget, Told};
pub use push::{NewPushDevice, PushDevice, PushKeys, PushTarget, Subscribed};
pub use registry::{Chat, GadgetRecord, GatekeeperRecord, Introduction, Trust};
pub(crate) use registry::{chat_in, gadget_in};
pub use rules::{AgentRun, Rule};
pub use sessions::{Redeemed, SessionLookup, SigninRefusal, new_secret, secret_digest};
pub(crate) use sharing::observers_in;
pub use sharing::{Account, Collaborator, Observed, Observer, ShareRefusal};
pub use stages::{RuleCoverage, StagedAction};
pub use words::{
    AgentRunState, DecisionOutcome, FiringOutcome, HookKind, InvocationDecision, LedgerKind,
    RequestState, RunState, StepStatus, Verdict,
};

use anyhow::Context as _;
use rusqlite::{Connection, OpenFlags, OptionalExtension as _};
use sql::Sql;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Whether the process or host named by an owner token lives, asked in
/// the caller's transaction (a claim is interrupted exactly when its
/// owner is gone, SPEC P3). The kernel answers it: by the owner's lock
/// file in a home, by its presence lock in a shared database.
pub(crate) type IsPresent<'a> = dyn Fn(&dyn Sql, &str) -> anyhow::Result<bool> + 'a;

/// At most this many actions of one chat may be pending or applying
/// (SPEC A5); one chat never blocks another.
pub const MAX_OPEN_ACTIONS: i64 = 50;
/// Staged arguments are capped at 64 KiB of JSON (SPEC A5).
pub const MAX_ARGS_BYTES: usize = 64 * 1024;
/// A result over this size is replaced by a note with its size (SPEC P2).
pub const MAX_RESULT_BYTES: usize = 128 * 1024;
/// The newest finished actions kept per chat (SPEC P5).
pub const RETAINED_FINISHED: i64 = 100;
/// How long an action may wait for a decision unless its chat says
/// otherwise (SPEC H3): 7 days, in milliseconds.
pub const DEFAULT_EXPIRY_MS: i64 = 7 * 24 * 60 * 60 * 1000;

// Every other size a gatekeeper or gadget controls has a cap too (SPEC A5).
// Texts are cut with a note ([`cut`]); lists and manifests over their caps
// are refused, since cutting them would change what they mean.

/// A failure message, error or refusal from a gatekeeper.
pub const MAX_FAILURE_BYTES: usize = 4 * 1024;
/// Sources one read may name (each is recorded, S1).
pub const MAX_SOURCES: usize = 1000;
/// One source id; a longer one refuses the read (ids are re-verified, S2).
pub const MAX_SOURCE_ID_BYTES: usize = 512;
/// One source title; a longer one is cut.
pub const MAX_SOURCE_TITLE_BYTES: usize = 512;
/// Source ids an observer's scope may list; a longer scope is not kept.
pub const MAX_SCOPE: usize = 10_000;
/// What an agent turn answered, as kept with its run.
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;
/// Tools in one gatekeeper's manifest.
pub const MAX_TOOLS: usize = 1000;
/// Triggers one gatekeeper may declare.
pub const MAX_TRIGGERS: usize = 100;
/// One tool's name.
pub const MAX_TOOL_NAME_BYTES: usize = 128;
/// One tool's description (the prompt shows 600 characters of it).
pub const MAX_DESCRIPTION_BYTES: usize = 16 * 1024;
/// One tool's input schema.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// A whole manifest: names, descriptions and schemas together.
pub const MAX_MANIFEST_BYTES: usize = 1024 * 1024;

/// `text` if it fits in `max` bytes, else its first bytes (cut at a
/// character boundary) and a note saying how long the `what` was.
pub fn cut(text: &str, max: usize, what: &str) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{} […cut: the {what} was {} bytes; the limit is {max}]",
        &text[..end],
        text.len()
    )
}

/// What `PRAGMA quick_check` found in a damaged database. The findings are
/// SQLite's own words about the file, kept as found: the store renders no
/// terminal text, and whoever prints the error makes it one safe line (the
/// CLI does so for every error).
#[derive(Debug)]
pub struct Damaged {
    /// The database file checked.
    pub path: PathBuf,
    /// Up to five findings of the check, none of them `ok`.
    pub findings: Vec<String>,
}

impl std::fmt::Display for Damaged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the state database {} is damaged ({}); move it aside or restore a backup, then retry",
            self.path.display(),
            self.findings.join("; ")
        )
    }
}

impl std::error::Error for Damaged {}

/// A key resolved for a call, shared with what this process keeps of it,
/// and the chat's pending actions at its gatekeeper when that simulates
/// (the overlay, SPEC V1); or why the key did not resolve.
pub type Resolution = Result<(Arc<Resolved>, Vec<Action>), Unresolved>;

/// A handle on the deployment's database, cheap to clone. Crate-private:
/// only the kernel holds one, and surfaces reach the state only through the
/// kernel, so that no surface can skip its authorization rule or its
/// one send path.
#[derive(Clone)]
pub(crate) struct Store {
    db: Db,
    /// What this process resolved, per policy epoch (see
    /// [`dispatch::Resolutions`]).
    resolutions: Arc<dispatch::Resolutions>,
    /// The key the deployment's secrets are sealed with ([`sealed`]).
    key: Arc<crate::seal::Key>,
}

/// Which database holds the deployment: every store method reaches it
/// through [`Store::with`] and [`Store::write`], which are the only places
/// that tell the two apart, but for the embedded file's own fast paths
/// (the group commit, the in-place read path), which are kept beside them.
#[derive(Clone)]
enum Db {
    /// The embedded SQLite file in the home (the default).
    Home(Arc<Home>),
    /// A shared PostgreSQL database that several hosts serve from.
    Shared(postgres::Shared),
}

/// The embedded file and this process's connections to it.
pub(crate) struct Home {
    /// The writer; shared with the checkpointing thread, which holds it
    /// for a moment to let the log start over ([`checkpoint`]).
    pub(super) conn: Arc<Mutex<Connection>>,
    /// Whether the writer is at `synchronous=FULL` now; read and changed
    /// only by whoever holds `conn` (see [`Home::lock_durable`]).
    durable: std::sync::atomic::AtomicBool,
    /// Read-only connections for the read path (resolve, inbox and CLI
    /// reads), opened on first use. In WAL mode a reader never waits
    /// for the writer, so a read does not queue behind a durable commit's
    /// fsync on `conn` (with one connection, 64 concurrent stagers
    /// serialised on it and staged slower than bare commits).
    readers: Box<[Mutex<Option<Connection>>]>,
    /// Stages waiting for the next group commit (see [`Store::stage`]).
    pub(super) staging: Mutex<actions::StagingQueue>,
    path: PathBuf,
    /// The file opened (device and inode), to notice it was removed or
    /// replaced under a long-running process.
    identity: Option<(u64, u64)>,
    /// The thread that checkpoints the file's log; it stops with this.
    _checkpoints: checkpoint::Checkpoints,
}

/// A transaction on one of the home's connections, begun and ended by
/// statements the connection keeps compiled: rusqlite's `Transaction`
/// runs its `BEGIN` and `COMMIT` through `execute_batch`, which compiles
/// them again every time, a few µs of every stage and resolution.
/// Dropped uncommitted, it rolls back: a connection is never left
/// inside a transaction, where it would read one snapshot for ever after.
pub(super) struct Begun<'c> {
    conn: &'c Connection,
}

impl<'c> Begun<'c> {
    /// Begin a transaction on `conn`, as `behavior` says.
    pub(super) fn on(
        conn: &'c Connection,
        behavior: rusqlite::TransactionBehavior,
    ) -> rusqlite::Result<Begun<'c>> {
        let begin = match behavior {
            rusqlite::TransactionBehavior::Deferred => "BEGIN DEFERRED",
            rusqlite::TransactionBehavior::Immediate => "BEGIN IMMEDIATE",
            _ => "BEGIN EXCLUSIVE",
        };
        conn.prepare_cached(begin)?.execute([])?;
        Ok(Begun { conn })
    }

    /// Commit it; if the commit fails, it is rolled back.
    pub(super) fn commit(self) -> rusqlite::Result<()> {
        self.conn.prepare_cached("COMMIT")?.execute([]).map(drop)
    }
}

impl std::ops::Deref for Begun<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for Begun<'_> {
    fn drop(&mut self) {
        if !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }
}

/// The device and inode of a file, where the platform has them.
fn identity(path: &Path) -> Option<(u64, u64)> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
    }
    #[cfg(not(unix))]
    {
        std::fs::metadata(path).ok().map(|_| (0, 0))
    }
}

/// Why the database could not be opened, in words that say what to do: a
/// read-only or full disk is not a damaged database, and only a damaged
/// one should be moved aside. `os` is what the operating system said about
/// SQLite's last file operation, when known.
fn open_error(path: &Path, e: rusqlite::Error, os: Option<std::io::Error>) -> anyhow::Error {
    use rusqlite::ErrorCode as C;
    use std::io::ErrorKind as K;
    let path = path.display();
    let said = os
        .as_ref()
        .map(|o| format!("; the system said: {o}"))
        .unwrap_or_default();
    let kind = os.as_ref().map(|o| o.kind());
    let full = matches!(
        kind,
        Some(K::StorageFull | K::FileTooLarge | K::QuotaExceeded)
    );
    let read_only = matches!(kind, Some(K::ReadOnlyFilesystem | K::PermissionDenied));
    match e.sqlite_error_code() {
        _ if full => anyhow::anyhow!(
            "cannot write the state database {path} ({e}{said}): the disk is full or the file may grow no further; free some space, then retry"
        ),
        Some(C::DiskFull) => anyhow::anyhow!(
            "cannot write the state database {path} ({e}{said}): the disk is full; free some space, then retry"
        ),
        _ if read_only => anyhow::anyhow!(
            "cannot write the state database {path} ({e}{said}): its disk or directory is read-only or not writable by you; make it writable, then retry"
        ),
        Some(C::ReadOnly | C::PermissionDenied | C::CannotOpen) => anyhow::anyhow!(
            "cannot write the state database {path} ({e}{said}): its disk or directory is read-only or not writable by you; make it writable, then retry"
        ),
        Some(C::SystemIoFailure) => anyhow::anyhow!(
            "cannot read or write the state database {path} ({e}{said}): the disk reported an error; check that it has space and is writable, then retry"
        ),
        Some(C::DatabaseBusy | C::DatabaseLocked) => anyhow::anyhow!(
            "the state database {path} is busy ({e}): another process holds it; retry"
        ),
        Some(C::DatabaseCorrupt | C::NotADatabase) => anyhow::anyhow!(
            "the state database {path} is damaged or not a Gatehouse database ({e}); move it aside or restore a backup, then retry"
        ),
        _ => anyhow::anyhow!("cannot use the state database {path} ({e}{said})"),
    }
}

/// What the operating system said about the connection's last failed file
/// operation (SQLite keeps the errno), if anything.
fn system_error(conn: &Connection) -> Option<std::io::Error> {
    // SAFETY: `handle` is the live connection's own pointer, used only for
    // this read of its saved errno while `conn` is borrowed.
    let errno = unsafe { rusqlite::ffi::sqlite3_system_errno(conn.handle()) };
    (errno != 0).then(|| std::io::Error::from_raw_os_error(errno))
}

impl Store {
    /// Open (creating if needed) the database at `path`, whose secrets
    /// are sealed with `key` (the caller seals what an older Gatehouse
    /// left unsealed: [`Store::seal_at_rest`]).
    ///
    /// A file that is not a Gatehouse database, or is damaged, is refused
    /// with a message that says so; it is never overwritten.
    pub fn open(path: &Path, key: Arc<crate::seal::Key>) -> anyhow::Result<Store> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn =
            Connection::open_with_flags(path, flags).map_err(|e| open_error(path, e, None))?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn.set_prepared_statement_cache_capacity(STATEMENTS_KEPT);
        let corrupt = |e: rusqlite::Error| open_error(path, e, system_error(&conn));
        // Before anything is written: a new file takes this page size; one
        // that exists keeps its own (SQLite ignores the pragma then).
        conn.pragma_update(None, "page_size", PAGE_SIZE)
            .map_err(corrupt)?;
        // WAL: readers never block the writer; several CLI processes and the
        // web inbox share the file. NORMAL for most commits; the two that a
        // promise rests on take the writer at FULL (`Home::lock_durable`):
        // staging (a gadget told `pending` keeps its action across a power
        // cut) and the claim (on disk before anything is sent). A durable
        // commit makes every earlier one in the log durable too.
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(corrupt)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(corrupt)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(corrupt)?;
        // Reading the schema reads the file's header and first page: a file
        // that is not a database is refused here. A whole-file
        // `quick_check` on every start cost time in proportion to the
        // database's size (start-up must stay flat as the file grows);
        // damage further in is reported by the statement that meets it, and
        // `gatehouse check` runs the full check on demand.
        conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| {
            r.get::<_, i64>(0)
        })
        .map_err(corrupt)?;
        migrate(&mut conn, path)?;
        // Checkpoints run beside the paths ([`checkpoint`]).
        let file = identity(path);
        let conn = Arc::new(Mutex::new(conn));
        let checkpoints = checkpoint::Checkpoints::start(path, file, &conn)?;
        Ok(Store {
            db: Db::Home(Arc::new(Home {
                conn,
                durable: std::sync::atomic::AtomicBool::new(false),
                readers: (0..READERS).map(|_| Mutex::new(None)).collect(),
                staging: Mutex::default(),
                path: path.to_owned(),
                identity: file,
                _checkpoints: checkpoints,
            })),
            resolutions: Arc::default(),
            key,
        })
    }

    /// The store of a deployment held in the shared database behind
    /// `shared` (migrated to this binary's schema: [`postgres::Shared::open`]
    /// refuses any other).
    pub(crate) fn on_shared(shared: postgres::Shared, key: Arc<crate::seal::Key>) -> Store {
        Store {
            db: Db::Shared(shared),
            resolutions: Arc::default(),
            key,
        }
    }

    /// Whether the deployment is held in a shared database.
    pub(crate) fn is_shared(&self) -> bool {
        matches!(self.db, Db::Shared(_))
    }

    /// The shared database's URL, when the deployment is held in one.
    pub(crate) fn shared_url(&self) -> Option<&postgres::DatabaseUrl> {
        match &self.db {
            Db::Home(_) => None,
            Db::Shared(shared) => Some(shared.url()),
        }
    }

    /// The embedded file, for what only it has (its integrity check, its
    /// group commit, its in-place read path); an error on a shared
    /// database, whose callers take another way before asking.
    pub(super) fn home(&self) -> anyhow::Result<&Home> {
        match &self.db {
            Db::Home(home) => Ok(home),
            Db::Shared(_) => anyhow::bail!(
                "this needs the home's embedded database, and this host serves from a shared one"
            ),
        }
    }

    /// Check every page of the database (`PRAGMA quick_check`); a
    /// [`Damaged`] error that says what to do when it is damaged. A shared
    /// database checks its own pages.
    pub fn check_integrity(&self) -> anyhow::Result<()> {
        let Db::Home(home) = &self.db else {
            return Ok(());
        };
        let conn = home.lock();
        let mut st = conn.prepare("PRAGMA quick_check(5)")?;
        let found = st
            .query_map([], |r| r.get::<_, String>(0))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| open_error(&home.path, e, system_error(&conn)))?;
        if found.iter().any(|f| f != "ok") {
            return Err(Damaged {
                path: home.path.clone(),
                findings: found,
            }
            .into());
        }
        Ok(())
    }

    /// The schema version the database is at (`PRAGMA user_version`, or
    /// the shared database's migration history).
    pub fn schema_version(&self) -> anyhow::Result<i64> {
        match &self.db {
            Db::Home(home) => Ok(home
                .lock()
                .query_row("PRAGMA user_version", [], |r| r.get(0))?),
            Db::Shared(_) => self.with(|db| {
                db.row(
                    "SELECT CAST(COALESCE(max(version), 0) AS BIGINT) FROM gatehouse_schema_history",
                    sql::args![],
                )?
                .map_or(Ok(0), |r| r.get(0))
            }),
        }
    }

    /// Whether the file this store opened is still the one at its path.
    /// A removed or replaced database keeps working for the process that
    /// opened it, writing into a file nobody will read again. A shared
    /// database has no file here.
    pub fn still_on_disk(&self) -> bool {
        match &self.db {
            Db::Home(home) => home.identity.is_some() && identity(&home.path) == home.identity,
            Db::Shared(_) => true,
        }
    }

    /// Returns once the database file was removed or replaced (checked
    /// every two seconds): a long-running process must stop then. Never,
    /// for a shared database.
    pub async fn vanished(&self) {
        if let Db::Shared(_) = self.db {
            return std::future::pending().await;
        }
        loop {
            tokio::time::sleep(Duration::from_secs(2)).await;
            if !self.still_on_disk() {
                return;
            }
        }
    }

    /// Where the deployment's database is, to be shown: the home's file,
    /// or the shared database's URL without its password.
    pub fn location(&self) -> String {
        match &self.db {
            Db::Home(home) => home.path.display().to_string(),
            Db::Shared(shared) => shared.url().to_string(),
        }
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

    /// Run a short `f` on the connection right here, on the caller's
    /// thread, when nothing else holds it and the database's write lock is
    /// free; else on a blocking thread, as [`Store::run`] does.
    ///
    /// A trip to the blocking pool and back costs more than a short
    /// statement (35-51 µs a hop, measured: a fifth of a read), so
    /// the read path's resolve and observation record run here. Here means
    /// never waiting: `f` runs with a busy timeout of zero, and if another
    /// process holds the write lock it gives up at once (`SQLITE_BUSY`,
    /// nothing written) and runs again on a blocking thread, where it may
    /// wait. So `f` must be harmless to run twice when it failed busy:
    /// one transaction, or reads.
    pub async fn run_now<T, F>(&self, f: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: Fn(&mut Connection) -> anyhow::Result<T> + Send + Sync + 'static,
    {
        let home = self.home()?;
        if let Ok(mut conn) = home.conn.try_lock() {
            home.settle(&conn, false)?;
            conn.busy_timeout(Duration::ZERO)?;
            let done = f(&mut conn);
            conn.busy_timeout(BUSY_TIMEOUT)?;
            match done {
                Err(e) if is_busy(&e) => {}
                done => return done,
            }
        }
        self.run(move |s| f(&mut s.home()?.lock())).await
    }

    /// Run the read-only `f` on a reader connection: in place when one is
    /// free, never waiting (a busy timeout of zero, as [`Store::run_now`]),
    /// else on a blocking thread that may wait. `f` sees what was committed
    /// before it began; it cannot write (the connection is opened
    /// read-only), so running it again after a busy attempt is harmless.
    /// On a shared database, `f` runs in a transaction of its own on a
    /// blocking thread.
    pub async fn read_now<T, F>(&self, f: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: Fn(&dyn Sql) -> anyhow::Result<T> + Send + Sync + 'static,
    {
        if self.is_shared() {
            return self.run(move |s| s.with(|db| f(db))).await;
        }
        self.read_home(move |c| f(c)).await
    }

    /// [`Store::read_now`] on the home's readers, with the connection
    /// itself (for what only SQLite has: the kept resolution's snapshot).
    async fn read_home<T, F>(&self, f: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> anyhow::Result<T> + Send + Sync + 'static,
    {
        let home = self.home()?;
        for slot in home.readers.iter() {
            if let Ok(mut reader) = slot.try_lock() {
                let conn = home.reader_in(&mut reader)?;
                conn.busy_timeout(Duration::ZERO)?;
                let done = f(conn);
                conn.busy_timeout(BUSY_TIMEOUT)?;
                match done {
                    Err(e) if is_busy(&e) => break,
                    done => return done,
                }
            }
        }
        self.run(move |s| s.read(f)).await
    }

    /// Run the read-only `f` on a reader connection of the home's file,
    /// waiting for one.
    pub fn read<T>(&self, f: impl FnOnce(&Connection) -> anyhow::Result<T>) -> anyhow::Result<T> {
        let home = self.home()?;
        for slot in home.readers.iter() {
            if let Ok(mut reader) = slot.try_lock() {
                return f(home.reader_in(&mut reader)?);
            }
        }
        let mut reader = home.readers[0].lock().unwrap_or_else(|e| e.into_inner());
        f(home.reader_in(&mut reader)?)
    }

    /// Resolve `key` in `chat` for `person` (see [`dispatch::resolve`]),
    /// with the chat's pending actions at that gatekeeper when it
    /// simulates (its reads overlay them, SPEC V1): one trip, one reader.
    pub fn resolve(&self, chat: &str, key: &str, person: &str) -> anyhow::Result<Resolution> {
        match &self.db {
            Db::Home(_) => self.read(|c| resolve_in(c, self, chat, key, person)),
            Db::Shared(_) => {
                self.with(|db| resolve_shared(db, &self.resolutions, chat, key, person))
            }
        }
    }

    /// The resolution this process keeps for `person`'s calls of `key` in
    /// `chat`, with the policy epoch it was read under, *not checked*
    /// against the epoch now; `None` if none is kept, or on a shared
    /// database. What it is for: a stage that passes every check on it
    /// carries that epoch in [`NewAction::resolved_at`], and its staging
    /// transaction refuses it ([`StageError::PolicyMoved`]) if the epoch
    /// moved, so the stage holds under the policy of its commit, and costs
    /// no read transaction of its own first (that read was a tenth of a
    /// stage's work). Anything else done on it (a refusal, a read, a
    /// simulation) would act on a policy that may be gone: the kernel
    /// resolves with [`Store::resolve_now`] for those.
    pub fn resolution_kept(
        &self,
        chat: &str,
        key: &str,
        person: &str,
    ) -> Option<(Arc<Resolved>, i64)> {
        match self.db {
            Db::Home(_) => self.resolutions.kept_unchecked(chat, key, person),
            Db::Shared(_) => None,
        }
    }

    /// [`Store::resolve`] on the read path: in place when a reader is free
    /// (see [`Store::read_now`]).
    pub async fn resolve_now(
        &self,
        chat: &str,
        key: &str,
        person: &str,
    ) -> anyhow::Result<Resolution> {
        let (chat, key, person) = (chat.to_owned(), key.to_owned(), person.to_owned());
        if let Db::Shared(_) = self.db {
            return self.run(move |s| s.resolve(&chat, &key, &person)).await;
        }
        let store = self.clone();
        self.read_warm(move |c| resolve_in(c, &store, &chat, &key, &person))
            .await
    }

    /// Run the read-only `f` on the writer connection when it is free, else
    /// as [`Store::read_now`]. Why: after this process's own commits the
    /// writer's page cache is still current, while every commit invalidates
    /// a reader's, whose next transaction then fetches the database header
    /// and every page again from the log. A kept resolution's one-row epoch
    /// check after a read's observation costs several times more on a
    /// reader (as profiled on a turn of reads). `f` must only read: on the
    /// writer nothing stops it writing.
    pub(super) async fn read_warm<T, F>(&self, f: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> anyhow::Result<T> + Send + Sync + 'static,
    {
        if let Ok(conn) = self.home()?.conn.try_lock() {
            conn.busy_timeout(Duration::ZERO)?;
            let done = f(&conn);
            conn.busy_timeout(BUSY_TIMEOUT)?;
            match done {
                Err(e) if is_busy(&e) => {}
                done => return done,
            }
        }
        self.read_home(f).await
    }

    /// Run `f` on the deployment's database, each statement its own
    /// commit, on either engine: for reads and one-statement writes (a
    /// conditional update decides by its changed-row count alone).
    ///
    /// Why this and [`Store::write`] and never the connection itself: a
    /// method written against [`Sql`] runs unchanged on the embedded file
    /// and on the shared PostgreSQL database, so a store method reaches its
    /// engine only through these doors. Like every store call, it runs on a
    /// thread that may block ([`Store::run`]).
    pub(crate) fn with<T>(
        &self,
        f: impl FnOnce(&dyn Sql) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        match &self.db {
            Db::Home(home) => f(&*home.lock()),
            Db::Shared(shared) => shared.each_here(f),
        }
    }

    /// Run `f` in one writing transaction, committed when it returns `Ok`
    /// and rolled back otherwise. On SQLite it begins `IMMEDIATE`, so what
    /// `f` reads stays true until it commits (no other writer
    /// interleaves); on PostgreSQL a statement that must hold a row while
    /// deciding locks it (`FOR UPDATE`, see [`sql::Engine`]).
    pub(crate) fn write<T>(
        &self,
        f: impl FnOnce(&dyn Sql) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        match &self.db {
            Db::Home(home) => {
                let mut conn = home.lock();
                let tx =
                    conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                let out = f(&tx)?;
                tx.commit()?;
                Ok(out)
            }
            Db::Shared(shared) => shared.run_here(f),
        }
    }

    /// [`Store::write`] for a commit a promise rests on (a claim before its
    /// send, a stage a gadget was told of): on disk before it returns,
    /// across a power cut. SQLite raises `synchronous` to FULL for this
    /// commit only (a durable commit makes every earlier one in the log
    /// durable too); PostgreSQL's commits are durable already.
    pub(crate) fn write_durable<T, E: From<anyhow::Error>>(
        &self,
        f: impl FnOnce(&dyn Sql) -> Result<T, E>,
    ) -> Result<T, E> {
        let home = match &self.db {
            Db::Home(home) => home,
            Db::Shared(shared) => return shared.run_here(f),
        };
        let mut conn = home.lock_durable()?;
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(anyhow::Error::from)?;
        let out = f(&tx)?;
        tx.commit().map_err(anyhow::Error::from)?;
        Ok(out)
    }
}

impl Home {
    /// The writer, for commits at `synchronous=NORMAL` (or reads).
    pub(super) fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves SQLite itself consistent (each
        // statement is atomic), so the connection stays usable.
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        // A commit that stays FULL is only slower; one that should be
        // durable and is not is a broken promise, so only
        // [`Home::lock_durable`] may skip raising it.
        if let Err(e) = self.settle(&conn, false) {
            tracing::warn!("the state database's writer stays synchronous=FULL: {e}");
        }
        conn
    }

    /// The writer, for a commit a promise rests on: at `synchronous=FULL`,
    /// so that its commit waits for the fsync of the log.
    ///
    /// Why the level is left where the last commit put it instead of
    /// lowered after each durable commit: setting it is a statement
    /// compiled each time (SQLite applies this pragma when it prepares it),
    /// and two of them were 5.7% of a durable stage's own work.
    /// Consecutive durable commits (a run of stages, a drain's claims) now
    /// set it once; the next commit at NORMAL lowers it.
    pub(super) fn lock_durable(&self) -> anyhow::Result<MutexGuard<'_, Connection>> {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        self.settle(&conn, true)?;
        Ok(conn)
    }

    /// Bring the writer `conn` (held by the caller) to FULL when `durable`,
    /// else to NORMAL, if it is not there already.
    fn settle(&self, conn: &Connection, durable: bool) -> rusqlite::Result<()> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.durable.load(Relaxed) != durable {
            let level = if durable { "FULL" } else { "NORMAL" };
            conn.pragma_update(None, "synchronous", level)?;
            self.durable.store(durable, Relaxed);
        }
        Ok(())
    }

    /// The reader in `slot`, opened now if it was not yet.
    fn reader_in<'a>(&self, slot: &'a mut Option<Connection>) -> anyhow::Result<&'a Connection> {
        if slot.is_none() {
            let conn = Connection::open_with_flags(
                &self.path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(|e| open_error(&self.path, e, None))?;
            conn.busy_timeout(BUSY_TIMEOUT)?;
            conn.set_prepared_statement_cache_capacity(STATEMENTS_KEPT);
            *slot = Some(conn);
        }
        slot.as_ref()
            .ok_or_else(|| anyhow::anyhow!("the state database's reader did not open"))
    }
}

/// How many prepared statements each connection keeps. The writer alone
/// runs some forty distinct statements on the read, stage, turn, claim and
/// reject paths; with rusqlite's default of 16 they pushed each other out
/// of the cache, and SQLite compiled a statement again in most calls (a
/// profile of a turn of one read and three writes: 13.6% of it parsing
/// SQL, most of it the barrier's one-line `UPDATE`). A kept statement is a
/// few kilobytes.
const STATEMENTS_KEPT: usize = 256;

/// The page size of a new home's database, in bytes (SQLite's default is
/// 4096).
///
/// Why smaller: a durable stage waits for the fsync of what its commit
/// wrote to the log, and that commit writes two pages, the ledger's row
/// and its entry among the actions by state. Each page goes to the log
/// whole, with a 24-byte header, so at 4 KB pages a stage wrote 8,240
/// bytes (three file-system blocks) where a bare one-row commit writes
/// 4,120 (two). At 2 KB pages the two are 4,144 bytes. Measured: a
/// Python `synchronous=FULL` insert with the index took 15-20 µs more
/// than a bare one at 4 KB pages and about the same at 2 KB; in the
/// fast-path bench a stage's median distance above the bare fsynced
/// commit went from 52 µs to 39 µs. Rows are small (arguments and results
/// above a page overflow at any size), so the smaller page costs little
/// elsewhere.
/// See docs/operations.md.
const PAGE_SIZE: i64 = 2048;

/// How many reader connections a store keeps (see [`Store::read_now`]).
const READERS: usize = 4;

/// How long a statement waits for another process's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether `e` is SQLite saying another connection holds the lock.
fn is_busy(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<rusqlite::Error>().is_some_and(|e| {
            matches!(
                e.sqlite_error_code(),
                Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
            )
        })
    })
}

/// [`Store::resolve`] on a reader connection the caller holds.
fn resolve_in(
    conn: &Connection,
    store: &Store,
    chat: &str,
    key: &str,
    person: &str,
) -> anyhow::Result<Resolution> {
    let resolved = store.resolutions.resolve(conn, chat, key, person)?;
    with_overlay(conn, chat, resolved)
}

/// [`Store::resolve`] in a transaction on the shared database.
fn resolve_shared(
    db: &dyn Sql,
    resolutions: &dispatch::Resolutions,
    chat: &str,
    key: &str,
    person: &str,
) -> anyhow::Result<Resolution> {
    let resolved = resolutions.resolve_on(db, chat, key, person)?;
    with_overlay(db, chat, resolved)
}

/// `resolved` with the chat's pending actions at its gatekeeper when it
/// simulates (its reads overlay them, SPEC V1), read in the same trip.
fn with_overlay(
    db: &dyn Sql,
    chat: &str,
    resolved: Result<Arc<Resolved>, Unresolved>,
) -> anyhow::Result<Resolution> {
    let resolved = match resolved {
        Ok(r) => r,
        Err(e) => return Ok(Err(e)),
    };
    let overlay = if resolved.gatekeeper.manifest.simulates {
        actions::pending_at(db, chat, &resolved.gatekeeper.name)?
    } else {
        Vec::new()
    };
    Ok(Ok((resolved, overlay)))
}

/// The schema's versions, oldest first: each file moves the database from
/// the version before it to its own. Named as refinery names migrations
/// (`V<n>__<name>.sql`).
const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("migrations/V1__initial.sql")),
    (2, include_str!("migrations/V2__principals.sql")),
    (3, include_str!("migrations/V3__hostile_input.sql")),
    (4, include_str!("migrations/V4__revert_expiry_once.sql")),
    (5, include_str!("migrations/V5__hooks_notices.sql")),
    (6, include_str!("migrations/V6__fast_path.sql")),
    (7, include_str!("migrations/V7__ledger_sequence.sql")),
    (8, include_str!("migrations/V8__open_by_chat.sql")),
    (9, include_str!("migrations/V9__ledger_checks.sql")),
    (10, include_str!("migrations/V10__actions_by_state.sql")),
    (
        11,
        include_str!("migrations/V11__requests_expire_hooks_pin.sql"),
    ),
    (12, include_str!("migrations/V12__sealed_secrets.sql")),
    (
        13,
        include_str!("migrations/V13__passkeys_identity_bindings.sql"),
    ),
    (14, include_str!("migrations/V14__push_subscriptions.sql")),
    (15, include_str!("migrations/V15__gadget_storage.sql")),
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
    if version == newest {
        return Ok(());
    }
    // A version that rebuilds a table others reference (schema 7 rebuilds
    // the ledger, which `hooks` references) must not have its DROP checked
    // row by row: foreign keys are off while migrating, as SQLite's own
    // procedure for a rebuild says, and every reference is checked before
    // each version commits. The pragma cannot change inside a transaction.
    conn.pragma_update(None, "foreign_keys", "OFF")?;
    let migrated = migrate_from(conn, version);
    conn.pragma_update(None, "foreign_keys", "ON")?;
    migrated
}

/// Every version above `version`, one transaction each; foreign keys are
/// off ([`migrate`]) and checked before each commit.
fn migrate_from(conn: &mut Connection, version: i64) -> anyhow::Result<()> {
    for (v, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > version) {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Exclusive)?;
        // Another process may have migrated while this one waited.
        let now: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if now >= *v {
            continue;
        }
        tx.execute_batch(sql)
            .with_context(|| format!("cannot bring the state database to schema {v}"))?;
        let dangling: Option<(String, i64, String)> = tx
            .query_row("PRAGMA foreign_key_check", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .optional()?;
        if let Some((table, row, parent)) = dangling {
            anyhow::bail!(
                "cannot bring the state database to schema {v}: row {row} of {table} names a {parent} entry that does not exist (the file was changed outside Gatehouse); schema {v} was not applied, restore the file from a backup"
            );
        }
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

#[cfg(test)]
mod upgrade {
    use super::sql::args;
    use super::*;

    /// A home as schema 6 left it: entries of every kind, a hook whose row
    /// references its ledger entry, and the two newest entries deleted by
    /// hand, so ids up to 7 were handed out while the highest left is 5.
    fn home_of_schema_6(path: &Path) -> Connection {
        let mut conn = Connection::open(path).expect("a file");
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.pragma_update(None, "foreign_keys", "ON").unwrap();
        for (v, sql) in MIGRATIONS.iter().filter(|(v, _)| *v <= 6) {
            let tx = conn.transaction().unwrap();
            tx.execute_batch(sql).unwrap();
            tx.pragma_update(None, "user_version", v).unwrap();
            tx.commit().unwrap();
        }
        conn.execute_batch(
            "INSERT INTO ledger (chat, kind, caller, person, sources, created_at)
               VALUES ('work', 'observation', 'alice', 'alice', '[]', 1);
             INSERT INTO ledger (chat, kind, caller, person, gatekeeper, tool, args, state, created_at)
               VALUES ('work', 'action', 'alice', 'alice', 'mail', 'send', '{\"to\":\"bob\"}', 'pending', 2);
             INSERT INTO ledger (chat, kind, caller, person, created_at)
               VALUES ('work', 'hook', 'alice', 'alice', 3);
             INSERT INTO hooks (id, chat, gatekeeper, trigger, gadget, kind, every_secs, created_by, created_at)
               VALUES (3, 'work', 'mail', 'tick', 'digest', 'schedule', 60, 'alice', 3);
             INSERT INTO ledger (chat, kind, caller, person, gatekeeper, tool, args, state, created_at)
               VALUES ('work', 'action', 'alice', 'alice', 'mail', 'send', '{}', 'applied', 4);
             INSERT INTO ledger (chat, kind, caller, person, sources, created_at)
               VALUES ('work', 'observation', 'alice', 'alice', '[]', 5);
             INSERT INTO ledger (chat, kind, caller, person, sources, created_at)
               VALUES ('work', 'observation', 'alice', 'alice', '[]', 6);
             INSERT INTO ledger (chat, kind, caller, person, sources, created_at)
               VALUES ('work', 'observation', 'alice', 'alice', '[]', 7);
             DELETE FROM ledger WHERE id IN (6, 7);",
        )
        .unwrap();
        conn
    }

    /// The schema this binary brings every database to.
    fn newest() -> i64 {
        MIGRATIONS.last().map_or(0, |m| m.0)
    }

    fn entries(conn: &Connection) -> Vec<String> {
        conn.prepare("SELECT * FROM ledger WHERE id <= 5 ORDER BY id")
            .unwrap()
            .query_map([], |r| {
                Ok((0..36)
                    .map(|i| format!("{:?}", r.get_ref(i).ok()))
                    .collect::<Vec<_>>()
                    .join("|"))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    #[test]
    fn schema_7_keeps_every_entry_and_never_hands_an_id_out_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gatehouse.db");
        let before = entries(&home_of_schema_6(&path));
        assert_eq!(before.len(), 5);

        let store =
            Store::open(&path, crate::seal::test_key()).expect("schema 6 is brought to the newest");
        assert_eq!(store.schema_version().unwrap(), newest());
        store
            .with(|db| {
                // Nothing lost, nothing dangling; the sequence row is gone
                // with AUTOINCREMENT.
                let conn = Connection::open(&path)?;
                assert_eq!(entries(&conn), before);
                // A home keeps the page size it was made with (SQLite's
                // default then); only a new one takes `PAGE_SIZE`.
                let page: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
                assert_eq!(page, 4096);
                let dangling: Option<String> = conn
                    .query_row("PRAGMA foreign_key_check", [], |r| r.get(0))
                    .optional()?;
                assert_eq!(dangling, None);
                assert_eq!(
                    db.row("SELECT count(*) FROM hooks WHERE id = 3", args![])?
                        .map(|r| r.get::<i64>(0))
                        .transpose()?,
                    Some(1)
                );
                assert!(
                    db.row(
                        "SELECT seq FROM sqlite_sequence WHERE name = 'ledger'",
                        args![]
                    )?
                    .is_none()
                );
                // Ids 6 and 7 were handed out once: an entry holds 7, and
                // the next id is 8.
                let floor = db
                    .row("SELECT chat, kind FROM ledger WHERE id = 7", args![])?
                    .expect("the highest id ever handed out is held");
                assert_eq!(
                    (floor.get::<String>(0)?, floor.get::<String>(1)?),
                    (String::new(), "observation".to_owned())
                );
                let next = db.insert(
                    "INSERT INTO ledger (chat, kind, caller, person, sources, created_at)
                     VALUES ('work', 'observation', 'alice', 'alice', '[]', 8)",
                    args![],
                )?;
                assert_eq!(next, 8);
                // The newest entry is never deleted (its id would come
                // back); an older one may be (pruning).
                let refused = db
                    .exec("DELETE FROM ledger WHERE id = 8", args![])
                    .expect_err("the newest entry is kept");
                assert!(
                    format!("{refused:#}").contains("never deleted"),
                    "{refused:#}"
                );
                assert_eq!(db.exec("DELETE FROM ledger WHERE id = 4", args![])?, 1);
                // The CHECKs came along.
                assert!(
                    db.exec(
                        "INSERT INTO ledger (chat, kind, caller, person, sources, created_at)
                         VALUES ('work', 'observation', 'alice', 'alice', '{}', 9)",
                        args![],
                    )
                    .is_err()
                );
                Ok(())
            })
            .unwrap();
        // Opening again finds nothing to do.
        drop(store);
        assert_eq!(
            Store::open(&path, crate::seal::test_key())
                .unwrap()
                .schema_version()
                .unwrap(),
            newest()
        );
    }

    #[test]
    fn a_rebuild_that_would_leave_a_dangling_reference_is_refused_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gatehouse.db");
        let conn = home_of_schema_6(&path);
        conn.pragma_update(None, "foreign_keys", "OFF").unwrap();
        conn.execute_batch(
            "INSERT INTO hooks (id, chat, gatekeeper, trigger, gadget, kind, every_secs, created_by, created_at)
               VALUES (99, 'work', 'mail', 'tick', 'digest', 'schedule', 60, 'alice', 9)",
        )
        .unwrap();
        drop(conn);

        let refused = Store::open(&path, crate::seal::test_key())
            .err()
            .expect("refused");
        assert_eq!(
            format!("{refused:#}"),
            "cannot bring the state database to schema 7: row 99 of hooks names a ledger entry that does not exist (the file was changed outside Gatehouse); schema 7 was not applied, restore the file from a backup"
        );
        let conn = Connection::open(&path).unwrap();
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, 6);
        let seq: i64 = conn
            .query_row(
                "SELECT seq FROM sqlite_sequence WHERE name = 'ledger'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(seq, 7, "the ledger was not rebuilt");
    }

    /// Every write of the ledger checks its rules in place (schema 9): a
    /// CHECK against a list of three or more constants made SQLite build a
    /// temporary b-tree of the list in every INSERT and UPDATE (each read's
    /// observation, each stage, claim and finish), and the rules themselves
    /// still refuse what they refused.
    #[test]
    fn the_ledger_checks_its_rules_without_a_temporary_table() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gatehouse.db");
        drop(Store::open(&path, crate::seal::test_key()).unwrap());
        let conn = Connection::open(&path).unwrap();
        let columns: Vec<String> = conn
            .prepare("SELECT name FROM pragma_table_info('ledger') WHERE name <> 'id'")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(columns.len() > 30, "{columns:?}");
        let marks = vec!["?"; columns.len()].join(", ");
        let sets: Vec<String> = columns.iter().map(|c| format!("{c} = ?")).collect();
        for sql in [
            format!(
                "INSERT INTO ledger ({}) VALUES ({marks})",
                columns.join(", ")
            ),
            format!("UPDATE ledger SET {} WHERE id = ?", sets.join(", ")),
        ] {
            let mut explain = conn.prepare(&format!("EXPLAIN {sql}")).unwrap();
            let nulls = vec![rusqlite::types::Null; explain.parameter_count()];
            let ops: Vec<String> = explain
                .query_map(rusqlite::params_from_iter(nulls), |r| r.get(1))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            assert!(
                ops.iter()
                    .any(|op| op == "Insert" || op == "Update" || op == "IdxInsert"),
                "{ops:?}"
            );
            assert!(
                !ops.iter().any(|op| op == "OpenEphemeral"),
                "{sql}\n{ops:?}"
            );
        }
        let observation = |kind: &str, classified_by: &str| {
            conn.execute(
                "INSERT INTO ledger (chat, kind, caller, person, classified_by, sources, created_at)
                 VALUES ('work', ?1, 'alice', 'alice', ?2, '[]', 1)",
                [kind, classified_by],
            )
        };
        assert!(observation("observation", "default").is_ok());
        assert!(observation("observation", "guess").is_err());
        assert!(observation("rumour", "default").is_err());
        let action = |state: Option<&str>| {
            conn.execute(
                "INSERT INTO ledger (chat, kind, caller, person, gatekeeper, tool, args, state, created_at)
                 VALUES ('work', 'action', 'alice', 'alice', 'mail', 'send', '{}', ?1, 2)",
                [state],
            )
        };
        assert!(action(Some("expired")).is_ok());
        assert!(action(Some("sent")).is_err());
        assert!(action(None).is_err(), "an action has a state");
    }
}

/// [`Begun`] never leaves a connection inside a transaction: neither when
/// dropped uncommitted nor when its commit fails (SQLite keeps a
/// transaction open after a COMMIT refused for a deferred constraint).
#[cfg(test)]
mod begun {
    use super::Begun;
    use rusqlite::{Connection, TransactionBehavior};

    fn db() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "PRAGMA foreign_keys = ON;
             CREATE TABLE p (id INTEGER PRIMARY KEY);
             CREATE TABLE c (p INTEGER REFERENCES p (id) DEFERRABLE INITIALLY DEFERRED);",
        )
        .unwrap();
        conn
    }

    fn count(conn: &Connection) -> i64 {
        conn.query_row("SELECT count(*) FROM c", [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn a_transaction_dropped_or_refused_at_its_commit_is_rolled_back() {
        let conn = db();
        {
            let tx = Begun::on(&conn, TransactionBehavior::Immediate).unwrap();
            tx.execute("INSERT INTO p (id) VALUES (1)", []).unwrap();
            tx.execute("INSERT INTO c (p) VALUES (1)", []).unwrap();
        }
        assert!(conn.is_autocommit(), "dropped uncommitted: rolled back");
        assert_eq!(count(&conn), 0);

        let tx = Begun::on(&conn, TransactionBehavior::Deferred).unwrap();
        tx.execute("INSERT INTO c (p) VALUES (7)", []).unwrap();
        assert!(tx.commit().is_err(), "no parent 7: the commit is refused");
        assert!(conn.is_autocommit(), "and the transaction rolled back");
        assert_eq!(count(&conn), 0);

        let tx = Begun::on(&conn, TransactionBehavior::Immediate).unwrap();
        tx.execute("INSERT INTO p (id) VALUES (1)", []).unwrap();
        tx.execute("INSERT INTO c (p) VALUES (1)", []).unwrap();
        tx.commit().unwrap();
        assert_eq!(count(&conn), 1);
    }
}
