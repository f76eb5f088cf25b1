//! The HTTP client OpenID Connect and OAuth accounts (`crate::oauth`)
//! speak through (discovery, keys, registration, token exchange and
//! refresh): the project's own hyper over rustls with Mozilla's roots,
//! handed to the openidconnect and oauth2 crates through their
//! `AsyncHttpClient` hook, so no second HTTP stack comes in.
//!
//! Owns: one request per connection, HTTPS (plain HTTP only to loopback,
//! where a test's provider runs), no redirect followed (the crate asks for
//! none), a deadline and a cap on what is read. May not: know what the
//! request means (`signin::oidc` does).

use anyhow::Context as _;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::rt::TokioIo;
use std::time::Duration;

/// How long one request to the provider may take, connection included.
const DEADLINE: Duration = Duration::from_secs(15);
/// The most of an answer read (discovery documents and key sets are a few
/// kilobytes).
const MAX_BODY: usize = 1024 * 1024;

/// A failed request, as one line.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HttpError(String);

/// Send `request` and read the answer.
pub(crate) async fn call(
    request: openidconnect::HttpRequest,
) -> Result<openidconnect::HttpResponse, HttpError> {
    let target = request.uri().to_string();
    match tokio::time::timeout(DEADLINE, send(request)).await {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => Err(HttpError(format!("{target}: {e:#}"))),
        Err(_) => Err(HttpError(format!(
            "{target}: no answer within {} s",
            DEADLINE.as_secs()
        ))),
    }
}

async fn send(request: openidconnect::HttpRequest) -> anyhow::Result<openidconnect::HttpResponse> {
    let (parts, body) = request.into_parts();
    let uri = parts.uri.clone();
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        other => anyhow::bail!("unsupported scheme {other:?}"),
    };
    let authority = uri.authority().context("the URL names no host")?.clone();
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    if !https && !super::is_loopback_name(&host) {
        anyhow::bail!(
            "an identity or authorization server is reached over https only (plain http only on this machine)"
        );
    }
    let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .with_context(|| format!("cannot connect to {authority}"))?;
    tcp.set_nodelay(true)?;
    let path = uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".into());
    let mut out = http::Request::builder()
        .method(parts.method)
        .uri(path)
        .header(http::header::HOST, authority.as_str());
    for (k, v) in &parts.headers {
        out = out.header(k, v);
    }
    let out = out.body(Full::new(hyper::body::Bytes::from(body)))?;
    if https {
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
        exchange(TokioIo::new(tls), out).await
    } else {
        exchange(TokioIo::new(tcp), out).await
    }
}

async fn exchange<I>(
    io: I,
    request: http::Request<Full<hyper::body::Bytes>>,
) -> anyhow::Result<openidconnect::HttpResponse>
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
    let (parts, body) = response.into_parts();
    let body = Limited::new(body, MAX_BODY)
        .collect()
        .await
        .map_err(|e| anyhow::anyhow!("cannot read the answer (over {MAX_BODY} bytes?): {e}"))?
        .to_bytes();
    driver.abort();
    let mut answer = http::Response::builder().status(parts.status);
    for (k, v) in &parts.headers {
        answer = answer.header(k, v);
    }
    Ok(answer.body(body.to_vec())?)
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_this_machine_is_loopback() {
        for h in [
            "localhost",
            "LOCALHOST",
            "127.0.0.1",
            "127.8.9.10",
            "[::1]",
            "::1",
        ] {
            assert!(super::super::is_loopback_name(h), "{h}");
        }
        for h in [
            "example.com",
            "10.0.0.1",
            "localhost.example.com",
            "[::2]",
            "",
        ] {
            assert!(!super::super::is_loopback_name(h), "{h}");
        }
    }
}
