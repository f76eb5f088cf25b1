//! A gadget's face: a small web page shown beside its chat, in the web
//! inbox and to MCP hosts as an MCP App.
//!
//! Owns the typed view of the contract's `face` interface. The page is
//! plain HTML: the host puts the bridge into it (the script that defines
//! `gatehouse.call(name, args)`, over `postMessage`), wherever it is shown.
//! It may not decide anything: every call the page makes runs as a turn of
//! the person viewing it, and the kernel decides what that turn may do
//! exactly as it decides a turn of `run`.
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
    /// page can load nothing else). The host puts the bridge in as its
    /// first script: the page calls `gatehouse.call(name, args)`, which
    /// answers a promise of the function's JSON answer (or rejects with the
    /// error's text).
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

impl<T: Face> crate::face_bindings::exports::gatehouse::os::face::Guest for T {
    fn show() -> crate::face_bindings::exports::gatehouse::os::face::Page {
        let p = <T as Face>::page();
        crate::face_bindings::exports::gatehouse::os::face::Page {
            title: p.title,
            html: p.html,
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
