//! SPEC W: who may do what, one rule on every surface.

pub(crate) mod model;
pub(crate) mod side_doors;
