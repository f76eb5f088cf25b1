//! SPEC V: pending work shown honestly, to people and to a model.

pub(crate) mod assistant;
pub(crate) mod pending_visibility;
