//! A signed-in person's accounts in the web inbox: `GET /api/accounts`
//! lists them (never a credential) with the gatekeepers an account can be
//! connected at by OAuth; `POST /api/accounts/oauth` begins an OAuth
//! connection and answers the authorization URL; `GET /oauth/callback` is
//! where the authorization server sends the browser back, and finishes it.
//!
//! Only HTTP and the flows in flight: discovery, registration, the
//! exchange and the stored grant are `crate::oauth`'s. A flow is kept in
//! this process for [`crate::oauth::FLOW_TTL`], found by its `state`, and
//! finished only in the browser (a Lax cookie, as OpenID Connect sign-in's
//! ceremony cookie, see `session::oidc_cookie`) and the session that began
//! it (still signed in as the same person).

use super::AppState;
use super::exposure::Seen;
use super::reply::{ApiError, ApiResult, Body};
use super::session::Person;
use crate::oauth::{FLOW_TTL, Pending};
use crate::store::SessionLookup;
use axum::Json;
use axum::extract::{Extension, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// Where the authorization server sends the browser back.
pub(crate) const CALLBACK: &str = "/oauth/callback";
/// The cookie binding a flow to the browser that began it.
const FLOW_COOKIE: &str = "gatehouse_oauth";
/// Flows in flight at once (a bound on what a signed-in person can make
/// this process keep).
const MAX_FLOWS: usize = 1024;

/// One connection in progress.
struct Flow {
    user: String,
    session: String,
    browser: String,
    gatekeeper: String,
    label: String,
    pending: Pending,
    began: Instant,
}

/// The flows in flight, by state.
#[derive(Default)]
pub(crate) struct Flows(Mutex<HashMap<String, Flow>>);

impl Flows {
    fn put(&self, flow: Flow) -> Result<(), ApiError> {
        let mut flows = self.0.lock().unwrap_or_else(|p| p.into_inner());
        flows.retain(|_, f| f.began.elapsed() < FLOW_TTL);
        if flows.len() >= MAX_FLOWS {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many account connections in progress; try again in a few minutes",
            ));
        }
        flows.insert(flow.pending.state().to_owned(), flow);
        Ok(())
    }

    /// The flow of `state`, taken (a flow finishes once).
    fn take(&self, state: &str) -> Option<Flow> {
        let mut flows = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let flow = flows.remove(state)?;
        (flow.began.elapsed() < FLOW_TTL && flow.pending.state_is(state)).then_some(flow)
    }
}

#[derive(Serialize)]
struct AccountView {
    gatekeeper: String,
    label: String,
    is_default: bool,
}

#[derive(Serialize)]
pub(crate) struct AccountsView {
    /// The person's accounts, never their credentials.
    accounts: Vec<AccountView>,
    /// Gatekeepers whose service is named by a URL: an account there may
    /// be connected by OAuth.
    connectable: Vec<String>,
}

/// The person's accounts.
pub(crate) async fn list(State(st): State<AppState>, p: Person) -> ApiResult<Json<AccountsView>> {
    let accounts = p
        .acting(&st.kernel)
        .accounts()?
        .into_iter()
        .map(|a| AccountView {
            gatekeeper: a.gatekeeper,
            label: a.label,
            is_default: a.is_default,
        })
        .collect();
    Ok(Json(AccountsView {
        accounts,
        connectable: st.kernel.oauth_connectable()?,
    }))
}

#[derive(Deserialize)]
pub(crate) struct Connect {
    gatekeeper: String,
    /// The account's label (default: the person's name).
    label: Option<String>,
}

#[derive(Serialize)]
pub(crate) struct Started {
    /// Where to send the browser.
    url: String,
}

/// Begin connecting an account by OAuth: the answer names the URL the
/// page sends the browser to, and sets the cookie that binds the flow to
/// this browser.
pub(crate) async fn begin(
    State(st): State<AppState>,
    Extension(seen): Extension<Seen>,
    jar: CookieJar,
    p: Person,
    Body(b): Body<Connect>,
) -> ApiResult<(CookieJar, Json<Started>)> {
    let label = b.label.unwrap_or_else(|| p.user.clone());
    let redirect = format!("{}{CALLBACK}", st.answering.origin_of(&seen));
    let (url, pending) = p
        .acting(&st.kernel)
        .begin_oauth(&b.gatekeeper, &label, &redirect, None, None)
        .await
        .map_err(|e| ApiError::bad(format!("{e:#}")))?;
    let browser = crate::kernel::random_hex(32)?;
    st.oauth_flows.put(Flow {
        user: p.user,
        session: p.secret,
        browser: browser.clone(),
        gatekeeper: b.gatekeeper,
        label,
        pending,
        began: Instant::now(),
    })?;
    Ok((
        jar.add(flow_cookie(browser, FLOW_TTL.as_secs())),
        Json(Started {
            url: url.to_string(),
        }),
    ))
}

/// **SameSite=Lax, and why**: the authorization server sends the browser
/// back from its own site, a cross-site navigation on which neither the
/// Strict session cookie nor a Strict flow cookie is sent. This one only
/// names a flow this browser began (good once, for its deadline, on the
/// callback's path alone); the session that began it is checked from the
/// flow itself.
fn flow_cookie(value: String, max_age_s: u64) -> Cookie<'static> {
    Cookie::build((FLOW_COOKIE, value))
        .http_only(true)
        .secure(true)
        .same_site(SameSite::Lax)
        .path(CALLBACK)
        .max_age(time::Duration::seconds(
            i64::try_from(max_age_s).unwrap_or(600),
        ))
        .build()
}

#[derive(Deserialize)]
pub(crate) struct Back {
    state: Option<String>,
    code: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

fn page(status: StatusCode, why: &str) -> Response {
    let body = format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>Account not connected</title>\n<link rel=\"stylesheet\" href=\"/assets/app.css\">\n</head>\n<body>\n<main>\n<h1>Account not connected</h1>\n<p id=\"refusal\">{}</p>\n<p><a href=\"/\">Back to the inbox</a></p>\n</main>\n</body>\n</html>\n",
        super::oidc::escape(&crate::prompt::one_line(why))
    );
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        )],
        body,
    )
        .into_response()
}

/// Finish the connection the authorization server sent the browser back
/// for.
pub(crate) async fn callback(
    State(st): State<AppState>,
    Query(back): Query<Back>,
    jar: CookieJar,
) -> Response {
    let jar_out = jar.clone().add(flow_cookie(String::new(), 0));
    let refuse = |status, why: &str| (jar_out.clone(), page(status, why)).into_response();
    let Some(flow) = back.state.as_deref().and_then(|s| st.oauth_flows.take(s)) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "this answer does not belong to an account connection in progress here (wrong state, already used, or older than 10 minutes); start again from the inbox",
        );
    };
    let browser = jar.get(FLOW_COOKIE).map(|c| c.value()).unwrap_or("");
    if !bool::from(subtle::ConstantTimeEq::ct_eq(
        browser.as_bytes(),
        flow.browser.as_bytes(),
    )) {
        return refuse(
            StatusCode::BAD_REQUEST,
            "this connection was begun in another browser; start again from the inbox",
        );
    }
    // The session that began it must still be signed in, as the same
    // person.
    let signed_in = match st.kernel.session(&flow.session).await {
        Ok(SessionLookup::Valid { user, .. }) => user == flow.user,
        Ok(_) => false,
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "a session lookup failed");
            false
        }
    };
    if !signed_in {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "the session that began this connection has ended; sign in and start again",
        );
    }
    if let Some(error) = back.error {
        let detail = back
            .error_description
            .map(|d| format!(": {d}"))
            .unwrap_or_default();
        return refuse(
            StatusCode::BAD_REQUEST,
            &format!("the authorization server did not authorize: {error}{detail}"),
        );
    }
    let Some(code) = back.code else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "the authorization server sent no code",
        );
    };
    let connected = match crate::oauth::finish(flow.pending, &code).await {
        Ok(grant) => st.kernel.person(&flow.user).connect_oauth_account(
            &flow.gatekeeper,
            &flow.label,
            &grant,
            false,
        ),
        Err(e) => Err(e),
    };
    match connected {
        Ok(a) => {
            tracing::info!(account = %a.id(), gatekeeper = %a.gatekeeper, "connected an account by OAuth");
            (jar_out, Redirect::to("/account")).into_response()
        }
        Err(e) => refuse(StatusCode::BAD_GATEWAY, &format!("{e:#}")),
    }
}
