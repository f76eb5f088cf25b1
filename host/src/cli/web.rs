//! The web inbox's commands: `serve` (the inbox and its JSON API on
//! 127.0.0.1, or exposed further with TLS or behind a named proxy under a
//! public URL, until Ctrl-C), `token create` (a one-time sign-in link) and
//! `passkey list|remove` (an operator's view of people's passkeys, to take
//! away a lost one). Words only: exposure checks, sessions, sign-in and
//! every decision are `crate::web`'s and the kernel's; this module starts
//! the server, finds a running one's address and stops it cleanly.

use crate::kernel::Kernel;
use anyhow::bail;
use clap::Subcommand;
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub(super) enum Command {
    /// Serve the web inbox and its JSON API on 127.0.0.1 (Ctrl-C stops).
    Serve(ServeArgs),
    /// Sign-in links for the web inbox.
    #[command(subcommand)]
    Token(TokenCmd),
    /// People's passkeys (they add their own at /account in the inbox).
    #[command(subcommand)]
    Passkey(PasskeyCmd),
}

#[derive(clap::Args, Debug)]
pub(super) struct ServeArgs {
    /// The port to listen on; 0 picks a free one. The URL is printed.
    #[arg(long, default_value_t = crate::web::DEFAULT_PORT)]
    port: u16,
    /// The address to listen on, ADDR or ADDR:PORT (default 127.0.0.1).
    /// Beyond loopback it needs --tls-cert/--tls-key or --trusted-proxy,
    /// and --public-url.
    #[arg(long, value_name = "ADDR[:PORT]")]
    bind: Option<String>,
    /// Serve TLS with this certificate (PEM, with its chain).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// The reverse proxy in front (an address or a network): its
    /// X-Forwarded-For/-Proto/-Host are believed on its connections only.
    #[arg(long, value_name = "ADDR[/PREFIX]")]
    trusted_proxy: Option<String>,
    /// The one URL people open (https://NAME[:PORT]): the only Host and
    /// Origin answered, the passkeys' site, the links printed.
    #[arg(long, value_name = "URL")]
    public_url: Option<String>,
    /// Offer sign-in with this OpenID Connect provider (its issuer URL;
    /// discovery starts there).
    #[arg(long, value_name = "URL", requires = "oidc_client_id")]
    oidc_issuer: Option<String>,
    /// The client id registered at the provider.
    #[arg(long, value_name = "ID", requires = "oidc_issuer")]
    oidc_client_id: Option<String>,
    /// The name of the stored secret holding the client secret (store it
    /// with `gatehouse secret set NAME`, the value on stdin); without it
    /// the client is public (PKCE only).
    #[arg(long, value_name = "SECRET-NAME", requires = "oidc_issuer")]
    oidc_client_secret: Option<String>,
    /// The notification batch window: actions that start waiting within
    /// it make one notice per person.
    #[arg(long, value_name = "SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=86400))]
    notify_every: u64,
    /// Turn on Web Push notifications: the operator's contact push
    /// services may reach (mailto:you@example.com or an https:// URL).
    /// Off without it.
    #[arg(long, value_name = "CONTACT")]
    vapid_subject: Option<String>,
}

#[derive(Subcommand, Debug)]
pub(super) enum PasskeyCmd {
    /// List a person's passkeys (labels and dates, never keys).
    List {
        #[arg(value_name = "USER")]
        person: String,
        #[arg(long)]
        json: bool,
    },
    /// Remove a person's passkey (a lost device): the id from `passkey list`.
    Remove {
        #[arg(value_name = "USER")]
        person: String,
        #[arg(value_name = "ID")]
        credential: String,
    },
}

#[derive(Subcommand, Debug)]
pub(super) enum TokenCmd {
    /// Print a one-time sign-in link for a person known to this deployment.
    Create {
        /// The person who signs in with it (decisions record them as resolved-by).
        #[arg(value_name = "USER")]
        person: String,
        /// The inbox's address (default: the running `serve`'s, else
        /// http://127.0.0.1:8337).
        #[arg(long)]
        url: Option<String>,
    },
}

pub(super) async fn execute(kernel: &Kernel, cmd: Command) -> anyhow::Result<bool> {
    match cmd {
        Command::Serve(args) => serve(kernel, args).await?,
        Command::Passkey(PasskeyCmd::List { person, json }) => {
            let keys = kernel.person(&person).passkeys_of().await?;
            super::print_records(&keys, json, |k| {
                outln!(
                    "{}  {}  added {}{}",
                    k.credential,
                    crate::prompt::inline(&k.label),
                    at(k.created_at),
                    k.used_at
                        .map(|t| format!(", last used {}", at(t)))
                        .unwrap_or_default()
                )
            })?;
        }
        Command::Passkey(PasskeyCmd::Remove { person, credential }) => {
            if !kernel.person(&person).remove_passkey(&credential).await? {
                bail!(
                    "{person} has no passkey {credential:?} (`gatehouse passkey list {person}` lists them)"
                );
            }
            outln!("removed {person}'s passkey {credential}");
        }
        Command::Token(TokenCmd::Create { person, url }) => {
            let base = inbox_address(kernel, url);
            let ttl = i64::try_from(crate::web::SIGNIN_TTL.as_millis()).unwrap_or(i64::MAX);
            let token = kernel.operator().create_signin_token(&person, ttl)?;
            outln!("{base}/signin?token={token}");
        }
    }
    Ok(true)
}

/// A time in ms since the epoch, as RFC 3339 (UTC, seconds).
fn at(ms: i64) -> String {
    let ms = u64::try_from(ms).unwrap_or(0);
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
        .to_string()
}

/// Why a `serve` stopped.
enum Stop {
    Failed(anyhow::Result<()>),
    Asked,
    Vanished,
}

/// The exposure `args` ask for (`--bind` may carry the port).
fn exposure(args: &ServeArgs) -> anyhow::Result<(crate::web::Exposure, u16)> {
    let mut port = args.port;
    let mut e = crate::web::Exposure::default();
    if let Some(bind) = &args.bind {
        let b = bind.trim();
        if let Ok(at) = b.parse::<std::net::SocketAddr>() {
            if args.port != crate::web::DEFAULT_PORT && args.port != at.port() {
                bail!(
                    "--bind {b} and --port {} name two ports; give one",
                    args.port
                );
            }
            e.bind = at.ip();
            port = at.port();
        } else {
            e.bind = b
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse()
                .map_err(|_| {
                    anyhow::anyhow!(
                        "--bind {b:?} is not an address: write it as 0.0.0.0, 192.0.2.7:8443 or [::]:8443"
                    )
                })?;
        }
    }
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        e.tls = Some(crate::web::TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
        });
    }
    e.trusted_proxy = args
        .trusted_proxy
        .as_deref()
        .map(crate::web::parse_proxy)
        .transpose()?;
    e.public_url = args
        .public_url
        .as_deref()
        .map(crate::web::PublicUrl::parse)
        .transpose()?;
    Ok((e, port))
}

/// `serve`: until Ctrl-C (or SIGTERM), the server failing, or the state
/// database vanishing; requests and decisions in flight finish first.
async fn serve(kernel: &Kernel, args: ServeArgs) -> anyhow::Result<()> {
    let (exposure, port) = exposure(&args)?;
    let oidc = match (&args.oidc_issuer, &args.oidc_client_id) {
        (Some(issuer), Some(client_id)) => Some(crate::signin::oidc::OidcSettings {
            issuer: issuer.trim().to_owned(),
            client_id: client_id.clone(),
            secret_name: args.oidc_client_secret.clone(),
        }),
        _ => None,
    };
    let mut server = crate::web::start(
        kernel.clone(),
        crate::web::Config {
            port,
            notify_every: std::time::Duration::from_secs(args.notify_every),
            notify_destinations: crate::notify::Destinations::from_env()?,
            push: args
                .vapid_subject
                .as_deref()
                .map(crate::push::Settings::new),
            exposure,
            oidc,
            ..crate::web::Config::default()
        },
    )
    .await?;
    let url = server.url();
    // `token create` links to a running server by reading this; each
    // `serve` has its own file, so stopping one never removes another's.
    let url_file = serve_url_file(kernel);
    if let Err(e) = std::fs::write(&url_file, &url) {
        tracing::warn!(error = %e, "cannot record the inbox's address");
    }
    // A server must not die because whoever started it stopped reading its
    // output: write errors here are ignored (as `outln!` does).
    outln!("serving the inbox at {url}/ (Ctrl-C stops)");
    outln!("sign in at {url}/signin, or with a link from `gatehouse token create NAME`");
    let stop = tokio::select! {
        r = server.finished() => Stop::Failed(r),
        _ = shutdown_signal() => Stop::Asked,
        _ = kernel.state_vanished() => Stop::Vanished,
    };
    // Requests and decisions in flight finish first (P8): a claimed action
    // is sent and recorded, never dropped half-way.
    server.stop().await;
    let _ = std::fs::remove_file(&url_file);
    match stop {
        Stop::Failed(r) => r,
        Stop::Asked => Ok(()),
        Stop::Vanished => bail!(
            "the state database {} was removed or replaced while serving; the inbox stopped so that nothing more is written to a file nobody will read (restore the database, then start `serve` again)",
            kernel.state_location()
        ),
    }
}

/// Where this `serve` process records its address: beside its liveness
/// lock, `run/<process>.url`.
fn serve_url_file(kernel: &Kernel) -> PathBuf {
    kernel
        .home()
        .run_dir()
        .join(format!("{}.url", kernel.owner()))
}

/// The inbox's address: `url` if given, else the running `serve`'s, else
/// the default port's.
pub(super) fn inbox_address(kernel: &Kernel, url: Option<String>) -> String {
    url.or_else(|| running_inbox(kernel))
        .map(|u| u.trim().trim_end_matches('/').to_owned())
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| format!("http://127.0.0.1:{}", crate::web::DEFAULT_PORT))
}

/// The address of the most recently started `serve` that is still running.
fn running_inbox(kernel: &Kernel) -> Option<String> {
    let entries = std::fs::read_dir(kernel.home().run_dir()).ok()?;
    let mut found: Vec<(std::time::SystemTime, String)> = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(owner) = name.to_str().and_then(|n| n.strip_suffix(".url")) else {
            continue;
        };
        if !kernel.is_alive(owner) {
            continue;
        }
        let (Ok(url), Ok(meta)) = (std::fs::read_to_string(e.path()), e.metadata()) else {
            continue;
        };
        found.push((meta.modified().unwrap_or(std::time::UNIX_EPOCH), url));
    }
    found.sort();
    found.pop().map(|(_, url)| url)
}

/// Ctrl-C, or SIGTERM where there is one.
pub(super) async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
