//! What an action is, apart from how it moves: its states, the record the
//! store keeps, what a stage brings, the checked arguments and their
//! digest, why a stage is refused, and the announcement other hosts wake
//! on. A leaf of the store: the action store (`actions`) and the stage
//! path (`stages`) both build on it, and it names neither.

use super::MAX_ARGS_BYTES;
use super::dispatch::Facts;
use super::registry::Trust;
use super::sql::{Sql, args};
use crate::principal::Principal;
use serde::Serialize;
use sha2::{Digest as _, Sha256};
use std::fmt;

/// Where an action is on its way from staging to an outcome. Every move
/// is one conditional UPDATE from the state before (SPEC P1), so two
/// deciders never both win.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionState {
    /// Staged; waits for a decision (or a rule, or a workflow's approval).
    Pending,
    /// Claimed: being sent now, by exactly one claimer.
    Applying,
    /// Sent, and the service said it took effect.
    Applied,
    /// The send failed; retryable only if it provably had no effect (P2).
    Failed,
    /// A person said no; it is never sent.
    Rejected,
    /// Nobody decided within its chat's expiry (H3); it was never sent.
    Expired,
}

impl ActionState {
    /// The state a stored word names.
    pub(super) fn parse(s: &str) -> anyhow::Result<ActionState> {
        Ok(match s {
            "pending" => ActionState::Pending,
            "applying" => ActionState::Applying,
            "applied" => ActionState::Applied,
            "failed" => ActionState::Failed,
            "rejected" => ActionState::Rejected,
            "expired" => ActionState::Expired,
            other => anyhow::bail!("the ledger holds an action in an unknown state {other:?}"),
        })
    }

    /// The stored (and printed) name, lower-case.
    pub fn as_str(self) -> &'static str {
        match self {
            ActionState::Pending => "pending",
            ActionState::Applying => "applying",
            ActionState::Applied => "applied",
            ActionState::Failed => "failed",
            ActionState::Rejected => "rejected",
            ActionState::Expired => "expired",
        }
    }

    /// Finished: it will never be sent (again).
    pub fn is_final(self) -> bool {
        !matches!(self, ActionState::Pending | ActionState::Applying)
    }
}

impl fmt::Display for ActionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the kernel stages.
#[derive(Clone, Debug)]
pub struct NewAction {
    /// The chat it was staged in (its ledger, its deciders).
    pub chat: String,
    /// Who staged it and for whom (SPEC C5): the person it acts for is the
    /// one whose account sends it.
    pub principal: Principal,
    /// The gadget whose turn staged it; `None` for a person's own call (an
    /// MCP client, a revert).
    pub gadget: Option<String>,
    /// The introduction's key it was called through.
    pub key: String,
    /// The gatekeeper instance the key named at staging.
    pub gatekeeper: String,
    /// The tool called.
    pub tool: String,
    /// Whose word the classification trusted (`server-annotation` or `default`, K4).
    pub classified_by: &'static str,
    /// The gatekeeper's trust tier at staging (key one of auto-approval).
    pub trust: Trust,
    /// The arguments, checked and normalised ([`validate_args`]).
    pub args: Args,
    /// The gadget was told to await the decision (SPEC V2): no simulation was
    /// given.
    pub await_decision: bool,
    /// A simulating gatekeeper's predicted result (SPEC V1), given to the
    /// gadget in place of the real one.
    pub provisional: Option<String>,
    /// What was true at staging, revalidated by the claim (P7).
    pub facts: Facts,
    /// The policy epoch of the binding it was checked on, when that
    /// binding was not read in a transaction of its own
    /// ([`Store::resolution_kept`]): its staging transaction refuses it
    /// ([`StageError::PolicyMoved`]) unless the epoch is still this one.
    /// `None`: the binding was read now.
    pub resolved_at: Option<i64>,
}

/// An action as stored.
#[derive(Clone, Debug, Serialize)]
pub struct Action {
    /// The action's id, in the ledger's one sequence (shared with observations),
    /// as people name it (`gatehouse show ID`).
    pub id: i64,
    /// The chat it was staged in.
    pub chat: String,
    /// Who staged it, as people read it (SPEC C5).
    pub caller: String,
    /// The person it acts for: whose account it is sent with.
    pub person: String,
    /// The gadget whose turn staged it, if one did.
    pub gadget: Option<String>,
    /// The introduction's key it was called through.
    pub key: Option<String>,
    /// The gatekeeper instance it goes to.
    pub gatekeeper: String,
    /// The tool called.
    pub tool: String,
    /// Whose word made it an action (`server-annotation` or `default`, K4).
    pub classified_by: String,
    /// The gatekeeper's trust tier at staging (`byo` or `vetted`).
    pub trust: String,
    /// The arguments as JSON; `{}` for a covered workflow call, which keeps
    /// only their digest (SPEC G7).
    pub args: String,
    /// SHA-256 of the arguments as staged, for audits that may not see them.
    pub args_digest: Option<String>,
    /// Where it is now.
    pub state: ActionState,
    /// The gadget was told to await the decision (no simulation, SPEC V2).
    pub await_decision: bool,
    /// For a failed action: whether the failure provably had no effect, so
    /// that a new decision may send it again (SPEC P2).
    pub retryable: Option<bool>,
    /// What the service answered once applied (a note instead if over the
    /// cap).
    pub result: Option<String>,
    /// Why it failed, expired or was sent back (a gatekeeper's text, capped).
    pub error: Option<String>,
    /// It was claimed by a rule's two keys, not by a person (SPEC U).
    pub auto_approved: bool,
    /// Who decided it: a person, a rule's owner, or a workflow's approvers.
    pub resolved_by: Option<String>,
    /// Why the last claim sent it back to pending: what changed since it
    /// was staged (P7).
    pub note: Option<String>,
    /// The account it is sent with (`user/label`, `operator:NAME`, `none`).
    pub account: Option<String>,
    /// For a revert (SPEC H2): the applied action it undoes.
    pub reverts: Option<i64>,
    /// When it was staged, in ms since the epoch.
    pub created_at: i64,
    /// When it was approved, rejected or expired.
    pub decided_at: Option<i64>,
    /// When its outcome was recorded.
    pub finished_at: Option<i64>,
}

/// The namespaced tag rules and decisions name (A6): `gatekeeper:tool`.
/// The one spelling of it.
pub fn action_tag(gatekeeper: &str, tool: &str) -> String {
    format!("{gatekeeper}:{tool}")
}

impl Action {
    /// Its tag ([`action_tag`]).
    pub fn tag(&self) -> String {
        action_tag(&self.gatekeeper, &self.tool)
    }
}

/// Why staging refused an action. Nothing was stored (SPEC A3).
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// The arguments are JSON but not an object (the kind found).
    #[error("arguments must be a JSON object, got {0}")]
    NotAnObject(&'static str),
    /// The arguments do not parse (the parser's message).
    #[error("arguments are not valid JSON: {0}")]
    NotJson(String),
    /// The arguments could be read two ways (a key named twice, a number
    /// beyond what a double holds): what the approver would be shown might
    /// not be what the service acts on, so they are refused (SPEC R).
    #[error("arguments are ambiguous: {0}")]
    Ambiguous(String),
    /// The arguments are over 64 KiB (their size).
    #[error(
        "arguments are {0} bytes; the limit is 65536 (64 KiB): send less, or store bulk data in the service first"
    )]
    TooLarge(usize),
    /// The chat already has its cap of open actions (how many, SPEC A5).
    #[error(
        "{0} actions already await approval in this chat (the limit is 50 per chat); ask a person to decide some (`gatehouse pending`) before staging more"
    )]
    TooManyOpen(i64),
    /// The chat (named) read owner-only data: nothing leaves it (O3).
    #[error(
        "chat {0:?} is locked down: it read owner-only data, so no action can be submitted from it"
    )]
    LockedDown(String),
    /// No chat has this name.
    #[error("no chat named {0:?}")]
    NoChat(String),
    /// A check of the kernel's refused it; the message says which.
    #[error("{0}")]
    Refused(String),
    /// The policy epoch moved since the binding it was checked on was
    /// read ([`NewAction::resolved_at`]); nothing was staged. The kernel
    /// checks it again on a binding read now: no person sees this.
    #[error(
        "the chat's introductions or accounts changed while this was being staged; nothing was staged: call again"
    )]
    PolicyMoved,
    /// The database failed; nothing was stored.
    #[error(transparent)]
    Store(#[from] anyhow::Error),
}

impl From<rusqlite::Error> for StageError {
    fn from(e: rusqlite::Error) -> Self {
        StageError::Store(e.into())
    }
}

/// Arguments checked and normalised as an action keeps them (SPEC A5): a
/// JSON object, written out again by serde, within [`MAX_ARGS_BYTES`].
/// Only [`validate_args`] makes one, so no action reaches the store
/// unchecked, and none is checked twice (the kernel and the store once
/// each parsed and wrote out a stage's arguments).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Args(String);

impl Args {
    /// The normalised JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<Args> for String {
    fn from(a: Args) -> String {
        a.0
    }
}

/// Check arguments (SPEC A5: a JSON object within the size cap, read
/// alike by every reader, `super::unambiguous`) and return them
/// normalised.
pub fn validate_args(args: &str) -> Result<Args, StageError> {
    if args.len() > MAX_ARGS_BYTES {
        return Err(StageError::TooLarge(args.len()));
    }
    let v: serde_json::Value =
        serde_json::from_str(args).map_err(|e| StageError::NotJson(e.to_string()))?;
    let kind = match &v {
        serde_json::Value::Object(_) => {
            if let Some(why) = super::unambiguous::ambiguity(args, &v) {
                return Err(StageError::Ambiguous(why));
            }
            // Normalising can grow JSON (`9e15` is written out in full), so
            // the cap applies to what is stored, not only to what was sent.
            let normalised = v.to_string();
            if normalised.len() > MAX_ARGS_BYTES {
                return Err(StageError::TooLarge(normalised.len()));
            }
            return Ok(Args(normalised));
        }
        serde_json::Value::Null => "null",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::Bool(_) => "a boolean",
    };
    Err(StageError::NotAnObject(kind))
}

/// SHA-256 of an action's stored arguments: what the decision history keeps
/// instead of the arguments themselves.
pub fn args_digest(args: &str) -> String {
    // Into a buffer: `hex::encode` builds its string a character at a
    // time, which was half of the digest's cost in a stage.
    let mut hex = [0u8; 64];
    match hex::encode_to_slice(Sha256::digest(args.as_bytes()), &mut hex) {
        Ok(()) => String::from_utf8_lossy(&hex).into_owned(),
        Err(_) => hex::encode(Sha256::digest(args.as_bytes())),
    }
}

/// What a covered workflow call keeps of its arguments and outcome: a
/// digest only (SPEC G7), never the values. Its arguments travel in the
/// claim, from memory, to the one send.
pub(crate) const UNKEPT_ARGS: &str = "{}";

/// The channel on which a shared database tells every host that an action
/// was staged, decided or finished: the web inbox's live view, parked agent
/// runs and gated workflow runs on any host wake on it instead of polling.
/// The payload is the action's id and chat, never its arguments; a listener
/// asks the kernel (and its one authorization rule) what it may show.
pub(crate) const DECIDED: &str = "gatehouse_decided";

/// Tell the other hosts that action `id` was staged, decided or finished,
/// once this transaction commits (never if it rolls back): PostgreSQL's
/// `NOTIFY`, whose payload names the action and its chat. The embedded
/// home has no other hosts, and its processes watch the file itself, so
/// there this does nothing.
pub(crate) fn announce(db: &dyn Sql, id: i64) -> anyhow::Result<()> {
    db.tell_hosts(
        "SELECT pg_notify(?1, json_build_object('action', id, 'chat', chat)::text)
         FROM ledger WHERE id = ?2",
        args![DECIDED, id],
    )
}
