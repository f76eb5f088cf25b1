//! Web Push: telling people on their own devices that actions
//! and approval requests wait for them, beside the webhook of
//! `crate::notify`.
//!
//! A person subscribes a browser from the inbox (the page's push.js and
//! service worker); the browser's push service gives it an endpoint URL
//! and a key pair, which `serve` keeps sealed (`store::push`). When
//! something starts waiting for a decision that person may make, `serve`
//! pushes each of their devices one short message, batched like the
//! webhook: a count and the names of the chats ("3 actions wait for you
//! in work, ops"), through the one sanitiser. Never any argument text, tool
//! description or anything a gadget wrote: less than the webhook's lines.
//!
//! The standards: the message is encrypted for the device (RFC 8291,
//! `aes128gcm`, by the `web-push-native` crate) so the push service reads
//! nothing of it; the POST (RFC 8030) is signed with the deployment's
//! VAPID key (RFC 8292), an ES256 token naming the push service's origin,
//! a lifetime of 12 hours and the operator's contact. The VAPID key is
//! derived from the deployment secret `vapid` (made on first use, kept
//! sealed like every deployment secret); its public half is what the page
//! subscribes with.
//!
//! Owns the VAPID key and token, the check of a subscription, a push's
//! wording, encryption and retry, and the push pass. May not decide who
//! is told of what: it asks `crate::notify::decidable_by` (the one rule);
//! and it sends only through `crate::notify`'s one POST, to an endpoint
//! checked by `crate::notify`'s one destination check, at subscription and
//! again at every send.

use crate::capability::Person;
use crate::kernel::Kernel;
use crate::notify::{self, Destinations};
use crate::store::workflows::WaitingRequest;
use crate::store::{Action, NewPushDevice, PushDevice, PushKeys, PushTarget, Subscribed, Told};
use anyhow::{Context as _, bail};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How a push endpoint is named in a refusal.
pub const ENDPOINT: &str = "the push endpoint";
/// The devices one person may have subscribed at once.
pub const MAX_DEVICES: usize = 10;
/// The deployment secret the VAPID key is derived from.
const VAPID_SECRET: &str = "vapid";
/// How long a VAPID token is valid (RFC 8292: at most 24 hours).
const TOKEN_LIFETIME: Duration = Duration::from_secs(12 * 60 * 60);
/// How long a push service keeps a message for a device that is offline
/// (`TTL`): a message older than that tells of what has likely been
/// decided.
const MESSAGE_TTL: Duration = Duration::from_secs(12 * 60 * 60);
/// Failed attempts in a row (429, 5xx, no answer) after which a batch is
/// given up: the inbox still shows what waits.
const MAX_ATTEMPTS: i64 = 6;
/// The longest wait between attempts, whatever `Retry-After` asks.
const MAX_BACKOFF: Duration = Duration::from_secs(60 * 60);
/// How many chats a message names; the rest are counted.
const CHATS_NAMED: usize = 5;
/// The longest operator contact taken.
const MAX_SUBJECT: usize = 256;

/// The operator's settings for push: `serve --vapid-subject`.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The contact push services may reach the operator at (the VAPID
    /// `sub`): `mailto:` or `https:`.
    pub subject: String,
    /// The authorities a push service's certificate may be signed by:
    /// Mozilla's unless set. `serve` never sets it; a test's stand-in
    /// push service on loopback does ([`Settings::trusting`]).
    pub roots: Option<Arc<rustls::RootCertStore>>,
}

impl Settings {
    /// Push with this operator contact, the push service certified by
    /// Mozilla's roots.
    pub fn new(subject: &str) -> Settings {
        Settings {
            subject: subject.to_owned(),
            roots: None,
        }
    }

    /// Trust these authorities (only) for the push service's certificate:
    /// for a stand-in push service in a test.
    pub fn trusting(mut self, roots: rustls::RootCertStore) -> Settings {
        self.roots = Some(Arc::new(roots));
        self
    }
}

/// Push, enabled: the VAPID key and the operator's contact.
pub struct Push {
    subject: String,
    key: p256::ecdsa::SigningKey,
    public: String,
    roots: Arc<rustls::RootCertStore>,
}

impl std::fmt::Debug for Push {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Push")
            .field("subject", &self.subject)
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

impl Push {
    /// Enable push on `kernel`'s deployment: the operator's contact is
    /// checked (push stays off without a good one: `serve` refuses to
    /// start), and the VAPID key is made on first use.
    pub async fn enable(kernel: &Kernel, settings: &Settings) -> anyhow::Result<Push> {
        let subject = check_subject(&settings.subject)?;
        let seed = kernel
            .store()
            .run(|s| s.deployment_secret(VAPID_SECRET))
            .await?;
        let key = vapid_key(&seed)?;
        let public = B64URL.encode(key.verifying_key().to_encoded_point(false).as_bytes());
        Ok(Push {
            subject,
            key,
            public,
            roots: settings.roots.clone().unwrap_or_else(notify::mozilla_roots),
        })
    }

    /// The VAPID public key, base64url (65 bytes, uncompressed): the
    /// page's `applicationServerKey`.
    pub fn public_key(&self) -> &str {
        &self.public
    }

    /// The operator's contact.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The `Authorization` header for a push to `endpoint`: `vapid t=<an
    /// ES256 token>, k=<the public key>` (RFC 8292), the token naming the
    /// push service's origin, expiring `TOKEN_LIFETIME` after `now_secs`.
    pub fn authorization(&self, endpoint: &str, now_secs: u64) -> anyhow::Result<String> {
        use p256::ecdsa::signature::Signer as _;
        let header = B64URL.encode(br#"{"typ":"JWT","alg":"ES256"}"#);
        let claims = serde_json::json!({
            "aud": origin(endpoint)?,
            "exp": now_secs + TOKEN_LIFETIME.as_secs(),
            "sub": self.subject,
        });
        let claims = B64URL.encode(claims.to_string());
        let signed = format!("{header}.{claims}");
        let signature: p256::ecdsa::Signature = self.key.sign(signed.as_bytes());
        let token = format!("{signed}.{}", B64URL.encode(signature.to_bytes()));
        Ok(format!("vapid t={token}, k={}", self.public))
    }
}

/// The operator's contact, checked: `mailto:someone@host` or an `https://`
/// URL (RFC 8292, 2.1), one line without spaces.
fn check_subject(subject: &str) -> anyhow::Result<String> {
    let s = subject.trim();
    let fine = s.len() <= MAX_SUBJECT
        && !s.chars().any(|c| c.is_whitespace() || c.is_control())
        && match (s.strip_prefix("mailto:"), s.strip_prefix("https://")) {
            (Some(address), _) => address
                .split_once('@')
                .is_some_and(|(who, host)| !who.is_empty() && host.contains('.')),
            (_, Some(rest)) => {
                !rest.is_empty()
                    && s.parse::<http::Uri>()
                        .is_ok_and(|u| u.authority().is_some_and(|a| !a.host().is_empty()))
            }
            _ => false,
        };
    if !fine {
        bail!(
            "--vapid-subject {:?} is not a contact; give mailto:you@example.com or an https:// URL (push services use it to reach the operator, and push stays off without one)",
            crate::prompt::as_given(subject)
        );
    }
    Ok(s.to_owned())
}

/// The VAPID signing key, derived from the deployment secret `seed` (hex):
/// the first of SHA-256("gatehouse vapid key", counter, seed) that is a
/// valid P-256 scalar (almost always the first).
fn vapid_key(seed: &str) -> anyhow::Result<p256::ecdsa::SigningKey> {
    use sha2::Digest as _;
    let seed = hex::decode(seed).context("the deployment's VAPID secret is not hex")?;
    for counter in 0u32..32 {
        let d = sha2::Sha256::new()
            .chain_update(b"gatehouse vapid key")
            .chain_update(counter.to_be_bytes())
            .chain_update(&seed)
            .finalize();
        if let Ok(key) = p256::ecdsa::SigningKey::from_slice(&d) {
            return Ok(key);
        }
    }
    bail!("no VAPID key could be derived from the deployment secret; report this")
}

/// The origin of a push endpoint (`https://host[:port]`, the port only
/// when not 443): the VAPID token's `aud` and what a device list shows.
pub fn origin(endpoint: &str) -> anyhow::Result<String> {
    let uri: http::Uri = endpoint
        .parse()
        .with_context(|| format!("{ENDPOINT} is not a URL"))?;
    if uri.scheme_str() != Some("https") {
        bail!("{ENDPOINT} must start with https://");
    }
    let authority = uri.authority().context("the push endpoint names no host")?;
    let host = authority.host().to_ascii_lowercase();
    Ok(match authority.port_u16() {
        Some(p) if p != 443 => format!("https://{host}:{p}"),
        _ => format!("https://{host}"),
    })
}

/// A subscription as the browser gave it, checked: an `https://` endpoint
/// that leads where the operator lets notices go (the one check, as a
/// notification URL's), a P-256 public key and a 16-byte secret. The
/// push service's origin is returned for the device list.
pub async fn check_subscription(keys: &PushKeys, allowed: Destinations) -> anyhow::Result<String> {
    if !keys.endpoint.starts_with("https://") {
        bail!("{ENDPOINT} must start with https:// (a browser's push service is always https)");
    }
    let service = origin(&keys.endpoint)?;
    notify::check_destination_named(ENDPOINT, &keys.endpoint, allowed).await?;
    device_key(&keys.p256dh)?;
    device_secret(&keys.auth)?;
    Ok(service)
}

/// base64url, with or without padding, at most `max` characters.
fn unbase64(text: &str, max: usize, what: &str) -> anyhow::Result<Vec<u8>> {
    let t = text.trim_end_matches('=');
    if t.len() > max {
        bail!("the subscription's {what} is too long; subscribe again from the inbox");
    }
    B64URL
        .decode(t)
        .with_context(|| format!("the subscription's {what} is not base64url"))
}

/// The device's public key (`p256dh`): an uncompressed P-256 point.
fn device_key(p256dh: &str) -> anyhow::Result<web_push_native::p256::PublicKey> {
    let bytes = unbase64(p256dh, 100, "key (p256dh)")?;
    if bytes.len() != 65 {
        bail!("the subscription's key (p256dh) is not a 65-byte P-256 point");
    }
    web_push_native::p256::PublicKey::from_sec1_bytes(&bytes)
        .map_err(|_| anyhow::anyhow!("the subscription's key (p256dh) is not a P-256 point"))
}

/// The device's authentication secret (`auth`): 16 bytes.
fn device_secret(auth: &str) -> anyhow::Result<web_push_native::Auth> {
    let bytes = unbase64(auth, 30, "secret (auth)")?;
    web_push_native::Auth::from_exact_iter(bytes)
        .context("the subscription's secret (auth) is not 16 bytes")
}

/// Why a subscription was refused.
#[derive(Debug)]
pub enum Refused {
    /// Not a subscription push may go to (the line says why).
    Invalid(String),
    /// The person already has this many devices.
    TooMany(usize),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Invalid(why) => f.write_str(why),
            Refused::TooMany(n) => write!(
                f,
                "you have {n} devices subscribed, the most one person may have; remove one first"
            ),
        }
    }
}

/// What a push's message says (the JSON the service worker reads).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Message {
    /// "Gatehouse".
    pub title: String,
    /// "3 actions wait for you in work, ops".
    pub body: String,
    /// Actions waiting for a decision the person may make.
    pub actions: usize,
    /// Approval requests waiting likewise.
    pub requests: usize,
    /// The chats they wait in, each through the sanitiser, at most
    /// [`CHATS_NAMED`].
    pub chats: Vec<String>,
}

/// The message for everything that waits for a person: how many actions
/// and approval requests, and the chats they wait in (each name through
/// [`crate::prompt::inline`]). It is given nothing else, so it can say
/// nothing of an action's or a request's content.
pub fn message<'a>(
    actions: usize,
    requests: usize,
    chats_waiting: impl IntoIterator<Item = &'a str>,
) -> Message {
    let mut chats: Vec<String> = Vec::new();
    for chat in chats_waiting {
        let name = crate::prompt::inline(chat);
        if !chats.contains(&name) {
            chats.push(name);
        }
    }
    let (n, m) = (actions, requests);
    let plural =
        |k: usize, one: &str, many: &str| format!("{k} {}", if k == 1 { one } else { many });
    let what = match (n, m) {
        (_, 0) => plural(n, "action waits", "actions wait"),
        (0, _) => plural(m, "approval request waits", "approval requests wait"),
        _ => format!(
            "{} and {} wait",
            plural(n, "action", "actions"),
            plural(m, "approval request", "approval requests")
        ),
    };
    let more = chats.len().saturating_sub(CHATS_NAMED);
    chats.truncate(CHATS_NAMED);
    let mut body = format!("{what} for you in {}", chats.join(", "));
    if more > 0 {
        body.push_str(&format!(" and {more} more"));
    }
    Message {
        title: "Gatehouse".into(),
        body,
        actions: n,
        requests: m,
        chats,
    }
}

/// What became of one push.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "outcome")]
pub enum Outcome {
    /// The push service took it (2xx).
    Delivered {
        /// The status.
        status: u16,
    },
    /// The push service said the subscription is gone (404, 410): the
    /// device was removed.
    Gone {
        /// The status.
        status: u16,
    },
    /// Not delivered (429, 5xx, no answer, or a destination the operator
    /// does not allow): tried again after a wait.
    Retry {
        /// The status, if there was an answer.
        status: Option<u16>,
        /// Not before this time (ms since the epoch).
        at: i64,
    },
    /// Not delivered, and not tried again: the push service refused the
    /// message (another 4xx), or [`MAX_ATTEMPTS`] failed in a row.
    Dropped {
        /// The status, if there was an answer.
        status: Option<u16>,
    },
}

/// One push attempted.
#[derive(Clone, Debug, Serialize)]
pub struct PushSent {
    /// The person told.
    pub user: String,
    /// Their device.
    pub device: String,
    /// The actions the push was for (newly told of on this device).
    pub actions: Vec<i64>,
    /// The approval requests likewise.
    pub requests: Vec<i64>,
    /// What became of it.
    pub outcome: Outcome,
}

/// How long to wait after the `failures`-th failure in a row: the batch
/// window doubled each time, at most [`MAX_BACKOFF`], and at least what the
/// push service asked (`Retry-After`, itself capped).
fn backoff(window: Duration, failures: i64, retry_after: Option<u64>) -> Duration {
    let base = window.max(Duration::from_secs(1));
    let doubled = base.saturating_mul(1u32 << failures.clamp(1, 16).saturating_sub(1));
    let asked = Duration::from_secs(retry_after.unwrap_or(0));
    doubled.max(asked).min(MAX_BACKOFF)
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Kernel {
    /// One pass: push every device whose batch is due (as the webhook's:
    /// one window after the oldest item it was not told of, never sooner
    /// than a window after its last push), each only where `allowed` lets
    /// notices go as its endpoint's host resolves now. `serve` calls it
    /// every tick. Who is told of what is [`notify::decidable_by`]'s.
    pub async fn push_pass(
        &self,
        push: &Push,
        window: Duration,
        allowed: Destinations,
    ) -> anyhow::Result<Vec<PushSent>> {
        let targets = self.store().run(|s| s.push_targets()).await?;
        let mut by_person: BTreeMap<String, Vec<PushTarget>> = BTreeMap::new();
        for t in targets {
            by_person.entry(t.device.user.clone()).or_default().push(t);
        }
        let mut sent = Vec::new();
        for (user, devices) in by_person {
            let (actions, requests) = self
                .store()
                .run(move |s| notify::decidable_by(s, &user))
                .await?;
            if actions.is_empty() && requests.is_empty() {
                continue;
            }
            for t in devices {
                if let Some(s) = self
                    .push_device(push, &t, &actions, &requests, window, allowed)
                    .await?
                {
                    sent.push(s);
                }
            }
        }
        Ok(sent)
    }

    /// One device's turn in a pass: nothing if its batch is not due.
    async fn push_device(
        &self,
        push: &Push,
        t: &PushTarget,
        actions: &[Action],
        requests: &[WaitingRequest],
        window: Duration,
        allowed: Destinations,
    ) -> anyhow::Result<Option<PushSent>> {
        let now = crate::store::now_ms();
        if t.retry_at.is_some_and(|at| now < at) {
            return Ok(None);
        }
        let id = t.device.id.clone();
        let (told_actions, told_requests) = {
            let id = id.clone();
            self.store()
                .run(move |s| {
                    Ok((
                        s.push_told(&id, Told::Actions)?,
                        s.push_told(&id, Told::Requests)?,
                    ))
                })
                .await?
        };
        let new_actions: Vec<&Action> = actions
            .iter()
            .filter(|a| !told_actions.contains(&a.id))
            .collect();
        let new_requests: Vec<&WaitingRequest> = requests
            .iter()
            .filter(|r| !told_requests.contains(&r.id))
            .collect();
        let Some(oldest) = new_actions
            .iter()
            .map(|a| a.created_at)
            .chain(new_requests.iter().map(|r| r.created_at))
            .min()
        else {
            return Ok(None);
        };
        let window_ms = ms(window);
        let due = oldest
            .saturating_add(window_ms)
            .max(t.device.last_sent_at.unwrap_or(0).saturating_add(window_ms));
        if now < due {
            return Ok(None);
        }
        let action_ids: Vec<i64> = new_actions.iter().map(|a| a.id).collect();
        let request_ids: Vec<i64> = new_requests.iter().map(|r| r.id).collect();
        let (claimed, claimed_requests) = {
            let id = id.clone();
            self.store()
                .run(move |s| {
                    Ok((
                        s.push_claim(&id, Told::Actions, &action_ids)?,
                        s.push_claim(&id, Told::Requests, &request_ids)?,
                    ))
                })
                .await?
        };
        if claimed.is_empty() && claimed_requests.is_empty() {
            return Ok(None);
        }
        // The message counts everything that waits for the person (what
        // this device was told of before included), so that the newest
        // notification, which replaces the last, is the whole picture.
        let chats = actions
            .iter()
            .map(|a| a.chat.as_str())
            .chain(requests.iter().map(|r| r.chat.as_str()));
        let text = serde_json::to_string(&message(actions.len(), requests.len(), chats))?;
        let answered = self
            .push_one(push, &t.keys, text.into_bytes(), allowed)
            .await;
        let store = self.store().clone();
        let outcome = match answered {
            Ok(a) if (200..300).contains(&a.status) => {
                let id = id.clone();
                store.run(move |s| s.push_delivered(&id)).await?;
                Outcome::Delivered { status: a.status }
            }
            Ok(a) if a.status == 404 || a.status == 410 => {
                let gone = id.clone();
                store.run(move |s| s.push_gone(&gone)).await?;
                tracing::info!(user = %t.device.user, device = %id, status = a.status, "a push service says a device's subscription is gone; the device was removed");
                Outcome::Gone { status: a.status }
            }
            other => {
                let (status, retry_after, why) = match &other {
                    Ok(a) => (
                        Some(a.status),
                        a.retry_after,
                        format!("it answered HTTP {}", a.status),
                    ),
                    Err(e) => (None, None, format!("{e:#}")),
                };
                let transient = status.is_none_or(|s| s == 429 || (500..600).contains(&s));
                let failures = t.failures.saturating_add(1);
                let at = now.saturating_add(ms(backoff(window, failures, retry_after)));
                if transient && failures < MAX_ATTEMPTS {
                    let (device, claimed, claimed_requests) =
                        (id.clone(), claimed.clone(), claimed_requests.clone());
                    store
                        .run(move |s| {
                            s.push_release(&device, Told::Actions, &claimed)?;
                            s.push_release(&device, Told::Requests, &claimed_requests)?;
                            s.push_failed(&device, failures, at)
                        })
                        .await?;
                    tracing::warn!(user = %t.device.user, device = %id, error = %why, "a push could not be delivered; it is tried again later");
                    Outcome::Retry { status, at }
                } else {
                    // Given up: the claims stay (what it was for is not
                    // pushed again), and the next batch starts afresh.
                    let id = id.clone();
                    store.run(move |s| s.push_failed(&id, 0, at)).await?;
                    tracing::warn!(user = %t.device.user, device = %t.device.id, error = %why, "a push was not delivered and is not tried again; the inbox still shows what waits");
                    Outcome::Dropped { status }
                }
            }
        };
        Ok(Some(PushSent {
            user: t.device.user.clone(),
            device: id,
            actions: claimed,
            requests: claimed_requests,
            outcome,
        }))
    }

    /// Encrypt `plain` for the device and POST it to its endpoint, signed
    /// with the VAPID key.
    async fn push_one(
        &self,
        push: &Push,
        keys: &PushKeys,
        plain: Vec<u8>,
        allowed: Destinations,
    ) -> anyhow::Result<notify::Answered> {
        let body = web_push_native::encrypt(
            plain,
            &device_key(&keys.p256dh)?,
            &device_secret(&keys.auth)?,
        )
        .map_err(|e| anyhow::anyhow!("the push message could not be encrypted: {e}"))?;
        let now_secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut headers = http::HeaderMap::new();
        let value = |v: String| {
            http::HeaderValue::try_from(v).context("a push header is not a header value")
        };
        headers.insert(
            http::header::AUTHORIZATION,
            value(push.authorization(&keys.endpoint, now_secs)?)?,
        );
        headers.insert("ttl", value(MESSAGE_TTL.as_secs().to_string())?);
        headers.insert(
            http::header::CONTENT_ENCODING,
            http::HeaderValue::from_static("aes128gcm"),
        );
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/octet-stream"),
        );
        headers.insert("urgency", http::HeaderValue::from_static("normal"));
        // One message waiting at the push service per device: a newer one
        // replaces it (it counts everything anyway).
        headers.insert("topic", http::HeaderValue::from_static("gatehouse"));
        notify::Post {
            what: ENDPOINT,
            url: &keys.endpoint,
            headers,
            body,
            allowed,
            roots: &push.roots,
        }
        .send()
        .await
    }
}

impl Person<'_> {
    /// Subscribe a device of `user` (the signed-in person: a person
    /// subscribes only their own devices). The subscription is checked
    /// ([`check_subscription`]) and kept sealed.
    pub async fn push_subscribe(
        &self,
        keys: PushKeys,
        allowed: Destinations,
    ) -> anyhow::Result<Result<PushDevice, Refused>> {
        let user = self.name;
        let service = match check_subscription(&keys, allowed).await {
            Ok(s) => s,
            Err(e) => return Ok(Err(Refused::Invalid(format!("{e:#}")))),
        };
        let id = crate::entropy::random_hex(16)?;
        let digest = crate::store::secret_digest(&keys.endpoint);
        let user = user.to_owned();
        let done = self
            .kernel
            .store()
            .run(move |s| {
                s.push_subscribe(
                    &NewPushDevice {
                        user: &user,
                        id: &id,
                        service: &service,
                        endpoint_digest: &digest,
                        keys: &keys,
                    },
                    MAX_DEVICES,
                )
            })
            .await?;
        Ok(match done {
            Subscribed::Added(d) => Ok(d),
            Subscribed::TooMany(n) => Err(Refused::TooMany(n)),
            Subscribed::NoSuchPerson => Err(Refused::Invalid("no such person".into())),
        })
    }

    /// `user`'s devices.
    pub async fn push_devices(&self) -> anyhow::Result<Vec<PushDevice>> {
        let user = self.name;
        let user = user.to_owned();
        self.kernel
            .store()
            .run(move |s| s.push_devices(&user))
            .await
    }

    /// Remove `user`'s device `id`; false if they have none of that id.
    pub async fn push_unsubscribe(&self, id: &str) -> anyhow::Result<bool> {
        let user = self.name;
        let (user, id) = (user.to_owned(), id.to_owned());
        self.kernel
            .store()
            .run(move |s| s.push_unsubscribe(&user, &id))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push() -> Push {
        let key = vapid_key(&"ab".repeat(32)).expect("a key");
        let public = B64URL.encode(key.verifying_key().to_encoded_point(false).as_bytes());
        Push {
            subject: "mailto:ops@example.com".into(),
            key,
            public,
            roots: notify::mozilla_roots(),
        }
    }

    /// The VAPID token: ES256 over its two first parts, verifiable with
    /// the public key it names, `aud` the endpoint's origin (a port only
    /// when not 443), `exp` within 24 hours, `sub` the operator's contact.
    #[test]
    fn the_vapid_token_names_the_origin_and_verifies_with_the_served_key() {
        use p256::ecdsa::signature::Verifier as _;
        let p = push();
        for (endpoint, aud) in [
            (
                "https://push.example.com/wpush/v2/abc",
                "https://push.example.com",
            ),
            ("https://Push.Example.com:443/x", "https://push.example.com"),
            ("https://127.0.0.1:8443/send/1", "https://127.0.0.1:8443"),
        ] {
            let header = p.authorization(endpoint, 1_000_000).expect("signed");
            let rest = header.strip_prefix("vapid t=").expect("the scheme");
            let (token, k) = rest.split_once(", k=").expect("two parts");
            assert_eq!(k, p.public_key());
            let parts: Vec<&str> = token.split('.').collect();
            assert_eq!(parts.len(), 3, "{token}");
            let claims: serde_json::Value =
                serde_json::from_slice(&B64URL.decode(parts[1]).expect("b64")).expect("json");
            assert_eq!(claims["aud"], aud, "{endpoint}");
            assert_eq!(claims["sub"], "mailto:ops@example.com");
            let exp = claims["exp"].as_u64().expect("exp");
            assert!(exp > 1_000_000 && exp <= 1_000_000 + 24 * 3600, "{exp}");
            let head: serde_json::Value =
                serde_json::from_slice(&B64URL.decode(parts[0]).expect("b64")).expect("json");
            assert_eq!(head["alg"], "ES256");
            let key = p256::ecdsa::VerifyingKey::from_sec1_bytes(
                &B64URL.decode(p.public_key()).expect("b64"),
            )
            .expect("a point");
            let sig = p256::ecdsa::Signature::from_slice(&B64URL.decode(parts[2]).expect("b64"))
                .expect("64 bytes");
            key.verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &sig)
                .expect("the signature verifies");
        }
        // One seed, one key: a restart serves the same public key.
        assert_eq!(push().public_key(), p.public_key());
        assert_eq!(B64URL.decode(p.public_key()).expect("b64").len(), 65);
    }

    /// The operator's contact is a mailto: address or an https URL, in
    /// one line; anything else keeps push off with one line saying what
    /// to give.
    #[test]
    fn the_operators_contact_is_checked() {
        for good in ["mailto:ops@example.com", "https://example.com/contact"] {
            assert_eq!(check_subject(good).expect(good), good);
        }
        for bad in [
            "",
            "ops@example.com",
            "mailto:",
            "mailto:nobody",
            "http://example.com",
            "https://",
            "mailto:a b@example.com",
            "mailto:ops@example.com\nX-Injected: 1",
        ] {
            let e = check_subject(bad).expect_err(bad).to_string();
            assert!(
                !e.contains('\n') && e.contains("--vapid-subject"),
                "{bad:?}: {e}"
            );
        }
        let long = format!("mailto:{}@example.com", "a".repeat(300));
        assert!(check_subject(&long).is_err());
    }

    /// A subscription must be an https endpoint with a P-256 key and a
    /// 16-byte secret; private destinations need the operator's allowance
    /// (the webhook's one check), and the refusal names it in one line.
    #[tokio::test]
    async fn a_subscription_is_checked_like_a_notification_url() {
        let p256dh = push().public_key().to_owned();
        let auth = B64URL.encode([7u8; 16]);
        let sub = |endpoint: &str, p256dh: &str, auth: &str| PushKeys {
            endpoint: endpoint.into(),
            p256dh: p256dh.into(),
            auth: auth.into(),
        };
        let e = check_subscription(
            &sub("https://10.0.0.8/push", &p256dh, &auth),
            Destinations::PublicOnly,
        )
        .await
        .expect_err("private")
        .to_string();
        assert!(
            e.contains(notify::ALLOW_PRIVATE_VAR) && e.contains(ENDPOINT),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
        let service = check_subscription(
            &sub("https://10.0.0.8:8443/push/1", &p256dh, &auth),
            Destinations::AlsoPrivate,
        )
        .await
        .expect("allowed");
        assert_eq!(service, "https://10.0.0.8:8443");
        for (bad, why) in [
            (sub("http://127.0.0.1:9/push", &p256dh, &auth), "https://"),
            (sub("ftp://example.com/push", &p256dh, &auth), "https://"),
            (
                sub(
                    &format!("https://10.0.0.8/{}", "a".repeat(2100)),
                    &p256dh,
                    &auth,
                ),
                "2048",
            ),
            (sub("https://10.0.0.8/p", "AAAA", &auth), "p256dh"),
            (
                sub("https://10.0.0.8/p", &"A".repeat(200), &auth),
                "too long",
            ),
            (sub("https://10.0.0.8/p", &p256dh, "AAAA"), "16 bytes"),
            (
                sub("https://10.0.0.8/p", &p256dh, "not base64!"),
                "base64url",
            ),
            (sub("https://u:p@10.0.0.8/p", &p256dh, &auth), "user name"),
        ] {
            let e = check_subscription(&bad, Destinations::AlsoPrivate)
                .await
                .expect_err(why)
                .to_string();
            assert!(e.contains(why) && !e.contains('\n'), "{why}: {e}");
        }
    }

    /// A message is a count and chat names through the sanitiser, nothing
    /// of the actions' content; long lists of chats are counted.
    #[test]
    fn a_message_is_a_count_and_sanitised_chat_names() {
        let m = message(3, 0, ["work", "ops", "work"]);
        assert_eq!(m.body, "3 actions wait for you in work, ops");
        assert_eq!((m.actions, m.requests), (3, 0));
        assert_eq!(m.chats, vec!["work", "ops"]);
        assert_eq!(
            message(1, 2, ["w"]).body,
            "1 action and 2 approval requests wait for you in w"
        );
        assert_eq!(
            message(0, 1, ["w"]).body,
            "1 approval request waits for you in w"
        );
        let evil = "evil\n**chat**`\u{202e}<b>";
        let m = message(1, 0, [evil]);
        assert_eq!(m.chats, vec![crate::prompt::inline(evil)]);
        for c in ['\n', '*', '`', '\u{202e}', '<'] {
            assert!(!m.body.contains(c), "{c:?} in {}", m.body);
        }
        let many: Vec<String> = (0..8).map(|i| format!("c{i}")).collect();
        let m = message(8, 0, many.iter().map(String::as_str));
        assert_eq!(
            m.body,
            "8 actions wait for you in c0, c1, c2, c3, c4 and 3 more"
        );
        assert_eq!(m.chats.len(), CHATS_NAMED);
        // The biggest message fits a push (4096 bytes less the
        // encryption's 103).
        let long: Vec<String> = (0..50).map(|i| format!("{i}{}", "x".repeat(500))).collect();
        let m = message(50, 50, long.iter().map(String::as_str));
        let size = serde_json::to_string(&m).expect("json").len();
        assert!(size < 4096 - 103, "{size}");
    }

    /// Retries wait longer each time, at least what the service asked,
    /// never more than an hour.
    #[test]
    fn retries_back_off_within_bounds() {
        let w = Duration::from_secs(60);
        assert_eq!(backoff(w, 1, None), w);
        assert_eq!(backoff(w, 3, None), w * 4);
        assert_eq!(backoff(w, 2, Some(600)), Duration::from_secs(600));
        assert_eq!(backoff(w, 40, None), MAX_BACKOFF);
        assert_eq!(backoff(w, 1, Some(u64::MAX)), MAX_BACKOFF);
        assert_eq!(backoff(Duration::ZERO, 1, None), Duration::from_secs(1));
    }
}
