//! The kernel's agent harness (SPEC V2, V3).
//!
//! Owns agent runs: a run's turn ends when an action awaits a decision (the
//! kernel refuses further calls in that turn), and the run is resumed, with
//! a note naming the applied actions, once every awaited action is applied.
//! A rejected or failed awaited action stops the run instead. The state is
//! durable (`agent_runs`), so a run waits across restarts and processes; a
//! run is taken for resumption by one conditional update, so two processes
//! never resume it twice. May not decide or apply actions.

use crate::kernel::{Harness, Kernel, Turn};
use crate::runtime::gadget::TurnReport;
use crate::store::ActionState;
use serde::Serialize;

/// What one harness turn did.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    pub run: i64,
    pub state: String,
    pub awaited: Vec<i64>,
    pub turn: TurnReport,
}

impl Kernel {
    /// Start an agent run of `gadget` in `chat` on `task`.
    pub async fn agent(
        &self,
        gadget: &str,
        chat: &str,
        task: &str,
        harness: Harness,
    ) -> anyhow::Result<RunReport> {
        self.agent_turn(None, gadget, chat, task, task, harness)
            .await
    }

    /// Start an agent run as `user`. **Decision**: agent runs (and their
    /// resumptions, which happen later without anyone present) run under the
    /// chat owner's accounts, so only the owner may start one.
    pub async fn agent_as(
        &self,
        user: &str,
        gadget: &str,
        chat: &str,
        task: &str,
        harness: Harness,
    ) -> anyhow::Result<RunReport> {
        if let Some(c) = self.store().chat(chat)?
            && c.owner != user
        {
            anyhow::bail!(
                "only the owner of chat {chat:?} ({}) may start agent runs in it: they resume later under the owner's accounts",
                c.owner
            );
        }
        self.agent(gadget, chat, task, harness).await
    }

    async fn agent_turn(
        &self,
        run: Option<i64>,
        gadget: &str,
        chat: &str,
        task: &str,
        input: &str,
        harness: Harness,
    ) -> anyhow::Result<RunReport> {
        let mut turn = Turn::new(gadget, chat);
        turn.harness = harness;
        let report = self.run_turn(turn.clone(), input).await?;
        let awaited = turn.awaited();
        let output = match &report.output {
            Ok(o) => o.clone(),
            Err(e) => format!("error: {e}"),
        };
        let (c, g, t, a) = (
            chat.to_owned(),
            gadget.to_owned(),
            task.to_owned(),
            awaited.clone(),
        );
        let id = self
            .store()
            .run(move |s| s.save_run(run, &c, &g, &t, &a, &output))
            .await?;
        Ok(RunReport {
            run: id,
            state: if awaited.is_empty() {
                "done"
            } else {
                "waiting"
            }
            .into(),
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
                    Some(run.id),
                    &run.gadget,
                    &run.chat,
                    &run.task,
                    &input,
                    Harness::Honest,
                )
                .await?,
            );
        }
        Ok(resumed)
    }
}
