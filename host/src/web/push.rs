//! Web Push in the inbox: the API a person's page subscribes its browser
//! with, lists and removes their devices, and the loop beside the server
//! that pushes.
//!
//! Owns three routes under `/api/push` and the push loop. May not decide
//! who is told of what, check a subscription, or word a push: the kernel
//! does ([`crate::Person::push_subscribe`], [`Kernel::push_pass`], `crate::push`).
//! Every route needs a session, and the two that change something its
//! CSRF token, like the rest of the API (`session.rs`); a person only ever
//! sees and removes their own devices.

use super::reply::{ApiError, ApiResult};
use super::session::Person;
use super::{AppState, Config, Routes};
use crate::kernel::Kernel;
use crate::push::{Push, Refused};
use crate::store::{PushDevice, PushKeys};
use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::{Method, StatusCode};
use axum::routing::{delete, get, post};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

/// Push as this server runs it: enabled with the operator's contact, and
/// where the operator lets notices go (checked at subscription too).
pub(crate) struct Enabled {
    push: Push,
    allowed: crate::notify::Destinations,
}

/// Push, if the operator enabled it (`serve --vapid-subject`): the VAPID
/// key is made on first use. A contact that is not one stops `serve` with
/// one line.
pub(super) async fn enable(
    kernel: &Kernel,
    config: &Config,
) -> anyhow::Result<Option<Arc<Enabled>>> {
    let Some(settings) = &config.push else {
        return Ok(None);
    };
    Ok(Some(Arc::new(Enabled {
        push: Push::enable(kernel, settings).await?,
        allowed: config.notify_destinations,
    })))
}

/// The push loop beside the server, if push is enabled: every tick, push
/// what is due ([`Kernel::push_pass`]), until the server stops.
pub(super) fn deliveries(state: &AppState, config: &Config) -> Option<tokio::task::JoinHandle<()>> {
    let enabled = state.push.clone()?;
    let (state, window, tick) = (state.clone(), config.notify_every, config.tick);
    Some(tokio::spawn(async move {
        let mut stopping = state.stopping.clone();
        loop {
            if let Err(e) = state
                .kernel
                .push_pass(&enabled.push, window, enabled.allowed)
                .await
            {
                tracing::warn!(error = %format!("{e:#}"), "a push pass failed");
            }
            tokio::select! {
                _ = tokio::time::sleep(tick.max(Duration::from_millis(100))) => {}
                _ = stopping.wait_for(|s| *s) => return,
            }
        }
    }))
}

/// The API's routes with push's added.
pub(super) fn routes(api: Routes) -> Routes {
    api.add(Method::GET, "/api/push", get(status))
        .add(Method::POST, "/api/push/subscriptions", post(subscribe))
        .add(
            Method::DELETE,
            "/api/push/subscriptions/{id}",
            delete(unsubscribe),
        )
}

#[derive(Serialize)]
struct Status {
    /// Whether the operator enabled push on this server.
    enabled: bool,
    /// The VAPID public key the page subscribes with (base64url).
    key: Option<String>,
    /// The most devices one person may have.
    limit: usize,
    /// This person's devices.
    devices: Vec<PushDevice>,
}

/// Whether push is on, the key to subscribe with, and this person's
/// devices.
async fn status(State(st): State<AppState>, p: Person) -> ApiResult<Json<Status>> {
    let devices = p.acting(&st.kernel).push_devices().await?;
    Ok(Json(Status {
        enabled: st.push.is_some(),
        key: st.push.as_ref().map(|e| e.push.public_key().to_owned()),
        limit: crate::push::MAX_DEVICES,
        devices,
    }))
}

/// A subscription as `PushSubscription.toJSON()` gives it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Subscription {
    endpoint: String,
    /// Given by browsers (null or a time); not used.
    #[serde(default, rename = "expirationTime")]
    _expiration_time: Option<serde_json::Value>,
    keys: Keys,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Keys {
    p256dh: String,
    auth: String,
}

/// Subscribe this browser for the signed-in person: 201 with the device;
/// 400 for a subscription push may not go to (the line says why), 409 when
/// push is off or the person has the most devices allowed.
async fn subscribe(
    State(st): State<AppState>,
    p: Person,
    body: Result<Json<Subscription>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<PushDevice>)> {
    let Json(sub) = body.map_err(|e| ApiError::new(e.status(), e.body_text()))?;
    let Some(enabled) = &st.push else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "push notifications are not enabled on this server; the operator enables them with `gatehouse serve --vapid-subject mailto:...`",
        ));
    };
    let keys = PushKeys {
        endpoint: sub.endpoint,
        p256dh: sub.keys.p256dh,
        auth: sub.keys.auth,
    };
    match p
        .acting(&st.kernel)
        .push_subscribe(keys, enabled.allowed)
        .await?
    {
        Ok(device) => Ok((StatusCode::CREATED, Json(device))),
        Err(r @ Refused::Invalid(_)) => Err(ApiError::bad(r.to_string())),
        Err(r @ Refused::TooMany(_)) => Err(ApiError::new(StatusCode::CONFLICT, r.to_string())),
    }
}

/// Remove one of the signed-in person's devices: 204, or 404 for a device
/// that is not theirs (worded as one that does not exist).
async fn unsubscribe(
    State(st): State<AppState>,
    p: Person,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    if p.acting(&st.kernel).push_unsubscribe(&id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!(
            "you have no device {:?}; GET /api/push lists yours",
            crate::prompt::as_given(&id)
        )))
    }
}
