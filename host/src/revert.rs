//! Revert (SPEC H2): undoing an applied action with a new one.
//!
//! A gatekeeper declares, per tool, which of its tools undoes it
//! (`tool-info.reverted-by`: the `issues` gatekeeper's `removeLabel`
//! reverts `addLabel`), called with the same arguments. `gatehouse revert
//! N` (and the inbox's Revert button) stages that call as a *new* action
//! that names the original (the ledger's `reverts`). From there it is an
//! action like any other:
//!
//! - checked as any staged action is: the reverting tool's input schema,
//!   the introduction's grant, the chat's latch and cap, and the credential
//!   of the person asking, who is its principal (SPEC C5: sent with their
//!   own account, never another's);
//! - decided like any other: a person approves it, or both auto-approval
//!   keys hold *for the reverting tool's own annotations* and a rule for
//!   its own tag. Revertibility never weakens either key: a revertible
//!   tool is not thereby auto-approvable, and a revert is not approved
//!   because its original was;
//! - sent at most once through the one send path (the claim): reverting
//!   twice is refused while a revert of the action may still be, or was,
//!   sent; only a rejected or expired one (never sent) makes room for
//!   another.
//!
//! Who may revert is who may decide in the chat (`crate::access`,
//! `Need::Decide`), asked here and again in the staging transaction. A
//! revert can fail when the world moved on (the issue is gone): that
//! failure is recorded and shown like any other.
//!
//! Owns the checks that make an applied action revertible and the revert's
//! staging; may not send anything (the overseer sends).

use crate::access::Need;
use crate::capability::Person;
use crate::classify::{self, Kind};
use crate::principal::{Credential, Principal};
use crate::store::{ActionState, Facts, NewAction, StageError};
use serde::Serialize;

/// A staged revert.
#[derive(Clone, Debug, Serialize)]
pub struct Reverted {
    /// The new action: the revert, pending.
    pub id: i64,
    /// The applied action it undoes.
    pub reverts: i64,
    /// The gatekeeper instance both actions go through.
    pub gatekeeper: String,
    /// The reverting tool.
    pub tool: String,
    /// The chat of the original action, where the revert is staged and decided.
    pub chat: String,
}

impl Reverted {
    /// One line for a terminal or the inbox (names through the sanitiser).
    pub fn line(&self) -> String {
        format!(
            "staged #{} to revert #{} ({}:{} with #{}'s arguments); nothing has been sent. It waits for a decision like any action: `gatehouse show {}`, then `gatehouse approve {}` or `gatehouse reject {}`",
            self.id,
            self.reverts,
            crate::prompt::inline(&self.gatekeeper),
            crate::prompt::inline(&self.tool),
            self.reverts,
            self.id,
            self.id,
            self.id
        )
    }
}

// `RevertRefusal` lives with the staging transaction that gives most of
// its answers (`store::actions`), so the store need not import this module.
pub use crate::store::RevertRefusal;

impl Person<'_> {
    /// Stage a revert of the applied action `id` as `person` (SPEC H2).
    /// `Ok(Err(_))` is a refusal worded for that person; nothing was
    /// staged. A staged revert is drained like any new action (it is
    /// auto-approved only if both keys hold for its own tool).
    pub async fn revert(&self, id: i64) -> anyhow::Result<Result<Reverted, RevertRefusal>> {
        let person = self.name;
        let who = person.to_owned();
        let staged = self.kernel
            .store()
            .run(move |s| {
                let Some(original) = s.action(id)? else {
                    return Ok(Err(RevertRefusal::NotFound(id)));
                };
                let chat = original.chat.clone();
                let access = s.access(&chat, &who)?;
                if let Err(refusal) = access.require(Need::Decide, &chat, &who) {
                    return Ok(Err(if access.may_see() {
                        RevertRefusal::Forbidden { id, refusal }
                    } else {
                        RevertRefusal::NotFound(id)
                    }));
                }
                if original.state != ActionState::Applied {
                    return Ok(Err(RevertRefusal::NotApplied {
                        id,
                        state: original.state,
                    }));
                }
                let cannot = |reason: String| -> anyhow::Result<Result<Reverted, RevertRefusal>> {
                    Ok(Err(RevertRefusal::CannotRevert { id, reason }))
                };
                let key = original.key.clone().unwrap_or_default();
                // Resolved for the person asking: the revert is theirs and
                // goes out with their own account (C5).
                let resolved = match s.resolve(&chat, &key, &who)? {
                    Ok((r, _)) => r,
                    Err(_) => {
                        return cannot(format!(
                            "the key {key} is no longer introduced to chat {chat:?}"
                        ));
                    }
                };
                let g = resolved.gatekeeper.clone();
                if g.name != original.gatekeeper {
                    return cannot(format!(
                        "the key {key} now names another gatekeeper than the one that applied it"
                    ));
                }
                let tag = original.tag();
                let Some(entry) = g.manifest.tool(&original.tool) else {
                    return cannot(format!(
                        "its gatekeeper no longer offers {:?}",
                        crate::prompt::as_given(&original.tool)
                    ));
                };
                let Some(by) = entry.reverted_by.clone() else {
                    return Ok(Err(RevertRefusal::NotRevertible {
                        id,
                        tag: crate::prompt::as_given(&tag),
                    }));
                };
                let shown = format!("{:?}", crate::prompt::as_given(&by));
                let Some(reverting) = g.manifest.tool(&by) else {
                    return cannot(format!(
                        "its gatekeeper names {shown} as the tool that undoes it, but offers no such tool"
                    ));
                };
                if !resolved.grants(&by) {
                    return cannot(format!(
                        "the introduction {key} does not grant {shown}, the tool that undoes it"
                    ));
                }
                // The one classification (K1): a revert is an action; a
                // "reverting" tool declared read-only is refused, never run
                // as a read.
                let class = classify::classify(&reverting.annotations, g.trust);
                if class.kind != Kind::Action {
                    return cannot(format!(
                        "{shown}, the tool that undoes it, is declared read-only, so it cannot undo anything"
                    ));
                }
                if original.args_digest.as_deref()
                    != Some(crate::store::args_digest(&original.args).as_str())
                {
                    return cannot(
                        "its arguments were not kept (a workflow call keeps only their digest)"
                            .into(),
                    );
                }
                if let Err(why) =
                    crate::kernel::check_schema(&reverting.input_schema, &original.args)
                {
                    return cannot(format!("its arguments do not fit {shown}: {why}"));
                }
                if let Credential::Refused(reason) = &resolved.credential {
                    return cannot(reason.clone());
                }
                let Some(facts) = Facts::of(&resolved, &by) else {
                    return cannot(format!("the introduction {key} does not grant {shown}"));
                };
                let args = match crate::store::validate_args(&original.args) {
                    Ok(args) => args,
                    Err(e) => return cannot(format!("its arguments cannot be staged again: {e}")),
                };
                let action = NewAction {
                    chat: chat.clone(),
                    principal: Principal::person(who.clone()),
                    gadget: None,
                    key,
                    gatekeeper: g.name.clone(),
                    tool: by.clone(),
                    classified_by: class.classified_by.as_str(),
                    trust: g.trust,
                    args,
                    // No gadget waits on it, and nothing simulates it.
                    await_decision: true,
                    provisional: None,
                    facts,
                    resolved_at: None,
                };
                Ok(match s.stage_revert(&action, id) {
                    Ok(Ok(new)) => Ok(Reverted {
                        id: new,
                        reverts: id,
                        gatekeeper: g.name.clone(),
                        tool: by,
                        chat,
                    }),
                    Ok(Err(r)) => Err(r),
                    Err(StageError::Store(e)) => return Err(e),
                    Err(e) => Err(RevertRefusal::CannotRevert {
                        id,
                        reason: format!("the revert was not staged: {e}"),
                    }),
                })
            })
            .await?;
        if let Ok(r) = &staged {
            // Decided like any new action: a drain may auto-approve it if,
            // and only if, both keys hold for its own tool (U1).
            self.kernel.drain_in_background(&r.chat);
        }
        Ok(staged)
    }
}
