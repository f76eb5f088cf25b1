//! Write a Gatehouse gadget in Rust.
//!
//! A gadget is a sandboxed WebAssembly component with no ambient authority:
//! its one way out is the kernel, which lists the services introduced to
//! its chat, opens one by key and calls its tools. Reads are answered at
//! once; actions (writes) are *staged*: the call answers [`Outcome::Pending`]
//! at once and nothing is sent until a person approves. This crate holds
//! the bindings of the contract (`wit/gatehouse.wit`, `gatehouse:os@0.3.0`,
//! generated once here) and a small typed layer over them.
//!
//! ```no_run
//! use gatehouse_gadget::{Gadget, Outcome};
//! use serde_json::json;
//!
//! struct Hello;
//!
//! impl Gadget for Hello {
//!     fn run(input: String) -> Result<String, String> {
//!         let issues = gatehouse_gadget::open("ISSUES").map_err(|e| e.to_string())?;
//!         match issues.call("createIssue", &json!({"title": input})) {
//!             Ok(Outcome::Pending(p)) => Ok(format!("staged as #{}", p.action_id)),
//!             Ok(Outcome::Done(answer)) => Ok(answer.to_string()),
//!             Err(e) => Err(e.to_string()),
//!         }
//!     }
//! }
//!
//! gatehouse_gadget::export!(Hello);
//! ```
//!
//! Build with `cargo build --release --target wasm32-wasip2` (the crate must
//! be a `cdylib`) and install the `.wasm` with `gatehouse install`.
//!
//! What this crate owns: the bindings and the typed view of calls,
//! outcomes, action statuses and errors. What it may not do: add policy.
//! Every decision (what is a read, what waits, who may see what) is the
//! kernel's; the types here only carry its answers.

#![deny(missing_docs)]

// The generated code names its runtime through this crate, so that a
// gadget depends on `gatehouse-gadget` alone.
extern crate self as gatehouse_gadget;
#[doc(hidden)]
pub use wit_bindgen;

mod call;
/// A gadget's face: its page and the functions the page may call.
pub mod face;
/// Gadget storage: a small key-value store per gadget per chat.
pub mod storage;
mod workflow;

pub use call::{ActionResult, CallError, Outcome, Pending, Service, action_result, env, open};
pub use workflow::{Certificate, request_approval, step_certificate};

/// The bindings generated from `wit/gatehouse.wit` (world `step`, which
/// includes `gadget`), for what the typed layer does not cover. Imports a
/// gadget does not use are dropped when it is built, so a gadget that never
/// touches [`workflow`](bindings::gatehouse::os::workflow) does not import
/// it.
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "step",
        path: "wit",
        pub_export_macro: true,
        default_bindings_module: "gatehouse_gadget::bindings",
        runtime_path: "gatehouse_gadget::wit_bindgen::rt",
    });
}

/// The bindings of the contract's `face` interface (world `face-only`),
/// exported beside `run` by `export!(T, face)`.
#[doc(hidden)]
#[allow(missing_docs)]
pub mod face_bindings {
    wit_bindgen::generate!({
        world: "face-only",
        path: "wit",
        pub_export_macro: true,
        default_bindings_module: "gatehouse_gadget::face_bindings",
        runtime_path: "gatehouse_gadget::wit_bindgen::rt",
    });
}

/// A gadget: one turn per call of [`Gadget::run`].
///
/// `input` is free text: the user's request, a hook's event envelope
/// (JSON), or the kernel's note when it resumes the gadget after its
/// awaited actions were applied. The answer (or the error) is shown to the
/// user, sanitised.
pub trait Gadget {
    /// One turn.
    fn run(input: String) -> Result<String, String>;
}

impl<T: Gadget> bindings::exports::gatehouse::os::run::Guest for T {
    fn run(input: String) -> Result<String, String> {
        <T as Gadget>::run(input)
    }
}

/// Exports a type that implements [`Gadget`] as the component's `run`;
/// `export!(T, face)` also exports its [`face::Face`]. Call it once, at the
/// top level of the gadget's crate.
#[macro_export]
macro_rules! export {
    ($ty:ident) => {
        $crate::bindings::export!($ty with_types_in $crate::bindings);
    };
    ($ty:ident, face) => {
        $crate::bindings::export!($ty with_types_in $crate::bindings);
        $crate::face_bindings::export!($ty with_types_in $crate::face_bindings);
    };
}
