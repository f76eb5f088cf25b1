//! Whether anything was committed to the home's database since a moment,
//! told without a transaction: from the header of SQLite's WAL index, the
//! `-shm` file that every connection to the database shares (its format
//! is SQLite's documented file format: <https://sqlite.org/walformat.html>).
//!
//! Why: a read through the kernel checks the policy epoch before it reaches
//! a service (a revoked introduction must never be used again, whichever
//! process revoked it). Asking the database means a read transaction, and
//! in WAL mode each one takes and drops two locks on the `-shm` file, four
//! `fcntl` calls: about 4 µs, a tenth of a whole read, as profiled.
//! The header counts every commit to the file (`iChange`), of this process
//! or any other, and is rewritten by each one. So if the header is exactly
//! as it was when the epoch was last read, nothing was committed since,
//! and that epoch is the epoch now ([`crate::store::known::Known`]).
//!
//! Owns: reads of the header where SQLite itself mapped it, and the
//! [`CommitMark`]s read from it. It never writes, never locks and opens no
//! file, and it answers only "the same as then" or "exactly one commit
//! after then". A header being rewritten while it is read (its two copies
//! differ), a format it does not know, or a connection whose file has no
//! such mapping is "not known", and callers then ask the database as
//! before.

use rusqlite::{Connection, ffi};
use std::sync::{Arc, Mutex};

/// The header's size: SQLite keeps two copies of it, one after the other.
const HEADER: usize = 48;
/// The only header format this reads (`WALINDEX_MAX_VERSION`).
const VERSION: u32 = 3_007_000;
/// The size of each region SQLite maps the WAL index in (`WALINDEX_PGSZ`):
/// the header is at the start of the first.
const REGION: i32 = 32 * 1024;

/// The WAL-index header of one SQLite file, as SQLite itself maps it.
pub(crate) struct WalIndex {
    /// The start of the WAL index's first region: both copies of the
    /// header.
    header: std::ptr::NonNull<u8>,
    /// The connection whose mapping `header` is in, kept open as long as
    /// this is: SQLite unmaps the WAL index only once no connection of the
    /// process has it open.
    _open: Arc<Mutex<Connection>>,
}

// SAFETY: the header is only ever read, with volatile reads of plain
// bytes, and its mapping stays valid for the value's life (see `_open`).
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
    /// The header of the database `open` is connected to, in WAL mode and
    /// read at least once; `None` where it cannot be read this way.
    ///
    /// Why SQLite's own mapping and not a map of the `-shm` file: a file
    /// descriptor of our own on it, once closed, would drop every POSIX
    /// lock this process holds on the file, SQLite's among them, and
    /// another process would then take the file for unused and empty it.
    pub(crate) fn of(open: &Arc<Mutex<Connection>>) -> Option<WalIndex> {
        let header = {
            let conn = open.lock().unwrap_or_else(|e| e.into_inner());
            first_region(&conn)?
        };
        let index = WalIndex {
            header,
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
            // SAFETY: both copies lie at the start of the first region
            // (32 KiB), which stays mapped for `self`'s life; the bytes
            // are read, never referenced, because other processes and
            // threads write them.
            unsafe { std::ptr::read_volatile(self.header.as_ptr().add(at).cast::<[u8; HEADER]>()) }
        };
        let first = copy(0);
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        let second = copy(HEADER);
        // `isInit`: a header SQLite has not yet written says nothing.
        (first == second && first[12] != 0).then_some(CommitMark(first))
    }
}

/// Where SQLite mapped the first region of `conn`'s WAL index, asked of its
/// file's own methods (`xShmMap`, which hands out the mapping it already
/// made and makes nothing new unless asked to extend).
fn first_region(conn: &Connection) -> Option<std::ptr::NonNull<u8>> {
    let mut file: *mut ffi::sqlite3_file = std::ptr::null_mut();
    // SAFETY: the live connection's handle, asked for the main database's
    // file object into a pointer of the type SQLite writes.
    let rc = unsafe {
        ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            ffi::SQLITE_FCNTL_FILE_POINTER,
            (&raw mut file).cast(),
        )
    };
    if rc != ffi::SQLITE_OK || file.is_null() {
        return None;
    }
    // SAFETY: `file` is the open file object SQLite just handed out; its
    // methods table lives as long as it does. Version 2 and later have
    // the shared-memory methods.
    let methods = unsafe { (*file).pMethods.as_ref() }?;
    let map = (methods.iVersion >= 2)
        .then_some(methods.xShmMap)
        .flatten()?;
    let mut region: *mut std::ffi::c_void = std::ptr::null_mut();
    // SAFETY: region 0 of the size SQLite maps it in, not extended: the
    // mapping the connection already has, or none.
    let rc = unsafe { map(file, 0, REGION, 0, &raw mut region) };
    if rc != ffi::SQLITE_OK {
        return None;
    }
    std::ptr::NonNull::new(region.cast())
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
        let index = WalIndex::of(&writer).expect("the header is readable");
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
