//! Checkpoints: copying the home's write-ahead log back into its database
//! file, beside the read and stage paths instead of on them.
//!
//! SQLite checkpoints by default in the commit that takes the log past a
//! thousand pages: that commit copies every page the log holds and syncs
//! the database file before it returns. On the read path that commit is a
//! read's observation, so a gadget's read now and then waited for a copy
//! and two fsyncs it did not need (on average a fifth or more of an
//! observation's commit: `cargo bench -p gatehouse-e2e --bench ledger`).
//! Here the writer counts
//! its commits, and a thread of the store's own checkpoints once
//! [`COMMITS`] more were made (about as often as SQLite would), on a
//! connection of its own, without waiting for any lock (`PASSIVE`: it
//! copies what no reader still needs and leaves the rest for next time).
//! The writer checkpoints itself only past [`BACKSTOP_PAGES`], should this
//! thread fall behind.
//!
//! A checkpoint alone does not make the log start over: the writer starts
//! writing the log from its beginning again only if, when its transaction
//! begins, every frame in it was copied. Under a steady stream of commits
//! some always arrive while the thread copies, so the log grew to the
//! backstop (40 MB), and every commit meanwhile made the file longer: a
//! durable commit then waits for the file system to record the new length
//! too (about 250 µs against 150 µs for one that overwrites).
//! So after its copy the thread holds the writer for a moment and copies
//! the few frames committed meanwhile on the writer's own connection: no
//! commit of this process can come in between, and the next one starts
//! the log over.
//!
//! Owns: that thread, its connection and the writer's commit hook.
//! Touches nothing else: a checkpoint changes no row, and SQLite makes an
//! interrupted one safe.

use super::identity;
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak, mpsc};
use std::time::Duration;

/// How often the thread looks at the count. At the read path's fastest
/// (about 10,000 observations a second, two pages each) the log gathers
/// some 2,000 pages in between, well under [`BACKSTOP_PAGES`].
const EVERY: Duration = Duration::from_millis(100);

/// Commits between checkpoints: two to five pages each (an observation,
/// a stage), so about SQLite's own thousand pages. Checkpointing more
/// often would add two fsyncs each time, beside the durable commits that
/// wait for theirs.
const COMMITS: u64 = 400;

/// Past this many pages in the log, the writer's own commit checkpoints
/// (SQLite's automatic checkpoint): the log stays bounded (about 40 MB)
/// even if the thread cannot keep up.
const BACKSTOP_PAGES: i64 = 10_000;

/// The checkpointing thread of one store; it stops once this is dropped
/// (with the store's last clone).
pub(super) struct Checkpoints {
    _stop: mpsc::Sender<()>,
}

impl Checkpoints {
    /// Start checkpointing the file at `path`, written by `writer`, the
    /// one whose identity is `file` (device and inode): a file removed or
    /// replaced under the process is left alone, and never created. The
    /// thread holds the writer only while it finishes a checkpoint, and
    /// only while the store holds it too.
    pub(super) fn start(
        path: &Path,
        file: Option<(u64, u64)>,
        writer: &Arc<Mutex<Connection>>,
    ) -> anyhow::Result<Checkpoints> {
        let commits = Arc::new(AtomicU64::new(0));
        {
            let conn = lock(writer);
            conn.pragma_update(None, "wal_autocheckpoint", BACKSTOP_PAGES)?;
            let counted = commits.clone();
            conn.commit_hook(Some(move || {
                counted.fetch_add(1, Ordering::Relaxed);
                false // never turns the commit into a rollback
            }));
        }
        let (stop, stopped) = mpsc::channel();
        let path = path.to_owned();
        let writer = Arc::downgrade(writer);
        std::thread::Builder::new()
            .name("gatehouse-checkpoints".into())
            .spawn(move || run(path, file, writer, commits, stopped))?;
        Ok(Checkpoints { _stop: stop })
    }
}

/// The writer, whatever a panic left it in: SQLite keeps itself
/// consistent (each statement is atomic).
fn lock(writer: &Mutex<Connection>) -> std::sync::MutexGuard<'_, Connection> {
    writer.lock().unwrap_or_else(|e| e.into_inner())
}

fn run(
    path: PathBuf,
    file: Option<(u64, u64)>,
    writer: Weak<Mutex<Connection>>,
    commits: Arc<AtomicU64>,
    stopped: mpsc::Receiver<()>,
) {
    let mut conn: Option<Connection> = None;
    let mut at = 0;
    while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(EVERY) {
        let now = commits.load(Ordering::Relaxed);
        if now - at < COMMITS {
            continue;
        }
        if file.is_none() || identity(&path) != file {
            return;
        }
        if conn.is_none() {
            conn = open(&path);
        }
        if let Some(c) = &conn {
            match c.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                Ok(()) => {
                    at = now;
                    // The frames committed while this one copied, with the
                    // writer held: the log can then start over (see the
                    // module). Busy or failed, the next tick tries again.
                    let Some(writer) = writer.upgrade() else {
                        return;
                    };
                    let conn = lock(&writer);
                    if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                    {
                        tracing::debug!(error = %e, "checkpoint not finished");
                    }
                }
                // Busy (another checkpoint is running) is next tick's
                // work; anything else, the statements on the paths report.
                Err(e) => tracing::debug!(error = %e, "checkpoint skipped"),
            }
        }
    }
}

/// A connection that may write the file but never creates it.
fn open(path: &Path) -> Option<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .ok()?;
    // Never wait: PASSIVE takes no lock a writer needs, and a checkpoint
    // another connection is running is as good as this one.
    conn.busy_timeout(Duration::ZERO).ok()?;
    Some(conn)
}

#[cfg(test)]
mod tests {
    use super::super::Store;
    use crate::store::sql::args;
    use std::time::{Duration, Instant};

    #[test]
    fn the_log_reaches_the_database_file_without_a_commit_copying_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gatehouse.db");
        let store = Store::open(&path, crate::seal::test_key()).unwrap();
        let size = || std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        let before = size();
        // Some 3,000 commits of two pages each: under the writer's own
        // backstop, so only the thread can move them into the file.
        store
            .with(|db| {
                for n in 0..3000_i64 {
                    db.insert(
                        "INSERT INTO ledger (chat, kind, caller, person, sources, created_at)
                         VALUES ('work', 'observation', 'alice', 'alice', ?1, ?2)",
                        args![format!("[{{\"id\":\"source {n:>40}\"}}]"), n],
                    )?;
                }
                Ok(())
            })
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while size() <= before + 100 * 4096 {
            assert!(
                Instant::now() < deadline,
                "the database file stayed at {} bytes (was {before})",
                size()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Under a steady stream of commits the log starts over after the
    /// store's checkpoints, rather than growing to the writer's backstop:
    /// a commit that makes the file longer waits for the file system to
    /// record its new length too (a durable one took up to twice as
    /// long).
    #[test]
    fn under_steady_commits_the_log_starts_over_after_a_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gatehouse.db");
        let store = Store::open(&path, crate::seal::test_key()).unwrap();
        let wal = dir.path().join("gatehouse.db-wal");
        let mut longest = 0;
        // 8,000 commits of two pages or more, some 4,000 a second: far
        // past the backstop (10,000 pages) if the log never started over.
        for n in 0..8000_i64 {
            store
                .with(|db| {
                    db.insert(
                        "INSERT INTO ledger (chat, kind, caller, person, sources, created_at)
                         VALUES ('work', 'observation', 'alice', 'alice', ?1, ?2)",
                        args![format!("[{{\"id\":\"source {n:>40}\"}}]"), n],
                    )
                })
                .unwrap();
            std::thread::sleep(Duration::from_micros(100));
            longest = longest.max(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0));
        }
        assert!(
            longest < 24 << 20,
            "the log grew to {longest} bytes: it never started over"
        );
    }
}
