//! The `gatehouse` command line: the shell over the kernel.
//!
//! Parses, calls the kernel, prints. Every command that prints records has
//! `--json`, and prints through `print_record` / `print_records`. It
//! holds no policy: refusals come from the kernel, and this module only
//! words them as one line on stderr with exit code 1.
//!
//! One module per noun: `actions` (pending, show, approve, reject,
//! revert, log, rules), `chats` (install, gadgets, chat, introduce, run,
//! agent, runs), `gatekeepers` (gatekeeper, secret), `people` (user,
//! account), `sharing` (share, open, collaborators, blueprints),
//! `workflow`, `hooks`, `web` (serve, token), `mcp`, `db` (migrate,
//! copy), `keys` (the key secrets are sealed with); `demo` is
//! handed in by the binary ([`Demo`]).

mod actions;
mod chats;
mod db;
mod gatekeepers;
mod hooks;
mod keys;
mod mcp;
mod people;
mod sharing;
mod web;
mod workflow;

use crate::Limits;
use crate::home::Home;
use crate::kernel::Kernel;
use crate::scaffold::{Face, Kind};
use anyhow::Context as _;
use clap::{Parser, Subcommand};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "gatehouse",
    version,
    about = "Run sandboxed WebAssembly gadgets whose writes wait for your decision",
    long_about = "Gadgets reach the outside world only through gatekeepers introduced into a chat. \
Reads run at once; writes are staged and answered `pending`, and nothing is sent until a person approves."
)]
pub(crate) struct Cli {
    /// State directory (default: $GATEHOUSE_HOME, else ~/.local/share/gatehouse).
    #[arg(long, global = true, env = "GATEHOUSE_HOME")]
    home: Option<PathBuf>,
    /// A PostgreSQL database (postgres://...) shared by several hosts:
    /// every command serves from it (after `gatehouse db migrate`), and the
    /// home keeps only this host's compiled components. TLS as libpq's
    /// `sslmode` (disable, prefer, require, verify-ca, verify-full) and
    /// `sslrootcert=FILE` say. Its value is never printed.
    #[arg(
        long,
        global = true,
        env = "GATEHOUSE_DATABASE_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    database: Option<String>,
    /// The file holding the key the deployment's secrets are sealed with
    /// (`gatehouse key new > FILE`); or the key itself in $GATEHOUSE_KEY.
    /// Required with a shared database; an embedded home without one keeps
    /// its own key file in the home.
    #[arg(
        long,
        global = true,
        env = "GATEHOUSE_KEY_FILE",
        hide_env_values = true,
        value_name = "FILE"
    )]
    key_file: Option<PathBuf>,
    /// The person giving this command: owner of the chats they create,
    /// recorded as `resolved-by`, whose accounts their turns use (default:
    /// $GATEHOUSE_USER, else $USER).
    #[arg(
        long = "as",
        visible_alias = "user",
        value_name = "USER",
        global = true,
        env = "GATEHOUSE_USER"
    )]
    user: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start a new project: `gatehouse new gadget NAME --lang rust|python|js [--ui]`.
    #[command(subcommand)]
    New(NewCmd),
    #[command(flatten)]
    Chats(chats::Command),
    #[command(flatten)]
    Gatekeepers(gatekeepers::Command),
    #[command(flatten)]
    Actions(actions::Command),
    #[command(flatten)]
    People(people::Command),
    #[command(flatten)]
    Sharing(sharing::Command),
    /// Workflows with scoped approvals: designs, runs, requests, audit.
    #[command(subcommand)]
    Workflow(workflow::WorkflowCmd),
    /// Hooks: a gatekeeper's trigger (a webhook or a schedule) bound to a
    /// gadget in a chat; disabled until a person who may decide enables it.
    #[command(subcommand)]
    Hook(hooks::HookCmd),
    /// List the hooks of the chats you may see.
    Hooks {
        #[arg(long)]
        chat: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Check the state database page by page (`PRAGMA quick_check`): the
    /// full check that opening no longer runs, since its cost grows with
    /// the database.
    Check,
    /// A guided end-to-end run on the bundled examples; or, with
    /// `pending-writes`, the experiment of whether hiding a pending write
    /// makes a language model write twice.
    Demo {
        #[command(subcommand)]
        experiment: Option<Experiment>,
    },
    #[command(flatten)]
    Web(web::Command),
    /// Gatehouse as an MCP server: a chat's tools for any MCP client.
    #[command(subcommand)]
    Mcp(mcp::McpCmd),
    /// The database: bring it to this version's schema, or copy a home
    /// into PostgreSQL.
    #[command(subcommand)]
    Db(db::DbCmd),
    /// The key the deployment's secrets are sealed with: make one, show
    /// which one this host has, rotate to another.
    #[command(subcommand)]
    Key(keys::KeyCmd),
}

fn parse_setting(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_owned(), v.to_owned()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("{s:?} is not KEY=VALUE"))
}

#[derive(Subcommand, Debug)]
enum NewCmd {
    /// Write a starter gadget that builds and installs as written.
    Gadget {
        name: String,
        #[arg(long, value_enum, default_value = "rust")]
        lang: crate::scaffold::Lang,
        /// Where to write it (default: ./NAME); must be empty or absent.
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Give the gadget a face: a page shown beside its chat in the web
        /// inbox and in MCP hosts.
        #[arg(long)]
        ui: bool,
    },
    /// Write a starter gatekeeper (on the Rust SDK) that builds and adds as
    /// written.
    Gatekeeper {
        name: String,
        #[arg(long, value_enum, default_value = "rust")]
        lang: crate::scaffold::Lang,
        /// Where to write it (default: ./NAME); must be empty or absent.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

/// The guided tour behind `gatehouse demo` and its experiments, handed in
/// by the binary: they live outside this library because they run against
/// the loopback services (crate `gatehouse-services`), which are not part
/// of the product. Given the state directory (`--home`, else a fresh
/// temporary one) and what was asked, it answers whether every step
/// behaved.
pub type Demo =
    fn(Option<PathBuf>, Option<Experiment>) -> Pin<Box<dyn Future<Output = anyhow::Result<bool>>>>;

/// An experiment `gatehouse demo` runs instead of its tour.
#[derive(Subcommand, Clone, Debug)]
pub enum Experiment {
    /// Does hiding a pending write make a language model write twice? An
    /// `assistant` gadget asks a model to make sure an issue exists with a
    /// label, under three harnesses (one that hides pending writes, one
    /// that waits for the decision, one whose gatekeeper simulates), each
    /// `--runs` times; every staged write is approved as a person would,
    /// and the table counts the issues created. Without `--endpoint`, a
    /// scripted model on 127.0.0.1 plays the model.
    PendingWrites {
        /// An OpenAI-compatible endpoint (`https://HOST[/v1]` or
        /// `http://127.0.0.1:PORT`).
        #[arg(long)]
        endpoint: Option<String>,
        /// The model's name at the endpoint.
        #[arg(long, requires = "endpoint")]
        model: Option<String>,
        /// The environment variable holding the endpoint's API key (never
        /// given on the command line).
        #[arg(long, requires = "endpoint")]
        key_env: Option<String>,
        /// Runs per harness.
        #[arg(long, default_value_t = 3)]
        runs: u32,
    },
}

/// Entry point for the binary, which hands in the `demo` command's tour.
pub fn main(demo: Demo) -> ExitCode {
    let cli = Cli::parse();
    // Colours only for a person at a terminal: stderr that goes to a file,
    // a pipe or a log collector gets plain text, so that a warning line
    // read there (or grepped, or mailed) carries no escape sequences.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("GATEHOUSE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            errln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = match rt.block_on(execute(cli, demo)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            errln!("error: {}", crate::prompt::one_line(&format!("{e:#}")));
            ExitCode::from(1)
        }
    };
    // Every command has settled its work by now (`Kernel::settle`). What
    // may remain is a read of a terminal's stdin (`mcp serve` stopped by
    // Ctrl-C), which would otherwise hold the exit until a line is typed.
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    code
}

fn user(cli_user: &Option<String>) -> String {
    cli_user
        .clone()
        .or_else(|| std::env::var("USER").ok())
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "owner".into())
}

/// `--json` output: the record as JSON, with hidden characters in strings
/// escaped (`prompt::terminal_json`), so it is safe on a screen too.
fn print_json<T: serde::Serialize + ?Sized>(v: &T) -> anyhow::Result<()> {
    outln!("{}", crate::prompt::terminal_json(v)?);
    Ok(())
}

/// The one way a command prints what it got: with `--json` the record as
/// JSON ([`print_json`]), else as `text` writes it (through `outln!`, so a
/// closed pipe stops the printing, never the command).
fn print_record<T: serde::Serialize + ?Sized>(
    record: &T,
    json: bool,
    text: impl FnOnce(&T),
) -> anyhow::Result<()> {
    if json {
        print_json(record)
    } else {
        text(record);
        Ok(())
    }
}

/// [`print_record`] for a listing: one JSON array, or `text` per record.
fn print_records<T: serde::Serialize>(
    records: &[T],
    json: bool,
    text: impl FnMut(&T),
) -> anyhow::Result<()> {
    print_record(records, json, |records| records.iter().for_each(text))
}

fn read_component(file: &PathBuf) -> anyhow::Result<Vec<u8>> {
    std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))
}

/// Run a parsed command. `Ok(false)` means "refused": exit code 1.
pub(crate) async fn execute(cli: Cli, demo: Demo) -> anyhow::Result<bool> {
    if let Command::Demo { experiment } = cli.command {
        return demo(cli.home, experiment).await;
    }
    // A starter needs no home and no kernel.
    if let Command::New(new) = &cli.command {
        let (kind, name, lang, dir, face) = match new {
            NewCmd::Gadget {
                name,
                lang,
                dir,
                ui,
            } => {
                let face = if *ui { Face::With } else { Face::Without };
                (Kind::Gadget, name, lang, dir, face)
            }
            NewCmd::Gatekeeper { name, lang, dir } => {
                (Kind::Gatekeeper, name, lang, dir, Face::Without)
            }
        };
        let starter = crate::scaffold::new_starter(kind, name, *lang, face, dir.as_deref())?;
        outln!(
            "created {} {name} ({lang:?}) in {}\nnext:\n{}",
            kind.noun(),
            starter.dir.display(),
            starter.next
        );
        return Ok(true);
    }
    if let Command::Key(keys::KeyCmd::New) = &cli.command {
        return keys::new_key();
    }
    // The operator's key, if given: a file, or the key itself in the
    // environment (never on the command line, where other users see it).
    let key = crate::seal::Key::given(
        cli.key_file.as_deref(),
        std::env::var(crate::seal::KEY_ENV).ok().as_deref(),
    )?;
    let database = cli.database.as_deref().filter(|u| !u.trim().is_empty());
    if let Some(url) = database {
        match &cli.command {
            Command::Db(db::DbCmd::Migrate { json }) => {
                return db::migrate_shared(url, key, *json).await;
            }
            Command::Db(db::DbCmd::Status { json }) => {
                return db::status_shared(url, *json).await;
            }
            _ => {}
        }
    }
    let home = match &cli.home {
        Some(h) => Home::at(h),
        None => Home::from_env()?,
    };
    let me = user(&cli.user);
    // The acting person becomes owners and `resolved-by`: a name like any
    // other, never an escape sequence or a flag.
    crate::kernel::check_name(&me, "person (--as)")?;
    let limits = Limits::from_env()?;
    let kernel = match database {
        // A copy names its target itself and reads the home.
        Some(_) if matches!(cli.command, Command::Db(db::DbCmd::Copy { .. })) => {
            Kernel::open_keyed(home, limits, key)?
        }
        // The deployment lives in the shared database; the home keeps
        // this host's compiled components only. Its secrets are sealed
        // with a key the operator holds: none given, nothing opens.
        Some(url) => {
            let Some(key) = key else {
                anyhow::bail!(
                    "a shared database's secrets are sealed with a key the operator holds, and this host was given none; make one with `gatehouse key new > FILE` (then `chmod 600 FILE`) and set GATEHOUSE_KEY_FILE=FILE on every host"
                );
            };
            Kernel::open_shared(home, url, limits, key).await?
        }
        None => Kernel::open_keyed(home, limits, key)?,
    };
    // Sends this start resumed for dead processes (an interrupted claim of
    // a tool whose service honours the idempotency key) finish first, so
    // the command sees where they ended.
    kernel.settle().await;
    let ok = command(&kernel, cli.command, &me).await;
    // Never exit while work started beside a gadget still holds a claim.
    kernel.settle().await;
    ok
}

/// One command, with the kernel open: handed to its noun's module.
async fn command(kernel: &Kernel, command: Command, me: &str) -> anyhow::Result<bool> {
    match command {
        Command::Demo { .. } | Command::New(_) => {
            unreachable!("handled before the kernel opens")
        }
        Command::Chats(cmd) => chats::execute(kernel, cmd, me).await,
        Command::Gatekeepers(cmd) => gatekeepers::execute(kernel, cmd).await,
        Command::Actions(cmd) => actions::execute(kernel, cmd, me).await,
        Command::People(cmd) => people::execute(kernel, cmd, me).await,
        Command::Sharing(cmd) => sharing::execute(kernel, cmd, me).await,
        Command::Workflow(cmd) => workflow::execute(kernel, cmd, me).await,
        Command::Hook(cmd) => {
            let inbox = |url: Option<String>| web::inbox_address(kernel, url);
            hooks::execute(kernel, cmd, me, inbox).await.map(|()| true)
        }
        Command::Hooks { chat, json } => hooks::list(kernel, me, chat.as_deref(), json)
            .await
            .map(|()| true),
        Command::Check => {
            kernel.operator().check_integrity().await?;
            outln!("the state database {} is intact", kernel.state_location());
            Ok(true)
        }
        Command::Web(cmd) => web::execute(kernel, cmd).await,
        Command::Mcp(cmd) => mcp::execute(kernel, cmd, me).await,
        Command::Db(cmd) => db::execute(kernel, cmd).await,
        Command::Key(cmd) => keys::execute(kernel, cmd).await,
    }
}

#[cfg(test)]
mod surfaces {
    /// Every source file of a surface (the CLI, the web inbox, the MCP
    /// server, the demo and the binary that hands it to the CLI).
    const SURFACES: &[(&str, &str)] = &[
        ("cli.rs", include_str!("cli.rs")),
        ("cli/actions.rs", include_str!("cli/actions.rs")),
        ("cli/chats.rs", include_str!("cli/chats.rs")),
        ("cli/gatekeepers.rs", include_str!("cli/gatekeepers.rs")),
        ("cli/people.rs", include_str!("cli/people.rs")),
        ("cli/web.rs", include_str!("cli/web.rs")),
        ("cli/hooks.rs", include_str!("cli/hooks.rs")),
        ("cli/sharing.rs", include_str!("cli/sharing.rs")),
        ("cli/workflow.rs", include_str!("cli/workflow.rs")),
        ("cli/mcp.rs", include_str!("cli/mcp.rs")),
        ("cli/db.rs", include_str!("cli/db.rs")),
        ("cli/keys.rs", include_str!("cli/keys.rs")),
        ("mcp_serve.rs", include_str!("mcp_serve.rs")),
        ("web/mod.rs", include_str!("web/mod.rs")),
        ("web/api.rs", include_str!("web/api.rs")),
        ("web/session.rs", include_str!("web/session.rs")),
        ("web/events.rs", include_str!("web/events.rs")),
        ("web/hooks.rs", include_str!("web/hooks.rs")),
        ("web/requests.rs", include_str!("web/requests.rs")),
        ("web/exposure.rs", include_str!("web/exposure.rs")),
        ("web/tls.rs", include_str!("web/tls.rs")),
        ("web/ratelimit.rs", include_str!("web/ratelimit.rs")),
        ("web/passkey.rs", include_str!("web/passkey.rs")),
        ("web/oidc.rs", include_str!("web/oidc.rs")),
        ("web/signin.rs", include_str!("web/signin.rs")),
        ("demo/src/lib.rs", include_str!("../../demo/src/lib.rs")),
        ("demo/src/main.rs", include_str!("../../demo/src/main.rs")),
    ];

    /// A surface holds no policy and no handle on the state or the runtime.
    /// It asks the kernel, which applies the one authorization rule and the
    /// one send path. A surface that reached past it would be a side door;
    /// this test is the lock on it.
    #[test]
    fn surfaces_never_reach_past_the_kernel() {
        // Assembled so that this file's own text does not trip the check.
        let forbidden = [
            [".", "store()"].concat(),
            [".", "runtime()"].concat(),
            [".", "inspect()"].concat(),
            ["crate::", "store::Store"].concat(),
            ["crate::", "runtime::"].concat(),
            ["gatehouse::", "store::Store"].concat(),
        ];
        for (file, source) in SURFACES {
            for f in &forbidden {
                let hits: Vec<(usize, &str)> = source
                    .lines()
                    .enumerate()
                    .filter(|(_, l)| l.contains(f.as_str()))
                    .collect();
                assert!(
                    hits.is_empty(),
                    "{file} reaches past the kernel with `{f}` at {hits:?}"
                );
            }
        }
    }
}
