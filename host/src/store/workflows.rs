//! Workflows as stored (SPEC G): published designs, runs and their steps,
//! approval requests, certificates issued, and the audit of every decided
//! call. Triggers in the schema keep what must never change (a published
//! version, a step's tool set, a requested list) unchangeable even by a
//! hand edit. Decisions live in `crate::workflow`.

use super::words::{InvocationDecision, RequestState, RunState, StepStatus};
use super::{Store, now_ms};
use rusqlite::{OptionalExtension as _, params};
use serde::Serialize;

/// A workflow run: one start of a published design, by its initiator.
#[derive(Clone, Debug, Serialize)]
pub struct RunRecord {
    /// The run's id (`workflow invocations ID`).
    pub id: i64,
    /// The design's name.
    pub workflow: String,
    /// The published version it runs: fixed at start, never changed (G1).
    pub version: i64,
    /// The person who started it; they name its approvers.
    pub initiator: String,
    /// The chat its steps run in.
    pub chat: String,
    /// `running`, `waiting` (a step is gated), `done` or `failed`.
    pub state: RunState,
}

/// One step of a run, its tool set fixed from the design at start.
#[derive(Clone, Debug, Serialize)]
pub struct StepRecord {
    /// The run.
    pub run: i64,
    /// The step's name in the design.
    pub step: String,
    /// Its place in the design's order.
    pub position: i64,
    /// The gadget the step runs.
    pub gadget: String,
    /// The step's input, from the design (left out of listings and `--json`).
    #[serde(skip)]
    pub input: String,
    /// The `KEY:tool`s its certificate allows, and no other.
    pub tools: Vec<String>,
    /// The steps that must be done before it runs.
    pub preds: Vec<String>,
    /// `pending`, `gated` (a covering request is not approved), `done` or
    /// `failed`.
    pub status: StepStatus,
    /// How many times it ran.
    pub attempts: i64,
    /// Why it stopped (a gate, a failure); never a call's arguments.
    pub note: Option<String>,
}

/// A step as a run is created with it.
pub struct NewStep {
    /// The step's name.
    pub step: String,
    /// The gadget it runs.
    pub gadget: String,
    /// Its input.
    pub input: String,
    /// The tools its certificate will allow.
    pub tools: Vec<String>,
    /// The steps it waits for.
    pub preds: Vec<String>,
}

/// An approval request (SPEC G2): a step's allowed-calls list, for the
/// run's approvers to decide before any covered call is made.
#[derive(Clone, Debug, Serialize)]
pub struct RequestRecord {
    /// The request's id (`workflow approve ID`).
    pub id: i64,
    /// The run.
    pub run: i64,
    /// The step that asked; it covers that step and the later ones up to the
    /// next request.
    pub step: String,
    /// The allowed-calls list: per tool, the inputs and ranges agreed.
    /// Immutable once requested (a schema trigger enforces it).
    pub allowed: serde_json::Value,
    /// Why the step asks (the gadget's words, shown sanitised).
    pub reason: String,
    /// `pending`, `approved`, `rejected`, `withdrawn`, or `replaced` (by a
    /// later request of the same step).
    pub state: RequestState,
    /// Who approved, rejected or withdrew it.
    pub decided_by: Option<String>,
}

/// One decided call of a workflow step (SPEC G7): the audit keeps its
/// certificate and an argument digest, never the arguments.
#[derive(Clone, Debug, Serialize)]
pub struct Invocation {
    /// The row's id.
    pub id: i64,
    /// The run.
    pub run: i64,
    /// The step that called.
    pub step: String,
    /// The serial of the step certificate the call presented, if any.
    pub certificate: Option<String>,
    /// The approval requests covering the call.
    pub requests: Vec<i64>,
    /// Who allowed it: the approvers (`carol + dave`), or the initiator for
    /// an uncovered step.
    pub authority: String,
    /// The `KEY:tool` called.
    pub tool: String,
    /// SHA-256 of the call's arguments.
    pub args_digest: String,
    /// `allowed` or `denied`.
    pub decision: InvocationDecision,
    /// The ledger action an allowed covered call was sent as (its claim,
    /// state and outcome live there: one send path, SPEC P7).
    pub action: Option<i64>,
    /// That action's state (`applying`, `applied`, `failed`, ...).
    pub state: Option<String>,
    /// For a denial: the input outside the agreed list (its name, never its
    /// value).
    pub failed_input: Option<String>,
    /// Why it was denied, with the agreed range.
    pub reason: Option<String>,
}

/// An audit row owned, to be written later in another transaction (an
/// allowed read's row is written with its observation, in one commit).
#[derive(Clone, Debug)]
pub struct AuditRow {
    /// The run.
    pub run: i64,
    /// The step.
    pub step: String,
    /// The certificate's serial.
    pub certificate: Option<String>,
    /// The covering requests.
    pub requests: Vec<i64>,
    /// Who allowed the call.
    pub authority: String,
    /// The `KEY:tool` called.
    pub tool: String,
    /// SHA-256 of the arguments.
    pub args_digest: String,
    /// A note kept with the row.
    pub reason: Option<String>,
}

impl AuditRow {
    /// The row of an allowed call that needs no claim (a read).
    pub fn allowed(&self) -> NewInvocation<'_> {
        NewInvocation {
            run: self.run,
            step: &self.step,
            certificate: self.certificate.as_deref(),
            requests: &self.requests,
            authority: &self.authority,
            tool: &self.tool,
            args_digest: &self.args_digest,
            decision: InvocationDecision::Allowed,
            action: None,
            failed_input: None,
            reason: self.reason.as_deref(),
        }
    }
}

/// Insert an audit row on `conn`, inside the caller's transaction.
pub(super) fn insert_invocation(
    conn: &rusqlite::Connection,
    i: &NewInvocation<'_>,
) -> anyhow::Result<i64> {
    conn.execute(
        "INSERT INTO invocations (run, step, certificate, requests, authority, tool, args_digest,
           decision, action, failed_input, reason, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        params![
            i.run,
            i.step,
            i.certificate,
            serde_json::to_string(i.requests)?,
            i.authority,
            i.tool,
            i.args_digest,
            i.decision,
            i.action,
            i.failed_input,
            i.reason,
            now_ms()
        ],
    )?;
    Ok(conn.last_insert_rowid())
}

/// An audit row about to be written.
pub struct NewInvocation<'a> {
    /// The run.
    pub run: i64,
    /// The step.
    pub step: &'a str,
    /// The certificate's serial.
    pub certificate: Option<&'a str>,
    /// The covering requests.
    pub requests: &'a [i64],
    /// Who allowed (or would have allowed) the call.
    pub authority: &'a str,
    /// The `KEY:tool` called.
    pub tool: &'a str,
    /// SHA-256 of the arguments.
    pub args_digest: &'a str,
    /// `allowed` or `denied`.
    pub decision: InvocationDecision,
    /// The ledger action an allowed covered action was staged as.
    pub action: Option<i64>,
    /// For a denial: the input outside the list.
    pub failed_input: Option<&'a str>,
    /// Why it was denied.
    pub reason: Option<&'a str>,
}

/// A certificate as the store records it: what revocation and audit need
/// of an issued certificate, not the signed claims themselves (those are
/// `crate::grants`' shape; the store keeps its own row type).
pub struct NewCertificate<'a> {
    /// Unique per certificate; revocation is by serial.
    pub serial: &'a str,
    /// The run it was issued for.
    pub run: i64,
    /// The step of that run it was issued for.
    pub step: &'a str,
    /// Who it speaks for: the approver(s), else the run's initiator.
    pub authority: &'a str,
    /// The `KEY:tool` entries it covers.
    pub tools: &'a [String],
    /// When it was issued, in milliseconds since the epoch.
    pub issued_at: i64,
    /// When it stops being accepted, in milliseconds since the epoch.
    pub expires_at: i64,
}

fn json_list<T: serde::de::DeserializeOwned>(s: String) -> Vec<T> {
    serde_json::from_str(&s).unwrap_or_default()
}

fn step_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<StepRecord> {
    Ok(StepRecord {
        run: r.get(0)?,
        step: r.get(1)?,
        position: r.get(2)?,
        gadget: r.get(3)?,
        input: r.get(4)?,
        tools: json_list(r.get(5)?),
        preds: json_list(r.get(6)?),
        status: r.get(7)?,
        attempts: r.get(8)?,
        note: r.get(9)?,
    })
}

fn request_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RequestRecord> {
    let allowed: String = r.get(3)?;
    Ok(RequestRecord {
        id: r.get(0)?,
        run: r.get(1)?,
        step: r.get(2)?,
        allowed: serde_json::from_str(&allowed).unwrap_or_default(),
        reason: r.get(4)?,
        state: r.get(5)?,
        decided_by: r.get(6)?,
    })
}

fn run_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunRecord> {
    Ok(RunRecord {
        id: r.get(0)?,
        workflow: r.get(1)?,
        version: r.get(2)?,
        initiator: r.get(3)?,
        chat: r.get(4)?,
        state: r.get(5)?,
    })
}

const STEP_COLUMNS: &str =
    "run, step, position, gadget, input, tools, preds, status, attempts, note";
const REQUEST_COLUMNS: &str = "id, run, step, allowed, reason, state, decided_by";

impl Store {
    /// Publish a new version of `name`; returns its number.
    pub fn publish_workflow(
        &self,
        name: &str,
        design: &str,
        digest: &str,
        by: &str,
    ) -> anyhow::Result<i64> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let version: i64 = tx.query_row(
            "SELECT COALESCE(MAX(version), 0) + 1 FROM workflows WHERE name = ?1",
            [name],
            |r| r.get(0),
        )?;
        tx.execute(
            "INSERT INTO workflows (name, version, design, digest, published_by, published_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![name, version, design, digest, by, now_ms()],
        )?;
        tx.commit()?;
        Ok(version)
    }

    /// The design of `name` at `version` (the newest if `None`).
    pub fn workflow(
        &self,
        name: &str,
        version: Option<i64>,
    ) -> anyhow::Result<Option<(i64, String)>> {
        Ok(self
            .lock()
            .query_row(
                "SELECT version, design FROM workflows WHERE name = ?1
                   AND (?2 IS NULL OR version = ?2) ORDER BY version DESC LIMIT 1",
                params![name, version],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?)
    }

    pub fn create_run(
        &self,
        workflow: &str,
        version: i64,
        initiator: &str,
        chat: &str,
        steps: &[NewStep],
    ) -> anyhow::Result<i64> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let now = now_ms();
        tx.execute(
            "INSERT INTO workflow_runs (workflow, version, initiator, chat, state, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?5)",
            params![workflow, version, initiator, chat, now],
        )?;
        let run = tx.last_insert_rowid();
        for (i, s) in steps.iter().enumerate() {
            tx.execute(
                "INSERT INTO run_steps (run, step, position, gadget, input, tools, preds, status)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'pending')",
                params![
                    run,
                    s.step,
                    i as i64,
                    s.gadget,
                    s.input,
                    serde_json::to_string(&s.tools)?,
                    serde_json::to_string(&s.preds)?
                ],
            )?;
        }
        tx.commit()?;
        Ok(run)
    }

    pub fn workflow_run(&self, run: i64) -> anyhow::Result<Option<RunRecord>> {
        Ok(self
            .lock()
            .query_row(
                "SELECT id, workflow, version, initiator, chat, state FROM workflow_runs WHERE id = ?1",
                [run],
                run_from_row,
            )
            .optional()?)
    }

    pub fn set_run_state(&self, run: i64, state: RunState) -> anyhow::Result<()> {
        self.lock().execute(
            "UPDATE workflow_runs SET state = ?2, updated_at = ?3 WHERE id = ?1",
            params![run, state, now_ms()],
        )?;
        Ok(())
    }

    pub fn run_steps(&self, run: i64) -> anyhow::Result<Vec<StepRecord>> {
        let conn = self.lock();
        let mut st = conn.prepare_cached(&format!(
            "SELECT {STEP_COLUMNS} FROM run_steps WHERE run = ?1 ORDER BY position"
        ))?;
        let rows = st.query_map([run], step_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn set_step_status(
        &self,
        run: i64,
        step: &str,
        status: StepStatus,
        note: Option<&str>,
        attempted: bool,
    ) -> anyhow::Result<()> {
        self.lock().execute(
            "UPDATE run_steps SET status = ?3, note = ?4, attempts = attempts + ?5
             WHERE run = ?1 AND step = ?2",
            params![run, step, status, note, attempted as i64],
        )?;
        Ok(())
    }

    /// Record a request; an earlier one of the same step is replaced by it
    /// (G2: a re-submitted request replaces a rejected one).
    pub fn add_request(
        &self,
        run: i64,
        step: &str,
        allowed: &str,
        reason: &str,
    ) -> anyhow::Result<i64> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        // A re-run of the step asking for exactly what it asked before is
        // the same request: an approved (or still pending) one stands, so
        // the step is not gated again by its own re-run (SPEC G8).
        let same: Option<i64> = tx
            .query_row(
                "SELECT id FROM approval_requests
                 WHERE run = ?1 AND step = ?2 AND state IN ('pending', 'approved')
                   AND allowed = ?3 AND reason = ?4
                 ORDER BY id DESC LIMIT 1",
                params![run, step, allowed, reason],
                |r| r.get(0),
            )
            .optional()?;
        if let Some(id) = same {
            return Ok(id);
        }
        tx.execute(
            "UPDATE approval_requests SET state = 'replaced'
             WHERE run = ?1 AND step = ?2 AND state <> 'replaced'",
            params![run, step],
        )?;
        tx.execute(
            "INSERT INTO approval_requests (run, step, allowed, reason, state, created_at)
             VALUES (?1, ?2, ?3, ?4, 'pending', ?5)",
            params![run, step, allowed, reason, now_ms()],
        )?;
        let id = tx.last_insert_rowid();
        tx.commit()?;
        Ok(id)
    }

    pub fn request(&self, id: i64) -> anyhow::Result<Option<RequestRecord>> {
        Ok(self
            .lock()
            .query_row(
                &format!("SELECT {REQUEST_COLUMNS} FROM approval_requests WHERE id = ?1"),
                [id],
                request_from_row,
            )
            .optional()?)
    }

    /// Requests of a run (all runs if `None`), oldest first.
    pub fn requests(&self, run: Option<i64>) -> anyhow::Result<Vec<RequestRecord>> {
        let conn = self.lock();
        let mut st = conn.prepare_cached(&format!(
            "SELECT {REQUEST_COLUMNS} FROM approval_requests WHERE (?1 IS NULL OR run = ?1) ORDER BY id"
        ))?;
        let rows = st.query_map([run], request_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Move a request from `from` to `to`; false if it was not in `from`.
    pub fn decide_request(
        &self,
        id: i64,
        from: RequestState,
        to: RequestState,
        by: &str,
    ) -> anyhow::Result<bool> {
        let n = self.lock().execute(
            "UPDATE approval_requests SET state = ?3, decided_by = ?4, decided_at = ?5
             WHERE id = ?1 AND state = ?2",
            params![id, from, to, by, now_ms()],
        )?;
        Ok(n == 1)
    }

    /// Record a certificate issued for a step (its serial names it for
    /// revocation, SPEC G3).
    pub fn put_certificate(&self, c: &NewCertificate<'_>) -> anyhow::Result<()> {
        self.lock().execute(
            "INSERT INTO certificates (serial, run, step, authority, tools, issued_at, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                c.serial,
                c.run,
                c.step,
                c.authority,
                serde_json::to_string(c.tools)?,
                c.issued_at,
                c.expires_at
            ],
        )?;
        Ok(())
    }

    /// `None`: no certificate with this serial was issued here.
    pub fn certificate_revoked(&self, serial: &str) -> anyhow::Result<Option<bool>> {
        Ok(self
            .lock()
            .query_row(
                "SELECT revoked_at IS NOT NULL FROM certificates WHERE serial = ?1",
                [serial],
                |r| r.get(0),
            )
            .optional()?)
    }

    pub fn revoke_certificates(&self, run: i64, step: &str) -> anyhow::Result<()> {
        self.lock().execute(
            "UPDATE certificates SET revoked_at = ?3 WHERE run = ?1 AND step = ?2 AND revoked_at IS NULL",
            params![run, step, now_ms()],
        )?;
        Ok(())
    }

    /// Write an audit row.
    pub fn audit(&self, i: &NewInvocation<'_>) -> anyhow::Result<i64> {
        insert_invocation(&self.lock(), i)
    }

    pub fn invocations(&self, run: i64) -> anyhow::Result<Vec<Invocation>> {
        let conn = self.lock();
        let mut st = conn.prepare_cached(
            "SELECT i.id, i.run, i.step, i.certificate, i.requests, i.authority, i.tool,
                    i.args_digest, i.decision, COALESCE(l.state, i.state), i.failed_input,
                    i.reason, i.action
             FROM invocations i LEFT JOIN ledger l ON l.id = i.action
             WHERE i.run = ?1 ORDER BY i.id",
        )?;
        let rows = st.query_map([run], |r| {
            Ok(Invocation {
                id: r.get(0)?,
                run: r.get(1)?,
                step: r.get(2)?,
                certificate: r.get(3)?,
                requests: json_list(r.get(4)?),
                authority: r.get(5)?,
                tool: r.get(6)?,
                args_digest: r.get(7)?,
                decision: r.get(8)?,
                state: r.get(9)?,
                failed_input: r.get(10)?,
                reason: r.get(11)?,
                action: r.get(12)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}
