//! SPEC O: observations, the restricted-data latch, gadget storage.

pub(crate) mod lockdown;
pub(crate) mod storage;
