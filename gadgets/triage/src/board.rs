//! The triage board: the gadget's face. It shows the issues of `ISSUES`
//! with a proposed label each, and the label writes it staged with where
//! each stands; a click on "Label" stages `addLabel` (answered `pending`,
//! nothing sent until a person approves in the inbox).
//!
//! The board remembers the writes it staged in gadget storage (`pending`,
//! a JSON list), so a later view can show where each stands; that value
//! carries the chat's observation set like any the gadget stores.

use gatehouse_gadget::face::{Face, Page};
use gatehouse_gadget::{ActionResult, Outcome, storage};
use serde_json::{Value, json};

use crate::{KEY, Triage, issue_id, labels, one_line};

/// The storage key of the writes the board staged.
const STAGED: &str = "board-staged";
/// How many staged writes the board keeps track of.
const KEEP: usize = 50;

impl Face for Triage {
    fn page() -> Page {
        Page {
            title: "Triage board".into(),
            html: include_str!("board.html").into(),
            functions: vec!["board".into(), "label".into()],
        }
    }

    fn call(name: &str, args: Value) -> Result<Value, String> {
        match name {
            "board" => board(),
            "label" => label(&args),
            other => Err(format!("the board has no function {other:?}")),
        }
    }
}

/// A label for an issue, from words of its title.
fn propose(title: &str) -> &'static str {
    let t = title.to_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| t.contains(w));
    if has(&[
        "crash", "error", "fail", "broken", "bug", "wrong", "blank", "drops",
    ]) {
        "bug"
    } else if has(&["doc", "readme", "typo"]) {
        "docs"
    } else if has(&["add", "support", "feature", "allow", "could"]) {
        "enhancement"
    } else {
        "triaged"
    }
}

fn board() -> Result<Value, String> {
    let service = gatehouse_gadget::open(KEY).map_err(|e| e.to_string())?;
    let listed = match service
        .call("listIssues", &json!({}))
        .map_err(|e| format!("listIssues failed: {e}"))?
    {
        Outcome::Done(v) => v,
        Outcome::Pending(p) => {
            return Err(format!(
                "listIssues was staged as #{} instead of answered as a read",
                p.action_id
            ));
        }
    };
    let issues: Vec<Value> = listed
        .as_array()
        .map(|all| {
            all.iter()
                .map(|issue| {
                    let title = issue.get("title").and_then(Value::as_str).unwrap_or("");
                    json!({
                        "id": issue_id(issue),
                        "title": title,
                        "labels": labels(issue),
                        "proposed": propose(title),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let staged: Vec<Value> = remembered()?
        .into_iter()
        .map(|w| {
            let id = w.get("action").and_then(Value::as_u64).unwrap_or(0);
            let status = match gatehouse_gadget::action_result(id) {
                Ok(ActionResult::Pending) => "pending".to_string(),
                Ok(ActionResult::Applied(_)) => "applied".to_string(),
                Ok(ActionResult::Rejected(_)) => "rejected".to_string(),
                Ok(ActionResult::Expired(_)) => "expired".to_string(),
                Ok(ActionResult::Failed { message, .. }) => {
                    format!("failed: {}", one_line(&message))
                }
                Err(e) => format!("unknown: {e}"),
            };
            json!({ "action": id, "issue": w.get("issue"), "label": w.get("label"), "status": status })
        })
        .collect();
    Ok(json!({ "issues": issues, "staged": staged }))
}

fn label(args: &Value) -> Result<Value, String> {
    let id = args
        .get("id")
        .and_then(Value::as_u64)
        .ok_or("label needs the issue's numeric id")?;
    let name = args
        .get("label")
        .and_then(Value::as_str)
        .filter(|l| !l.is_empty() && l.len() <= 50)
        .ok_or("label needs a label of 1 to 50 characters")?;
    let service = gatehouse_gadget::open(KEY).map_err(|e| e.to_string())?;
    match service
        .call("addLabel", &json!({ "id": id, "label": name }))
        .map_err(|e| e.to_string())?
    {
        Outcome::Pending(p) => {
            let mut kept = remembered()?;
            kept.push(json!({ "action": p.action_id, "issue": id, "label": name }));
            let from = kept.len().saturating_sub(KEEP);
            let kept = Value::Array(kept.split_off(from));
            storage::put(STAGED, &kept.to_string()).map_err(|e| e.to_string())?;
            Ok(json!({ "pending": p.action_id, "message": one_line(&p.message) }))
        }
        Outcome::Done(v) => Ok(json!({ "done": v })),
    }
}

/// The writes the board staged, as stored (none when nothing is stored
/// or the viewer may not read it).
fn remembered() -> Result<Vec<Value>, String> {
    let stored = storage::get(STAGED).map_err(|e| e.to_string())?;
    Ok(stored
        .and_then(|s| serde_json::from_str::<Value>(&s).ok())
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default())
}
