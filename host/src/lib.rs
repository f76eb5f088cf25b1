//! Gatehouse: a host for sandboxed WebAssembly gadgets whose writes to the
//! outside world wait, durably, for a person's decision.
//!
//! One module per concept of the rules in `docs/rules.md`:
//! - [`principal`]: who is acting, and whose credential a call uses (C5);
//! - [`access`]: who may do what, the one authorization rule (W);
//! - `runtime`: engine, sandbox limits, compiled-component cache (X); the
//!   part an embedder may use is [`embed`];
//! - [`classify`]: read vs action, the one trust boundary (K);
//! - [`kernel`]: the call path: introductions, grants, reads, staging (C, A);
//!   [`turn`]: who is calling, from where, in which harness (C5, V);
//!   [`capability`]: the handles a surface holds to act as a person or as
//!   the operator;
//! - [`store`]: the durable action store and ledger (A, P, L), embedded
//!   SQLite, and the PostgreSQL schema a team's hosts share;
//!   [`moving`]: a home moved into that database (`gatehouse db`);
//! - [`overseer`]: decisions, the one send path, auto-approval (P, U);
//!   `flight`: one automatic send at a time per gatekeeper, across
//!   processes and hosts (U2, U3);
//! - [`idempotency`]: the key every send of an action carries (P6);
//! - [`revert`]: undoing an applied action with a new one (H2);
//! - [`expiry`]: how long an action may wait for a decision (H3);
//! - [`inbox`]: what a person sees, through the one rule (W, L);
//! - [`observations`]: what reads touched (O, S);
//! - [`storage`]: a gadget's key-value store per chat, its values kept
//!   with the sources they were derived from (O5);
//! - [`face`]: a gadget's page beside its chat, each call of it a turn of
//!   the person viewing it (F);
//! - [`grants`], [`workflow`]: scoped approvals as signed certificates (G);
//! - [`seal`]: secrets at rest, sealed with a key the operator holds;
//! - [`sharing`]: people, accounts, collaborators, observers (S, O3);
//! - [`prompt`]: the approval prompt, a security boundary (R);
//! - [`hooks`]: triggers bound to gadgets, webhooks and schedules (H1);
//! - [`notify`]: telling people that actions wait for them;
//! - [`blueprint`]: a gadget as a file another person installs (B);
//! - [`scaffold`]: starter projects for gadget authors (`gatehouse new`);
//! - [`cli`]: the `gatehouse` command; [`web`]: the web inbox and JSON API
//!   (`gatehouse serve`); [`mcp_serve`]: a chat's tools for any MCP client
//!   (`gatehouse mcp serve`); [`console`]: lines on a terminal that may be
//!   a closed pipe. The guided tour (`gatehouse demo`) and the loopback
//!   services it runs against are not part of this library: they are the
//!   crates `gatehouse-demo` and `gatehouse-services`.

#![deny(missing_docs)]

#[macro_use]
pub mod console;
pub mod access;
pub mod blueprint;
pub mod capability;
mod chats;
pub mod classify;
pub mod cli;
pub mod embed;
pub mod entropy;
pub mod expiry;
pub mod face;
pub(crate) mod flight;
pub mod grants;
pub mod guests;
pub mod harness;
pub mod home;
pub mod hooks;
pub mod idempotency;
pub mod inbox;
pub mod inspect;
pub mod kernel;
#[cfg(test)]
mod layering;
pub(crate) mod liveness;
pub mod manifest;
pub mod mcp_serve;
pub mod moving;
pub mod notify;
pub mod oauth;
pub mod observations;
pub mod overseer;
pub mod principal;
pub mod prompt;
pub mod push;
pub mod revert;
#[cfg(test)]
mod rules_cited;
pub(crate) mod runtime;
pub mod scaffold;
pub mod seal;
mod setup;
pub mod sharing;
pub mod signin;
pub mod storage;
pub mod store;
pub mod text;
pub mod turn;
pub mod web;
pub mod workflow;

pub use capability::{Operator, Person};
pub use home::Home;
pub use kernel::Kernel;
pub use principal::Principal;
pub use runtime::Limits;
pub use runtime::gadget::TurnReport;
pub use runtime::gatekeeper::Roots;
