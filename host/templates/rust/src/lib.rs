//! `{{name}}`: a Gatehouse gadget. It greets, lists the services introduced
//! to its chat with the tools each grants, and, when ISSUES is introduced,
//! reads the issues (a read: answered at once).
//!
//! Build: `cargo build --release --target wasm32-wasip2`
//! Install: `gatehouse install target/wasm32-wasip2/release/{{crate}}.wasm --name {{name}}`

use gatehouse_gadget::{Gadget, Outcome};
use serde_json::json;

struct Starter;

impl Gadget for Starter {
    fn run(input: String) -> Result<String, String> {
        let mut lines = vec![format!("Hello from {{name}}. You said: {:?}", input.trim())];
        let keys = gatehouse_gadget::env();
        if keys.is_empty() {
            lines.push("Services introduced: none".to_string());
        }
        for key in &keys {
            let service = gatehouse_gadget::open(key).map_err(|e| e.to_string())?;
            let tools: Vec<String> = service.tools().into_iter().map(|t| t.name).collect();
            lines.push(format!("Service {key}: {}", tools.join(", ")));
        }
        if keys.iter().any(|k| k == "ISSUES") {
            let issues = gatehouse_gadget::open("ISSUES").map_err(|e| e.to_string())?;
            // A read answers `Done` at once; a write would answer `Pending`:
            // staged, nothing sent until a person approves it.
            match issues.call("listIssues", &json!({})) {
                Ok(Outcome::Done(answer)) => lines.push(format!("ISSUES answered: {answer}")),
                Ok(Outcome::Pending(p)) => lines.push(format!("staged as #{}", p.action_id)),
                Err(e) => lines.push(format!("listIssues failed: {e}")),
            }
        }
        Ok(lines.join("\n"))
    }
}

gatehouse_gadget::export!(Starter);
