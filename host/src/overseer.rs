//! The overseer: decisions, apply and auto-approval (SPEC A2, P1-P4, U).
//!
//! Owns what happens after a decision: claim durably, send through the
//! gatekeeper, and record the outcome with the failure class of P2. The
//! retry class is decided from what the kernel *saw* leave (the gatekeeper's
//! [`Witness`](crate::runtime::gatekeeper::Witness)), never from the
//! gatekeeper's word alone. The drain applies what both keys allow (U1-U4).
//! May not stage actions; asks `classify` for key one.

use crate::kernel::{Kernel, Turn};
use crate::runtime::gatekeeper::{self as gk, wit};
use crate::store::{Action, ClaimRefusal};
use serde::Serialize;

/// What one decision did.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum Decision {
    /// Sent and applied; the service's answer.
    Applied { id: i64, result: String },
    /// Sent (or tried) and failed.
    Failed {
        id: i64,
        message: String,
        retryable: bool,
    },
    /// Rejected: it will never be sent.
    Rejected { id: i64 },
    /// Nothing was done, for this reason.
    Refused { id: i64, reason: String },
    /// It was applied before; nothing was sent again (P4).
    AlreadyApplied { id: i64 },
}

impl Decision {
    /// True when this decision did what was asked.
    pub fn ok(&self) -> bool {
        matches!(
            self,
            Decision::Applied { .. } | Decision::Rejected { .. } | Decision::AlreadyApplied { .. }
        )
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
            Decision::AlreadyApplied { id } => {
                format!("#{id} was already applied; nothing was sent again")
            }
        }
    }
}

/// What enabling a rule did.
#[derive(Clone, Debug, Serialize)]
pub struct RuleReport {
    pub tag: String,
    /// Whether key one holds now (vetted, non-destructive, idempotent action).
    pub key_one: bool,
    /// Why key one does not hold, when it does not.
    pub missing: Option<String>,
    /// What the drain after enabling it applied.
    pub applied: Vec<Decision>,
}

fn key_one_missing(
    class: &crate::classify::Classification,
    ann: &crate::classify::Annotations,
    trust: crate::store::Trust,
) -> Option<String> {
    if class.auto_approvable {
        return None;
    }
    if class.kind == crate::classify::Kind::Read {
        return Some("it is a read: reads need no approval".into());
    }
    let mut why = Vec::new();
    if trust != crate::store::Trust::Vetted {
        why.push("the gatekeeper is not vetted (an operator must vouch for it: `gatehouse gatekeeper trust NAME vetted`)".to_owned());
    }
    if ann.destructive != Some(false) {
        why.push("the tool is not declared non-destructive".to_owned());
    }
    if ann.idempotent != Some(true) {
        why.push("the tool is not declared idempotent".to_owned());
    }
    Some(format!(
        "key one is missing: {}; until then nothing is auto-approved",
        why.join("; ")
    ))
}

impl Kernel {
    /// Approve and apply one action as `by`, then drain what the rules
    /// allow after it (U3) and resume agent runs it completed (V3).
    ///
    /// The claim is committed with `synchronous=FULL` before the gatekeeper
    /// is even instantiated; whoever loses the claim sends nothing (P1).
    pub async fn approve(&self, id: i64, by: &str) -> anyhow::Result<Decision> {
        let d = self.claim_and_apply(id, by, false).await?;
        self.drain().await?;
        Ok(d)
    }

    async fn claim_and_apply(&self, id: i64, by: &str, auto: bool) -> anyhow::Result<Decision> {
        let owner = self.owner().to_owned();
        let who = by.to_owned();
        let claim = self
            .store()
            .run(move |s| s.claim(id, &owner, &who, auto))
            .await?;
        let action = match claim {
            Ok(c) => c.action,
            Err(ClaimRefusal::AlreadyApplied(id)) => return Ok(Decision::AlreadyApplied { id }),
            Err(r) => {
                return Ok(Decision::Refused {
                    id,
                    reason: r.to_string(),
                });
            }
        };
        let d = self.apply(action).await?;
        self.as_recorded(d).await
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

    /// Send a claimed action and record the outcome.
    async fn apply(&self, a: Action) -> anyhow::Result<Decision> {
        let id = a.id;
        let name = a.gatekeeper.clone();
        let g = self.store().run(move |s| s.gatekeeper(&name)).await?;
        let Some(g) = g else {
            let msg = format!(
                "gatekeeper {:?} was removed before this action could be sent; nothing was sent",
                a.gatekeeper
            );
            return self.fail(id, msg, true).await;
        };
        let turn = Turn::new(a.caller.trim_start_matches("gadget:"), &a.chat);
        let prepared = async {
            let (invocation, reach) = self.prepare(&turn, &g, &a.tool, a.args.clone()).await?;
            let pre = self.runtime().gatekeeper(&g.digest)?;
            anyhow::Ok((invocation, reach, pre))
        }
        .await;
        let (invocation, reach, pre) = match prepared {
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
                self.store()
                    .run(move |s| s.finish_applied(id, &output.result))
                    .await?;
                Ok(Decision::Applied { id, result })
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

    async fn fail(&self, id: i64, message: String, retryable: bool) -> anyhow::Result<Decision> {
        let m = message.clone();
        self.store()
            .run(move |s| s.finish_failed(id, &m, retryable))
            .await?;
        Ok(Decision::Failed {
            id,
            message,
            retryable,
        })
    }

    /// Reject a pending action: it is never sent, and that costs nothing.
    pub async fn reject(&self, id: i64, by: &str) -> anyhow::Result<Decision> {
        let who = by.to_owned();
        let d = match self.store().run(move |s| s.reject(id, &who)).await? {
            Ok(()) => Decision::Rejected { id },
            Err(r) => Decision::Refused {
                id,
                reason: r.to_string(),
            },
        };
        // A rejection may unblock a gatekeeper's queue or stop an agent run.
        self.drain().await?;
        Ok(d)
    }

    /// Enable key two for `gatekeeper:tool` as `by`, then drain (U3).
    /// Returns what the rule allows now: key one may still be missing.
    pub async fn add_rule(&self, tag: &str, by: &str) -> anyhow::Result<RuleReport> {
        let Some((gname, tool)) = tag.split_once(':') else {
            anyhow::bail!("a rule names GATEKEEPER:TOOL, like issues:addLabel");
        };
        let g = self.store().gatekeeper(gname)?.ok_or_else(|| {
            anyhow::anyhow!("no gatekeeper named {gname:?}; `gatehouse gatekeepers` lists them")
        })?;
        let Some(t) = g.manifest.tool(tool) else {
            let all: Vec<_> = g.manifest.tools.iter().map(|t| t.name.as_str()).collect();
            anyhow::bail!(
                "gatekeeper {gname:?} has no tool {tool:?}; it offers: {}",
                all.join(", ")
            );
        };
        let class = crate::classify::classify(&t.annotations, g.trust);
        self.store().add_rule(tag, by)?;
        let missing = key_one_missing(&class, &t.annotations, g.trust);
        let applied = self.drain().await?;
        Ok(RuleReport {
            tag: tag.to_owned(),
            key_one: missing.is_none(),
            missing,
            applied,
        })
    }

    /// Start a drain without waiting for it (after a submit). The gadget
    /// never waits for auto-approval; [`Kernel::settle`] waits for it.
    pub(crate) fn drain_in_background(&self) {
        let k = self.clone();
        self.spawn_background(async move {
            if let Err(e) = k.drain().await {
                tracing::warn!(error = %format!("{e:#}"), "auto-approval drain failed");
            }
        });
    }

    /// Apply every pending action both keys allow (U1-U4), then resume the
    /// agent runs whose awaited actions are all applied (V3).
    ///
    /// Single flight: one drain runs at a time per process. A caller marks
    /// its request, then waits its turn; if the drain in flight has already
    /// taken the request (it goes round again while requests arrive, which
    /// is how work submitted mid-drain is picked up), the caller finds
    /// nothing left to do. Either way, when this returns, a drain that began
    /// after the request has finished. Across processes the claim keeps
    /// every action to one send.
    pub async fn drain(&self) -> anyhow::Result<Vec<Decision>> {
        use std::sync::atomic::Ordering::SeqCst;
        let mut applied = Vec::new();
        self.drain_wanted().store(true, SeqCst);
        let _flight = self.drain_gate().lock().await;
        while self.drain_wanted().swap(false, SeqCst) {
            applied.extend(self.drain_once().await?);
            self.resume_ready().await?;
        }
        Ok(applied)
    }

    async fn drain_once(&self) -> anyhow::Result<Vec<Decision>> {
        let pending = self.store().run(|s| s.pending(None)).await?;
        let mut blocked: std::collections::HashSet<String> = Default::default();
        let mut out = Vec::new();
        for a in pending {
            if blocked.contains(&a.gatekeeper) {
                continue;
            }
            // Stop this gatekeeper's queue at the first action that needs a
            // person: never approve later ones past it (U2).
            let Some(rule_by) = self.auto_approver(&a).await? else {
                blocked.insert(a.gatekeeper.clone());
                continue;
            };
            let d = self.claim_and_apply(a.id, &rule_by, true).await?;
            let failed = matches!(d, Decision::Failed { .. });
            out.push(d);
            if failed {
                // An apply failure stops the drain (U3).
                break;
            }
        }
        Ok(out)
    }

    /// The person whose rule auto-approves `a`, if both keys hold now.
    async fn auto_approver(&self, a: &Action) -> anyhow::Result<Option<String>> {
        let (gname, tool, chat) = (a.gatekeeper.clone(), a.tool.clone(), a.chat.clone());
        self.store()
            .run(move |s| {
                let Some(g) = s.gatekeeper(&gname)? else {
                    return Ok(None);
                };
                let Some(t) = g.manifest.tool(&tool) else {
                    return Ok(None);
                };
                // Key one, with the tier read now (K3).
                if !crate::classify::classify(&t.annotations, g.trust).auto_approvable {
                    return Ok(None);
                }
                // A locked-down chat auto-approves nothing (U4).
                if s.chat(&chat)?.is_none_or(|c| c.latched) {
                    return Ok(None);
                }
                // Key two: a person's rule for exactly this tag (U1, A6).
                Ok(s.rule(&format!("{gname}:{tool}"))?.map(|r| r.enabled_by))
            })
            .await
    }
}
