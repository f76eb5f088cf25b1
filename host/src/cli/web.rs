//! The web inbox's commands: `serve` (the inbox and its JSON API on
//! 127.0.0.1 until Ctrl-C) and `token create` (a one-time sign-in link).
//! Words only: sessions, sign-in and every decision are `crate::web`'s and
//! the kernel's; this module starts the server, finds a running one's
//! address and stops it cleanly.

use crate::kernel::Kernel;
use anyhow::bail;
use clap::Subcommand;
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub(super) enum Command {
    /// Serve the web inbox and its JSON API on 127.0.0.1 (Ctrl-C stops).
    Serve {
        /// The port to listen on; 0 picks a free one. The URL is printed.
        #[arg(long, default_value_t = crate::web::DEFAULT_PORT)]
        port: u16,
        /// The notification batch window: actions that start waiting within
        /// it make one notice per person.
        #[arg(long, value_name = "SECONDS", default_value_t = 60,
              value_parser = clap::value_parser!(u64).range(1..=86400))]
        notify_every: u64,
        /// Turn on Web Push notifications (issue 44): the operator's
        /// contact push services may reach (mailto:you@example.com or an
        /// https:// URL). Off without it.
        #[arg(long, value_name = "CONTACT")]
        vapid_subject: Option<String>,
    },
    /// Sign-in links for the web inbox.
    #[command(subcommand)]
    Token(TokenCmd),
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
        Command::Serve {
            port,
            notify_every,
            vapid_subject,
        } => serve(kernel, port, notify_every, vapid_subject).await?,
        Command::Token(TokenCmd::Create { person, url }) => {
            let base = inbox_address(kernel, url);
            let ttl = i64::try_from(crate::web::SIGNIN_TTL.as_millis()).unwrap_or(i64::MAX);
            let token = kernel.create_signin_token(&person, ttl)?;
            outln!("{base}/signin?token={token}");
        }
    }
    Ok(true)
}

/// Why a `serve` stopped.
enum Stop {
    Failed(anyhow::Result<()>),
    Asked,
    Vanished,
}

/// `serve`: until Ctrl-C (or SIGTERM), the server failing, or the state
/// database vanishing; requests and decisions in flight finish first.
async fn serve(
    kernel: &Kernel,
    port: u16,
    notify_every: u64,
    vapid_subject: Option<String>,
) -> anyhow::Result<()> {
    let mut server = crate::web::start(
        kernel.clone(),
        crate::web::Config {
            port,
            notify_every: std::time::Duration::from_secs(notify_every),
            notify_destinations: crate::notify::Destinations::from_env()?,
            push: vapid_subject.as_deref().map(crate::push::Settings::new),
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
    outln!("sign in with a link from `gatehouse token create NAME`");
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
