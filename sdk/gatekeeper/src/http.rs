//! HTTP through the kernel's egress: a small blocking `wasi:http` client.
//!
//! A gatekeeper reaches its service only with `wasi:http`'s outgoing
//! handler; the kernel lets a request through only to the hosts the
//! operator allowed and adds the credential itself. What this module owns is
//! telling "the request never left" ([`HttpError::NotSent`]: safe to retry,
//! a `tool-error::refused`) apart from "the service may have acted"
//! ([`HttpError::OutcomeUnknown`]: `tool-error::unknown-outcome`), from the
//! `wasi:http` error code itself. (A general client such as `wstd` turns a
//! failed body write into a plain I/O error and loses that code.) What a
//! status means for a tool (is a 404 the caller's mistake?) is the
//! gatekeeper's to say.
//!
//! ```no_run
//! use gatehouse_gatekeeper::http::Request;
//! use gatehouse_gatekeeper::ToolError;
//! use serde_json::json;
//!
//! fn add_label(base: &str, id: u64, label: &str) -> Result<serde_json::Value, ToolError> {
//!     let reply = Request::post(format!("{base}/issues/{id}/labels"))
//!         .json(&json!({ "label": label }))
//!         .send()?;
//!     match reply.status {
//!         200..=299 => reply.json().map_err(ToolError::UnknownOutcome),
//!         401 | 403 => Err(ToolError::Refused(format!("HTTP {}", reply.status))),
//!         s => Err(ToolError::UnknownOutcome(format!("unexpected HTTP {s}"))),
//!     }
//! }
//! ```

use std::fmt;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use wasi::http::outgoing_handler;
pub use wasi::http::types::Method;
use wasi::http::types::{
    ErrorCode, Fields, IncomingBody, IncomingResponse, OutgoingBody, OutgoingRequest,
    RequestOptions, Scheme,
};
use wasi::io::streams::{InputStream, StreamError};

use crate::ToolError;
use crate::text::one_line;

/// Replies larger than this are treated as broken.
pub const MAX_REPLY: usize = 16 << 20;
/// How long one request may take to connect and to produce each part of the reply.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// A complete reply.
#[derive(Clone, Debug)]
pub struct Response {
    /// The HTTP status.
    pub status: u16,
    /// The whole body (at most [`MAX_REPLY`] bytes).
    pub body: Vec<u8>,
}

impl Response {
    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON; the error says why it is not, on one line.
    pub fn json(&self) -> Result<Value, String> {
        serde_json::from_slice(&self.body).map_err(|e| {
            format!(
                "HTTP {}, but the reply is not JSON ({e}): {}",
                self.status,
                one_line(&self.text(), 120)
            )
        })
    }
}

/// Why a request failed, as far as the gatekeeper can tell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpError {
    /// Refused before it took effect: the request provably never reached
    /// the service (a bad url, connection refused, a host the operator did
    /// not allow...). Sending it again is safe.
    NotSent(String),
    /// The outcome is unknown: the service may have received the request
    /// and acted on it (a timeout, a broken reply...).
    OutcomeUnknown(String),
}

impl HttpError {
    /// The message, whichever kind it is.
    pub fn message(&self) -> &str {
        match self {
            HttpError::NotSent(m) | HttpError::OutcomeUnknown(m) => m,
        }
    }

    /// As the `tool-error` the kernel needs, a refusal saying that the
    /// request was not sent (`From` keeps the message as is).
    pub fn into_tool_error(self) -> ToolError {
        match self {
            HttpError::NotSent(e) => ToolError::Refused(format!("the request was not sent: {e}")),
            other => other.into(),
        }
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::NotSent(m) => write!(f, "refused before it took effect: {m}"),
            HttpError::OutcomeUnknown(m) => write!(f, "outcome unknown: {m}"),
        }
    }
}

impl std::error::Error for HttpError {}

/// `NotSent` is `refused` (the kernel may retry it), `OutcomeUnknown` is
/// `unknown-outcome` (it never will); the message is kept as is.
impl From<HttpError> for ToolError {
    fn from(error: HttpError) -> Self {
        match error {
            HttpError::NotSent(e) => ToolError::Refused(e),
            HttpError::OutcomeUnknown(e) => ToolError::UnknownOutcome(e),
        }
    }
}

/// The settings value `name` (trimmed), if present and not empty.
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

/// Percent-encodes `text` for use in a query string or as one path segment.
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

/// One request, built then [`send`](Request::send)-ed once.
#[derive(Debug)]
pub struct Request {
    method: Method,
    url: String,
    headers: Vec<(String, String)>,
    body: Option<Result<Vec<u8>, String>>,
}

impl Request {
    /// A request with `method` to `url` (`http://` or `https://`).
    pub fn new(method: Method, url: impl Into<String>) -> Request {
        Request {
            method,
            url: url.into(),
            headers: Vec::new(),
            body: None,
        }
    }

    /// `GET url`.
    pub fn get(url: impl Into<String>) -> Request {
        Request::new(Method::Get, url)
    }

    /// `POST url`.
    pub fn post(url: impl Into<String>) -> Request {
        Request::new(Method::Post, url)
    }

    /// `PUT url`.
    pub fn put(url: impl Into<String>) -> Request {
        Request::new(Method::Put, url)
    }

    /// `PATCH url`.
    pub fn patch(url: impl Into<String>) -> Request {
        Request::new(Method::Patch, url)
    }

    /// `DELETE url`.
    pub fn delete(url: impl Into<String>) -> Request {
        Request::new(Method::Delete, url)
    }

    /// Adds a header (sent before `content-type` and `content-length`).
    /// The credential is the kernel's to add: never set it here.
    pub fn header(mut self, name: &str, value: &str) -> Request {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// Adds an `Idempotency-Key` header when there is a key (see
    /// `invocation.idempotency-key`).
    pub fn idempotency_key(self, key: Option<&str>) -> Request {
        match key {
            Some(key) => self.header("idempotency-key", key),
            None => self,
        }
    }

    /// A JSON body: `value` serialised (compact). A value that cannot be
    /// serialised makes [`send`](Request::send) fail without sending.
    pub fn json(mut self, value: &impl Serialize) -> Request {
        self.body =
            Some(serde_json::to_vec(value).map_err(|e| format!("the body is not JSON: {e}")));
        self
    }

    /// A body of JSON text, sent exactly as given.
    pub fn json_text(mut self, text: impl Into<Vec<u8>>) -> Request {
        self.body = Some(Ok(text.into()));
        self
    }

    /// `METHOD url`, for messages.
    pub fn describe(&self) -> String {
        format!("{} {}", method_name(&self.method), self.url)
    }

    /// Sends the request and reads the whole reply. Any status is a
    /// [`Response`]; only a request that failed is an [`HttpError`].
    pub fn send(self) -> Result<Response, HttpError> {
        let mut incoming = self.open()?;
        let status = incoming.status();
        let mut body = Vec::new();
        let mut read_error = None;
        loop {
            match incoming.read() {
                Ok(Some(chunk)) => {
                    body.extend_from_slice(&chunk);
                    if body.len() > MAX_REPLY {
                        read_error = Some(format!("the reply is larger than {MAX_REPLY} bytes"));
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    read_error = Some(e);
                    break;
                }
            }
        }
        match read_error {
            Some(error) => Err(HttpError::OutcomeUnknown(one_line(
                &format!(
                    "{}: HTTP {status}, but reading the reply failed: {error}",
                    incoming.what
                ),
                400,
            ))),
            None => Ok(Response { status, body }),
        }
    }

    /// Sends the request and answers as soon as the reply's status and
    /// headers arrived; its body is then read as it comes
    /// ([`Incoming::read`]), for a client that must stop early (a stream of
    /// server-sent events) or see headers. Failures are classified as in
    /// [`send`](Request::send).
    pub fn open(self) -> Result<Incoming, HttpError> {
        let what = self.describe();
        let body = match self.body {
            Some(Err(e)) => return Err(HttpError::NotSent(format!("{what}: {e}"))),
            Some(Ok(bytes)) => Some(bytes),
            None => None,
        };
        let extra: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        open(what, &self.method, &self.url, body.as_deref(), &extra)
    }
}

/// A reply whose status and headers arrived; its body is read with
/// [`Incoming::read`]. Dropping it stops reading.
pub struct Incoming {
    status: u16,
    headers: Vec<(String, Vec<u8>)>,
    what: String,
    // Dropped in this order: a stream before its body, a body before its
    // response.
    stream: Option<InputStream>,
    body: Option<IncomingBody>,
    _response: IncomingResponse,
}

impl Incoming {
    /// The HTTP status.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The first value of the header `name` (any case), if it is UTF-8.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| String::from_utf8(v.clone()).ok())
    }

    /// The next piece of the body (at most 64 KiB), `None` at its end; the
    /// error says why it could not be read. Capping the total is the
    /// caller's.
    pub fn read(&mut self) -> Result<Option<Vec<u8>>, String> {
        let Some(stream) = &self.stream else {
            return Ok(None);
        };
        match stream.blocking_read(64 * 1024) {
            Ok(chunk) => Ok(Some(chunk)),
            Err(StreamError::Closed) => Ok(None),
            Err(e) => Err(stream_error(e)),
        }
    }
}

impl Incoming {
    /// The body read as server-sent events (`text/event-stream`): each
    /// item is one event's data (its `data:` lines joined by newlines);
    /// `event:`, `id:`, `retry:` and comment lines carry nothing here, and
    /// an event without data is skipped. Reading stops with an error once
    /// the body passes `max` bytes, so a stream that never ends cannot
    /// exhaust the gatekeeper's memory; dropping the iterator stops reading.
    pub fn events(&mut self, max: usize) -> Events<'_> {
        Events {
            incoming: self,
            max,
            total: 0,
            buffered: Vec::new(),
            done: false,
        }
    }
}

/// The events of an [`Incoming`] body; see [`Incoming::events`].
pub struct Events<'a> {
    incoming: &'a mut Incoming,
    max: usize,
    total: usize,
    buffered: Vec<u8>,
    done: bool,
}

impl Events<'_> {
    /// The next line of the body without its line ending; `None` at the
    /// end (a last line without an ending included).
    fn line(&mut self) -> Result<Option<String>, String> {
        loop {
            if let Some(end) = self.buffered.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffered.drain(..=end).collect();
                let line = String::from_utf8_lossy(&line);
                return Ok(Some(line.trim_end_matches(['\n', '\r']).to_owned()));
            }
            match self.incoming.read()? {
                Some(chunk) => {
                    self.total += chunk.len();
                    if self.total > self.max {
                        return Err(format!(
                            "the event stream is larger than {} bytes, the most this gatekeeper reads",
                            self.max
                        ));
                    }
                    self.buffered.extend_from_slice(&chunk);
                }
                None if self.buffered.is_empty() => return Ok(None),
                None => {
                    let line = String::from_utf8_lossy(&self.buffered).into_owned();
                    self.buffered.clear();
                    return Ok(Some(line.trim_end_matches('\r').to_owned()));
                }
            }
        }
    }
}

impl Iterator for Events<'_> {
    type Item = Result<String, String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let mut data: Option<String> = None;
        loop {
            let line = match self.line() {
                Ok(Some(line)) => line,
                Ok(None) => {
                    self.done = true;
                    return data.map(Ok);
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            };
            if line.is_empty() {
                if let Some(d) = data.take() {
                    return Some(Ok(d));
                }
                continue;
            }
            if let Some(rest) = line.strip_prefix("data:") {
                let rest = rest.strip_prefix(' ').unwrap_or(rest);
                match &mut data {
                    Some(d) => {
                        d.push('\n');
                        d.push_str(rest);
                    }
                    None => data = Some(rest.to_owned()),
                }
            }
        }
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        drop(self.stream.take());
        if let Some(body) = self.body.take() {
            drop(IncomingBody::finish(body));
        }
    }
}

/// Checks that `url` is one a request can be sent to (`http://` or
/// `https://`, a host, no whitespace), without sending anything.
pub fn check_url(url: &str) -> Result<(), String> {
    parse_url(url).map(|_| ())
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

/// Whether a `wasi:http` error proves that nothing reached the service
/// (DNS, connection, TLS, a request the kernel denied or could not form).
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

fn classify(code: ErrorCode, what: &str) -> HttpError {
    let message = one_line(&format!("{what} failed: {code:?}"), 400);
    if never_sent(&code) {
        HttpError::NotSent(message)
    } else {
        HttpError::OutcomeUnknown(message)
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Sends one request (`what` names it in messages) and waits for the
/// reply's head; `body` is sent as JSON, after the `extra` headers.
fn open(
    what: String,
    method: &Method,
    url: &str,
    body: Option<&[u8]>,
    extra: &[(&str, &str)],
) -> Result<Incoming, HttpError> {
    let target = parse_url(url).map_err(HttpError::NotSent)?;

    let headers = Fields::new();
    for (name, value) in extra {
        headers
            .append(name, value.as_bytes())
            .map_err(|e| HttpError::NotSent(format!("{what}: cannot set {name}: {e:?}")))?;
    }
    if let Some(bytes) = body {
        let length = bytes.len().to_string();
        for (name, value) in [
            ("content-type", "application/json".as_bytes()),
            ("content-length", length.as_bytes()),
        ] {
            headers
                .append(name, value)
                .map_err(|e| HttpError::NotSent(format!("{what}: cannot set {name}: {e:?}")))?;
        }
    }
    let request = OutgoingRequest::new(headers);
    let rejected = |part: &str| HttpError::NotSent(format!("{what}: the {part} was rejected"));
    request
        .set_method(method)
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
        .map_err(|()| HttpError::NotSent(format!("{what}: no request body")))?;

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
        match outgoing_body.write() {
            Ok(stream) => {
                for chunk in bytes.chunks(4096) {
                    if let Err(e) = stream.blocking_write_and_flush(chunk) {
                        write_error = Some(stream_error(e));
                        break;
                    }
                }
                drop(stream);
            }
            Err(()) => write_error = Some("the body stream was unavailable".into()),
        }
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
                (HttpError::OutcomeUnknown(e), Some(write)) => HttpError::OutcomeUnknown(one_line(
                    &format!("{e} (sending the request body failed: {write})"),
                    400,
                )),
                (failure, _) => failure,
            });
        }
        Err(()) => {
            return Err(HttpError::OutcomeUnknown(format!(
                "{what}: the response was lost"
            )));
        }
    };

    let status = response.status();
    let headers = response.headers().entries();
    let lost = |part: &str| {
        HttpError::OutcomeUnknown(format!("{what}: HTTP {status}, but the {part} was lost"))
    };
    let body = response.consume().map_err(|()| lost("body"))?;
    let stream = body.stream().map_err(|()| lost("body stream"))?;
    Ok(Incoming {
        status,
        headers,
        what,
        stream: Some(stream),
        body: Some(body),
        _response: response,
    })
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
}
