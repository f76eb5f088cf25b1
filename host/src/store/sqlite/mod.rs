//! The embedded engine: the home's SQLite file.
//!
//! Owns opening the file (its pragmas, its schema's versions), the writer
//! connection and the readers, the group commit ([`group`]) and the
//! checkpoints ([`checkpoint`]), and the in-place read path. It may not
//! decide policy nor know a table's meaning: the statements belong to the
//! store's concept modules, which reach this engine only through the
//! verbs of [`engine`](super::engine).
//!
//! Why the writer is one connection behind a lock and not a thread fed by
//! a command channel (as sqlx's SQLite worker is): every read records its
//! observation on the writer, in place on the caller's thread when the
//! writer is free ([`Store::run_now`]), and a lone durable stage commits
//! on its caller's thread handed over to blocking work ([`group`]). A hop
//! to another thread and back measured 35-51 µs, a fifth of a read's whole
//! cost, and a lone stage went from 147 µs to 125 µs above the bare
//! fsynced commit when it stopped hopping (docs/operations.md). A worker
//! thread would put that hop back on every read and every stage; the
//! lock keeps one writer all the same, and the group commit's queue is
//! the command channel where batching pays (many stages, one fsync).

mod adapter;
mod checkpoint;
pub(super) mod group;

use super::{Resolution, Store, dispatch, with_overlay};
use anyhow::Context as _;
use rusqlite::{Connection, OpenFlags, OptionalExtension as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

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
    pub(super) staging: Mutex<group::StagingQueue>,
    pub(super) path: PathBuf,
    /// The file opened (device and inode), to notice it was removed or
    /// replaced under a long-running process.
    pub(super) identity: Option<(u64, u64)>,
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
pub(super) fn identity(path: &Path) -> Option<(u64, u64)> {
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
pub(super) fn open_error(
    path: &Path,
    e: rusqlite::Error,
    os: Option<std::io::Error>,
) -> anyhow::Error {
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
pub(super) fn system_error(conn: &Connection) -> Option<std::io::Error> {
    // SAFETY: `handle` is the live connection's own pointer, used only for
    // this read of its saved errno while `conn` is borrowed.
    let errno = unsafe { rusqlite::ffi::sqlite3_system_errno(conn.handle()) };
    (errno != 0).then(|| std::io::Error::from_raw_os_error(errno))
}

impl Home {
    /// Open (creating if needed) the database file at `path`, at the
    /// newest schema. A file that is not a Gatehouse database, or is
    /// damaged, is refused with a message that says so; it is never
    /// overwritten.
    pub(super) fn open(path: &Path) -> anyhow::Result<Home> {
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
        Ok(Home {
            conn,
            durable: std::sync::atomic::AtomicBool::new(false),
            readers: (0..READERS).map(|_| Mutex::new(None)).collect(),
            staging: Mutex::default(),
            path: path.to_owned(),
            identity: file,
            _checkpoints: checkpoints,
        })
    }

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
pub(super) fn resolve_in(
    conn: &Connection,
    store: &Store,
    chat: &str,
    key: &str,
    person: &str,
) -> anyhow::Result<Resolution> {
    let resolved = resolve_kept(&store.resolutions, conn, chat, key, person)?;
    with_overlay(conn, chat, resolved)
}

/// [`dispatch::resolve`] on the home's file, reusing what `kept` resolved
/// under the current epoch: a hit is one statement, the epoch's. A miss
/// resolves in one read transaction that also reads the epoch, so what is
/// kept is kept under the epoch it was true at.
fn resolve_kept(
    kept: &dispatch::Resolutions,
    conn: &Connection,
    chat: &str,
    key: &str,
    person: &str,
) -> anyhow::Result<Result<Arc<dispatch::Resolved>, dispatch::Unresolved>> {
    let call = (chat.to_owned(), key.to_owned(), person.to_owned());
    if let Some(r) = kept.kept_at(&call, epoch_in(conn)?) {
        return Ok(Ok(r));
    }
    let tx = Begun::on(conn, rusqlite::TransactionBehavior::Deferred)?;
    let epoch = epoch_in(&tx)?;
    let resolved = dispatch::resolve(&*tx, chat, key, person)?;
    tx.commit()?;
    let resolved = resolved.map(Arc::new);
    if let Ok(r) = &resolved {
        kept.keep(call, epoch, r);
    }
    Ok(resolved)
}

/// The policy epoch as `conn` sees it now.
fn epoch_in(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached("SELECT n FROM policy_epoch WHERE id = 1")?
        .query_row([], |r| r.get(0))
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

#[cfg(test)]
mod upgrade {
    use super::*;
    use crate::store::sql::args;

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

impl Store {
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

    /// [`Store::read_now`] on the home's readers, with the connection
    /// itself (for what only SQLite has: the kept resolution's snapshot).
    pub(in crate::store) async fn read_home<T, F>(&self, f: F) -> anyhow::Result<T>
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
}
