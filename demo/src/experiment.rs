//! `gatehouse demo pending-writes`: the lecture's experiment ex04 with a
//! language model plugged in. Does hiding a pending write make a model
//! write twice?
//!
//! The `assistant` gadget asks a model (the scripted one on 127.0.0.1, or
//! any OpenAI-compatible endpoint the user names) to make sure an issue
//! exists and carries a label, in a fresh home each run, under three
//! harnesses:
//! - *hides pending writes* (the kernel's naive harness, which answers a
//!   staged write as if done: what SPEC V2 warns against);
//! - *waits for the decision* (the kernel's agent harness: a write that
//!   awaits a decision ends the turn; the run resumes once it is applied);
//! - *simulates* (the `issues-sim` gatekeeper predicts the write's result,
//!   so the model builds on a provisional issue).
//!
//! Every staged write is approved as a person would, and the table counts
//! the issues each run created at the tracker. Owns nothing the kernel
//! relies on; it drives the kernel's public API like any surface.

use anyhow::Context as _;
use gatehouse::Limits;
use gatehouse::home::Home;
use gatehouse::kernel::{Harness, Kernel};
use gatehouse::store::Trust;
use gatehouse_services::model::Model;
use gatehouse_services::tracker::Tracker;
use std::path::PathBuf;
use std::time::Duration;

/// What the experiment was asked to do.
pub(crate) struct Setup {
    pub home: Option<PathBuf>,
    pub endpoint: Option<String>,
    pub model: Option<String>,
    pub key_env: Option<String>,
    pub runs: u32,
}

/// The endpoint a run's `model` gatekeeper reaches.
struct Endpoint {
    base: String,
    host: String,
    model: String,
    key: Option<String>,
}

/// One harness of the experiment.
#[derive(Clone, Copy)]
struct Arm {
    label: &'static str,
    harness: Harness,
    gatekeeper: &'static str,
    component: &'static [u8],
}

const ARMS: [Arm; 3] = [
    Arm {
        label: "hides pending writes (naive)",
        harness: Harness::Naive,
        gatekeeper: "issues",
        component: gatehouse::guests::ISSUES,
    },
    Arm {
        label: "waits for the decision (honest)",
        harness: Harness::Honest,
        gatekeeper: "issues",
        component: gatehouse::guests::ISSUES,
    },
    Arm {
        label: "simulates (issues-sim)",
        harness: Harness::Honest,
        gatekeeper: "issues-sim",
        component: gatehouse::guests::ISSUES_SIM,
    },
];

/// What one arm's runs came to.
#[derive(Default)]
struct Tally {
    runs: u32,
    created: usize,
    duplicated: u32,
    labelled: u32,
}

const TRACKER_TOKEN: &str = "experiment-tracker-5b1e";
const MODEL_TOKEN: &str = "experiment-model-90c4";

/// Run the experiment and print its table. With the scripted model, it
/// answers whether the outcome is the one SPEC V2 predicts (the naive
/// harness duplicated, the other two never did); with a named endpoint,
/// whether every run completed (a real model's behaviour is the finding).
pub(crate) async fn pending_writes(setup: Setup) -> anyhow::Result<bool> {
    anyhow::ensure!(
        (1..=50).contains(&setup.runs),
        "--runs must be between 1 and 50 (got {})",
        setup.runs
    );
    let temp;
    let root = match &setup.home {
        Some(h) => h.clone(),
        None => {
            temp = crate::tempdir()?;
            temp.0.clone()
        }
    };
    let tracker = Tracker::builder()
        .token(TRACKER_TOKEN)
        .start()
        .context("cannot start the bundled issue tracker on 127.0.0.1")?;
    let scripted;
    let endpoint = match &setup.endpoint {
        Some(url) => named_endpoint(url, &setup)?,
        None => {
            scripted = Model::builder()
                .token(MODEL_TOKEN)
                .start()
                .context("cannot start the scripted model on 127.0.0.1")?;
            Endpoint {
                base: scripted.url(),
                host: scripted.host(),
                model: "scripted-1".into(),
                key: Some(MODEL_TOKEN.into()),
            }
        }
    };
    outln!(
        "Does hiding a pending write make a model write twice? Model {} at {}, {} run(s) per harness; state under {}.",
        endpoint.model,
        endpoint.base,
        setup.runs,
        root.display()
    );
    let mut tallies = Vec::new();
    for (a, arm) in ARMS.iter().enumerate() {
        let mut tally = Tally::default();
        for run in 0..setup.runs {
            let home = root.join(format!("arm{a}-run{run}"));
            let title = format!("Checkout fails on Safari (harness {a}, run {run})");
            let (created, labelled) = one_run(&home, *arm, &endpoint, &tracker, &title).await?;
            tally.runs += 1;
            tally.created += created;
            tally.duplicated += u32::from(created > 1);
            tally.labelled += u32::from(labelled);
        }
        tallies.push(tally);
    }
    outln!(
        "\n{:<34} {:>5} {:>15} {:>22} {:>9}",
        "harness",
        "runs",
        "issues created",
        "runs with a duplicate",
        "labelled"
    );
    for (arm, t) in ARMS.iter().zip(&tallies) {
        outln!(
            "{:<34} {:>5} {:>15} {:>22} {:>9}",
            arm.label,
            t.runs,
            t.created,
            t.duplicated,
            t.labelled
        );
    }
    if setup.endpoint.is_some() {
        return Ok(true);
    }
    let [naive, honest, simulated] = [&tallies[0], &tallies[1], &tallies[2]];
    let as_predicted =
        naive.duplicated == naive.runs && honest.duplicated == 0 && simulated.duplicated == 0;
    outln!(
        "{}",
        if as_predicted {
            "As SPEC V2 says: hiding the pending write made the model write twice; waiting or simulating did not."
        } else {
            "UNEXPECTED: the scripted model did not behave as SPEC V2 predicts."
        }
    );
    Ok(as_predicted)
}

/// The endpoint the user named, with its key from the environment.
fn named_endpoint(url: &str, setup: &Setup) -> anyhow::Result<Endpoint> {
    let url = url.trim().trim_end_matches('/');
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .context("--endpoint must be an http:// or https:// URL")?;
    let host = rest.split('/').next().unwrap_or_default().to_owned();
    anyhow::ensure!(!host.is_empty(), "--endpoint {url:?} names no host");
    let model = setup
        .model
        .clone()
        .context("--model names the model to ask at the endpoint")?;
    let key = match &setup.key_env {
        Some(var) => Some(
            std::env::var(var)
                .with_context(|| format!("--key-env {var}: the environment variable is not set"))?,
        ),
        None => None,
    };
    Ok(Endpoint {
        base: url.to_owned(),
        host,
        model,
        key,
    })
}

/// One run in a fresh home: the assistant on its task, every staged write
/// approved as it comes, until nothing waits. Returns how many issues the
/// run created and whether the last one carries the label.
async fn one_run(
    home: &std::path::Path,
    arm: Arm,
    endpoint: &Endpoint,
    tracker: &Tracker,
    title: &str,
) -> anyhow::Result<(usize, bool)> {
    // A model may take its time: the defaults are for services.
    let limits = Limits {
        gatekeeper_deadline: Duration::from_secs(120),
        gadget_deadline: Duration::from_secs(900),
        ..Limits::from_env()?
    };
    let kernel = Kernel::open(Home::at(home), limits)?;
    kernel
        .operator()
        .install("assistant", gatehouse::guests::ASSISTANT, &|_| {})?;
    kernel
        .operator()
        .put_secret("tracker-token", TRACKER_TOKEN)?;
    kernel
        .operator()
        .add_gatekeeper(
            arm.gatekeeper,
            arm.component,
            Trust::Byo,
            vec![tracker.host()],
            Some("tracker-token".into()),
            Vec::new(),
            &|_| {},
        )
        .await?;
    let secret = match &endpoint.key {
        Some(key) => {
            kernel.operator().put_secret("model-key", key)?;
            Some("model-key".to_owned())
        }
        None => None,
    };
    kernel
        .operator()
        .add_gatekeeper(
            "model",
            gatehouse::guests::MODEL,
            Trust::Byo,
            vec![endpoint.host.clone()],
            secret,
            vec![
                ("model".into(), endpoint.model.clone()),
                ("base-url".into(), endpoint.base.clone()),
            ],
            &|_| {},
        )
        .await?;
    let owner = "experimenter";
    kernel.person(owner).new_chat("work")?;
    kernel
        .person(owner)
        .introduce("work", arm.gatekeeper, "ISSUES", None)?;
    kernel
        .person(owner)
        .introduce("work", "model", "MODEL", None)?;
    let task = format!(
        "ensure {title} | bug\nMake sure the issue tracker has an issue titled \"{title}\" that carries the label \"bug\": list the issues first; create the issue or add the label only if needed."
    );
    kernel
        .operator()
        .agent("assistant", "work", &task, arm.harness)
        .await?;
    // Approve what waits, as a person would; each approval may resume the
    // run, which may stage more. Bounded: a model that never stops
    // staging is cut off.
    for _ in 0..20 {
        kernel.settle().await;
        let pending = kernel.person(owner).pending(None).await?;
        if pending.is_empty() {
            break;
        }
        for a in pending {
            kernel.person(owner).approve(a.id).await?;
        }
    }
    kernel.settle().await;
    let issues: Vec<_> = tracker
        .issues()
        .into_iter()
        .filter(|i| i.title == title)
        .collect();
    let labelled = issues
        .last()
        .is_some_and(|i| i.labels.iter().any(|l| l == "bug"));
    Ok((issues.len(), labelled))
}
