//! `gatehouse demo`: a guided end-to-end run on the bundled examples.
//!
//! Starts the bundled issue tracker on 127.0.0.1, installs the bundled
//! `triage` gadget and `issues` gatekeeper into a fresh state directory, and
//! walks through a staged write, its approval and a rejection, showing what
//! the service received at each step. Owns nothing the kernel relies on.

pub mod tracker;
pub mod warehouse;

use crate::home::Home;
use crate::kernel::Kernel;
use crate::runtime::Limits;
use crate::store::{LedgerFilter, Trust};
use anyhow::Context as _;
use std::path::PathBuf;

fn step(n: u32, text: &str) {
    println!("\n== {n}. {text}");
}

/// Run the demo. With `home`, state goes there; else into a fresh
/// temporary directory that is removed afterwards.
pub async fn run(home: Option<PathBuf>) -> anyhow::Result<bool> {
    let temp;
    let root = match home {
        Some(h) => h,
        None => {
            temp = tempdir()?;
            temp.0.clone()
        }
    };
    let token = "demo-token-7f3a";
    let tracker = tracker::Tracker::builder()
        .token(token)
        .issue("Login page shows a blank screen", &["bug"])
        .issue("Export to CSV drops the header row", &[])
        .start()
        .context("cannot start the bundled issue tracker on 127.0.0.1")?;
    println!("Gatehouse demo. State: {}", root.display());
    println!(
        "A small issue tracker is listening on {} (it stands for the outside world).",
        tracker.url()
    );

    let kernel = Kernel::open(Home::at(&root), Limits::from_env()?)?;
    step(
        1,
        "Install the `triage` gadget: it starts with no capability at all.",
    );
    kernel.install("triage", crate::guests::TRIAGE, &|m| println!("   {m}"))?;
    println!("   gatehouse install triage.wasm");

    step(
        2,
        "Add the `issues` gatekeeper: it may reach only the tracker, and the kernel holds its token.",
    );
    kernel.store().put_secret("tracker-token", token)?;
    let g = kernel
        .add_gatekeeper(
            "issues",
            crate::guests::ISSUES,
            Trust::Byo,
            vec![tracker.host()],
            Some("tracker-token".into()),
            Vec::new(),
            &|m| println!("   {m}"),
        )
        .await?;
    for t in &g.manifest.tools {
        let c = crate::classify::classify(&t.annotations, g.trust);
        println!("   tool {:<14} -> {:?}", t.name, c.kind);
    }

    step(
        3,
        "Create a chat and introduce the tracker into it as ISSUES.",
    );
    kernel.new_chat("work", "demo")?;
    kernel.introduce("work", "issues", "ISSUES", None, "demo")?;

    step(
        4,
        "Run the gadget. Its read runs at once; its two writes are staged and answered `pending`.",
    );
    let report = kernel.run("triage", "work", "").await?;
    match &report.output {
        Ok(out) => println!("{}", indent(out)),
        Err(e) => anyhow::bail!("the triage gadget failed: {e}"),
    }
    println!(
        "   The tracker has received {} request(s) and {} write(s) so far.",
        tracker.requests().len(),
        tracker.writes().len()
    );

    step(
        5,
        "What awaits a decision (rendered by the same sanitiser the web inbox uses):",
    );
    let pending = kernel.store().pending(None)?;
    for a in &pending {
        let d = g.manifest.tool(&a.tool).map(|t| t.description.clone());
        println!("{}", indent(&crate::prompt::render(a, d.as_deref())));
    }

    step(6, "Approve the first, reject the second.");
    let mut ok = true;
    if let Some(first) = pending.first() {
        let d = kernel.approve(first.id, "demo").await?;
        ok &= d.ok();
        println!("   {}", d.line());
    }
    if let Some(second) = pending.get(1) {
        let d = kernel.reject(second.id, "demo").await?;
        ok &= d.ok();
        println!("   {}", d.line());
    }
    println!(
        "   The tracker received {} write(s): the rejected one was never sent.",
        tracker.writes().len()
    );

    step(
        7,
        "Approving the same action again sends nothing (at most once).",
    );
    if let Some(first) = pending.first() {
        println!("   {}", kernel.approve(first.id, "demo").await?.line());
    }

    step(8, "The ledger of chat `work`:");
    for e in kernel.store().ledger(&LedgerFilter {
        chat: Some("work".into()),
        ..LedgerFilter::default()
    })? {
        println!(
            "   #{} {} {}:{} {}",
            e.id,
            e.kind,
            e.gatekeeper.unwrap_or_default(),
            e.tool.unwrap_or_default(),
            e.state.unwrap_or_else(|| "observed".into())
        );
    }
    println!("\nDone. Every write waited for a decision; the gadget never did.");
    Ok(ok)
}

fn indent(s: &str) -> String {
    s.lines()
        .map(|l| format!("   {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A temporary directory removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempdir() -> anyhow::Result<TempDir> {
    let base = std::env::temp_dir().join(format!(
        "gatehouse-demo-{}-{}",
        std::process::id(),
        crate::store::now_ms()
    ));
    std::fs::create_dir_all(&base).with_context(|| format!("cannot create {}", base.display()))?;
    Ok(TempDir(base))
}
