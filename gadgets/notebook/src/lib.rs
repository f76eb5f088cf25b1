//! `notebook`: a gadget that keeps notes in its chat's gadget storage, the
//! way a UI keeps what it needs across turns.
//!
//! Input is one JSON command; the answer is JSON, `{"ok": ...}` or
//! `{"error": "..."}` (a kernel refusal, as one line):
//! - `{"op": "save", "key": K, "text": T}`: store `T` under `K`;
//! - `{"op": "read", "key": K}`: the note, or `null`;
//! - `{"op": "list"}`: the keys;
//! - `{"op": "delete", "key": K}`;
//! - `{"op": "fill", "prefix": P, "count": N}`: store N notes `P0`, `P1`...
//!   and stop at the first refusal (how many were stored, and why not more);
//! - `{"op": "derive", "key": K, "service": S, "tool": T, "args": {...}}`:
//!   read a source through the service, then store a summary of what it
//!   answered under `K` (data derived from the source).
//!
//! Its face ("Notes") lists the notes the viewer may read and saves new
//! ones: `notes` answers `[{key, text}]`, `save` takes `{key, text}`. What
//! a viewer may read is the kernel's decision, never the page's.
//!
//! What it may not do: anything but through the kernel.

use gatehouse_gadget::face::{Face, Page};
use gatehouse_gadget::{CallError, Gadget, Outcome, storage};
use serde_json::{Value, json};

struct Notebook;

fn text(v: &Value, field: &str) -> Result<String, String> {
    v.get(field)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| format!("the command needs a string {field:?}"))
}

fn answer(r: Result<Value, CallError>) -> String {
    match r {
        Ok(v) => json!({ "ok": v }).to_string(),
        Err(e) => json!({ "error": e.to_string() }).to_string(),
    }
}

impl Gadget for Notebook {
    fn run(input: String) -> Result<String, String> {
        let cmd: Value =
            serde_json::from_str(&input).map_err(|e| format!("the input is not JSON: {e}"))?;
        let op = text(&cmd, "op")?;
        Ok(match op.as_str() {
            "save" => {
                let (key, body) = (text(&cmd, "key")?, text(&cmd, "text")?);
                answer(storage::put(&key, &body).map(|()| json!(key)))
            }
            "read" => {
                let key = text(&cmd, "key")?;
                answer(storage::get(&key).map(|v| json!(v)))
            }
            "list" => answer(storage::keys().map(|k| json!(k))),
            "delete" => {
                let key = text(&cmd, "key")?;
                answer(storage::delete(&key).map(|()| json!(key)))
            }
            "fill" => {
                let prefix = text(&cmd, "prefix")?;
                let count = cmd.get("count").and_then(Value::as_u64).unwrap_or(0);
                let mut stored = 0;
                let mut refusal = None;
                for i in 0..count {
                    match storage::put(&format!("{prefix}{i}"), "x") {
                        Ok(()) => stored += 1,
                        Err(e) => {
                            refusal = Some(e.to_string());
                            break;
                        }
                    }
                }
                json!({ "ok": stored, "error": refusal }).to_string()
            }
            "derive" => {
                let key = text(&cmd, "key")?;
                let service = gatehouse_gadget::open(&text(&cmd, "service")?);
                let read = service.and_then(|s| {
                    s.call(
                        &text(&cmd, "tool").unwrap_or_default(),
                        cmd.get("args").unwrap_or(&json!({})),
                    )
                });
                let summary = match read {
                    Ok(Outcome::Done(v)) => format!("summary of {}", v),
                    Ok(Outcome::Pending(_)) => {
                        return Err("the service call was an action, not a read".into());
                    }
                    Err(e) => return Ok(answer(Err(e))),
                };
                answer(storage::put(&key, &summary).map(|()| json!(key)))
            }
            other => return Err(format!("unknown op {other:?}")),
        })
    }
}

impl Face for Notebook {
    fn page() -> Page {
        Page {
            title: "Notes".into(),
            html: include_str!("notes.html").into(),
            functions: vec!["notes".into(), "save".into()],
        }
    }

    fn call(name: &str, args: Value) -> Result<Value, String> {
        match name {
            "notes" => {
                let keys = storage::keys().map_err(|e| e.to_string())?;
                let mut notes = Vec::new();
                for key in keys {
                    // A key listed a moment ago may be gone or hidden now.
                    if let Some(text) = storage::get(&key).map_err(|e| e.to_string())? {
                        notes.push(json!({ "key": key, "text": text }));
                    }
                }
                Ok(Value::Array(notes))
            }
            "save" => {
                let (key, body) = (text(&args, "key")?, text(&args, "text")?);
                storage::put(&key, &body).map_err(|e| e.to_string())?;
                Ok(json!({ "saved": key }))
            }
            other => Err(format!("the notes page has no function {other:?}")),
        }
    }
}

gatehouse_gadget::export!(Notebook, face);
