//! The JSON API (documented in `docs/api/openapi.json`).
//!
//! Errors are one line: `{"error": "..."}` with a status that says what
//! kind (400 bad request, 401 not signed in or session expired, 403 CSRF,
//! 404 no such thing *that you may see*, 409 already decided). A chat a
//! person may not see answers exactly like a chat that does not exist, so
//! the API never confirms what it will not show.

use super::reply::no_chat;
pub(crate) use super::reply::{ApiError, ApiResult, Body, refused};
use super::session::{Person, removal_cookie, session_cookie};
use super::{AppState, Routes};
use crate::access::Refusal;
use crate::inbox::Shown;
use crate::overseer::Decision;
use crate::prompt;
use crate::store::{LedgerEntry, LedgerFilter, LedgerKind};
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum_extra::extract::cookie::CookieJar;
use serde::{Deserialize, Serialize};

pub(crate) fn routes() -> Routes {
    Routes::new()
        .add(Method::GET, "/api/session", get(session_get))
        .add(Method::POST, "/api/session", post(session_create))
        .add(Method::DELETE, "/api/session", delete(session_end))
        .add(Method::GET, "/api/inbox", get(inbox))
        .add(Method::GET, "/api/actions/{id}", get(action_get))
        .add(Method::POST, "/api/actions/{id}/approve", post(approve_one))
        .add(Method::POST, "/api/actions/{id}/reject", post(reject_one))
        .add(Method::POST, "/api/actions/{id}/revert", post(revert_one))
        .add(Method::POST, "/api/decisions", post(decide_many))
        .add(Method::GET, "/api/chats", get(chats))
        .add(Method::GET, "/api/chats/{chat}", get(chat_get))
        .add(
            Method::GET,
            "/api/chats/{chat}/observations",
            get(chat_observations),
        )
        .add(Method::POST, "/api/chats/{chat}/open", post(chat_open))
        .add(Method::GET, "/api/ledger", get(ledger))
        .add(Method::GET, "/api/rules", get(rules))
        .add(Method::GET, "/api/accounts", get(super::accounts::list))
        .add(
            Method::POST,
            "/api/accounts/oauth",
            post(super::accounts::begin),
        )
        .add(Method::POST, "/api/rules", post(rule_add))
        .add(Method::GET, "/api/events", get(super::events::stream))
        .add(
            Method::GET,
            "/api/workflow/requests",
            get(super::requests::list),
        )
        .add(
            Method::POST,
            "/api/workflow/requests/{id}/approve",
            post(super::requests::approve),
        )
        .add(
            Method::POST,
            "/api/workflow/requests/{id}/reject",
            post(super::requests::reject),
        )
        .add(
            Method::POST,
            "/api/workflow/requests/{id}/withdraw",
            post(super::requests::withdraw),
        )
        .add(
            Method::POST,
            "/api/workflow/requests/{id}/resubmit",
            post(super::requests::resubmit),
        )
        .add(
            Method::GET,
            "/api/workflow/runs/{id}",
            get(super::requests::run),
        )
        .add(
            Method::GET,
            "/api/workflow/runs/{id}/invocations",
            get(super::requests::invocations),
        )
}

// ----- sessions -----

#[derive(Serialize)]
pub(crate) struct SessionView {
    user: String,
    csrf: String,
    expires_at: i64,
}

/// Who is signed in, with a fresh CSRF token for this page.
async fn session_get(State(st): State<AppState>, p: Person) -> ApiResult<Json<SessionView>> {
    let secret = p.secret.clone();
    let csrf = st.kernel.mint_csrf(&secret).await?;
    Ok(Json(SessionView {
        csrf,
        user: p.user,
        expires_at: p.expires_at,
    }))
}

#[derive(Deserialize)]
struct SignIn {
    token: String,
}

/// Spend a one-time sign-in token; the answer sets the session cookie.
async fn session_create(
    State(st): State<AppState>,
    jar: CookieJar,
    Body(b): Body<SignIn>,
) -> ApiResult<(CookieJar, Json<SessionView>)> {
    let ttl = st.session_ttl_ms;
    let token = b.token.trim().to_owned();
    let redeemed = st
        .kernel
        .redeem_signin_token(&token, ttl)
        .await?
        .map_err(|r| ApiError::new(StatusCode::UNAUTHORIZED, r.to_string()))?;
    signed_in(&st, jar, redeemed).await
}

/// The answer to any sign-in that opened a session (a link, a passkey):
/// the session cookie, and who is signed in with a CSRF token for the page.
pub(crate) async fn signed_in(
    st: &AppState,
    jar: CookieJar,
    redeemed: crate::store::Redeemed,
) -> ApiResult<(CookieJar, Json<SessionView>)> {
    let session = redeemed.session.clone();
    let csrf = st.kernel.mint_csrf(&session).await?;
    let view = SessionView {
        csrf,
        user: redeemed.user,
        expires_at: redeemed.expires_at,
    };
    Ok((
        jar.add(session_cookie(redeemed.session, st.session_ttl_ms)),
        Json(view),
    ))
}

async fn session_end(
    State(st): State<AppState>,
    jar: CookieJar,
    p: Person,
) -> ApiResult<(StatusCode, CookieJar)> {
    st.kernel.end_session(&p.secret).await?;
    Ok((StatusCode::NO_CONTENT, jar.add(removal_cookie())))
}

// ----- actions -----

/// An action as the inbox shows it. `prompt` is the terminal's sanitised
/// rendering (R3): the page shows it as text and nothing else of the
/// action's attacker-written fields.
#[derive(Serialize)]
pub(crate) struct ActionView {
    id: i64,
    chat: String,
    gatekeeper: String,
    tool: String,
    state: String,
    created_at: i64,
    prompt: String,
    /// The viewer may stage a revert of it now (the page shows a Revert
    /// button); the kernel checks again when asked.
    revertible: bool,
    /// The revert of it that may still be, or was, sent.
    reverted_by: Option<i64>,
    /// For a revert: the action it undoes.
    reverts: Option<i64>,
    /// The action as the inbox's card shows it, rendered by the kernel so
    /// the page never words attacker text itself.
    card: crate::inbox::Card,
}

fn action_view(shown: Shown) -> ActionView {
    let a = shown.action;
    ActionView {
        card: shown.card,
        id: a.id,
        chat: a.chat,
        gatekeeper: a.gatekeeper,
        tool: a.tool,
        state: a.state.to_string(),
        created_at: a.created_at,
        prompt: shown.prompt,
        revertible: shown.revertible,
        reverted_by: shown.reverted_by,
        reverts: a.reverts,
    }
}

#[derive(Serialize)]
struct Inbox {
    user: String,
    /// Chats this person may see that are locked down.
    latched_chats: Vec<String>,
    #[serde(flatten)]
    page: crate::inbox::InboxPage,
}

/// Most cards one page of the inbox holds.
const INBOX_PAGE_MAX: usize = 500;

#[derive(Deserialize, Default)]
struct InboxQuery {
    chat: Option<String>,
    after: Option<i64>,
    limit: Option<usize>,
}

/// Pending actions this person may see, as cards, oldest first, one page
/// at a time (`after`, `limit`: at most 500, 100 unless asked), of one
/// chat (`chat`) or of all.
async fn inbox(
    State(st): State<AppState>,
    p: Person,
    q: Result<Query<InboxQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Inbox>> {
    let Query(q) = q.map_err(|e| ApiError::bad(e.body_text()))?;
    let limit = q.limit.unwrap_or(100);
    if limit == 0 || limit > INBOX_PAGE_MAX {
        return Err(ApiError::bad(format!(
            "limit must be between 1 and {INBOX_PAGE_MAX}"
        )));
    }
    let chat = nonempty(q.chat);
    let chats = p.acting(&st.kernel).chats().await?;
    if let Some(c) = &chat
        && !chats.iter().any(|v| &v.name == c)
    {
        return Err(no_chat(c));
    }
    let page = p
        .acting(&st.kernel)
        .inbox_page(chat.as_deref(), q.after, limit)
        .await
        .map_err(refused)?;
    Ok(Json(Inbox {
        user: p.user,
        latched_chats: chats
            .into_iter()
            .filter(|c| c.latched)
            .map(|c| c.name)
            .collect(),
        page,
    }))
}

fn parse_id(raw: &str) -> ApiResult<i64> {
    raw.parse::<i64>()
        .map_err(|_| ApiError::bad(format!("{raw:?} is not an action id (a number)")))
}

/// The action, if it exists and this person may see its chat.
pub(crate) async fn visible_action(
    st: &AppState,
    id: i64,
    user: &str,
) -> ApiResult<Option<ActionView>> {
    Ok(st.kernel.person(user).shown(id).await?.map(action_view))
}

fn no_action(id: i64) -> ApiError {
    ApiError::not_found(format!(
        "no action #{id} that you may see (it may not exist, may have been pruned, or belongs to a chat not shared with you)"
    ))
}

async fn action_get(
    State(st): State<AppState>,
    p: Person,
    Path(id): Path<String>,
) -> ApiResult<Json<ActionView>> {
    let id = parse_id(&id)?;
    visible_action(&st, id, &p.user)
        .await?
        .map(Json)
        .ok_or_else(|| no_action(id))
}

/// The result of one decision, as the page shows it next to the action.
#[derive(Serialize)]
pub(crate) struct DecisionView {
    id: i64,
    /// `approve` or `reject`: what was asked.
    decision: &'static str,
    /// True when the decision did what was asked.
    ok: bool,
    /// `applied`, `failed`, `rejected`, `refused`, `already-applied`,
    /// `not-found` or `error`.
    outcome: &'static str,
    /// For `failed`: whether approving again may retry (P2's class).
    retryable: Option<bool>,
    /// One line, the terminal's wording.
    line: String,
}

pub(crate) fn decision_view(d: &Decision, verb: &'static str) -> DecisionView {
    let (id, outcome, retryable) = match d {
        Decision::Applied { id, .. } => (*id, "applied", None),
        Decision::Failed { id, retryable, .. } => (*id, "failed", Some(*retryable)),
        Decision::Rejected { id } => (*id, "rejected", None),
        Decision::Refused { id, .. } => (*id, "refused", None),
        Decision::Held { id, .. } => (*id, "held", None),
        Decision::NotFound { id } => (*id, "not-found", None),
        Decision::AlreadyApplied { id } => (*id, "already-applied", None),
    };
    DecisionView {
        id,
        decision: verb,
        ok: d.ok() && outcome != "already-applied",
        outcome,
        retryable,
        line: d.line(),
    }
}

/// Decide one action as `user`. The kernel applies the one rule (an
/// action in a chat they may not see is "not found"). Kernel errors become
/// this item's outcome, so one failure never hides the others.
async fn decide(st: &AppState, id: i64, approve: bool, user: &str) -> DecisionView {
    let verb = if approve { "approve" } else { "reject" };
    let decided = if approve {
        st.kernel.person(user).approve(id).await
    } else {
        st.kernel.person(user).reject(id).await
    };
    match decided {
        Ok(Decision::NotFound { id }) => DecisionView {
            id,
            decision: verb,
            ok: false,
            outcome: "not-found",
            retryable: None,
            line: no_action(id).message,
        },
        Ok(d) => decision_view(&d, verb),
        Err(e) => DecisionView {
            id,
            decision: verb,
            ok: false,
            outcome: "error",
            retryable: None,
            line: crate::prompt::one_line(&format!("#{id}: {e:#}")),
        },
    }
}

/// One decision through a single-action endpoint: statuses say what
/// happened (404 not visible, 409 already decided or being applied).
async fn decide_one(st: &AppState, raw: &str, approve: bool, user: &str) -> Response {
    let id = match parse_id(raw) {
        Ok(id) => id,
        Err(e) => return e.into_response(),
    };
    // The decision is a task of its own: a client that hangs up now drops
    // only this wait, never the claim and the send (P8).
    let (task_state, user) = (st.clone(), user.to_owned());
    let v = match st
        .to_completion(async move { decide(&task_state, id, approve, &user).await })
        .await
    {
        Ok(v) => v,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let status = match v.outcome {
        "not-found" => StatusCode::NOT_FOUND,
        "refused" | "held" | "already-applied" => StatusCode::CONFLICT,
        "error" => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::OK,
    };
    if status == StatusCode::OK {
        Json(v).into_response()
    } else {
        ApiError::new(status, v.line).into_response()
    }
}

async fn approve_one(State(st): State<AppState>, p: Person, Path(id): Path<String>) -> Response {
    decide_one(&st, &id, true, &p.user).await
}

async fn reject_one(State(st): State<AppState>, p: Person, Path(id): Path<String>) -> Response {
    decide_one(&st, &id, false, &p.user).await
}

/// A staged revert, as the page shows it.
#[derive(Serialize)]
struct RevertView {
    /// The new action (the revert), pending.
    id: i64,
    /// The applied action it undoes.
    reverts: i64,
    /// One line, the terminal's wording.
    line: String,
}

/// Stage a revert of an applied action as the signed-in person (SPEC H2):
/// a new pending action, decided like any other. 404 for an action they
/// may not see, 403 when they may see but not decide, 409 when it cannot
/// be reverted (not applied, not revertible, already reverted).
async fn revert_one(State(st): State<AppState>, p: Person, Path(id): Path<String>) -> Response {
    use crate::revert::RevertRefusal;
    let id = match parse_id(&id) {
        Ok(id) => id,
        Err(e) => return e.into_response(),
    };
    match p.acting(&st.kernel).revert(id).await {
        Ok(Ok(r)) => Json(RevertView {
            id: r.id,
            reverts: r.reverts,
            line: r.line(),
        })
        .into_response(),
        Ok(Err(RevertRefusal::NotFound(_))) => no_action(id).into_response(),
        Ok(Err(r @ RevertRefusal::Forbidden { .. })) => {
            ApiError::new(StatusCode::FORBIDDEN, r.to_string()).into_response()
        }
        Ok(Err(r)) => ApiError::new(StatusCode::CONFLICT, r.to_string()).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

#[derive(Deserialize)]
struct Batch {
    #[serde(default)]
    approve: Vec<i64>,
    #[serde(default)]
    reject: Vec<i64>,
}

#[derive(Serialize)]
struct BatchResult {
    results: Vec<DecisionView>,
}

/// Approve and reject many actions in one go, oldest first (the order the
/// overseer drains in, U2). Each gets its own result.
async fn decide_many(
    State(st): State<AppState>,
    p: Person,
    Body(b): Body<Batch>,
) -> ApiResult<Json<BatchResult>> {
    if b.approve.is_empty() && b.reject.is_empty() {
        return Err(ApiError::bad(
            "nothing to decide: send {\"approve\": [ids], \"reject\": [ids]}",
        ));
    }
    if let Some(both) = b.approve.iter().find(|id| b.reject.contains(id)) {
        return Err(ApiError::bad(format!(
            "action #{both} is both approved and rejected; choose one"
        )));
    }
    let mut items: Vec<(i64, bool)> = b
        .approve
        .iter()
        .map(|&id| (id, true))
        .chain(b.reject.iter().map(|&id| (id, false)))
        .collect();
    items.sort_unstable();
    items.dedup();
    // The whole batch runs to completion whatever the client does (P8).
    let (task_state, user) = (st.clone(), p.user.clone());
    let results = st
        .to_completion(async move {
            let mut results = Vec::with_capacity(items.len());
            for (id, approve) in items {
                results.push(decide(&task_state, id, approve, &user).await);
            }
            results
        })
        .await?;
    Ok(Json(BatchResult { results }))
}

// ----- chats, ledger, observations -----

#[derive(Serialize)]
struct ChatView {
    name: String,
    owner: String,
    latched: bool,
    pending: usize,
}

async fn chats(State(st): State<AppState>, p: Person) -> ApiResult<Json<Vec<ChatView>>> {
    let list = p.acting(&st.kernel).chats().await?;
    Ok(Json(
        list.into_iter()
            .map(|c| ChatView {
                name: c.name,
                owner: c.owner,
                latched: c.latched,
                pending: c.pending,
            })
            .collect(),
    ))
}

/// What the opener brings (SPEC S2): a share link's token, and the
/// account to use per gatekeeper (the "one chance to choose other
/// accounts" is this parameter on a second request).
#[derive(Deserialize)]
struct OpenBody {
    #[serde(default)]
    link: Option<String>,
    #[serde(default)]
    accounts: std::collections::BTreeMap<String, String>,
}

#[derive(Serialize)]
struct FailureView {
    gatekeeper: String,
    source: String,
    title: String,
    account: Option<String>,
    reason: String,
    /// The sanitised line a person reads.
    line: String,
}

#[derive(Serialize)]
struct OpenView {
    opened: bool,
    checked: usize,
    observers: Vec<crate::store::Observer>,
    failures: Vec<FailureView>,
    /// Per failing gatekeeper, the opener's other accounts to choose from.
    alternatives: std::collections::BTreeMap<String, Vec<String>>,
}

/// Open a chat as the signed-in person: every observed source is
/// re-verified with their own accounts (SPEC S2). A refused open answers
/// 200 with `opened: false` and one failure per binding; a chat that does
/// not exist or is not shared with you is 404, exactly like any other route
/// answers it (W2); refusals no account can fix (locked down) are 403.
async fn chat_open(
    State(st): State<AppState>,
    p: Person,
    Path(chat): Path<String>,
    Body(b): Body<OpenBody>,
) -> ApiResult<Json<OpenView>> {
    use crate::sharing::OpenOutcome;
    let request = crate::sharing::OpenRequest {
        link: b.link,
        accounts: b.accounts,
    };
    let outcome = p
        .acting(&st.kernel)
        .open_chat(&chat, &request)
        .await
        .map_err(|e| match e.downcast_ref::<Refusal>() {
            Some(_) => refused(e),
            None => ApiError::new(StatusCode::FORBIDDEN, format!("{e:#}")),
        })?;
    Ok(Json(match outcome {
        OpenOutcome::Owner => OpenView {
            opened: true,
            checked: 0,
            observers: Vec::new(),
            failures: Vec::new(),
            alternatives: Default::default(),
        },
        OpenOutcome::Admitted { observers, checked } => OpenView {
            opened: true,
            checked,
            observers,
            failures: Vec::new(),
            alternatives: Default::default(),
        },
        OpenOutcome::Refused {
            failures,
            alternatives,
        } => OpenView {
            opened: false,
            checked: 0,
            observers: Vec::new(),
            failures: failures
                .iter()
                .map(|f| FailureView {
                    line: f.line(),
                    gatekeeper: prompt::inline(&f.gatekeeper),
                    source: prompt::inline(&f.source),
                    title: prompt::inline(&f.title),
                    account: f.account.clone(),
                    reason: prompt::inline(&f.reason),
                })
                .collect(),
            alternatives,
        },
    }))
}

/// One chat, with its observation set in brief (what the inbox's chips
/// show of what its reads touched).
#[derive(Serialize)]
struct ChatDetail {
    #[serde(flatten)]
    chat: ChatView,
    observed: crate::inbox::ObservedSet,
}

async fn chat_get(
    State(st): State<AppState>,
    p: Person,
    Path(chat): Path<String>,
) -> ApiResult<Json<ChatDetail>> {
    let view = p
        .acting(&st.kernel)
        .chats()
        .await?
        .into_iter()
        .find(|c| c.name == chat)
        .map(|c| ChatView {
            name: c.name,
            owner: c.owner,
            latched: c.latched,
            pending: c.pending,
        })
        .ok_or_else(|| no_chat(&chat))?;
    let observed = p
        .acting(&st.kernel)
        .observed_set(&chat)
        .await
        .map_err(refused)?;
    Ok(Json(ChatDetail {
        chat: view,
        observed,
    }))
}

/// A ledger entry with a one-line summary rendered like the terminal's
/// `log` (names through the sanitiser).
#[derive(Serialize)]
struct EntryView {
    #[serde(flatten)]
    entry: LedgerEntry,
    summary: String,
    /// The entry as a person sees it: the same fields, through the same
    /// sanitiser, as the terminal's `log` (`prompt::ledger_shown`).
    shown: prompt::LedgerShown,
}

fn entry_view(e: LedgerEntry) -> EntryView {
    EntryView {
        summary: prompt::ledger_line(&e),
        shown: prompt::ledger_shown(&e),
        entry: e,
    }
}

async fn filtered_ledger(
    st: &AppState,
    user: String,
    f: LedgerFilter,
) -> ApiResult<Vec<EntryView>> {
    let entries = st.kernel.person(&user).ledger(f).await.map_err(refused)?;
    Ok(entries.into_iter().map(entry_view).collect())
}

async fn chat_observations(
    State(st): State<AppState>,
    p: Person,
    Path(chat): Path<String>,
) -> ApiResult<Json<Vec<EntryView>>> {
    let f = LedgerFilter {
        chat: Some(chat),
        kind: Some(LedgerKind::Observation),
        ..LedgerFilter::default()
    };
    Ok(Json(filtered_ledger(&st, p.user, f).await?))
}

/// The ledger's filters (SPEC L2), as query parameters.
#[derive(Deserialize, Default)]
struct LedgerQuery {
    chat: Option<String>,
    kind: Option<String>,
    approved_by: Option<String>,
    server_claims: Option<bool>,
    auto_approved: Option<bool>,
    observed_by: Option<String>,
    hook: Option<i64>,
}

fn nonempty(s: Option<String>) -> Option<String> {
    s.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

/// A workflow approval request in the ledger's answer to `approved_by`
/// (SPEC L2): a record of its own (`kind` `request`, its id from the
/// requests' sequence), with the same shown fields as an entry.
#[derive(Serialize)]
struct ApprovedRequestView {
    #[serde(flatten)]
    request: crate::store::workflows::ApprovedRequest,
    summary: String,
    shown: prompt::LedgerShown,
}

/// One record of the ledger's answer: an entry, or (for `approved_by`) a
/// workflow approval request (both boxed: each is a few hundred bytes).
#[derive(Serialize)]
#[serde(untagged)]
enum LedgerItem {
    Entry(Box<EntryView>),
    Request(Box<ApprovedRequestView>),
}

async fn ledger(
    State(st): State<AppState>,
    p: Person,
    q: Result<Query<LedgerQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Vec<LedgerItem>>> {
    let Query(q) = q.map_err(|e| ApiError::bad(e.body_text()))?;
    let kind = match nonempty(q.kind).as_deref().map(LedgerKind::from_word) {
        None => None,
        Some(Some(kind)) => Some(kind),
        Some(None) => return Err(ApiError::bad("kind must be action, observation or hook")),
    };
    let f = LedgerFilter {
        chat: nonempty(q.chat),
        kind,
        approved_by: nonempty(q.approved_by),
        server_claims: q.server_claims.unwrap_or(false),
        auto_approved: q.auto_approved.unwrap_or(false),
        observed_by: nonempty(q.observed_by),
        hook: q.hook,
        ..LedgerFilter::default()
    };
    // What one person approved includes the workflow approval requests
    // they approved, as the terminal's `log --approved-by` lists them.
    let all = p.acting(&st.kernel).approvals(f).await.map_err(refused)?;
    Ok(Json(
        all.into_iter()
            .map(|a| match a {
                crate::inbox::Approval::Action(e) => LedgerItem::Entry(Box::new(entry_view(*e))),
                crate::inbox::Approval::Request(r) => {
                    LedgerItem::Request(Box::new(ApprovedRequestView {
                        summary: prompt::approved_request_line(&r),
                        shown: prompt::approved_request_shown(&r),
                        request: r,
                    }))
                }
            })
            .collect(),
    ))
}

// ----- rules -----

#[derive(Serialize)]
struct RuleItem {
    #[serde(flatten)]
    rule: crate::store::Rule,
    /// The tag through the sanitiser (a tool name is attacker-written).
    tag_shown: String,
}

async fn rules(State(st): State<AppState>, p: Person) -> ApiResult<Json<Vec<RuleItem>>> {
    let rules = p.acting(&st.kernel).rules()?;
    Ok(Json(
        rules
            .into_iter()
            .map(|rule| RuleItem {
                tag_shown: prompt::inline(&rule.tag),
                rule,
            })
            .collect(),
    ))
}

#[derive(Deserialize)]
struct NewRule {
    tag: String,
    /// Only in this chat (where you must be allowed to decide); absent:
    /// in every chat you own.
    #[serde(default)]
    chat: Option<String>,
}

#[derive(Serialize)]
struct RuleView {
    tag: String,
    enabled_by: String,
    key_one: bool,
    missing: Option<String>,
    /// Both keys explained, one sentence each (U1).
    explanation: Vec<String>,
    /// What the drain after enabling it applied, in chats you may see.
    applied: Vec<DecisionView>,
}

/// Enable key two for a tag; the answer explains both keys and says when
/// key one is missing (the kernel's `RuleReport`).
async fn rule_add(
    State(st): State<AppState>,
    p: Person,
    Body(b): Body<NewRule>,
) -> ApiResult<Json<RuleView>> {
    let tag = b.tag.trim().to_owned();
    // Enabling a rule drains: it may claim and send, so it runs to
    // completion whatever the client does (P8).
    let (kernel, user, chat) = (st.kernel.clone(), p.user.clone(), b.chat.clone());
    let report = st
        .to_completion(async move { kernel.person(&user).add_rule(&tag, chat.as_deref()).await })
        .await?
        .map_err(|e| match e.downcast_ref::<Refusal>() {
            Some(_) => refused(e),
            None => ApiError::bad(format!("{e:#}")),
        })?;
    let mut applied = Vec::new();
    for d in &report.applied {
        if visible_action(&st, d.id(), &p.user).await?.is_some() {
            applied.push(decision_view(d, "approve"));
        }
    }
    let tag_shown = prompt::inline(&report.tag);
    let mut explanation = vec![format!(
        "Key two holds: your rule for exactly {tag_shown} is enabled (enabled by {}), {}; it never applies to a same-named tool of another gatekeeper.",
        prompt::inline(&p.user),
        match &report.chat {
            Some(c) => format!("in chat {} only", prompt::inline(c)),
            None => "in the chats you own".to_owned(),
        }
    )];
    explanation.push(match &report.missing {
        None => "Key one holds: the gatekeeper is vetted and the tool is a non-destructive, idempotent action; matching actions are now approved automatically, in order, and the ledger records you as resolved-by.".to_owned(),
        Some(m) => format!("{m}. Both keys are needed: this rule alone approves nothing."),
    });
    Ok(Json(RuleView {
        tag: report.tag.clone(),
        enabled_by: p.user,
        key_one: report.key_one,
        missing: report.missing.clone(),
        explanation,
        applied,
    }))
}
