//! The action store: stage, claim, finish, reject, recover, prune.
//!
//! Every transition is one conditional UPDATE on the row's current state, so
//! two approvers (threads, processes, the CLI and the web inbox) can never
//! both win: the database decides, not a UI (SPEC P1).
//!
//! The claim is the one gate every send passes (P7). [`Claim`] can only be
//! made by the claim transaction here, and the kernel's one send function
//! takes one by value, so nothing reaches a service that this transaction
//! did not admit. Inside it: who decides (the one authorization rule, or a
//! rule's two keys, or a workflow's approvals), the restricted-data latch,
//! and the revalidation of what was recorded at staging. What it sends with
//! (the gatekeeper's record, the credential) is what it checked.

pub use super::action::{
    Action, ActionState, Args, NewAction, StageError, action_tag, args_digest, validate_args,
};
pub(crate) use super::action::{DECIDED, announce};
use super::dispatch::{Facts, Resolved, Unresolved, resolve};
use super::registry::GatekeeperRecord;
use super::sql::{Row, Sql, args};
use super::stages;
use super::words::{DecisionOutcome, Verdict};
use super::{DEFAULT_EXPIRY_MS, MAX_RESULT_BYTES, Store, now_ms};
use crate::access::{Need, Refusal};
use crate::principal::Credential;
use std::sync::Arc;

/// Who takes a claim, and on what grounds.
#[derive(Clone, Debug)]
pub enum ClaimBy {
    /// A person's own decision; the one authorization rule must let them
    /// decide in the action's chat.
    Person(String),
    /// An auto-approval: both keys must hold now, key two being this rule.
    Rule {
        /// The rule's id.
        id: i64,
        /// The person whose rule it is, recorded as `resolved-by`.
        person: String,
    },
    /// A covered workflow call: every covering request must still be
    /// approved. `authority` names the approvers.
    Workflow {
        /// The approval requests whose allowed calls cover this one.
        requests: Vec<i64>,
        /// Who approved them, recorded as `resolved-by`.
        authority: String,
    },
}

impl ClaimBy {
    fn decision(&self) -> Verdict {
        match self {
            ClaimBy::Person(_) => Verdict::Approved,
            ClaimBy::Rule { .. } => Verdict::AutoApproved,
            ClaimBy::Workflow { .. } => Verdict::WorkflowApproved,
        }
    }

    fn by(&self) -> &str {
        match self {
            ClaimBy::Person(p) | ClaimBy::Rule { person: p, .. } => p,
            ClaimBy::Workflow { authority, .. } => authority,
        }
    }
}

/// A won claim: this caller, alone, may now send the action, with exactly
/// this gatekeeper record and credential (the ones the claim checked).
///
/// Only the store makes one, and it is neither `Clone` nor `Copy`: one
/// claim, one send. Two kinds exist: a decision's claim (the claim
/// transaction), and a *resumed* one, made only by `Store::recover` for
/// an interrupted send of a tool whose service honours the kernel's
/// idempotency key: the same action, re-sent under the same key.
pub struct Claim {
    action: Action,
    gatekeeper: Arc<GatekeeperRecord>,
    credential: Credential,
    resumed: bool,
}

impl Claim {
    /// The action claimed, in state `applying`.
    pub fn action(&self) -> &Action {
        &self.action
    }

    /// Whether this claim resumes a send a dead process had begun (its
    /// request may have reached the service; the idempotency key makes
    /// the service apply it at most once).
    pub fn is_resumed(&self) -> bool {
        self.resumed
    }

    pub(crate) fn gatekeeper(&self) -> &Arc<GatekeeperRecord> {
        &self.gatekeeper
    }

    pub(crate) fn credential(&self) -> &Credential {
        &self.credential
    }
}

/// Why a claim was not granted. Nothing was sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimRefusal {
    /// Also what a person who may not see the action's chat is told.
    #[error("action #{0} does not exist (or was pruned)")]
    NoSuchAction(i64),
    /// It was applied already: at most once (P1).
    #[error("action #{0} was already applied; nothing was sent again")]
    AlreadyApplied(i64),
    /// Another claimer holds it right now.
    #[error("action #{0} is being applied by another approval right now; nothing was sent again")]
    Applying(i64),
    /// It was rejected: never sent.
    #[error(
        "action #{0} was rejected; a rejected action is never sent (stage it again if you changed your mind)"
    )]
    Rejected(i64),
    /// It failed without proof of no effect: never resent on its own (P2).
    #[error(
        "action #{0} failed and may have reached the service, so it is never resent: check the service and re-stage it if needed"
    )]
    FailedFinal(i64),
    /// It expired before a decision (H3).
    #[error("action #{0} expired before anyone decided it; it was never sent")]
    Expired(i64),
    /// The claimer may not decide in the action's chat (SPEC W), checked
    /// inside the claim transaction.
    #[error("action #{id}: {refusal}")]
    Forbidden {
        /// The action.
        id: i64,
        /// What the one authorization rule answered.
        refusal: crate::access::Refusal,
    },
    /// The chat's latch closed since staging (O3).
    #[error(
        "action #{id} was not sent: chat {chat:?} is locked down (it read owner-only data), so nothing leaves it"
    )]
    LockedDown {
        /// The action.
        id: i64,
        /// Its chat, whose latch closed.
        chat: String,
    },
    /// Something it is dispatched with changed since staging (P7): it is
    /// pending again for a fresh decision.
    #[error(
        "action #{id} was not sent: {note} since it was staged; it is pending again, so review it (`gatehouse show {id}`) and decide again"
    )]
    Changed {
        /// The action, now pending again.
        id: i64,
        /// What changed (also kept as the action's `note`).
        note: String,
    },
    /// The claim cannot be sent as checked.
    #[error("action #{id} cannot be sent: {reason}; nothing was sent")]
    CannotSend {
        /// The action.
        id: i64,
        /// Why: its key is no longer introduced or no longer grants the
        /// tool, its gatekeeper was removed, no credential may be used, or
        /// a covering workflow approval was withdrawn.
        reason: String,
    },
    /// A rule tried to claim it, but a key of the two no longer holds (or
    /// it changed since staging): it stays pending for a person.
    #[error("action #{id} needs a person: {reason}")]
    NeedsPerson {
        /// The action, still pending.
        id: i64,
        /// Which condition of the auto-approval failed.
        reason: String,
    },
}

pub(super) const ACTION_COLUMNS: &str =
    "id, chat, caller, person, gadget, intro_key, gatekeeper, tool, classified_by, trust, args,
    args_digest, state, await_decision, retryable, result, error, auto_approved, resolved_by,
    note, account, created_at, decided_at, finished_at, reverts";

pub(super) fn action_from(r: &Row) -> anyhow::Result<Action> {
    let state: String = r.get(12)?;
    Ok(Action {
        id: r.get(0)?,
        chat: r.get(1)?,
        caller: r.get(2)?,
        person: r.get(3)?,
        gadget: r.get(4)?,
        key: r.get(5)?,
        gatekeeper: r.get::<Option<String>>(6)?.unwrap_or_default(),
        tool: r.get::<Option<String>>(7)?.unwrap_or_default(),
        classified_by: r.get::<Option<String>>(8)?.unwrap_or_default(),
        trust: r.get::<Option<String>>(9)?.unwrap_or_default(),
        args: r.get::<Option<String>>(10)?.unwrap_or_default(),
        args_digest: r.get(11)?,
        state: ActionState::parse(&state)?,
        await_decision: r.get::<Option<bool>>(13)? == Some(true),
        retryable: r.get(14)?,
        result: r.get(15)?,
        error: r.get(16)?,
        auto_approved: r.get(17)?,
        resolved_by: r.get(18)?,
        note: r.get(19)?,
        account: r.get(20)?,
        created_at: r.get(21)?,
        decided_at: r.get(22)?,
        finished_at: r.get(23)?,
        reverts: r.get(24)?,
    })
}

fn actions_from(rows: Vec<Row>) -> anyhow::Result<Vec<Action>> {
    rows.iter().map(action_from).collect()
}

fn action_in(db: &dyn Sql, id: i64) -> anyhow::Result<Option<Action>> {
    db.row(
        &format!("SELECT {ACTION_COLUMNS} FROM ledger WHERE id = ?1 AND kind = 'action'"),
        args![id],
    )?
    .as_ref()
    .map(action_from)
    .transpose()
}

/// The pending actions of `chat` at gatekeeper `g`, oldest first.
pub(super) fn pending_at(db: &dyn Sql, chat: &str, g: &str) -> anyhow::Result<Vec<Action>> {
    // What expired (H3) will never happen: no overlay shows it.
    actions_from(db.rows(
        &format!(
            "SELECT {ACTION_COLUMNS} FROM ledger
             WHERE chat = ?1 AND kind = 'action' AND state = 'pending' AND gatekeeper = ?2
               AND created_at + COALESCE(
                     (SELECT expire_after_ms FROM chats WHERE chats.name = ?1), ?3) > ?4
             ORDER BY id"
        ),
        args![chat, g, DEFAULT_EXPIRY_MS, now_ms()],
    )?)
}

/// The newest revert of `original` that was not rejected or expired, with
/// its state: one that may still be sent, is being sent, or was sent.
fn live_revert_in(db: &dyn Sql, original: i64) -> anyhow::Result<Option<(i64, ActionState)>> {
    db.row(
        "SELECT id, state FROM ledger
         WHERE reverts = ?1 AND kind = 'action' AND state NOT IN ('rejected', 'expired')
         ORDER BY id DESC LIMIT 1",
        args![original],
    )?
    .map(|r| Ok((r.get(0)?, ActionState::parse(&r.get::<String>(1)?)?)))
    .transpose()
}

/// Whether the pending action `a` is past its chat's expiry now.
fn is_due(db: &dyn Sql, a: &Action) -> anyhow::Result<bool> {
    // Only a pending action falls due: a decided one's chat is not asked
    // (a round trip on a shared database).
    if a.state != ActionState::Pending {
        return Ok(false);
    }
    Ok(is_due_after(a, stages::expiry(db, &a.chat)?))
}

/// Whether the pending action `a` is past `expiry` (its chat's) now.
fn is_due_after(a: &Action, expiry: i64) -> bool {
    a.state == ActionState::Pending && a.created_at.saturating_add(expiry) <= now_ms()
}

/// The action `id` as its claim first reads it, with what the claim
/// checks of it beside its columns: the facts recorded at staging (none
/// when it was staged before facts were kept, or they do not read), and
/// its chat's expiry (the chat's own, else [`DEFAULT_EXPIRY_MS`], as
/// [`stages::expiry`]). One statement where three were: on a shared
/// database each is a round trip.
fn claim_read(db: &dyn Sql, id: i64) -> anyhow::Result<Option<(Action, Option<Facts>, i64)>> {
    let Some(r) = db.row(
        &format!(
            "SELECT {ACTION_COLUMNS}, facts,
               (SELECT expire_after_ms FROM chats WHERE chats.name = ledger.chat)
             FROM ledger WHERE id = ?1 AND kind = 'action'"
        ),
        args![id],
    )?
    else {
        return Ok(None);
    };
    // After the action's own columns ([`action_from`]).
    let facts = r
        .get::<Option<String>>(25)?
        .and_then(|f| serde_json::from_str(&f).ok());
    let expiry = r.get::<Option<i64>>(26)?.unwrap_or(DEFAULT_EXPIRY_MS);
    Ok(Some((action_from(&r)?, facts, expiry)))
}

/// A covered workflow call, staged and claimed at once, or found already
/// made under the same logical key (SPEC G8).
pub enum Staged {
    /// Claimed now: send it.
    Claimed(Claim),
    /// The same logical call was made before; this is how it ended (or
    /// stands). Nothing is sent again.
    Made(Action),
}

impl Store {
    /// A covered workflow call (SPEC G5, G8): staged under `logical_key`
    /// and claimed by `by` in one transaction, through the same claim as
    /// every other send. If that logical call was made before (a re-run of
    /// its step), nothing is staged or claimed again: its row is returned,
    /// unless it provably never took effect (retryable), in which case it
    /// is claimed again.
    pub fn stage_claimed(
        &self,
        a: &NewAction,
        logical_key: &str,
        by: &ClaimBy,
        owner: &str,
    ) -> Result<Result<Staged, ClaimRefusal>, StageError> {
        /// Why the staging transaction is rolled back: a fresh row whose
        /// claim was refused is not kept (no ghost pending entries, A3).
        enum Undone {
            Refused(ClaimRefusal),
            Failed(StageError),
        }
        impl From<anyhow::Error> for Undone {
            fn from(e: anyhow::Error) -> Undone {
                Undone::Failed(StageError::Store(e))
            }
        }
        impl From<StageError> for Undone {
            fn from(e: StageError) -> Undone {
                Undone::Failed(e)
            }
        }
        let staged = self.write_durable(|db| -> Result<_, Undone> {
            let existing: Option<i64> = db
                .row(
                    "SELECT id FROM ledger WHERE logical_key = ?1",
                    args![logical_key],
                )?
                .map(|r| r.get(0))
                .transpose()?;
            let (id, fresh) = match existing {
                Some(id) => {
                    let Some(made) = action_in(db, id)? else {
                        return Err(StageError::Refused(format!(
                            "the earlier attempt of this call (#{id}) vanished"
                        ))
                        .into());
                    };
                    let again = made.state == ActionState::Pending
                        || (made.state == ActionState::Failed && made.retryable == Some(true));
                    if !again {
                        return Ok(Ok(Staged::Made(made)));
                    }
                    (id, false)
                }
                None => {
                    stages::admit(db, a)?;
                    (stages::insert(db, a, Some(logical_key), None)?, true)
                }
            };
            // An earlier row keeps what a refused claim wrote (a
            // revalidation note); a fresh one is rolled back.
            match claim_in(db, id, by, owner)? {
                Err(refused) if fresh => Err(Undone::Refused(refused)),
                claimed => Ok(claimed.map(Staged::Claimed)),
            }
        });
        match staged {
            Ok(Ok(Staged::Claimed(mut claim))) => {
                // The row keeps a digest; the send gets the arguments.
                claim.action.args = a.args.as_str().to_owned();
                Ok(Ok(Staged::Claimed(claim)))
            }
            Ok(other) => Ok(other),
            Err(Undone::Refused(refused)) => Ok(Err(refused)),
            Err(Undone::Failed(e)) => Err(e),
        }
    }

    /// Stage `a`, a revert of the applied action `original` (SPEC H2): a new
    /// action naming it, pending like any other. In one durable
    /// transaction: the one authorization rule (whoever may decide in the
    /// chat may revert there), that the original is applied, that no other
    /// revert of it may still be or was sent (reverting twice sends
    /// once), and the chat's latch and cap.
    pub fn stage_revert(
        &self,
        a: &NewAction,
        original: i64,
    ) -> Result<Result<i64, RevertRefusal>, StageError> {
        let by = a.principal.acting_for().to_owned();
        // What the refusals read before them may be committed: an action
        // found past its expiry is marked so whatever the answer (H3).
        self.write_durable(|tx| {
            let Some(o) = action_in(tx, original)? else {
                return Ok(Err(RevertRefusal::NotFound(original)));
            };
            let access = super::sharing::access(tx, &o.chat, &by)?;
            if let Err(refusal) = access.require(Need::Decide, &o.chat, &by) {
                return Ok(Err(if access.may_see() {
                    RevertRefusal::Forbidden {
                        id: original,
                        refusal,
                    }
                } else {
                    RevertRefusal::NotFound(original)
                }));
            }
            if o.state != ActionState::Applied {
                return Ok(Err(RevertRefusal::NotApplied {
                    id: original,
                    state: o.state,
                }));
            }
            if o.chat != a.chat {
                return Ok(Err(RevertRefusal::CannotRevert {
                    id: original,
                    reason: "a revert is staged in the chat of the action it undoes".into(),
                }));
            }
            // A revert that expired unseen is not a live one (H3).
            stages::expire_due(tx, Some(&a.chat))?;
            if let Some((revert, state)) = live_revert_in(tx, original)? {
                return Ok(Err(RevertRefusal::AlreadyReverted {
                    id: original,
                    revert,
                    state,
                }));
            }
            stages::admit(tx, a)?;
            let id = stages::insert(tx, a, None, Some(original))?;
            Ok(Ok(id))
        })
    }

    /// How long actions of `chat` may wait for a decision (SPEC H3), in
    /// milliseconds.
    pub fn expiry(&self, chat: &str) -> anyhow::Result<i64> {
        self.with(|db| stages::expiry(db, chat))
    }

    /// Set how long actions of `chat` may wait for a decision, as `by`: the
    /// chat's owner only (the one rule's `Manage`, asked in the same
    /// transaction). Pending actions already past the new expiry expire
    /// now.
    ///
    /// Once due, an action is expired for good (H3): a longer expiry never
    /// brings back one that was past the old expiry, even if nothing had
    /// looked at it yet (expiry is marked as pending work is read, so a
    /// due action may still read `pending` in the table). So what is due
    /// under the old expiry is marked first, in the same transaction as
    /// the change: no sender can see the longer expiry without that mark.
    /// The approval requests of the chat's workflow runs follow the same
    /// rule.
    pub fn set_expiry(&self, chat: &str, by: &str, ms: i64) -> anyhow::Result<()> {
        self.write(|tx| {
            super::sharing::access(tx, chat, by)?.require(Need::Manage, chat, by)?;
            let runs = super::workflows::RequestScope::Chat(chat);
            stages::expire_due(tx, Some(chat))?;
            super::workflows::expire_due_requests_in(tx, runs, now_ms())?;
            tx.exec(
                "UPDATE chats SET expire_after_ms = ?2 WHERE name = ?1",
                args![chat, ms],
            )?;
            stages::expire_due(tx, Some(chat))?;
            super::workflows::expire_due_requests_in(tx, runs, now_ms())?;
            Ok(())
        })
    }

    /// One action. A pending action past its chat's expiry is marked
    /// `expired` as it is read (SPEC H3: the clock decided, not the reader).
    pub fn action(&self, id: i64) -> anyhow::Result<Option<Action>> {
        self.with(|db| match action_in(db, id)? {
            Some(a) if is_due(db, &a)? => {
                stages::expire(db, id)?;
                stages::prune(db, &a.chat)?;
                action_in(db, id)
            }
            a => Ok(a),
        })
    }

    /// The newest revert of `original` that was not rejected or expired
    /// (one that may still be, or was, sent), with its state.
    pub fn revert_of(&self, original: i64) -> anyhow::Result<Option<(i64, ActionState)>> {
        self.with(|db| live_revert_in(db, original))
    }

    /// Pending actions of one chat, oldest first (what expired is marked
    /// so first, H3).
    pub fn pending_in(&self, chat: &str) -> anyhow::Result<Vec<Action>> {
        self.with(|db| {
            stages::expire_due(db, Some(chat))?;
            actions_from(db.rows(
                &format!(
                    "SELECT {ACTION_COLUMNS} FROM ledger
                     WHERE chat = ?1 AND kind = 'action' AND state = 'pending' ORDER BY id"
                ),
                args![chat],
            )?)
        })
    }

    /// Pending actions of every chat, oldest first.
    pub fn pending_all(&self) -> anyhow::Result<Vec<Action>> {
        self.with(|db| {
            stages::expire_due(db, None)?;
            actions_from(db.rows(
                &format!(
                    "SELECT {ACTION_COLUMNS} FROM ledger
                     WHERE state = 'pending' AND kind = 'action' ORDER BY id"
                ),
                args![],
            )?)
        })
    }

    /// Claim an action for sending, durably, before anything leaves (SPEC
    /// P1, P7). `owner` names the claiming process so that recovery can tell
    /// a live claim from an interrupted one.
    ///
    /// Claimable: `pending`, or `failed` with `retryable = 1` (the kernel
    /// proved the earlier attempt never took effect).
    pub fn claim(
        &self,
        id: i64,
        by: &ClaimBy,
        owner: &str,
    ) -> anyhow::Result<Result<Claim, ClaimRefusal>> {
        // The one commit that must survive a power cut: the claim is on disk
        // before the request can leave, so a crash can only lose a send,
        // never repeat one. A revalidation that sent the action back to
        // pending wrote its note and the current facts: they are kept.
        // How it reaches its engine is the engine's (`Store::claiming`).
        self.claiming(|db, way| claim_with(db, id, by, owner, way))
    }

    /// Record a successful apply. The state is written first, in its own
    /// commit, then the result: an unstorable result still leaves the action
    /// `applied` (SPEC P2). Whether the ledger took this outcome (see
    /// [`Store::finish_claim`]).
    pub fn finish_applied(&self, id: i64, result: &str) -> anyhow::Result<bool> {
        let stored = if result.len() > MAX_RESULT_BYTES {
            serde_json::json!({
                "note": format!(
                    "the result was {} bytes, over the 131072-byte limit, and was not kept",
                    result.len()
                )
            })
            .to_string()
        } else {
            match serde_json::from_str::<serde_json::Value>(result) {
                Ok(_) => result.to_owned(),
                Err(e) => serde_json::json!({
                    "note": format!("the service's result was not readable JSON ({e}); the action was applied")
                })
                .to_string(),
            }
        };
        // The state and its decision's outcome stand or fall together.
        self.finish_claim(id, None, Some(&stored))
    }

    /// Record a failed apply. Whether the ledger took this outcome.
    pub fn finish_failed(&self, id: i64, message: &str, retryable: bool) -> anyhow::Result<bool> {
        self.finish_claim(id, Some((message, retryable)), None)
    }

    /// Reject a pending action as `by`: it will never be sent (SPEC A2).
    /// Whoever may not decide in its chat is refused, in the transaction.
    pub fn reject(&self, id: i64, by: &str) -> anyhow::Result<Result<(), ClaimRefusal>> {
        let rejected = self.write(|tx| reject_in(tx, id, by))?;
        if rejected.is_ok() {
            self.prune_of(id)?;
        }
        Ok(rejected)
    }

    /// Recover every claim whose process is gone (SPEC P3). Only claims of
    /// dead processes are touched, never a live one's.
    ///
    /// The request may have left, so such a claim is never sent again as
    /// if new. Two outcomes:
    /// - its tool's service honours the kernel's idempotency key as SPEC P9
    ///   believes it (key one, the declaration, the operator's word), the
    ///   action's own arguments are kept, and nothing it would be sent with
    ///   changed (P7, the latch included): when `resume_as` names this
    ///   process, the claim passes to it (one conditional UPDATE, so two
    ///   starting processes never both take it) and comes back as a
    ///   resumed [`Claim`], to be re-sent with the same key through the one
    ///   send path; the service applies it at most once, so the action ends
    ///   applied exactly once;
    /// - anything else: `failed`, not retryable, as ever. With `resume_as`
    ///   `None` (no way to send now), a resumable claim is left for the
    ///   next process that can.
    pub fn recover(
        &self,
        is_present: &super::IsPresent<'_>,
        resume_as: Option<&str>,
    ) -> anyhow::Result<Recovered> {
        let claims = self.with(super::claims::open)?;
        let mut out = Recovered::default();
        for (id, owner) in claims {
            // Asked in the recovery's own transaction: on a shared
            // database, on the connection that then writes.
            let recovered = self.write_durable(|tx| match owner.as_deref() {
                Some(host) if is_present(tx, host)? => Ok(Interrupted::Left),
                _ => recover_in(tx, id, owner.as_deref(), resume_as),
            })?;
            match recovered {
                // Left as it was: the transaction wrote nothing.
                Interrupted::Left => {}
                Interrupted::Resumed(claim) => out.resumed.push(*claim),
                Interrupted::Failed => out.failed.push(id),
            }
        }
        Ok(out)
    }

    /// The claims in flight, each with whether its process lives.
    pub fn in_flight(
        &self,
        is_present: &super::IsPresent<'_>,
    ) -> anyhow::Result<Vec<super::InFlight>> {
        self.with(|db| super::claims::in_flight(db, is_present))
    }

    /// Keep the newest finished actions of `id`'s chat; never prune open
    /// ones (SPEC P5). The decision history is kept regardless. (A shared
    /// database does it in one statement: `Store::prune_of`.)
    pub(super) fn prune_of_in(&self, id: i64) -> anyhow::Result<u64> {
        self.with(|db| {
            let Some(chat) = db.row("SELECT chat FROM ledger WHERE id = ?1", args![id])? else {
                return Ok(0);
            };
            stages::prune(db, &chat.get::<String>(0)?)
        })
    }
}

/// What `Store::recover` did with the claims of dead processes.
#[derive(Default)]
pub struct Recovered {
    /// Failed, not retryable: their requests may have reached the service.
    pub failed: Vec<i64>,
    /// Taken over by this process, to be re-sent with the same
    /// idempotency key.
    pub resumed: Vec<Claim>,
}

/// Reject the pending action `id` as `by`, in the caller's transaction,
/// which the caller commits whatever the answer (an action found past its
/// expiry is marked so). Whoever may not decide in its chat is refused.
/// The rejection is one conditional update, like a claim: of a rejection
/// and an approval at once, on any engine, exactly one decides, and only
/// the one that changed the row records a decision.
fn reject_in(tx: &dyn Sql, id: i64, by: &str) -> anyhow::Result<Result<(), ClaimRefusal>> {
    let Some(a) = action_in(tx, id)? else {
        return Ok(Err(ClaimRefusal::NoSuchAction(id)));
    };
    let access = super::sharing::access(tx, &a.chat, by)?;
    if let Err(refusal) = access.require(Need::Decide, &a.chat, by) {
        return Ok(Err(if access.may_see() {
            ClaimRefusal::Forbidden { id, refusal }
        } else {
            ClaimRefusal::NoSuchAction(id)
        }));
    }
    if a.state != ActionState::Pending {
        return Ok(Err(refusal_for(&a)));
    }
    if is_due(tx, &a)? {
        // It expired before this decision (H3): it stays expired.
        stages::expire(tx, id)?;
        return Ok(Err(ClaimRefusal::Expired(id)));
    }
    let now = now_ms();
    let changed = tx.exec(
        "UPDATE ledger SET state = 'rejected', resolved_by = ?2, decided_at = ?3,
           finished_at = ?3
         WHERE id = ?1 AND kind = 'action' AND state = 'pending'",
        args![id, by, now],
    )?;
    if changed != 1 {
        // Decided meanwhile by someone else (on PostgreSQL the row was
        // read before a concurrent claim committed): that decision stands.
        return Ok(Err(match action_in(tx, id)? {
            Some(now) => refusal_for(&now),
            None => ClaimRefusal::NoSuchAction(id),
        }));
    }
    record_decision(
        tx,
        &a,
        Verdict::Rejected,
        by,
        Some(DecisionOutcome::Rejected),
    )?;
    Ok(Ok(()))
}

/// What recovery did with one interrupted claim.
pub(crate) enum Interrupted {
    /// Nothing: finished meanwhile, taken by another recoverer, or
    /// resumable with no way to send now. Nothing to commit.
    Left,
    /// Passed to the recovering process, to be re-sent with the same key.
    Resumed(Box<Claim>),
    /// Failed, not retryable: its request may have reached the service.
    Failed,
}

/// Recover the claim of action `id`, held by `owner`, whose process or
/// host is gone (SPEC P3), in the caller's transaction: resumed as
/// `resume_as` when it may be re-sent with the same idempotency key (see
/// [`resumable`]), else failed for good. Both engines run this; the caller
/// decides who is gone (lock files in a home, presence in a shared
/// database) and commits unless it is [`Interrupted::Left`].
pub(crate) fn recover_in(
    tx: &dyn Sql,
    id: i64,
    owner: Option<&str>,
    resume_as: Option<&str>,
) -> anyhow::Result<Interrupted> {
    let Some(a) = action_in(tx, id)? else {
        return Ok(Interrupted::Left);
    };
    if a.state != ActionState::Applying {
        return Ok(Interrupted::Left); // finished meanwhile
    }
    match (resumable(tx, &a)?, resume_as) {
        (Some(_), None) => return Ok(Interrupted::Left),
        (Some((gatekeeper, credential)), Some(to)) => {
            if !super::claims::pass(tx, id, owner, to)? {
                return Ok(Interrupted::Left);
            }
            return Ok(Interrupted::Resumed(Box::new(Claim {
                action: a,
                gatekeeper,
                credential,
                resumed: true,
            })));
        }
        (None, _) => {}
    }
    if !super::claims::interrupt(tx, id, owner, now_ms())? {
        return Ok(Interrupted::Left);
    }
    record_outcome(tx, id, DecisionOutcome::Failed)?;
    Ok(Interrupted::Failed)
}

/// Whether the interrupted claim of `a` may be re-sent, and with what: its
/// tool's service honours the idempotency key, believed only as SPEC P9
/// says (key one, the gatekeeper's declaration now and the operator's
/// statement; [`crate::classify::resend_believed`]), the action's arguments are kept (a workflow call keeps only a
/// digest, G7), the chat is not latched (O3), and nothing it would be sent
/// with changed since it was staged (P7), so the re-send is the very
/// request that was decided. The decision itself is not taken again: it
/// was made, and this completes its send.
fn resumable(
    tx: &dyn Sql,
    a: &Action,
) -> anyhow::Result<Option<(Arc<GatekeeperRecord>, Credential)>> {
    let Some(r) = tx.row(
        "SELECT logical_key, facts FROM ledger WHERE id = ?1",
        args![a.id],
    )?
    else {
        return Ok(None);
    };
    let (logical_key, staged): (Option<String>, Option<String>) = (r.get(0)?, r.get(1)?);
    if logical_key.is_some() || a.args_digest.as_deref() != Some(args_digest(&a.args).as_str()) {
        return Ok(None);
    }
    if super::registry::chat_in(tx, &a.chat)?.is_none_or(|c| c.latched) {
        return Ok(None);
    }
    let key = a.key.clone().unwrap_or_default();
    let Ok(current) = resolve(tx, &a.chat, &key, &a.person)? else {
        return Ok(None);
    };
    // The guest's declaration is believed only under key one and the
    // operator's own statement for this instance (SPEC P9).
    let g = &current.gatekeeper;
    let believed = g.manifest.tool(&a.tool).is_some_and(|t| {
        crate::classify::resend_believed(
            t,
            g.trust,
            crate::idempotency::operator_says_honoured(&g.settings),
        )
    });
    let Some(now) = Facts::of(&current, &a.tool).filter(|_| believed) else {
        return Ok(None);
    };
    if matches!(current.credential, Credential::Refused(_)) {
        return Ok(None);
    }
    let Some(staged) = staged.and_then(|f| serde_json::from_str::<Facts>(&f).ok()) else {
        return Ok(None);
    };
    if !staged
        .changes(&now, &a.gatekeeper, &a.tool, &key)
        .is_empty()
    {
        return Ok(None);
    }
    Ok(Some((current.gatekeeper, current.credential)))
}

/// Why a row in a non-claimable state refuses a claim.
fn refusal_for(a: &Action) -> ClaimRefusal {
    match a.state {
        ActionState::Applied => ClaimRefusal::AlreadyApplied(a.id),
        ActionState::Applying => ClaimRefusal::Applying(a.id),
        ActionState::Rejected => ClaimRefusal::Rejected(a.id),
        ActionState::Expired => ClaimRefusal::Expired(a.id),
        ActionState::Failed | ActionState::Pending => ClaimRefusal::FailedFinal(a.id),
    }
}

/// How a claim reaches its engine, as the store's engine chooses
/// (`Store::claiming`): how it resolves the action's key now, and how it
/// takes the action. Its checks are [`claim_with`]'s, on either.
pub(super) struct Claiming<'a> {
    /// Resolve the key as things are now (`dispatch::resolve`, or a
    /// resolution kept under the policy epoch read now).
    pub resolve: &'a ResolveNow<'a>,
    /// Take the action (see [`Taking`]): the action as it is once taken,
    /// `None` when another decided it first.
    pub take: &'a TakeNow<'a>,
}

/// How a claim resolves the action's key (chat, key, person) as things
/// are now.
pub(super) type ResolveNow<'a> =
    dyn Fn(&dyn Sql, &str, &str, &str) -> anyhow::Result<Result<Arc<Resolved>, Unresolved>> + 'a;

/// How a claim takes the action (see [`Claiming::take`]).
pub(super) type TakeNow<'a> = dyn Fn(&dyn Sql, &Taking<'_>) -> anyhow::Result<Option<Action>> + 'a;

impl Claiming<'static> {
    /// In the caller's transaction, on either engine: resolved afresh,
    /// taken by [`take_in`].
    pub(super) fn in_transaction() -> Claiming<'static> {
        Claiming {
            resolve: &|db, chat, key, person| Ok(resolve(db, chat, key, person)?.map(Arc::new)),
            take: &take_in,
        }
    }
}

/// What taking an action needs, once every check passed.
pub(super) struct Taking<'a> {
    /// The action as the claim read it.
    pub action: &'a Action,
    /// The process that takes it (for recovery).
    pub owner: &'a str,
    /// Who decided it, recorded as `resolved-by`.
    pub by: &'a str,
    /// The decision recorded.
    pub decision: Verdict,
    /// Taken by a rule's two keys.
    pub auto: bool,
    /// When.
    pub now: i64,
}

/// Take the action in the caller's transaction: the conditional update
/// ([`super::claims::take`]), then its decision's record, then the row as
/// it is now.
pub(super) fn take_in(tx: &dyn Sql, t: &Taking<'_>) -> anyhow::Result<Option<Action>> {
    let id = t.action.id;
    if !super::claims::take(tx, id, t.owner, t.by, t.auto, t.now)? {
        return Ok(None);
    }
    record_decision(tx, t.action, t.decision, t.by, None)?;
    action_in(tx, id)?
        .map(Some)
        .ok_or_else(|| anyhow::anyhow!("action #{id} vanished in the transaction that claimed it"))
}

/// The claim itself, in the caller's IMMEDIATE transaction
/// ([`Claiming::in_transaction`]).
fn claim_in(
    tx: &dyn Sql,
    id: i64,
    by: &ClaimBy,
    owner: &str,
) -> anyhow::Result<Result<Claim, ClaimRefusal>> {
    claim_with(tx, id, by, owner, &Claiming::in_transaction())
}

/// The claim itself, reaching its engine the `way` the engine chose. On
/// refusal the caller still commits: a revalidation that sent the action
/// back to pending records what changed, and an action found past its
/// expiry stays expired. Each such write is one statement, so on a shared
/// database, where the reads run each on its own (under READ COMMITTED a
/// transaction would give them nothing more), it is its own commit.
pub(super) fn claim_with(
    tx: &dyn Sql,
    id: i64,
    by: &ClaimBy,
    owner: &str,
    way: &Claiming<'_>,
) -> anyhow::Result<Result<Claim, ClaimRefusal>> {
    let Some((a, staged, expiry)) = claim_read(tx, id)? else {
        return Ok(Err(ClaimRefusal::NoSuchAction(id)));
    };
    // Who decides, first: someone who may not see the chat learns nothing,
    // not even what state the action is in (W2). A person's standing is
    // read with the chat's latch, which is checked below.
    let mut latched = None;
    if let ClaimBy::Person(person) = by {
        let access = super::sharing::access(tx, &a.chat, person)?;
        if let Err(refusal) = access.require(Need::Decide, &a.chat, person) {
            return Ok(Err(if access.may_see() {
                ClaimRefusal::Forbidden { id, refusal }
            } else {
                ClaimRefusal::NoSuchAction(id)
            }));
        }
        latched = Some(access.latched());
    }
    let claimable = a.state == ActionState::Pending
        || (a.state == ActionState::Failed && a.retryable == Some(true));
    if !claimable {
        return Ok(Err(refusal_for(&a)));
    }
    // Past its chat's expiry it is never sent, whoever claims it (H3): the
    // caller commits, so it stays expired.
    if is_due_after(&a, expiry) {
        stages::expire(tx, id)?;
        return Ok(Err(ClaimRefusal::Expired(id)));
    }
    let latched = match latched {
        Some(latched) => latched,
        // No chat is as good as latched: nothing leaves for it.
        None => super::registry::chat_in(tx, &a.chat)?.is_none_or(|c| c.latched),
    };
    if latched {
        // The latch is checked on every egress path (O3, U4).
        return Ok(Err(ClaimRefusal::LockedDown {
            id,
            chat: a.chat.clone(),
        }));
    }
    // Revalidate what was recorded at staging (P7), as things are now.
    let key = a.key.clone().unwrap_or_default();
    let current = match (way.resolve)(tx, &a.chat, &key, &a.person)? {
        Ok(r) => r,
        Err(Unresolved::UnknownKey { .. }) => {
            return Ok(Err(ClaimRefusal::CannotSend {
                id,
                reason: format!("the key {key} is no longer introduced to chat {:?}", a.chat),
            }));
        }
        Err(Unresolved::Removed { .. }) => {
            return Ok(Err(ClaimRefusal::CannotSend {
                id,
                reason: format!("the gatekeeper behind {key} was removed"),
            }));
        }
        Err(Unresolved::NoStanding { .. }) => {
            // Sent only with its stager's own accounts (C5), and only
            // while they may act in the chat: a collaborator removed
            // since is never acted for.
            return Ok(Err(ClaimRefusal::CannotSend {
                id,
                reason: format!(
                    "{}, who staged it, may no longer act in chat {:?} (removed, or not re-verified since)",
                    a.person, a.chat
                ),
            }));
        }
    };
    let Some(now) = Facts::of(&current, &a.tool) else {
        return Ok(Err(ClaimRefusal::CannotSend {
            id,
            reason: format!("{key} no longer grants the tool {}", a.tool),
        }));
    };
    if let Credential::Refused(reason) = &current.credential {
        return Ok(Err(ClaimRefusal::CannotSend {
            id,
            reason: reason.clone(),
        }));
    }
    let changes = match &staged {
        Some(staged) => staged.changes(&now, &a.gatekeeper, &a.tool, &key),
        // Staged before facts were kept: what was agreed is unknown.
        None => vec!["what it would be sent with was not recorded".to_owned()],
    };
    if !changes.is_empty() {
        let note = changes.join("; ");
        tx.exec(
            "UPDATE ledger SET facts = ?2, note = ?3, trust = ?4, account = ?5
             WHERE id = ?1 AND state IN ('pending', 'failed')",
            args![
                id,
                serde_json::to_string(&now)?,
                note,
                current.gatekeeper.trust.as_str(),
                now.account
            ],
        )?;
        return Ok(Err(ClaimRefusal::Changed { id, note }));
    }
    match by {
        ClaimBy::Person(_) => {}
        ClaimBy::Rule { id: rule, person } => {
            // Once what it would be sent with changed under it, a person
            // decides it: a rule never sends what a revalidation held.
            if a.note.is_some() {
                return Ok(Err(ClaimRefusal::NeedsPerson {
                    id,
                    reason: "it changed since it was staged; a person decides it".into(),
                }));
            }
            if let Some(earlier) = super::claims::waiting_before(tx, id)? {
                return Ok(Err(ClaimRefusal::NeedsPerson {
                    id,
                    reason: format!("it waits behind action {earlier} of the same queue (U2)"),
                }));
            }
            if let Some(reason) = auto_refusal(tx, &a, &current, *rule, person)? {
                return Ok(Err(ClaimRefusal::NeedsPerson { id, reason }));
            }
        }
        ClaimBy::Workflow { requests, .. } => {
            // Each distinct request once: a list naming one twice counts
            // it once, and so falls short of its length, as it always did.
            let distinct: std::collections::BTreeSet<i64> = requests.iter().copied().collect();
            let mut approved = 0;
            for request in distinct {
                approved += tx
                    .row(
                        "SELECT count(*) FROM approval_requests WHERE id = ?1 AND state = 'approved'",
                        args![request],
                    )?
                    .map_or(Ok(0), |r| r.get::<i64>(0))?;
            }
            if requests.is_empty() || approved != requests.len() as i64 {
                return Ok(Err(ClaimRefusal::CannotSend {
                    id,
                    reason: "an approval covering this step is no longer approved".into(),
                }));
            }
        }
    }
    let taking = Taking {
        action: &a,
        owner,
        by: by.by(),
        decision: by.decision(),
        auto: matches!(by, ClaimBy::Rule { .. }),
        now: now_ms(),
    };
    let Some(action) = (way.take)(tx, &taking)? else {
        // Decided meanwhile by someone else (another claimer, or, on
        // PostgreSQL, a rejection committed after this read): say which.
        return Ok(Err(match action_in(tx, id)? {
            Some(now) if now.state != ActionState::Pending => refusal_for(&now),
            _ => ClaimRefusal::Applying(id),
        }));
    };
    Ok(Ok(Claim {
        action,
        gatekeeper: current.gatekeeper.clone(),
        credential: current.credential.clone(),
        resumed: false,
    }))
}

/// Why rule `rule` of `person` may not auto-approve `a` now, if it may not
/// (SPEC U1, K3): key one must hold with the tier and annotations as they
/// are now, and key two is that person's rule for exactly this tag, in a
/// chat they own (or the one chat it names), where they may decide.
fn auto_refusal(
    tx: &dyn Sql,
    a: &Action,
    current: &Resolved,
    rule: i64,
    person: &str,
) -> anyhow::Result<Option<String>> {
    let Some(tool) = current.gatekeeper.manifest.tool(&a.tool) else {
        return Ok(Some("its tool is gone".into()));
    };
    if !crate::classify::classify(&tool.annotations, current.gatekeeper.trust).auto_approvable {
        return Ok(Some(
            "key one does not hold (vetted, non-destructive, idempotent)".into(),
        ));
    }
    let found: Option<(String, String, Option<String>)> = tx
        .row(
            "SELECT tag, person, chat FROM rules WHERE id = ?1",
            args![rule],
        )?
        .map(|r| Ok::<_, anyhow::Error>((r.get(0)?, r.get(1)?, r.get(2)?)))
        .transpose()?;
    let Some((tag, owner_of_rule, scope)) = found else {
        return Ok(Some("the rule was removed".into()));
    };
    if tag != a.tag() || owner_of_rule != person {
        return Ok(Some("no rule covers it".into()));
    }
    let in_scope = match &scope {
        Some(chat) => chat == &a.chat,
        None => current.owner == person,
    };
    if !in_scope {
        return Ok(Some("the rule does not apply in this chat".into()));
    }
    if !super::sharing::access(tx, &a.chat, person)?.may_enable_rule() {
        return Ok(Some(format!("{person} may no longer decide in this chat")));
    }
    Ok(None)
}

fn record_decision(
    db: &dyn Sql,
    a: &Action,
    decision: Verdict,
    by: &str,
    outcome: Option<DecisionOutcome>,
) -> anyhow::Result<()> {
    announce(db, a.id)?;
    db.exec(
        "INSERT INTO decisions (action, chat, gatekeeper, tool, decision, by, args_digest, outcome, at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        args![
            a.id,
            a.chat,
            a.gatekeeper,
            a.tool,
            decision,
            by,
            a.args_digest.clone().unwrap_or_else(|| args_digest(&a.args)),
            outcome,
            now_ms()
        ],
    )?;
    Ok(())
}

/// End the claim of `id` in the caller's transaction: `applied`, or
/// `failed` with its `failure` (the message, and whether it provably had
/// no effect), and its decision's outcome, which stand or fall together.
pub(super) fn finish_in(
    db: &dyn Sql,
    id: i64,
    failure: Option<(&str, bool)>,
) -> anyhow::Result<bool> {
    let (recorded, outcome) = match failure {
        None => (
            super::claims::applied(db, id, now_ms())?,
            DecisionOutcome::Applied,
        ),
        Some((message, retryable)) => (
            super::claims::failed(db, id, message, retryable, now_ms())?,
            DecisionOutcome::Failed,
        ),
    };
    record_outcome(db, id, outcome)?;
    Ok(recorded)
}

/// Keep an applied action's `result`. A covered workflow call keeps none
/// (G7): it was handed to the step that made it.
pub(super) fn keep_result(db: &dyn Sql, id: i64, result: &str) -> anyhow::Result<()> {
    db.exec(
        "UPDATE ledger SET result = CASE WHEN logical_key IS NULL THEN ?2
           ELSE '{\"note\":\"the result of a workflow call is handed to its step and not kept\"}' END
         WHERE id = ?1",
        args![id, result],
    )?;
    Ok(())
}

fn record_outcome(db: &dyn Sql, id: i64, outcome: DecisionOutcome) -> anyhow::Result<()> {
    announce(db, id)?;
    db.exec(
        "UPDATE decisions SET outcome = ?2
         WHERE id = (SELECT max(id) FROM decisions WHERE action = ?1) AND outcome IS NULL",
        args![id, outcome],
    )?;
    Ok(())
}

/// Why a revert was not staged. Nothing was stored.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RevertRefusal {
    /// Also what a person who may not see the action's chat is told.
    #[error(
        "no action #{0} that you may see (it may not exist, may have been pruned, or belongs to a chat you may not see)"
    )]
    NotFound(i64),
    /// The person sees the chat but may not decide in it: staging a
    /// revert is a decision's first half.
    #[error("#{id} cannot be reverted by you: {refusal}")]
    Forbidden {
        /// The action asked to be reverted.
        id: i64,
        /// What the one authorization rule answered.
        refusal: Refusal,
    },
    /// Only an applied action changed anything to undo.
    #[error("{}", not_applied(.id, .state))]
    NotApplied {
        /// The action asked to be reverted.
        id: i64,
        /// Its state, which the message explains.
        state: ActionState,
    },
    /// Its gatekeeper declares no `reverted-by` tool for it.
    #[error("#{id} ({tag}) cannot be reverted: its gatekeeper declares no tool that undoes it")]
    NotRevertible {
        /// The action asked to be reverted.
        id: i64,
        /// Its `gatekeeper:tool` tag.
        tag: String,
    },
    /// A revert of it exists that may still be, or was, sent: one undo only.
    #[error(
        "#{id} already has a revert, #{revert} ({state}); it is never staged twice (`gatehouse show {revert}`)"
    )]
    AlreadyReverted {
        /// The action asked to be reverted.
        id: i64,
        /// The existing revert.
        revert: i64,
        /// The existing revert's state.
        state: ActionState,
    },
    /// The revert cannot be staged as it must be: its key is no longer
    /// introduced or names another gatekeeper, the tool is gone, or
    /// staging refused it (a locked-down chat, a cap).
    #[error("#{id} cannot be reverted: {reason}")]
    CannotRevert {
        /// The action asked to be reverted.
        id: i64,
        /// Why.
        reason: String,
    },
}

fn not_applied(id: &i64, state: &ActionState) -> String {
    match state {
        ActionState::Pending => format!(
            "#{id} cannot be reverted: it is still pending, so nothing was sent; reject it instead (`gatehouse reject {id}`)"
        ),
        ActionState::Applying => format!(
            "#{id} cannot be reverted yet: it is being applied right now; revert it once it is applied"
        ),
        ActionState::Rejected => {
            format!(
                "#{id} cannot be reverted: it was rejected and never sent, so there is nothing to undo"
            )
        }
        ActionState::Expired => {
            format!(
                "#{id} cannot be reverted: it expired and was never sent, so there is nothing to undo"
            )
        }
        ActionState::Failed => format!(
            "#{id} cannot be reverted: it failed, so what it changed is unknown; only an applied action can be reverted (check the service and undo it there if needed)"
        ),
        ActionState::Applied => format!("#{id} is applied"),
    }
}

/// The whole claim, its policy included (who may decide, the latch, the
/// facts staged), on both engines: the same refusals, and of many people
/// approving one action at once on connections of their own, one send.
#[cfg(test)]
mod on_both_engines {
    use super::super::registry::Trust;
    use super::super::suite::{Backend, runtime, shared_chat};
    use super::*;
    use crate::principal::Principal;
    use crate::store::MAX_OPEN_ACTIONS;

    /// `ann`'s pending action in the shared chat, staged with the facts
    /// resolution gives now; its id.
    fn stage(db: &dyn Sql) -> anyhow::Result<i64> {
        let resolved = resolve(db, "c", "K", "ann")?.map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let facts = Facts::of(&resolved, "send").ok_or_else(|| anyhow::anyhow!("no facts"))?;
        Ok(stages::insert(db, &sent_by_ann(facts), None, None)?)
    }

    /// `ann`'s call of `send` through `K` in the shared chat.
    fn sent_by_ann(facts: Facts) -> NewAction {
        NewAction {
            chat: "c".into(),
            principal: Principal::person("ann"),
            gadget: None,
            key: "K".into(),
            gatekeeper: "g".into(),
            tool: "send".into(),
            classified_by: "default",
            trust: Trust::Byo,
            args: validate_args("{}").expect("an object"),
            await_decision: false,
            provisional: None,
            facts,
            resolved_at: None,
        }
    }

    #[test]
    fn a_claim_refuses_alike_and_of_many_approvers_one_sends() {
        runtime().block_on(async {
            for backend in Backend::both().await {
                let name = backend.name();
                let id = backend
                    .run(|db| {
                        shared_chat(db)?;
                        stage(db)
                    })
                    .await
                    .unwrap();
                let stranger = backend
                    .run(move |db| claim_in(db, id, &ClaimBy::Person("carl".into()), "h"))
                    .await
                    .unwrap();
                assert!(
                    matches!(stranger, Err(ClaimRefusal::NoSuchAction(i)) if i == id),
                    "{name}: a stranger learns nothing"
                );
                let approvers: Vec<_> = (0..30)
                    .map(|n| {
                        let b = backend.clone();
                        let person = if n % 2 == 0 { "ann" } else { "bob" };
                        tokio::spawn(async move {
                            b.run(move |db| {
                                claim_in(
                                    db,
                                    id,
                                    &ClaimBy::Person(person.into()),
                                    &format!("host-{n}"),
                                )
                            })
                            .await
                            .unwrap()
                        })
                    })
                    .collect();
                let mut sent = 0;
                for a in approvers {
                    match a.await.unwrap() {
                        Ok(claim) => {
                            assert_eq!(claim.action().id, id, "{name}");
                            sent += 1;
                        }
                        Err(ClaimRefusal::Applying(i)) => assert_eq!(i, id, "{name}"),
                        Err(other) => panic!("{name}: {other}"),
                    }
                }
                assert_eq!(sent, 1, "{name}: one send");
                let decisions = backend
                    .run(move |db| {
                        db.row(
                            "SELECT count(*) FROM decisions WHERE action = ?1",
                            args![id],
                        )?
                        .map_or(Ok(0), |r| r.get::<i64>(0))
                    })
                    .await
                    .unwrap();
                assert_eq!(decisions, 1, "{name}: one decision recorded");

                // Under the latch nothing is sent (O3), whoever approves.
                let latched = backend
                    .run(|db| {
                        let id = stage(db)?;
                        db.exec("UPDATE chats SET latched = 1 WHERE name = 'c'", args![])?;
                        claim_in(db, id, &ClaimBy::Person("ann".into()), "h")
                    })
                    .await
                    .unwrap();
                assert!(
                    matches!(latched, Err(ClaimRefusal::LockedDown { .. })),
                    "{name}: the latch holds"
                );
            }
        });
    }

    /// A decision taken on one host wakes a listener on another, once the
    /// deciding transaction commits; a decision rolled back is never heard.
    #[test]
    fn a_decision_wakes_a_listener_on_another_host_only_once_committed() {
        runtime().block_on(async {
            for backend in Backend::both().await {
                let Backend::Postgres(_, url) = &backend else {
                    continue; // the home has no other hosts to wake
                };
                let mut listener = super::super::postgres::Listener::open(url, DECIDED)
                    .await
                    .unwrap();
                let undone = backend
                    .run(|db| {
                        shared_chat(db)?;
                        let id = stage(db)?;
                        let claimed = claim_in(db, id, &ClaimBy::Person("ann".into()), "h")?;
                        assert!(claimed.is_ok());
                        anyhow::bail!("rolled back after claiming {id}");
                        #[allow(unreachable_code)]
                        Ok(())
                    })
                    .await
                    .unwrap_err();
                assert!(undone.to_string().contains("rolled back"), "{undone}");
                let id = backend
                    .run(|db| {
                        shared_chat(db)?;
                        let id = stage(db)?;
                        claim_in(db, id, &ClaimBy::Person("bob".into()), "h")?
                            .map_err(|e| anyhow::anyhow!("{e}"))?;
                        Ok(id)
                    })
                    .await
                    .unwrap();
                let heard =
                    tokio::time::timeout(std::time::Duration::from_secs(30), listener.next())
                        .await
                        .expect("the decision was heard")
                        .expect("the listener lives");
                // The first thing heard is the committed decision: the
                // rolled-back one was never sent.
                let heard: serde_json::Value = serde_json::from_str(&heard).unwrap();
                assert_eq!(heard, serde_json::json!({"action": id, "chat": "c"}));
            }
        });
    }

    /// Recovery across hosts: a claim whose host is gone fails for good
    /// (its request may have left), with its decision's outcome recorded;
    /// a present host's claim is never touched. On PostgreSQL "present" is
    /// a real advisory lock held by another connection.
    #[test]
    fn recovery_fails_a_gone_hosts_claim_and_never_touches_a_present_ones() {
        runtime().block_on(async {
            for backend in Backend::both().await {
                let name = backend.name();
                let (live, gone) = backend
                    .run(|db| {
                        shared_chat(db)?;
                        let (live, gone) = (stage(db)?, stage(db)?);
                        for (id, host) in [(live, "host-live"), (gone, "host-gone")] {
                            claim_in(db, id, &ClaimBy::Person("ann".into()), host)?
                                .map_err(|e| anyhow::anyhow!("{e}"))?;
                        }
                        Ok((live, gone))
                    })
                    .await
                    .unwrap();
                let _presence = match &backend {
                    Backend::Postgres(_, url) => Some(
                        super::super::postgres::Presence::hold(url, "host-live")
                            .await
                            .unwrap(),
                    ),
                    Backend::Sqlite(_) => None,
                };
                let on_postgres = _presence.is_some();
                let failed = backend
                    .run(move |db| {
                        let is_present = |db: &dyn Sql, host: &str| {
                            if on_postgres {
                                super::super::postgres::present(db, host)
                            } else {
                                Ok(host == "host-live")
                            }
                        };
                        let mut failed = Vec::new();
                        for c in super::super::claims::in_flight(db, &is_present)? {
                            if c.present {
                                continue;
                            }
                            match recover_in(db, c.action, c.host.as_deref(), Some("host-me"))? {
                                Interrupted::Failed => failed.push(c.action),
                                Interrupted::Left | Interrupted::Resumed(_) => {}
                            }
                        }
                        Ok(failed)
                    })
                    .await
                    .unwrap();
                assert_eq!(failed, vec![gone], "{name}");
                let states = backend
                    .run(move |db| {
                        let (l, g) = (action_in(db, live)?, action_in(db, gone)?);
                        let outcome: Option<String> = db
                            .row(
                                "SELECT outcome FROM decisions WHERE action = ?1",
                                args![gone],
                            )?
                            .map(|r| r.get(0))
                            .transpose()?
                            .flatten();
                        Ok((
                            l.map(|a| a.state),
                            g.map(|a| (a.state, a.retryable)),
                            outcome,
                        ))
                    })
                    .await
                    .unwrap();
                assert_eq!(
                    states,
                    (
                        Some(ActionState::Applying),
                        Some((ActionState::Failed, Some(false))),
                        Some("failed".to_owned())
                    ),
                    "{name}"
                );
                // For good: no one claims it again, and the gone host's
                // late finish does not turn it into `applied`.
                let (again, late) = backend
                    .run(move |db| {
                        let again = super::super::claims::take(db, gone, "other", "ann", false, 6)?;
                        let late = super::super::claims::applied(db, gone, 7)?;
                        Ok((again, late))
                    })
                    .await
                    .unwrap();
                assert!(!again && !late, "{name}");
            }
        });
    }

    /// SPEC P9: an interrupted claim is resumed (re-sent under its key)
    /// only when key one holds for its gatekeeper, the tool declares that
    /// its service honours keys, and the operator stated it for the
    /// instance; any two of the three leave it failed, on either engine.
    #[test]
    fn recovery_resumes_only_with_key_one_the_declaration_and_the_operator_s_word() {
        runtime().block_on(async {
            for backend in Backend::both().await {
                let name = backend.name();
                backend.run(shared_chat).await.unwrap();
                for (trust, declares, setting, resumed) in [
                    ("vetted", true, "honoured", true),
                    ("byo", true, "honoured", false),
                    ("vetted", false, "honoured", false),
                    ("vetted", true, "ignored", false),
                    ("vetted", true, "", false),
                ] {
                    let id = backend
                        .run(move |db| {
                            let mut manifest = super::super::suite::send_manifest();
                            manifest.tools[0].honours_idempotency_key = declares;
                            let settings = if setting.is_empty() {
                                "{}".to_owned()
                            } else {
                                serde_json::json!({ crate::idempotency::SETTING: setting })
                                    .to_string()
                            };
                            db.exec(
                                "UPDATE gatekeepers SET trust = ?1, settings = ?2, manifest = ?3 WHERE name = 'g'",
                                args![trust, settings, serde_json::to_string(&manifest)?],
                            )?;
                            let id = stage(db)?;
                            claim_in(db, id, &ClaimBy::Person("ann".into()), "host-gone")?
                                .map_err(|e| anyhow::anyhow!("{e}"))?;
                            Ok(id)
                        })
                        .await
                        .unwrap();
                    let got = backend
                        .run(move |db| {
                            Ok(match recover_in(db, id, Some("host-gone"), Some("host-me"))? {
                                Interrupted::Resumed(c) => Some(c.resumed),
                                Interrupted::Failed => Some(false),
                                Interrupted::Left => None,
                            })
                        })
                        .await
                        .unwrap();
                    assert_eq!(
                        got,
                        Some(resumed),
                        "{name}: {trust} declares={declares} setting={setting:?}"
                    );
                }
            }
        });
    }

    /// A rejection and approvals at once, on connections of their own:
    /// exactly one decides, the action ends in that decision's state, and
    /// one decision is recorded.
    #[test]
    fn of_a_rejection_and_approvals_at_once_exactly_one_decides() {
        runtime().block_on(async {
            for backend in Backend::both().await {
                let name = backend.name();
                backend.run(shared_chat).await.unwrap();
                // Several rounds, so that a rejection reading the row just
                // before a claim commits is met on every run.
                for _ in 0..8 {
                    let id = backend.run(stage).await.unwrap();
                    let deciders: Vec<_> = (0..40)
                        .map(|n| {
                            let b = backend.clone();
                            tokio::spawn(async move {
                                b.run(move |db| {
                                    Ok(if n % 2 == 0 {
                                        reject_in(db, id, "bob")?.is_ok()
                                    } else {
                                        claim_in(db, id, &ClaimBy::Person("ann".into()), "h")?
                                            .is_ok()
                                    })
                                })
                                .await
                                .unwrap()
                            })
                        })
                        .collect();
                    let mut decided = 0;
                    for d in deciders {
                        decided += usize::from(d.await.unwrap());
                    }
                    assert_eq!(decided, 1, "{name}: one decision");
                    let (state, decisions) = backend
                        .run(move |db| {
                            let state = action_in(db, id)?.map(|a| a.state);
                            let decisions = db
                                .rows(
                                    "SELECT decision FROM decisions WHERE action = ?1",
                                    args![id],
                                )?
                                .iter()
                                .map(|r| r.get::<String>(0))
                                .collect::<anyhow::Result<Vec<_>>>()?;
                            Ok((state, decisions))
                        })
                        .await
                        .unwrap();
                    match decisions.as_slice() {
                        [d] if d == "rejected" => {
                            assert_eq!(state, Some(ActionState::Rejected), "{name}")
                        }
                        [d] if d == "approved" => {
                            assert_eq!(state, Some(ActionState::Applying), "{name}")
                        }
                        other => panic!("{name}: decisions recorded {other:?}"),
                    }
                }
            }
        });
    }

    /// Through the store, as the kernel claims (on a shared database, its
    /// reads each a statement of its own and the take one statement): of
    /// fifty approvals of one action at once, one sends, one decision is
    /// recorded, and the rest are told it is being applied; its outcome
    /// is recorded once; and a claim refuses alike on both engines what
    /// the latch closed, what a stranger asks, and what was applied.
    #[test]
    fn of_fifty_approvals_through_the_store_one_sends() {
        runtime().block_on(async {
            for backend in Backend::both().await {
                let e = backend.name();
                let id = backend
                    .run(|db| {
                        shared_chat(db)?;
                        stage(db)
                    })
                    .await
                    .unwrap();
                let store = backend.store();
                let approvals: Vec<_> = (0..50)
                    .map(|n| {
                        let store = store.clone();
                        let person = if n % 2 == 0 { "ann" } else { "bob" };
                        tokio::spawn(async move {
                            store
                                .run(move |s| {
                                    s.claim(
                                        id,
                                        &ClaimBy::Person(person.into()),
                                        &format!("host-{n}"),
                                    )
                                })
                                .await
                                .expect("a claim attempt")
                        })
                    })
                    .collect();
                let mut sent = Vec::new();
                for a in approvals {
                    match a.await.expect("joined") {
                        Ok(claim) => sent.push(claim),
                        Err(ClaimRefusal::Applying(i)) => assert_eq!(i, id, "{e}"),
                        Err(other) => panic!("{e}: {other}"),
                    }
                }
                assert_eq!(sent.len(), 1, "{e}: one send");
                let claim = sent.pop().expect("the one claim");
                assert_eq!(claim.action().id, id, "{e}");
                assert_eq!(claim.action().state, ActionState::Applying, "{e}");
                assert_eq!(claim.gatekeeper().name, "g", "{e}");
                store
                    .run(move |s| s.finish_applied(id, "{\"ok\":true}"))
                    .await
                    .expect("finished");
                let decisions = backend
                    .run(move |db| {
                        db.rows(
                            "SELECT decision, by, outcome FROM decisions WHERE action = ?1",
                            args![id],
                        )?
                        .iter()
                        .map(|r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                        .collect::<anyhow::Result<Vec<(String, String, Option<String>)>>>()
                    })
                    .await
                    .unwrap();
                assert_eq!(decisions.len(), 1, "{e}: one decision recorded");
                assert_eq!(decisions[0].0, "approved", "{e}");
                assert_eq!(decisions[0].2.as_deref(), Some("applied"), "{e}");
                let again = store
                    .run(move |s| s.claim(id, &ClaimBy::Person("ann".into()), "late"))
                    .await
                    .unwrap();
                assert!(
                    matches!(again, Err(ClaimRefusal::AlreadyApplied(i)) if i == id),
                    "{e}: {:?}",
                    again.err()
                );

                let next = backend.run(stage).await.unwrap();
                let stranger = store
                    .run(move |s| s.claim(next, &ClaimBy::Person("carl".into()), "h"))
                    .await
                    .unwrap();
                assert!(
                    matches!(stranger, Err(ClaimRefusal::NoSuchAction(i)) if i == next),
                    "{e}"
                );
                backend
                    .run(|db| db.exec("UPDATE chats SET latched = 1 WHERE name = 'c'", args![]))
                    .await
                    .unwrap();
                let latched = store
                    .run(move |s| s.claim(next, &ClaimBy::Person("ann".into()), "h"))
                    .await
                    .unwrap();
                assert!(
                    matches!(latched, Err(ClaimRefusal::LockedDown { .. })),
                    "{e}: {:?}",
                    latched.err()
                );
                let failed = store
                    .run(move |s| {
                        s.finish_failed(next, "never claimed", true)?;
                        s.action(next)
                    })
                    .await
                    .unwrap()
                    .expect("the action");
                assert_eq!(failed.state, ActionState::Pending, "{e}: only a claim ends");
            }
        });
    }

    /// The same `Store` methods the kernel calls, on a store opened on
    /// either engine: resolution, staging up to the cap by concurrent
    /// stagers, a claim taken once, an outcome, a rejection that a
    /// stranger may not make, and the ledger read back.
    #[test]
    fn a_store_on_either_engine_serves_a_chat_through_the_same_methods() {
        runtime().block_on(async {
            for backend in Backend::both().await {
                let e = backend.name();
                backend.run(shared_chat).await.expect("the chat");
                let store = backend.store();
                let (resolved, _) = store
                    .run(|s| s.resolve("c", "K", "ann"))
                    .await
                    .expect("resolved")
                    .unwrap_or_else(|u| panic!("{e}: {u:?}"));
                let a = sent_by_ann(Facts::of(&resolved, "send").expect("facts"));
                let stagers: Vec<_> = (0..MAX_OPEN_ACTIONS + 5)
                    .map(|_| {
                        let (store, a) = (store.clone(), a.clone());
                        tokio::spawn(async move { store.stage(a).await })
                    })
                    .collect();
                let (mut staged, mut full) = (Vec::new(), 0);
                for t in stagers {
                    match t.await.expect("joined") {
                        Ok(s) => staged.push(s.id),
                        Err(StageError::TooManyOpen(_)) => full += 1,
                        Err(other) => panic!("{e}: {other}"),
                    }
                }
                assert_eq!(
                    (staged.len(), full),
                    (MAX_OPEN_ACTIONS as usize, 5),
                    "{e}: the cap holds"
                );
                staged.sort_unstable();
                // Called on an executor thread, not a blocking one: the
                // embedded store tolerates it, and so must the shared one.
                let pending = {
                    let store = store.clone();
                    tokio::spawn(async move { store.pending_in("c") })
                        .await
                        .expect("joined")
                        .expect("pending")
                };
                let ids: Vec<i64> = pending.iter().map(|a| a.id).collect();
                assert_eq!(ids, staged, "{e}");

                let (first, second) = (staged[0], staged[1]);
                let claimed = store
                    .run(move |s| s.claim(first, &ClaimBy::Person("bob".into()), "host-1"))
                    .await
                    .expect("claim");
                assert!(claimed.is_ok(), "{e}: bob may decide");
                let again = store
                    .run(move |s| s.claim(first, &ClaimBy::Person("ann".into()), "host-2"))
                    .await
                    .expect("claim");
                assert!(again.is_err(), "{e}: claimed twice");
                store
                    .run(move |s| s.finish_applied(first, "{\"ok\":true}"))
                    .await
                    .expect("finished");
                let stranger = store
                    .run(move |s| s.reject(second, "eve"))
                    .await
                    .expect("reject");
                assert!(
                    matches!(stranger, Err(ClaimRefusal::NoSuchAction(_))),
                    "{e}: a stranger learns nothing"
                );
                let rejected = store
                    .run(move |s| s.reject(second, "ann"))
                    .await
                    .expect("reject");
                assert!(rejected.is_ok(), "{e}");
                let state = |id| {
                    let store = store.clone();
                    async move {
                        store
                            .run(move |s| s.action(id))
                            .await
                            .expect("read")
                            .map(|a| a.state)
                    }
                };
                assert_eq!(
                    (state(first).await, state(second).await),
                    (Some(ActionState::Applied), Some(ActionState::Rejected)),
                    "{e}"
                );
                let ledger = store
                    .run(|s| {
                        s.ledger(&crate::store::LedgerFilter {
                            chat: Some("c".into()),
                            ..Default::default()
                        })
                    })
                    .await
                    .expect("the ledger");
                assert_eq!(ledger.len(), MAX_OPEN_ACTIONS as usize, "{e}");
                assert_eq!(
                    ledger
                        .iter()
                        .find(|l| l.id == first)
                        .and_then(|l| l.resolved_by.clone()),
                    Some("bob".into()),
                    "{e}"
                );
                assert!(
                    store.stage(a.clone()).await.is_ok(),
                    "{e}: two closed, room again"
                );
            }
        });
    }
}
