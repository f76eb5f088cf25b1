//! `issues-sim`: the `issues` gatekeeper (the same tracker, the same six
//! tools with the same annotations and schemas, the same requests) that can
//! also *simulate* (SPEC V1). Its manifest says `simulates: true`, so a gadget
//! that stages an action gets a provisional result instead of being told to
//! wait, and its reads show the chat's pending actions as if they had
//! happened:
//!
//! - `simulate(createIssue)` predicts the issue the tracker will create, with
//!   `"provisional": true`; `simulate(addLabel)` and `simulate(removeLabel)`
//!   predict the relabelled issue.
//!   Nothing is sent but a `GET /issues`. Other tools: no prediction.
//! - `listIssues` and `getIssue` overlay the pending actions the kernel passes
//!   in `invocation.pending` (oldest first): each pending `createIssue` adds
//!   its predicted issue, each pending `addLabel` adds its label and each
//!   pending `removeLabel` (a revert) removes it, and every issue so changed
//!   is marked `"pending": true`.
//!
//! The id rule (the tracker's ids start at 1, increase and are never reused):
//! the k-th pending `createIssue` (k = 0, 1, ...) is predicted to get id
//! `highest id the service lists now + 1 + k`, and a new one being simulated
//! gets `highest + 1 + (number of pending createIssue actions)`. It is a
//! prediction: an issue created elsewhere before these are applied, or a
//! deleted issue that had the highest id, makes it wrong.

use gatehouse_gatekeeper::http::base_url;
use gatehouse_gatekeeper::manifest::Manifest;
use gatehouse_gatekeeper::text::kind;
use gatehouse_gatekeeper::{
    Args, Gatekeeper, Invocation, ObserverCheck, ObserverVerdict, Output, Staged, ToolError,
};
use issues_tracker::{is_write, issue_id, required, text_arg};
use serde_json::{Map, Value, json};

struct IssuesSim;

impl Gatekeeper for IssuesSim {
    fn describe(settings: &[(String, String)]) -> Result<Manifest, ToolError> {
        Ok(issues_tracker::manifest(true, settings))
    }

    fn call(invocation: Invocation) -> Result<Output, ToolError> {
        let pending = &invocation.pending;
        issues_tracker::call(
            &invocation,
            |base| Ok(Value::Array(overlay(list(base)?, pending).issues)),
            |base, id| {
                // Only pending writes need the whole list (for the id rule).
                if pending.iter().any(|s| is_write(&s.tool)) {
                    overlay(list(base)?, pending)
                        .issues
                        .into_iter()
                        .find(|issue| id_of(issue) == Some(id))
                        .ok_or_else(|| {
                            ToolError::UnknownOutcome(format!(
                                "issue #{id} not found, neither at the service nor among \
                                 this chat's pending actions"
                            ))
                        })
                } else {
                    issues_tracker::fetch_issue(base, id)
                }
            },
        )
    }

    fn simulate(invocation: Invocation) -> Option<Value> {
        if !is_write(&invocation.tool) {
            return None;
        }
        let args = Args::parse(&invocation.args).ok()?;
        let service = list(&base_url(&invocation.settings).ok()?).ok()?;
        predict(
            &invocation.tool,
            args.as_map(),
            service,
            &invocation.pending,
        )
    }

    fn check_observer(check: ObserverCheck) -> ObserverVerdict {
        ObserverVerdict::deny(issues_tracker::check_access(check))
    }

    // One access check covers everything (`access-check`): no prediction,
    // the SDK's default.
}

gatehouse_gatekeeper::export!(IssuesSim);

// ----- simulation: pure functions over the service's issues -----

/// The tracker as the chat will see it once its pending actions are applied.
struct World {
    issues: Vec<Value>,
    /// The id the next created issue is predicted to get.
    next_id: u64,
}

/// Overlays `pending` (oldest first) on the service's `issues`: a pending
/// `createIssue` appends its predicted issue (ids per the crate's id rule),
/// a pending `addLabel` adds its label; changed issues get `"pending": true`.
fn overlay(mut issues: Vec<Value>, pending: &[Staged]) -> World {
    let highest = issues.iter().filter_map(id_of).max().unwrap_or(0);
    let mut next_id = highest.saturating_add(1);
    for staged in pending {
        // The kernel stages only JSON objects; anything else reads as `{}`.
        let args = Args::parse(&staged.args).unwrap_or_default().into_map();
        match staged.tool.as_str() {
            "createIssue" => {
                let text = |name| args.get(name).and_then(Value::as_str).unwrap_or_default();
                issues.push(json!({
                    "id": next_id, "title": text("title"), "body": text("body"),
                    "labels": [], "pending": true,
                }));
                next_id = next_id.saturating_add(1);
            }
            tool @ ("addLabel" | "removeLabel") => {
                let (Ok(id), Ok(label)) = (issue_id(&args), required(&args, "label")) else {
                    continue;
                };
                if let Some(issue) = issues.iter_mut().find(|i| id_of(i) == Some(id))
                    && relabel(issue, tool, &label)
                    && let Some(fields) = issue.as_object_mut()
                {
                    fields.insert("pending".into(), Value::Bool(true));
                }
            }
            _ => {}
        }
    }
    World { issues, next_id }
}

/// The predicted result of the action `tool`, or `None` when it cannot be
/// predicted (another tool, bad arguments, an issue that will not exist).
fn predict(
    tool: &str,
    args: &Map<String, Value>,
    service: Vec<Value>,
    pending: &[Staged],
) -> Option<Value> {
    let world = overlay(service, pending);
    match tool {
        "createIssue" => Some(json!({
            "id": world.next_id,
            "title": required(args, "title").ok()?,
            "body": text_arg(args, "body", true).ok()?.unwrap_or_default(),
            "labels": [],
            "provisional": true,
        })),
        "addLabel" | "removeLabel" => {
            let id = issue_id(args).ok()?;
            let label = required(args, "label").ok()?;
            let mut issue = world.issues.into_iter().find(|i| id_of(i) == Some(id))?;
            relabel(&mut issue, tool, &label);
            let fields = issue.as_object_mut()?;
            fields.remove("pending");
            fields.insert("provisional".into(), Value::Bool(true));
            Some(issue)
        }
        _ => None,
    }
}

fn id_of(issue: &Value) -> Option<u64> {
    issue.get("id").and_then(Value::as_u64)
}

/// Applies `addLabel` or `removeLabel` of `label`; whether the issue
/// changed.
fn relabel(issue: &mut Value, tool: &str, label: &str) -> bool {
    if tool == "removeLabel" {
        return remove_label(issue, label);
    }
    add_label(issue, label)
}

/// Removes `label` if the issue has it; whether the issue changed.
fn remove_label(issue: &mut Value, label: &str) -> bool {
    match issue.get_mut("labels") {
        Some(Value::Array(labels)) if labels.iter().any(|l| l == label) => {
            labels.retain(|l| l != label);
            true
        }
        _ => false,
    }
}

/// Adds `label` unless the issue has it; whether the issue changed.
fn add_label(issue: &mut Value, label: &str) -> bool {
    let Some(fields) = issue.as_object_mut() else {
        return false;
    };
    match fields.entry("labels").or_insert_with(|| json!([])) {
        Value::Array(labels) if !labels.iter().any(|l| l == label) => {
            labels.push(Value::String(label.to_string()));
            true
        }
        _ => false,
    }
}

// ----- requests -----

/// `GET /issues`: the service's issues.
fn list(base: &str) -> Result<Vec<Value>, ToolError> {
    match issues_tracker::fetch_list(base)? {
        Value::Array(issues) => Ok(issues),
        other => Err(ToolError::UnknownOutcome(format!(
            "GET {base}/issues: expected a JSON list of issues, got {}",
            kind(&other)
        ))),
    }
}

#[cfg(test)]
mod sim_tests {
    use super::*;

    fn staged(tool: &str, args: Value) -> Staged {
        Staged {
            action_id: 0,
            tool: tool.to_string(),
            args: args.to_string(),
        }
    }

    fn object(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    /// Issues 1 and 3 at the service (2 was deleted).
    fn service() -> Vec<Value> {
        vec![
            json!({"id": 1, "title": "Crash", "body": "", "labels": ["bug"]}),
            json!({"id": 3, "title": "Dark mode", "body": "", "labels": []}),
        ]
    }

    #[test]
    fn pending_creates_get_the_next_ids_in_order() {
        let pending = [
            staged("createIssue", json!({"title": "A"})),
            staged("addLabel", json!({"id": 4, "label": "x"})),
            staged("createIssue", json!({"title": "B", "body": "b"})),
        ];
        let world = overlay(service(), &pending);
        assert_eq!(world.next_id, 6);
        let ids: Vec<_> = world.issues.iter().filter_map(id_of).collect();
        assert_eq!(ids, [1, 3, 4, 5]);
        assert_eq!(
            world.issues[2],
            json!({"id": 4, "title": "A", "body": "", "labels": ["x"], "pending": true})
        );
        assert_eq!(world.issues[3]["body"], "b");
        assert_eq!(world.issues[0].get("pending"), None, "untouched");

        let create = object(json!({"title": "C"}));
        assert_eq!(
            predict("createIssue", &create, service(), &pending),
            Some(json!({"id": 6, "title": "C", "body": "", "labels": [], "provisional": true}))
        );
        assert_eq!(
            predict("createIssue", &create, Vec::new(), &[]).map(|v| v["id"].clone()),
            Some(json!(1)),
            "an empty tracker starts at 1"
        );
    }

    #[test]
    fn labels_overlay_only_when_they_change_something() {
        let pending = [
            staged("addLabel", json!({"id": 1, "label": "bug"})),
            staged("addLabel", json!({"id": "3", "label": "ui"})),
            staged("addLabel", json!({"id": 99, "label": "ui"})),
            staged("addLabel", "not an object".into()),
        ];
        let world = overlay(service(), &pending);
        assert_eq!(world.issues[0].get("pending"), None);
        assert_eq!(world.issues[1]["labels"], json!(["ui"]));
        assert_eq!(world.issues[1]["pending"], true);
        assert_eq!(world.issues.len(), 2);
    }

    #[test]
    fn a_pending_remove_label_takes_the_label_away() {
        let pending = [
            staged("addLabel", json!({"id": 3, "label": "ui"})),
            staged("removeLabel", json!({"id": 1, "label": "bug"})),
            staged("removeLabel", json!({"id": 3, "label": "absent"})),
        ];
        let world = overlay(service(), &pending);
        assert_eq!(world.issues[0]["labels"], json!([]));
        assert_eq!(world.issues[0]["pending"], true);
        assert_eq!(world.issues[1]["labels"], json!(["ui"]));
        let args = object(json!({"id": 3, "label": "ui"}));
        assert_eq!(
            predict("removeLabel", &args, service(), &pending).map(|v| v["labels"].clone()),
            Some(json!([]))
        );
    }

    #[test]
    fn add_label_predicts_the_labelled_issue() {
        let pending = [staged("createIssue", json!({"title": "New"}))];
        let args = object(json!({"id": 4, "label": "p1"}));
        assert_eq!(
            predict("addLabel", &args, service(), &pending),
            Some(
                json!({"id": 4, "title": "New", "body": "", "labels": ["p1"], "provisional": true})
            )
        );
        let args = object(json!({"id": 1, "label": "p1"}));
        assert_eq!(
            predict("addLabel", &args, service(), &[]).map(|v| v["labels"].clone()),
            Some(json!(["bug", "p1"]))
        );
        let missing = object(json!({"id": 2, "label": "p1"}));
        assert_eq!(predict("addLabel", &missing, service(), &pending), None);
        let no_title = object(json!({"body": "x"}));
        assert_eq!(predict("createIssue", &no_title, service(), &[]), None);
        assert_eq!(predict("searchIssues", &Map::new(), service(), &[]), None);
    }
}
