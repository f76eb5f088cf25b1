//! Loopback stand-ins for the outside world: a small issue tracker
//! ([`tracker`]), a read-only data warehouse ([`warehouse`]), a cloud that
//! launches and tags instances ([`cloud`]) and a scripted language model
//! behind an OpenAI-compatible API ([`model`]). The `gatehouse demo` command and
//! the end-to-end tests drive the bundled gatekeepers against them.
//!
//! They are deliberately not fakes inside the host: each is a real HTTP
//! server on `127.0.0.1`, reached through the same sockets and HTTP stack a
//! gatekeeper would use against a real service, so a test that passes
//! against one has exercised the real outbound path. They share one
//! skeleton ([`service`]: the server thread, the request log tests wait on,
//! a bounded shutdown) and import nothing of the host: the host library does
//! not depend on this crate, and the kernel never relies on it to decide.

pub mod cloud;
pub mod model;
pub mod service;
pub mod tracker;
pub mod warehouse;

pub use cloud::Cloud;
pub use model::Model;
pub use service::{Received, Service};
pub use tracker::Tracker;
pub use warehouse::Warehouse;
