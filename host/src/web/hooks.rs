//! Hooks on `serve`'s port: webhook deliveries (`POST /hooks/{token}`) and
//! the schedules' clock.
//!
//! Owns the HTTP side only: the body cap, how many hook turns run at once
//! (a delivery beyond them is answered 503 and runs nothing), answering
//! each refusal with its status, and running each accepted delivery's one
//! turn as the server's own work (a stopping server waits for it). The
//! kernel verifies the delivery and runs the turn (`crate::hooks`).

use super::AppState;
use super::reply::ApiError;
use crate::hooks::{DeliveryRefusal, MAX_DELIVERY_BYTES, SIGNATURE_HEADER};
use axum::Router;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use std::time::Duration;

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/hooks/{token}", post(deliver))
        .layer(DefaultBodyLimit::max(MAX_DELIVERY_BYTES))
}

/// One delivery: verified by the kernel, then its one turn started beside
/// the answer (`202 Accepted` with the hook and firing ids). 401 for a
/// missing or wrong signature, 404 for an unknown URL, 409 for a disabled
/// hook or a replayed delivery, 413 over the cap, 503 when too many hook
/// turns run already. Nothing runs on any refusal.
async fn deliver(
    State(st): State<AppState>,
    Path(token): Path<String>,
    headers: HeaderMap,
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(e) => return ApiError::new(e.status(), e.body_text()).into_response(),
    };
    let Ok(slot) = st.hook_turns.clone().try_acquire_owned() else {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many hook turns are running; deliver again later (nothing ran)",
        )
        .into_response();
    };
    let signature = headers
        .get(SIGNATURE_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let received = st
        .kernel
        .receive_delivery(&token, body.to_vec(), signature)
        .await;
    let firing = match received {
        Ok(Ok(f)) => f,
        Ok(Err(r)) => {
            let status = match r {
                DeliveryRefusal::NoSuchHook => StatusCode::NOT_FOUND,
                DeliveryRefusal::BadSignature => StatusCode::UNAUTHORIZED,
                DeliveryRefusal::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
                DeliveryRefusal::Disabled(_)
                | DeliveryRefusal::Replayed
                | DeliveryRefusal::Refused { .. } => StatusCode::CONFLICT,
            };
            return ApiError::new(status, r.to_string()).into_response();
        }
        Err(e) => return ApiError::from(e).into_response(),
    };
    let answer = serde_json::json!({ "hook": firing.hook.id, "firing": firing.firing });
    // The turn is the server's own work: the service is answered now, and
    // a stopping server waits for the turn (it holds a decision guard).
    let (kernel, in_flight) = (st.kernel.clone(), st.decisions.clone().read_owned().await);
    tokio::spawn(async move {
        if let Err(e) = kernel.run_firing(firing).await {
            tracing::warn!(error = %format!("{e:#}"), "a hook's turn could not be recorded");
        }
        drop(slot);
        drop(in_flight);
    });
    (StatusCode::ACCEPTED, axum::Json(answer)).into_response()
}

/// Fire the schedules that are due, every tick, until the server stops;
/// each turn takes one of the hook-turn slots, waiting for one.
pub(crate) async fn schedules(state: AppState, tick: Duration) {
    let mut stopping = state.stopping.clone();
    loop {
        let slot = tokio::select! {
            s = state.hook_turns.clone().acquire_owned() => s,
            _ = stopping.wait_for(|s| *s) => return,
        };
        if *stopping.borrow() {
            return;
        }
        if let Ok(slot) = slot {
            let in_flight = state.decisions.clone().read_owned().await;
            if let Err(e) = state.kernel.fire_due_schedules().await {
                tracing::warn!(error = %format!("{e:#}"), "firing the due schedules failed");
            }
            drop(in_flight);
            drop(slot);
        }
        tokio::select! {
            _ = tokio::time::sleep(tick.max(Duration::from_millis(100))) => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
    }
}
