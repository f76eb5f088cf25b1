//! `agent`: a scripted "agent" that makes sure an issue with a given title
//! exists and carries a label. It documents SPEC V1/V2 as much as it is a
//! test fixture: it is stateless and decides everything from what its reads
//! show, so how the kernel shows pending writes decides whether it writes
//! twice.
//!
//! Input: `ensure <TITLE> | <LABEL>` on the first line. Further lines are a
//! note from the kernel's harness when it resumes the agent (for example
//! `[gatehouse] resumed: applied #2 (issues:createIssue)`); the agent ignores
//! it and looks at the world again.
//!
//! One turn, on the service introduced as `ISSUES`:
//! 1. `listIssues`, and look for the issue titled TITLE (a real one, or a
//!    pending one a simulating gatekeeper overlays with a provisional id).
//! 2. Not there: `createIssue`. If the answer is
//!    - `pending` with `await-decision` (V2): stop, "waiting: ...";
//!    - `pending` with a provisional result (V1): use its id;
//!    - `done` (a naive harness that hides the pending write): list again;
//!      still not there, so "the create failed": create once more (at most
//!      two creates per turn), list again, else give up. Under a naive
//!      harness this is exactly the duplicate write V2 warns about.
//! 3. The issue has LABEL: "done: ...". Else `addLabel`: with
//!    `await-decision`, "waiting: ..."; otherwise "labelled: ...".

use gatehouse_gadget::{CallError, Gadget, Outcome, Service};
use serde_json::{Value, json};

const KEY: &str = "ISSUES";
const USAGE: &str = "usage: ensure <TITLE> | <LABEL>";
/// Creates allowed in one turn: the first, and one "retry" of a create the
/// agent believes failed.
const MAX_CREATES: usize = 2;

struct Agent;

impl Gadget for Agent {
    fn run(input: String) -> Result<String, String> {
        let first = input.lines().next().unwrap_or_default().trim();
        let (title, label) = first
            .strip_prefix("ensure ")
            .and_then(|rest| rest.rsplit_once('|'))
            .map(|(title, label)| (title.trim(), label.trim()))
            .filter(|(title, label)| !title.is_empty() && !label.is_empty())
            .ok_or_else(|| format!("{USAGE} (got {:?})", one_line(first)))?;
        let service = gatehouse_gadget::open(KEY).map_err(|e| describe("open", &e))?;
        ensure(&service, title, label)
    }
}

gatehouse_gadget::export!(Agent);

fn ensure(service: &Service, title: &str, label: &str) -> Result<String, String> {
    let issue = match find(service, title)? {
        Some(issue) => issue,
        None => match create(service, title)? {
            Created::Issue(issue) => issue,
            Created::Waiting(id) => {
                return Ok(format!("waiting: #{id} createIssue awaits a decision"));
            }
            Created::GaveUp => {
                return Ok(format!("gave up: could not find {title} after creating it"));
            }
        },
    };
    let id = issue
        .get("id")
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("the issue titled {title} has no numeric id"))?;
    let has_label = issue
        .get("labels")
        .and_then(Value::as_array)
        .is_some_and(|labels| labels.iter().any(|l| l == label));
    if has_label {
        return Ok(format!("done: issue #{id} has {label}"));
    }
    match call(service, "addLabel", json!({ "id": id, "label": label }))? {
        Outcome::Pending(p) if p.await_decision => Ok(format!(
            "waiting: #{} addLabel awaits a decision",
            p.action_id
        )),
        Outcome::Pending(_) | Outcome::Done(_) => Ok(format!("labelled: issue #{id} ({label})")),
    }
}

enum Created {
    /// The issue, real or provisional.
    Issue(Value),
    /// The create was staged as this action and must be decided first (V2).
    Waiting(u64),
    /// Created twice and still not in the list.
    GaveUp,
}

fn create(service: &Service, title: &str) -> Result<Created, String> {
    for _ in 0..MAX_CREATES {
        match call(service, "createIssue", json!({ "title": title }))? {
            Outcome::Pending(p) if p.await_decision => return Ok(Created::Waiting(p.action_id)),
            Outcome::Pending(p) => {
                // V1: the simulated result stands in for the issue.
                return p
                    .provisional
                    .filter(|issue| issue.get("id").is_some_and(Value::is_u64))
                    .map(Created::Issue)
                    .ok_or_else(|| {
                        format!(
                            "createIssue was staged as #{} without a provisional issue id",
                            p.action_id
                        )
                    });
            }
            // A naive harness: "done", yet the list may not show it.
            Outcome::Done(_) => {
                if let Some(issue) = find(service, title)? {
                    return Ok(Created::Issue(issue));
                }
            }
        }
    }
    Ok(Created::GaveUp)
}

/// The listed issue titled exactly `title`.
fn find(service: &Service, title: &str) -> Result<Option<Value>, String> {
    let listed = match call(service, "listIssues", json!({}))? {
        Outcome::Done(json) => json,
        Outcome::Pending(p) => {
            return Err(format!(
                "listIssues was staged as action #{} instead of answered as a read",
                p.action_id
            ));
        }
    };
    match listed {
        Value::Array(issues) => Ok(issues
            .into_iter()
            .find(|issue| issue.get("title").and_then(Value::as_str) == Some(title))),
        _ => Err("listIssues did not answer a JSON list".to_string()),
    }
}

fn call(service: &Service, tool: &str, args: Value) -> Result<Outcome, String> {
    service.call(tool, &args).map_err(|e| describe(tool, &e))
}

/// One line saying which call failed and why.
fn describe(what: &str, error: &CallError) -> String {
    let why = match error {
        CallError::UnknownKey { key, known } => format!(
            "no service {key} is introduced (introduced: {})",
            known.join(", ")
        ),
        CallError::NotGranted { key, tool, allowed } => format!(
            "{tool} is not granted for {key} (allowed: {})",
            allowed.join(", ")
        ),
        CallError::InvalidArgs(m) => format!("invalid arguments: {m}"),
        CallError::Refused(m) => format!("refused: {m}"),
        CallError::Service(m) => format!("service error: {m}"),
    };
    one_line(&format!("{what} failed: {why}"))
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
