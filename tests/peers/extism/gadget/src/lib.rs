//! The gadget's side: `run` hands its input to the host function
//! `gatekeeper_call` and returns what came back.
use extism_pdk::*;

#[host_fn]
extern "ExtismHost" {
    fn gatekeeper_call(input: String) -> String;
}

#[plugin_fn]
pub fn run(input: String) -> FnResult<String> {
    // SAFETY: the host defines `gatekeeper_call` with this signature.
    Ok(unsafe { gatekeeper_call(input)? })
}
