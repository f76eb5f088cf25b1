//! A gadget's face: a small web page shown beside its chat, in the web
//! inbox and to MCP hosts as an MCP App.
//!
//! Owns the typed view of the contract's `face` interface and the page's
//! side of the bridge ([`BRIDGE`], put into every page by [`Face::page`]'s
//! export): the script that lets the page call the gadget's functions over
//! `postMessage`. It may not decide anything: every call the page makes
//! runs as a turn of the person viewing it, and the kernel decides what
//! that turn may do exactly as it decides a turn of `run`.
//!
//! ```no_run
//! use gatehouse_gadget::{Gadget, face::{Face, Page}};
//! use serde_json::{Value, json};
//!
//! struct Counter;
//!
//! impl Gadget for Counter {
//!     fn run(_input: String) -> Result<String, String> {
//!         Ok("open my face in the inbox".into())
//!     }
//! }
//!
//! impl Face for Counter {
//!     fn page() -> Page {
//!         Page {
//!             title: "Counter".into(),
//!             html: "<button onclick=\"gatehouse.call('hello', {}).then(a => \
//!                    this.textContent = a.text)\">Say hello</button>".into(),
//!             functions: vec!["hello".into()],
//!         }
//!     }
//!     fn call(name: &str, _args: Value) -> Result<Value, String> {
//!         match name {
//!             "hello" => Ok(json!({"text": "hello"})),
//!             other => Err(format!("no function {other:?}")),
//!         }
//!     }
//! }
//!
//! gatehouse_gadget::export!(Counter, face);
//! ```

use serde_json::Value;

/// The page and the functions it may call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    /// A short name for people ("Triage board").
    pub title: String,
    /// One self-contained HTML document (scripts and styles inline; the
    /// page can load nothing else). [`BRIDGE`] is put in for you: the page
    /// calls `gatehouse.call(name, args)`, which answers a promise of the
    /// function's JSON answer (or rejects with the error's text).
    pub html: String,
    /// The functions the page may call, by name (`a-z`, `0-9`, `_`, `-`).
    pub functions: Vec<String>,
}

/// A gadget's face. Implement it beside [`crate::Gadget`] and export both
/// with `gatehouse_gadget::export!(T, face)`.
pub trait Face {
    /// The page. Asked for outside any turn: it must not call the kernel
    /// (such a call is refused), and it must be the same every time.
    fn page() -> Page;
    /// One call of the page, run as a turn of the person viewing it: the
    /// kernel calls are theirs, reads are recorded and writes are staged,
    /// exactly as in [`crate::Gadget::run`].
    fn call(name: &str, args: Value) -> Result<Value, String>;
}

/// The page's side of the bridge, a plain script with no dependency: it
/// greets the host (`ui/initialize`, the MCP Apps handshake) and defines
/// `gatehouse.call(name, args)`, which sends `tools/call` to the host and
/// answers the result. In an MCP host the page's functions are offered as
/// tools named after the tool that opened the page (`triage.face` opens
/// the face whose `board` is `triage.board`), so the bridge learns that
/// prefix from the handshake; in the inbox the host answers the same way.
pub const BRIDGE: &str = include_str!("face_bridge.js");

/// `html` with [`BRIDGE`] as its first script: right after `<head>` when
/// it has one, else at its start.
pub fn with_bridge(html: &str) -> String {
    let script = format!("<script>{BRIDGE}</script>");
    match html.find("<head>") {
        Some(at) => {
            let end = at + "<head>".len();
            format!("{}{script}{}", &html[..end], &html[end..])
        }
        None => format!("{script}{html}"),
    }
}

impl<T: Face> crate::face_bindings::exports::gatehouse::os::face::Guest for T {
    fn show() -> crate::face_bindings::exports::gatehouse::os::face::Page {
        let p = <T as Face>::page();
        crate::face_bindings::exports::gatehouse::os::face::Page {
            title: p.title,
            html: with_bridge(&p.html),
            functions: p.functions,
        }
    }

    fn call(name: String, args: String) -> Result<String, String> {
        let args: Value = serde_json::from_str(&args)
            .map_err(|e| format!("the arguments of {name:?} are not JSON: {e}"))?;
        let answer = <T as Face>::call(&name, args)?;
        serde_json::to_string(&answer).map_err(|e| format!("the answer is not JSON: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bridge_comes_first_in_the_head_or_the_document() {
        let with_head = with_bridge("<html><head><title>x</title></head></html>");
        assert!(with_head.starts_with("<html><head><script>"));
        assert!(with_head.ends_with("</script><title>x</title></head></html>"));
        let bare = with_bridge("<p>hi</p>");
        assert!(bare.starts_with("<script>"));
        assert!(bare.ends_with("</script><p>hi</p>"));
    }
}
