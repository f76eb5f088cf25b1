//! Workflows as stored (SPEC G): published designs, runs and their steps,
//! approval requests, certificates issued, and the audit of every decided
//! call. Triggers in the schema keep what must never change (a published
//! version, a step's tool set, a requested list) unchangeable even by a
//! hand edit, on both engines. Decisions live in `crate::workflow`.
//!
//! Every statement is written once over [`Sql`] for both engines. What
//! several hosts may do at once is decided by the database: a
//! request is decided by one conditional `UPDATE` (decided once, whoever
//! races), a new version of a design is numbered by an insert that a
//! concurrent publisher's row makes do nothing (then it numbers again), and
//! a step's requests are replaced under its run's row lock on PostgreSQL
//! (SQLite's writing transactions already exclude each other).

use super::sql::{Row, Sql, args};
use super::words::{InvocationDecision, RequestState, RunState, StepStatus};
use super::{Store, now_ms};
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
    /// `pending`, `approved`, `rejected`, `withdrawn`, `replaced` (by a
    /// later request of the same step), or `expired` (nobody decided it
    /// within its run's chat's expiry).
    pub state: RequestState,
    /// Who approved, rejected or withdrew it (`None` for an expired one:
    /// the clock decided).
    pub decided_by: Option<String>,
    /// When it was decided, withdrawn or expired, in ms since the epoch.
    pub decided_at: Option<i64>,
    /// When the step asked, in ms since the epoch; its expiry counts from
    /// here.
    pub created_at: i64,
    /// Who approved it, kept whatever happened to it since (a withdrawal,
    /// a replacement): what `log --approved-by` answers from (SPEC L2).
    pub approved_by: Option<String>,
    /// When it was approved.
    pub approved_at: Option<i64>,
}

/// A request waiting for a decision, with what a notice names of it (never
/// its list or its reason: the gadget wrote those, and they may carry what
/// the run read).
#[derive(Clone, Debug, Serialize)]
pub struct WaitingRequest {
    /// The request's id.
    pub id: i64,
    /// The run.
    pub run: i64,
    /// The step that asked.
    pub step: String,
    /// The design's name.
    pub workflow: String,
    /// The run's chat: who may decide is the one rule's answer for it.
    pub chat: String,
    /// Who started the run.
    pub initiator: String,
    /// When the step asked.
    pub created_at: i64,
}

/// A request a person approved (SPEC L2): a record of its own beside the
/// actions they approved, in `log --approved-by`.
#[derive(Clone, Debug, Serialize)]
pub struct ApprovedRequest {
    /// Always `request`: what tells this record from a ledger entry (its
    /// id is from the requests' own sequence, not the ledger's).
    pub kind: &'static str,
    /// The request's id (`workflow requests --run RUN` shows it).
    pub id: i64,
    /// The run.
    pub run: i64,
    /// The step that asked.
    pub step: String,
    /// The design's name.
    pub workflow: String,
    /// The run's chat.
    pub chat: String,
    /// Who started the run.
    pub initiator: String,
    /// Its state now (`approved`, or `withdrawn` or `replaced` since).
    pub state: RequestState,
    /// Who approved it.
    pub approved_by: String,
    /// When.
    pub approved_at: i64,
    /// When the step asked.
    pub created_at: i64,
}

/// Whose requests an expiry sweep looks at.
#[derive(Clone, Copy, Debug)]
pub(crate) enum RequestScope<'a> {
    /// Every run's.
    All,
    /// One run's.
    Run(i64),
    /// The runs of one chat (its expiry was changed).
    Chat(&'a str),
}

/// The requests covering `step` (G2): its own latest request, else the
/// union of what covers its predecessors. Coverage only runs forward.
/// Here, beside the rows it reads, because the expiry sweep asks it too
/// (to tell the steps gated on what expired); the decisions built on it
/// are `crate::workflow`'s.
pub(crate) fn coverage<'a>(
    steps: &[StepRecord],
    requests: &'a [RequestRecord],
    step: &str,
) -> Vec<&'a RequestRecord> {
    let mut out: Vec<&RequestRecord> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut todo = vec![step.to_owned()];
    while let Some(s) = todo.pop() {
        if !seen.insert(s.clone()) {
            continue;
        }
        if let Some(r) = requests
            .iter()
            .filter(|r| r.step == s && r.state != RequestState::Replaced)
            .max_by_key(|r| r.id)
        {
            if !out.iter().any(|o| o.id == r.id) {
                out.push(r);
            }
            continue;
        }
        if let Some(rec) = steps.iter().find(|x| x.step == s) {
            todo.extend(rec.preds.iter().cloned());
        }
    }
    out.sort_by_key(|r| r.id);
    out
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

fn step_from_row(r: &Row) -> anyhow::Result<StepRecord> {
    Ok(StepRecord {
        run: r.get(0)?,
        step: r.get(1)?,
        position: r.get(2)?,
        gadget: r.get(3)?,
        input: r.get(4)?,
        tools: json_list(r.get(5)?),
        preds: json_list(r.get(6)?),
        status: StepStatus::from_stored(&r.get::<String>(7)?),
        attempts: r.get(8)?,
        note: r.get(9)?,
    })
}

fn request_from_row(r: &Row) -> anyhow::Result<RequestRecord> {
    let allowed: String = r.get(3)?;
    Ok(RequestRecord {
        id: r.get(0)?,
        run: r.get(1)?,
        step: r.get(2)?,
        allowed: serde_json::from_str(&allowed).unwrap_or_default(),
        reason: r.get(4)?,
        state: RequestState::from_stored(&r.get::<String>(5)?),
        decided_by: r.get(6)?,
        decided_at: r.get(7)?,
        created_at: r.get(8)?,
        approved_by: r.get(9)?,
        approved_at: r.get(10)?,
    })
}

fn run_from_row(r: &Row) -> anyhow::Result<RunRecord> {
    Ok(RunRecord {
        id: r.get(0)?,
        workflow: r.get(1)?,
        version: r.get(2)?,
        initiator: r.get(3)?,
        chat: r.get(4)?,
        state: RunState::from_stored(&r.get::<String>(5)?),
    })
}

const STEP_COLUMNS: &str =
    "run, step, position, gadget, input, tools, preds, status, attempts, note";
const REQUEST_COLUMNS: &str = "id, run, step, allowed, reason, state, decided_by, decided_at, created_at, approved_by, approved_at";

impl Store {
    /// Publish a new version of `name`; returns its number.
    pub fn publish_workflow(
        &self,
        name: &str,
        design: &str,
        digest: &str,
        by: &str,
    ) -> anyhow::Result<i64> {
        self.write(|db| publish_workflow_in(db, name, design, digest, by, now_ms()))
    }

    /// The design of `name` at `version` (the newest if `None`).
    pub fn workflow(
        &self,
        name: &str,
        version: Option<i64>,
    ) -> anyhow::Result<Option<(i64, String)>> {
        self.with(|db| workflow_in(db, name, version))
    }

    /// Start a run of `workflow` at `version` with its steps, all pending;
    /// returns the run's id.
    pub fn create_run(
        &self,
        workflow: &str,
        version: i64,
        initiator: &str,
        chat: &str,
        steps: &[NewStep],
    ) -> anyhow::Result<i64> {
        self.write(|db| create_run_in(db, workflow, version, initiator, chat, steps, now_ms()))
    }

    /// The run `run`, if there is one.
    pub fn workflow_run(&self, run: i64) -> anyhow::Result<Option<RunRecord>> {
        self.with(|db| workflow_run_in(db, run))
    }

    /// Set the run's state.
    pub fn set_run_state(&self, run: i64, state: RunState) -> anyhow::Result<()> {
        self.with(|db| set_run_state_in(db, run, state, now_ms()))
    }

    /// The run's steps, in the design's order.
    pub fn run_steps(&self, run: i64) -> anyhow::Result<Vec<StepRecord>> {
        self.with(|db| run_steps_in(db, run))
    }

    /// Set a step's status and note, counting an attempt if it ran.
    pub fn set_step_status(
        &self,
        run: i64,
        step: &str,
        status: StepStatus,
        note: Option<&str>,
        attempted: bool,
    ) -> anyhow::Result<()> {
        self.with(|db| set_step_status_in(db, run, step, status, note, attempted))
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
        self.write(|db| add_request_in(db, run, step, allowed, reason, now_ms()))
    }

    /// The request `id`, if there is one. A pending request past its
    /// run's chat's expiry is marked `expired` as it is read (the clock
    /// decided, not the reader), as an action is.
    pub fn request(&self, id: i64) -> anyhow::Result<Option<RequestRecord>> {
        let found = self.with(|db| request_in(db, id))?;
        match found {
            Some(r) if r.state == RequestState::Pending => {
                if self
                    .expire_due_requests(RequestScope::Run(r.run))?
                    .is_empty()
                {
                    Ok(Some(r))
                } else {
                    self.with(|db| request_in(db, id))
                }
            }
            other => Ok(other),
        }
    }

    /// Requests of a run (all runs if `None`), oldest first; what expired
    /// is marked so first.
    pub fn requests(&self, run: Option<i64>) -> anyhow::Result<Vec<RequestRecord>> {
        self.expire_due_requests(run.map_or(RequestScope::All, RequestScope::Run))?;
        self.with(|db| requests_in(db, run))
    }

    /// Move a request from `from` to `to`; false if it was not in `from`.
    /// From `pending`, a request past its run's chat's expiry is marked
    /// `expired` in the same transaction and is not decided: an expired
    /// request can no longer be approved (or rejected).
    pub fn decide_request(
        &self,
        id: i64,
        from: RequestState,
        to: RequestState,
        by: &str,
    ) -> anyhow::Result<bool> {
        self.write(|db| decide_request_in(db, id, from, to, by, now_ms()))
    }

    /// Mark every pending request in `scope` that is past its run's chat's
    /// expiry `expired`, and tell the steps gated on it (their note says
    /// so and how to ask again); the ids it marked. It looks first, and
    /// takes the write lock only when something is due.
    pub(crate) fn expire_due_requests(&self, scope: RequestScope<'_>) -> anyhow::Result<Vec<i64>> {
        let now = now_ms();
        if self.with(|db| due_requests_in(db, scope, now))?.is_empty() {
            return Ok(Vec::new());
        }
        self.write(|db| expire_due_requests_in(db, scope, now_ms()))
    }

    /// Every request waiting for a decision, oldest first, with its run's
    /// chat (what expired is marked so first).
    pub fn waiting_requests(&self) -> anyhow::Result<Vec<WaitingRequest>> {
        self.expire_due_requests(RequestScope::All)?;
        self.with(waiting_requests_in)
    }

    /// The requests `person` approved (of the runs of `chat`, or of every
    /// run), by request id: what they agreed to, whatever happened to it
    /// since (SPEC L2).
    pub fn requests_approved_by(
        &self,
        person: &str,
        chat: Option<&str>,
    ) -> anyhow::Result<Vec<ApprovedRequest>> {
        self.with(|db| requests_approved_by_in(db, person, chat))
    }

    /// Record a certificate issued for a step (its serial names it for
    /// revocation, SPEC G3).
    pub fn put_certificate(&self, c: &NewCertificate<'_>) -> anyhow::Result<()> {
        self.with(|db| put_certificate_in(db, c))
    }

    /// `None`: no certificate with this serial was issued here.
    pub fn certificate_revoked(&self, serial: &str) -> anyhow::Result<Option<bool>> {
        self.with(|db| certificate_revoked_in(db, serial))
    }

    /// Revoke the step's certificates not revoked yet (its step ended, G6).
    pub fn revoke_certificates(&self, run: i64, step: &str) -> anyhow::Result<()> {
        self.with(|db| revoke_certificates_in(db, run, step, now_ms()))
    }

    /// Write an audit row.
    pub fn audit(&self, i: &NewInvocation<'_>) -> anyhow::Result<i64> {
        self.with(|db| insert_invocation(db, i))
    }

    /// The run's audit, oldest first; a covered call's state is its
    /// ledger action's.
    pub fn invocations(&self, run: i64) -> anyhow::Result<Vec<Invocation>> {
        self.with(|db| invocations_in(db, run))
    }
}

// The statements, written once for both engines (`store::sql`).

/// The next version of `name` is inserted; a publisher of the same name
/// that committed that number first makes the insert do nothing (on
/// PostgreSQL it waits for that publisher's commit), and the number is
/// taken again after it. On SQLite the writing transaction excludes every
/// other publisher, so the first insert is kept.
fn publish_workflow_in(
    db: &dyn Sql,
    name: &str,
    design: &str,
    digest: &str,
    by: &str,
    now: i64,
) -> anyhow::Result<i64> {
    for _ in 0..PUBLISH_ATTEMPTS {
        let published = db.row(
            "INSERT INTO workflows (name, version, design, digest, published_by, published_at)
             VALUES (?1, (SELECT COALESCE(MAX(version), 0) + 1 FROM workflows WHERE name = ?1),
                     ?2, ?3, ?4, ?5)
             ON CONFLICT (name, version) DO NOTHING
             RETURNING version",
            args![name, design, digest, by, now],
        )?;
        if let Some(r) = published {
            return r.get(0);
        }
    }
    anyhow::bail!(
        "workflow {name:?} was published by others {PUBLISH_ATTEMPTS} times while this version was numbered; publish again"
    )
}

/// How often a publisher numbers its version again when others keep
/// taking the number first.
const PUBLISH_ATTEMPTS: usize = 100;

fn workflow_in(
    db: &dyn Sql,
    name: &str,
    version: Option<i64>,
) -> anyhow::Result<Option<(i64, String)>> {
    let found = match version {
        Some(v) => db.row(
            "SELECT version, design FROM workflows WHERE name = ?1 AND version = ?2",
            args![name, v],
        )?,
        None => db.row(
            "SELECT version, design FROM workflows WHERE name = ?1
             ORDER BY version DESC LIMIT 1",
            args![name],
        )?,
    };
    found.map(|r| Ok((r.get(0)?, r.get(1)?))).transpose()
}

fn create_run_in(
    db: &dyn Sql,
    workflow: &str,
    version: i64,
    initiator: &str,
    chat: &str,
    steps: &[NewStep],
    now: i64,
) -> anyhow::Result<i64> {
    let run: i64 = db
        .row(
            "INSERT INTO workflow_runs (workflow, version, initiator, chat, state, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?5)
             RETURNING id",
            args![workflow, version, initiator, chat, now],
        )?
        .ok_or_else(|| anyhow::anyhow!("the run's insert returned no id"))?
        .get(0)?;
    for (i, s) in steps.iter().enumerate() {
        db.exec(
            "INSERT INTO run_steps (run, step, position, gadget, input, tools, preds, status)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'pending')",
            args![
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
    Ok(run)
}

fn workflow_run_in(db: &dyn Sql, run: i64) -> anyhow::Result<Option<RunRecord>> {
    db.row(
        "SELECT id, workflow, version, initiator, chat, state FROM workflow_runs WHERE id = ?1",
        args![run],
    )?
    .map(|r| run_from_row(&r))
    .transpose()
}

fn set_run_state_in(db: &dyn Sql, run: i64, state: RunState, now: i64) -> anyhow::Result<()> {
    db.exec(
        "UPDATE workflow_runs SET state = ?2, updated_at = ?3 WHERE id = ?1",
        args![run, state, now],
    )?;
    Ok(())
}

fn run_steps_in(db: &dyn Sql, run: i64) -> anyhow::Result<Vec<StepRecord>> {
    db.rows(
        &format!("SELECT {STEP_COLUMNS} FROM run_steps WHERE run = ?1 ORDER BY position"),
        args![run],
    )?
    .iter()
    .map(step_from_row)
    .collect()
}

fn set_step_status_in(
    db: &dyn Sql,
    run: i64,
    step: &str,
    status: StepStatus,
    note: Option<&str>,
    attempted: bool,
) -> anyhow::Result<()> {
    db.exec(
        "UPDATE run_steps SET status = ?3, note = ?4, attempts = attempts + ?5
         WHERE run = ?1 AND step = ?2",
        args![run, step, status, note, i64::from(attempted)],
    )?;
    Ok(())
}

fn add_request_in(
    db: &dyn Sql,
    run: i64,
    step: &str,
    allowed: &str,
    reason: &str,
    now: i64,
) -> anyhow::Result<i64> {
    // The run's requests change one adder at a time: on PostgreSQL the
    // run's row is held until this transaction ends, so a concurrent adder
    // sees this one's request and replaces it (or is it), never leaving
    // two standing.
    db.hold("SELECT id FROM workflow_runs WHERE id = ?1", args![run])?;
    // A re-run of the step asking for exactly what it asked before is
    // the same request: an approved (or still pending) one stands, so
    // the step is not gated again by its own re-run (SPEC G8).
    let same: Option<i64> = db
        .row(
            "SELECT id FROM approval_requests
             WHERE run = ?1 AND step = ?2 AND state IN ('pending', 'approved')
               AND allowed = ?3 AND reason = ?4
             ORDER BY id DESC LIMIT 1",
            args![run, step, allowed, reason],
        )?
        .map(|r| r.get(0))
        .transpose()?;
    if let Some(id) = same {
        return Ok(id);
    }
    db.exec(
        "UPDATE approval_requests SET state = 'replaced'
         WHERE run = ?1 AND step = ?2 AND state <> 'replaced'",
        args![run, step],
    )?;
    db.row(
        "INSERT INTO approval_requests (run, step, allowed, reason, state, created_at)
         VALUES (?1, ?2, ?3, ?4, 'pending', ?5)
         RETURNING id",
        args![run, step, allowed, reason, now],
    )?
    .ok_or_else(|| anyhow::anyhow!("the request's insert returned no id"))?
    .get(0)
}

fn request_in(db: &dyn Sql, id: i64) -> anyhow::Result<Option<RequestRecord>> {
    db.row(
        &format!("SELECT {REQUEST_COLUMNS} FROM approval_requests WHERE id = ?1"),
        args![id],
    )?
    .map(|r| request_from_row(&r))
    .transpose()
}

fn requests_in(db: &dyn Sql, run: Option<i64>) -> anyhow::Result<Vec<RequestRecord>> {
    match run {
        Some(run) => db.rows(
            &format!("SELECT {REQUEST_COLUMNS} FROM approval_requests WHERE run = ?1 ORDER BY id"),
            args![run],
        )?,
        None => db.rows(
            &format!("SELECT {REQUEST_COLUMNS} FROM approval_requests ORDER BY id"),
            args![],
        )?,
    }
    .iter()
    .map(request_from_row)
    .collect()
}

/// One conditional `UPDATE` decides: of deciders racing on one request,
/// on either engine, only the first finds it still in `from`. A pending
/// request past its run's chat's expiry is marked `expired` first, in the
/// caller's transaction, so it is no longer pending when the `UPDATE`
/// looks. An approval also records its approver, once (a schema trigger
/// keeps it).
fn decide_request_in(
    db: &dyn Sql,
    id: i64,
    from: RequestState,
    to: RequestState,
    by: &str,
    now: i64,
) -> anyhow::Result<bool> {
    if from == RequestState::Pending {
        let run: Option<i64> = db
            .row("SELECT run FROM approval_requests WHERE id = ?1", args![id])?
            .map(|r| r.get(0))
            .transpose()?;
        if let Some(run) = run {
            expire_due_requests_in(db, RequestScope::Run(run), now)?;
        }
    }
    let approves = i64::from(to == RequestState::Approved);
    let n = db.exec(
        "UPDATE approval_requests SET state = ?3, decided_by = ?4, decided_at = ?5,
           approved_by = CASE WHEN ?6 = 1 THEN ?4 ELSE approved_by END,
           approved_at = CASE WHEN ?6 = 1 THEN ?5 ELSE approved_at END
         WHERE id = ?1 AND state = ?2",
        args![id, from, to, by, now, approves],
    )?;
    Ok(n == 1)
}

/// The pending requests past their run's chat's expiry (`?1` the default
/// expiry, `?2` now), in one run (`?3`), in the runs of one chat (`?4`), or
/// everywhere: `(id, run)`. Counted from when the step asked, as an
/// action's expiry is counted from its staging (SPEC H3).
const DUE_REQUESTS: &str = "SELECT r.id, r.run FROM approval_requests r
     JOIN workflow_runs w ON w.id = r.run
     LEFT JOIN chats c ON c.name = w.chat
     WHERE r.state = 'pending'
       AND r.created_at + COALESCE(c.expire_after_ms, ?1) <= ?2
       AND (CAST(?3 AS BIGINT) IS NULL OR r.run = ?3)
       AND (CAST(?4 AS TEXT) IS NULL OR w.chat = ?4)
     ORDER BY r.id";

fn due_requests_in(
    db: &dyn Sql,
    scope: RequestScope<'_>,
    now: i64,
) -> anyhow::Result<Vec<(i64, i64)>> {
    let (run, chat) = match scope {
        RequestScope::All => (None, None),
        RequestScope::Run(r) => (Some(r), None),
        RequestScope::Chat(c) => (None, Some(c)),
    };
    db.rows(
        DUE_REQUESTS,
        args![super::DEFAULT_EXPIRY_MS, now, run, chat],
    )?
    .iter()
    .map(|r| Ok((r.get(0)?, r.get(1)?)))
    .collect()
}

/// [`Store::expire_due_requests`] in the caller's transaction: each due
/// request is marked by a conditional `UPDATE` (a decider that took it
/// first keeps it), then each step gated on one of them is told, in its
/// note: the request expired, nothing it covers was sent, and how to ask
/// again. The step stays gated (re-submitting runs the asking step again,
/// and an approval then lets it run).
pub(crate) fn expire_due_requests_in(
    db: &dyn Sql,
    scope: RequestScope<'_>,
    now: i64,
) -> anyhow::Result<Vec<i64>> {
    let mut expired = Vec::new();
    let mut runs = std::collections::BTreeSet::new();
    for (id, run) in due_requests_in(db, scope, now)? {
        let n = db.exec(
            "UPDATE approval_requests SET state = 'expired', decided_at = ?2
             WHERE id = ?1 AND state = 'pending'",
            args![id, now],
        )?;
        if n == 1 {
            expired.push(id);
            runs.insert(run);
        }
    }
    for run in runs {
        let steps = run_steps_in(db, run)?;
        let requests = requests_in(db, Some(run))?;
        for step in steps.iter().filter(|s| s.status == StepStatus::Gated) {
            let Some(r) = coverage(&steps, &requests, &step.step)
                .into_iter()
                .find(|r| expired.contains(&r.id))
            else {
                continue;
            };
            let note = format!(
                "approval request #{0} expired before anyone decided it; nothing it covers was sent; `gatehouse workflow resubmit {0}` asks again",
                r.id
            );
            db.exec(
                "UPDATE run_steps SET note = ?3 WHERE run = ?1 AND step = ?2",
                args![run, step.step, note],
            )?;
        }
    }
    Ok(expired)
}

fn waiting_requests_in(db: &dyn Sql) -> anyhow::Result<Vec<WaitingRequest>> {
    db.rows(
        "SELECT r.id, r.run, r.step, w.workflow, w.chat, w.initiator, r.created_at
         FROM approval_requests r JOIN workflow_runs w ON w.id = r.run
         WHERE r.state = 'pending' ORDER BY r.id",
        args![],
    )?
    .iter()
    .map(|r| {
        Ok(WaitingRequest {
            id: r.get(0)?,
            run: r.get(1)?,
            step: r.get(2)?,
            workflow: r.get(3)?,
            chat: r.get(4)?,
            initiator: r.get(5)?,
            created_at: r.get(6)?,
        })
    })
    .collect()
}

fn requests_approved_by_in(
    db: &dyn Sql,
    person: &str,
    chat: Option<&str>,
) -> anyhow::Result<Vec<ApprovedRequest>> {
    db.rows(
        "SELECT r.id, r.run, r.step, w.workflow, w.chat, w.initiator, r.state,
                r.approved_by, r.approved_at, r.created_at
         FROM approval_requests r JOIN workflow_runs w ON w.id = r.run
         WHERE r.approved_by = ?1 AND (CAST(?2 AS TEXT) IS NULL OR w.chat = ?2)
         ORDER BY r.id",
        args![person, chat],
    )?
    .iter()
    .map(|r| {
        Ok(ApprovedRequest {
            kind: "request",
            id: r.get(0)?,
            run: r.get(1)?,
            step: r.get(2)?,
            workflow: r.get(3)?,
            chat: r.get(4)?,
            initiator: r.get(5)?,
            state: RequestState::from_stored(&r.get::<String>(6)?),
            approved_by: r.get(7)?,
            approved_at: r.get(8)?,
            created_at: r.get(9)?,
        })
    })
    .collect()
}

fn put_certificate_in(db: &dyn Sql, c: &NewCertificate<'_>) -> anyhow::Result<()> {
    db.exec(
        "INSERT INTO certificates (serial, run, step, authority, tools, issued_at, expires_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        args![
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

fn certificate_revoked_in(db: &dyn Sql, serial: &str) -> anyhow::Result<Option<bool>> {
    db.row(
        "SELECT revoked_at FROM certificates WHERE serial = ?1",
        args![serial],
    )?
    .map(|r| Ok(r.get::<Option<i64>>(0)?.is_some()))
    .transpose()
}

fn revoke_certificates_in(db: &dyn Sql, run: i64, step: &str, now: i64) -> anyhow::Result<()> {
    db.exec(
        "UPDATE certificates SET revoked_at = ?3 WHERE run = ?1 AND step = ?2 AND revoked_at IS NULL",
        args![run, step, now],
    )?;
    Ok(())
}

/// Insert an audit row on `db`, inside the caller's transaction (an
/// allowed read's row is written with its observation, in one commit).
pub(super) fn insert_invocation(db: &dyn Sql, i: &NewInvocation<'_>) -> anyhow::Result<i64> {
    db.row(
        "INSERT INTO invocations (run, step, certificate, requests, authority, tool, args_digest,
           decision, action, failed_input, reason, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
         RETURNING id",
        args![
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
    )?
    .ok_or_else(|| anyhow::anyhow!("the audit row's insert returned no id"))?
    .get(0)
}

fn invocations_in(db: &dyn Sql, run: i64) -> anyhow::Result<Vec<Invocation>> {
    db.rows(
        "SELECT i.id, i.run, i.step, i.certificate, i.requests, i.authority, i.tool,
                i.args_digest, i.decision, COALESCE(l.state, i.state), i.failed_input,
                i.reason, i.action
         FROM invocations i LEFT JOIN ledger l ON l.id = i.action
         WHERE i.run = ?1 ORDER BY i.id",
        args![run],
    )?
    .iter()
    .map(|r| {
        Ok(Invocation {
            id: r.get(0)?,
            run: r.get(1)?,
            step: r.get(2)?,
            certificate: r.get(3)?,
            requests: json_list(r.get(4)?),
            authority: r.get(5)?,
            tool: r.get(6)?,
            args_digest: r.get(7)?,
            decision: InvocationDecision::from_stored(&r.get::<String>(8)?),
            state: r.get(9)?,
            failed_input: r.get(10)?,
            reason: r.get(11)?,
            action: r.get(12)?,
        })
    })
    .collect()
}

#[cfg(test)]
mod on_both_engines {
    use super::*;
    use crate::store::suite::{Backend, runtime};

    const DESIGN: &str = r#"{"steps": []}"#;

    fn digest() -> String {
        "d".repeat(64)
    }

    /// A run of `w` v1 in `chat` with two steps, `fetch` (tools `K:read`)
    /// and `send` (tools `K:send`, after `fetch`); its id.
    async fn run_of(b: &Backend, chat: &str) -> i64 {
        let chat = chat.to_owned();
        b.run(move |db| {
            let steps = [
                ("fetch", "K:read", vec![]),
                ("send", "K:send", vec!["fetch"]),
            ]
            .map(|(step, tool, preds)| NewStep {
                step: step.into(),
                gadget: "g".into(),
                input: "in".into(),
                tools: vec![tool.into()],
                preds: preds.into_iter().map(String::from).collect(),
            });
            create_run_in(db, "w", 1, "ann", &chat, &steps, 1)
        })
        .await
        .expect("a run")
    }

    /// SPEC H3, for requests as for actions: a pending request past its run's
    /// chat's expiry is marked `expired` (by the clock, nobody's
    /// decision), and the step gated on it is told in its note; a
    /// decision on it then finds it expired and changes nothing. An
    /// approval records its approver, kept through a withdrawal and
    /// listed for `log --approved-by`; the schema refuses rewriting it.
    #[test]
    fn a_request_expires_like_an_action_and_its_approver_is_kept() {
        runtime().block_on(async {
            for b in Backend::both().await {
                let e = b.name();
                let chat = format!("c-{}", crate::entropy::random_hex(4).expect("entropy"));
                let c = chat.clone();
                b.run(move |db| {
                    db.exec(
                        "INSERT INTO chats (name, owner, created_at, expire_after_ms)
                         VALUES (?1, 'ann', 0, 1000)",
                        args![c],
                    )
                })
                .await
                .expect("a chat expiring after a second");
                let run = run_of(&b, &chat).await;
                let id = b
                    .run(move |db| {
                        let id = add_request_in(db, run, "fetch", r#"{"K:send": {}}"#, "why", 1_000)?;
                        set_step_status_in(db, run, "fetch", StepStatus::Done, None, true)?;
                        set_step_status_in(db, run, "send", StepStatus::Gated, Some("waits"), true)?;
                        Ok(id)
                    })
                    .await
                    .expect("requested");
                let early = b
                    .run(move |db| expire_due_requests_in(db, RequestScope::Run(run), 1_999))
                    .await
                    .expect("swept");
                assert!(early.is_empty(), "{e}: not due yet");

                // Due at 2 000: the approval finds it expired.
                let decided = b
                    .run(move |db| {
                        decide_request_in(
                            db,
                            id,
                            RequestState::Pending,
                            RequestState::Approved,
                            "carol",
                            2_000,
                        )
                    })
                    .await
                    .expect("decided");
                assert!(!decided, "{e}: an expired request is never approved");
                let r = b
                    .run(move |db| request_in(db, id))
                    .await
                    .expect("read")
                    .expect("the request");
                assert_eq!(
                    (r.state, r.decided_by.as_deref(), r.decided_at, r.approved_by.as_deref()),
                    (RequestState::Expired, None, Some(2_000), None),
                    "{e}"
                );
                let steps = b.run(move |db| run_steps_in(db, run)).await.expect("read");
                let send = steps.iter().find(|s| s.step == "send").expect("send");
                assert_eq!(send.status, StepStatus::Gated, "{e}");
                assert_eq!(
                    send.note.clone(),
                    Some(format!(
                        "approval request #{id} expired before anyone decided it; nothing it covers was sent; `gatehouse workflow resubmit {id}` asks again"
                    )),
                    "{e}: the step waiting on it is told"
                );
                let c = chat.clone();
                let again = b
                    .run(move |db| expire_due_requests_in(db, RequestScope::Chat(&c), 9_000))
                    .await
                    .expect("swept");
                assert!(again.is_empty(), "{e}: expired once");

                // Asked anew, approved in time, withdrawn: still approved by carol.
                let second = b
                    .run(move |db| {
                        let second =
                            add_request_in(db, run, "fetch", r#"{"K:send": {"n": 1}}"#, "again", 5_000)?;
                        let approved = decide_request_in(
                            db,
                            second,
                            RequestState::Pending,
                            RequestState::Approved,
                            "carol",
                            5_001,
                        )?;
                        let withdrawn = decide_request_in(
                            db,
                            second,
                            RequestState::Approved,
                            RequestState::Withdrawn,
                            "ann",
                            5_002,
                        )?;
                        assert!(approved && withdrawn);
                        Ok(second)
                    })
                    .await
                    .expect(e);
                let listed = b
                    .run(|db| requests_approved_by_in(db, "carol", None))
                    .await
                    .expect("listed");
                let seen: Vec<_> = listed
                    .iter()
                    .map(|r| (r.kind, r.id, r.state, r.approved_by.as_str(), r.approved_at))
                    .collect();
                assert_eq!(
                    seen,
                    vec![("request", second, RequestState::Withdrawn, "carol", 5_001)],
                    "{e}"
                );
                let c = chat.clone();
                assert!(
                    b.run(move |db| requests_approved_by_in(db, "carol", Some(&c)))
                        .await
                        .expect("listed")
                        .len()
                        == 1
                        && b.run(|db| requests_approved_by_in(db, "carol", Some("other")))
                            .await
                            .expect("listed")
                            .is_empty(),
                    "{e}: by chat"
                );
                let rewrite = b
                    .run(move |db| {
                        db.exec(
                            "UPDATE approval_requests SET approved_by = 'mallory' WHERE id = ?1",
                            args![second],
                        )
                    })
                    .await;
                let err = format!("{:#}", rewrite.expect_err("refused"));
                assert!(err.contains("who approved a request is never rewritten"), "{e}: {err}");
            }
        });
    }

    /// Publishers of one name at once each get a version of their own,
    /// numbered from 1 without a gap; what was published, a step's tool
    /// set and a requested list are then refused every change by the
    /// schema's triggers, while a step's status still moves.
    #[test]
    fn a_published_version_and_a_steps_tool_set_never_change() {
        runtime().block_on(async {
            for b in Backend::both().await {
                let e = b.name();
                let publishers: Vec<_> = (0..8)
                    .map(|n| {
                        let b = b.clone();
                        tokio::spawn(async move {
                            b.run(move |db| {
                                let design = format!(r#"{{"n": {n}}}"#);
                                publish_workflow_in(db, "w", &design, &digest(), "ann", n)
                            })
                            .await
                        })
                    })
                    .collect();
                let mut versions = Vec::new();
                for p in publishers {
                    versions.push(p.await.expect("joined").expect(e));
                }
                versions.sort_unstable();
                assert_eq!(versions, (1..=8).collect::<Vec<_>>(), "{e}");
                let v9 = b
                    .run(|db| publish_workflow_in(db, "w", DESIGN, &digest(), "ann", 9))
                    .await
                    .expect("published");
                assert_eq!(v9, 9, "{e}");
                let newest = b.run(|db| workflow_in(db, "w", None)).await.expect("read");
                assert_eq!(newest, Some((9, DESIGN.to_owned())), "{e}");
                let first = b
                    .run(|db| workflow_in(db, "w", Some(3)))
                    .await
                    .expect("read")
                    .expect("version 3");
                assert_eq!(first.0, 3, "{e}");
                assert!(
                    b.run(|db| workflow_in(db, "w", Some(10)))
                        .await
                        .expect("read")
                        .is_none(),
                    "{e}"
                );
                assert!(
                    b.run(|db| workflow_in(db, "other", None))
                        .await
                        .expect("read")
                        .is_none(),
                    "{e}"
                );

                let run = run_of(&b, "c").await;
                let id = b
                    .run(move |db| add_request_in(db, run, "send", r#"{"K:send": {}}"#, "why", 2))
                    .await
                    .expect("requested");
                let changes: [(&str, &str); 4] = [
                    (
                        "UPDATE workflows SET design = '{\"n\": 99}' WHERE name = 'w' AND version = 1",
                        "a published workflow version never changes",
                    ),
                    (
                        "UPDATE run_steps SET tools = '[\"K:send\", \"K:delete\"]' WHERE run = ?1",
                        "a run step's tool set never changes",
                    ),
                    (
                        "UPDATE run_steps SET gadget = 'other' WHERE run = ?1",
                        "a run step's tool set never changes",
                    ),
                    (
                        "UPDATE approval_requests SET allowed = '{\"K:delete\": {}}' WHERE run = ?1",
                        "an allowed-calls list never changes once requested",
                    ),
                ];
                for (change, why) in changes {
                    let refused = b
                        .run(move |db| {
                            if change.contains("?1") {
                                db.exec(change, args![run])
                            } else {
                                db.exec(change, args![])
                            }
                        })
                        .await;
                    let err = format!("{:#}", refused.expect_err(change));
                    assert!(err.contains(why), "{e}: {change} was refused with {err}");
                }
                let version1 = b
                    .run(|db| workflow_in(db, "w", Some(1)))
                    .await
                    .expect("read")
                    .expect("version 1");
                assert_ne!(version1.1, r#"{"n": 99}"#, "{e}");
                b.run(move |db| {
                    set_step_status_in(db, run, "fetch", StepStatus::Done, Some("ok"), true)?;
                    set_step_status_in(db, run, "send", StepStatus::Gated, Some("gate"), false)
                })
                .await
                .expect("the status moves");
                let steps = b.run(move |db| run_steps_in(db, run)).await.expect("read");
                let seen: Vec<_> = steps
                    .iter()
                    .map(|s| {
                        (
                            s.step.as_str(),
                            s.tools.clone(),
                            s.preds.clone(),
                            s.status,
                            s.attempts,
                            s.note.as_deref(),
                        )
                    })
                    .collect();
                assert_eq!(
                    seen,
                    vec![
                        (
                            "fetch",
                            vec!["K:read".to_owned()],
                            vec![],
                            StepStatus::Done,
                            1,
                            Some("ok")
                        ),
                        (
                            "send",
                            vec!["K:send".to_owned()],
                            vec!["fetch".to_owned()],
                            StepStatus::Gated,
                            0,
                            Some("gate")
                        ),
                    ],
                    "{e}"
                );
                let request = b
                    .run(move |db| request_in(db, id))
                    .await
                    .expect("read")
                    .expect("the request");
                assert_eq!(
                    request.allowed,
                    serde_json::json!({"K:send": {}}),
                    "{e}: the list is as requested"
                );
                b.run(move |db| set_run_state_in(db, run, RunState::Waiting, 3))
                    .await
                    .expect("set");
                let r = b
                    .run(move |db| workflow_run_in(db, run))
                    .await
                    .expect("read")
                    .expect("the run");
                assert_eq!(
                    (r.workflow.as_str(), r.version, r.state),
                    ("w", 1, RunState::Waiting),
                    "{e}"
                );
            }
        });
    }

    /// Deciders racing on one pending request (some approving, some
    /// rejecting), each on a connection of its own: exactly one decides
    /// it, and the request says who. Adders racing on one step leave
    /// exactly one request standing; asking again for the same list is
    /// the same request.
    #[test]
    fn a_request_is_decided_once_when_deciders_race() {
        runtime().block_on(async {
            for b in Backend::both().await {
                let e = b.name();
                let run = run_of(&b, "c").await;
                let list = r#"{"K:send": {"to": ["a@example.com"]}}"#;
                let id = b
                    .run(move |db| add_request_in(db, run, "send", list, "mail a", 1))
                    .await
                    .expect("requested");
                let again = b
                    .run(move |db| add_request_in(db, run, "send", list, "mail a", 2))
                    .await
                    .expect("asked again");
                assert_eq!(again, id, "{e}: the same ask is the same request (G8)");

                let deciders: Vec<_> = (0..12)
                    .map(|n| {
                        let b = b.clone();
                        let to = if n % 2 == 0 {
                            RequestState::Approved
                        } else {
                            RequestState::Rejected
                        };
                        tokio::spawn(async move {
                            let by = format!("d{n}");
                            let won = b
                                .run(move |db| {
                                    decide_request_in(db, id, RequestState::Pending, to, &by, 3)
                                })
                                .await;
                            (n, to, won)
                        })
                    })
                    .collect();
                let mut won = Vec::new();
                for d in deciders {
                    let (n, to, decided) = d.await.expect("joined");
                    if decided.expect(e) {
                        won.push((n, to));
                    }
                }
                assert_eq!(won.len(), 1, "{e}: winners {won:?}");
                let (n, to) = won[0];
                let r = b
                    .run(move |db| request_in(db, id))
                    .await
                    .expect("read")
                    .expect("the request");
                assert_eq!((r.state, r.decided_by), (to, Some(format!("d{n}"))), "{e}");
                // Decided is decided: a late decider changes nothing.
                assert!(
                    !b.run(move |db| decide_request_in(
                        db,
                        id,
                        RequestState::Pending,
                        RequestState::Approved,
                        "late",
                        4
                    ))
                    .await
                    .expect("decided"),
                    "{e}"
                );

                // Adders of one step asking for different lists at once:
                // each replaces the one before, and one is left standing.
                let adders: Vec<_> = (0..8)
                    .map(|n| {
                        let b = b.clone();
                        tokio::spawn(async move {
                            b.run(move |db| {
                                let list = format!(r#"{{"K:send": {{"n": {n}}}}}"#);
                                add_request_in(db, run, "send", &list, "again", 5)
                            })
                            .await
                        })
                    })
                    .collect();
                for a in adders {
                    a.await.expect("joined").expect(e);
                }
                let all = b
                    .run(move |db| requests_in(db, Some(run)))
                    .await
                    .expect("read");
                assert_eq!(all.len(), 9, "{e}");
                let standing: Vec<_> = all
                    .iter()
                    .filter(|r| r.state != RequestState::Replaced)
                    .map(|r| r.id)
                    .collect();
                assert_eq!(standing.len(), 1, "{e}: standing {standing:?}");
                assert_eq!(
                    standing[0],
                    all.iter().map(|r| r.id).max().unwrap_or_default(),
                    "{e}: the newest request stands"
                );
                let other = run_of(&b, "c").await;
                b.run(move |db| add_request_in(db, other, "fetch", "{}", "read", 6))
                    .await
                    .expect("requested");
                let everyone = b.run(|db| requests_in(db, None)).await.expect("read");
                assert_eq!(everyone.len(), 10, "{e}");
                assert!(
                    everyone.windows(2).all(|w| w[0].id < w[1].id),
                    "{e}: oldest first"
                );
            }
        });
    }

    /// A certificate is known by its serial and revoked once its step
    /// ends; the audit keeps every decided call, and a covered call's
    /// state is its ledger action's.
    #[test]
    fn certificates_are_revoked_by_step_and_the_audit_reads_the_ledger() {
        runtime().block_on(async {
            for b in Backend::both().await {
                let e = b.name();
                let run = run_of(&b, "c").await;
                let action = b.pending().await;
                b.run(move |db| {
                    for (serial, step) in [("s1", "fetch"), ("s2", "send")] {
                        put_certificate_in(
                            db,
                            &NewCertificate {
                                serial,
                                run,
                                step,
                                authority: "carol",
                                tools: &["K:send".to_owned()],
                                issued_at: 1,
                                expires_at: 2,
                            },
                        )?;
                    }
                    revoke_certificates_in(db, run, "send", 3)
                })
                .await
                .expect("issued");
                let revoked = b
                    .run(|db| {
                        ["s1", "s2", "unknown"]
                            .iter()
                            .map(|s| certificate_revoked_in(db, s))
                            .collect::<anyhow::Result<Vec<_>>>()
                    })
                    .await
                    .expect("read");
                assert_eq!(revoked, vec![Some(false), Some(true), None], "{e}");

                let ids = b
                    .run(move |db| {
                        let row = NewInvocation {
                            run,
                            step: "send",
                            certificate: Some("s2"),
                            requests: &[4, 5],
                            authority: "carol + dave",
                            tool: "K:send",
                            args_digest: &"a".repeat(64),
                            decision: InvocationDecision::Allowed,
                            action: Some(action),
                            failed_input: None,
                            reason: None,
                        };
                        let allowed = insert_invocation(db, &row)?;
                        let denied = insert_invocation(
                            db,
                            &NewInvocation {
                                decision: InvocationDecision::Denied,
                                action: None,
                                failed_input: Some("to"),
                                reason: Some("outside the list"),
                                ..row
                            },
                        )?;
                        Ok((allowed, denied))
                    })
                    .await
                    .expect("audited");
                assert!(ids.0 < ids.1, "{e}");
                let audit = b
                    .run(move |db| invocations_in(db, run))
                    .await
                    .expect("read");
                let seen: Vec<_> = audit
                    .iter()
                    .map(|i| {
                        (
                            i.id,
                            i.requests.clone(),
                            i.decision,
                            i.action,
                            i.state.as_deref(),
                            i.failed_input.as_deref(),
                        )
                    })
                    .collect();
                assert_eq!(
                    seen,
                    vec![
                        (
                            ids.0,
                            vec![4, 5],
                            InvocationDecision::Allowed,
                            Some(action),
                            Some("pending"),
                            None
                        ),
                        (
                            ids.1,
                            vec![4, 5],
                            InvocationDecision::Denied,
                            None,
                            None,
                            Some("to")
                        ),
                    ],
                    "{e}"
                );
            }
        });
    }
}
