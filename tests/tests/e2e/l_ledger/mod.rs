//! SPEC L: the ledger and audit queries.

pub(crate) mod audit;
