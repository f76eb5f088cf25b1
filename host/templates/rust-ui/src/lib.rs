//! `{{name}}`: a Gatehouse gadget with a face. It greets, lists the services
//! introduced to its chat with the tools each grants, and, when ISSUES is
//! introduced, reads the issues (a read: answered at once).
//!
//! Its face is `src/page.html`, shown beside its chat (in the inbox of
//! `gatehouse serve`, and in MCP hosts): the page calls `services` and
//! `issues` below, each call a turn of the person viewing the page, under
//! the same rules as `run`.
//!
//! Build: `cargo build --release --target wasm32-wasip2`
//! Install: `gatehouse install target/wasm32-wasip2/release/{{crate}}.wasm --name {{name}}`

use gatehouse_gadget::face::{Face, Page};
use gatehouse_gadget::{Gadget, Outcome};
use serde_json::{Value, json};

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

impl Face for Starter {
    /// The page is asked for outside any turn: it may not call the kernel.
    fn page() -> Page {
        Page {
            title: "{{name}}".into(),
            html: include_str!("page.html").into(),
            functions: vec!["services".into(), "issues".into()],
        }
    }

    fn call(name: &str, _args: Value) -> Result<Value, String> {
        match name {
            "services" => services(),
            "issues" => issues(),
            other => Err(format!("{{name}}'s face has no function {other:?}")),
        }
    }
}

/// `[{"key": "ISSUES", "tools": ["listIssues", ...]}, ...]`
fn services() -> Result<Value, String> {
    let mut all = Vec::new();
    for key in gatehouse_gadget::env() {
        let service = gatehouse_gadget::open(&key).map_err(|e| e.to_string())?;
        let tools: Vec<String> = service.tools().into_iter().map(|t| t.name).collect();
        all.push(json!({ "key": key, "tools": tools }));
    }
    Ok(Value::Array(all))
}

/// What ISSUES' `listIssues` answers (a read, so it runs at once).
fn issues() -> Result<Value, String> {
    let service = gatehouse_gadget::open("ISSUES").map_err(|e| e.to_string())?;
    match service
        .call("listIssues", &json!({}))
        .map_err(|e| format!("listIssues failed: {e}"))?
    {
        Outcome::Done(answer) => Ok(answer),
        Outcome::Pending(p) => Err(format!(
            "listIssues was staged as #{} instead of answered as a read",
            p.action_id
        )),
    }
}

gatehouse_gadget::export!(Starter, face);
