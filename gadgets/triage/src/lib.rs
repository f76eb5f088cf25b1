//! `triage`: the example gadget. It reads the issues of the service
//! introduced as `ISSUES`, files a triage report and labels the first
//! untriaged issue (both actions are staged for a decision), and with
//! `poll ID...` reports where its actions stand.
//!
//! Run by a hook, its input is the kernel's event envelope (`{"hook",
//! "trigger", "event", ...}`): for an `issueOpened` delivery it reads the
//! opened issue and labels it `triaged` (staged, like every write); for any
//! other trigger (a schedule) it triages as usual.
//!
//! Its face is the triage board (`board`): the issues with a proposed label
//! each, a button that stages the label, and the writes it staged.

mod board;

use gatehouse_gadget::{ActionResult, Gadget, Outcome, Service};
use serde_json::{Value, json};

const KEY: &str = "ISSUES";

struct Triage;

impl Gadget for Triage {
    fn run(input: String) -> Result<String, String> {
        if let Ok(envelope) = serde_json::from_str::<Value>(&input)
            && envelope.get("hook").is_some()
        {
            return hooked(&envelope);
        }
        match input.trim().strip_prefix("poll") {
            Some(ids) => poll(ids),
            None => triage(),
        }
    }
}

gatehouse_gadget::export!(Triage, face);

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn triage() -> Result<String, String> {
    let keys = gatehouse_gadget::env();
    if !keys.iter().any(|k| k == KEY) {
        let known = if keys.is_empty() {
            "none".to_string()
        } else {
            keys.join(", ")
        };
        return Err(format!(
            "no {KEY} service is introduced to this chat (introduced: {known}); \
             run `introduce CHAT GATEKEEPER --as {KEY}` first"
        ));
    }
    let service = gatehouse_gadget::open(KEY).map_err(|e| e.to_string())?;

    let listed = match service
        .call("listIssues", &json!({}))
        .map_err(|e| format!("listIssues failed: {e}"))?
    {
        Outcome::Done(json) => json,
        Outcome::Pending(p) => {
            return Err(format!(
                "listIssues was staged as action #{} instead of answered as a read: {}",
                p.action_id,
                one_line(&p.message)
            ));
        }
    };
    let Value::Array(issues) = listed else {
        return Err("listIssues did not answer a JSON list".to_string());
    };

    let mut report = vec![format!(
        "Read {} issue{} from {KEY}.",
        issues.len(),
        if issues.len() == 1 { "" } else { "s" }
    )];

    let body: String = issues
        .iter()
        .map(|issue| {
            let labels = labels(issue);
            format!(
                "- #{} {}{}\n",
                issue_id(issue).map_or_else(|| "?".to_string(), |id| id.to_string()),
                issue.get("title").and_then(Value::as_str).unwrap_or(""),
                if labels.is_empty() {
                    String::new()
                } else {
                    format!(" [{}]", labels.join(", "))
                }
            )
        })
        .collect();
    let create = json!({
        "title": format!("Triage report: {} open issues", issues.len()),
        "body": if body.is_empty() { "No open issues.\n".to_string() } else { body },
    });
    report.push(format!(
        "createIssue: {}",
        action(&service, "createIssue", &create)
    ));

    let target = issues
        .iter()
        .find(|issue| !labels(issue).contains(&"triaged"))
        .or_else(|| issues.first());
    match target.map(|issue| (issue, issue_id(issue))) {
        None => report.push("addLabel: skipped, there are no issues".to_string()),
        Some((_, None)) => {
            report.push("addLabel: skipped, the issue has no numeric id".to_string())
        }
        Some((_, Some(id))) => {
            let args = json!({ "id": id, "label": "triaged" });
            report.push(format!(
                "addLabel triaged to #{id}: {}",
                action(&service, "addLabel", &args)
            ));
        }
    }
    Ok(report.join("\n"))
}

/// A turn started by a hook: label the issue an `issueOpened` event names,
/// after reading it; anything else triages.
fn hooked(envelope: &Value) -> Result<String, String> {
    let opened = envelope.get("trigger").and_then(Value::as_str) == Some("issueOpened");
    let id = envelope.pointer("/event/issue/id").and_then(Value::as_u64);
    let (true, Some(id)) = (opened, id) else {
        return triage();
    };
    let service = gatehouse_gadget::open(KEY).map_err(|e| e.to_string())?;
    let read = service
        .call("getIssue", &json!({ "id": id }))
        .map_err(|e| format!("getIssue #{id} failed: {e}"))?;
    let issue = match read {
        Outcome::Done(issue) => issue,
        Outcome::Pending(p) => {
            return Err(format!(
                "getIssue was staged as action #{} instead of answered as a read",
                p.action_id
            ));
        }
    };
    if labels(&issue).contains(&"triaged") {
        return Ok(format!("issue #{id} is already triaged"));
    }
    let args = json!({ "id": id, "label": "triaged" });
    Ok(format!(
        "addLabel triaged to #{id}: {}",
        action(&service, "addLabel", &args)
    ))
}

fn issue_id(issue: &Value) -> Option<u64> {
    issue.get("id").and_then(Value::as_u64)
}

fn labels(issue: &Value) -> Vec<&str> {
    issue
        .get("labels")
        .and_then(Value::as_array)
        .map(|labels| labels.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Calls an action and describes its outcome in one line.
fn action(service: &Service, tool: &str, args: &Value) -> String {
    match service.call(tool, args) {
        Ok(Outcome::Pending(p)) => format!("#{} pending: {}", p.action_id, one_line(&p.message)),
        Ok(Outcome::Done(json)) => format!("done: {json}"),
        Err(e) => format!("err: {e}"),
    }
}

fn poll(ids: &str) -> Result<String, String> {
    let ids = ids
        .split([' ', ',', '\t', '\n'])
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.trim_start_matches('#')
                .parse::<u64>()
                .map_err(|_| format!("not an action id: {s:?}; usage: poll ID [ID...]"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if ids.is_empty() {
        return Err("usage: poll ID [ID...]".to_string());
    }
    let lines: Vec<String> = ids
        .into_iter()
        .map(|id| match gatehouse_gadget::action_result(id) {
            Ok(ActionResult::Pending) => format!("#{id} pending"),
            Ok(ActionResult::Rejected(m)) => format!("#{id} rejected: {}", one_line(&m)),
            Ok(ActionResult::Expired(m)) => format!("#{id} expired: {}", one_line(&m)),
            Ok(ActionResult::Failed { message, retryable }) => format!(
                "#{id} failed ({}): {}",
                if retryable {
                    "retryable"
                } else {
                    "not retryable"
                },
                one_line(&message)
            ),
            Ok(ActionResult::Applied(json)) => format!("#{id} applied: {json}"),
            Err(e) => format!("#{id} error: {e}"),
        })
        .collect();
    Ok(lines.join("\n"))
}
