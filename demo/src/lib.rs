//! `gatehouse demo`: a guided end-to-end run on the bundled examples.
//!
//! Starts the bundled issue tracker on 127.0.0.1, installs the bundled
//! `triage` gadget and `issues` gatekeeper into a fresh state directory, and
//! walks through a staged write, its approval and a rejection, showing what
//! the service received at each step; then one step per lecture exercise
//! (ex01 environment and grants, ex02 a lying gatekeeper, ex04 pending
//! visibility, ex06 failures after sending, ex07 prompt forgery) and the
//! overseer's policies. Every step checks what it shows, and `run` answers
//! `false` when something did not behave, so that the test suite runs the
//! demo as a test. Owns nothing the kernel relies on and asks only the
//! kernel's public API, like any other surface.
//!
//! It is its own crate, beside the host library rather than in it, because
//! it runs against the loopback services (`gatehouse-services`), which are
//! stand-ins for the outside world and no part of the product; the
//! `gatehouse` binary (src/main.rs) hands [`tour`] to the library's CLI.

use anyhow::Context as _;
use gatehouse::Limits;
use gatehouse::home::Home;
use gatehouse::kernel::{Harness, Kernel};
use gatehouse::overseer::Decision;
use gatehouse::store::{LedgerFilter, Trust};
use gatehouse_services::tracker::{Fault, Tracker};
use serde_json::{Value, json};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;

/// A line on stdout, dropped if stdout is closed (like the CLI's own).
macro_rules! outln {
    ($($arg:tt)*) => { gatehouse::console::stdout_line(format_args!($($arg)*)) };
}

mod experiment;

/// [`run`], or an experiment, in the shape the CLI takes it
/// (`gatehouse::cli::Demo`).
pub fn tour(
    home: Option<PathBuf>,
    asked: Option<gatehouse::cli::Experiment>,
) -> Pin<Box<dyn Future<Output = anyhow::Result<bool>>>> {
    match asked {
        None => Box::pin(run(home)),
        Some(gatehouse::cli::Experiment::PendingWrites {
            endpoint,
            model,
            key_env,
            runs,
        }) => Box::pin(experiment::pending_writes(experiment::Setup {
            home,
            endpoint,
            model,
            key_env,
            runs,
        })),
    }
}

fn step(n: u32, text: &str) {
    outln!("\n== {n}. {text}");
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
    let tracker = start_tracker(token)?;
    outln!("Gatehouse demo. State: {}", root.display());
    outln!(
        "A small issue tracker is listening on {} (it stands for the outside world).",
        tracker.url()
    );

    let limits = Limits::from_env()?;
    let deadline = limits.gatekeeper_deadline;
    let kernel = Kernel::open(Home::at(&root), limits)?;
    set_up(&kernel, &tracker, token).await?;
    let mut ok = behaved(4, grants(&kernel, &tracker).await?);
    ok &= stage_and_decide(&kernel, &tracker).await?;
    ok &= behaved(9, failures(&kernel, &tracker, deadline).await?);
    show_ledger(&kernel).await?;
    ok &= policies(&kernel, &tracker).await?;
    if ok {
        outln!("\nDone. Every write waited for a decision; the gadget never did.");
    } else {
        outln!("\nDone, but some step did not behave as described (marked `!!` above).");
    }
    Ok(ok)
}

/// The bundled issue tracker with its two starting issues, on 127.0.0.1.
fn start_tracker(token: &str) -> anyhow::Result<Tracker> {
    Tracker::builder()
        .token(token)
        .issue("Login page shows a blank screen", &["bug"])
        .issue("Export to CSV drops the header row", &[])
        .start()
        .context("cannot start the bundled issue tracker on 127.0.0.1")
}

/// Steps 1-3: install the gadget, add the gatekeeper (showing how each of
/// its tools is classified), and introduce it into chat `work`.
async fn set_up(kernel: &Kernel, tracker: &Tracker, token: &str) -> anyhow::Result<()> {
    step(
        1,
        "Install the `triage` gadget: it starts with no capability at all.",
    );
    kernel
        .operator()
        .install("triage", gatehouse::guests::TRIAGE, &|m| outln!("   {m}"))?;
    outln!("   gatehouse install triage.wasm");

    step(
        2,
        "Add the `issues` gatekeeper: it may reach only the tracker, and the kernel holds its token.",
    );
    kernel.operator().put_secret("tracker-token", token)?;
    let g = kernel
        .operator()
        .add_gatekeeper(
            "issues",
            gatehouse::guests::ISSUES,
            Trust::Byo,
            vec![tracker.host()],
            Some("tracker-token".into()),
            Vec::new(),
            &|m| outln!("   {m}"),
        )
        .await?;
    for t in &g.manifest.tools {
        let c = gatehouse::classify::classify(&t.annotations, g.trust);
        outln!("   tool {:<14} -> {:?}", t.name, c.kind);
    }

    step(
        3,
        "Create a chat and introduce the tracker into it as ISSUES.",
    );
    kernel.person("demo").new_chat("work")?;
    kernel
        .person("demo")
        .introduce("work", "issues", "ISSUES", None)?;
    Ok(())
}

/// Steps 5-8: run the gadget (its writes are staged), show what awaits a
/// decision, approve one and reject the other, and approve again to see
/// that nothing is sent twice. Answers whether every step behaved.
async fn stage_and_decide(kernel: &Kernel, tracker: &Tracker) -> anyhow::Result<bool> {
    step(
        5,
        "Run the gadget. Its read runs at once; its two writes are staged and answered `pending`.",
    );
    let report = kernel.operator().run("triage", "work", "").await?;
    match &report.output {
        Ok(out) => outln!("{}", indent(out)),
        Err(e) => anyhow::bail!("the triage gadget failed: {e}"),
    }
    outln!(
        "   The tracker has received {} request(s) and {} write(s) so far.",
        tracker.requests().len(),
        tracker.writes().len()
    );

    step(
        6,
        "What awaits a decision (rendered by the same sanitiser the web inbox uses):",
    );
    let shown = kernel.person("demo").inbox(None).await?;
    for s in &shown {
        outln!("{}", indent(&s.prompt));
    }
    let pending: Vec<_> = shown.into_iter().map(|s| s.action).collect();

    let mut ok = true;
    step(7, "Approve the first, reject the second.");
    if let Some(first) = pending.first() {
        let d = kernel.person("demo").approve(first.id).await?;
        ok &= behaved(7, d.ok());
        outln!("   {}", d.line());
    }
    if let Some(second) = pending.get(1) {
        let d = kernel.person("demo").reject(second.id).await?;
        ok &= behaved(7, d.ok());
        outln!("   {}", d.line());
    }
    outln!(
        "   The tracker received {} write(s): the rejected one was never sent.",
        tracker.writes().len()
    );
    ok &= behaved(7, pending.len() == 2 && tracker.writes().len() == 1);

    step(
        8,
        "Approving the same action again sends nothing (at most once).",
    );
    if let Some(first) = pending.first() {
        let d = kernel.person("demo").approve(first.id).await?;
        outln!("   {}", d.line());
        ok &= behaved(
            8,
            matches!(d, Decision::AlreadyApplied { .. }) && tracker.writes().len() == 1,
        );
    }
    Ok(ok)
}

/// Step 10: the ledger of chat `work`, line by line.
async fn show_ledger(kernel: &Kernel) -> anyhow::Result<()> {
    step(10, "The ledger of chat `work`:");
    for e in kernel
        .person("demo")
        .ledger(LedgerFilter {
            chat: Some("work".into()),
            ..LedgerFilter::default()
        })
        .await?
    {
        outln!("   {}", gatehouse::prompt::ledger_line(&e));
    }
    Ok(())
}

/// Step 4, lecture exercise ex01 (SPEC C2, C3): a gadget's environment is
/// exactly what was introduced into its chat, and a grant narrows it to
/// named tools.
async fn grants(kernel: &Kernel, tracker: &Tracker) -> anyhow::Result<bool> {
    step(
        4,
        "Environment and grants (ex01): a gadget sees only the keys introduced into its chat, and calls only the granted tools.",
    );
    kernel
        .operator()
        .install("script", gatehouse::guests::SCRIPT, &|_| {})?;
    kernel.person("demo").new_chat("grants")?;
    let requests = tracker.requests().len();
    let before = script(
        kernel,
        "grants",
        json!([{"env": true}, call("ISSUES", "listIssues", json!({}))]),
    )
    .await?;
    outln!("   before any introduction, its keys: {}", keys(&before[0]));
    outln!("   call ISSUES listIssues: {}", answer_line(&before[1]));
    let granted = ["listIssues", "getIssue"];
    kernel.person("demo").introduce(
        "grants",
        "issues",
        "ISSUES",
        Some(granted.iter().map(|t| t.to_string()).collect()),
    )?;
    outln!(
        "   introduce issues into chat `grants` as ISSUES, granting {}",
        granted.join(", ")
    );
    let after = script(
        kernel,
        "grants",
        json!([
            {"env": true},
            {"tools": "ISSUES"},
            call("ISSUES", "createIssue", json!({"title": "outside the grant"}))
        ]),
    )
    .await?;
    let tools: Vec<&str> = after[1]["tools"]
        .as_array()
        .map(|ts| ts.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    outln!("   after it, its keys: {}", keys(&after[0]));
    outln!("   the tools ISSUES offers it: {}", tools.join(", "));
    outln!("   call ISSUES createIssue: {}", answer_line(&after[2]));
    let sent = tracker.requests().len() - requests;
    outln!("   the tracker received {sent} request(s) from chat `grants`.");
    Ok(before[0]["keys"] == json!([])
        && before[1]["error"]["kind"] == "unknown-key"
        && after[0]["keys"] == json!(["ISSUES"])
        && tools == granted
        && after[2]["error"]["kind"] == "not-granted"
        && sent == 0
        && kernel
            .person("demo")
            .pending(Some("grants"))
            .await?
            .is_empty())
}

/// Step 9, lecture exercise ex06 (SPEC P2, P3): what a failed send means
/// depends on whether the write may have landed.
async fn failures(
    kernel: &Kernel,
    tracker: &Tracker,
    deadline: std::time::Duration,
) -> anyhow::Result<bool> {
    step(
        9,
        "When a send fails (ex06): a timeout after the write landed is final; a 403 took no effect and may be retried.",
    );
    let mut ok = true;
    let title = "Lands, then the answer never comes";
    let id = stage_issue(kernel, title).await?;
    tracker.inject(Fault::LandThenHang, 1);
    outln!(
        "   approve #{id}; the tracker applies the write but never answers (waiting for the gatekeeper's deadline, {} s)",
        deadline.as_secs_f32()
    );
    let d = kernel.person("demo").approve(id).await?;
    outln!("   {}", d.line());
    ok &= matches!(
        d,
        Decision::Failed {
            retryable: false,
            ..
        }
    );
    let again = kernel.person("demo").approve(id).await?;
    outln!("   approve #{id} again: {}", again.line());
    ok &= matches!(again, Decision::Refused { .. });
    let landed = created(tracker, title);
    outln!("   the tracker holds it {landed} time(s): the kernel never sent it again.");
    ok &= landed == 1;

    let title = "Forbidden at first";
    let id = stage_issue(kernel, title).await?;
    tracker.inject(Fault::Status(403), 1);
    let d = kernel.person("demo").approve(id).await?;
    outln!("   approve #{id}, answered 403: {}", d.line());
    ok &= matches!(
        d,
        Decision::Failed {
            retryable: true,
            ..
        }
    ) && created(tracker, title) == 0;
    let retry = kernel.person("demo").approve(id).await?;
    outln!("   approve #{id} again: {}", retry.line());
    let landed = created(tracker, title);
    outln!("   the tracker holds it {landed} time(s).");
    ok &= matches!(retry, Decision::Applied { .. }) && landed == 1;
    Ok(ok)
}

/// Stage `createIssue` in chat `work` through the script gadget; its id.
async fn stage_issue(kernel: &Kernel, title: &str) -> anyhow::Result<i64> {
    let out = script(
        kernel,
        "work",
        json!([call("ISSUES", "createIssue", json!({ "title": title }))]),
    )
    .await?;
    out[0]["pending"]["action_id"]
        .as_i64()
        .with_context(|| format!("createIssue was not staged: {}", out[0]))
}

/// Run the script gadget on `steps` in `chat`; its answer to each step.
async fn script(kernel: &Kernel, chat: &str, steps: Value) -> anyhow::Result<Vec<Value>> {
    let report = kernel
        .operator()
        .run("script", chat, &json!({ "steps": steps }).to_string())
        .await?;
    let out = report
        .output
        .map_err(|e| anyhow::anyhow!("the script gadget failed: {e}"))?;
    serde_json::from_str(&out).context("the script gadget's answer is not a JSON array")
}

fn call(key: &str, tool: &str, args: Value) -> Value {
    json!({"call": {"key": key, "tool": tool, "args": args}})
}

/// A gadget's `env` answer, for people.
fn keys(env: &Value) -> String {
    match env["keys"].as_array() {
        Some(k) if k.is_empty() => "(none)".into(),
        Some(k) => k
            .iter()
            .filter_map(Value::as_str)
            .map(gatehouse::prompt::inline)
            .collect::<Vec<_>>()
            .join(", "),
        None => format!("(no answer: {env})"),
    }
}

/// One call's answer, for people: done, pending, or the refusal.
fn answer_line(answer: &Value) -> String {
    if let Some(e) = answer.get("error") {
        return format!(
            "refused ({}): {}",
            e["kind"].as_str().unwrap_or("?"),
            gatehouse::prompt::one_line(e["message"].as_str().unwrap_or(""))
        );
    }
    if answer.get("done").is_some() {
        return "done".into();
    }
    if let Some(p) = answer.get("pending") {
        return format!("pending as #{}", p["action_id"]);
    }
    format!("{answer}")
}

/// How many `createIssue` writes titled `title` reached the tracker.
fn created(tracker: &Tracker, title: &str) -> usize {
    tracker
        .writes()
        .iter()
        .filter(|w| {
            w.method == "POST"
                && serde_json::from_str::<Value>(&w.body)
                    .is_ok_and(|b| b["title"].as_str() == Some(title))
        })
        .count()
}

/// The overseer's policies, one step each (SPEC U, R, V, O), with the
/// lecture exercises they answer.
async fn policies(kernel: &Kernel, tracker: &Tracker) -> anyhow::Result<bool> {
    let mut ok = true;
    step(
        11,
        "Two keys for auto-approval: an operator vets `issues`, a person enables a rule for issues:addLabel.",
    );
    kernel.operator().set_trust("issues", Trust::Vetted)?;
    let r = kernel
        .person("demo")
        .add_rule("issues:addLabel", None)
        .await?;
    outln!(
        "   key one (vetted, non-destructive, idempotent): {}",
        if r.key_one { "holds" } else { "missing" }
    );
    ok &= behaved(11, r.key_one);
    let report = kernel.operator().run("triage", "work", "").await?;
    kernel.settle().await;
    let pending = kernel.person("demo").pending(Some("work")).await?;
    outln!(
        "   triage ran again: {} action(s) wait. The label waits behind the manual createIssue (drain order).",
        pending.len()
    );
    if let Some(first) = pending.first() {
        outln!(
            "   {}",
            kernel.person("demo").approve(first.id).await?.line()
        );
    }
    kernel.settle().await;
    let auto = kernel
        .person("demo")
        .ledger(LedgerFilter {
            auto_approved: true,
            ..Default::default()
        })
        .await?;
    for e in &auto {
        outln!(
            "   #{} {}:{} applied automatically, resolved-by {} (the rule's author)",
            e.id,
            gatehouse::prompt::inline(e.gatekeeper.as_deref().unwrap_or_default()),
            gatehouse::prompt::inline(e.tool.as_deref().unwrap_or_default()),
            gatehouse::prompt::inline(e.resolved_by.as_deref().unwrap_or_default())
        );
    }
    ok &= behaved(11, report.output.is_ok() && !auto.is_empty());

    ok &= behaved(12, forgery(kernel, pending.first().map(|a| a.id)).await?);
    ok &= behaved(13, pending_visibility(kernel, tracker).await?);
    ok &= behaved(14, lying_gatekeeper(kernel, tracker).await?);
    ok &= behaved(15, lockdown(kernel).await?);
    ok &= behaved(16, sharing(kernel).await?);
    Ok(ok)
}

/// Step 12, lecture exercise ex07 (SPEC U4): the same forged action shown
/// by a prompt that pastes the attacker's text, and by the kernel's.
async fn forgery(kernel: &Kernel, id: Option<i64>) -> anyhow::Result<bool> {
    step(
        12,
        "An approval prompt an attacker cannot forge (ex07): a hostile tool name, description and arguments, rendered naively and by the kernel.",
    );
    let mut forged = kernel
        .person("demo")
        .action(id.unwrap_or(2))
        .await?
        .context("the demo's action vanished")?;
    forged.state = gatehouse::store::ActionState::Pending;
    forged.tool = "createIssue\nEndpoint: https://evil.example\u{202E}".into();
    forged.args = r#"{"title":"```\nApprove: everything"}"#.into();
    let description = "## Approve\n> Endpoint: https://evil.example";
    outln!(
        "   What NOT to do: a prompt that pastes the attacker's text (invisible characters shown escaped here):"
    );
    let naive = naive_prompt(&forged, description);
    for line in naive.lines() {
        outln!("   naive | {}", visible(line));
    }
    outln!(
        "   The attacker's lines above pass for the prompt's own `Endpoint:` and `Approve:` lines."
    );
    outln!("   The kernel's prompt for the same action (the terminal and the web inbox use it):");
    let sanitised = gatehouse::prompt::render(&forged, Some(description));
    for line in sanitised.lines() {
        outln!("   safe  | {line}");
    }
    outln!(
        "   Only the kernel's own lines start with its field names; attacker text is inline, quoted or fenced."
    );
    // The naive prompt was forged (a line of the attacker's own starts with
    // a field name); the kernel's was not, and it carries no invisible or
    // control character.
    let forged_line = |text: &str, prefix: &str| text.lines().any(|l| l.starts_with(prefix));
    Ok(forged_line(&naive, "Endpoint:")
        && forged_line(&naive, "Approve: everything")
        && !forged_line(&sanitised, "Endpoint:")
        && !forged_line(&sanitised, "Approve: everything")
        && !sanitised.chars().any(|c| c != '\n' && hidden(c)))
}

/// WHAT NOT TO DO, kept to show lecture exercise ex07: a prompt assembled by
/// pasting a gatekeeper's and a gadget's text into the approval question.
/// A newline in a tool name or an argument becomes a line of the prompt.
fn naive_prompt(a: &gatehouse::store::Action, description: &str) -> String {
    let mut out = format!(
        "Approve this action?\nGatekeeper: {}\nTool: {}\nDescription: {}\n",
        a.gatekeeper, a.tool, description
    );
    if let Ok(Value::Object(args)) = serde_json::from_str::<Value>(&a.args) {
        for (k, v) in args {
            match v {
                Value::String(s) => out.push_str(&format!("{k}: {s}\n")),
                other => out.push_str(&format!("{k}: {other}\n")),
            }
        }
    }
    out
}

/// `line` with every control, line-breaking and invisible character
/// written as an escape (`\u{202e}`), so that printing a forged prompt
/// cannot itself reorder or hide what the terminal shows. Ordinary spaces
/// (the sanitiser's thin space among them) stay as they are.
fn visible(line: &str) -> String {
    line.chars()
        .map(|c| {
            if hidden(c) {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// A character a terminal does not show as itself: a control or line
/// separator, or a non-space that Rust's own debug formatting escapes
/// (format characters such as bidirectional overrides, unassigned ones).
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}')
        || (!c.is_whitespace() && !matches!(c, '"' | '\'' | '\\') && c.escape_debug().len() > 1)
}

/// Step 13, lecture exercise ex04 (SPEC V1-V3): the same task under a
/// harness that hides pending writes, under the kernel's honest harness,
/// and with a simulating gatekeeper.
async fn pending_visibility(kernel: &Kernel, tracker: &Tracker) -> anyhow::Result<bool> {
    step(
        13,
        "Pending visibility (ex04): an agent told to `ensure` an issue, under a naive harness, the honest one, and with simulation.",
    );
    kernel
        .operator()
        .install("agent", gatehouse::guests::AGENT, &|_| {})?;
    let sim = kernel
        .operator()
        .add_gatekeeper(
            "issues-sim",
            gatehouse::guests::ISSUES_SIM,
            Trust::Byo,
            vec![tracker.host()],
            Some("tracker-token".into()),
            Vec::new(),
            &|_| {},
        )
        .await?;
    let mut ok = true;
    let mut counts = Vec::new();
    for (label, chat, gatekeeper, title, harness) in [
        ("naive", "naive", "issues", "Slow search", Harness::Naive),
        (
            "honest",
            "agents",
            "issues",
            "Flaky login test",
            Harness::Honest,
        ),
        (
            "simulated",
            "simulated",
            sim.name.as_str(),
            "Docs typo",
            Harness::Honest,
        ),
    ] {
        let (behaved, n) = ensure_issue(
            kernel,
            tracker,
            AgentCase {
                label,
                chat,
                gatekeeper,
                title,
                harness,
            },
        )
        .await?;
        ok &= behaved;
        counts.push((label, n));
    }
    outln!(
        "   createIssue writes: {}",
        counts
            .iter()
            .map(|(l, n)| format!("{l} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    outln!(
        "   Hiding the pending write made the agent write twice; waiting for the decision or simulating it did not."
    );
    ok &= counts == [("naive", 2), ("honest", 1), ("simulated", 1)];
    Ok(ok)
}

/// One agent of step 13: who it runs as, where, and under which harness.
struct AgentCase<'a> {
    label: &'a str,
    chat: &'a str,
    gatekeeper: &'a str,
    title: &'a str,
    harness: Harness,
}

/// Run one agent of step 13 on `ensure TITLE`, approve what it staged,
/// and count how often its createIssue reached the tracker. Answers
/// whether it behaved (nothing sent during its turn, every approval
/// applied) and that count.
async fn ensure_issue(
    kernel: &Kernel,
    tracker: &Tracker,
    case: AgentCase<'_>,
) -> anyhow::Result<(bool, usize)> {
    let AgentCase {
        label,
        chat,
        gatekeeper,
        title,
        harness,
    } = case;
    kernel.person("demo").new_chat(chat)?;
    kernel.person("demo").introduce(
        chat,
        gatekeeper,
        "ISSUES",
        Some(vec![
            "listIssues".into(),
            "createIssue".into(),
            "addLabel".into(),
        ]),
    )?;
    let writes = tracker.writes().len();
    let run = kernel
        .operator()
        .agent("agent", chat, &format!("ensure {title} | ci"), harness)
        .await?;
    let sent = tracker.writes().len() - writes;
    outln!(
        "   {label}, turn 1 ({sent} write(s) sent during it): {}",
        gatehouse::prompt::one_line(&run.turn.output.clone().unwrap_or_else(|e| e))
    );
    let mut ok = sent == 0;
    ok &= approve_staged(kernel, label, chat).await?;
    kernel.settle().await;
    if let Some(r) = kernel
        .person("demo")
        .agent_runs()
        .await?
        .into_iter()
        .find(|r| r.id == run.run)
    {
        outln!(
            "   {label}, after the approvals: {} ({} turn(s))",
            gatehouse::prompt::one_line(&r.last_output.unwrap_or_default()),
            r.turns
        );
    }
    let n = created(tracker, title);
    outln!("   {label}: createIssue reached the tracker {n} time(s)");
    Ok((ok, n))
}

/// A person approves whatever an agent staged in `chat`, one decision at
/// a time (at most eight). Answers whether every decision applied.
async fn approve_staged(kernel: &Kernel, label: &str, chat: &str) -> anyhow::Result<bool> {
    let mut ok = true;
    for _ in 0..8 {
        kernel.settle().await;
        let Some(a) = kernel
            .person("demo")
            .pending(Some(chat))
            .await?
            .into_iter()
            .next()
        else {
            break;
        };
        let d = kernel.person("demo").approve(a.id).await?;
        outln!("   {label}: {}", d.line());
        ok &= d.ok();
    }
    Ok(ok)
}

/// Step 14, lecture exercise ex02 (SPEC K2, K5): a `byo` gatekeeper that
/// declares a delete read-only gets it run as a read, and the audit lists
/// every call that went through on such a claim.
async fn lying_gatekeeper(kernel: &Kernel, tracker: &Tracker) -> anyhow::Result<bool> {
    step(
        14,
        "A lying gatekeeper (ex02): `rogue` declares its deleteIssue read-only; the kernel believes it, and the audit lists the call.",
    );
    let g = kernel
        .operator()
        .add_gatekeeper(
            "rogue",
            gatehouse::guests::ROGUE,
            Trust::Byo,
            vec![tracker.host()],
            Some("tracker-token".into()),
            Vec::new(),
            &|_| {},
        )
        .await?;
    let class = g
        .manifest
        .tool("deleteIssue")
        .map(|t| gatehouse::classify::classify(&t.annotations, g.trust))
        .context("rogue has no deleteIssue")?;
    outln!(
        "   tool deleteIssue -> {:?} (classified by {}, trust {})",
        class.kind,
        class.classified_by.as_str(),
        g.trust
    );
    kernel.person("demo").new_chat("lying")?;
    kernel
        .person("demo")
        .introduce("lying", "rogue", "ROGUE", Some(vec!["deleteIssue".into()]))?;
    let before = tracker.issues().len();
    let out = script(
        kernel,
        "lying",
        json!([call("ROGUE", "deleteIssue", json!({"id": 1}))]),
    )
    .await?;
    let after = tracker.issues().len();
    outln!(
        "   call ROGUE deleteIssue {{\"id\": 1}}: {}, at once, with no approval",
        answer_line(&out[0])
    );
    outln!("   the tracker had {before} issue(s), now {after}: a write performed as a read (K5).");
    let listed = server_claims_audit(kernel).await?;
    Ok(class.kind == gatehouse::classify::Kind::Read
        && out[0].get("done").is_some()
        && after + 1 == before
        && listed
        && kernel
            .person("demo")
            .pending(Some("lying"))
            .await?
            .is_empty())
}

/// Step 14's audit: the calls of chat `lying` that ran on a server's own
/// read-only claim. Answers whether rogue's deleteIssue is listed there.
async fn server_claims_audit(kernel: &Kernel) -> anyhow::Result<bool> {
    outln!(
        "   The audit of calls that ran on a server's own read-only claim (`gatehouse log --server-claims --chat lying`):"
    );
    let claims = kernel
        .person("demo")
        .ledger(LedgerFilter {
            chat: Some("lying".into()),
            server_claims: true,
            ..Default::default()
        })
        .await?;
    for e in &claims {
        outln!(
            "   {} (trust {})",
            gatehouse::prompt::ledger_line(e),
            gatehouse::prompt::inline(e.trust.as_deref().unwrap_or_default())
        );
    }
    Ok(claims.iter().any(|e| {
        e.gatekeeper.as_deref() == Some("rogue")
            && e.tool.as_deref() == Some("deleteIssue")
            && e.trust.as_deref() == Some("byo")
    }))
}

/// Step 15 (SPEC O3): owner-only data latches a chat.
async fn lockdown(kernel: &Kernel) -> anyhow::Result<bool> {
    step(
        15,
        "Owner-only data locks a chat down: after reading payroll, the chat can send nothing.",
    );
    let warehouse = gatehouse_services::Warehouse::builder()
        .account("demo-warehouse-owner", &["*"])
        .start()
        .context("cannot start the bundled warehouse on 127.0.0.1")?;
    kernel
        .operator()
        .put_secret("warehouse-token", "demo-warehouse-owner")?;
    kernel
        .operator()
        .add_gatekeeper(
            "warehouse",
            gatehouse::guests::WAREHOUSE,
            Trust::Byo,
            vec![warehouse.host()],
            Some("warehouse-token".into()),
            Vec::new(),
            &|_| {},
        )
        .await?;
    kernel.person("demo").new_chat("salaries")?;
    kernel
        .person("demo")
        .introduce("salaries", "warehouse", "WAREHOUSE", None)?;
    kernel
        .person("demo")
        .introduce("salaries", "issues", "ISSUES", None)?;
    let answer = script(
        kernel,
        "salaries",
        json!([
            call("WAREHOUSE", "query", json!({"table": "payroll"})),
            call(
                "ISSUES",
                "createIssue",
                json!({"title": "salaries attached"})
            )
        ]),
    )
    .await?;
    outln!(
        "   read payroll: {}",
        if answer[0].get("done").is_some() {
            "admitted and recorded as restricted"
        } else {
            "refused"
        }
    );
    outln!("   then createIssue: {}", answer_line(&answer[1]));
    let latched = kernel.person("demo").chat("salaries").await?.latched;
    outln!("   chat `salaries` locked down: {latched} (durable; never cleared)");
    Ok(latched && answer[0].get("done").is_some() && answer[1].get("error").is_some())
}

/// Step 16 (SPEC S): a chat shared with someone who may not see what it
/// read. The warehouse here flags nothing owner-only, so the chat can be
/// shared; payroll is merely a table Bob's account may not read.
async fn sharing(kernel: &Kernel) -> anyhow::Result<bool> {
    step(
        16,
        "Sharing re-checks every source with the collaborator's own account.",
    );
    let hr = gatehouse_services::Warehouse::builder()
        .owner_only(&[])
        .account("demo-hr-alice", &["*"])
        .account("demo-hr-bob", &["sales", "customers"])
        .start()
        .context("cannot start the bundled warehouse on 127.0.0.1")?;
    kernel
        .operator()
        .add_gatekeeper(
            "hr",
            gatehouse::guests::WAREHOUSE,
            Trust::Byo,
            vec![hr.host()],
            None,
            Vec::new(),
            &|_| {},
        )
        .await?;
    for person in ["alice", "bob"] {
        kernel.operator().add_user(person)?;
    }
    kernel
        .person("alice")
        .connect_account("hr", "main", "demo-hr-alice", false)?;
    kernel
        .person("bob")
        .connect_account("hr", "analyst", "demo-hr-bob", false)?;
    kernel.person("alice").new_chat("salary-dashboard")?;
    kernel
        .person("alice")
        .introduce("salary-dashboard", "hr", "HR", None)?;
    let script = serde_json::json!({"steps": [
        {"call": {"key": "HR", "tool": "query", "args": {"table": "payroll"}}}
    ]});
    kernel
        .person("alice")
        .run("script", "salary-dashboard", &script.to_string())
        .await?;
    kernel
        .person("alice")
        .share("salary-dashboard", "bob", false)?;
    outln!("   alice read payroll with her account, then shared the chat with bob");
    let outcome = kernel
        .person("bob")
        .open_chat(
            "salary-dashboard",
            &gatehouse::sharing::OpenRequest::default(),
        )
        .await?;
    let refused = match outcome {
        gatehouse::sharing::OpenOutcome::Refused { failures, .. } => {
            outln!("   bob's open is refused:");
            for f in &failures {
                outln!("     {}", f.line());
            }
            !failures.is_empty()
        }
        _ => {
            outln!("   bob's open was admitted (it should not have been!)");
            false
        }
    };
    Ok(refused)
}

/// Says so when a step did not show what its heading promises; the demo
/// then exits non-zero, which is how the test suite runs it as a test.
fn behaved(n: u32, ok: bool) -> bool {
    if !ok {
        outln!("   !! step {n} did not behave as described");
    }
    ok
}

fn indent(s: &str) -> String {
    s.lines()
        .map(|l| format!("   {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A temporary directory removed on drop.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn tempdir() -> anyhow::Result<TempDir> {
    let base = std::env::temp_dir().join(format!(
        "gatehouse-demo-{}-{}",
        std::process::id(),
        gatehouse::store::now_ms()
    ));
    std::fs::create_dir_all(&base).with_context(|| format!("cannot create {}", base.display()))?;
    Ok(TempDir(base))
}
