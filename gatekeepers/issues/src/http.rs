//! A small blocking `wasi:http` client shared by the gatekeepers.
//!
//! It exists (instead of `wstd`) because a gatekeeper must tell "the request
//! never left" apart from "the service may have acted": `wstd` turns a failed
//! body write into a plain I/O error and loses the `wasi:http` error code,
//! while here every failure is classified from the code itself.
//!
//! `gatekeepers/rogue` includes this file with `#[path]`.

use std::time::Duration;

use wasi::http::outgoing_handler;
use wasi::http::types::{
    ErrorCode, Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, RequestOptions, Scheme,
};
use wasi::io::streams::StreamError;

/// Replies larger than this are treated as broken.
const MAX_REPLY: usize = 16 << 20;
/// How long one request may take to connect and to produce each part of the reply.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// A complete reply.
pub struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Why a request failed.
pub enum Failure {
    /// The request provably never reached the service (bad url, connection
    /// refused, denied by the host's allow-list...).
    NotSent(String),
    /// The service may have received and acted on the request.
    Unknown(String),
}

/// The settings value `name`, if present.
pub fn setting<'a>(settings: &'a [(String, String)], name: &str) -> Option<&'a str> {
    settings
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.trim())
        .filter(|v| !v.is_empty())
}

/// The service's base url: setting `base-url`, else the first entry of
/// `allowed-hosts` as the kernel admits it: `http://HOST:PORT` when it names
/// a port, `https://HOST` when it does not (the kernel admits a host without
/// a port on HTTPS only). Never ends with `/`.
pub fn base_url(settings: &[(String, String)]) -> Result<String, String> {
    if let Some(url) = setting(settings, "base-url") {
        return Ok(url.trim_end_matches('/').to_string());
    }
    let first = setting(settings, "allowed-hosts")
        .and_then(|hosts| hosts.split(',').map(str::trim).find(|h| !h.is_empty()))
        .ok_or_else(|| {
            "no service address: neither a base-url setting nor an allowed host is configured"
                .to_string()
        })?;
    let first = first.trim_end_matches('/');
    let has_port = first
        .rsplit_once(':')
        .is_some_and(|(_, port)| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()));
    let scheme = if has_port { "http" } else { "https" };
    Ok(format!("{scheme}://{first}"))
}

/// Percent-encodes `text` for use in a query string.
pub fn encode_query(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Collapses `text` to one line of at most `max` characters.
pub fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let flat = flat.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > max {
        let cut: String = flat.chars().take(max).collect();
        format!("{cut}...")
    } else {
        flat
    }
}

struct Target {
    scheme: Scheme,
    authority: String,
    path_and_query: String,
}

fn parse_url(url: &str) -> Result<Target, String> {
    let (scheme, rest) = if let Some(rest) = url.strip_prefix("http://") {
        (Scheme::Http, rest)
    } else if let Some(rest) = url.strip_prefix("https://") {
        (Scheme::Https, rest)
    } else {
        return Err(format!(
            "invalid url {url:?}: only http:// and https:// urls are supported"
        ));
    };
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("invalid url {url:?}: it contains whitespace"));
    }
    let (authority, path) = match rest.find(['/', '?', '#']) {
        Some(i) => rest.split_at(i),
        None => (rest, "/"),
    };
    if authority.is_empty() || authority.contains('@') {
        return Err(format!("invalid url {url:?}: no usable host"));
    }
    let path = path.split('#').next().unwrap_or_default();
    let path_and_query = match path {
        "" => "/".to_string(),
        p if p.starts_with('?') => format!("/{p}"),
        p => p.to_string(),
    };
    Ok(Target {
        scheme,
        authority: authority.to_string(),
        path_and_query,
    })
}

/// Whether a `wasi:http` error proves that nothing reached the service.
fn never_sent(code: &ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::DnsTimeout
            | ErrorCode::DnsError(_)
            | ErrorCode::DestinationNotFound
            | ErrorCode::DestinationUnavailable
            | ErrorCode::DestinationIpProhibited
            | ErrorCode::DestinationIpUnroutable
            | ErrorCode::ConnectionRefused
            | ErrorCode::ConnectionTimeout
            | ErrorCode::ConnectionLimitReached
            | ErrorCode::TlsProtocolError
            | ErrorCode::TlsCertificateError
            | ErrorCode::TlsAlertReceived(_)
            | ErrorCode::HttpRequestDenied
            | ErrorCode::HttpRequestMethodInvalid
            | ErrorCode::HttpRequestUriInvalid
            | ErrorCode::HttpRequestUriTooLong
    )
}

fn classify(code: ErrorCode, what: &str) -> Failure {
    let message = one_line(&format!("{what} failed: {code:?}"), 400);
    if never_sent(&code) {
        Failure::NotSent(message)
    } else {
        Failure::Unknown(message)
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Sends one request and reads the whole reply. `body` is sent as JSON.
pub fn send(method: Method, url: &str, body: Option<&[u8]>) -> Result<Reply, Failure> {
    send_with(method, url, body, &[])
}

/// [`send`], with these extra request headers (like `Idempotency-Key`).
pub fn send_with(
    method: Method,
    url: &str,
    body: Option<&[u8]>,
    extra: &[(&str, &str)],
) -> Result<Reply, Failure> {
    let what = format!("{} {url}", method_name(&method));
    let target = parse_url(url).map_err(Failure::NotSent)?;

    let headers = Fields::new();
    for (name, value) in extra {
        headers
            .append(name, value.as_bytes())
            .map_err(|e| Failure::NotSent(format!("{what}: cannot set {name}: {e:?}")))?;
    }
    if let Some(bytes) = body {
        let length = bytes.len().to_string();
        for (name, value) in [
            ("content-type", "application/json".as_bytes()),
            ("content-length", length.as_bytes()),
        ] {
            headers
                .append(name, value)
                .map_err(|e| Failure::NotSent(format!("{what}: cannot set {name}: {e:?}")))?;
        }
    }
    let request = OutgoingRequest::new(headers);
    let rejected = |part: &str| Failure::NotSent(format!("{what}: the {part} was rejected"));
    request
        .set_method(&method)
        .map_err(|()| rejected("method"))?;
    request
        .set_scheme(Some(&target.scheme))
        .map_err(|()| rejected("scheme"))?;
    request
        .set_authority(Some(&target.authority))
        .map_err(|()| rejected("host"))?;
    request
        .set_path_with_query(Some(&target.path_and_query))
        .map_err(|()| rejected("path"))?;
    let outgoing_body = request
        .body()
        .expect("the body of a new request is taken once");

    let options = RequestOptions::new();
    // A host that does not support a timeout keeps its own default.
    let _ = options.set_connect_timeout(Some(nanos(CONNECT_TIMEOUT)));
    let _ = options.set_first_byte_timeout(Some(nanos(READ_TIMEOUT)));
    let _ = options.set_between_bytes_timeout(Some(nanos(READ_TIMEOUT)));

    let future =
        outgoing_handler::handle(request, Some(options)).map_err(|e| classify(e, &what))?;

    // Write the body. A failed write is reported only when no response
    // arrives: a service may answer (401, 500...) without reading the body,
    // and then its answer is what counts.
    let mut write_error = None;
    if let Some(bytes) = body {
        let stream = outgoing_body
            .write()
            .expect("the body stream of a new request is taken once");
        for chunk in bytes.chunks(4096) {
            if let Err(e) = stream.blocking_write_and_flush(chunk) {
                write_error = Some(stream_error(e));
                break;
            }
        }
        drop(stream);
    }
    if write_error.is_none() {
        if let Err(e) = OutgoingBody::finish(outgoing_body, None) {
            write_error = Some(format!("{e:?}"));
        }
    } else {
        drop(outgoing_body);
    }

    let response = loop {
        match future.get() {
            Some(result) => break result,
            None => future.subscribe().block(),
        }
    };
    drop(future);
    let response = match response {
        Ok(Ok(response)) => response,
        Ok(Err(code)) => {
            return Err(match (classify(code, &what), write_error) {
                (Failure::Unknown(e), Some(write)) => Failure::Unknown(one_line(
                    &format!("{e} (sending the request body failed: {write})"),
                    400,
                )),
                (failure, _) => failure,
            });
        }
        Err(()) => unreachable!("the response of a request is taken once"),
    };

    let status = response.status();
    let incoming = response
        .consume()
        .expect("the body of a response is consumed once");
    let stream = incoming
        .stream()
        .expect("the body stream of a response is taken once");
    let mut reply = Vec::new();
    let mut read_error = None;
    loop {
        match stream.blocking_read(64 * 1024) {
            Ok(chunk) => {
                reply.extend_from_slice(&chunk);
                if reply.len() > MAX_REPLY {
                    read_error = Some(format!("the reply is larger than {MAX_REPLY} bytes"));
                    break;
                }
            }
            Err(StreamError::Closed) => break,
            Err(e) => {
                read_error = Some(stream_error(e));
                break;
            }
        }
    }
    drop(stream);
    drop(IncomingBody::finish(incoming));
    drop(response);
    match read_error {
        Some(error) => Err(Failure::Unknown(one_line(
            &format!("{what}: HTTP {status}, but reading the reply failed: {error}"),
            400,
        ))),
        None => Ok(Reply {
            status,
            body: reply,
        }),
    }
}

fn stream_error(e: StreamError) -> String {
    match e {
        StreamError::Closed => "the stream was closed".to_string(),
        StreamError::LastOperationFailed(e) => e.to_debug_string(),
    }
}

/// The method as it appears on the wire.
pub fn method_name(method: &Method) -> &str {
    match method {
        Method::Get => "GET",
        Method::Head => "HEAD",
        Method::Post => "POST",
        Method::Put => "PUT",
        Method::Delete => "DELETE",
        Method::Connect => "CONNECT",
        Method::Options => "OPTIONS",
        Method::Trace => "TRACE",
        Method::Patch => "PATCH",
        Method::Other(name) => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn base_url_prefers_setting_then_first_allowed_host() {
        let s = settings(&[
            ("allowed-hosts", "127.0.0.1:1, b:2"),
            ("base-url", "http://x:9/"),
        ]);
        assert_eq!(base_url(&s).as_deref(), Ok("http://x:9"));
        let s = settings(&[("allowed-hosts", " 127.0.0.1:40123 ,b:2")]);
        assert_eq!(base_url(&s).as_deref(), Ok("http://127.0.0.1:40123"));
        assert!(base_url(&settings(&[("allowed-hosts", "")])).is_err());
    }

    #[test]
    fn urls_split_into_parts() {
        let t = parse_url("http://h:1/a/b?q=1#frag").expect("valid");
        assert_eq!(t.authority, "h:1");
        assert_eq!(t.path_and_query, "/a/b?q=1");
        let t = parse_url("https://h?x").expect("valid");
        assert_eq!(t.path_and_query, "/?x");
        assert_eq!(parse_url("http://h").expect("valid").path_and_query, "/");
        assert!(parse_url("ftp://h/").is_err());
        assert!(parse_url("http:///x").is_err());
        assert!(parse_url("http://u@h/").is_err());
        assert!(parse_url("http://h/a b").is_err());
    }

    #[test]
    fn queries_are_percent_encoded() {
        assert_eq!(encode_query("a b&c=d/é"), "a%20b%26c%3Dd%2F%C3%A9");
    }

    #[test]
    fn one_line_flattens_and_caps() {
        assert_eq!(one_line("a\nb\t c", 10), "a b c");
        assert_eq!(one_line("abcdef", 3), "abc...");
    }
}
