//! Who is asking: the session cookie and the CSRF check.
//!
//! The cookie holds a 256-bit secret; the database holds only its digest
//! (`store::sessions`). Every request that changes state must also carry
//! `X-CSRF-Token`: a second random secret of the session, independent of
//! the cookie's (nothing about one tells anything about the other), stored
//! as a digest only and handed out by `GET /api/session`, which the
//! same-origin policy keeps from other sites' pages. The cookie is HttpOnly
//! (no script reads it), Secure and SameSite=Strict (never sent on a request
//! another site starts). The one Lax cookie, an OpenID Connect sign-in's
//! ceremony id, signs nobody in ([`oidc_cookie`] says why it is Lax).

use super::AppState;
use super::reply::ApiError;
use crate::store::SessionLookup;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{Method, StatusCode};
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};

/// The session cookie's name.
pub(crate) const COOKIE: &str = "gatehouse_session";
/// The header every state-changing request carries.
pub(crate) const CSRF_HEADER: &str = "x-csrf-token";

/// A signed-in person.
#[derive(Clone, Debug)]
pub(crate) struct Person {
    pub user: String,
    pub secret: String,
    pub expires_at: i64,
}

impl Person {
    /// What this signed-in person acts with: the kernel's handle for the
    /// user the session was verified for, and no one else.
    pub(crate) fn acting<'a>(&'a self, kernel: &'a crate::Kernel) -> crate::capability::Person<'a> {
        kernel.person(&self.user)
    }
}

/// The cookie that carries a new session.
pub(crate) fn session_cookie(secret: String, max_age_ms: i64) -> Cookie<'static> {
    Cookie::build((COOKIE, secret))
        .http_only(true)
        .secure(true)
        .same_site(SameSite::Strict)
        .path("/")
        .max_age(cookie_max_age(max_age_ms))
        .build()
}

/// The cookie that carries an OpenID Connect sign-in in progress (its
/// ceremony id) from its start to the provider's callback.
pub(crate) const OIDC_COOKIE: &str = "gatehouse_oidc";

/// The ceremony cookie of an OpenID Connect sign-in. **SameSite=Lax, not
/// Strict, and why**: the provider sends the browser back to the callback
/// from its own site, a cross-site navigation on which a Strict cookie is
/// never sent, so the callback could not tell which sign-in (and whose
/// browser) it finishes. Lax is sent on that top-level GET only. It is
/// safe here because the cookie signs nobody in: it only names a ceremony
/// of this browser, good once, for ten minutes, on the `/signin/oidc`
/// paths alone (a login-CSRF page cannot finish a sign-in this browser did
/// not start). The session cookie the callback sets stays Strict.
pub(crate) fn oidc_cookie(ceremony: String) -> Cookie<'static> {
    Cookie::build((OIDC_COOKIE, ceremony))
        .http_only(true)
        .secure(true)
        .same_site(SameSite::Lax)
        .path("/signin/oidc")
        .max_age(time::Duration::seconds(
            i64::try_from(crate::signin::oidc::CEREMONY_TTL.as_secs()).unwrap_or(600),
        ))
        .build()
}

/// The cookie that clears an OpenID Connect ceremony (spent or refused).
pub(crate) fn oidc_removal_cookie() -> Cookie<'static> {
    Cookie::build((OIDC_COOKIE, ""))
        .http_only(true)
        .secure(true)
        .same_site(SameSite::Lax)
        .path("/signin/oidc")
        .max_age(cookie_max_age(0))
        .build()
}

/// The cookie that clears the session (sign-out).
pub(crate) fn removal_cookie() -> Cookie<'static> {
    Cookie::build((COOKIE, ""))
        .http_only(true)
        .secure(true)
        .same_site(SameSite::Strict)
        .path("/")
        .max_age(cookie_max_age(0))
        .build()
}

fn cookie_max_age(ms: i64) -> time::Duration {
    time::Duration::milliseconds(ms.max(0))
}

fn safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

impl FromRequestParts<AppState> for Person {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Person, ApiError> {
        let jar = CookieJar::from_headers(&parts.headers);
        let Some(secret) = jar
            .get(COOKIE)
            .map(|c| c.value().to_owned())
            .filter(|v| !v.is_empty())
        else {
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "not signed in: sign in at /signin (a passkey, your identity provider, or a link from `gatehouse token create NAME`)",
            ));
        };
        // A request that changes state must carry one of the session's CSRF
        // tokens; it is looked up (by digest) in the same trip.
        let sent = (!safe(&parts.method)).then(|| {
            parts
                .headers
                .get(CSRF_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        });
        let (lookup, csrf_ok) = state.kernel.session_with_csrf(&secret, sent).await?;
        let person = match lookup {
            SessionLookup::Valid { user, expires_at } => Person {
                user,
                secret,
                expires_at,
            },
            SessionLookup::Expired { .. } => {
                return Err(ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "your session expired: sign in again with a new link (`gatehouse token create NAME`)",
                ));
            }
            SessionLookup::Unknown => {
                return Err(ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "this session is not known (signed out?): sign in again with a new link (`gatehouse token create NAME`)",
                ));
            }
        };
        if !csrf_ok {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "missing or wrong X-CSRF-Token header: reload the page (the token comes from GET /api/session)",
            ));
        }
        Ok(person)
    }
}
