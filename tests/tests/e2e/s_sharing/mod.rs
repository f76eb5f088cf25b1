//! SPEC S: sharing and observers.

pub(crate) mod sharing;
