//! One write per commit to the write-ahead log: the writer connection opens
//! the home's database through a thin SQLite VFS of our own, `gatehouse`,
//! which is the platform's own VFS in every respect but one. The log file
//! it opens gathers the frames a transaction writes one after another, and
//! writes them to the file in one call when the transaction writes its
//! commit frame, before SQLite goes on to sync the log or publish the
//! commit in the log's index.
//!
//! Why: SQLite writes each frame of the log in two calls, its 24-byte
//! header and then its page. A read's observation commits two pages and a
//! durable stage two to four, so a commit made four to eight `pwrite`
//! system calls, about 2 µs each on the machines measured, where a bare
//! one-row commit makes two: most of what a stage's commit cost beyond
//! the bare one's, besides its fsync (measured with `perf trace` on the
//! fast-path bench's stage loop).
//!
//! What SQLite relies on still holds, because nothing is held back past a
//! moment SQLite could observe it:
//! - every frame is in the file before the commit that ends with it is
//!   synced (`xSync` writes what is gathered first) or published: the
//!   commit frame's own write writes everything, and SQLite updates the
//!   index only after that write returns;
//! - anything else asked of the log file (a read, its size, a truncation,
//!   a file control, closing it) writes what is gathered first, and a
//!   write that does not follow on from what is gathered writes that
//!   first, so the file is always exactly what SQLite wrote, in order;
//! - at most [`GATHERED`] bytes are gathered (a migration's large
//!   transaction writes as it goes);
//! - a process killed with frames gathered loses only frames of a
//!   transaction that never committed, which SQLite discards on recovery
//!   in any case; a failed write fails the call that made it, and SQLite
//!   rolls the transaction back.
//!
//! Every other file (the database, its WAL index, journals) is the
//! platform VFS's own file object, opened by it in place: no call on it
//! passes through this module. Other processes, and this process's other
//! connections, use the platform VFS directly and share its locks.
//!
//! Owns: the VFS's registration and the log file's methods. Never reads or
//! changes what is written.

use rusqlite::ffi;
use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;

/// The name the writer opens the database with.
pub(super) const VFS: &str = "gatehouse";

/// At most this many bytes are gathered before they are written.
const GATHERED: usize = 256 * 1024;

/// The most one call to the platform's write takes: the unix VFS writes
/// at most 128 KiB less one byte per call (it masks the length), so more
/// is written in pieces of this size.
const PIECE: usize = 64 * 1024;

/// The size of a frame's header in the log, and the offset of its
/// "database size after commit" field, which only a commit frame sets.
const FRAME_HEADER: c_int = 24;
const COMMIT_FIELD: std::ops::Range<usize> = 4..8;

/// The platform's VFS, which does everything but gather.
struct Platform(*mut ffi::sqlite3_vfs);
// SAFETY: SQLite's VFS objects are immutable once registered and are
// shared by every thread of the process.
unsafe impl Send for Platform {}
// SAFETY: as for `Send`.
unsafe impl Sync for Platform {}

static PLATFORM: OnceLock<Option<Platform>> = OnceLock::new();

/// Register the `gatehouse` VFS once per process; whether it is there to
/// open with. Where it is not (no platform VFS found, or registration
/// failed), the writer opens with the platform VFS, as every other
/// connection does.
pub(super) fn registered() -> bool {
    PLATFORM.get_or_init(register).is_some()
}

fn register() -> Option<Platform> {
    // SAFETY: asks SQLite for its default VFS, which lives as long as the
    // process.
    let platform = unsafe { ffi::sqlite3_vfs_find(std::ptr::null()) };
    if platform.is_null() {
        return None;
    }
    // SAFETY: `platform` is SQLite's own, valid for the process's life.
    let inner = unsafe { &*platform };
    let file = std::mem::size_of::<WalFile>() + usize::try_from(inner.szOsFile).ok()?;
    let name = Box::leak(Box::new(*b"gatehouse\0"));
    let ours = Box::leak(Box::new(ffi::sqlite3_vfs {
        szOsFile: c_int::try_from(file).ok()?,
        pNext: std::ptr::null_mut(),
        zName: name.as_ptr().cast::<c_char>(),
        xOpen: Some(open),
        // Everything else is the platform's, with its own data: its
        // functions find what they need through `pAppData`, which is the
        // same.
        ..*inner
    }));
    // SAFETY: `ours` is leaked, so it outlives every connection; not made
    // the default.
    let rc = unsafe { ffi::sqlite3_vfs_register(ours, 0) };
    (rc == ffi::SQLITE_OK).then_some(Platform(platform))
}

fn platform() -> *mut ffi::sqlite3_vfs {
    PLATFORM
        .get()
        .and_then(|p| p.as_ref())
        .map_or(std::ptr::null_mut(), |p| p.0)
}

/// The log file as the `gatehouse` VFS opens it: the platform's file
/// object (`real`, in the memory right after this) and what was gathered.
#[repr(C)]
struct WalFile {
    /// What SQLite sees: the methods below.
    base: ffi::sqlite3_file,
    real: *mut ffi::sqlite3_file,
    /// Bytes written by SQLite and not yet to the file, which start at
    /// offset `at`.
    gathered: Vec<u8>,
    at: i64,
    /// The last write was a commit frame's header: its page, next, ends
    /// the transaction.
    commit_next: bool,
}

/// `xOpen`: the log through a [`WalFile`], every other file opened by the
/// platform VFS in place (its file object fits: ours is larger).
unsafe extern "C" fn open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let platform = platform();
    // SAFETY: this VFS is registered only once `platform` is known, and
    // SQLite calls `open` only through it.
    let Some(platform_open) = (unsafe { platform.as_ref() }).and_then(|p| p.xOpen) else {
        return ffi::SQLITE_ERROR;
    };
    if flags & ffi::SQLITE_OPEN_WAL == 0 {
        // SAFETY: `file` has room for the platform's file object.
        return unsafe { platform_open(platform, name, file, flags, out_flags) };
    }
    // SAFETY: `file` has room for a `WalFile` followed by the platform's
    // file object (`szOsFile`); `WalFile`'s size keeps that aligned.
    let real = unsafe {
        file.cast::<u8>()
            .add(std::mem::size_of::<WalFile>())
            .cast::<ffi::sqlite3_file>()
    };
    // SAFETY: as above; the platform opens its object in its own room.
    let rc = unsafe { platform_open(platform, name, real, flags, out_flags) };
    if rc != ffi::SQLITE_OK {
        // SAFETY: SQLite reads `pMethods` to tell whether to close.
        unsafe { (*file).pMethods = std::ptr::null() };
        return rc;
    }
    // SAFETY: `file` is SQLite's memory for this file object, which it
    // hands back to `close` and frees after.
    unsafe {
        file.cast::<WalFile>().write(WalFile {
            base: ffi::sqlite3_file { pMethods: &METHODS },
            real,
            gathered: Vec::new(),
            at: 0,
            commit_next: false,
        });
    }
    ffi::SQLITE_OK
}

/// Version 1: SQLite asks nothing of a log file beyond these.
static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 1,
    xClose: Some(close),
    xRead: Some(read),
    xWrite: Some(write),
    xTruncate: Some(truncate),
    xSync: Some(sync),
    xFileSize: Some(file_size),
    xLock: Some(lock),
    xUnlock: Some(unlock),
    xCheckReservedLock: Some(check_reserved_lock),
    xFileControl: Some(file_control),
    xSectorSize: Some(sector_size),
    xDeviceCharacteristics: Some(device_characteristics),
    xShmMap: None,
    xShmLock: None,
    xShmBarrier: None,
    xShmUnmap: None,
    xFetch: None,
    xUnfetch: None,
};

/// The [`WalFile`] behind `file`, and the platform's methods for its file.
///
/// # Safety
/// `file` must be a file object `open` made a `WalFile` of.
unsafe fn parts<'a>(
    file: *mut ffi::sqlite3_file,
) -> (&'a mut WalFile, &'a ffi::sqlite3_io_methods) {
    // SAFETY: the caller's promise; SQLite uses a file object from one
    // thread at a time.
    let wal = unsafe { &mut *file.cast::<WalFile>() };
    // SAFETY: `real` was opened successfully, so its methods are set.
    let methods = unsafe { &*(*wal.real).pMethods };
    (wal, methods)
}

impl WalFile {
    /// Write what was gathered: in one call, unless it is more than a
    /// [`PIECE`].
    fn flush(&mut self, methods: &ffi::sqlite3_io_methods) -> c_int {
        let Some(write) = methods.xWrite else {
            return ffi::SQLITE_IOERR_WRITE;
        };
        let mut rc = ffi::SQLITE_OK;
        let mut at = self.at;
        for piece in self.gathered.chunks(PIECE) {
            let (Ok(len), Ok(step)) = (c_int::try_from(piece.len()), i64::try_from(piece.len()))
            else {
                rc = ffi::SQLITE_IOERR_WRITE;
                break;
            };
            // SAFETY: the platform's write of our own bytes to its open
            // file.
            rc = unsafe { write(self.real, piece.as_ptr().cast(), len, at) };
            #[cfg(test)]
            tests::WRITES.with(|w| w.set(w.get() + 1));
            if rc != ffi::SQLITE_OK {
                break;
            }
            at += step;
        }
        self.gathered.clear();
        self.commit_next = false;
        rc
    }
}

/// Write what was gathered, then (if that worked) run `then`.
///
/// # Safety
/// As [`parts`].
unsafe fn flushed(
    file: *mut ffi::sqlite3_file,
    then: impl FnOnce(*mut ffi::sqlite3_file, &ffi::sqlite3_io_methods) -> c_int,
) -> c_int {
    // SAFETY: the caller's promise.
    let (wal, methods) = unsafe { parts(file) };
    match wal.flush(methods) {
        ffi::SQLITE_OK => then(wal.real, methods),
        failed => failed,
    }
}

unsafe extern "C" fn close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite closes only what `open` opened.
    let (wal, methods) = unsafe { parts(file) };
    let flushed = wal.flush(methods);
    // SAFETY: the platform closes its own object, once.
    let closed = methods
        .xClose
        .map_or(ffi::SQLITE_OK, |c| unsafe { c(wal.real) });
    // SAFETY: the `WalFile` is never used again; SQLite frees its memory.
    unsafe { std::ptr::drop_in_place(file.cast::<WalFile>()) };
    if flushed != ffi::SQLITE_OK {
        flushed
    } else {
        closed
    }
}

unsafe extern "C" fn write(
    file: *mut ffi::sqlite3_file,
    data: *const c_void,
    amount: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: SQLite writes only to what `open` opened.
    let (wal, methods) = unsafe { parts(file) };
    let Ok(len) = usize::try_from(amount) else {
        return ffi::SQLITE_IOERR_WRITE;
    };
    // The page after a commit frame's header ends the transaction.
    let ends_commit = wal.commit_next && amount != FRAME_HEADER;
    let follows = i64::try_from(wal.gathered.len())
        .ok()
        .and_then(|n| wal.at.checked_add(n))
        == Some(offset);
    if !wal.gathered.is_empty() && !follows {
        let rc = wal.flush(methods);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
    }
    if wal.gathered.is_empty() {
        wal.at = offset;
    }
    // SAFETY: SQLite hands `amount` readable bytes at `data`.
    let bytes = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) };
    wal.gathered.extend_from_slice(bytes);
    wal.commit_next = amount == FRAME_HEADER && bytes[COMMIT_FIELD].iter().any(|b| *b != 0);
    if ends_commit || wal.gathered.len() >= GATHERED {
        return wal.flush(methods);
    }
    ffi::SQLITE_OK
}

unsafe extern "C" fn read(
    file: *mut ffi::sqlite3_file,
    into: *mut c_void,
    amount: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: as `flushed` asks; the platform reads into SQLite's buffer.
    unsafe {
        flushed(file, |real, m| {
            m.xRead
                .map_or(ffi::SQLITE_IOERR_READ, |f| f(real, into, amount, offset))
        })
    }
}

unsafe extern "C" fn truncate(file: *mut ffi::sqlite3_file, size: ffi::sqlite3_int64) -> c_int {
    // SAFETY: as `flushed` asks.
    unsafe {
        flushed(file, |real, m| {
            m.xTruncate
                .map_or(ffi::SQLITE_IOERR_TRUNCATE, |f| f(real, size))
        })
    }
}

unsafe extern "C" fn sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    // SAFETY: as `flushed` asks.
    unsafe {
        flushed(file, |real, m| {
            m.xSync.map_or(ffi::SQLITE_IOERR_FSYNC, |f| f(real, flags))
        })
    }
}

unsafe extern "C" fn file_size(
    file: *mut ffi::sqlite3_file,
    size: *mut ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: as `flushed` asks.
    unsafe {
        flushed(file, |real, m| {
            m.xFileSize
                .map_or(ffi::SQLITE_IOERR_FSTAT, |f| f(real, size))
        })
    }
}

unsafe extern "C" fn file_control(
    file: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: as `flushed` asks.
    unsafe {
        flushed(file, |real, m| {
            m.xFileControl
                .map_or(ffi::SQLITE_NOTFOUND, |f| f(real, op, arg))
        })
    }
}

unsafe extern "C" fn lock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    // SAFETY: SQLite calls this only on what `open` opened.
    let (wal, m) = unsafe { parts(file) };
    m.xLock
        .map_or(ffi::SQLITE_OK, |f| unsafe { f(wal.real, level) })
}

unsafe extern "C" fn unlock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    // SAFETY: as `lock`.
    let (wal, m) = unsafe { parts(file) };
    m.xUnlock
        .map_or(ffi::SQLITE_OK, |f| unsafe { f(wal.real, level) })
}

unsafe extern "C" fn check_reserved_lock(file: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    // SAFETY: as `lock`.
    let (wal, m) = unsafe { parts(file) };
    m.xCheckReservedLock
        .map_or(ffi::SQLITE_OK, |f| unsafe { f(wal.real, out) })
}

unsafe extern "C" fn sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: as `lock`.
    let (wal, m) = unsafe { parts(file) };
    m.xSectorSize.map_or(4096, |f| unsafe { f(wal.real) })
}

unsafe extern "C" fn device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: as `lock`.
    let (wal, m) = unsafe { parts(file) };
    m.xDeviceCharacteristics
        .map_or(0, |f| unsafe { f(wal.real) })
}

#[cfg(test)]
mod tests {
    use crate::store::Store;
    use rusqlite::Connection;

    thread_local! {
        /// Writes this thread made to a log through the VFS.
        pub(super) static WRITES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    fn writes() -> u64 {
        WRITES.with(|w| w.get())
    }

    /// What another process sees of the file, through the platform VFS.
    fn elsewhere(path: &std::path::Path) -> Connection {
        Connection::open(path).unwrap()
    }

    /// A commit of several pages reaches the log in one write, and another
    /// connection, through the platform VFS, reads exactly what it wrote.
    #[test]
    fn a_commit_reaches_the_log_in_one_write() {
        assert!(super::registered());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gatehouse.db");
        let store = Store::open(&path, crate::seal::test_key()).unwrap();
        let writer = store.home().unwrap();
        let conn = writer.lock();
        conn.execute_batch(
            "CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT); CREATE INDEX t_v ON t (v)",
        )
        .unwrap();
        let before = writes();
        // A row and its index entry: two pages, four writes by SQLite.
        conn.execute("INSERT INTO t (v) VALUES ('one')", [])
            .unwrap();
        assert_eq!(writes() - before, 1, "writes for one commit");
        let v: String = elsewhere(&path)
            .query_row("SELECT v FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, "one");
    }

    /// A transaction larger than what is gathered, and one rolled back
    /// after SQLite spilled its pages to the log, leave the file exactly
    /// as SQLite meant: the first whole, the second absent, and the file
    /// sound.
    #[test]
    fn large_and_rolled_back_transactions_leave_the_log_sound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gatehouse.db");
        let store = Store::open(&path, crate::seal::test_key()).unwrap();
        let writer = store.home().unwrap();
        let mut conn = writer.lock();
        conn.execute_batch("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
            .unwrap();
        let row = "x".repeat(1500);
        let tx = conn.transaction().unwrap();
        for _ in 0..400 {
            tx.execute("INSERT INTO t (v) VALUES (?1)", [&row]).unwrap();
        }
        tx.commit().unwrap();
        // A page cache of a few pages makes SQLite spill to the log
        // before the transaction ends.
        conn.execute_batch("PRAGMA cache_size = 4").unwrap();
        let tx = conn.transaction().unwrap();
        for _ in 0..400 {
            tx.execute("INSERT INTO t (v) VALUES (?1)", [&row]).unwrap();
        }
        tx.rollback().unwrap();
        conn.execute("INSERT INTO t (v) VALUES ('last')", [])
            .unwrap();
        drop(conn);
        let other = elsewhere(&path);
        let (n, last): (i64, String) = other
            .query_row(
                "SELECT count(*), (SELECT v FROM t ORDER BY k DESC LIMIT 1) FROM t",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!((n, last.as_str()), (401, "last"));
        let check: String = other
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok");
        // And after a checkpoint copies the log into the file.
        other
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
        let n: i64 = other
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 401);
    }
}
