//! Notifications: telling people that actions and workflow approval
//! requests wait for them.
//!
//! When an action starts waiting for a person, `serve` tells each person
//! who may decide it (the one authorization rule, `crate::access`) and who
//! set a notification URL: one Slack-compatible webhook message
//! (`{"text": ...}`) per person per batch window, listing each waiting
//! action by the prompt's one-line summary ([`crate::prompt::summary`]),
//! never by its arguments. A workflow approval request is told of the
//! same way, in the same batches, to each person who may decide it (the
//! run's approvers among them), by its one line
//! ([`crate::prompt::request_summary`]): never its allowed-calls list nor
//! its reason, which the gadget wrote and which may carry what the run
//! read. The URL is the only place a notice goes.
//!
//! Batching: a person's notice is due one window after the oldest action
//! they were not yet told of was staged, and never sooner than one window
//! after their last notice; so many actions in a minute make one notice.
//! Which actions a person was told of is recorded (claimed before the
//! send, released if it fails), so two `serve` processes never tell the
//! same thing twice, a failed send is retried at the next pass, and an
//! action that waits again later is told of again. A notice whose process
//! died between claim and send is lost: notices are at most once.
//!
//! Where a notice may go: `https://`, or `http://` to loopback; and, unless
//! the operator allows private destinations
//! (`GATEHOUSE_NOTIFY_ALLOW_PRIVATE=1`, [`Destinations`]), only to a public
//! address. A person sets their own URL, so without that check anyone with
//! an account could make `serve` POST into the operator's network (a cloud
//! metadata endpoint, an admin page on 10.0.0.1, a service on loopback).
//! The address is checked when the URL is set, and again at every send on
//! the addresses the name resolves to then (DNS may have changed since),
//! and the POST goes to one of exactly those addresses, never to a second
//! lookup's answer.
//!
//! Web Push (`crate::push`) tells a person's devices by the same
//! decision ([`decidable_by`]), the same destination check
//! ([`check_destination_named`]) and the same POST ([`Post`]).
//!
//! Owns the batching, the wording, where a notice may go and the one HTTP
//! POST. May not decide who may decide (it asks `access`), and never sends
//! anything else.

use crate::capability::Person;
use crate::kernel::Kernel;
use crate::store::Told;
use crate::store::workflows::WaitingRequest;
use anyhow::{Context as _, bail};
use serde::Serialize;
use std::time::Duration;

/// The default batch window: many actions in a minute make one notice.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(60);
/// How many actions one notice lists; the rest are counted.
const MAX_LINES: usize = 20;
/// How long one POST may take, connection included.
const POST_TIMEOUT: Duration = Duration::from_secs(10);

/// One notice sent.
#[derive(Clone, Debug, Serialize)]
pub struct NoticeSent {
    /// The person told, at the notification URL they set.
    pub user: String,
    /// The actions the notice named: each now counted as told, so the next
    /// batch does not repeat it.
    pub actions: Vec<i64>,
    /// The workflow approval requests it named, counted as told likewise.
    pub requests: Vec<i64>,
    /// The HTTP status the URL answered.
    pub status: u16,
}

/// Where the operator lets notices go: public addresses only (the
/// default), or private ones too. Read from `GATEHOUSE_NOTIFY_ALLOW_PRIVATE`
/// ([`Destinations::from_env`]) where a URL is set and by `serve`, which
/// sends: an operator's setting, like the sandbox limits, not a person's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Destinations {
    /// Public addresses only: a URL whose host is, or resolves to, a
    /// private, loopback, link-local, unique-local, shared (CGNAT),
    /// unspecified or otherwise non-public address is refused.
    #[default]
    PublicOnly,
    /// Private addresses too (a relay inside the operator's network, a
    /// receiver on this machine). Plain http is still only for loopback.
    AlsoPrivate,
}

/// The environment variable that lets notices go to private addresses.
pub const ALLOW_PRIVATE_VAR: &str = "GATEHOUSE_NOTIFY_ALLOW_PRIVATE";

impl Destinations {
    /// The operator's choice: `GATEHOUSE_NOTIFY_ALLOW_PRIVATE=1` allows
    /// private destinations; unset, empty or `0` does not; any other value
    /// is refused (a typo must not quietly leave either choice in force).
    pub fn from_env() -> anyhow::Result<Destinations> {
        match std::env::var(ALLOW_PRIVATE_VAR) {
            Err(std::env::VarError::NotPresent) => Ok(Destinations::PublicOnly),
            Ok(v) if v.trim().is_empty() || v.trim() == "0" => Ok(Destinations::PublicOnly),
            Ok(v) if v.trim() == "1" => Ok(Destinations::AlsoPrivate),
            Ok(v) => bail!(
                "{ALLOW_PRIVATE_VAR}={:?} is not 1 or 0; set it to 1 to let notices go to private addresses, or unset it",
                crate::prompt::as_given(&v)
            ),
            Err(std::env::VarError::NotUnicode(_)) => {
                bail!("{ALLOW_PRIVATE_VAR} is not text; set it to 1 or 0")
            }
        }
    }
}

/// Why `ip` is not a public address, or `None` when it is one. IPv6
/// addresses that carry an IPv4 address (mapped `::ffff:a.b.c.d`,
/// compatible `::a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) are
/// judged by that IPv4 address too, so that no spelling reaches a private
/// one.
pub fn not_public(ip: std::net::IpAddr) -> Option<&'static str> {
    use std::net::IpAddr;
    match ip {
        IpAddr::V4(v4) => not_public_v4(v4),
        IpAddr::V6(v6) => not_public_v6(v6),
    }
}

fn not_public_v4(ip: std::net::Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        _ if ip.is_unspecified() => "an unspecified address",
        (0, _, _) => "an address of \"this network\" (0.0.0.0/8)",
        (127, _, _) => "a loopback address",
        (10, _, _) | (192, 168, _) => "a private address",
        (172, 16..=31, _) => "a private address",
        (169, 254, _) => "a link-local address",
        (100, 64..=127, _) => "a shared (CGNAT) address",
        (192, 0, 0) => "an IETF protocol address (192.0.0.0/24)",
        (198, 18..=19, _) => "a benchmarking address (198.18.0.0/15)",
        _ if ip.is_broadcast() => "the broadcast address",
        _ if ip.is_multicast() => "a multicast address",
        _ if ip.is_documentation() => "a documentation address",
        (240..=255, _, _) => "a reserved address (240.0.0.0/4)",
        _ => return None,
    })
}

fn not_public_v6(ip: std::net::Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    let embedded = |hi: usize| {
        let o = ip.octets();
        std::net::Ipv4Addr::new(o[hi], o[hi + 1], o[hi + 2], o[hi + 3])
    };
    if ip.is_unspecified() {
        return Some("an unspecified address");
    }
    if ip.is_loopback() {
        return Some("a loopback address");
    }
    if let Some(v4) = ip.to_ipv4_mapped() {
        return not_public_v4(v4).map(|_| "an IPv4-mapped address that is not public");
    }
    match s[0] {
        // ::a.b.c.d (IPv4-compatible, deprecated) and the rest of ::/96.
        0 if s[1..6].iter().all(|x| *x == 0) => Some("an IPv4-compatible address (::/96)"),
        0x0064 if s[1] == 0xff9b && s[2..6].iter().all(|x| *x == 0) => not_public_v4(embedded(12))
            .map(|_| "a NAT64 address of an IPv4 address that is not public"),
        0x2002 => not_public_v4(std::net::Ipv4Addr::from(
            (u32::from(s[1]) << 16) | u32::from(s[2]),
        ))
        .map(|_| "a 6to4 address of an IPv4 address that is not public"),
        x if x & 0xfe00 == 0xfc00 => Some("a unique-local address (fc00::/7)"),
        x if x & 0xffc0 == 0xfe80 => Some("a link-local address (fe80::/10)"),
        x if x & 0xffc0 == 0xfec0 => Some("a site-local address (fec0::/10)"),
        x if x & 0xff00 == 0xff00 => Some("a multicast address"),
        0x2001 if s[1] == 0x0db8 => Some("a documentation address (2001:db8::/32)"),
        // 100::/64, the discard prefix.
        0x0100 if s[1..4].iter().all(|x| *x == 0) => Some("a discard address (100::/64)"),
        _ => None,
    }
}

/// A notification URL, checked as written: `https://`, or `http://` to
/// loopback only (a notice names chats and tools, which must not cross a
/// network in the clear), no user name or password in it, and a host that
/// is not written as a non-public address unless `allowed` says so. Where a
/// name resolves to is [`check_destination`]'s.
pub fn check_url(url: &str, allowed: Destinations) -> anyhow::Result<()> {
    check_url_named(NOTIFY_URL, url, allowed)
}

/// How a notification URL is named in a refusal.
const NOTIFY_URL: &str = "--notify-url";

/// [`check_url`] for any destination a notice goes to (a webhook, a push
/// service's endpoint), named `what` in a refusal: the one check.
pub fn check_url_named(what: &str, url: &str, allowed: Destinations) -> anyhow::Result<()> {
    let target = Target::parse(what, url)?;
    if let Some(ip) = target.literal()
        && let Some(why) = not_public(ip)
    {
        refuse_private(what, url, &target.host, ip, why, allowed)?;
    }
    Ok(())
}

/// [`check_url`], then the addresses the URL's host resolves to now, each
/// checked: a name with any address that is not public is refused unless
/// `allowed` says so, and for plain http every address must be loopback.
/// Returns those addresses: the caller connects to one of them and never
/// looks the name up again (a second answer could differ).
pub async fn check_destination(
    url: &str,
    allowed: Destinations,
) -> anyhow::Result<Vec<std::net::SocketAddr>> {
    check_destination_named(NOTIFY_URL, url, allowed).await
}

/// [`check_destination`] for any destination a notice goes to, named
/// `what` in a refusal (a push service's endpoint: `crate::push`).
pub async fn check_destination_named(
    what: &str,
    url: &str,
    allowed: Destinations,
) -> anyhow::Result<Vec<std::net::SocketAddr>> {
    check_url_named(what, url, allowed)?;
    let target = Target::parse(what, url)?;
    let addrs: Vec<std::net::SocketAddr> = match target.literal() {
        Some(ip) => vec![std::net::SocketAddr::new(ip, target.port)],
        None => tokio::net::lookup_host((target.host.as_str(), target.port))
            .await
            .with_context(|| {
                format!(
                    "the host {:?} of {what} cannot be resolved; check the name",
                    crate::prompt::as_given(&target.host)
                )
            })?
            .collect(),
    };
    if addrs.is_empty() {
        bail!(
            "the host {:?} of {what} resolves to no address; check the name",
            crate::prompt::as_given(&target.host)
        );
    }
    for a in &addrs {
        if let Some(why) = not_public(a.ip()) {
            refuse_private(what, url, &target.host, a.ip(), why, allowed)?;
        }
        if !target.https && !a.ip().is_loopback() {
            bail!(
                "{what} {:?} is plain http, and its host {:?} resolves to {}, which is not this machine; use https (plain http is allowed only to loopback)",
                crate::prompt::as_given(url),
                crate::prompt::as_given(&target.host),
                a.ip()
            );
        }
    }
    Ok(addrs)
}

fn private_refusal(what: &str, url: &str, host: &str, why: &str) -> String {
    format!(
        "{what} {:?}: {:?} is {why}; notices go only to public addresses unless the operator allows private ones ({ALLOW_PRIVATE_VAR}=1 where URLs are set and where `serve` runs)",
        crate::prompt::as_given(url),
        crate::prompt::as_given(host)
    )
}

fn refuse_private(
    what: &str,
    url: &str,
    host: &str,
    ip: std::net::IpAddr,
    why: &str,
    allowed: Destinations,
) -> anyhow::Result<()> {
    if allowed == Destinations::AlsoPrivate {
        return Ok(());
    }
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let shown = if host == ip.to_string() {
        host.to_owned()
    } else {
        format!("{host} ({ip})")
    };
    bail!(private_refusal(what, url, &shown, why))
}

/// A notification URL taken apart: checked for its form and scheme.
struct Target {
    /// The host, without an IPv6 literal's brackets.
    host: String,
    port: u16,
    https: bool,
}

impl Target {
    fn parse(what: &str, url: &str) -> anyhow::Result<Target> {
        if url.len() > 2048 || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
            bail!("{what} must be one URL of at most 2048 characters, without spaces");
        }
        let uri: http::Uri = url
            .parse()
            .with_context(|| format!("{what} {:?} is not a URL", crate::prompt::as_given(url)))?;
        let Some(authority) = uri.authority() else {
            bail!(
                "{what} {:?} names no host; give a full URL like https://hooks.example.com/...",
                crate::prompt::as_given(url)
            );
        };
        if authority.as_str().contains('@') {
            bail!("{what} must not carry a user name or password");
        }
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") if is_loopback(&host) => false,
            Some("http") => bail!(
                "{what} {:?} is plain http to a host that is not this machine; use https (plain http is allowed only to loopback)",
                crate::prompt::as_given(url)
            ),
            _ => bail!("{what} must start with https:// (or http:// to loopback)"),
        };
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        Ok(Target { host, port, https })
    }

    /// The host when it is written as an address.
    fn literal(&self) -> Option<std::net::IpAddr> {
        self.host.parse().ok()
    }
}

fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

impl Kernel {
    /// One pass: send every notice that is due now (see the module's
    /// header), each only where `allowed` lets notices go as its URL's host
    /// resolves now. `serve` calls it every second or so.
    pub async fn notify_pass(
        &self,
        window: Duration,
        allowed: Destinations,
    ) -> anyhow::Result<Vec<NoticeSent>> {
        let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
        let targets = self.store().run(|s| s.notify_targets()).await?;
        let mut sent = Vec::new();
        for t in targets {
            let user = t.user.clone();
            // What waits for this person, that they were not told of:
            // pending actions in chats where the one rule lets them
            // decide, and workflow approval requests of runs whose
            // requests it lets them decide (a run's approvers among them).
            let (actions, requests) = self.store().run(move |s| waiting_for(s, &user)).await?;
            let oldest = actions
                .iter()
                .map(|a| a.created_at)
                .chain(requests.iter().map(|r| r.created_at))
                .min();
            let Some(oldest) = oldest else {
                continue;
            };
            let now = crate::store::now_ms();
            let due = oldest
                .saturating_add(window_ms)
                .max(t.last_sent_at.unwrap_or(0).saturating_add(window_ms));
            if now < due {
                continue;
            }
            let user = t.user.clone();
            let action_ids: Vec<i64> = actions.iter().map(|a| a.id).collect();
            let request_ids: Vec<i64> = requests.iter().map(|r| r.id).collect();
            let (claimed, claimed_requests) = self
                .store()
                .run(move |s| {
                    let (a, _) = s.claim_notices(&user, Told::Actions, &action_ids)?;
                    let (r, _) = s.claim_notices(&user, Told::Requests, &request_ids)?;
                    Ok((a, r))
                })
                .await?;
            if claimed.is_empty() && claimed_requests.is_empty() {
                continue;
            }
            let told: Vec<&crate::store::Action> =
                actions.iter().filter(|a| claimed.contains(&a.id)).collect();
            let told_requests: Vec<&WaitingRequest> = requests
                .iter()
                .filter(|r| claimed_requests.contains(&r.id))
                .collect();
            let text = notice_text(&told, &told_requests);
            let body = serde_json::json!({ "text": text }).to_string();
            let posted = post_json(&t.url, body.into_bytes(), allowed).await;
            let user = t.user.clone();
            match posted {
                Ok(status) if (200..300).contains(&status) => {
                    self.store().run(move |s| s.notice_sent(&user)).await?;
                    sent.push(NoticeSent {
                        user: t.user,
                        actions: claimed,
                        requests: claimed_requests,
                        status,
                    });
                }
                other => {
                    let why = match other {
                        Ok(status) => format!("it answered HTTP {status}"),
                        Err(e) => format!("{e:#}"),
                    };
                    tracing::warn!(user = %t.user, error = %why, "a notice could not be delivered; it is retried at the next pass");
                    self.store()
                        .run(move |s| {
                            s.release_notices(&user, Told::Actions, &claimed)?;
                            s.release_notices(&user, Told::Requests, &claimed_requests)
                        })
                        .await?;
                }
            }
        }
        Ok(sent)
    }
}

impl Person<'_> {
    /// Set (or clear, with `None`) where `person`'s notices go. Only the
    /// person themselves may: notices say what waits in their chats. The
    /// URL must lead where `allowed` lets notices go, as its host resolves
    /// now ([`check_destination`]); `serve` checks again at every send.
    pub async fn set_notify_url(
        &self,
        person: &str,
        url: Option<&str>,
        allowed: Destinations,
    ) -> anyhow::Result<()> {
        let by = self.name;
        if by != person {
            bail!(
                "only {person} may set where {person}'s notices go (run it as `--as {person}`); a notice lists what waits in their chats"
            );
        }
        if let Some(u) = url {
            check_destination(u, allowed).await?;
        }
        let (who, to) = (person.to_owned(), url.map(str::to_owned));
        if !self
            .kernel
            .store()
            .run(move |s| s.set_notify_url(&who, to.as_deref()))
            .await?
        {
            bail!("no person named {person:?}; add them with `gatehouse user add {person}`");
        }
        Ok(())
    }

    /// Where `person`'s notices go, if anywhere.
    pub fn notify_url(&self) -> anyhow::Result<Option<String>> {
        let person = self.name;
        Ok(self.kernel.store().notify_target(person)?.map(|t| t.url))
    }
}

/// What waits for `user` and was not told of yet: pending actions they may
/// decide, and pending approval requests they may decide (the one rule,
/// asked once per chat for each).
fn waiting_for(
    s: &crate::store::Store,
    user: &str,
) -> anyhow::Result<(Vec<crate::store::Action>, Vec<WaitingRequest>)> {
    let (mut actions, mut requests) = decidable_by(s, user)?;
    let told = s.noticed(user, Told::Actions)?;
    actions.retain(|a| !told.contains(&a.id));
    let told = s.noticed(user, Told::Requests)?;
    requests.retain(|r| !told.contains(&r.id));
    Ok((actions, requests))
}

/// Everything that waits for a decision `user` may make: pending actions
/// in chats where the one rule lets them decide, and pending approval
/// requests it lets them decide (asked once per chat for each). Who is
/// told of what, for every way a person is told (the webhook here, their
/// devices in `crate::push`): there is no other such list.
pub(crate) fn decidable_by(
    s: &crate::store::Store,
    user: &str,
) -> anyhow::Result<(Vec<crate::store::Action>, Vec<WaitingRequest>)> {
    let mut decides = std::collections::HashMap::new();
    let mut actions = Vec::new();
    for a in s.pending_all()? {
        let may = match decides.get(&a.chat) {
            Some(m) => *m,
            None => {
                let m = s.access(&a.chat, user)?.may_decide();
                decides.insert(a.chat.clone(), m);
                m
            }
        };
        if may {
            actions.push(a);
        }
    }
    let mut decides = std::collections::HashMap::new();
    let mut requests = Vec::new();
    for r in s.waiting_requests()? {
        let may = match decides.get(&r.chat) {
            Some(m) => *m,
            None => {
                let m = s.access(&r.chat, user)?.may_decide_requests();
                decides.insert(r.chat.clone(), m);
                m
            }
        };
        if may {
            requests.push(r);
        }
    }
    Ok((actions, requests))
}

/// The text of one notice: a count, then one summary line per action and
/// per approval request (never an argument, a list or a reason).
fn notice_text(actions: &[&crate::store::Action], requests: &[&WaitingRequest]) -> String {
    let (n, m) = (actions.len(), requests.len());
    let plural =
        |k: usize, one: &str, many: &str| format!("{k} {}", if k == 1 { one } else { many });
    let head = match (n, m) {
        (_, 0) => format!(
            "Gatehouse: {} for your decision; nothing has been sent for {}.",
            plural(n, "action waits", "actions wait"),
            if n == 1 { "it" } else { "them" }
        ),
        (0, _) => format!(
            "Gatehouse: {} for your decision; nothing {} covers has been sent.",
            plural(m, "approval request waits", "approval requests wait"),
            if m == 1 { "it" } else { "they" }
        ),
        _ => format!(
            "Gatehouse: {} and {} wait for your decision; nothing has been sent for them.",
            plural(n, "action", "actions"),
            plural(m, "approval request", "approval requests")
        ),
    };
    let mut lines = vec![head];
    let all: Vec<String> = actions
        .iter()
        .map(|a| crate::prompt::summary(a))
        .chain(requests.iter().map(|r| crate::prompt::request_summary(r)))
        .collect();
    for l in all.iter().take(MAX_LINES) {
        lines.push(l.clone());
    }
    if all.len() > MAX_LINES {
        lines.push(format!(
            "…and {} more (`gatehouse pending`, `gatehouse workflow requests`)",
            all.len() - MAX_LINES
        ));
    }
    lines.join("\n")
}

/// POST `body` as JSON to `url`, checked again now, where `allowed` lets
/// notices go ([`check_destination`]); the answer's status. HTTPS with the
/// Mozilla roots; a redirect is not followed (the URL is the only place a
/// notice may go).
async fn post_json(url: &str, body: Vec<u8>, allowed: Destinations) -> anyhow::Result<u16> {
    let mut headers = http::HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    let roots = mozilla_roots();
    let post = Post {
        what: NOTIFY_URL,
        url,
        headers,
        body,
        allowed,
        roots: &roots,
    };
    Ok(post.send().await?.status)
}

/// The authorities a notice's TLS peer must be certified by: Mozilla's.
pub(crate) fn mozilla_roots() -> std::sync::Arc<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    std::sync::Arc::new(roots)
}

/// One POST of a notice (a webhook message, a push message: the one way
/// `serve` sends anything out).
pub(crate) struct Post<'a> {
    /// How the destination is named in a refusal.
    pub what: &'a str,
    /// Where it goes, checked again now ([`check_destination_named`]).
    pub url: &'a str,
    /// Its headers (`Host` and `User-Agent` are added).
    pub headers: http::HeaderMap,
    /// Its body.
    pub body: Vec<u8>,
    /// Where the operator lets notices go.
    pub allowed: Destinations,
    /// Who may certify the destination's TLS certificate.
    pub roots: &'a std::sync::Arc<rustls::RootCertStore>,
}

/// What a destination answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Answered {
    /// The HTTP status.
    pub status: u16,
    /// `Retry-After`, when given in seconds (a date is not read).
    pub retry_after: Option<u64>,
}

impl Post<'_> {
    /// Send it, within [`POST_TIMEOUT`]; a redirect is not followed.
    pub(crate) async fn send(self) -> anyhow::Result<Answered> {
        tokio::time::timeout(POST_TIMEOUT, self.send_now())
            .await
            .map_err(|_| anyhow::anyhow!("no answer within {} s", POST_TIMEOUT.as_secs()))?
    }

    async fn send_now(self) -> anyhow::Result<Answered> {
        use http_body_util::Full;
        use hyper_util::rt::TokioIo;
        let url = self.url;
        // The addresses checked are the addresses connected to: the name is
        // not looked up a second time, whose answer could differ.
        let addrs = check_destination_named(self.what, url, self.allowed).await?;
        let uri: http::Uri = url.parse()?;
        let authority = uri.authority().context("the URL names no host")?.clone();
        let https = uri.scheme_str() == Some("https");
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let tcp = tokio::net::TcpStream::connect(&addrs[..])
            .await
            .with_context(|| format!("cannot connect to {authority}"))?;
        let path = uri
            .path_and_query()
            .map(|p| p.as_str().to_owned())
            .unwrap_or_else(|| "/".into());
        let mut request = http::Request::post(path)
            .header(http::header::HOST, authority.as_str())
            .header(http::header::USER_AGENT, "gatehouse-notify")
            .body(Full::new(hyper::body::Bytes::from(self.body)))?;
        request.headers_mut().extend(self.headers);
        let answered = if https {
            let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .context("the TLS configuration")?
            .with_root_certificates(self.roots.clone())
            .with_no_client_auth();
            let name = rustls::pki_types::ServerName::try_from(host.clone())
                .with_context(|| format!("{host:?} is not a name TLS can verify"))?;
            let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
                .connect(name, tcp)
                .await
                .with_context(|| format!("TLS with {authority} failed"))?;
            send(TokioIo::new(tls), request).await?
        } else {
            send(TokioIo::new(tcp), request).await?
        };
        Ok(answered)
    }
}

async fn send<I>(
    io: I,
    request: http::Request<http_body_util::Full<hyper::body::Bytes>>,
) -> anyhow::Result<Answered>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .context("the HTTP handshake failed")?;
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let response = sender
        .send_request(request)
        .await
        .context("the request failed")?;
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    drop(response);
    driver.abort();
    Ok(Answered {
        status,
        retry_after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PUBLIC: Destinations = Destinations::PublicOnly;
    const PRIVATE: Destinations = Destinations::AlsoPrivate;

    #[test]
    fn notices_go_over_https_or_to_loopback_only() {
        assert!(check_url("https://hooks.example.com/services/T/B/x", PUBLIC).is_ok());
        // Loopback is a private destination: plain http to it needs the
        // operator's allowance, and plain http goes nowhere else.
        for url in ["http://127.0.0.1:9000/notify", "http://[::1]:9000/"] {
            assert!(check_url(url, PRIVATE).is_ok(), "{url}");
            let e = check_url(url, PUBLIC).unwrap_err().to_string();
            assert!(e.contains(ALLOW_PRIVATE_VAR), "{url}: {e}");
        }
        // A name is judged by where it resolves ([`check_destination`]).
        assert!(check_url("http://localhost:9000/", PRIVATE).is_ok());
        for d in [PUBLIC, PRIVATE] {
            assert!(check_url("http://example.com/x", d).is_err());
            assert!(check_url("http://10.0.0.1/x", d).is_err());
            assert!(check_url("ftp://example.com/x", d).is_err());
            assert!(check_url("https://user:pw@example.com/x", d).is_err());
            assert!(check_url("not a url", d).is_err());
            assert!(check_url("/relative", d).is_err());
        }
    }

    /// What is not a public address, in every spelling: private, loopback,
    /// link-local, unique-local, shared (CGNAT), unspecified and the other
    /// special ranges, IPv4 inside IPv6 judged as IPv4.
    #[test]
    fn only_public_addresses_are_public() {
        let private = [
            "0.0.0.0",
            "0.1.2.3",
            "127.0.0.1",
            "127.255.255.254",
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "192.0.0.8",
            "198.18.0.1",
            "192.0.2.1",
            "224.0.0.1",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "febf::1",
            "fec0::1",
            "ff02::1",
            "2001:db8::1",
            "::ffff:127.0.0.1",
            "::ffff:10.1.2.3",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "::10.0.0.1",
            "64:ff9b::a00:1",
            "2002:a00:1::1",
            "100::1",
        ];
        for a in private {
            let ip: std::net::IpAddr = a.parse().unwrap();
            assert!(not_public(ip).is_some(), "{a} is not public");
        }
        let public = [
            "1.1.1.1",
            "8.8.8.8",
            "172.15.255.255",
            "172.32.0.1",
            "100.63.255.255",
            "100.128.0.1",
            "169.253.0.1",
            "2606:4700::1111",
            "2a00:1450::1",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ];
        for a in public {
            let ip: std::net::IpAddr = a.parse().unwrap();
            assert_eq!(not_public(ip), None, "{a} is public");
        }
    }

    /// A URL written with a non-public address (or `localhost`) is refused
    /// as written, in one line naming the operator's setting; with it, it
    /// is taken.
    #[test]
    fn private_destinations_need_the_operators_allowance() {
        for url in [
            "https://10.0.0.1/hook",
            "https://169.254.169.254/latest/meta-data",
            "https://[::ffff:192.168.0.1]/x",
            "https://[fe80::1]/x",
            "https://[fd00::5]:8443/x",
            "https://100.100.100.100/x",
            "https://0.0.0.0/x",
            "https://[::1]/x",
        ] {
            let e = check_url(url, PUBLIC).unwrap_err().to_string();
            assert!(!e.contains('\n'), "{e}");
            assert!(e.contains(ALLOW_PRIVATE_VAR), "{url}: {e}");
            assert!(check_url(url, PRIVATE).is_ok(), "{url}");
        }
    }

    /// A name is judged by the addresses it resolves to (here `localhost`,
    /// resolved by the system, as at every send), and with the allowance
    /// they are the addresses connected to.
    #[tokio::test]
    async fn a_name_is_judged_by_the_addresses_it_resolves_to() {
        for url in ["https://localhost:9/x", "http://localhost:9/x"] {
            assert!(check_url(url, PUBLIC).is_ok(), "as written: {url}");
            let e = check_destination(url, PUBLIC)
                .await
                .unwrap_err()
                .to_string();
            assert!(e.contains(ALLOW_PRIVATE_VAR), "{url}: {e}");
            assert!(e.contains("loopback"), "{url}: {e}");
        }
        let addrs = check_destination("http://localhost:9/x", PRIVATE)
            .await
            .unwrap();
        assert!(!addrs.is_empty());
        assert!(
            addrs.iter().all(|a| a.ip().is_loopback() && a.port() == 9),
            "{addrs:?}"
        );
        let addrs = check_destination("https://[::ffff:10.0.0.1]:8443/x", PRIVATE)
            .await
            .unwrap();
        assert_eq!(addrs, vec!["[::ffff:10.0.0.1]:8443".parse().unwrap()]);
    }
}
