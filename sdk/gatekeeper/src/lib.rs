//! Write a Gatehouse gatekeeper in Rust.
//!
//! A gatekeeper is a sandboxed WebAssembly component that fronts one
//! service. It describes its tools ([`manifest`]), runs a call
//! ([`Gatekeeper::call`]) and reaches the service only through the
//! kernel's egress ([`http`]): the kernel lets a request through only to
//! the hosts the operator allowed and adds the credential itself, so the
//! component never holds a secret. The kernel decides what is a read and
//! what waits for a person, from the hints the manifest declares; a tool
//! that is not annotated read-only is staged, and only sent once approved.
//!
//! ```no_run
//! use gatehouse_gatekeeper::http::{Request, base_url};
//! use gatehouse_gatekeeper::manifest::{Manifest, tool};
//! use gatehouse_gatekeeper::{Args, Gatekeeper, Invocation, Output, Source, ToolError};
//! use serde_json::json;
//!
//! struct Notes;
//!
//! impl Gatekeeper for Notes {
//!     fn describe(_settings: &[(String, String)]) -> Result<Manifest, ToolError> {
//!         Ok(Manifest::builder()
//!             .tool(tool("listNotes", "List the notes.", json!({"type": "object"})).read_only())
//!             .build())
//!     }
//!
//!     fn call(invocation: Invocation) -> Result<Output, ToolError> {
//!         let _args = Args::parse(&invocation.args)?;
//!         let base = base_url(&invocation.settings).map_err(ToolError::Refused)?;
//!         match invocation.tool.as_str() {
//!             "listNotes" => {
//!                 let reply = Request::get(format!("{base}/notes")).send()?;
//!                 let notes = reply.json().map_err(ToolError::UnknownOutcome)?;
//!                 Ok(Output::read(notes, Source::public("notes", "All notes")))
//!             }
//!             other => Err(ToolError::unknown_tool(other, "listNotes")),
//!         }
//!     }
//! }
//!
//! gatehouse_gatekeeper::export!(Notes);
//! ```
//!
//! Build with `cargo build --release --target wasm32-wasip2` (the crate must
//! be a `cdylib`) and add the `.wasm` with `gatehouse gatekeeper add`.
//!
//! What this crate owns: the bindings of the contract (`wit/gatehouse.wit`,
//! `gatehouse:os@0.3.0`, world `gatekeeper`, generated once here), the
//! builders and the HTTP client. What it may not do: add policy. Its
//! defaults are the safe side (no simulation, observers refused, no source
//! prediction), and every decision stays the kernel's.

#![deny(missing_docs)]

// The generated code names its runtime through this crate, so that a
// gatekeeper depends on `gatehouse-gatekeeper` alone.
extern crate self as gatehouse_gatekeeper;
#[doc(hidden)]
pub use wit_bindgen;

mod args;
pub mod http;
pub mod manifest;
mod output;
pub mod text;

pub use args::Args;
pub use bindings::exports::gatehouse::os::tool::{
    Denial, Invocation, ObserverCheck, ObserverVerdict, Output, Source, Staged, ToolError,
};
pub use manifest::Manifest;

/// The bindings generated from `wit/gatehouse.wit` (world `gatekeeper`),
/// for what the typed layer does not cover.
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "gatekeeper",
        path: "wit",
        pub_export_macro: true,
        default_bindings_module: "gatehouse_gatekeeper::bindings",
        runtime_path: "gatehouse_gatekeeper::wit_bindgen::rt",
    });
}

/// A gatekeeper. Only [`describe`](Gatekeeper::describe) and
/// [`call`](Gatekeeper::call) are required; every other method defaults
/// to the safe side.
pub trait Gatekeeper {
    /// What the gatekeeper offers, for the instance configured with
    /// `settings` (the operator's `--set KEY=VALUE` pairs, plus
    /// `allowed-hosts`). Called at `gatekeeper add` and `gatekeeper
    /// refresh`; an error refuses the add with its message.
    fn describe(settings: &[(String, String)]) -> Result<Manifest, ToolError>;

    /// Runs one tool: a read at once, an action only once a person
    /// approved it. A failure must say whether it provably did not take
    /// effect (`refused`, which the kernel may retry) or may have
    /// (`unknown-outcome`, which it never will); [`http::HttpError`]
    /// converts to the right one.
    fn call(invocation: Invocation) -> Result<Output, ToolError>;

    /// Predicts an action's result without sending anything; only for a
    /// manifest that [`simulates`](manifest::ManifestBuilder::simulates).
    /// Default: no prediction, so a gadget is told to await the decision.
    fn simulate(invocation: Invocation) -> Option<serde_json::Value> {
        let _ = invocation;
        None
    }

    /// May this account observe these sources? Default: no, every source
    /// is denied (the manifest's default strategy is `refuse` too).
    fn check_observer(check: ObserverCheck) -> ObserverVerdict {
        ObserverVerdict::deny(Denial::all(
            check.sources,
            "observers",
            "this gatekeeper admits no observers",
        ))
    }

    /// The sources a read would touch, named without touching the service.
    /// Default: cannot tell (the kernel then refuses such a read in a chat
    /// with collaborators it must check).
    fn predict_sources(invocation: Invocation) -> Vec<Source> {
        let _ = invocation;
        Vec::new()
    }
}

impl<T: Gatekeeper> bindings::exports::gatehouse::os::tool::Guest for T {
    fn describe(settings: Vec<(String, String)>) -> Result<Manifest, ToolError> {
        <T as Gatekeeper>::describe(&settings)
    }

    fn call(invocation: Invocation) -> Result<Output, ToolError> {
        <T as Gatekeeper>::call(invocation)
    }

    fn simulate(invocation: Invocation) -> Option<String> {
        <T as Gatekeeper>::simulate(invocation).map(|v| v.to_string())
    }

    fn check_observer(check: ObserverCheck) -> ObserverVerdict {
        <T as Gatekeeper>::check_observer(check)
    }

    fn predict_sources(invocation: Invocation) -> Vec<Source> {
        <T as Gatekeeper>::predict_sources(invocation)
    }
}

/// Exports a type that implements [`Gatekeeper`] as the component's
/// `tool` interface. Call it once, at the top level of the crate.
#[macro_export]
macro_rules! export {
    ($ty:ident) => {
        $crate::bindings::export!($ty with_types_in $crate::bindings);
    };
}
