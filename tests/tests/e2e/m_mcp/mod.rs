//! SPEC M: MCP in both directions.

pub(crate) mod mcp;
pub(crate) mod mcp_serve;
