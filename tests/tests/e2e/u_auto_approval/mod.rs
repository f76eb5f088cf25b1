//! SPEC U: auto-approval, two keys.

pub(crate) mod auto_approval;
