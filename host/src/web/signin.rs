//! The sign-in page and the account page (a person's passkeys), served as
//! their own HTML and script embedded in the binary (the inbox's page
//! stays `assets`'), and `GET /api/signin`: which ways to sign in this
//! server offers under the name the page was opened at.
//!
//! Only HTTP and static files: every sign-in is the kernel's
//! (`crate::signin`).

use super::exposure::Seen;
use super::reply::ApiResult;
use super::{AppState, Routes};
use axum::extract::{Extension, State};
use axum::http::{HeaderValue, Method, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;

const SIGNIN_PAGE: &str = include_str!("static/signin.html");
const ACCOUNT_PAGE: &str = include_str!("static/account.html");
const SIGNIN_SCRIPT: &str = include_str!("static/signin.js");

/// The sign-in API's routes, added to `routes`.
pub(crate) fn routes(routes: Routes) -> Routes {
    routes.add(Method::GET, "/api/signin", get(methods))
}

/// The pages and their script.
pub(crate) fn pages() -> Router<AppState> {
    Router::new()
        .route(
            "/signin",
            get(|| page(SIGNIN_PAGE, "text/html; charset=utf-8")),
        )
        .route(
            "/account",
            get(|| page(ACCOUNT_PAGE, "text/html; charset=utf-8")),
        )
        .route(
            "/assets/signin.js",
            get(|| page(SIGNIN_SCRIPT, "text/javascript; charset=utf-8")),
        )
}

async fn page(body: &'static str, content_type: &'static str) -> Response {
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
        body,
    )
        .into_response()
}

#[derive(Serialize)]
struct Methods {
    /// Passkeys work under the name the page was opened at.
    passkeys: bool,
    /// If not, where they do.
    passkey_hint: Option<String>,
    /// The OpenID Connect issuer people sign in at, if offered.
    oidc_issuer: Option<String>,
}

/// Which ways to sign in this server offers, for the page opened at the
/// request's name. Needs no session.
async fn methods(
    State(st): State<AppState>,
    Extension(seen): Extension<Seen>,
) -> ApiResult<Json<Methods>> {
    let (passkeys, passkey_hint) = super::passkey::offered(&st, &seen);
    Ok(Json(Methods {
        passkeys,
        passkey_hint,
        oidc_issuer: st.oidc.as_ref().map(|o| o.issuer().to_owned()),
    }))
}
