//! Faces in the inbox: a gadget's page on a chat's page, in a sandbox of
//! its own, and the one endpoint its calls reach (F in docs/rules.md).
//!
//! The page is served as a document of its own (`/faces/{gadget}`) under
//! a policy that makes it an opaque origin (`sandbox allow-scripts`, no
//! `allow-same-origin`), so it can read no cookie and no storage of the
//! inbox, and that lets it load and fetch nothing, submit no form, open no
//! window and navigate no other frame; only the inbox may frame it. The
//! inbox's own policy lets its frames hold nothing but this origin's
//! documents, and every other document of the inbox refuses to be framed,
//! so a page that navigates itself can only land on another face. The
//! page's one way out is `postMessage` to the inbox's script, which sends
//! each call here as the signed-in person, with the session's CSRF token.
//!
//! Owns the face document's headers and the call endpoint's shape. May
//! not decide anything: [`crate::capability::Person::face_call`] admits and
//! runs the call (a turn of the person, through every gate), and the
//! actions it staged are shown as the kernel renders them for the inbox.

use super::reply::{ApiError, ApiResult, Body, refused};
use super::session::Person;
use super::{AppState, Routes};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, Method, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};

/// The face document's policy. `sandbox allow-scripts` without
/// `allow-same-origin` gives it an opaque origin even when it is opened on
/// its own; the fetch directives leave it nothing to load or reach but
/// what is inline; `frame-ancestors 'self'` lets only the inbox frame it.
pub const FACE_POLICY: &str = "sandbox allow-scripts; default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; font-src data:; media-src data:; connect-src 'none'; form-action 'none'; base-uri 'none'; frame-src 'none'; child-src 'none'; worker-src 'none'; manifest-src 'none'; object-src 'none'; webrtc 'block'; frame-ancestors 'self'";

/// Powerful features a page never needs.
const FACE_PERMISSIONS: &str = "camera=(), microphone=(), geolocation=(), usb=(), serial=(), hid=(), bluetooth=(), payment=(), clipboard-read=(), clipboard-write=(), display-capture=(), fullscreen=()";

/// The face document of `gadget`, for a signed-in person.
async fn document(State(st): State<AppState>, _p: Person, Path(gadget): Path<String>) -> Response {
    let page = match st.kernel.face(&gadget).await {
        Ok(Some(page)) => page,
        Ok(None) => {
            return ApiError::not_found(format!(
                "gadget {:?} has no face",
                crate::prompt::inline(&gadget)
            ))
            .into_response_now();
        }
        Err(e) => return ApiError::not_found(format!("{e:#}")).into_response_now(),
    };
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            ),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(FACE_POLICY),
            ),
            (
                header::HeaderName::from_static("permissions-policy"),
                HeaderValue::from_static(FACE_PERMISSIONS),
            ),
            (
                header::X_FRAME_OPTIONS,
                HeaderValue::from_static("SAMEORIGIN"),
            ),
            (
                header::HeaderName::from_static("cross-origin-resource-policy"),
                HeaderValue::from_static("same-origin"),
            ),
        ],
        page.html.clone(),
    )
        .into_response()
}

/// The routes of face documents: served under [`FACE_POLICY`] instead of
/// the inbox's (see `super::app`).
pub(crate) fn documents() -> axum::Router<AppState> {
    axum::Router::new().route("/faces/{gadget}", get(document))
}

/// A call of a face's function.
#[derive(Deserialize)]
struct CallBody {
    name: String,
    #[serde(default = "empty_object")]
    args: serde_json::Value,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

/// What a call did.
#[derive(Serialize)]
struct CallView {
    /// True when the gadget answered.
    ok: bool,
    /// The gadget's answer (any JSON), when it answered.
    answer: Option<serde_json::Value>,
    /// Why the call failed, in one line, when it did.
    error: Option<String>,
    /// The actions the call staged, as the inbox shows them: each waits
    /// for a decision, and nothing of them was sent.
    staged: Vec<super::api::ActionView>,
}

/// Run a call of `gadget`'s face in `chat` as the signed-in person.
async fn call(
    State(st): State<AppState>,
    p: Person,
    Path((chat, gadget)): Path<(String, String)>,
    Body(b): Body<CallBody>,
) -> ApiResult<Json<CallView>> {
    let args = serde_json::to_string(&b.args)
        .map_err(|e| ApiError::bad(format!("the arguments are not JSON: {e}")))?;
    let _turn = st.face_turns.clone().acquire_owned().await.map_err(|_| {
        ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "the server is stopping; call again",
        )
    })?;
    let answer = p
        .acting(&st.kernel)
        .face_call(&gadget, &chat, &b.name, &args)
        .await
        .map_err(|e| match e.downcast_ref::<crate::access::Refusal>() {
            Some(_) => refused(e),
            None => ApiError::bad(format!("{e:#}")),
        })?;
    let mut staged = Vec::new();
    for id in answer.staged {
        if let Some(view) = super::api::visible_action(&st, id, &p.user).await? {
            staged.push(view);
        }
    }
    let (ok, answer, error) = match answer.output {
        Ok(text) => match serde_json::from_str(&text) {
            Ok(v) => (true, Some(v), None),
            Err(e) => (false, None, Some(format!("the answer is not JSON: {e}"))),
        },
        Err(e) => (false, None, Some(crate::prompt::one_line(&e))),
    };
    Ok(Json(CallView {
        ok,
        answer,
        error,
        staged,
    }))
}

/// The face endpoints of the JSON API.
pub(crate) fn routes(r: Routes) -> Routes {
    r.add(Method::GET, "/api/faces", get(list)).add(
        Method::POST,
        "/api/chats/{chat}/faces/{gadget}/call",
        post(call),
    )
}

/// The installed gadgets that have a face.
async fn list(State(st): State<AppState>, _p: Person) -> ApiResult<Json<Vec<crate::face::Listed>>> {
    Ok(Json(st.kernel.faces().await?))
}
