//! SPEC H: hooks, revert, expiry, and the notices that tell people an action waits.

pub(crate) mod expiry;
pub(crate) mod hooks;
pub(crate) mod notices;
pub(crate) mod push;
pub(crate) mod revert;
