//! Gatehouse: a host for sandboxed WebAssembly gadgets whose writes to the
//! outside world wait, durably, for a person's decision.
//!
//! One module per concept of SPEC.md:
//! - [`runtime`]: engine, sandbox limits, compiled-component cache (X);
//! - [`classify`]: read vs action, the one trust boundary (K);
//! - [`kernel`]: the call path: introductions, grants, reads, staging (C, A);
//! - [`store`]: the durable action store and ledger (A, P, L);
//! - [`overseer`]: decisions and at-most-once apply (P);
//! - [`observations`]: what reads touched (O, S);
//! - [`grants`], [`workflow`]: scoped approvals as signed certificates (G);
//! - [`sharing`]: people, accounts, collaborators, observers (S, O3);
//! - [`prompt`]: the approval prompt, a security boundary (R);
//! - [`blueprint`]: a gadget as a file another person installs (B);
//! - [`scaffold`]: starter projects for gadget authors (`gatehouse new`);
//! - [`cli`]: the `gatehouse` command; [`web`]: the web inbox and JSON API
//!   (`gatehouse serve`); [`demo`]: the guided tour.

#[macro_use]
mod console;

pub mod blueprint;
pub mod classify;
pub mod cli;
pub mod demo;
pub mod grants;
pub mod guests;
pub mod harness;
pub mod home;
pub mod kernel;
pub mod observations;
pub mod overseer;
pub mod prompt;
pub mod runtime;
pub mod scaffold;
pub mod sharing;
pub mod store;
pub mod web;
pub mod workflow;

pub use home::Home;
pub use kernel::Kernel;
pub use runtime::Limits;
