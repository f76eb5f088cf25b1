//! SPEC C: capabilities only by introduction, credentials the kernel holds (secrets, OAuth accounts).

pub(crate) mod caps;
pub(crate) mod introductions;
pub(crate) mod oauth;
pub(crate) mod secrets;
