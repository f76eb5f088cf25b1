//! SPEC P: apply at most once.

pub(crate) mod apply;
pub(crate) mod exactly_once;
