//! SPEC K: classification, one trust boundary.

pub(crate) mod classification;
