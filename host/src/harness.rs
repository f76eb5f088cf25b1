//! The kernel's agent harness (SPEC V2, V3).
//!
//! Owns agent runs: a run's turn ends when an action awaits a decision (the
//! kernel refuses further calls in that turn), and the run is resumed, with
//! a note naming the applied actions, once every awaited action is applied.
//! A rejected or failed awaited action stops the run instead. The state is
//! durable (`agent_runs`), so a run waits across restarts and processes; a
//! run is taken for resumption by one conditional update, so two processes
//! never resume it twice. May not decide or apply actions.

use crate::capability::{Operator, Person};
use crate::kernel::{Harness, Kernel, Turn};
use crate::principal::Principal;
use crate::runtime::gadget::TurnReport;
use crate::store::{ActionState, AgentRunState};
use serde::Serialize;

/// What one harness turn did.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    /// The agent run's id (`gatehouse runs`).
    pub run: i64,
    /// Where the run is now: `waiting` (for `awaited`) or `done`.
    pub state: AgentRunState,
    /// The actions the turn ended on; the run resumes once all are applied.
    pub awaited: Vec<i64>,
    /// What the turn answered and printed.
    pub turn: TurnReport,
}

impl Kernel {
    async fn agent_turn(
        &self,
        run: i64,
        person: &str,
        gadget: &str,
        chat: &str,
        input: &str,
        harness: Harness,
    ) -> anyhow::Result<RunReport> {
        let principal = Principal::Agent {
            run,
            person: person.to_owned(),
        };
        let mut turn = Turn::new(gadget, chat, principal);
        turn.harness = harness;
        let report = self.run_turn(turn.clone(), input).await?;
        let awaited = turn.awaited();
        let output = match &report.output {
            Ok(o) => o.clone(),
            Err(e) => format!("error: {e}"),
        };
        // The turn ended awaiting nothing (done) or awaiting decisions.
        let state = if awaited.is_empty() {
            AgentRunState::Done
        } else {
            AgentRunState::Waiting
        };
        let a = awaited.clone();
        self.store()
            .run(move |s| s.save_run(run, state, &a, &output))
            .await?;
        Ok(RunReport {
            run,
            state,
            awaited,
            turn: report,
        })
    }

    /// Resume every waiting run whose awaited actions are all applied; stop
    /// those with a rejected or failed one. Returns the resumed turns.
    pub async fn resume_ready(&self) -> anyhow::Result<Vec<RunReport>> {
        let runs = self.store().run(|s| s.waiting_runs()).await?;
        let mut resumed = Vec::new();
        for run in runs {
            let ids = run.awaited.clone();
            let actions = self
                .store()
                .run(move |s| {
                    ids.iter()
                        .map(|&id| s.action(id))
                        .collect::<anyhow::Result<Vec<_>>>()
                })
                .await?;
            let mut applied = Vec::new();
            let mut blocker = None;
            let mut still_open = false;
            for (id, a) in run.awaited.iter().zip(actions) {
                match a {
                    Some(a) if a.state == ActionState::Applied => {
                        applied.push(format!("#{} ({}:{})", a.id, a.gatekeeper, a.tool))
                    }
                    Some(a) if matches!(a.state, ActionState::Pending | ActionState::Applying) => {
                        still_open = true
                    }
                    Some(a) => blocker = Some(format!("action #{} was {}", a.id, a.state)),
                    None => blocker = Some(format!("action #{id} no longer exists")),
                }
            }
            if let Some(why) = blocker {
                let id = run.id;
                let msg = format!("stopped: {why}; the run was not resumed");
                self.store().run(move |s| s.stop_run(id, &msg)).await?;
                continue;
            }
            if still_open {
                continue;
            }
            let id = run.id;
            if !self.store().run(move |s| s.take_run(id)).await? {
                continue; // another process resumed it
            }
            let input = format!(
                "{}\n[gatehouse] resumed: applied {}",
                run.task,
                applied.join(", ")
            );
            resumed.push(
                self.agent_turn(
                    run.id,
                    &run.person,
                    &run.gadget,
                    &run.chat,
                    &input,
                    Harness::Honest,
                )
                .await?,
            );
        }
        Ok(resumed)
    }
}

impl Person<'_> {
    /// Start an agent run as `person`. **Decision**: agent runs (and their
    /// resumptions, which happen later without anyone present) act for the
    /// person who started them, with that person's accounts; only a chat's
    /// owner may start one, so that a run resumed hours later never acts
    /// for someone whose access has since been checked away.
    pub async fn agent(
        &self,
        gadget: &str,
        chat: &str,
        task: &str,
        harness: Harness,
    ) -> anyhow::Result<RunReport> {
        let person = self.name;
        let access = self.kernel.access(chat, person).await?;
        access.require(crate::access::Need::See, chat, person)?;
        if !access.is_owner() {
            anyhow::bail!(
                "only the owner of chat {chat:?} may start agent runs in it: they resume later, when nobody is present"
            );
        }
        let (c, g, t, p) = (
            chat.to_owned(),
            gadget.to_owned(),
            task.to_owned(),
            person.to_owned(),
        );
        let run = self
            .kernel
            .store()
            .run(move |s| s.start_run(&c, &g, &t, &p))
            .await?;
        self.kernel
            .agent_turn(run, person, gadget, chat, task, harness)
            .await
    }
}

impl Operator<'_> {
    /// Start an agent run of `gadget` in `chat` on `task`, for the chat's
    /// owner.
    pub async fn agent(
        &self,
        gadget: &str,
        chat: &str,
        task: &str,
        harness: Harness,
    ) -> anyhow::Result<RunReport> {
        let c = chat.to_owned();
        let owner = self
            .kernel
            .store()
            .run(move |s| Ok(s.chat(&c)?.map(|c| c.owner)))
            .await?
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "no chat named {chat:?}; create it with `gatehouse chat new {chat}`"
                )
            })?;
        self.kernel
            .person(&owner)
            .agent(gadget, chat, task, harness)
            .await
    }
}
