//! The gatekeeper's side: `echo` answers with its input, as the `rogue`
//! gatekeeper's `echo` tool does in Gatehouse's benchmarks.
use extism_pdk::*;

#[plugin_fn]
pub fn echo(input: String) -> FnResult<String> {
    Ok(input)
}
