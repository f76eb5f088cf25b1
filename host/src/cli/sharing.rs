//! The sharing commands' words: how `open` asks once for other accounts,
//! how refusals and observation sets are printed. The decisions are the
//! kernel's (`crate::sharing`); this only talks to the person.

use crate::kernel::Kernel;
use crate::prompt::inline;
use crate::sharing::{OpenOutcome, OpenRequest};
use crate::store::LedgerEntry;
use std::collections::BTreeMap;
use std::io::BufRead as _;

/// `open CHAT`: re-verify, ask once for other accounts if that could help
/// (unless the person already chose with `--account`), then admit or refuse
/// with one line per failing binding. Returns whether the chat was opened.
pub async fn open(
    kernel: &Kernel,
    chat: &str,
    me: &str,
    link: Option<String>,
    accounts: Vec<(String, String)>,
    json: bool,
) -> anyhow::Result<bool> {
    let chose = !accounts.is_empty();
    let mut request = OpenRequest {
        link,
        accounts: accounts.into_iter().collect(),
    };
    let mut outcome = kernel.open_chat(chat, me, &request).await?;
    if let OpenOutcome::Refused {
        failures,
        alternatives,
    } = &outcome
        && !chose
        && !alternatives.is_empty()
    {
        errln!("{me} cannot open chat {chat:?} with these accounts:");
        for f in failures {
            errln!("  {}", f.line());
        }
        let mut changed = false;
        for (gatekeeper, labels) in alternatives {
            err!(
                "Use another account at {gatekeeper}? [{}] (empty: no): ",
                labels.join(", ")
            );
            let answer = read_answer()?;
            if answer.is_empty() {
                continue;
            }
            if !labels.contains(&answer) {
                anyhow::bail!(
                    "{answer:?} is not one of your accounts at {gatekeeper}; choose from {}",
                    labels.join(", ")
                );
            }
            request.accounts.insert(gatekeeper.clone(), answer);
            changed = true;
        }
        if changed {
            outcome = kernel.open_chat(chat, me, &request).await?;
        }
    }
    match outcome {
        OpenOutcome::Owner => {
            if json {
                super::print_json(&serde_json::json!({"opened": chat, "as": "owner"}))?;
            } else {
                outln!("opened chat {chat} (you own it)");
            }
            Ok(true)
        }
        OpenOutcome::Admitted { observers, checked } => {
            if json {
                super::print_json(&serde_json::json!({
                    "opened": chat, "as": "collaborator", "checked": checked, "observers": observers
                }))?;
            } else {
                outln!(
                    "opened chat {chat} as {me}: {checked} observed source(s) re-verified with your accounts"
                );
                for o in observers {
                    outln!(
                        "  observing through {} as {}",
                        o.gatekeeper,
                        o.account.as_deref().unwrap_or("(no account)")
                    );
                }
            }
            Ok(true)
        }
        OpenOutcome::Refused { failures, .. } => {
            errln!(
                "error: {me} may not open chat {chat:?}: {} source(s) failed re-verification:",
                failures.len()
            );
            for f in &failures {
                errln!("  {}", f.line());
            }
            Ok(false)
        }
    }
}

/// One line from stdin, trimmed; empty at end of input.
fn read_answer() -> anyhow::Result<String> {
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(line.trim().to_owned())
}

/// `collaborators CHAT`.
pub fn collaborators(kernel: &Kernel, chat: &str, me: &str, json: bool) -> anyhow::Result<()> {
    let people = kernel.collaborators(chat, me)?;
    let observers = kernel.observers(chat, me)?;
    if json {
        return super::print_json(&serde_json::json!({
            "collaborators": people, "observers": observers
        }));
    }
    if people.is_empty() {
        outln!("chat {chat} is not shared");
    }
    for p in people {
        let bound: Vec<String> = observers
            .iter()
            .filter(|o| o.user == p.user)
            .map(|o| {
                format!(
                    "{} as {}",
                    o.gatekeeper,
                    o.account.as_deref().unwrap_or("(no account)")
                )
            })
            .collect();
        outln!(
            "{}  added by {}  {}",
            p.user,
            p.added_by,
            if bound.is_empty() {
                "(has not opened it)".to_owned()
            } else {
                format!("observes: {}", bound.join(", "))
            }
        );
    }
    Ok(())
}

/// One observation of `log --observations`: what was read, through which
/// account, and every source it touched.
pub fn print_observation(e: &LedgerEntry) {
    outln!(
        "#{:<5} {:<12} {}:{}  by {}  account {}",
        e.id,
        inline(&e.chat),
        inline(e.gatekeeper.as_deref().unwrap_or("")),
        inline(e.tool.as_deref().unwrap_or("")),
        inline(&e.caller),
        e.account
            .as_deref()
            .map(inline)
            .unwrap_or_else(|| "(gatekeeper's own)".into())
    );
    let sources = e
        .sources
        .as_ref()
        .and_then(|s| s.as_array())
        .cloned()
        .unwrap_or_default();
    for s in sources {
        let text = |k: &str| s.get(k).and_then(|v| v.as_str()).unwrap_or("");
        outln!(
            "         source {} ({}){}",
            inline(text("id")),
            inline(text("title")),
            if s.get("restricted").and_then(|v| v.as_bool()) == Some(true) {
                "  owner-only"
            } else {
                ""
            }
        );
    }
}

/// `--bind KEY=GATEKEEPER` pairs as a map; a key given twice is an error.
pub fn bindings(pairs: Vec<(String, String)>) -> anyhow::Result<BTreeMap<String, String>> {
    let mut map = BTreeMap::new();
    for (k, v) in pairs {
        if map.insert(k.clone(), v).is_some() {
            anyhow::bail!("--bind {k}=... is given twice; bind each key once");
        }
    }
    Ok(map)
}
