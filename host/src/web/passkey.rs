//! The passkey endpoints: sign in with a passkey (no session needed), and a
//! signed-in person's own passkeys (list, add, remove; CSRF like every
//! change).
//!
//! Only HTTP: the ceremonies, the checks and what is stored are the
//! kernel's (`crate::signin::passkey`). A request answered under a name
//! that cannot carry passkeys (an address such as `127.0.0.1`) is told
//! where they work.

use super::api::{SessionView, signed_in};
use super::exposure::{Answering, Seen};
use super::reply::{ApiError, ApiResult, Body};
use super::session::Person;
use super::{AppState, Routes};
use crate::kernel::Kernel;
use crate::signin::passkey::{PasskeyRefusal, Passkeys, Started, StoredPasskey};
use axum::Json;
use axum::extract::{Extension, Path, State};
use axum::http::{Method, StatusCode};
use axum::routing::{delete, get, post};
use axum_extra::extract::cookie::CookieJar;
use serde::Deserialize;
use std::sync::Arc;

/// The passkey API's routes, added to `routes`.
pub(crate) fn routes(routes: Routes) -> Routes {
    routes
        .add(
            Method::POST,
            "/api/passkeys/signin/start",
            post(signin_start),
        )
        .add(
            Method::POST,
            "/api/passkeys/signin/finish",
            post(signin_finish),
        )
        .add(Method::GET, "/api/passkeys", get(list))
        .add(
            Method::POST,
            "/api/passkeys/register/start",
            post(register_start),
        )
        .add(
            Method::POST,
            "/api/passkeys/register/finish",
            post(register_finish),
        )
        .add(Method::DELETE, "/api/passkeys/{credential}", delete(remove))
}

/// The server's passkeys: for its public name, or for `localhost` on
/// loopback; none (logged) where that name cannot carry them.
pub(crate) fn for_server(kernel: &Kernel, answering: &Answering) -> Option<Arc<Passkeys>> {
    let Some(rp) = answering.server_relying_party() else {
        tracing::warn!("{}; passkeys are not offered", answering.passkey_hint());
        return None;
    };
    match kernel.passkeys(rp) {
        Ok(p) => Some(Arc::new(p)),
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "passkeys are not offered");
            None
        }
    }
}

/// This server's passkeys, if the request's name carries them.
pub(crate) fn usable(st: &AppState, seen: &Seen) -> Result<Arc<Passkeys>, String> {
    let hint = st.answering.passkey_hint();
    let Some(p) = &st.passkeys else {
        return Err(hint);
    };
    match st.answering.relying_party(seen) {
        Some(rp) if rp == *p.relying_party() => Ok(p.clone()),
        _ => Err(hint),
    }
}

fn unusable(hint: String) -> ApiError {
    ApiError::bad(hint)
}

fn refusal(r: PasskeyRefusal) -> ApiError {
    let status = match r {
        PasskeyRefusal::Malformed(_) => StatusCode::BAD_REQUEST,
        _ => StatusCode::UNAUTHORIZED,
    };
    ApiError::new(status, r.to_string())
}

/// Start a passkey sign-in.
async fn signin_start(
    State(st): State<AppState>,
    Extension(seen): Extension<Seen>,
) -> ApiResult<Json<Started>> {
    let p = usable(&st, &seen).map_err(unusable)?;
    Ok(Json(p.start_signin()?))
}

#[derive(Deserialize)]
struct Answer {
    ceremony: String,
    credential: serde_json::Value,
    #[serde(default)]
    label: String,
}

/// Finish a passkey sign-in: the answer sets the session cookie.
async fn signin_finish(
    State(st): State<AppState>,
    Extension(seen): Extension<Seen>,
    jar: CookieJar,
    Body(a): Body<Answer>,
) -> ApiResult<(CookieJar, Json<SessionView>)> {
    let p = usable(&st, &seen).map_err(unusable)?;
    let redeemed = p
        .finish_signin(&a.ceremony, a.credential, st.session_ttl_ms)
        .await?
        .map_err(refusal)?;
    signed_in(&st, jar, redeemed).await
}

/// The signed-in person's passkeys (labels and dates; never a key).
async fn list(State(st): State<AppState>, p: Person) -> ApiResult<Json<Vec<StoredPasskey>>> {
    Ok(Json(p.acting(&st.kernel).passkeys_of().await?))
}

/// Start adding a passkey for the signed-in person.
async fn register_start(
    State(st): State<AppState>,
    Extension(seen): Extension<Seen>,
    p: Person,
) -> ApiResult<Json<Started>> {
    let keys = usable(&st, &seen).map_err(unusable)?;
    Ok(Json(keys.start_registration(&p.user).await?))
}

/// Finish adding a passkey.
async fn register_finish(
    State(st): State<AppState>,
    Extension(seen): Extension<Seen>,
    p: Person,
    Body(a): Body<Answer>,
) -> ApiResult<(StatusCode, Json<StoredPasskey>)> {
    let keys = usable(&st, &seen).map_err(unusable)?;
    let added = keys
        .finish_registration(&p.user, &a.ceremony, a.credential, &a.label)
        .await?
        .map_err(refusal)?;
    Ok((StatusCode::CREATED, Json(added)))
}

/// Remove one of the signed-in person's passkeys.
async fn remove(
    State(st): State<AppState>,
    p: Person,
    Path(credential): Path<String>,
) -> ApiResult<StatusCode> {
    if p.acting(&st.kernel).remove_passkey(&credential).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found("you have no passkey with that id"))
    }
}

/// For the sign-in page: whether passkeys work under the name it was
/// opened at, and if not, where.
pub(crate) fn offered(st: &AppState, seen: &Seen) -> (bool, Option<String>) {
    match usable(st, seen) {
        Ok(_) => (true, None),
        Err(hint) => (false, Some(hint)),
    }
}
