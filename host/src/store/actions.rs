//! The action store: stage, claim, finish, reject, recover, prune.
//!
//! Every transition is one conditional UPDATE on the row's current state, so
//! two approvers (threads, processes, the CLI and the web inbox) can never
//! both win: the database decides, not a UI (SPEC P1).

use super::{MAX_ARGS_BYTES, MAX_OPEN_ACTIONS, MAX_RESULT_BYTES, RETAINED_FINISHED, Store, now_ms};
use rusqlite::{OptionalExtension as _, TransactionBehavior, params};
use serde::Serialize;
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionState {
    Pending,
    Applying,
    Applied,
    Failed,
    Rejected,
}

impl ActionState {
    fn parse(s: &str) -> rusqlite::Result<ActionState> {
        Ok(match s {
            "pending" => ActionState::Pending,
            "applying" => ActionState::Applying,
            "applied" => ActionState::Applied,
            "failed" => ActionState::Failed,
            "rejected" => ActionState::Rejected,
            other => {
                return Err(rusqlite::Error::InvalidColumnType(
                    0,
                    format!("state {other}"),
                    rusqlite::types::Type::Text,
                ));
            }
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ActionState::Pending => "pending",
            ActionState::Applying => "applying",
            ActionState::Applied => "applied",
            ActionState::Failed => "failed",
            ActionState::Rejected => "rejected",
        }
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
    pub chat: String,
    pub caller: String,
    pub gatekeeper: String,
    pub tool: String,
    pub classified_by: &'static str,
    pub trust: super::Trust,
    pub args: String,
    pub await_decision: bool,
    pub provisional: Option<String>,
}

/// An action as stored.
#[derive(Clone, Debug, Serialize)]
pub struct Action {
    pub id: i64,
    pub chat: String,
    pub caller: String,
    pub gatekeeper: String,
    pub tool: String,
    pub classified_by: String,
    pub trust: String,
    pub args: String,
    pub state: ActionState,
    pub await_decision: bool,
    pub retryable: Option<bool>,
    pub result: Option<String>,
    pub error: Option<String>,
    pub auto_approved: bool,
    pub resolved_by: Option<String>,
    pub created_at: i64,
    pub decided_at: Option<i64>,
    pub finished_at: Option<i64>,
}

/// Why staging refused an action. Nothing was stored (SPEC A3).
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error("arguments must be a JSON object, got {0}")]
    NotAnObject(&'static str),
    #[error("arguments are not valid JSON: {0}")]
    NotJson(String),
    #[error(
        "arguments are {0} bytes; the limit is 65536 (64 KiB): send less, or store bulk data in the service first"
    )]
    TooLarge(usize),
    #[error(
        "{0} actions already await approval (the limit is 50); ask a person to decide some (`gatehouse pending`) before staging more"
    )]
    TooManyOpen(i64),
    #[error(
        "chat {0:?} is locked down: it read owner-only data, so no action can be submitted from it"
    )]
    LockedDown(String),
    #[error("no chat named {0:?}")]
    NoChat(String),
    #[error(transparent)]
    Store(#[from] anyhow::Error),
}

impl From<rusqlite::Error> for StageError {
    fn from(e: rusqlite::Error) -> Self {
        StageError::Store(e.into())
    }
}

/// A won claim: this caller, alone, may now send the action.
#[derive(Clone, Debug)]
pub struct Claim {
    pub action: Action,
}

/// Why a claim was not granted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimRefusal {
    #[error("action #{0} does not exist (or was pruned)")]
    NoSuchAction(i64),
    #[error("action #{0} was already applied; nothing was sent again")]
    AlreadyApplied(i64),
    #[error("action #{0} is being applied by another approval right now; nothing was sent again")]
    Applying(i64),
    #[error(
        "action #{0} was rejected; a rejected action is never sent (stage it again if you changed your mind)"
    )]
    Rejected(i64),
    #[error(
        "action #{0} failed and may have reached the service, so it is never resent: check the service and re-stage it if needed"
    )]
    FailedFinal(i64),
}

/// Check staged arguments (SPEC A5) and return them normalised.
pub fn validate_args(args: &str) -> Result<String, StageError> {
    if args.len() > MAX_ARGS_BYTES {
        return Err(StageError::TooLarge(args.len()));
    }
    let v: serde_json::Value =
        serde_json::from_str(args).map_err(|e| StageError::NotJson(e.to_string()))?;
    let kind = match &v {
        serde_json::Value::Object(_) => {
            // Normalising can grow JSON (`9e15` is written out in full), so
            // the cap applies to what is stored, not only to what was sent.
            let normalised = v.to_string();
            if normalised.len() > MAX_ARGS_BYTES {
                return Err(StageError::TooLarge(normalised.len()));
            }
            return Ok(normalised);
        }
        serde_json::Value::Null => "null",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::Bool(_) => "a boolean",
    };
    Err(StageError::NotAnObject(kind))
}

const ACTION_COLUMNS: &str =
    "id, chat, caller, gatekeeper, tool, classified_by, trust, args, state,
    await_decision, retryable, result, error, auto_approved, resolved_by, created_at, decided_at,
    finished_at";

fn action_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Action> {
    let state: String = r.get(8)?;
    Ok(Action {
        id: r.get(0)?,
        chat: r.get(1)?,
        caller: r.get(2)?,
        gatekeeper: r.get::<_, Option<String>>(3)?.unwrap_or_default(),
        tool: r.get::<_, Option<String>>(4)?.unwrap_or_default(),
        classified_by: r.get::<_, Option<String>>(5)?.unwrap_or_default(),
        trust: r.get::<_, Option<String>>(6)?.unwrap_or_default(),
        args: r.get::<_, Option<String>>(7)?.unwrap_or_default(),
        state: ActionState::parse(&state)?,
        await_decision: r.get::<_, Option<i64>>(9)? == Some(1),
        retryable: r.get::<_, Option<i64>>(10)?.map(|v| v == 1),
        result: r.get(11)?,
        error: r.get(12)?,
        auto_approved: r.get::<_, i64>(13)? == 1,
        resolved_by: r.get(14)?,
        created_at: r.get(15)?,
        decided_at: r.get(16)?,
        finished_at: r.get(17)?,
    })
}

impl Store {
    /// Stage and submit an action in one transaction: either it is pending
    /// with an id, or nothing was stored (SPEC A1, A3, A5).
    pub fn stage(&self, a: &NewAction) -> Result<i64, StageError> {
        let args = validate_args(&a.args)?;
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let latched: Option<i64> = tx
            .query_row(
                "SELECT latched FROM chats WHERE name = ?1",
                [&a.chat],
                |r| r.get(0),
            )
            .optional()?;
        match latched {
            None => return Err(StageError::NoChat(a.chat.clone())),
            Some(1) => return Err(StageError::LockedDown(a.chat.clone())),
            Some(_) => {}
        }
        let open: i64 = tx.query_row(
            "SELECT count(*) FROM ledger WHERE state IN ('pending', 'applying')",
            [],
            |r| r.get(0),
        )?;
        if open >= MAX_OPEN_ACTIONS {
            return Err(StageError::TooManyOpen(open));
        }
        tx.execute(
            "INSERT INTO ledger (chat, kind, caller, gatekeeper, tool, classified_by, trust, args,
               state, await_decision, provisional, created_at)
             VALUES (?1, 'action', ?2, ?3, ?4, ?5, ?6, ?7, 'pending', ?8, ?9, ?10)",
            params![
                a.chat,
                a.caller,
                a.gatekeeper,
                a.tool,
                a.classified_by,
                a.trust.as_str(),
                args,
                a.await_decision as i64,
                a.provisional,
                now_ms()
            ],
        )?;
        let id = tx.last_insert_rowid();
        tx.commit()?;
        Ok(id)
    }

    pub fn action(&self, id: i64) -> anyhow::Result<Option<Action>> {
        Ok(self
            .lock()
            .query_row(
                &format!("SELECT {ACTION_COLUMNS} FROM ledger WHERE id = ?1 AND kind = 'action'"),
                [id],
                action_from_row,
            )
            .optional()?)
    }

    /// Pending actions, oldest first (optionally of one chat).
    pub fn pending(&self, chat: Option<&str>) -> anyhow::Result<Vec<Action>> {
        let conn = self.lock();
        let mut st = conn.prepare_cached(&format!(
            "SELECT {ACTION_COLUMNS} FROM ledger
             WHERE kind = 'action' AND state = 'pending' AND (?1 IS NULL OR chat = ?1)
             ORDER BY id"
        ))?;
        let rows = st.query_map([chat], action_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Claim an action for sending, durably, before anything leaves
    /// (SPEC P1). `owner` names the claiming process so that recovery can
    /// tell a live claim from an interrupted one.
    ///
    /// Claimable: `pending`, or `failed` with `retryable = 1` (the kernel
    /// proved the earlier attempt never took effect).
    pub fn claim(
        &self,
        id: i64,
        owner: &str,
        by: &str,
        auto: bool,
    ) -> anyhow::Result<Result<Claim, ClaimRefusal>> {
        let mut conn = self.lock();
        // The one commit that must survive a power cut: the claim is on disk
        // before the request can leave, so a crash can only lose a send,
        // never repeat one.
        conn.pragma_update(None, "synchronous", "FULL")?;
        let result = (|| -> anyhow::Result<Result<Claim, ClaimRefusal>> {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let updated = tx.execute(
                "UPDATE ledger SET state = 'applying', claim_owner = ?2, resolved_by = ?3,
                   auto_approved = ?4, decided_at = ?5, error = NULL, retryable = NULL
                 WHERE id = ?1 AND kind = 'action'
                   AND (state = 'pending' OR (state = 'failed' AND retryable = 1))",
                params![id, owner, by, auto as i64, now_ms()],
            )?;
            if updated == 0 {
                let state: Option<(String, Option<i64>)> = tx
                    .query_row(
                        "SELECT state, retryable FROM ledger WHERE id = ?1 AND kind = 'action'",
                        [id],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .optional()?;
                return Ok(Err(match state {
                    None => ClaimRefusal::NoSuchAction(id),
                    Some((s, _)) if s == "applied" => ClaimRefusal::AlreadyApplied(id),
                    Some((s, _)) if s == "applying" => ClaimRefusal::Applying(id),
                    Some((s, _)) if s == "rejected" => ClaimRefusal::Rejected(id),
                    Some(_) => ClaimRefusal::FailedFinal(id),
                }));
            }
            let action = tx.query_row(
                &format!("SELECT {ACTION_COLUMNS} FROM ledger WHERE id = ?1"),
                [id],
                action_from_row,
            )?;
            tx.commit()?;
            Ok(Ok(Claim { action }))
        })();
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        result
    }

    /// Record a successful apply. The state is written first, in its own
    /// commit, then the result: an unstorable result still leaves the action
    /// `applied` (SPEC P2).
    pub fn finish_applied(&self, id: i64, result: &str) -> anyhow::Result<()> {
        {
            let conn = self.lock();
            conn.execute(
                "UPDATE ledger SET state = 'applied', finished_at = ?2, claim_owner = NULL
                 WHERE id = ?1 AND state = 'applying'",
                params![id, now_ms()],
            )?;
        }
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
        self.lock().execute(
            "UPDATE ledger SET result = ?2 WHERE id = ?1",
            params![id, stored],
        )?;
        self.prune()?;
        Ok(())
    }

    /// Record a failed apply.
    pub fn finish_failed(&self, id: i64, message: &str, retryable: bool) -> anyhow::Result<()> {
        self.lock().execute(
            "UPDATE ledger SET state = 'failed', error = ?2, retryable = ?3, finished_at = ?4,
               claim_owner = NULL
             WHERE id = ?1 AND state = 'applying'",
            params![id, message, retryable as i64, now_ms()],
        )?;
        self.prune()?;
        Ok(())
    }

    /// Reject a pending action: it will never be sent (SPEC A2).
    pub fn reject(&self, id: i64, by: &str) -> anyhow::Result<Result<(), ClaimRefusal>> {
        let conn = self.lock();
        let n = conn.execute(
            "UPDATE ledger SET state = 'rejected', resolved_by = ?2, decided_at = ?3,
               finished_at = ?3
             WHERE id = ?1 AND kind = 'action' AND state = 'pending'",
            params![id, by, now_ms()],
        )?;
        if n == 1 {
            drop(conn);
            self.prune()?;
            return Ok(Ok(()));
        }
        let state: Option<String> = conn
            .query_row(
                "SELECT state FROM ledger WHERE id = ?1 AND kind = 'action'",
                [id],
                |r| r.get(0),
            )
            .optional()?;
        Ok(Err(match state.as_deref() {
            None => ClaimRefusal::NoSuchAction(id),
            Some("applied") => ClaimRefusal::AlreadyApplied(id),
            Some("applying") => ClaimRefusal::Applying(id),
            Some("rejected") => ClaimRefusal::Rejected(id),
            Some(_) => ClaimRefusal::FailedFinal(id),
        }))
    }

    /// Fail every claim whose process is gone (SPEC P3). The request may
    /// have left, so the failure is final: never resent automatically.
    pub fn recover(&self, is_alive: impl Fn(&str) -> bool) -> anyhow::Result<Vec<i64>> {
        let claims: Vec<(i64, Option<String>)> = {
            let conn = self.lock();
            let mut st =
                conn.prepare_cached("SELECT id, claim_owner FROM ledger WHERE state = 'applying'")?;
            st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()?
        };
        let mut failed = Vec::new();
        for (id, owner) in claims {
            if owner.as_deref().is_some_and(&is_alive) {
                continue;
            }
            let n = self.lock().execute(
                "UPDATE ledger SET state = 'failed', retryable = 0, finished_at = ?3, claim_owner = NULL,
                   error = 'interrupted after sending: the host stopped while applying this action, so it may or may not have reached the service; check the service and re-stage it if needed'
                 WHERE id = ?1 AND state = 'applying' AND claim_owner IS ?2",
                params![id, owner, now_ms()],
            )?;
            if n == 1 {
                failed.push(id);
            }
        }
        // Covered workflow calls applied at once claim in the audit (G5):
        // the same rule, and never sent again.
        let audits: Vec<(i64, Option<String>)> = {
            let conn = self.lock();
            let mut st = conn.prepare_cached(
                "SELECT id, claim_owner FROM invocations WHERE state = 'applying'",
            )?;
            st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()?
        };
        for (id, owner) in audits {
            if owner.as_deref().is_some_and(&is_alive) {
                continue;
            }
            self.lock().execute(
                "UPDATE invocations SET state = 'failed', finished_at = ?3,
                   reason = 'failed: interrupted after sending (the host stopped while applying)'
                 WHERE id = ?1 AND state = 'applying' AND claim_owner IS ?2",
                params![id, owner, now_ms()],
            )?;
        }
        Ok(failed)
    }

    /// Keep the newest finished actions; never prune open ones (SPEC P5).
    pub fn prune(&self) -> anyhow::Result<usize> {
        Ok(self.lock().execute(
            "DELETE FROM ledger WHERE kind = 'action'
               AND state IN ('applied', 'failed', 'rejected')
               AND id NOT IN (SELECT id FROM ledger WHERE kind = 'action'
                                AND state IN ('applied', 'failed', 'rejected')
                              ORDER BY id DESC LIMIT ?1)",
            [RETAINED_FINISHED],
        )?)
    }
}
