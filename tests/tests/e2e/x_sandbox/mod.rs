//! SPEC X: the sandbox, what a component may be, gadgets in every language.

pub(crate) mod install;
pub(crate) mod languages;
pub(crate) mod sandbox;
