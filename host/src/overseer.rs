//! The overseer: decisions and apply (SPEC A2, P1-P4).
//!
//! Owns what happens after a person decides: claim durably, send through the
//! gatekeeper, and record the outcome with the failure class of P2. The
//! retry class is decided from what the kernel *saw* leave (the gatekeeper's
//! [`Witness`](crate::runtime::gatekeeper::Witness)), never from the
//! gatekeeper's word alone. May not stage actions or read annotations.

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

    pub fn line(&self) -> String {
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
                    "#{id} failed (retryable: nothing took effect; approve it again to retry): {message}"
                )
            }
            Decision::Failed {
                id,
                message,
                retryable: false,
            } => {
                format!("#{id} failed (not retryable): {message}")
            }
            Decision::Rejected { id } => format!("#{id} rejected; it was never sent"),
            Decision::Refused { id, reason } => format!("#{id} refused: {reason}"),
            Decision::AlreadyApplied { id } => {
                format!("#{id} was already applied; nothing was sent again")
            }
        }
    }
}

impl Kernel {
    /// Approve and apply one action as `by`.
    ///
    /// The claim is committed with `synchronous=FULL` before the gatekeeper
    /// is even instantiated; whoever loses the claim sends nothing (P1).
    pub async fn approve(&self, id: i64, by: &str) -> anyhow::Result<Decision> {
        let owner = self.owner().to_owned();
        let who = by.to_owned();
        let claim = self
            .store()
            .run(move |s| s.claim(id, &owner, &who, false))
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
        self.apply(action).await
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
        let turn = Turn {
            gadget: a.caller.trim_start_matches("gadget:").to_owned(),
            chat: a.chat.clone(),
        };
        let prepared = async {
            let invocation = self.invocation(&turn, &g, &a.tool, a.args.clone()).await?;
            let reach = self.reach(&g).await?;
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
        Ok(match self.store().run(move |s| s.reject(id, &who)).await? {
            Ok(()) => Decision::Rejected { id },
            Err(r) => Decision::Refused {
                id,
                reason: r.to_string(),
            },
        })
    }
}
