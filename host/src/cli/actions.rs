//! The actions' commands: what awaits a decision (`pending`, `show`), the
//! decisions (`approve`, `reject`, `revert`), the ledger (`log`) and the
//! auto-approval rules (`rules`). Words only: every decision and every
//! visibility rule is the kernel's (the overseer, the one authorization
//! rule); this module parses, asks and prints.

use super::{print_json, print_record, print_records};
use crate::inbox::Approval;
use crate::kernel::Kernel;
use crate::overseer::Decision;
use crate::prompt::{excerpt, inline};
use crate::store::{LedgerFilter, LedgerKind};
use anyhow::bail;
use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub(super) enum Command {
    /// List actions awaiting a decision, oldest first.
    Pending {
        #[arg(long)]
        chat: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Show one action as the approver sees it.
    Show {
        id: i64,
        #[arg(long)]
        json: bool,
    },
    /// Approve and apply actions, in the order given.
    Approve {
        #[arg(required = true)]
        ids: Vec<i64>,
        #[arg(long)]
        json: bool,
    },
    /// Reject actions: they are never sent.
    Reject {
        #[arg(required = true)]
        ids: Vec<i64>,
        #[arg(long)]
        json: bool,
    },
    /// Stage a revert of an applied action: a new action that undoes it
    /// (with the tool its gatekeeper declares for that), decided like any
    /// other and sent at most once.
    Revert {
        id: i64,
        #[arg(long)]
        json: bool,
    },
    /// The ledger: actions and observations.
    Log(LogArgs),
    /// Auto-approval rules (key two of two).
    #[command(subcommand)]
    Rules(RulesCmd),
}

#[derive(clap::Args, Debug)]
pub(super) struct LogArgs {
    #[arg(long)]
    chat: Option<String>,
    /// Only `action`, `observation` or `hook` entries.
    #[arg(long)]
    kind: Option<String>,
    /// A hook's entry and everything its turns wrote.
    #[arg(long, value_name = "ID")]
    hook: Option<i64>,
    /// Actions and workflow approval requests this person approved.
    #[arg(long)]
    approved_by: Option<String>,
    /// Calls that ran on a server's own read-only claim.
    #[arg(long)]
    server_claims: bool,
    /// Actions approved automatically.
    #[arg(long)]
    auto_approved: bool,
    /// What this gadget observed.
    #[arg(long)]
    observed_by: Option<String>,
    /// The observation set (SPEC S1): each read's sources and account.
    #[arg(long, conflicts_with = "kind")]
    observations: bool,
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand, Debug)]
pub(super) enum RulesCmd {
    /// Enable auto-approval for GATEKEEPER:TOOL (key two). Key one must hold
    /// too: a vetted gatekeeper, a non-destructive idempotent action.
    ///
    /// The rule is yours: it applies in the chats you own, or with --chat
    /// only in that chat (where you must be allowed to decide).
    Add {
        tag: String,
        #[arg(long)]
        chat: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// List your rules, and those scoped to chats you own.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Remove one of your rules (with --chat: the one for that chat).
    Remove {
        tag: String,
        #[arg(long)]
        chat: Option<String>,
    },
}

pub(super) async fn execute(kernel: &Kernel, cmd: Command, me: &str) -> anyhow::Result<bool> {
    match cmd {
        Command::Pending { chat, json } => pending(kernel, me, chat.as_deref(), json).await?,
        Command::Show { id, json } => show(kernel, me, id, json).await?,
        Command::Approve { ids, json } => return decide(kernel, &ids, me, json, true).await,
        Command::Reject { ids, json } => return decide(kernel, &ids, me, json, false).await,
        Command::Revert { id, json } => return revert(kernel, me, id, json).await,
        Command::Log(args) => log(kernel, me, args).await?,
        Command::Rules(cmd) => rules(kernel, me, cmd).await?,
    }
    Ok(true)
}

async fn pending(kernel: &Kernel, me: &str, chat: Option<&str>, json: bool) -> anyhow::Result<()> {
    let list = kernel.person(me).pending(chat).await?;
    print_record(&list, json, |list| {
        if list.is_empty() {
            outln!("nothing awaits a decision");
        }
        for a in list {
            outln!(
                "#{:<5} {:<12} {}:{}  {}",
                a.id,
                inline(&a.chat),
                inline(&a.gatekeeper),
                inline(&a.tool),
                excerpt(&a.args, 80)
            );
        }
    })
}

async fn show(kernel: &Kernel, me: &str, id: i64, json: bool) -> anyhow::Result<()> {
    let Some(shown) = kernel.person(me).shown(id).await? else {
        bail!(
            "no action #{id} that you may see (it may have been pruned); `gatehouse pending` lists open ones"
        );
    };
    if json {
        print_json(&shown.action)
    } else {
        out!("{}", shown.prompt);
        Ok(())
    }
}

async fn revert(kernel: &Kernel, me: &str, id: i64, json: bool) -> anyhow::Result<bool> {
    match kernel.person(me).revert(id).await? {
        Ok(r) => print_record(&r, json, |r| outln!("{}", r.line())).map(|()| true),
        Err(refusal) => {
            errln!("{}", crate::prompt::terminal_line(&refusal.to_string()));
            Ok(false)
        }
    }
}

/// Approve or reject `ids` in the order given; whether every one went
/// through. Each decision is printed as it is made (a refused one on
/// stderr), or all at the end as one `--json` list.
async fn decide(
    kernel: &Kernel,
    ids: &[i64],
    me: &str,
    json: bool,
    approve: bool,
) -> anyhow::Result<bool> {
    let mut all_ok = true;
    let mut decisions: Vec<Decision> = Vec::new();
    for &id in ids {
        let d = if approve {
            kernel.person(me).approve(id).await?
        } else {
            kernel.person(me).reject(id).await?
        };
        all_ok &= d.ok();
        if !json {
            if d.ok() {
                outln!("{}", d.line());
            } else {
                errln!("{}", d.line());
            }
        }
        decisions.push(d);
    }
    if json {
        print_json(&decisions)?;
    }
    Ok(all_ok)
}

async fn log(kernel: &Kernel, me: &str, args: LogArgs) -> anyhow::Result<()> {
    let kind = if args.observations {
        Some(LedgerKind::Observation)
    } else {
        match args.kind.as_deref().map(LedgerKind::from_word) {
            None => None,
            Some(Some(kind)) => Some(kind),
            Some(None) => bail!("--kind must be action, observation or hook"),
        }
    };
    let filter = LedgerFilter {
        chat: args.chat,
        kind,
        approved_by: args.approved_by,
        server_claims: args.server_claims,
        auto_approved: args.auto_approved,
        observed_by: args.observed_by,
        hook: args.hook,
        ..LedgerFilter::default()
    };
    if args.observations {
        let entries = kernel.person(me).ledger(filter).await?;
        return print_records(&entries, args.json, super::sharing::print_observation);
    }
    // Everything one person approved includes the workflow approval
    // requests they approved: records of their own (`kind` `request`).
    let entries = kernel.person(me).approvals(filter).await?;
    print_records(&entries, args.json, |e| match e {
        Approval::Action(e) => outln!("{}", crate::prompt::ledger_line(e)),
        Approval::Request(r) => outln!("{}", crate::prompt::approved_request_line(r)),
    })
}

async fn rules(kernel: &Kernel, me: &str, cmd: RulesCmd) -> anyhow::Result<()> {
    match cmd {
        RulesCmd::Add { tag, chat, json } => {
            let r = kernel.person(me).add_rule(&tag, chat.as_deref()).await?;
            print_record(&r, json, |r| rule_added(r, me))
        }
        RulesCmd::List { json } => {
            let rules = kernel.person(me).rules()?;
            print_record(&rules, json, |rules| {
                if rules.is_empty() {
                    outln!("no rules: every action waits for a person");
                }
                for r in rules {
                    outln!(
                        "{}  enabled by {}  {}",
                        inline(&r.tag),
                        inline(&r.person),
                        match &r.chat {
                            Some(c) => format!("in chat {}", inline(c)),
                            None => "in the chats they own".to_owned(),
                        }
                    );
                }
            })
        }
        RulesCmd::Remove { tag, chat } => {
            if !kernel.person(me).remove_rule(&tag, chat.as_deref())? {
                bail!("you have no rule for {tag:?} there; `gatehouse rules list` shows yours");
            }
            outln!("rule {tag} removed");
            Ok(())
        }
    }
}

fn rule_added(r: &crate::overseer::RuleReport, me: &str) {
    outln!(
        "rule {} enabled by {me} (key two), {}.",
        inline(&r.tag),
        match &r.chat {
            Some(c) => format!("in chat {}", inline(c)),
            None => "in the chats you own".to_owned(),
        }
    );
    match &r.missing {
        None => outln!(
            "key one holds: the gatekeeper is vetted and the tool is a non-destructive, idempotent action; matching actions are now approved automatically, in order"
        ),
        Some(m) => outln!("{m}"),
    }
    for d in &r.applied {
        outln!("{}", d.line());
    }
}
