//! Whether anything was committed to the home's database since a moment,
//! told without a transaction: from the header of SQLite's WAL index, the
//! `-shm` file that every connection to the database shares (its format
//! is SQLite's documented file format: <https://sqlite.org/walformat.html>).
//!
//! Why: a read through the kernel checks the policy epoch before it reaches
//! a service (a revoked introduction must never be used again, whichever
//! process revoked it). Asking the database means a read transaction, and
//! in WAL mode each one takes and drops two locks on the `-shm` file, four
//! `fcntl` calls: about 4 µs, a tenth of a whole read (issue 17's profile).
//! The header counts every commit to the file (`iChange`), of this process
//! or any other, and is rewritten by each one. So if the header is exactly
//! as it was when the epoch was last read, nothing was committed since,
//! and that epoch is the epoch now ([`crate::store::dispatch::EpochWatch`]).
//!
//! Owns: a read-only map of the header and the [`CommitMark`]s read from it.
//! It never writes and never locks, and it answers only "the same as then"
//! or "exactly one commit after then". A header being rewritten while it is
//! read (its two copies differ), a format it does not know, or a file it
//! cannot map is "not known", and callers then ask the database as before.

use rusqlite::Connection;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// The header's size: SQLite keeps two copies of it, one after the other.
const HEADER: usize = 48;
/// The only header format this reads (`WALINDEX_MAX_VERSION`).
const VERSION: u32 = 3_007_000;

/// The WAL-index header of one SQLite file, mapped for reading.
pub(crate) struct WalIndex {
    /// The first bytes of the `-shm` file: both copies of the header.
    map: std::ptr::NonNull<u8>,
    /// The writer connection, kept open as long as the map is: SQLite
    /// empties or removes a `-shm` file only when no connection has it
    /// open (it holds a shared lock on it for as long as one does), so the
    /// mapped bytes stay the ones every connection to the file uses.
    _open: Arc<Mutex<Connection>>,
}

// SAFETY: the map is only ever read, with volatile reads of plain bytes,
// and it stays valid for the value's life (see `_open`).
unsafe impl Send for WalIndex {}
// SAFETY: as for `Send`: shared use is concurrent reads of shared memory.
unsafe impl Sync for WalIndex {}

/// The header as it was at one moment: equal marks mean no commit came in
/// between.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct CommitMark([u8; HEADER]);

impl CommitMark {
    /// The header's commit counter (`iChange`, native byte order).
    fn commits(&self) -> u32 {
        u32::from_ne_bytes([self.0[8], self.0[9], self.0[10], self.0[11]])
    }

    /// Whether exactly one commit came between `before` and this mark.
    pub(crate) fn follows(&self, before: &CommitMark) -> bool {
        self.commits() == before.commits().wrapping_add(1)
    }
}

impl WalIndex {
    /// The header of the database at `path`, which `open` (a connection to
    /// it in WAL mode that has read it) keeps open; `None` where it cannot
    /// be read this way.
    pub(crate) fn of(path: &Path, open: &Arc<Mutex<Connection>>) -> Option<WalIndex> {
        let mut shm = path.as_os_str().to_owned();
        shm.push("-shm");
        let file = std::fs::File::open(shm).ok()?;
        if file.metadata().ok()?.len() < 2 * HEADER as u64 {
            return None;
        }
        let index = WalIndex {
            map: map(&file)?,
            _open: open.clone(),
        };
        let mark = index.mark()?;
        let version = u32::from_ne_bytes([mark.0[0], mark.0[1], mark.0[2], mark.0[3]]);
        (version == VERSION).then_some(index)
    }

    /// The header now, if it was read whole: as SQLite's own readers do,
    /// the first copy, then (after a barrier) the second, which a writer
    /// writes in the other order; they differ while a commit rewrites them.
    pub(crate) fn mark(&self) -> Option<CommitMark> {
        let copy = |at: usize| {
            // SAFETY: both copies lie inside the mapping (see `of`), which
            // is valid for `self`'s life; the bytes are read, never
            // referenced, because other processes write them.
            unsafe { std::ptr::read_volatile(self.map.as_ptr().add(at).cast::<[u8; HEADER]>()) }
        };
        let first = copy(0);
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        let second = copy(HEADER);
        // `isInit`: a header SQLite has not yet written says nothing.
        (first == second && first[12] != 0).then_some(CommitMark(first))
    }
}

/// Both copies of the header in `file` (at least that long), mapped
/// read-only and shared.
#[cfg(unix)]
fn map(file: &std::fs::File) -> Option<std::ptr::NonNull<u8>> {
    // SAFETY: a new read-only shared mapping of a file at least this long,
    // which stays that long while a connection has it open (see `_open`);
    // nothing else is at the address the kernel picks.
    let map = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            2 * HEADER,
            rustix::mm::ProtFlags::READ,
            rustix::mm::MapFlags::SHARED,
            file,
            0,
        )
    }
    .ok()?;
    std::ptr::NonNull::new(map.cast())
}

/// Elsewhere the epoch is always read from the file.
#[cfg(not(unix))]
fn map(_: &std::fs::File) -> Option<std::ptr::NonNull<u8>> {
    None
}

impl Drop for WalIndex {
    fn drop(&mut self) {
        // SAFETY: the mapping made by `map`, unmapped once, never read
        // after.
        #[cfg(unix)]
        let _ = unsafe { rustix::mm::munmap(self.map.as_ptr().cast(), 2 * HEADER) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mark moves with each commit, of any connection, by one, and not
    /// with reads: what the policy epoch's watch rests on.
    #[test]
    fn the_mark_moves_with_every_commit_and_only_then() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let writer = Connection::open(&path).unwrap();
        writer
            .execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (n INTEGER);")
            .unwrap();
        let writer = Arc::new(Mutex::new(writer));
        let index = WalIndex::of(&path, &writer).expect("the header is readable");
        let other = Connection::open(&path).unwrap();

        let before = index.mark().unwrap();
        let n: i64 = other
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 0);
        assert!(index.mark() == Some(before), "a read commits nothing");

        other.execute("INSERT INTO t VALUES (1)", []).unwrap();
        let after = index.mark().unwrap();
        assert!(after != before && after.follows(&before));

        writer
            .lock()
            .unwrap()
            .execute("INSERT INTO t VALUES (2)", [])
            .unwrap();
        other.execute("INSERT INTO t VALUES (3)", []).unwrap();
        let twice = index.mark().unwrap();
        assert!(!twice.follows(&after) && !twice.follows(&before));
        assert_eq!(twice.commits(), before.commits() + 3);
    }
}
