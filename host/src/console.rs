//! Writing to the terminal. A closed pipe (`gatehouse log --json | head`)
//! stops the printing, never the command: `println!` panics on a write
//! error, and a panic in the middle of `approve 1 2 3 | head -1` would cut
//! off a send that was already claimed. So every line the CLI prints goes
//! through these macros, which drop what cannot be written and carry on.
//!
//! Owns only the writing. What attacker text may look like on a terminal is
//! `crate::prompt`'s business (`terminal_line`, `terminal_block`,
//! `terminal_json`).

use std::fmt::Arguments;
use std::io::Write as _;

/// A line on stdout; a write error (a closed pipe) is ignored.
macro_rules! outln {
    () => { $crate::console::stdout_line(format_args!("")) };
    ($($arg:tt)*) => { $crate::console::stdout_line(format_args!($($arg)*)) };
}

/// Text on stdout without a line break; a write error is ignored.
macro_rules! out {
    ($($arg:tt)*) => { $crate::console::stdout_text(format_args!($($arg)*)) };
}

/// A line on stderr; a write error is ignored.
macro_rules! errln {
    () => { $crate::console::stderr_line(format_args!("")) };
    ($($arg:tt)*) => { $crate::console::stderr_line(format_args!($($arg)*)) };
}

/// Text on stderr without a line break (a question); a write error is ignored.
macro_rules! err {
    ($($arg:tt)*) => { $crate::console::stderr_text(format_args!($($arg)*)) };
}

/// Writes one line to stdout, dropping it if stdout is closed; what
/// `outln!` expands to. Public for the `gatehouse` binary's other parts
/// (the demo), which print the same way.
pub fn stdout_line(args: Arguments<'_>) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_fmt(args).and_then(|()| o.write_all(b"\n"));
}

/// Writes text to stdout and flushes it, dropping it if stdout is closed.
pub fn stdout_text(args: Arguments<'_>) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_fmt(args).and_then(|()| o.flush());
}

/// Writes one line to stderr, dropping it if stderr is closed.
pub fn stderr_line(args: Arguments<'_>) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_fmt(args).and_then(|()| e.write_all(b"\n"));
}

/// Writes text to stderr and flushes it, dropping it if stderr is closed.
pub fn stderr_text(args: Arguments<'_>) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_fmt(args).and_then(|()| e.flush());
}
