//! The `workflow` commands' words: publishing, starting, deciding and
//! auditing runs. Every rule is the kernel's (`crate::workflow`).

use crate::kernel::Kernel;
use crate::prompt::inline;
use crate::store::RequestState;
use crate::workflow::{RequestDecision, RunSummary};
use clap::Subcommand;
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub enum WorkflowCmd {
    /// Publish a design (a new, never-changing version).
    Publish { file: PathBuf },
    /// Start a run as you (`--as`): every step's tool set is fixed now.
    Start {
        name: String,
        #[arg(long)]
        version: Option<i64>,
        /// Who may decide the run's approval requests (repeatable): the
        /// run's chat is shared with them, with the right to decide.
        #[arg(long = "approver", value_name = "PERSON")]
        approvers: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// A run's steps and requests.
    Status {
        run: i64,
        #[arg(long)]
        json: bool,
    },
    /// Continue a run (after a restart, say): run every step that can run.
    Resume {
        run: i64,
        #[arg(long)]
        json: bool,
    },
    /// Approval requests, with their allowed-calls lists.
    Requests {
        #[arg(long)]
        run: Option<i64>,
        #[arg(long)]
        json: bool,
    },
    /// Approve a request: its list becomes what the covered steps may do.
    Approve { id: i64 },
    /// Reject a request: the steps it covers stay stopped.
    Reject { id: i64 },
    /// Withdraw an approval: the covered steps are stopped again.
    Withdraw { id: i64 },
    /// Re-submit a rejected, withdrawn or expired request (its step asks
    /// anew).
    Resubmit { id: i64 },
    /// Who allowed each call of a run, on what grounds (never the arguments).
    Invocations {
        run: i64,
        #[arg(long)]
        json: bool,
    },
}

pub async fn execute(kernel: &Kernel, cmd: WorkflowCmd, me: &str) -> anyhow::Result<bool> {
    match cmd {
        WorkflowCmd::Publish { file } => {
            let bytes = std::fs::read(&file)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", file.display()))?;
            let (name, version) = kernel.person(me).publish_workflow(&bytes)?;
            outln!("published workflow {name} version {version}");
        }
        WorkflowCmd::Start {
            name,
            version,
            approvers,
            json,
        } => {
            let approvers: Vec<&str> = approvers.iter().map(String::as_str).collect();
            print_run(
                &kernel
                    .person(me)
                    .start_workflow(&name, version, &approvers)
                    .await?,
                json,
            )?
        }
        WorkflowCmd::Status { run, json } => {
            let s = kernel.person(me).run_status(run)?;
            print_run(&s, json)?;
        }
        WorkflowCmd::Resume { run, json } => {
            print_run(&kernel.person(me).resume_run(run).await?, json)?
        }
        WorkflowCmd::Requests { run, json } => {
            let list = kernel.person(me).requests_for(run)?;
            super::print_records(&list, json, |r| out!("{}", crate::prompt::request(r)))?;
        }
        WorkflowCmd::Approve { id } => decided(kernel, id, RequestDecision::Approve, me).await?,
        WorkflowCmd::Reject { id } => decided(kernel, id, RequestDecision::Reject, me).await?,
        WorkflowCmd::Withdraw { id } => decided(kernel, id, RequestDecision::Withdraw, me).await?,
        WorkflowCmd::Resubmit { id } => print_run(&kernel.person(me).resubmit(id).await?, false)?,
        WorkflowCmd::Invocations { run, json } => {
            let list = kernel.person(me).invocations_for(run)?;
            super::print_records(&list, json, |i| outln!("{}", crate::prompt::invocation(i)))?;
        }
    }
    Ok(true)
}

async fn decided(kernel: &Kernel, id: i64, d: RequestDecision, me: &str) -> anyhow::Result<()> {
    let s = kernel.person(me).decide_request(id, d).await?;
    let verb = match d {
        RequestDecision::Approve => "approved",
        RequestDecision::Reject => "rejected",
        RequestDecision::Withdraw => "withdrew",
    };
    outln!("{verb} request #{id}");
    print_run(&s, false)
}

fn print_run(s: &RunSummary, json: bool) -> anyhow::Result<()> {
    if json {
        return super::print_json(s);
    }
    outln!("run {} {}", s.run, s.state);
    for st in &s.steps {
        outln!(
            "  {:<12} {:<8} {}{}",
            inline(&st.step),
            st.status,
            st.tools
                .iter()
                .map(|t| inline(t))
                .collect::<Vec<_>>()
                .join(", "),
            st.note
                .as_deref()
                .map(|n| format!("  ({})", inline(n)))
                .unwrap_or_default()
        );
    }
    for r in &s.requests {
        match r.state {
            RequestState::Pending => outln!(
                "  request #{} from step {} awaits a decision: `gatehouse workflow requests --run {}`",
                r.id,
                inline(&r.step),
                s.run
            ),
            RequestState::Expired => outln!(
                "  request #{} from step {} expired before anyone decided it: `gatehouse workflow resubmit {}` asks again",
                r.id,
                inline(&r.step),
                r.id
            ),
            _ => {}
        }
    }
    Ok(())
}
