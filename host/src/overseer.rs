//! The overseer: decisions, the one send path, and auto-approval (SPEC A2,
//! P1-P8, U).
//!
//! Owns what happens after a decision: the claim (made only by the store's
//! claim transaction, which applies the one authorization rule, the latch
//! and the revalidation of P7), the one function that sends a claimed
//! action (`Kernel::send`) and records its outcome with the failure class
//! of P2, and the drain that applies what both keys allow (U1-U4). Every
//! sender (a person's approval from any surface, the drain, a covered
//! workflow call) goes through `send`. The retry class is decided from what
//! the kernel *saw* leave (the gatekeeper's
//! [`Witness`](crate::runtime::gatekeeper::Witness)), never from the
//! gatekeeper's word alone. May not stage actions; asks `classify` for key
//! one and `access` for who may decide.

use crate::capability::Person;
use crate::kernel::{DrainScope, Kernel, settings_for};
use crate::runtime::gatekeeper::{self as gk, Reach, wit};
use crate::store::{Claim, ClaimBy, ClaimRefusal, Rule, RuleCoverage};
use serde::Serialize;

/// What one decision did.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum Decision {
    /// Sent and applied; the service's answer.
    Applied {
        /// The action.
        id: i64,
        /// What the service answered (a note instead if over the cap).
        result: String,
    },
    /// Sent (or tried) and failed.
    Failed {
        /// The action.
        id: i64,
        /// Why, as the gatekeeper or the kernel said it.
        message: String,
        /// It provably had no effect, so a new decision may send it again
        /// (SPEC P2).
        retryable: bool,
    },
    /// Rejected: it will never be sent.
    Rejected {
        /// The action.
        id: i64,
    },
    /// Nothing was done, for this reason.
    Refused {
        /// The action.
        id: i64,
        /// Why, in one line: the claim's refusal, or the state the ledger
        /// recorded instead of this process's own outcome.
        reason: String,
    },
    /// No such action, as far as the decider may know: it does not exist,
    /// was pruned, or is in a chat they may not see (W2).
    NotFound {
        /// The id asked for.
        id: i64,
    },
    /// Nothing was sent: what it would be sent with changed since it was
    /// staged (SPEC P7). It is pending again, for a decision on current
    /// facts.
    Held {
        /// The action, pending again.
        id: i64,
        /// What changed.
        note: String,
    },
    /// It was applied before; nothing was sent again (P4).
    AlreadyApplied {
        /// The action.
        id: i64,
    },
}

impl Decision {
    /// True when this decision did what was asked.
    pub fn ok(&self) -> bool {
        matches!(
            self,
            Decision::Applied { .. } | Decision::Rejected { .. } | Decision::AlreadyApplied { .. }
        )
    }

    /// The action this decision is about.
    pub fn id(&self) -> i64 {
        match self {
            Decision::Applied { id, .. }
            | Decision::Failed { id, .. }
            | Decision::Rejected { id }
            | Decision::Refused { id, .. }
            | Decision::NotFound { id }
            | Decision::Held { id, .. }
            | Decision::AlreadyApplied { id } => *id,
        }
    }

    /// One line for a terminal or the inbox. A failure message is the
    /// gatekeeper's text, so it goes through `prompt::terminal_line`.
    pub fn line(&self) -> String {
        use crate::prompt::terminal_line;
        match self {
            Decision::Applied { id, result } => {
                format!("#{id} applied: {}", crate::prompt::excerpt(result, 300))
            }
            Decision::Failed {
                id,
                message,
                retryable: true,
            } => {
                format!(
                    "#{id} failed (retryable: nothing took effect; approve it again to retry): {}",
                    terminal_line(message)
                )
            }
            Decision::Failed {
                id,
                message,
                retryable: false,
            } => {
                format!("#{id} failed (not retryable): {}", terminal_line(message))
            }
            Decision::Rejected { id } => format!("#{id} rejected; it was never sent"),
            Decision::Refused { id, reason } => format!("#{id} refused: {}", terminal_line(reason)),
            Decision::NotFound { id } => format!(
                "#{id} refused: no action #{id} that you may see (it may not exist, may have been pruned, or belongs to a chat you may not see)"
            ),
            Decision::Held { id, note } => format!(
                "#{id} was not sent: {} since it was staged; it is pending again: review it (`gatehouse show {id}`) and decide again",
                terminal_line(note)
            ),
            Decision::AlreadyApplied { id } => {
                format!("#{id} was already applied; nothing was sent again")
            }
        }
    }
}

/// What enabling a rule did.
#[derive(Clone, Debug, Serialize)]
pub struct RuleReport {
    /// The `gatekeeper:tool` tag the rule covers (A6).
    pub tag: String,
    /// The person the rule belongs to.
    pub person: String,
    /// The one chat it applies in; `None`: every chat the person owns.
    pub chat: Option<String>,
    /// Whether key one holds now (vetted, non-destructive, idempotent action).
    pub key_one: bool,
    /// Why key one does not hold, when it does not.
    pub missing: Option<String>,
    /// What the drain after enabling it applied.
    pub applied: Vec<Decision>,
}

impl Decision {
    fn of_refusal(id: i64, r: ClaimRefusal) -> Decision {
        match r {
            ClaimRefusal::AlreadyApplied(id) => Decision::AlreadyApplied { id },
            ClaimRefusal::NoSuchAction(id) => Decision::NotFound { id },
            ClaimRefusal::Changed { id, note } => Decision::Held { id, note },
            r => Decision::Refused {
                id,
                reason: r.to_string(),
            },
        }
    }
}

impl Kernel {
    /// Run `work` as the kernel's own: dropping the returned future (a
    /// client that hung up) does not cancel it.
    async fn to_completion<T: Send + 'static>(
        &self,
        work: impl Future<Output = anyhow::Result<T>> + Send + 'static,
    ) -> anyhow::Result<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.spawn_background(async move {
            let _ = tx.send(work.await);
        });
        rx.await
            .map_err(|_| anyhow::anyhow!("the decision was interrupted by a shutdown"))?
    }

    /// Claim action `id` as `by` and send it; with the decision, the chat
    /// the claim found it in (none when the claim was refused), so that
    /// what follows the decision need not read the action again.
    async fn claim_and_send(
        &self,
        id: i64,
        by: ClaimBy,
    ) -> anyhow::Result<(Decision, Option<String>)> {
        let owner = self.owner().to_owned();
        let claim = self.store().run(move |s| s.claim(id, &by, &owner)).await?;
        match claim {
            Ok(c) => {
                let chat = c.action().chat.clone();
                Ok((self.send(c).await?, Some(chat)))
            }
            Err(r) => Ok((Decision::of_refusal(id, r), None)),
        }
    }

    /// The one send path (SPEC P7): send a claimed action through its
    /// gatekeeper, with exactly the record and credential the claim checked,
    /// and record the outcome. Nothing else sends an action. What it reports
    /// is what the ledger recorded ([`Kernel::as_recorded`]).
    pub(crate) async fn send(&self, claim: Claim) -> anyhow::Result<Decision> {
        match self.send_claimed(claim).await? {
            (d, Recorded::Yes) => Ok(d),
            (d, Recorded::No) => self.as_recorded(d).await,
        }
    }

    /// The decision as the ledger keeps it. While this process was sending,
    /// another one may have failed the claim (its recovery took this
    /// process for dead, e.g. because its liveness file under `run/` was
    /// removed): then this process's own outcome was not recorded, and what
    /// it reports is what the ledger says, never "applied" beside a
    /// `failed` row.
    async fn as_recorded(&self, d: Decision) -> anyhow::Result<Decision> {
        let (id, mine) = match &d {
            Decision::Applied { id, .. } => (*id, "applied"),
            Decision::Failed { id, .. } => (*id, "failed"),
            _ => return Ok(d),
        };
        let Some(row) = self.store().run(move |s| s.action(id)).await? else {
            return Ok(d);
        };
        let agrees = match &d {
            Decision::Applied { .. } => row.state == crate::store::ActionState::Applied,
            Decision::Failed { message, .. } => {
                row.state == crate::store::ActionState::Failed
                    && row.error.as_deref() == Some(message.as_str())
            }
            _ => true,
        };
        if agrees {
            return Ok(d);
        }
        tracing::warn!(
            id,
            "the ledger recorded another outcome than this process's send"
        );
        let note = format!(
            "this process's own attempt ended {mine} afterwards, but the ledger had already recorded the action as {}, and that stands",
            row.state
        );
        Ok(match row.state {
            crate::store::ActionState::Applied => Decision::Applied {
                id,
                result: row.result.unwrap_or_else(|| "null".into()),
            },
            crate::store::ActionState::Failed => Decision::Failed {
                id,
                message: format!("{} ({note})", row.error.unwrap_or_default()),
                retryable: row.retryable == Some(true),
            },
            other => Decision::Refused {
                id,
                reason: format!("the action is {other} ({note})"),
            },
        })
    }

    /// Send, and record the outcome; with it, whether the ledger took it.
    async fn send_claimed(&self, claim: Claim) -> anyhow::Result<(Decision, Recorded)> {
        let a = claim.action();
        let id = a.id;
        let g = claim.gatekeeper().clone();
        // The same key on every send of this action, by any process, so
        // that a service that honours it applies the action once.
        let digest = a
            .args_digest
            .clone()
            .unwrap_or_else(|| crate::store::args_digest(&a.args));
        let idempotency_key =
            crate::idempotency::key(self.idempotency_secret(), a.id, a.created_at, &digest);
        if claim.is_resumed() {
            tracing::warn!(
                id,
                "re-sending an interrupted action with its idempotency key (its service honours it)"
            );
        }
        let invocation = wit::Invocation {
            tool: a.tool.clone(),
            args: a.args.clone(),
            settings: settings_for(&g),
            account: claim.credential().account(),
            pending: Vec::new(),
            idempotency_key: Some(idempotency_key),
        };
        let credential = match self.bearer(&g.name, claim.credential()).await {
            Ok(Ok(c)) => c,
            Ok(Err(refusal)) => {
                return self
                    .fail(id, format!("{refusal}; nothing was sent"), true)
                    .await;
            }
            Err(e) => {
                return self
                    .fail(id, format!("{e:#}; nothing was sent"), true)
                    .await;
            }
        };
        let reach = Reach::of(&g, credential);
        let pre = match self.runtime().gatekeeper(&g.digest) {
            Ok(p) => p,
            Err(e) => {
                return self
                    .fail(id, format!("{e:#}; nothing was sent"), true)
                    .await;
            }
        };
        let called = gk::call(&pre, &self.runtime().limits, &g.name, reach, invocation).await;
        let check = format!(
            "the request may have reached the service, so it will not be resent: check {} and re-stage the action if needed",
            g.name
        );
        match called.outcome {
            Ok(Ok(output)) => {
                let result = output.result.clone();
                let recorded = self
                    .store()
                    .run(move |s| s.finish_applied(id, &output.result))
                    .await?;
                Ok((Decision::Applied { id, result }, Recorded::from(recorded)))
            }
            Ok(Err(e)) => {
                let claims_no_effect = matches!(
                    e,
                    wit::ToolError::Refused(_)
                        | wit::ToolError::InvalidArgs(_)
                        | wit::ToolError::UnknownTool(_)
                );
                let retryable = claims_no_effect && called.witness.proves_no_effect();
                let mut msg = gk::describe_tool_error(&e);
                if !retryable {
                    msg = format!("{msg}; {check}");
                }
                self.fail(id, msg, retryable).await
            }
            Err(gk::Fault::Crashed(m)) => {
                let retryable = called.witness.sent.is_empty();
                let msg = if retryable {
                    format!("{m}; nothing left the sandbox")
                } else {
                    format!("{m}; {check}")
                };
                self.fail(id, msg, retryable).await
            }
        }
    }

    async fn fail(
        &self,
        id: i64,
        message: String,
        retryable: bool,
    ) -> anyhow::Result<(Decision, Recorded)> {
        let m = message.clone();
        let recorded = self
            .store()
            .run(move |s| s.finish_failed(id, &m, retryable))
            .await?;
        let d = Decision::Failed {
            id,
            message,
            retryable,
        };
        Ok((d, Recorded::from(recorded)))
    }

    /// Start a drain of `chat` without waiting for it (after a submit).
    /// The gadget never waits for auto-approval; [`Kernel::settle`] waits
    /// for it.
    pub(crate) fn drain_in_background(&self, chat: &str) {
        let k = self.clone();
        let scope = DrainScope::chat(chat);
        self.spawn_background(async move {
            if let Err(e) = k.drain_scope(scope).await {
                tracing::warn!(error = %format!("{e:#}"), "auto-approval drain failed");
            }
        });
    }

    /// After a stage in `chat` of an action of `gatekeeper`'s `tool` that
    /// key one allows: drain the chat, beside the gadget, if some rule
    /// might cover its tag there (key two), as its staging transaction
    /// found the rules (`rules`). Only the new action can have become
    /// drainable by its own stage: every earlier one was drained when it
    /// was staged or when the rule or tier that would cover it appeared
    /// (each of those drains every chat). So when no rule names the tag,
    /// the drain, which takes the writer connection, is skipped: that
    /// keeps it out of the way of staging. Where the staging transaction
    /// could not know ([`RuleCoverage::Unknown`], a shared database), the
    /// rules are read after the stage committed, so a rule added
    /// meanwhile drains the action itself.
    pub(crate) fn drain_if_covered(
        &self,
        chat: &str,
        gatekeeper: &str,
        tool: &str,
        rules: RuleCoverage,
    ) {
        // The tag to ask the rules about after the commit, if need be.
        let ask = match rules {
            RuleCoverage::NoRule => return,
            RuleCoverage::MayCover => None,
            RuleCoverage::Unknown => Some(crate::store::action_tag(gatekeeper, tool)),
        };
        let k = self.clone();
        let chat = chat.to_owned();
        self.spawn_background(async move {
            let covered = match ask {
                None => Ok(true),
                Some(tag) => {
                    let c = chat.clone();
                    k.store()
                        .read_now(move |conn| crate::store::rules::may_cover(conn, &tag, &c))
                        .await
                }
            };
            let drained = match covered {
                Ok(false) => Ok(Vec::new()),
                Ok(true) | Err(_) => k.drain_scope(DrainScope::chat(&chat)).await,
            };
            if let Err(e) = drained {
                tracing::warn!(error = %format!("{e:#}"), "auto-approval drain failed");
            }
        });
    }

    /// Apply every pending action both keys allow (U1-U4), in every chat,
    /// then resume the agent runs whose awaited actions are all applied
    /// (V3). For a change that can affect any chat (a new rule, a trust
    /// tier); a decision or a stage drains only its own chat.
    pub async fn drain(&self) -> anyhow::Result<Vec<Decision>> {
        self.drain_scope(DrainScope::All).await
    }

    /// After a decision on action `id`: drain its chat, whose queue it may
    /// have unblocked (U2). Other chats' queues are not touched by it.
    async fn drain_after(&self, id: i64) -> anyhow::Result<Vec<Decision>> {
        match self.store().run(move |s| s.action(id)).await? {
            Some(a) => self.drain_scope(DrainScope::chat(&a.chat)).await,
            None => self.drain().await,
        }
    }

    /// Drain `scope`.
    ///
    /// Single flight: one drain runs at a time per process. A caller adds
    /// its scope to the request, then waits its turn; if the drain in
    /// flight has already taken the request (it goes round again while
    /// requests arrive, which is how work submitted mid-drain is picked
    /// up), the caller finds nothing left to do. Either way, when this
    /// returns, a drain that covers the scope and began after the request
    /// has finished. Across processes the claim keeps every action to one
    /// send.
    async fn drain_scope(&self, scope: DrainScope) -> anyhow::Result<Vec<Decision>> {
        let mut applied = Vec::new();
        wanted(self.drain_wanted()).add(scope);
        let _flight = self.drain_gate().lock().await;
        loop {
            let scope = std::mem::take(&mut *wanted(self.drain_wanted()));
            if scope.is_empty() {
                break;
            }
            let pass = self.drain_once(scope.clone()).await?;
            // A pass that applied something goes round again: an action
            // another process staged behind one it applied waited for this
            // one (its own drain found it waiting, U2), and only a drain
            // that comes after picks it up. A failure stops the drain (U3).
            let again = pass
                .last()
                .is_some_and(|d| !matches!(d, Decision::Failed { .. }));
            applied.extend(pass);
            self.resume_ready().await?;
            if again {
                wanted(self.drain_wanted()).add(scope);
            }
        }
        Ok(applied)
    }

    /// One pass over the pending actions of `scope`, oldest first. Each
    /// chat's queue at each gatekeeper stops at its first action that needs
    /// a person: later ones are never approved past it (U2), and one chat's
    /// waiting action never holds up another chat.
    async fn drain_once(&self, scope: DrainScope) -> anyhow::Result<Vec<Decision>> {
        let pending = self
            .store()
            .run(move |s| match scope {
                DrainScope::Nothing => Ok(Vec::new()),
                DrainScope::All => s.pending_all(),
                DrainScope::Chats(chats) => {
                    let mut all = Vec::new();
                    for chat in chats {
                        all.extend(s.pending_in(&chat)?);
                    }
                    all.sort_by_key(|a| a.id);
                    Ok(all)
                }
            })
            .await?;
        let mut blocked: std::collections::HashSet<(String, String)> = Default::default();
        let mut out = Vec::new();
        let mut flight: Option<(String, crate::flight::Flight)> = None;
        for a in pending {
            let queue = (a.chat.clone(), a.gatekeeper.clone());
            if blocked.contains(&queue) {
                continue;
            }
            let rules = self.candidate_rules(&a).await?;
            // One automatic send at a time per gatekeeper, across
            // processes, from a claim to its outcome (U2, U3). Kept while
            // the next action goes to the same gatekeeper (taking it costs
            // a file lock); let go before another is taken, so that no
            // drain ever holds two and waits for a third.
            if !rules.is_empty() && flight.as_ref().is_none_or(|(g, _)| *g != a.gatekeeper) {
                drop(flight.take());
                flight = Some((a.gatekeeper.clone(), self.flight(&a.gatekeeper).await?));
            }
            let mut decided = None;
            for rule in rules {
                let by = ClaimBy::Rule {
                    id: rule.id,
                    person: rule.person,
                };
                let owner = self.owner().to_owned();
                let id = a.id;
                match self.store().run(move |s| s.claim(id, &by, &owner)).await? {
                    Ok(claim) => {
                        decided = Some(self.send(claim).await?);
                        break;
                    }
                    // This rule does not cover it now; another might.
                    Err(ClaimRefusal::NeedsPerson { .. }) => continue,
                    Err(_) => break,
                }
            }
            let Some(d) = decided else {
                blocked.insert(queue);
                continue;
            };
            let failed = matches!(d, Decision::Failed { .. });
            out.push(d);
            if failed {
                // An apply failure stops the drain (U3).
                break;
            }
        }
        Ok(out)
    }

    /// The rules that might auto-approve `a` (key two), after a cheap check
    /// of key one and the latch; the claim checks both keys again, in its
    /// transaction.
    async fn candidate_rules(&self, a: &crate::store::Action) -> anyhow::Result<Vec<Rule>> {
        if a.note.is_some() {
            // Held by a revalidation: a person decides it (see the claim).
            return Ok(Vec::new());
        }
        let (gname, tool, chat, tag) = (
            a.gatekeeper.clone(),
            a.tool.clone(),
            a.chat.clone(),
            a.tag(),
        );
        self.store()
            .run(move |s| {
                let Some(g) = s.gatekeeper(&gname)? else {
                    return Ok(Vec::new());
                };
                let Some(t) = g.manifest.tool(&tool) else {
                    return Ok(Vec::new());
                };
                if !crate::classify::classify(&t.annotations, g.trust).auto_approvable {
                    return Ok(Vec::new());
                }
                let Some(c) = s.chat(&chat)? else {
                    return Ok(Vec::new());
                };
                if c.latched {
                    return Ok(Vec::new());
                }
                s.rules_covering(&tag, &chat, &c.owner)
            })
            .await
    }
}

impl Person<'_> {
    /// Approve and apply one action as `person`, then drain what the rules
    /// allow after it (U3) and resume agent runs it completed (V3).
    ///
    /// The claim (which refuses anyone who may not decide in the action's
    /// chat) is committed with `synchronous=FULL` before the gatekeeper is
    /// even instantiated; whoever loses the claim sends nothing (P1). Once
    /// asked, the decision runs to completion whatever becomes of the
    /// caller (a browser that hangs up, P8): it runs as the kernel's own
    /// work, which [`Kernel::settle`] waits for.
    pub async fn approve(&self, id: i64) -> anyhow::Result<Decision> {
        let person = self.name;
        let k = self.kernel.clone();
        let by = ClaimBy::Person(person.to_owned());
        self.kernel
            .to_completion(async move {
                match k.claim_and_send(id, by).await? {
                    (d, Some(chat)) => {
                        k.drain_scope(DrainScope::chat(&chat)).await?;
                        Ok(d)
                    }
                    (d, None) => {
                        k.drain_after(id).await?;
                        Ok(d)
                    }
                }
            })
            .await
    }

    /// Reject a pending action as `person`: it is never sent, and that costs
    /// nothing. Refused to anyone who may not decide in its chat.
    pub async fn reject(&self, id: i64) -> anyhow::Result<Decision> {
        let person = self.name;
        let k = self.kernel.clone();
        let who = person.to_owned();
        self.kernel
            .to_completion(async move {
                let d = match k.store().run(move |s| s.reject(id, &who)).await? {
                    Ok(()) => Decision::Rejected { id },
                    Err(r) => Decision::of_refusal(id, r),
                };
                // A rejection may unblock a queue or stop an agent run.
                k.drain_after(id).await?;
                Ok(d)
            })
            .await
    }

    /// Enable key two for `gatekeeper:tool` as `person` (SPEC U1): in every
    /// chat they own, or only in `chat`, where they must be allowed to
    /// decide. Then drain (U3). Returns what the rule allows now: key one
    /// may still be missing.
    pub async fn add_rule(&self, tag: &str, chat: Option<&str>) -> anyhow::Result<RuleReport> {
        let person = self.name;
        let Some((gname, tool)) = tag.split_once(':') else {
            anyhow::bail!("a rule names GATEKEEPER:TOOL, like issues:addLabel");
        };
        if let Some(c) = chat {
            self.kernel.access(c, person).await?.require(
                crate::access::Need::EnableRule,
                c,
                person,
            )?;
        }
        let g = self.kernel.gatekeeper_named(gname).await?.ok_or_else(|| {
            anyhow::anyhow!("no gatekeeper named {gname:?}; `gatehouse gatekeepers` lists them")
        })?;
        let Some(t) = g.manifest.tool(tool) else {
            let all: Vec<_> = g
                .manifest
                .tools
                .iter()
                .map(|t| crate::prompt::as_given(&t.name))
                .collect();
            anyhow::bail!(
                "gatekeeper {gname:?} has no tool {:?}; it offers: {}",
                crate::prompt::as_given(tool),
                all.join(", ")
            );
        };
        let missing = crate::classify::key_one_missing(&t.annotations, g.trust);
        let rule = {
            let (tag, person, chat) = (tag.to_owned(), person.to_owned(), chat.map(str::to_owned));
            self.kernel
                .store()
                .run(move |s| s.add_rule(&tag, &person, chat.as_deref()))
                .await?
        };
        let applied = self.kernel.drain().await?;
        Ok(RuleReport {
            tag: rule.tag,
            person: rule.person,
            chat: rule.chat,
            key_one: missing.is_none(),
            missing,
            applied,
        })
    }

    /// Remove `person`'s own rule for `tag` (in `chat`, or their
    /// every-chat rule). False if they had none.
    pub fn remove_rule(&self, tag: &str, chat: Option<&str>) -> anyhow::Result<bool> {
        let person = self.name;
        self.kernel.store().remove_rule(tag, person, chat)
    }

    /// The rules `person` may see: their own, and the ones scoped to chats
    /// they own.
    pub fn rules(&self) -> anyhow::Result<Vec<Rule>> {
        let person = self.name;
        self.kernel.store().rules_for(person)
    }
}

/// Whether the ledger took this process's outcome of a send: `No` when
/// the claim was no longer this process's to end (a recovery failed it
/// meanwhile, P3), and then what the ledger says is what is reported.
enum Recorded {
    Yes,
    No,
}

impl From<bool> for Recorded {
    fn from(recorded: bool) -> Recorded {
        if recorded {
            Recorded::Yes
        } else {
            Recorded::No
        }
    }
}

fn wanted(m: &std::sync::Mutex<DrainScope>) -> std::sync::MutexGuard<'_, DrainScope> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
