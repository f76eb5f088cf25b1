//! SPEC G: scoped approvals as signed grants.

pub(crate) mod workflows;
