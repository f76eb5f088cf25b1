//! How the web surface answers when it cannot do what was asked: one line,
//! `{"error": "..."}`, with a status that says what kind. A chat a person
//! may not see answers exactly like one that does not exist.
//!
//! Owns: the error type every handler returns, the JSON body extractor
//! whose rejections read the same, and how a kernel refusal becomes a
//! status. A leaf of `web`: every route module uses it, it uses none.

use crate::access::Refusal;
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// A one-line error answer.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    pub(super) message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: crate::prompt::one_line(&message.into()),
        }
    }

    pub(crate) fn bad(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    pub(crate) fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }

    pub fn into_response_now(self) -> Response {
        self.into_response()
    }
}

impl From<anyhow::Error> for ApiError {
    fn from(e: anyhow::Error) -> Self {
        tracing::warn!(error = %format!("{e:#}"), "web request failed");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal error: {e:#}"),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "error": self.message }))).into_response()
    }
}

/// JSON bodies whose rejection (wrong content type, bad JSON) is a one-line
/// `{"error"}` like every other error.
pub(crate) struct Body<T>(pub(crate) T);

impl<S, T> axum::extract::FromRequest<S> for Body<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(Body(v)),
            Err(e) => Err(ApiError::new(e.status(), e.body_text())),
        }
    }
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;

/// A kernel refusal that means "not yours to see" becomes a 404 worded
/// like a missing thing; anything else is an error.
pub(crate) fn refused(e: anyhow::Error) -> ApiError {
    match e.downcast_ref::<Refusal>() {
        Some(Refusal::NoSuchChat(chat)) => no_chat(chat),
        Some(r) => ApiError::new(StatusCode::FORBIDDEN, r.to_string()),
        None => e.into(),
    }
}

/// A chat that is missing or not this person's to see: one answer.
pub(crate) fn no_chat(chat: &str) -> ApiError {
    ApiError::not_found(format!(
        "no chat named {:?} that you may see (it does not exist, or it is not shared with you)",
        crate::prompt::inline(chat)
    ))
}
