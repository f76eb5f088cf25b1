//! SPEC R: the approval prompt and everything attacker text reaches.

pub(crate) mod hostile_input;
