//! The live view: `GET /api/events`, a server-sent events stream that tells
//! the page when something it shows changed, so it never polls.
//!
//! One watcher per server looks at the kernel's per-chat fingerprints every
//! tick (changes come from this server, from CLI processes and from other
//! servers on the same home, so it watches the state, not its own calls)
//! and broadcasts which chats changed. Each stream hears only of chats its
//! person may see: every change is put to the one authorization rule
//! ([`crate::Person::live_audience`]) before it is sent, and the stream itself
//! carries no data beyond the chat's name: the page fetches what changed
//! through the API, which applies the rule again. A stream re-checks its
//! session every few seconds and ends (`signed-out`) when it expired or was
//! ended; it ends too when the server stops, so stopping never waits for it.

use super::AppState;
use super::reply::ApiError;
use super::session::Person;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::time::Duration;

/// One chat whose inbox or requests changed.
#[derive(Clone, Debug)]
pub(crate) struct Change {
    pub chat: String,
    pub inbox: bool,
    pub requests: bool,
}

/// How often a stream re-checks its session.
const SESSION_CHECK: Duration = Duration::from_secs(2);

/// Watch the kernel's fingerprints and broadcast what changed, every
/// `tick` and whenever another host sharing the database decided or
/// finished an action, until the server stops.
pub(crate) async fn watch(
    state: AppState,
    tick: Duration,
    mut elsewhere: tokio::sync::watch::Receiver<u64>,
) {
    let mut stopping = state.stopping.clone();
    let mut last: Option<BTreeMap<String, (u64, u64)>> = None;
    loop {
        match state.kernel.live_fingerprints().await {
            Ok(now) => {
                if let Some(before) = &last {
                    let chats: std::collections::BTreeSet<&String> =
                        before.keys().chain(now.keys()).collect();
                    for chat in chats {
                        let (a, b) = (before.get(chat), now.get(chat));
                        if a == b {
                            continue;
                        }
                        let (a, b) = (a.copied().unwrap_or((0, 0)), b.copied().unwrap_or((0, 0)));
                        // Nobody listening is fine.
                        let _ = state.changes.send(Change {
                            chat: chat.clone(),
                            inbox: a.0 != b.0,
                            requests: a.1 != b.1,
                        });
                    }
                }
                last = Some(now);
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "the live view could not read the state")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(tick.max(Duration::from_millis(50))) => {}
            // Never changes on a home; on a shared database, the other
            // host's commit is already visible when this is heard.
            Ok(()) = elsewhere.changed() => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
    }
}

/// One stream's state.
struct Live {
    st: AppState,
    p: Person,
    rx: tokio::sync::broadcast::Receiver<Change>,
    stopping: tokio::sync::watch::Receiver<bool>,
    /// Held while the stream is open.
    _slot: tokio::sync::OwnedSemaphorePermit,
    next_check: tokio::time::Instant,
    started: bool,
    done: bool,
}

impl Live {
    /// The next event to send; `None` ends the stream.
    async fn next(&mut self) -> Option<Event> {
        if self.done {
            return None;
        }
        if !self.started {
            self.started = true;
            return Some(Event::default().event("ready").data("{}"));
        }
        loop {
            let next = tokio::select! {
                r = self.rx.recv() => Next::Change(r),
                _ = tokio::time::sleep_until(self.next_check) => Next::Check,
                _ = self.stopping.wait_for(|s| *s) => Next::Stop,
            };
            match next {
                Next::Stop => return None,
                Next::Check => {
                    self.next_check = tokio::time::Instant::now() + SESSION_CHECK;
                    let valid = matches!(
                        self.st.kernel.session(&self.p.secret).await,
                        Ok(crate::store::SessionLookup::Valid { .. })
                    );
                    if !valid {
                        self.done = true;
                        return Some(Event::default().event("signed-out").data("{}"));
                    }
                }
                Next::Change(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {
                    return Some(Event::default().event("resync").data("{}"));
                }
                Next::Change(Err(tokio::sync::broadcast::error::RecvError::Closed)) => {
                    return None;
                }
                Next::Change(Ok(c)) => {
                    let Ok((inbox, requests)) =
                        self.p.acting(&self.st.kernel).live_audience(&c.chat).await
                    else {
                        continue;
                    };
                    let inbox = inbox && c.inbox;
                    let requests = requests && c.requests;
                    if !inbox && !requests {
                        continue;
                    }
                    let data = serde_json::json!({
                        "chat": c.chat,
                        "inbox": inbox,
                        "requests": requests,
                    });
                    return Some(Event::default().event("change").data(data.to_string()));
                }
            }
        }
    }
}

/// What a stream waits for next.
enum Next {
    Change(Result<Change, tokio::sync::broadcast::error::RecvError>),
    Check,
    Stop,
}

/// `GET /api/events`: the stream. Events: `ready` once, then `change`
/// (`{"chat", "inbox", "requests"}`) for each change the person may hear
/// of, `resync` when changes were missed (the page reloads what it shows),
/// and `signed-out` before it ends because the session did.
pub(crate) async fn stream(State(st): State<AppState>, p: Person) -> Response {
    let Ok(slot) = st.streams.clone().try_acquire_owned() else {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many live views are open on this server; close some tabs, then reload",
        )
        .into_response();
    };
    let live = Live {
        rx: st.changes.subscribe(),
        stopping: st.stopping.clone(),
        st,
        p,
        _slot: slot,
        next_check: tokio::time::Instant::now() + SESSION_CHECK,
        started: false,
        done: false,
    };
    let events = futures_util::stream::unfold(live, |mut l| async move {
        let ev = l.next().await?;
        Some((Ok::<_, Infallible>(ev), l))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}
