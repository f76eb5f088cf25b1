//! Workflow decisions in the web inbox (SPEC G2, G4, G7): approval requests
//! with their allowed-calls lists, approve / reject / withdraw / resubmit,
//! and each run's steps and invocations.
//!
//! Every answer is the kernel's: the requests a person may see and what
//! they may do with each ([`crate::Person::requests_shown`], the one rule), the
//! request's text as the terminal prints it ([`crate::prompt::request`]),
//! and each decision ([`crate::Person::decide_request`], [`crate::Person::resubmit`]),
//! which refuses whoever may not decide. A decision continues the run (its
//! gated steps run), so it runs to completion whatever the client does.

use super::AppState;
use super::reply::{ApiError, ApiResult, refused};
use super::session::Person;
use crate::access::Refusal;
use crate::workflow::{RequestDecision, RunSummary, ShownRequest};
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

#[derive(Deserialize, Default)]
pub(crate) struct RequestsQuery {
    run: Option<i64>,
}

/// The requests this person may see (of one run), oldest first.
pub(crate) async fn list(
    State(st): State<AppState>,
    p: Person,
    q: Result<Query<RequestsQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Vec<ShownRequest>>> {
    let Query(q) = q.map_err(|e| ApiError::bad(e.body_text()))?;
    let (kernel, user) = (st.kernel.clone(), p.user.clone());
    let shown = tokio::task::spawn_blocking(move || kernel.person(&user).requests_shown(q.run))
        .await
        .map_err(|e| anyhow::anyhow!("listing requests stopped: {e}"))?
        .map_err(workflow_error)?;
    Ok(Json(shown))
}

fn parse_id(raw: &str, what: &str) -> ApiResult<i64> {
    raw.parse::<i64>()
        .map_err(|_| ApiError::bad(format!("{raw:?} is not a {what} id (a number)")))
}

/// A kernel refusal as an answer: not yours to see (404, worded like a
/// missing request), may see but not decide (403), anything else the
/// request's state refused (409).
fn workflow_error(e: anyhow::Error) -> ApiError {
    if e.downcast_ref::<Refusal>().is_some() {
        return refused(e);
    }
    let m = format!("{e:#}");
    if m.starts_with("no approval request") || m.starts_with("no workflow run") {
        return ApiError::not_found(m);
    }
    ApiError::new(StatusCode::CONFLICT, m)
}

/// What a decision answers: the run as it stands after it (its steps ran
/// on), with its requests as this person sees them.
#[derive(Serialize)]
pub(crate) struct Decided {
    run: RunView,
    requests: Vec<ShownRequest>,
}

#[derive(Serialize)]
pub(crate) struct RunView {
    run: i64,
    state: String,
    steps: Vec<StepView>,
}

#[derive(Serialize)]
pub(crate) struct StepView {
    step: String,
    status: String,
    tools: Vec<String>,
    note: Option<String>,
}

/// A run's steps with every name through the sanitiser; never the steps'
/// outputs (they may carry what the audit must not keep, G7).
fn run_view(s: &RunSummary) -> RunView {
    use crate::prompt::inline;
    RunView {
        run: s.run,
        state: s.state.to_string(),
        steps: s
            .steps
            .iter()
            .map(|x| StepView {
                step: inline(&x.step),
                status: x.status.to_string(),
                tools: x.tools.iter().map(|t| inline(t)).collect(),
                note: x.note.as_deref().map(inline),
            })
            .collect(),
    }
}

async fn decide(
    st: AppState,
    p: Person,
    raw: String,
    d: Option<RequestDecision>,
) -> ApiResult<Json<Decided>> {
    let id = parse_id(&raw, "request")?;
    let (kernel, user) = (st.kernel.clone(), p.user.clone());
    // The decision continues the run: it runs to completion whatever the
    // client does (P8).
    let summary = st
        .to_completion(async move {
            match d {
                Some(d) => kernel.person(&user).decide_request(id, d).await,
                None => kernel.person(&user).resubmit(id).await,
            }
        })
        .await?
        .map_err(workflow_error)?;
    let (kernel, user, run) = (st.kernel.clone(), p.user.clone(), summary.run);
    let requests =
        tokio::task::spawn_blocking(move || kernel.person(&user).requests_shown(Some(run)))
            .await
            .map_err(|e| anyhow::anyhow!("listing requests stopped: {e}"))?
            .map_err(workflow_error)?;
    Ok(Json(Decided {
        run: run_view(&summary),
        requests,
    }))
}

pub(crate) async fn approve(
    State(st): State<AppState>,
    p: Person,
    Path(id): Path<String>,
) -> ApiResult<Json<Decided>> {
    decide(st, p, id, Some(RequestDecision::Approve)).await
}

pub(crate) async fn reject(
    State(st): State<AppState>,
    p: Person,
    Path(id): Path<String>,
) -> ApiResult<Json<Decided>> {
    decide(st, p, id, Some(RequestDecision::Reject)).await
}

pub(crate) async fn withdraw(
    State(st): State<AppState>,
    p: Person,
    Path(id): Path<String>,
) -> ApiResult<Json<Decided>> {
    decide(st, p, id, Some(RequestDecision::Withdraw)).await
}

pub(crate) async fn resubmit(
    State(st): State<AppState>,
    p: Person,
    Path(id): Path<String>,
) -> ApiResult<Json<Decided>> {
    decide(st, p, id, None).await
}

/// A run's steps, for someone who may see its requests.
pub(crate) async fn run(
    State(st): State<AppState>,
    p: Person,
    Path(id): Path<String>,
) -> ApiResult<Json<RunView>> {
    let id = parse_id(&id, "run")?;
    let (kernel, user) = (st.kernel.clone(), p.user.clone());
    let s = tokio::task::spawn_blocking(move || kernel.person(&user).run_status(id))
        .await
        .map_err(|e| anyhow::anyhow!("reading the run stopped: {e}"))?
        .map_err(workflow_error)?;
    Ok(Json(run_view(&s)))
}

/// One invocation of a run's audit: who allowed the call, on what grounds
/// (the terminal's line), and its fields.
#[derive(Serialize)]
pub(crate) struct InvocationView {
    #[serde(flatten)]
    invocation: crate::store::workflows::Invocation,
    line: String,
}

/// A run's audit (G7): every decided call, its authority and certificate,
/// a digest of its arguments (never the arguments).
pub(crate) async fn invocations(
    State(st): State<AppState>,
    p: Person,
    Path(id): Path<String>,
) -> ApiResult<Json<Vec<InvocationView>>> {
    let id = parse_id(&id, "run")?;
    let (kernel, user) = (st.kernel.clone(), p.user.clone());
    let list = tokio::task::spawn_blocking(move || kernel.person(&user).invocations_for(id))
        .await
        .map_err(|e| anyhow::anyhow!("reading the audit stopped: {e}"))?
        .map_err(workflow_error)?;
    Ok(Json(
        list.into_iter()
            .map(|i| InvocationView {
                line: crate::prompt::invocation(&i),
                invocation: i,
            })
            .collect(),
    ))
}
