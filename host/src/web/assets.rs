//! The page: one HTML shell, one script, one stylesheet, embedded in the
//! binary with `include_str!` and served as separate files, so the
//! Content-Security-Policy can forbid every inline script and style.
//!
//! The shell holds no data: the script fetches the JSON API and builds the
//! page with DOM text nodes only (`textContent`), never with HTML strings.

use super::AppState;
use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

const SHELL: &str = include_str!("static/app.html");
const SCRIPT: &str = include_str!("static/app.js");
const STYLE: &str = include_str!("static/app.css");
/// Web Push: the page's "Notify me on this device" control, and the service
/// worker that shows a push. The worker is served from the origin's root so
/// that its scope is the whole inbox (`/`), with no
/// `Service-Worker-Allowed` needed.
const PUSH_SCRIPT: &str = include_str!("static/push.js");
const SERVICE_WORKER: &str = include_str!("static/sw.js");

fn with_type(body: &'static str, content_type: &'static str) -> Response {
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
        body,
    )
        .into_response()
}

async fn shell() -> Response {
    with_type(SHELL, "text/html; charset=utf-8")
}

async fn script() -> Response {
    with_type(SCRIPT, "text/javascript; charset=utf-8")
}

async fn push_script() -> Response {
    with_type(PUSH_SCRIPT, "text/javascript; charset=utf-8")
}

async fn service_worker() -> Response {
    with_type(SERVICE_WORKER, "text/javascript; charset=utf-8")
}

async fn style() -> Response {
    with_type(STYLE, "text/css; charset=utf-8")
}

async fn not_found(uri: axum::http::Uri) -> Response {
    if uri.path().starts_with("/api/") || uri.path() == "/api" {
        return super::reply::ApiError::new(
            StatusCode::NOT_FOUND,
            "no such API endpoint; docs/api/openapi.json lists them",
        )
        .into_response_now();
    }
    (
        StatusCode::NOT_FOUND,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        )],
        "not found",
    )
        .into_response()
}

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(shell))
        .route("/ledger", get(shell))
        .route("/rules", get(shell))
        .route("/workflows", get(shell))
        .route("/chats/{chat}", get(shell))
        .route("/assets/app.js", get(script))
        .route("/assets/app.css", get(style))
        .route("/assets/push.js", get(push_script))
        .route("/sw.js", get(service_worker))
        .fallback(not_found)
}
