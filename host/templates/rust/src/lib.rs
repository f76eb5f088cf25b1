//! `{{name}}`: a Gatehouse gadget. It greets, lists the services introduced
//! to its chat with the tools each grants, and, when ISSUES is introduced,
//! reads the issues (a read: answered at once).
//!
//! Build: `cargo build --release --target wasm32-wasip2`
//! Install: `gatehouse install target/wasm32-wasip2/release/{{crate}}.wasm --name {{name}}`

wit_bindgen::generate!({ world: "gadget", path: "wit" });

use gatehouse::os::kernel::{self, CallError, Outcome};

struct Gadget;

impl exports::gatehouse::os::run::Guest for Gadget {
    fn run(input: String) -> Result<String, String> {
        let mut lines = vec![format!("Hello from {{name}}. You said: {:?}", input.trim())];
        let keys = kernel::env();
        if keys.is_empty() {
            lines.push("Services introduced: none".to_string());
        }
        for key in &keys {
            let service = kernel::open(key).map_err(|e| describe(&e))?;
            let tools: Vec<String> = service.tools().into_iter().map(|t| t.name).collect();
            lines.push(format!("Service {key}: {}", tools.join(", ")));
        }
        if keys.iter().any(|k| k == "ISSUES") {
            let issues = kernel::open("ISSUES").map_err(|e| describe(&e))?;
            match issues.call("listIssues", "{}") {
                Ok(Outcome::Done(json)) => lines.push(format!("ISSUES answered: {json}")),
                Ok(Outcome::Pending(p)) => lines.push(format!("staged as #{}", p.action_id)),
                Err(e) => lines.push(format!("listIssues failed: {}", describe(&e))),
            }
        }
        Ok(lines.join("\n"))
    }
}

export!(Gadget);

/// One line for a refused call.
fn describe(error: &CallError) -> String {
    match error {
        CallError::UnknownKey(e) => format!("unknown key {}", e.key),
        CallError::NotGranted(e) => format!("{} is not granted", e.tool),
        CallError::InvalidArgs(m) | CallError::Refused(m) | CallError::Service(m) => m.clone(),
    }
}
