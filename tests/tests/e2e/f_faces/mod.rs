//! SPEC F: gadget faces.

pub(crate) mod faces;
pub(crate) mod faces_mcp_app;
