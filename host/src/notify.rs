//! Notifications: telling people that actions wait for them.
//!
//! When an action starts waiting for a person, `serve` tells each person
//! who may decide it (the one authorization rule, `crate::access`) and who
//! set a notification URL: one Slack-compatible webhook message
//! (`{"text": ...}`) per person per batch window, listing each waiting
//! action by the prompt's one-line summary ([`crate::prompt::summary`]),
//! never by its arguments. The URL is the only place a notice goes.
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
//! Owns the batching, the wording and the one HTTP POST. May not decide who
//! may decide (it asks `access`), and never sends anything else.

use crate::kernel::Kernel;
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
    /// The HTTP status the URL answered.
    pub status: u16,
}

/// Check a notification URL: `https://`, or `http://` to a loopback
/// address only (a notice names chats and tools, which must not cross a
/// network in the clear), no user name or password in it.
pub fn check_url(url: &str) -> anyhow::Result<()> {
    if url.len() > 2048 || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        bail!("--notify-url must be one URL of at most 2048 characters, without spaces");
    }
    let uri: http::Uri = url
        .parse()
        .with_context(|| format!("--notify-url {url:?} is not a URL"))?;
    let Some(authority) = uri.authority() else {
        bail!(
            "--notify-url {url:?} names no host; give a full URL like https://hooks.example.com/..."
        );
    };
    if authority.as_str().contains('@') {
        bail!("--notify-url must not carry a user name or password");
    }
    match uri.scheme_str() {
        Some("https") => Ok(()),
        Some("http") if is_loopback(authority.host()) => Ok(()),
        Some("http") => bail!(
            "--notify-url {url:?} is plain http to a host that is not this machine; use https (plain http is allowed only to loopback)"
        ),
        _ => bail!("--notify-url must start with https:// (or http:// to loopback)"),
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
    /// Set (or clear, with `None`) where `person`'s notices go. Only the
    /// person themselves may: notices say what waits in their chats.
    pub fn set_notify_url(&self, by: &str, person: &str, url: Option<&str>) -> anyhow::Result<()> {
        if by != person {
            bail!(
                "only {person} may set where {person}'s notices go (run it as `--as {person}`); a notice lists what waits in their chats"
            );
        }
        if let Some(u) = url {
            check_url(u)?;
        }
        if !self.store().set_notify_url(person, url)? {
            bail!("no person named {person:?}; add them with `gatehouse user add {person}`");
        }
        Ok(())
    }

    /// Where `person`'s notices go, if anywhere.
    pub fn notify_url(&self, person: &str) -> anyhow::Result<Option<String>> {
        Ok(self.store().notify_target(person)?.map(|t| t.url))
    }

    /// One pass: send every notice that is due now (see the module's
    /// header). `serve` calls it every second or so.
    pub async fn notify_pass(&self, window: Duration) -> anyhow::Result<Vec<NoticeSent>> {
        let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
        let targets = self.store().run(|s| s.notify_targets()).await?;
        let mut sent = Vec::new();
        for t in targets {
            let user = t.user.clone();
            // What waits for this person: pending actions in chats where
            // the one rule lets them decide, that they were not told of.
            let waiting = self
                .store()
                .run(move |s| {
                    let told = s.noticed(&user)?;
                    let mut decides = std::collections::HashMap::new();
                    let mut out = Vec::new();
                    for a in s.pending_all()? {
                        if told.contains(&a.id) {
                            continue;
                        }
                        let may = match decides.get(&a.chat) {
                            Some(m) => *m,
                            None => {
                                let m = s.access(&a.chat, &user)?.may_decide();
                                decides.insert(a.chat.clone(), m);
                                m
                            }
                        };
                        if may {
                            out.push(a);
                        }
                    }
                    Ok(out)
                })
                .await?;
            let Some(oldest) = waiting.iter().map(|a| a.created_at).min() else {
                continue;
            };
            let now = crate::store::now_ms();
            let due = oldest
                .saturating_add(window_ms)
                .max(t.last_sent_at.unwrap_or(0).saturating_add(window_ms));
            if now < due {
                continue;
            }
            let (user, ids) = (
                t.user.clone(),
                waiting.iter().map(|a| a.id).collect::<Vec<_>>(),
            );
            let (claimed, _) = self
                .store()
                .run(move |s| s.claim_notices(&user, &ids))
                .await?;
            if claimed.is_empty() {
                continue;
            }
            let told: Vec<&crate::store::Action> =
                waiting.iter().filter(|a| claimed.contains(&a.id)).collect();
            let text = notice_text(&told);
            let body = serde_json::json!({ "text": text }).to_string();
            let posted = post_json(&t.url, body.into_bytes()).await;
            let user = t.user.clone();
            match posted {
                Ok(status) if (200..300).contains(&status) => {
                    self.store().run(move |s| s.notice_sent(&user)).await?;
                    sent.push(NoticeSent {
                        user: t.user,
                        actions: claimed,
                        status,
                    });
                }
                other => {
                    let why = match other {
                        Ok(status) => format!("it answered HTTP {status}"),
                        Err(e) => format!("{e:#}"),
                    };
                    tracing::warn!(user = %t.user, error = %why, "a notice could not be delivered; it is retried at the next pass");
                    let c = claimed.clone();
                    self.store()
                        .run(move |s| s.release_notices(&user, &c))
                        .await?;
                }
            }
        }
        Ok(sent)
    }
}

/// The text of one notice: a count, then one summary line per action.
fn notice_text(actions: &[&crate::store::Action]) -> String {
    let n = actions.len();
    let mut lines = vec![format!(
        "Gatehouse: {n} action{} wait{} for your decision; nothing has been sent for {}.",
        if n == 1 { "" } else { "s" },
        if n == 1 { "s" } else { "" },
        if n == 1 { "it" } else { "them" }
    )];
    for a in actions.iter().take(MAX_LINES) {
        lines.push(crate::prompt::summary(a));
    }
    if n > MAX_LINES {
        lines.push(format!("…and {} more (`gatehouse pending`)", n - MAX_LINES));
    }
    lines.join("\n")
}

/// POST `body` as JSON to `url` (checked by [`check_url`]); the answer's
/// status. HTTPS with the Mozilla roots; a redirect is not followed (the
/// URL is the only place a notice may go).
async fn post_json(url: &str, body: Vec<u8>) -> anyhow::Result<u16> {
    tokio::time::timeout(POST_TIMEOUT, post_json_now(url, body))
        .await
        .map_err(|_| anyhow::anyhow!("no answer within {} s", POST_TIMEOUT.as_secs()))?
}

async fn post_json_now(url: &str, body: Vec<u8>) -> anyhow::Result<u16> {
    use http_body_util::Full;
    use hyper_util::rt::TokioIo;
    check_url(url)?;
    let uri: http::Uri = url.parse()?;
    let authority = uri.authority().context("the URL names no host")?.clone();
    let https = uri.scheme_str() == Some("https");
    let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .with_context(|| format!("cannot connect to {authority}"))?;
    let path = uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".into());
    let request = http::Request::post(path)
        .header(http::header::HOST, authority.as_str())
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::USER_AGENT, "gatehouse-notify")
        .body(Full::new(hyper::body::Bytes::from(body)))?;
    let status = if https {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .context("the TLS configuration")?
        .with_root_certificates(roots)
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
    Ok(status)
}

async fn send<I>(
    io: I,
    request: http::Request<http_body_util::Full<hyper::body::Bytes>>,
) -> anyhow::Result<u16>
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
    drop(response);
    driver.abort();
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_go_over_https_or_to_loopback_only() {
        assert!(check_url("https://hooks.example.com/services/T/B/x").is_ok());
        assert!(check_url("http://127.0.0.1:9000/notify").is_ok());
        assert!(check_url("http://localhost:9000/").is_ok());
        assert!(check_url("http://[::1]:9000/").is_ok());
        assert!(check_url("http://example.com/x").is_err());
        assert!(check_url("ftp://example.com/x").is_err());
        assert!(check_url("https://user:pw@example.com/x").is_err());
        assert!(check_url("not a url").is_err());
        assert!(check_url("/relative").is_err());
    }
}
