//! Workflows with scoped approvals (SPEC G): published designs, runs that
//! fix each step's tool set, approval requests with allowed-calls lists,
//! coverage, the gate, certificates per step, the check of every call, and
//! its audit.
//!
//! Owns the rules of G1-G7. Signing and list matching are `crate::grants`;
//! storage is `store::workflows`; a call that passes is made through the
//! kernel's ordinary read path, or, for an action, staged and claimed at
//! once under its logical key (so a re-run never sends it twice, G8) and
//! sent through the kernel's one send path (P7). It may not store a call's
//! arguments in the audit (G7: a digest only).

use crate::capability::Person;
use crate::classify::{self, Kind};
use crate::grants::{self, CertRefusal, Claims, ToolRule};
use crate::kernel::{CallError, CallOutcome, Kernel, StepContext, Turn, check_name, random_hex};
use crate::overseer::Decision;
use crate::principal::Principal;
use crate::store::workflows::{
    AuditRow, NewCertificate, NewInvocation, NewStep, RequestRecord, StepRecord, coverage,
};
use crate::store::{
    ClaimBy, Facts, InvocationDecision, NewAction, RequestState, RunState, StageError, Staged,
    StepStatus,
};
use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// A workflow design, as published.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Design {
    /// The workflow's name; publishing it again makes a new version.
    pub name: String,
    /// Key → gatekeeper instance.
    pub services: BTreeMap<String, String>,
    /// The steps, each a gadget with a fixed tool set.
    pub steps: Vec<DesignStep>,
    /// `[from, to]` pairs; a step runs once every predecessor is done.
    #[serde(default)]
    pub edges: Vec<(String, String)>,
}

/// One step of a design: a gadget run with an input, allowed to call
/// exactly its tools, and only under its step certificate.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DesignStep {
    /// The step's name, unique in the design; edges and requests name it.
    pub id: String,
    /// The installed gadget the step runs.
    pub gadget: String,
    /// The gadget's input for the step.
    #[serde(default)]
    pub input: String,
    /// `KEY:tool` entries this step may call.
    #[serde(default)]
    pub tools: Vec<String>,
}

/// Where a run stands, with each step (as `workflow status` shows it).
#[derive(Clone, Debug, Serialize)]
pub struct RunSummary {
    /// The run's id.
    pub run: i64,
    /// `running`, `waiting` (a step is gated), `done` or `failed`.
    pub state: RunState,
    /// Every step, in the design's order, with its status.
    pub steps: Vec<StepRecord>,
    /// The run's approval requests so far.
    pub requests: Vec<RequestRecord>,
    /// The answers of the steps run by this call, in order (never stored:
    /// they may carry the values the audit must not keep).
    pub outputs: Vec<(String, Result<String, String>)>,
}

/// An approval request as a person sees it: its text (the one rendering
/// the terminal prints) and what they may do with it now (the one rule).
#[derive(Clone, Debug, Serialize)]
pub struct ShownRequest {
    /// The request as stored.
    pub request: RequestRecord,
    /// The request's prompt: its allowed-calls list and reason, sanitised
    /// (SPEC R).
    pub text: String,
    /// The viewer may approve it now.
    pub may_approve: bool,
    /// The viewer may reject it now.
    pub may_reject: bool,
    /// The viewer may take back its approval now.
    pub may_withdraw: bool,
    /// The viewer may ask anew after a rejection or withdrawal.
    pub may_resubmit: bool,
}

/// A person's decision on a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestDecision {
    /// Allow the calls on the list: covered steps may run.
    Approve,
    /// Refuse the list: covered steps stay gated until it is resubmitted.
    Reject,
    /// Take back an approval: the covered steps are gated again.
    Withdraw,
}

/// The maximum lifetime of a step certificate (G6):
/// `$GATEHOUSE_CERT_TTL_SECS`, default 300 s.
fn certificate_ttl_ms() -> i64 {
    std::env::var("GATEHOUSE_CERT_TTL_SECS")
        .ok()
        .and_then(|v| v.parse::<i64>().ok())
        .filter(|v| *v > 0)
        .unwrap_or(300)
        * 1000
}

/// Steps reachable from `step` (itself included), following edges forward.
fn forward(steps: &[StepRecord], step: &str) -> Vec<String> {
    let mut out = vec![step.to_owned()];
    let mut i = 0;
    while i < out.len() {
        let cur = out[i].clone();
        for s in steps {
            if s.preds.contains(&cur) && !out.contains(&s.step) {
                out.push(s.step.clone());
            }
        }
        i += 1;
    }
    out
}

/// Whether a request in `state` covers its steps' calls: only an approved
/// one does (an unknown stored state reads as rejected, SPEC G2).
fn covers(state: RequestState) -> bool {
    match state {
        RequestState::Approved => true,
        RequestState::Pending
        | RequestState::Rejected
        | RequestState::Withdrawn
        | RequestState::Replaced
        | RequestState::Expired => false,
    }
}

/// Whether a request in `state` may be re-submitted: a rejected, withdrawn
/// or expired one, so that no step stays stuck (G2).
fn may_resubmit(state: RequestState) -> bool {
    match state {
        RequestState::Rejected | RequestState::Withdrawn | RequestState::Expired => true,
        RequestState::Pending | RequestState::Approved | RequestState::Replaced => false,
    }
}

/// Why request `id` cannot be decided now that it expired: what happened,
/// that nothing was sent, and how to ask again.
fn expired_message(id: i64) -> String {
    format!(
        "request #{id} expired before anyone decided it (a request waits at most its run's chat's expiry, like an action); nothing it covers was sent; `gatehouse workflow resubmit {id}` asks again"
    )
}

fn approvers(cover: &[&RequestRecord]) -> String {
    let mut names: Vec<&str> = cover
        .iter()
        .filter_map(|r| r.decided_by.as_deref())
        .collect();
    names.sort_unstable();
    names.dedup();
    names.join(" + ")
}

fn gate_message(step: &str, r: &RequestRecord) -> String {
    if r.state == RequestState::Expired {
        return format!(
            "refused before it reached any gatekeeper: step {step} is covered by approval request #{0}, which expired before anyone decided it; `gatehouse workflow resubmit {0}` asks again",
            r.id
        );
    }
    format!(
        "refused before it reached any gatekeeper: step {step} is covered by approval request #{}, which is {}; no tool may be called until it is approved",
        r.id, r.state
    )
}

impl Kernel {
    /// Run every step that can run now, until the run is done, failed, or
    /// waits for a decision. Called at start and after every decision; a
    /// restarted host continues a run by calling it again (G, "runs persist").
    pub(crate) async fn advance(&self, run: i64) -> anyhow::Result<RunSummary> {
        let mut outputs = Vec::new();
        loop {
            let (record, steps, requests) = self
                .store()
                .run(move |s| {
                    Ok((
                        s.workflow_run(run)?,
                        s.run_steps(run)?,
                        s.requests(Some(run))?,
                    ))
                })
                .await?;
            let Some(record) = record else {
                bail!("no workflow run {run}");
            };
            match record.state {
                RunState::Done | RunState::Failed => break,
                RunState::Running | RunState::Waiting => {}
            }
            let next = steps.iter().find(|s| {
                let preds_done = s.preds.iter().all(|p| {
                    steps
                        .iter()
                        .any(|x| &x.step == p && x.status == StepStatus::Done)
                });
                let cover = coverage(&steps, &requests, &s.step);
                match s.status {
                    StepStatus::Pending => preds_done,
                    StepStatus::Gated => preds_done && cover.iter().all(|r| covers(r.state)),
                    StepStatus::Done | StepStatus::Failed => false,
                }
            });
            let Some(step) = next.cloned() else {
                let state = if steps.iter().all(|s| s.status == StepStatus::Done) {
                    RunState::Done
                } else if steps.iter().any(|s| s.status == StepStatus::Failed) {
                    RunState::Failed
                } else {
                    RunState::Waiting
                };
                self.store()
                    .run(move |s| s.set_run_state(run, state))
                    .await?;
                break;
            };
            self.store()
                .run(move |s| s.set_run_state(run, RunState::Running))
                .await?;
            let cover = coverage(&steps, &requests, &step.step);
            let output = self
                .run_step(&record.initiator, &record.chat, &step, &cover)
                .await?;
            outputs.push((step.step.clone(), output));
        }
        self.summary(run, outputs)
    }

    /// The one rule (W1) for a run: as for its chat. A run someone may not
    /// see does not exist for them.
    fn require_run(&self, person: &str, run: i64, need: crate::access::Need) -> anyhow::Result<()> {
        let Some(r) = self.store().workflow_run(run)? else {
            bail!("no workflow run {run}");
        };
        let access = self.store().access(&r.chat, person)?;
        if !access.may_see_requests() {
            bail!("no workflow run {run}");
        }
        access.require(need, &r.chat, person)?;
        Ok(())
    }

    fn summary(
        &self,
        run: i64,
        outputs: Vec<(String, Result<String, String>)>,
    ) -> anyhow::Result<RunSummary> {
        let record = self
            .store()
            .workflow_run(run)?
            .with_context(|| format!("no workflow run {run}"))?;
        Ok(RunSummary {
            run,
            state: record.state,
            steps: self.store().run_steps(run)?,
            requests: self.store().requests(Some(run))?,
            outputs,
        })
    }

    /// One attempt of one step: issue its certificate, run its gadget,
    /// revoke the certificate when the step ends (G6).
    async fn run_step(
        &self,
        initiator: &str,
        chat: &str,
        step: &StepRecord,
        cover: &[&RequestRecord],
    ) -> anyhow::Result<Result<String, String>> {
        let ca = self.authority()?;
        let now = crate::store::now_ms();
        let authority = if cover.is_empty() {
            initiator.to_owned()
        } else if cover.iter().all(|r| covers(r.state)) {
            approvers(cover)
        } else {
            format!("(awaiting request #{})", cover[0].id)
        };
        let claims = Claims {
            tenant: ca.tenant().to_owned(),
            run: step.run,
            step: step.step.clone(),
            authority,
            tools: step.tools.clone(),
            issued_at: now,
            expires_at: now + certificate_ttl_ms(),
            serial: random_hex(16)?,
        };
        let token = ca.issue(&claims)?;
        let (r, st, c) = (step.run, step.step.clone(), claims.clone());
        self.store()
            .run(move |s| {
                s.revoke_certificates(r, &st)?;
                s.put_certificate(&NewCertificate {
                    serial: &c.serial,
                    run: c.run,
                    step: &c.step,
                    authority: &c.authority,
                    tools: &c.tools,
                    issued_at: c.issued_at,
                    expires_at: c.expires_at,
                })
            })
            .await?;
        let context = StepContext {
            run: step.run,
            step: step.step.clone(),
            certificate: Arc::new(std::sync::Mutex::new(Some((token, claims)))),
            gated: Arc::default(),
            verified: Arc::default(),
            calls: Arc::default(),
        };
        let principal = Principal::Workflow {
            run: step.run,
            step: step.step.clone(),
            person: initiator.to_owned(),
        };
        let mut turn = Turn::new(&step.gadget, chat, principal);
        turn.step = Some(context.clone());
        let report = self.run_turn(turn, &step.input).await;
        let output = match report {
            Ok(r) => r.output,
            Err(e) => Err(format!("{e:#}")),
        };
        let gated = context.gated.load(Ordering::SeqCst);
        let (status, note) = match (&output, gated) {
            (_, true) => (
                StepStatus::Gated,
                Some("waits for a decision on the approval covering it".to_owned()),
            ),
            (Ok(_), false) => (StepStatus::Done, None),
            (Err(e), false) => (StepStatus::Failed, Some(crate::runtime::one_line(e))),
        };
        // The step has ended (for now): its certificate dies with it (G6).
        let (r, st) = (step.run, step.step.clone());
        self.store()
            .run(move |s| {
                s.revoke_certificates(r, &st)?;
                s.set_step_status(r, &st, status, note.as_deref(), true)
            })
            .await?;
        Ok(output)
    }

    /// A step asks for approval of a bounded plan (G2, G4). The list must
    /// name only tools of the steps it would cover (never wider than the
    /// design); read-only tools of those steps are added as "any input" by
    /// the kernel alone.
    pub(crate) async fn request_approval(
        &self,
        turn: &Turn,
        allowed: &str,
        reason: &str,
    ) -> anyhow::Result<Result<u64, String>> {
        let Some(ctx) = &turn.step else {
            return Ok(Err("only a workflow step can request an approval".into()));
        };
        let list = match grants::parse_allowed(allowed) {
            Ok(l) => l,
            Err(e) => return Ok(Err(e)),
        };
        let (run, step) = (ctx.run, ctx.step.clone());
        let reason = crate::prompt::excerpt(reason, 500);
        // Called from a gadget's import: one trip to the store, off the
        // executor.
        self.store()
            .run(move |s| record_request(s, run, &step, list, &reason))
            .await
    }

    /// Check a certificate as every call does (G3, G5, G6): signed here,
    /// for this run and step, unexpired, issued here and not revoked.
    pub fn verify_certificate(
        &self,
        token: &str,
        run: i64,
        step: &str,
    ) -> anyhow::Result<Result<Claims, CertRefusal>> {
        let ca = self.authority()?;
        let claims = match ca.verify(token, run, step, crate::store::now_ms()) {
            Ok(c) => c,
            Err(e) => return Ok(Err(e)),
        };
        Ok(match self.store().certificate_revoked(&claims.serial)? {
            None => Err(CertRefusal::Foreign),
            Some(true) => Err(CertRefusal::Revoked),
            Some(false) => Ok(claims),
        })
    }

    /// A call made under a step's certificate (G5): every check before the
    /// call reaches a gatekeeper, and an audit row for every decision (G7).
    /// This is what `certificate.call` does; public so that benchmarks
    /// drive the exact same path.
    ///
    /// The signature is verified once per step attempt (the token cannot
    /// change inside it); run, step and expiry are checked on every call,
    /// and revocation, coverage, the gate, the lists and the audit row are
    /// one trip to the store.
    pub async fn certified_call(
        &self,
        turn: &Turn,
        token: &str,
        key: &str,
        tool: &str,
        args: String,
    ) -> anyhow::Result<Result<CallOutcome, CallError>> {
        let Some(ctx) = &turn.step else {
            return Ok(Err(CallError::Refused(
                "a certificate is used only inside its workflow step".into(),
            )));
        };
        let tool_id = format!("{key}:{tool}");
        let digest = grants::args_digest(&args);
        let signed = self.signed_claims(ctx, token)?;
        let parsed: Option<serde_json::Map<String, serde_json::Value>> =
            serde_json::from_str(&args).ok();
        // The call's identity across re-runs of this step (G8): run, step,
        // tool, arguments, and how many identical calls came before it in
        // this attempt.
        let logical_key = {
            let mut calls = ctx.calls.lock().unwrap_or_else(|e| e.into_inner());
            let n = calls.entry(format!("{tool_id}:{digest}")).or_insert(0);
            let key = format!("wf:{}:{}:{tool_id}:{digest}:{n}", ctx.run, ctx.step);
            *n += 1;
            key
        };
        let (run, step, owner) = (ctx.run, ctx.step.clone(), self.owner().to_owned());
        let (turn_, key_, tool_, args_) =
            (turn.clone(), key.to_owned(), tool.to_owned(), args.clone());
        // One trip: the binding (it tells read from action), every stored
        // check and the audit row; for an allowed action also its staging
        // and claim, under its logical key.
        let decided = self
            .store()
            .run(move |s| {
                let (resolved, overlay) = match s.resolve(&turn_.chat, &key_, turn_.person())? {
                    Ok(r) => r,
                    Err(e) => return Ok(Err(CallError::from(e))),
                };
                let class =
                    resolved.gatekeeper.manifest.tool(&tool_).map(|info| {
                        classify::classify(&info.annotations, resolved.gatekeeper.trust)
                    });
                let is_action = class.is_some_and(|c| c.kind == Kind::Action);
                let decision = decide_call(
                    s,
                    run,
                    &step,
                    signed,
                    &tool_id,
                    &digest,
                    parsed.as_ref(),
                    is_action,
                )?;
                let binding = crate::kernel::Binding { resolved, overlay };
                let CallDecision::AllowedAction(audit) = decision else {
                    return Ok(Ok((binding, decision, None)));
                };
                // Staged and claimed at once: the approver already decided.
                let Some(facts) = Facts::of(&binding.resolved, &tool_) else {
                    return Ok(Err(CallError::NotGranted {
                        key: key_.clone(),
                        tool: tool_.clone(),
                        allowed: binding.resolved.granted_names(),
                    }));
                };
                let by = ClaimBy::Workflow {
                    requests: audit.requests.clone(),
                    authority: audit.authority.clone(),
                };
                let staged = crate::store::validate_args(&args_).and_then(|args| {
                    let action = NewAction {
                        chat: turn_.chat.clone(),
                        principal: turn_.principal.clone(),
                        gadget: turn_.gadget.clone(),
                        key: key_.clone(),
                        gatekeeper: binding.resolved.gatekeeper.name.clone(),
                        tool: tool_.clone(),
                        classified_by: class.map(|c| c.classified_by.as_str()).unwrap_or("default"),
                        trust: binding.resolved.gatekeeper.trust,
                        args,
                        await_decision: false,
                        provisional: None,
                        facts,
                        resolved_at: None,
                    };
                    s.stage_claimed(&action, &logical_key, &by, &owner)
                });
                let staged = match staged {
                    Ok(Ok(staged)) => staged,
                    Ok(Err(refusal)) => {
                        let row = AuditRow {
                            reason: Some(format!("allowed, but not sent: {refusal}")),
                            ..audit
                        };
                        s.audit(&row.allowed())?;
                        return Ok(Err(CallError::Refused(refusal.to_string())));
                    }
                    Err(StageError::Store(e)) => return Err(e),
                    Err(e) => {
                        let row = AuditRow {
                            reason: Some(format!("allowed, but not staged: {e}")),
                            ..audit
                        };
                        s.audit(&row.allowed())?;
                        return Ok(Err(CallError::Refused(e.to_string())));
                    }
                };
                let id = match &staged {
                    Staged::Claimed(c) => c.action().id,
                    Staged::Made(a) => a.id,
                };
                let mut row = audit.allowed();
                row.action = Some(id);
                if matches!(staged, Staged::Made(_)) {
                    row.reason = Some("a re-run of a call already made: not sent again");
                }
                s.audit(&row)?;
                Ok(Ok((binding, CallDecision::Uncovered, Some(staged))))
            })
            .await?;
        let (binding, decision, staged) = match decided {
            Ok(x) => x,
            Err(e) => return Ok(Err(e)),
        };
        if let Some(staged) = staged {
            return self.covered_outcome(turn, tool, staged).await;
        }
        match decision {
            CallDecision::Denied { reason, gated } => {
                if gated {
                    ctx.gated.store(true, Ordering::SeqCst);
                }
                Ok(Err(CallError::Refused(reason)))
            }
            CallDecision::Uncovered => self.dispatch(turn, key, tool, args).await,
            CallDecision::AllowedRead(audit) => {
                let out = self
                    .read(turn, &binding, tool, args, Some(audit.clone()))
                    .await?;
                if out.is_err() {
                    // Nothing was observed, so the row was not written with
                    // an observation: the decision is recorded on its own.
                    let row = AuditRow {
                        reason: Some("allowed; the read itself did not complete".into()),
                        ..audit
                    };
                    self.store().run(move |s| s.audit(&row.allowed())).await?;
                }
                Ok(out)
            }
            CallDecision::AllowedAction(_) => Ok(Err(CallError::Refused(
                "internal: a covered action was not staged".into(),
            ))),
        }
    }

    /// What the gadget gets for a covered action: sent now through the one
    /// send path, or, for a call already made by an earlier run of the
    /// step, how that one ended (nothing is sent again, G8).
    async fn covered_outcome(
        &self,
        turn: &Turn,
        tool: &str,
        staged: Staged,
    ) -> anyhow::Result<Result<CallOutcome, CallError>> {
        let a = match staged {
            Staged::Claimed(claim) => {
                let g = claim.gatekeeper().name.clone();
                return Ok(match self.send(claim).await? {
                    Decision::Applied { result, .. } => Ok(CallOutcome::Done(result)),
                    Decision::Failed { message, .. } => {
                        Err(CallError::Service(format!("{g} ({tool}): {message}")))
                    }
                    d => Err(CallError::Refused(d.line())),
                });
            }
            Staged::Made(a) => a,
        };
        use crate::store::ActionState as S;
        Ok(match a.state {
            S::Applied => {
                let result = a.result.clone().unwrap_or_else(|| "null".into());
                crate::observations::record_handover(self.store(), turn, &a, &result).await?;
                Ok(CallOutcome::Done(result))
            }
            S::Failed => Err(CallError::Service(format!(
                "{} ({tool}): this call was made by an earlier run of the step and failed; it is not sent again: {}",
                a.gatekeeper,
                a.error.unwrap_or_default()
            ))),
            S::Applying => Err(CallError::Refused(format!(
                "this call (#{}) is being applied by an earlier run of the step right now; it is not sent again",
                a.id
            ))),
            state => Err(CallError::Refused(format!(
                "this call (#{}) was {state} by an earlier run of the step; it is not sent again",
                a.id
            ))),
        })
    }

    /// The step's certificate, its signature checked once per attempt;
    /// run, step and expiry are checked on every call.
    fn signed_claims(
        &self,
        ctx: &StepContext,
        token: &str,
    ) -> anyhow::Result<Result<Claims, CertRefusal>> {
        let ca = self.authority()?;
        let now = crate::store::now_ms();
        let mut cache = ctx.verified.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((t, claims)) = cache.as_ref()
            && t == token
        {
            return Ok(
                grants::check_binding(claims, ctx.run, &ctx.step, now).map(|()| claims.clone())
            );
        }
        let verified = ca.verify(token, ctx.run, &ctx.step, now);
        if let Ok(c) = &verified {
            *cache = Some((token.to_owned(), c.clone()));
        }
        Ok(verified)
    }
}

impl Person<'_> {
    /// Publish a design (G1); returns its name and new version. A published
    /// version never changes; publishing again makes a new version, which
    /// running runs never see.
    pub fn publish_workflow(&self, bytes: &[u8]) -> anyhow::Result<(String, i64)> {
        let by = self.name;
        let design: Design = serde_json::from_slice(bytes)
            .context("this is not a workflow design (JSON with name, services, steps, edges)")?;
        check_name(&design.name, "workflow")?;
        let mut ids = BTreeSet::new();
        for s in &design.steps {
            check_name(&s.id, "step")?;
            if !ids.insert(s.id.clone()) {
                bail!("step {:?} appears twice; step ids must be unique", s.id);
            }
            for t in &s.tools {
                let Some((key, tool)) = t.split_once(':') else {
                    bail!("step {}: tool {t:?} must be KEY:tool", s.id);
                };
                let Some(g) = design.services.get(key) else {
                    bail!("step {}: {key} is not among the design's services", s.id);
                };
                let Some(record) = self.kernel.store().gatekeeper(g)? else {
                    bail!(
                        "service {key}: no gatekeeper named {g:?}; `gatehouse gatekeepers` lists them"
                    );
                };
                if record.manifest.tool(tool).is_none() {
                    bail!(
                        "step {}: gatekeeper {g} has no tool {:?}",
                        s.id,
                        crate::prompt::as_given(tool)
                    );
                }
            }
        }
        for (a, b) in &design.edges {
            if !ids.contains(a) || !ids.contains(b) {
                bail!("edge {a} -> {b} names a step the design does not have");
            }
        }
        // Acyclic: Kahn's algorithm must consume every step.
        let mut indegree: BTreeMap<&str, usize> = ids.iter().map(|i| (i.as_str(), 0)).collect();
        for (_, b) in &design.edges {
            *indegree.entry(b.as_str()).or_default() += 1;
        }
        let mut ready: Vec<&str> = indegree
            .iter()
            .filter(|(_, d)| **d == 0)
            .map(|(k, _)| *k)
            .collect();
        let mut done = 0;
        while let Some(n) = ready.pop() {
            done += 1;
            for (a, b) in &design.edges {
                if a == n
                    && let Some(d) = indegree.get_mut(b.as_str())
                {
                    *d -= 1;
                    if *d == 0 {
                        ready.push(b.as_str());
                    }
                }
            }
        }
        if done != ids.len() {
            bail!("the design's edges form a cycle; a workflow must be acyclic");
        }
        let text = serde_json::to_string(&design)?;
        let digest = hex::encode(Sha256::digest(text.as_bytes()));
        let version = self
            .kernel
            .store()
            .publish_workflow(&design.name, &text, &digest, by)?;
        Ok((design.name, version))
    }

    /// Start a run of `name` (the newest version if none is given) as
    /// `initiator` (G1): every step's tool set is fixed now, from the design.
    ///
    /// `approvers` are the people the initiator asks to decide the run's
    /// approval requests (W1): they see and decide those requests, and
    /// nothing else of the run's chat (they are not collaborators: they
    /// observe nothing, so the run's reads are not limited to what they
    /// could see).
    pub async fn start_workflow(
        &self,
        name: &str,
        version: Option<i64>,
        approvers: &[&str],
    ) -> anyhow::Result<RunSummary> {
        let initiator = self.name;
        let wanted = name.to_owned();
        let (version, design) = self
            .kernel
            .blocking(move |k| {
                let Some((version, text)) = k.store().workflow(&wanted, version)? else {
                    bail!(
                        "no published workflow {wanted:?}; publish one with `gatehouse workflow publish FILE`"
                    );
                };
                let design: Design = serde_json::from_str(&text)?;
                for s in &design.steps {
                    if k.store().gadget(&s.gadget)?.is_none() {
                        bail!(
                            "step {}: no gadget named {:?}; install it first",
                            s.id,
                            s.gadget
                        );
                    }
                }
                Ok((version, design))
            })
            .await?;
        // Steps in a topological order (the design was checked acyclic).
        let mut order: Vec<&DesignStep> = Vec::new();
        while order.len() < design.steps.len() {
            let before = order.len();
            for s in &design.steps {
                if order.iter().any(|o| o.id == s.id) {
                    continue;
                }
                let ready = design
                    .edges
                    .iter()
                    .filter(|(_, b)| *b == s.id)
                    .all(|(a, _)| order.iter().any(|o| &o.id == a));
                if ready {
                    order.push(s);
                }
            }
            if order.len() == before {
                bail!("the design's edges form a cycle");
            }
        }
        let steps: Vec<NewStep> = order
            .iter()
            .map(|s| NewStep {
                step: s.id.clone(),
                gadget: s.gadget.clone(),
                input: s.input.clone(),
                tools: s.tools.clone(),
                preds: design
                    .edges
                    .iter()
                    .filter(|(_, b)| *b == s.id)
                    .map(|(a, _)| a.clone())
                    .collect(),
            })
            .collect();
        // A chat per run, owned by the initiator, with the design's services
        // introduced for exactly the tools its steps use.
        let chat = format!("wf-{}-{}", design.name, random_hex(4)?);
        let who = initiator.to_owned();
        let approvers: Vec<String> = approvers
            .iter()
            .filter(|a| **a != initiator)
            .map(|a| (*a).to_owned())
            .collect();
        let run = self
            .kernel
            .blocking(move |k| {
                let initiator = k.person(&who);
                initiator.new_chat(&chat)?;
                for (key, g) in &design.services {
                    let tools: BTreeSet<String> = design
                        .steps
                        .iter()
                        .flat_map(|s| s.tools.iter())
                        .filter_map(|t| t.strip_prefix(&format!("{key}:")).map(str::to_owned))
                        .collect();
                    initiator.introduce(&chat, g, key, Some(tools.into_iter().collect()))?;
                }
                for approver in &approvers {
                    k.store().add_approver(&chat, approver, &who)?;
                }
                k.store()
                    .create_run(&design.name, version, &who, &chat, &steps)
            })
            .await?;
        self.kernel.advance(run).await
    }

    /// Where a run stands, without running anything, for someone who may
    /// see its chat (W1).
    pub fn run_status(&self, run: i64) -> anyhow::Result<RunSummary> {
        let person = self.name;
        self.kernel
            .require_run(person, run, crate::access::Need::SeeRequests)?;
        self.kernel.summary(run, Vec::new())
    }

    /// Continue a run (after a restart, say), for someone who may decide in
    /// its chat.
    pub async fn resume_run(&self, run: i64) -> anyhow::Result<RunSummary> {
        let person = self.name;
        self.kernel
            .require_run(person, run, crate::access::Need::Decide)?;
        self.kernel.advance(run).await
    }

    /// The approval requests `person` may see (of one run, or of every run
    /// whose chat they may see).
    pub fn requests_for(&self, run: Option<i64>) -> anyhow::Result<Vec<RequestRecord>> {
        let mut out = Vec::new();
        let mut visible = std::collections::HashMap::new();
        for r in self.kernel.store().requests(run)? {
            let see = match visible.get(&r.run) {
                Some(v) => *v,
                None => {
                    let v = self.access_to_run(r.run)?.may_see_requests();
                    visible.insert(r.run, v);
                    v
                }
            };
            if see {
                out.push(r);
            }
        }
        Ok(out)
    }

    /// What this person may do in the chat of workflow run `run` (a run
    /// that is gone has no chat, and so gives no standing).
    fn access_to_run(&self, run: i64) -> anyhow::Result<crate::access::Access> {
        let chat = self
            .kernel
            .store()
            .workflow_run(run)?
            .map(|w| w.chat)
            .unwrap_or_default();
        self.kernel.store().access(&chat, self.name)
    }

    /// The approval requests `person` may see, each with its text as the
    /// approver reads it (the one rendering, [`crate::prompt::request`])
    /// and what the one rule lets this person do with it.
    pub fn requests_shown(&self, run: Option<i64>) -> anyhow::Result<Vec<ShownRequest>> {
        let mut out = Vec::new();
        let mut decides = std::collections::HashMap::new();
        for r in self.requests_for(run)? {
            let may = match decides.get(&r.run) {
                Some(m) => *m,
                None => {
                    let m = self.access_to_run(r.run)?.may_decide_requests();
                    decides.insert(r.run, m);
                    m
                }
            };
            out.push(ShownRequest {
                text: crate::prompt::request(&r),
                may_approve: may && r.state == RequestState::Pending,
                may_reject: may && r.state == RequestState::Pending,
                may_withdraw: may && r.state == RequestState::Approved,
                may_resubmit: may && may_resubmit(r.state),
                request: r,
            });
        }
        Ok(out)
    }

    /// A run's audit (G7), for someone who may see its chat.
    pub fn invocations_for(
        &self,
        run: i64,
    ) -> anyhow::Result<Vec<crate::store::workflows::Invocation>> {
        let person = self.name;
        self.kernel
            .require_run(person, run, crate::access::Need::SeeRequests)?;
        self.kernel.store().invocations(run)
    }

    /// Decide a request (approve, reject, or withdraw an approval), then
    /// continue its run.
    pub async fn decide_request(
        &self,
        id: i64,
        decision: RequestDecision,
    ) -> anyhow::Result<RunSummary> {
        let by = self.name.to_owned();
        // The one rule (W1): the run's owner, a collaborator who may
        // decide there (re-verified first, as on every open), or one of
        // the run's approvers. Whoever may not even see the request is
        // told there is no such request.
        let asking = by.clone();
        let (r, chat, collaborator) = self
            .kernel
            .blocking(move |k| {
                let Some(r) = k.store().request(id)? else {
                    bail!("no approval request #{id}; `gatehouse workflow requests` lists them");
                };
                let chat = k
                    .store()
                    .workflow_run(r.run)?
                    .map(|run| run.chat)
                    .unwrap_or_default();
                let access = k.store().access(&chat, &asking)?;
                let collaborator = matches!(
                    access.standing(),
                    crate::access::Standing::Collaborator { .. }
                );
                if !access.may_see_requests() && !collaborator {
                    bail!("no approval request #{id}; `gatehouse workflow requests` lists them");
                }
                Ok((r, chat, collaborator))
            })
            .await?;
        if collaborator {
            self.kernel.verify_runner(&chat, &by).await?;
        }
        let (from, to) = match decision {
            RequestDecision::Approve => (RequestState::Pending, RequestState::Approved),
            RequestDecision::Reject => (RequestState::Pending, RequestState::Rejected),
            RequestDecision::Withdraw => (RequestState::Approved, RequestState::Withdrawn),
        };
        let was = r.state;
        self.kernel
            .blocking(move |k| {
                k.require(&chat, &by, crate::access::Need::DecideRequests)?;
                if !k.store().decide_request(id, from, to, &by)? {
                    // Read again: it may have expired as it was decided
                    // (the store marks it in the same transaction), or
                    // been decided by someone else.
                    let now = k.store().request(id)?.map_or(was, |r| r.state);
                    if now == RequestState::Expired {
                        bail!("{}", expired_message(id));
                    }
                    bail!("request #{id} is {now}, not {from}; nothing changed");
                }
                Ok(())
            })
            .await?;
        self.kernel.advance(r.run).await
    }

    /// Re-submit a rejected (or withdrawn) request: its step runs again and
    /// asks anew, replacing it, so no step stays stuck (G2).
    pub async fn resubmit(&self, id: i64) -> anyhow::Result<RunSummary> {
        let by = self.name.to_owned();
        let run = self
            .kernel
            .blocking(move |k| {
                let Some(r) = k.store().request(id)? else {
                    bail!("no approval request #{id}");
                };
                let chat = k
                    .store()
                    .workflow_run(r.run)?
                    .map(|run| run.chat)
                    .unwrap_or_default();
                let access = k.store().access(&chat, &by)?;
                if !access.may_see_requests() {
                    bail!("no approval request #{id}");
                }
                access.require(crate::access::Need::DecideRequests, &chat, &by)?;
                if !may_resubmit(r.state) {
                    bail!(
                        "request #{id} is {}; only a rejected, withdrawn or expired request is re-submitted",
                        r.state
                    );
                }
                k.store()
                    .set_step_status(r.run, &r.step, StepStatus::Pending, None, false)?;
                k.store().set_run_state(r.run, RunState::Running)?;
                Ok(r.run)
            })
            .await?;
        self.kernel.advance(run).await
    }
}

/// Check a step's allowed-calls list against the published design and
/// store it, with the kernel's "any input" entries for read-only tools.
fn record_request(
    s: &crate::store::Store,
    run: i64,
    step: &str,
    mut list: Vec<(String, ToolRule)>,
    reason: &str,
) -> anyhow::Result<Result<u64, String>> {
    let steps = s.run_steps(run)?;
    let reach = forward(&steps, step);
    let covered_tools: BTreeSet<String> = steps
        .iter()
        .filter(|x| reach.contains(&x.step))
        .flat_map(|x| x.tools.iter().cloned())
        .collect();
    if let Some((tool, _)) = list.iter().find(|(t, _)| !covered_tools.contains(t)) {
        return Ok(Err(format!(
            "{tool} is not a tool of this step or the steps after it in the published design; a request can never widen the design"
        )));
    }
    let chat = s.workflow_run(run)?.map(|r| r.chat).unwrap_or_default();
    let intros = s.introductions(&chat)?;
    for t in &covered_tools {
        if list.iter().any(|(x, _)| x == t) {
            continue;
        }
        let Some((key, tool)) = t.split_once(':') else {
            continue;
        };
        let Some(intro) = intros.iter().find(|i| i.key == key) else {
            continue;
        };
        if let Some(g) = s.gatekeeper(&intro.gatekeeper)?
            && let Some(info) = g.manifest.tool(tool)
            && classify::classify(&info.annotations, g.trust).kind == Kind::Read
        {
            list.push((t.clone(), ToolRule::AnyInput));
        }
    }
    let stored = grants::allowed_to_json(&list).to_string();
    let id = s.add_request(run, step, &stored, reason)?;
    Ok(Ok(id as u64))
}

/// What the store-side check decided about one call.
enum CallDecision {
    Denied {
        reason: String,
        gated: bool,
    },
    /// Covered by no request: the normal rules apply.
    Uncovered,
    /// An allowed read: its audit row is written with its observation.
    AllowedRead(AuditRow),
    /// An allowed action: its audit row, written once it is staged and
    /// claimed (with the ledger action it became).
    AllowedAction(AuditRow),
}

/// Every check of G5 that needs stored state, and the audit row (G7), in
/// one place: revocation, the signed tool set, coverage and the gate, and
/// each covering list (the stricter wins).
#[allow(clippy::too_many_arguments)]
fn decide_call(
    s: &crate::store::Store,
    run: i64,
    step: &str,
    signed: Result<Claims, CertRefusal>,
    tool: &str,
    digest: &str,
    args: Option<&serde_json::Map<String, serde_json::Value>>,
    is_action: bool,
) -> anyhow::Result<CallDecision> {
    let row = |cert: Option<&str>,
               requests: &[i64],
               authority: &str,
               decision: InvocationDecision,
               input: Option<&str>,
               reason: Option<&str>|
     -> anyhow::Result<i64> {
        s.audit(&NewInvocation {
            run,
            step,
            certificate: cert,
            requests,
            authority,
            tool,
            args_digest: digest,
            decision,
            action: None,
            failed_input: input,
            reason,
        })
    };
    let deny = |cert: Option<&str>,
                ids: &[i64],
                authority: &str,
                input: Option<&str>,
                reason: String,
                gated: bool| {
        row(
            cert,
            ids,
            authority,
            InvocationDecision::Denied,
            input,
            Some(&reason),
        )?;
        Ok(CallDecision::Denied { reason, gated })
    };
    let claims = match signed {
        Ok(c) => c,
        Err(e) => return deny(None, &[], "(none)", None, format!("refused: {e}"), false),
    };
    let serial = Some(claims.serial.as_str());
    match s.certificate_revoked(&claims.serial)? {
        Some(false) => {}
        Some(true) => {
            return deny(
                serial,
                &[],
                &claims.authority,
                None,
                format!("refused: {}", CertRefusal::Revoked),
                false,
            );
        }
        None => {
            return deny(
                serial,
                &[],
                &claims.authority,
                None,
                format!("refused: {}", CertRefusal::Foreign),
                false,
            );
        }
    }
    if !claims.tools.iter().any(|t| t == tool) {
        let reason = format!(
            "refused: {tool} is not in this step's certificate (it may call: {})",
            claims.tools.join(", ")
        );
        return deny(serial, &[], &claims.authority, None, reason, false);
    }
    let steps = s.run_steps(run)?;
    let requests = s.requests(Some(run))?;
    let cover = coverage(&steps, &requests, step);
    let ids: Vec<i64> = cover.iter().map(|r| r.id).collect();
    if cover.is_empty() {
        let initiator = s
            .workflow_run(run)?
            .map(|r| r.initiator)
            .unwrap_or_default();
        row(
            serial,
            &ids,
            &initiator,
            InvocationDecision::Allowed,
            None,
            Some("not covered by an approval: normal rules"),
        )?;
        return Ok(CallDecision::Uncovered);
    }
    if let Some(r) = cover.iter().find(|r| !covers(r.state)) {
        return deny(
            serial,
            &ids,
            &claims.authority,
            None,
            gate_message(step, r),
            true,
        );
    }
    let authority = approvers(&cover);
    let Some(args) = args else {
        return deny(
            serial,
            &ids,
            &authority,
            None,
            "refused: the arguments are not a JSON object".into(),
            false,
        );
    };
    // Every covering list must admit the call: the stricter wins (G5).
    for r in &cover {
        let list = grants::allowed_from_stored(&r.allowed.to_string())
            .map_err(|e| anyhow::anyhow!("request #{} has a damaged list: {e}", r.id))?;
        if let Err(m) = grants::fits(&list, tool, args) {
            let reason = format!("refused by approval request #{}: {}", r.id, m.reason);
            return deny(serial, &ids, &authority, m.input.as_deref(), reason, false);
        }
    }
    let audit = AuditRow {
        run,
        step: step.to_owned(),
        certificate: Some(claims.serial.clone()),
        requests: ids,
        authority,
        tool: tool.to_owned(),
        args_digest: digest.to_owned(),
        reason: None,
    };
    Ok(if is_action {
        CallDecision::AllowedAction(audit)
    } else {
        CallDecision::AllowedRead(audit)
    })
}
