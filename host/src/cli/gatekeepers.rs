//! The gatekeepers' commands: adding one from a component, its trust tier,
//! asking it for its tools again, listing them, and the secrets the kernel
//! injects as their credentials. Words only: what a tool is (read or
//! action) is `classify`'s, and the secrets never leave the kernel.

use super::{parse_setting, print_records, read_component};
use crate::kernel::Kernel;
use crate::prompt::inline;
use crate::store::{GatekeeperRecord, Trust};
use anyhow::{Context as _, bail};
use clap::Subcommand;
use std::io::Read as _;
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub(super) enum Command {
    /// Add or change gatekeepers.
    #[command(subcommand)]
    Gatekeeper(GatekeeperCmd),
    /// List gatekeepers with their trust tier and tools.
    Gatekeepers {
        #[arg(long)]
        json: bool,
    },
    /// Store secrets for gatekeepers to use (value read from stdin).
    #[command(subcommand)]
    Secret(SecretCmd),
}

#[derive(Subcommand, Debug)]
pub(super) enum GatekeeperCmd {
    /// Add a gatekeeper instance from a component.
    Add(AddArgs),
    /// Change a gatekeeper's trust tier (takes effect at the next call).
    Trust { name: String, tier: String },
    /// Ask a gatekeeper for its tools again (an MCP server's may change)
    /// and print what changed; pending actions of a changed tool are held.
    Refresh { name: String },
}

#[derive(clap::Args, Debug)]
pub(super) struct AddArgs {
    file: PathBuf,
    #[arg(long)]
    name: String,
    /// byo (you brought it) or vetted (an operator vouches for it).
    #[arg(long, default_value = "byo")]
    trust: String,
    /// A host it may reach, as host:port (either scheme on that port) or
    /// host (HTTPS on 443 only); repeat for more.
    #[arg(long = "allow-host")]
    allow_host: Vec<String>,
    /// Name of a stored secret the kernel injects as its credential.
    #[arg(long)]
    secret: Option<String>,
    /// The allowed host credentials are sent to (required with several
    /// --allow-host and a --secret; never sent to the others).
    #[arg(long = "credential-host", value_name = "HOST")]
    credential_host: Option<String>,
    /// A KEY=VALUE setting passed to every call; repeat for more.
    #[arg(long = "set", value_parser = parse_setting)]
    set: Vec<(String, String)>,
}

#[derive(Subcommand, Debug)]
pub(super) enum SecretCmd {
    /// Store a secret; the value is read from stdin (one line), or, with
    /// --oauth, obtained by signing in at the service (an operator's OAuth
    /// credential, refreshed by the host before it expires).
    Set {
        name: String,
        /// Sign in at the service at --url by OAuth (authorization code
        /// with PKCE) instead of reading a value.
        #[arg(long, requires = "url")]
        oauth: bool,
        /// With --oauth: the service's address (an MCP endpoint), where
        /// its authorization server is discovered.
        #[arg(long, requires = "oauth")]
        url: Option<String>,
        /// With --oauth: a client registered at the authorization server
        /// (default: register one, where the server allows it).
        #[arg(long = "client-id", requires = "oauth")]
        client_id: Option<String>,
        /// With --oauth: the scopes to ask for (default: those the
        /// service lists).
        #[arg(long, requires = "oauth")]
        scope: Option<String>,
        /// With --oauth: how long to wait for the sign-in to come back.
        #[arg(long, requires = "oauth", default_value = "10m", value_parser = humantime::parse_duration)]
        timeout: std::time::Duration,
    },
}

pub(super) async fn execute(kernel: &Kernel, cmd: Command) -> anyhow::Result<bool> {
    match cmd {
        Command::Gatekeeper(GatekeeperCmd::Add(args)) => add(kernel, args).await?,
        Command::Gatekeeper(GatekeeperCmd::Refresh { name }) => refresh(kernel, &name).await?,
        Command::Gatekeeper(GatekeeperCmd::Trust { name, tier }) => {
            let t: Trust = tier.parse()?;
            kernel.operator().set_trust(&name, t)?;
            outln!("gatekeeper {name} is now {t}");
        }
        Command::Gatekeepers { json } => {
            print_records(&kernel.blocking(|k| k.gatekeepers()).await?, json, listed)?
        }
        Command::Secret(SecretCmd::Set {
            name,
            oauth: true,
            url: Some(url),
            client_id,
            scope,
            timeout,
        }) => {
            let grant = super::people::sign_in_at_loopback(
                |redirect| async move {
                    kernel
                        .operator()
                        .begin_operator_oauth(&url, &redirect, client_id, scope)
                        .await
                },
                timeout,
            )
            .await?;
            kernel.operator().connect_operator_oauth(&name, &grant)?;
            outln!(
                "stored secret {name}: an OAuth credential for {}, refreshed by the host before it expires",
                grant.resource
            );
        }
        Command::Secret(SecretCmd::Set { name, .. }) => secret(kernel, &name)?,
    }
    Ok(true)
}

async fn add(kernel: &Kernel, args: AddArgs) -> anyhow::Result<()> {
    let trust: Trust = args.trust.parse()?;
    let bytes = read_component(&args.file)?;
    let g = kernel
        .operator()
        .add_gatekeeper_with(
            &args.name,
            &bytes,
            trust,
            args.allow_host,
            args.credential_host,
            args.secret,
            args.set,
            &|m| errln!("{m}"),
        )
        .await?;
    // Tool names are the component's words: shown through the sanitiser.
    let tools: Vec<_> = g.manifest.tools.iter().map(|t| inline(&t.name)).collect();
    outln!(
        "added gatekeeper {} ({}, trust {}); tools: {}",
        g.name,
        &g.digest[..12],
        g.trust,
        tools.join(", ")
    );
    Ok(())
}

async fn refresh(kernel: &Kernel, name: &str) -> anyhow::Result<()> {
    let (trust, changes) = kernel.operator().refresh_gatekeeper(name).await?;
    if changes.is_empty() {
        outln!("gatekeeper {name}: no tool changed");
        return Ok(());
    }
    for c in &changes {
        outln!("{}", crate::prompt::terminal_line(&c.line(trust)));
    }
    outln!(
        "gatekeeper {name}: {} change(s) stored; pending actions of a changed tool are held for a person when they are approved",
        changes.len()
    );
    Ok(())
}

/// One gatekeeper of `gatekeepers`: its hosts and credential, then a line
/// per tool with what the kernel classifies it as.
fn listed(g: &std::sync::Arc<GatekeeperRecord>) {
    outln!(
        "{}  trust={}  hosts={}{}",
        g.name,
        g.trust,
        g.hosts.join(","),
        match (g.credential_host(), g.secret.is_some()) {
            (Some(h), true) => format!("  credential to {h} only"),
            (None, true) => "  credential to no host (name one)".to_owned(),
            _ => String::new(),
        }
    );
    for t in &g.manifest.tools {
        let c = crate::classify::classify(&t.annotations, g.trust);
        outln!(
            "  {:<24} {:?}{}",
            inline(&t.name),
            c.kind,
            if c.auto_approvable {
                " (auto-approvable with a rule)"
            } else {
                ""
            }
        );
    }
}

fn secret(kernel: &Kernel, name: &str) -> anyhow::Result<()> {
    let mut value = String::new();
    std::io::stdin()
        .read_to_string(&mut value)
        .context("cannot read the secret from stdin")?;
    let value = value.trim_end_matches(['\n', '\r']);
    if value.is_empty() {
        bail!(
            "the secret is empty; pipe its value on stdin, e.g. `printf %s \"$TOKEN\" | gatehouse secret set {name}`"
        );
    }
    kernel.operator().put_secret(name, value)?;
    outln!("stored secret {name}");
    Ok(())
}
