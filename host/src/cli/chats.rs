//! The chats' and gadgets' commands: installing gadgets, creating chats
//! and changing their settings, introducing a gatekeeper into one, running
//! a turn (`run`) or an agent (`agent`, `runs`). Words only: what a gadget
//! may reach and what waits for a decision are the kernel's.

use super::{print_records, read_component};
use crate::kernel::{Harness, Kernel};
use crate::prompt::{inline, terminal_block, terminal_line};
use anyhow::Context as _;
use clap::Subcommand;
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub(super) enum Command {
    /// Install a gadget component (validated and compiled once).
    Install {
        file: PathBuf,
        /// Name to install under (default: the file name without .wasm).
        #[arg(long)]
        name: Option<String>,
    },
    /// List installed gadgets.
    Gadgets {
        #[arg(long)]
        json: bool,
    },
    /// Create chats.
    #[command(subcommand)]
    Chat(ChatCmd),
    /// List chats.
    Chats {
        #[arg(long)]
        json: bool,
    },
    /// Introduce a gatekeeper into a chat under a key, optionally granting only some tools.
    Introduce {
        chat: String,
        gatekeeper: String,
        /// The key gadgets see, like ISSUES.
        #[arg(long, value_name = "KEY")]
        key: String,
        /// Comma-separated tools to grant (default: all).
        #[arg(long, value_delimiter = ',')]
        tools: Option<Vec<String>>,
    },
    /// Run one turn of a gadget in a chat.
    Run {
        gadget: String,
        #[arg(long)]
        chat: String,
        /// Input for the gadget.
        input: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Run a gadget as an agent: a turn that gets an action awaiting a
    /// decision ends, and the run resumes when every awaited action is applied.
    Agent {
        gadget: String,
        #[arg(long)]
        chat: String,
        task: String,
        /// Hide pending writes from the gadget (a demonstration of why agents write twice).
        #[arg(long)]
        naive: bool,
        #[arg(long)]
        json: bool,
    },
    /// Agent runs and where they stand.
    Runs {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub(super) enum ChatCmd {
    /// Create a chat owned by you.
    New { name: String },
    /// Change a chat's settings (its owner only).
    Set {
        name: String,
        /// How long an action may wait for a decision before it expires
        /// and is never sent, like 90s, 30m, 2h or 7d (default 7d).
        #[arg(long, value_name = "DURATION", value_parser = parse_expiry)]
        expire_after: std::time::Duration,
    },
}

fn parse_expiry(s: &str) -> Result<std::time::Duration, String> {
    crate::expiry::parse(s).map_err(|e| format!("{e:#}"))
}

pub(super) async fn execute(kernel: &Kernel, cmd: Command, me: &str) -> anyhow::Result<bool> {
    match cmd {
        Command::Install { file, name } => install(kernel, &file, name)?,
        Command::Gadgets { json } => {
            print_records(&kernel.blocking(|k| k.gadgets()).await?, json, |g| {
                outln!("{}  {}", g.name, &g.digest[..12])
            })?
        }
        Command::Chat(cmd) => chat(kernel, cmd, me).await?,
        Command::Chats { json } => chats(kernel, me, json).await?,
        Command::Introduce {
            chat,
            gatekeeper,
            key,
            tools,
        } => {
            let i = kernel
                .person(me)
                .introduce(&chat, &gatekeeper, &key, tools)?;
            outln!(
                "introduced {} into {} as {}{}",
                i.gatekeeper,
                i.chat,
                i.key,
                i.tools
                    .map(|t| format!(" (tools: {})", t.join(", ")))
                    .unwrap_or_default()
            );
        }
        Command::Run {
            gadget,
            chat,
            input,
            json,
        } => return run(kernel, me, &gadget, &chat, input.as_deref(), json).await,
        Command::Agent {
            gadget,
            chat,
            task,
            naive,
            json,
        } => {
            let harness = if naive {
                Harness::Naive
            } else {
                Harness::Honest
            };
            return agent(kernel, me, (&gadget, &chat, &task), harness, json).await;
        }
        Command::Runs { json } => runs(kernel, me, json).await?,
    }
    Ok(true)
}

fn install(kernel: &Kernel, file: &PathBuf, name: Option<String>) -> anyhow::Result<()> {
    let bytes = read_component(file)?;
    let name = match name {
        Some(n) => n,
        None => file
            .file_stem()
            .and_then(|s| s.to_str())
            .context("cannot derive a name from the file; pass --name")?
            .to_owned(),
    };
    let g = kernel
        .operator()
        .install(&name, &bytes, &|m| errln!("{m}"))?;
    outln!("installed gadget {} ({})", g.name, &g.digest[..12]);
    Ok(())
}

async fn chat(kernel: &Kernel, cmd: ChatCmd, me: &str) -> anyhow::Result<()> {
    match cmd {
        ChatCmd::New { name } => {
            kernel.person(me).new_chat(&name)?;
            outln!("created chat {name} (owner {me})");
        }
        ChatCmd::Set { name, expire_after } => {
            kernel.person(me).set_expiry(&name, expire_after).await?;
            outln!(
                "chat {}: an action now waits at most {} for a decision; a pending action older than that expires and is never sent",
                inline(&name),
                crate::expiry::describe(expire_after)
            );
        }
    }
    Ok(())
}

async fn chats(kernel: &Kernel, me: &str, json: bool) -> anyhow::Result<()> {
    print_records(&kernel.person(me).chats().await?, json, |c| {
        outln!(
            "{}  owner={}  pending={}{}",
            inline(&c.name),
            inline(&c.owner),
            c.pending,
            if c.latched {
                "  LOCKED DOWN (read owner-only data)"
            } else {
                ""
            }
        )
    })
}

async fn run(
    kernel: &Kernel,
    me: &str,
    gadget: &str,
    chat: &str,
    input: Option<&str>,
    json: bool,
) -> anyhow::Result<bool> {
    let report = kernel
        .person(me)
        .run(gadget, chat, input.unwrap_or(""))
        .await?;
    if json {
        super::print_json(&report)?;
        return Ok(report.output.is_ok());
    }
    // Everything the gadget wrote is attacker text (R2 for the
    // terminal): hidden characters visible, look-alike lines marked.
    if !report.stdout.is_empty() {
        err!("{}", terminal_block(&report.stdout));
    }
    if !report.stderr.is_empty() {
        err!("{}", terminal_block(&report.stderr));
    }
    match report.output {
        Ok(out) => outln!("{}", terminal_block(&out)),
        Err(e) => {
            errln!("error: {}", terminal_line(&e));
            return Ok(false);
        }
    }
    Ok(true)
}

/// `agent`: the run's turn, and what it now waits for; whether the turn
/// ended without an error.
async fn agent(
    kernel: &Kernel,
    me: &str,
    (gadget, chat, task): (&str, &str, &str),
    harness: Harness,
    json: bool,
) -> anyhow::Result<bool> {
    let r = kernel.person(me).agent(gadget, chat, task, harness).await?;
    super::print_record(&r, json, |r| {
        match &r.turn.output {
            Ok(o) => outln!("{}", terminal_block(o)),
            Err(e) => errln!("error: {}", terminal_line(e)),
        }
        if !r.awaited.is_empty() {
            let ids: Vec<_> = r.awaited.iter().map(|i| format!("#{i}")).collect();
            outln!(
                "run {} waits for a decision on {}; it resumes when they are applied",
                r.run,
                ids.join(", ")
            );
        }
    })?;
    Ok(r.turn.output.is_ok())
}

async fn runs(kernel: &Kernel, me: &str, json: bool) -> anyhow::Result<()> {
    print_records(&kernel.person(me).agent_runs().await?, json, |r| {
        outln!(
            "run {}  {} in {}  {}  turns={}  {}",
            r.id,
            r.gadget,
            r.chat,
            r.state,
            r.turns,
            crate::prompt::excerpt(r.last_output.as_deref().unwrap_or(""), 100)
        )
    })
}
