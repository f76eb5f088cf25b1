//! SPEC B: blueprints.

pub(crate) mod blueprints;
