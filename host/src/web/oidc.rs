//! The OpenID Connect pages: `GET /signin/oidc` sends the browser to the
//! provider (with a ceremony cookie, see `session::oidc_cookie`), and
//! `GET /signin/oidc/callback` finishes the sign-in and lands the person in
//! the inbox, or shows one line saying why not (an identity nobody bound
//! names its issuer and subject, for the operator to bind).
//!
//! Only HTTP: the flow, its checks and the binding are the kernel's
//! (`crate::signin::oidc`).

use super::AppState;
use super::exposure::Seen;
use super::session::{OIDC_COOKIE, oidc_cookie, oidc_removal_cookie, session_cookie};
use crate::signin::oidc::{Callback, OidcRefusal};
use axum::Router;
use axum::extract::{Extension, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum_extra::extract::cookie::CookieJar;

/// Where the provider sends the browser back, under the server's origin.
pub(crate) const CALLBACK: &str = "/signin/oidc/callback";

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/signin/oidc", get(start))
        .route(CALLBACK, get(callback))
}

/// Text for an HTML page: markup characters escaped.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A page saying why signing in did not work, with a way back. No script:
/// the text is escaped, and the policy allows none anyway.
fn refused_page(status: StatusCode, why: &str) -> Response {
    let body = format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>Sign-in refused</title>\n<link rel=\"stylesheet\" href=\"/assets/app.css\">\n</head>\n<body>\n<main>\n<h1>Sign-in refused</h1>\n<p id=\"refusal\">{}</p>\n<p><a href=\"/signin\">Back to sign-in</a></p>\n</main>\n</body>\n</html>\n",
        escape(&crate::prompt::one_line(why))
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

/// Send the browser to the provider.
async fn start(
    State(st): State<AppState>,
    Extension(seen): Extension<Seen>,
    jar: CookieJar,
) -> Response {
    let Some(oidc) = st.oidc.clone() else {
        return refused_page(
            StatusCode::NOT_FOUND,
            "this server offers no OpenID Connect sign-in (its operator gives `serve --oidc-issuer URL --oidc-client-id ID`)",
        );
    };
    let redirect = format!("{}{CALLBACK}", st.answering.origin_of(&seen));
    match oidc.start(&redirect).await {
        Ok(started) => (
            jar.add(oidc_cookie(started.ceremony)),
            Redirect::to(&started.url),
        )
            .into_response(),
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "an OpenID Connect sign-in could not start");
            refused_page(StatusCode::SERVICE_UNAVAILABLE, &format!("{e:#}"))
        }
    }
}

/// Finish the sign-in the provider sent the browser back for.
async fn callback(
    State(st): State<AppState>,
    Query(back): Query<Callback>,
    jar: CookieJar,
) -> Response {
    let Some(oidc) = st.oidc.clone() else {
        return refused_page(
            StatusCode::NOT_FOUND,
            "this server offers no OpenID Connect sign-in",
        );
    };
    let ceremony = jar
        .get(OIDC_COOKIE)
        .map(|c| c.value().to_owned())
        .unwrap_or_default();
    let jar = jar.add(oidc_removal_cookie());
    match oidc.finish(&ceremony, back, st.session_ttl_ms).await {
        Ok(Ok(redeemed)) => (
            jar.add(session_cookie(redeemed.session, st.session_ttl_ms)),
            // 303: the inbox is fetched with GET, and its page asks the
            // API (same-site, so the Strict session cookie goes along).
            Redirect::to("/"),
        )
            .into_response(),
        Ok(Err(refusal)) => {
            let status = match refusal {
                OidcRefusal::Unbound { .. } => StatusCode::FORBIDDEN,
                _ => StatusCode::UNAUTHORIZED,
            };
            (jar, refused_page(status, &refusal.to_string())).into_response()
        }
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "an OpenID Connect sign-in failed");
            (
                jar,
                refused_page(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e:#}")),
            )
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn markup_is_escaped() {
        assert_eq!(
            super::escape("<script>alert('x')</script> & \"q\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
    }
}
