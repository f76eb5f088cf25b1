//! One Streamable HTTP exchange over `wasi:http`: POST a JSON-RPC message,
//! and read the answer whether it comes as `application/json` or as a
//! `text/event-stream` (taking the response whose id matches, and stopping
//! there: a stream that stays open after it is not waited for).
//!
//! It says only what the wire showed: whether the request provably never
//! left ([`Failure::NotSent`]), or what came back. What that means for the
//! call (retryable or not) is decided in `session.rs`.

use std::time::Duration;

use gatehouse_gatekeeper::http::never_sent;
pub use gatehouse_gatekeeper::text::one_line;
use serde_json::Value;
use wasi::http::outgoing_handler;
use wasi::http::types::{
    ErrorCode, Fields, IncomingBody, InputStream, Method, OutgoingBody, OutgoingRequest,
    RequestOptions, Scheme,
};
use wasi::io::streams::StreamError;

/// Replies larger than this are treated as broken (a tool list is cut into
/// pages long before; the kernel's manifest cap is 1 MiB).
pub const MAX_REPLY: usize = 2 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Why an exchange produced no usable answer.
#[derive(Debug)]
pub enum Failure {
    /// The request provably never reached the server.
    NotSent(String),
    /// The server may have received it; what it did is unknown.
    Unknown(String),
}

/// What came back.
pub struct Answer {
    pub status: u16,
    /// The `Mcp-Session-Id` the server assigned, if any.
    pub session: Option<String>,
    /// The JSON-RPC response with the awaited id; `None` when none was
    /// awaited (a notification) or the body held none.
    pub message: Option<Value>,
    /// Set when the body could not be read as the protocol says (not
    /// JSON, too large, broken stream, no matching response).
    pub broken: Option<String>,
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
            "the url setting {} must start with http:// or https://",
            one_line(url, 200)
        ));
    };
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("the url setting contains whitespace".into());
    }
    let (authority, path) = match rest.find(['/', '?', '#']) {
        Some(i) => rest.split_at(i),
        None => (rest, "/"),
    };
    if authority.is_empty() || authority.contains('@') {
        return Err(format!(
            "the url setting {} names no usable host",
            one_line(url, 200)
        ));
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

/// Checks the url setting without sending anything.
pub fn check_url(url: &str) -> Result<(), String> {
    parse_url(url).map(|_| ())
}

fn failure(code: ErrorCode, what: &str) -> Failure {
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

/// POST `body` to `url` with these extra headers; when `awaited` is an id,
/// read the answer until the JSON-RPC response with that id.
pub fn post(
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    awaited: Option<&Value>,
) -> Result<Answer, Failure> {
    let what = format!("POST {}", one_line(url, 200));
    let target = parse_url(url).map_err(Failure::NotSent)?;
    let fields = Fields::new();
    let length = body.len().to_string();
    let fixed = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("content-length", length.as_str()),
    ];
    for (name, value) in fixed.iter().chain(headers.iter()) {
        fields
            .append(name, value.as_bytes())
            .map_err(|e| Failure::NotSent(format!("{what}: cannot set {name}: {e:?}")))?;
    }
    let request = OutgoingRequest::new(fields);
    let rejected = |part: &str| Failure::NotSent(format!("{what}: the {part} was rejected"));
    request
        .set_method(&Method::Post)
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
        .map_err(|()| Failure::NotSent(format!("{what}: no request body")))?;
    let options = RequestOptions::new();
    let _ = options.set_connect_timeout(Some(nanos(CONNECT_TIMEOUT)));
    let _ = options.set_first_byte_timeout(Some(nanos(READ_TIMEOUT)));
    let _ = options.set_between_bytes_timeout(Some(nanos(READ_TIMEOUT)));
    let future = outgoing_handler::handle(request, Some(options)).map_err(|e| failure(e, &what))?;

    // A failed body write counts only when no response arrives: a server
    // may answer (401...) without reading the body.
    let mut write_error = None;
    match outgoing_body.write() {
        Ok(stream) => {
            for chunk in body.chunks(4096) {
                if let Err(e) = stream.blocking_write_and_flush(chunk) {
                    write_error = Some(stream_error(e));
                    break;
                }
            }
            drop(stream);
        }
        Err(()) => write_error = Some("the body stream was unavailable".into()),
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
            return Err(match (failure(code, &what), write_error) {
                (Failure::Unknown(e), Some(w)) => Failure::Unknown(one_line(
                    &format!("{e} (sending the request body failed: {w})"),
                    400,
                )),
                (f, _) => f,
            });
        }
        Err(()) => return Err(Failure::Unknown(format!("{what}: the response was lost"))),
    };
    let status = response.status();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .into_iter()
            .next()
            .and_then(|v| String::from_utf8(v).ok())
    };
    let session = header("mcp-session-id");
    let content_type = header("content-type")
        .unwrap_or_default()
        .to_ascii_lowercase();
    let mut answer = Answer {
        status,
        session,
        message: None,
        broken: None,
    };
    let Ok(incoming) = response.consume() else {
        answer.broken = Some("the response had no body".into());
        return Ok(answer);
    };
    let Ok(stream) = incoming.stream() else {
        answer.broken = Some("the response body could not be read".into());
        return Ok(answer);
    };
    let read = match awaited {
        // Only a successful answer to a request is read as the protocol;
        // other bodies are read (capped) and dropped.
        Some(id) if (200..300).contains(&status) => {
            if content_type.starts_with("text/event-stream") {
                read_events(&stream, id)
            } else {
                read_json(&stream, id)
            }
        }
        _ => drain(&stream).map(|()| None),
    };
    drop(stream);
    drop(IncomingBody::finish(incoming));
    match read {
        Ok(m) => answer.message = m,
        Err(e) => answer.broken = Some(e),
    }
    if awaited.is_some()
        && (200..300).contains(&status)
        && answer.message.is_none()
        && answer.broken.is_none()
    {
        answer.broken = Some("the reply held no JSON-RPC response to the request".into());
    }
    Ok(answer)
}

fn stream_error(e: StreamError) -> String {
    match e {
        StreamError::Closed => "the stream was closed".to_string(),
        StreamError::LastOperationFailed(e) => e.to_debug_string(),
    }
}

/// Read up to [`MAX_REPLY`] bytes; `Ok(None)` at the end of the body.
fn chunk(stream: &InputStream, total: &mut usize) -> Result<Option<Vec<u8>>, String> {
    match stream.blocking_read(64 * 1024) {
        Ok(c) => {
            *total += c.len();
            if *total > MAX_REPLY {
                return Err(format!(
                    "the reply is larger than {MAX_REPLY} bytes, the most this gatekeeper reads"
                ));
            }
            Ok(Some(c))
        }
        Err(StreamError::Closed) => Ok(None),
        Err(e) => Err(format!("reading the reply failed: {}", stream_error(e))),
    }
}

fn drain(stream: &InputStream) -> Result<(), String> {
    let mut total = 0;
    while chunk(stream, &mut total)?.is_some() {}
    Ok(())
}

/// The JSON-RPC response to `id` in a JSON body (one message or a batch).
fn read_json(stream: &InputStream, id: &Value) -> Result<Option<Value>, String> {
    let mut body = Vec::new();
    let mut total = 0;
    while let Some(c) = chunk(stream, &mut total)? {
        body.extend_from_slice(&c);
    }
    let value: Value = serde_json::from_slice(&body).map_err(|e| {
        format!(
            "the reply is not JSON ({e}): {}",
            one_line(&String::from_utf8_lossy(&body), 120)
        )
    })?;
    Ok(matching(value, id))
}

/// The response to `id` in `value`, a message or a batch of them.
fn matching(value: Value, id: &Value) -> Option<Value> {
    match value {
        Value::Array(items) => items.into_iter().find_map(|v| matching(v, id)),
        Value::Object(ref m)
            if m.get("id") == Some(id) && (m.contains_key("result") || m.contains_key("error")) =>
        {
            Some(value)
        }
        _ => None,
    }
}

/// Read server-sent events until one carries the response to `id`. Other
/// messages (notifications, requests this client cannot answer) are
/// skipped; an event whose data is not JSON makes the reply broken.
fn read_events(stream: &InputStream, id: &Value) -> Result<Option<Value>, String> {
    let mut pending: Vec<u8> = Vec::new();
    let mut data = String::new();
    let mut total = 0;
    loop {
        let Some(c) = chunk(stream, &mut total)? else {
            return Ok(None);
        };
        pending.extend_from_slice(&c);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if !data.is_empty() {
                    let value: Value = serde_json::from_str(&data).map_err(|e| {
                        format!(
                            "an event of the reply is not JSON ({e}): {}",
                            one_line(&data, 120)
                        )
                    })?;
                    if let Some(m) = matching(value, id) {
                        return Ok(Some(m));
                    }
                    data.clear();
                }
                continue;
            }
            if let Some(rest) = line.strip_prefix("data:") {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(rest.strip_prefix(' ').unwrap_or(rest));
            }
            // `event:`, `id:`, `retry:` and `:` comments carry nothing here.
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn responses_are_matched_by_id_in_batches_too() {
        let id = json!(3);
        let r = json!({"jsonrpc": "2.0", "id": 3, "result": {}});
        assert_eq!(matching(r.clone(), &id), Some(r.clone()));
        let batch = json!([{"jsonrpc": "2.0", "method": "x"}, r]);
        assert!(matching(batch, &id).is_some());
        assert!(matching(json!({"jsonrpc": "2.0", "id": 4, "result": {}}), &id).is_none());
        assert!(matching(json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}), &id).is_none());
    }

    #[test]
    fn urls_are_checked() {
        assert!(check_url("http://127.0.0.1:9/mcp").is_ok());
        assert!(check_url("ftp://x/").is_err());
        assert!(check_url("http://u@h/").is_err());
    }
}
