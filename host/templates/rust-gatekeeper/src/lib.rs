//! `{{name}}`: a Gatehouse gatekeeper. It fronts one HTTP service, the one
//! the operator names with `--set base-url=URL` or, failing that, the first
//! `--allow-host`. It offers one read, `listItems` (`GET /items`), and no
//! write yet: docs/writing-a-gatekeeper.md shows how to add one.
//!
//! Build: `cargo build --release --target wasm32-wasip2`
//! Add: `gatehouse gatekeeper add target/wasm32-wasip2/release/{{crate}}.wasm --name {{name}} --allow-host HOST:PORT`

use gatehouse_gatekeeper::http::{HttpError, Request, Response, base_url};
use gatehouse_gatekeeper::manifest::{Manifest, tool};
use gatehouse_gatekeeper::{Args, Gatekeeper, Invocation, Output, Source, ToolError};
use serde_json::{Value, json};

struct Starter;

impl Gatekeeper for Starter {
    /// What this gatekeeper offers. A tool is answered at once only when it
    /// is annotated read-only; any other tool is an action: the kernel
    /// stages it and sends nothing until a person approves.
    fn describe(_settings: &[(String, String)]) -> Result<Manifest, ToolError> {
        let manifest = Manifest::builder().tool(
            tool(
                "listItems",
                "List every item.",
                json!({"type": "object", "properties": {}, "additionalProperties": false}),
            )
            .read_only(),
        );
        // Tools: add more here.
        Ok(manifest.build())
    }

    fn call(invocation: Invocation) -> Result<Output, ToolError> {
        let args = Args::parse(&invocation.args)?;
        let base = base_url(&invocation.settings).map_err(ToolError::Refused)?;
        match invocation.tool.as_str() {
            "listItems" => {
                args.only(&[])?;
                let items = json_reply(Request::get(format!("{base}/items")).send())?;
                Ok(Output::read(items, Source::public("items", "All items")))
            }
            // Calls: add more here.
            other => {
                let offered = Starter::describe(&invocation.settings)?.tools;
                let names: Vec<String> = offered.into_iter().map(|t| t.name).collect();
                Err(ToolError::unknown_tool(other, &names.join(", ")))
            }
        }
    }
}

gatehouse_gatekeeper::export!(Starter);

/// The reply's JSON, or the `tool-error` the kernel needs: a request that
/// never left, or a 401/403, provably changed nothing (`refused`); anything
/// else may have taken effect (`unknown-outcome`).
fn json_reply(reply: Result<Response, HttpError>) -> Result<Value, ToolError> {
    let reply = reply.map_err(HttpError::into_tool_error)?;
    match reply.status {
        200..=299 => reply.json().map_err(ToolError::UnknownOutcome),
        401 | 403 => Err(ToolError::Refused(format!(
            "the service refused the request (HTTP {})",
            reply.status
        ))),
        status => Err(ToolError::UnknownOutcome(format!(
            "the service answered HTTP {status}"
        ))),
    }
}
