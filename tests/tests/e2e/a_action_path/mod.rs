//! SPEC A: the action path (reads at once and recorded, writes staged and answered pending).

pub(crate) mod actions;
