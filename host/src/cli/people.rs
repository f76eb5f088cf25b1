//! The people's commands: adding a person, their settings (where notices
//! go), listing them, their own accounts at a gatekeeper's service, and the
//! operator's bindings of OpenID Connect identities to them (`user bind`).
//! Words only: who may change whose settings is the kernel's rule, and a
//! credential is read from stdin straight into the kernel, never printed.

use super::print_records;
use crate::kernel::Kernel;
use anyhow::{Context as _, bail};
use clap::Subcommand;
use std::io::Read as _;

#[derive(Subcommand, Debug)]
pub(super) enum Command {
    /// People: add someone who can own, share and open chats.
    #[command(subcommand)]
    User(UserCmd),
    /// List people.
    Users {
        #[arg(long)]
        json: bool,
    },
    /// A person's own accounts at a gatekeeper's service.
    #[command(subcommand)]
    Account(AccountCmd),
}

#[derive(Subcommand, Debug)]
pub(super) enum UserCmd {
    /// Add a person.
    Add { name: String },
    /// Change a person's settings (yourself only).
    Set {
        name: String,
        /// Where `serve` tells you that actions and approval requests wait
        /// for you: a Slack-compatible webhook at a public address, over
        /// https (private addresses, and http to loopback, only where the
        /// operator set GATEHOUSE_NOTIFY_ALLOW_PRIVATE=1).
        #[arg(long, value_name = "URL", conflicts_with = "no_notify")]
        notify_url: Option<String>,
        /// Stop notices.
        #[arg(long)]
        no_notify: bool,
    },
    /// Let an identity at an OpenID Connect provider sign in as NAME in
    /// the web inbox (the refusal page of an unbound identity names both).
    Bind {
        name: String,
        /// The identity's subject (`sub`) at the issuer.
        #[arg(long, value_name = "SUB")]
        oidc_subject: String,
        /// The issuer URL, exactly as the refusal page names it.
        #[arg(long, value_name = "URL")]
        issuer: String,
    },
    /// Remove a binding made with `user bind`.
    Unbind {
        name: String,
        #[arg(long, value_name = "SUB")]
        oidc_subject: String,
        #[arg(long, value_name = "URL")]
        issuer: String,
    },
    /// List every identity binding.
    Bindings {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub(super) enum AccountCmd {
    /// Connect USER's account at GATEKEEPER; the credential is read from
    /// stdin, or, with --oauth, obtained by signing in at the service's
    /// authorization server in a browser.
    Connect {
        user: String,
        gatekeeper: String,
        /// A label for the account (default: the person's name).
        #[arg(long, alias = "label")]
        name: Option<String>,
        /// Make it the person's default account at that gatekeeper.
        #[arg(long)]
        default: bool,
        /// Connect by OAuth (authorization code + PKCE): discover the
        /// service's authorization server from the gatekeeper's url, print
        /// the URL to open, and wait for the redirect on this machine.
        #[arg(long)]
        oauth: bool,
        /// With --oauth: a client registered at the authorization server
        /// (redirect URI http://127.0.0.1/callback, any port), instead of
        /// dynamic client registration.
        #[arg(long, requires = "oauth")]
        client_id: Option<String>,
        /// With --oauth: the scopes to ask for (default: those the
        /// service's metadata lists).
        #[arg(long, requires = "oauth")]
        scope: Option<String>,
        /// With --oauth: how long to wait for the person to come back.
        #[arg(long, requires = "oauth", default_value = "10m", value_parser = humantime::parse_duration)]
        timeout: std::time::Duration,
    },
    /// List accounts (never their credentials).
    List {
        #[arg(long)]
        json: bool,
    },
}

pub(super) async fn execute(kernel: &Kernel, cmd: Command, me: &str) -> anyhow::Result<bool> {
    match cmd {
        Command::User(UserCmd::Add { name }) => {
            if kernel.operator().add_user(&name)? {
                outln!("added {name}");
            } else {
                outln!("{name} was already known");
            }
        }
        Command::User(UserCmd::Set {
            name,
            notify_url,
            no_notify,
        }) => set_notices(kernel, me, &name, notify_url, no_notify).await?,
        Command::User(UserCmd::Bind {
            name,
            oidc_subject,
            issuer,
        }) => {
            if kernel
                .operator()
                .bind_identity(&issuer, &oidc_subject, &name, me)?
            {
                outln!("subject {oidc_subject:?} at {issuer} now signs in as {name}");
            } else {
                outln!("subject {oidc_subject:?} at {issuer} already signs in as {name}");
            }
        }
        Command::User(UserCmd::Unbind {
            name,
            oidc_subject,
            issuer,
        }) => {
            if !kernel
                .operator()
                .unbind_identity(&issuer, &oidc_subject, &name)?
            {
                bail!(
                    "no binding of subject {oidc_subject:?} at {issuer} (`gatehouse user bindings` lists them)"
                );
            }
            outln!("subject {oidc_subject:?} at {issuer} no longer signs in as {name}");
        }
        Command::User(UserCmd::Bindings { json }) => {
            print_records(&kernel.operator().identity_bindings()?, json, |b| {
                outln!(
                    "{:<16} subject {:?} at {}",
                    b.user,
                    crate::prompt::inline(&b.subject),
                    crate::prompt::inline(&b.issuer)
                )
            })?
        }
        Command::Users { json } => {
            print_records(&kernel.operator().users()?, json, |u| outln!("{u}"))?
        }
        Command::Account(AccountCmd::Connect {
            user,
            gatekeeper,
            name,
            default,
            oauth,
            client_id,
            scope,
            timeout,
        }) => {
            if oauth {
                let label = name.unwrap_or_else(|| user.clone());
                connect_oauth(
                    kernel,
                    &user,
                    &gatekeeper,
                    &label,
                    default,
                    client_id,
                    scope,
                    timeout,
                )
                .await?
            } else {
                connect(kernel, &user, &gatekeeper, name, default)?
            }
        }
        Command::Account(AccountCmd::List { json }) => {
            print_records(&kernel.operator().accounts()?, json, |a| {
                outln!(
                    "{:<24} at {}{}",
                    a.id(),
                    a.gatekeeper,
                    if a.is_default { "  (default)" } else { "" }
                )
            })?
        }
    }
    Ok(true)
}

async fn set_notices(
    kernel: &Kernel,
    me: &str,
    name: &str,
    notify_url: Option<String>,
    no_notify: bool,
) -> anyhow::Result<()> {
    if notify_url.is_none() && !no_notify {
        bail!("nothing to set: give --notify-url URL or --no-notify");
    }
    // The operator's choice, from this process's environment; `serve`
    // reads its own and checks again at every send.
    let allowed = crate::notify::Destinations::from_env()?;
    kernel
        .person(me)
        .set_notify_url(name, notify_url.as_deref(), allowed)
        .await?;
    match notify_url {
        Some(u) => outln!(
            "{name}'s notices go to {u}: one message per batch when actions wait for {name}'s decision"
        ),
        None => outln!("{name} gets no notices"),
    }
    Ok(())
}

fn connect(
    kernel: &Kernel,
    user: &str,
    gatekeeper: &str,
    name: Option<String>,
    default: bool,
) -> anyhow::Result<()> {
    let mut credential = String::new();
    std::io::stdin()
        .read_to_string(&mut credential)
        .context("cannot read the credential from stdin")?;
    let label = name.unwrap_or_else(|| user.to_owned());
    let a = kernel
        .person(user)
        .connect_account(gatekeeper, &label, &credential, default)?;
    outln!(
        "connected account {} at {}{}",
        a.id(),
        a.gatekeeper,
        if a.is_default { " (default)" } else { "" }
    );
    Ok(())
}

/// The person's part of an OAuth flow begun by `begin` (given the
/// redirect URI): the authorization URL printed, the redirect awaited on a
/// loopback listener of this machine (RFC 8252) until `timeout`, the code
/// exchanged.
pub(super) async fn sign_in_at_loopback<F, Fut>(
    begin: F,
    timeout: std::time::Duration,
) -> anyhow::Result<crate::oauth::Grant>
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<(url::Url, crate::oauth::Pending)>>,
{
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .context("cannot listen on 127.0.0.1 for the redirect")?;
    let redirect = format!(
        "http://127.0.0.1:{}/callback",
        listener.local_addr()?.port()
    );
    let (url, pending) = begin(redirect).await?;
    eprintln!("open this URL in a browser: {url}");
    let code = crate::oauth::await_redirect(listener, &pending, timeout).await?;
    crate::oauth::finish(pending, &code).await
}

/// `account connect --oauth`: the redirect comes back to a listener on
/// this machine's loopback (RFC 8252), so the browser may be anywhere the
/// person is signed in only if it runs here too.
#[allow(clippy::too_many_arguments)]
async fn connect_oauth(
    kernel: &Kernel,
    user: &str,
    gatekeeper: &str,
    label: &str,
    default: bool,
    client_id: Option<String>,
    scope: Option<String>,
    timeout: std::time::Duration,
) -> anyhow::Result<()> {
    let grant = sign_in_at_loopback(
        |redirect| async move {
            kernel
                .person(user)
                .begin_oauth(gatekeeper, label, &redirect, client_id, scope)
                .await
        },
        timeout,
    )
    .await?;
    let a = kernel
        .person(user)
        .connect_oauth_account(gatekeeper, label, &grant, default)?;
    outln!(
        "connected account {} at {} by OAuth{}",
        a.id(),
        a.gatekeeper,
        if a.is_default { " (default)" } else { "" }
    );
    Ok(())
}
