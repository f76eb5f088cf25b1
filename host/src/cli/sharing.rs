//! The sharing commands' words: `share` and `unshare`, how `open` asks
//! once for other accounts, `collaborators`, blueprints (`export`,
//! `import`), and how refusals and observation sets are printed. The
//! decisions are the kernel's (`crate::sharing`, `crate::blueprint`); this
//! only talks to the person.

use super::{parse_setting, print_json};
use crate::kernel::Kernel;
use crate::prompt::inline;
use crate::sharing::{OpenOutcome, OpenRequest};
use crate::store::LedgerEntry;
use anyhow::{Context as _, bail};
use clap::Subcommand;
use std::collections::BTreeMap;
use std::io::BufRead as _;
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub(super) enum Command {
    /// Share a chat with a person, or create a share link. Owner only.
    Share {
        chat: String,
        /// The person to share with.
        #[arg(long, required_unless_present = "link")]
        with: Option<String>,
        /// Create a share link instead (printed once).
        #[arg(long, conflicts_with = "with")]
        link: bool,
        /// Let them decide too (approve and reject the chat's actions).
        #[arg(long, requires = "with")]
        may_decide: bool,
    },
    /// Remove a collaborator (and their observers), or revoke share links.
    Unshare {
        chat: String,
        #[arg(long, required_unless_present = "links")]
        with: Option<String>,
        /// Revoke every share link of the chat.
        #[arg(long, conflicts_with = "with")]
        links: bool,
    },
    /// Open a chat shared with you: every source it observed is re-checked
    /// with your own accounts. You are asked once to pick other accounts.
    Open {
        chat: String,
        /// A share link's token.
        #[arg(long)]
        link: Option<String>,
        /// GATEKEEPER=LABEL: the account to use there (default: your default).
        #[arg(long = "account", value_parser = parse_setting)]
        accounts: Vec<(String, String)>,
        #[arg(long)]
        json: bool,
    },
    /// A chat's collaborators and the accounts they observe it through.
    Collaborators {
        chat: String,
        #[arg(long)]
        json: bool,
    },
    /// Write a gadget's blueprint: its code and the services it needs, never
    /// history, data, credentials, owner or instance ids.
    Export {
        gadget: String,
        /// The chat whose introductions the gadget needs (default: the one it ran in).
        #[arg(long)]
        chat: Option<String>,
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
    },
    /// Install a blueprint for yourself (`--as`), in a new chat of yours,
    /// bound to gatekeepers you choose; your own accounts are used.
    Import {
        file: PathBuf,
        /// Install the gadget under this name (default: the blueprint's).
        #[arg(long)]
        name: Option<String>,
        /// The chat to create (default: the gadget's name).
        #[arg(long)]
        chat: Option<String>,
        /// KEY=GATEKEEPER: which gatekeeper serves a key (default: the one
        /// gatekeeper built from the same component).
        #[arg(long = "bind", value_parser = parse_setting)]
        bind: Vec<(String, String)>,
    },
}

pub(super) async fn execute(kernel: &Kernel, cmd: Command, me: &str) -> anyhow::Result<bool> {
    match cmd {
        Command::Share {
            chat,
            with,
            link,
            may_decide,
        } => share(kernel, &chat, with.filter(|_| !link), may_decide, me)?,
        Command::Unshare { chat, with, links } => {
            unshare(kernel, &chat, with.filter(|_| !links), me)?
        }
        Command::Open {
            chat,
            link,
            accounts,
            json,
        } => return open(kernel, &chat, me, link, accounts, json).await,
        Command::Collaborators { chat, json } => collaborators(kernel, &chat, me, json)?,
        Command::Export {
            gadget,
            chat,
            output,
        } => export(kernel, &gadget, chat.as_deref(), &output, me)?,
        Command::Import {
            file,
            name,
            chat,
            bind,
        } => import(kernel, &file, name.as_deref(), chat.as_deref(), bind, me)?,
    }
    Ok(true)
}

/// `share CHAT`: with a person (`with`), else a new share link.
fn share(
    kernel: &Kernel,
    chat: &str,
    with: Option<String>,
    may_decide: bool,
    me: &str,
) -> anyhow::Result<()> {
    let Some(with) = with else {
        let token = kernel.person(me).create_share_link(chat)?;
        outln!("share link for chat {chat} (shown once): {token}");
        outln!("open it with: gatehouse open {chat} --link {token} --as USER");
        return Ok(());
    };
    let decides = if may_decide {
        "; they may decide its actions"
    } else {
        "; they may see but not decide"
    };
    if kernel.person(me).share(chat, &with, may_decide)? {
        outln!(
            "shared chat {chat} with {with}{decides}. They see nothing until they open it: each open re-checks everything it observed with their own accounts"
        );
    } else {
        outln!("chat {chat} was already shared with {with}{decides}");
    }
    Ok(())
}

/// `unshare CHAT`: one person (`with`), else every share link.
fn unshare(kernel: &Kernel, chat: &str, with: Option<String>, me: &str) -> anyhow::Result<()> {
    let Some(with) = with else {
        let n = kernel.person(me).revoke_links(chat)?;
        outln!("revoked {n} share link(s) of chat {chat}");
        return Ok(());
    };
    if !kernel.person(me).unshare(chat, &with)? {
        bail!("{with} is not a collaborator of chat {chat:?}");
    }
    outln!("removed {with} from chat {chat}, with their observers");
    Ok(())
}

fn export(
    kernel: &Kernel,
    gadget: &str,
    chat: Option<&str>,
    output: &PathBuf,
    me: &str,
) -> anyhow::Result<()> {
    let bytes = kernel.person(me).export_blueprint(gadget, chat)?;
    std::fs::write(output, &bytes).with_context(|| format!("cannot write {}", output.display()))?;
    outln!(
        "wrote the blueprint of {gadget} to {} ({} KiB): code and service requirements only",
        output.display(),
        bytes.len().div_ceil(1024)
    );
    Ok(())
}

fn import(
    kernel: &Kernel,
    file: &PathBuf,
    name: Option<&str>,
    chat: Option<&str>,
    bind: Vec<(String, String)>,
    me: &str,
) -> anyhow::Result<()> {
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let bind = bindings(bind)?;
    let i = kernel
        .person(me)
        .import_blueprint(&bytes, name, chat, &bind, &|m| errln!("{m}"))?;
    outln!(
        "installed {} for {} in new chat {}",
        i.gadget,
        i.owner,
        i.chat
    );
    for b in &i.bound {
        match &b.account {
            Some(a) => outln!("  {} -> {} as {a}", b.key, b.gatekeeper),
            None => outln!(
                "  {} -> {} (no account of yours there yet: `gatehouse account connect {} {}`)",
                b.key,
                b.gatekeeper,
                i.owner,
                b.gatekeeper
            ),
        }
    }
    Ok(())
}

/// `open CHAT`: re-verify, ask once for other accounts if that could help
/// (unless the person already chose with `--account`), then admit or refuse
/// with one line per failing binding. Returns whether the chat was opened.
async fn open(
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
    let mut outcome = kernel.person(me).open_chat(chat, &request).await?;
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
        if ask_for_accounts(alternatives, &mut request)? {
            outcome = kernel.person(me).open_chat(chat, &request).await?;
        }
    }
    opened(outcome, chat, me, json)
}

/// Asks once per gatekeeper whether to use another of the person's
/// `alternatives` there, into `request`; whether any was chosen.
fn ask_for_accounts(
    alternatives: &BTreeMap<String, Vec<String>>,
    request: &mut OpenRequest,
) -> anyhow::Result<bool> {
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
            bail!(
                "{answer:?} is not one of your accounts at {gatekeeper}; choose from {}",
                labels.join(", ")
            );
        }
        request.accounts.insert(gatekeeper.clone(), answer);
        changed = true;
    }
    Ok(changed)
}

/// Prints how `open` ended; whether the chat was opened.
fn opened(outcome: OpenOutcome, chat: &str, me: &str, json: bool) -> anyhow::Result<bool> {
    match outcome {
        OpenOutcome::Owner => {
            if json {
                print_json(&serde_json::json!({"opened": chat, "as": "owner"}))?;
            } else {
                outln!("opened chat {chat} (you own it)");
            }
            Ok(true)
        }
        OpenOutcome::Admitted { observers, checked } => {
            if json {
                print_json(&serde_json::json!({
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
fn collaborators(kernel: &Kernel, chat: &str, me: &str, json: bool) -> anyhow::Result<()> {
    let people = kernel.person(me).collaborators(chat)?;
    let observers = kernel.person(me).observers(chat)?;
    if json {
        return print_json(&serde_json::json!({
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
pub(super) fn print_observation(e: &LedgerEntry) {
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
fn bindings(pairs: Vec<(String, String)>) -> anyhow::Result<BTreeMap<String, String>> {
    let mut map = BTreeMap::new();
    for (k, v) in pairs {
        if map.insert(k.clone(), v).is_some() {
            anyhow::bail!("--bind {k}=... is given twice; bind each key once");
        }
    }
    Ok(map)
}
