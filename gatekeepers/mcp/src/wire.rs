//! One Streamable HTTP exchange over the SDK's `wasi:http` client: POST a
//! JSON-RPC message, and read the answer whether it comes as
//! `application/json` or as a `text/event-stream` (taking the response
//! whose id matches, and stopping there: a stream that stays open after it
//! is not waited for).
//!
//! It says only what the wire showed: whether the request provably never
//! left ([`HttpError::NotSent`]), or what came back. What that means for
//! the call (retryable or not) is decided in `session.rs`.

use gatehouse_gatekeeper::http::{HttpError, Incoming, Request};
pub use gatehouse_gatekeeper::text::one_line;
use serde_json::Value;

/// Replies larger than this are treated as broken (a tool list is cut into
/// pages long before; the kernel's manifest cap is 1 MiB).
pub const MAX_REPLY: usize = 2 << 20;

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

/// Checks the url setting without sending anything.
pub fn check_url(url: &str) -> Result<(), String> {
    gatehouse_gatekeeper::http::check_url(url)
        .map_err(|e| format!("the url setting is not usable: {e}"))
}

/// POSTs `body` (a JSON-RPC message) to `url` with `headers`, and reads the
/// reply; `awaited` is the id of the response to look for (`None` for a
/// notification, whose reply body is read and dropped).
pub fn post(
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    awaited: Option<&Value>,
) -> Result<Answer, HttpError> {
    let mut request = Request::post(url).header("accept", "application/json, text/event-stream");
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let mut incoming = request.json_text(body).open()?;
    let status = incoming.status();
    let content_type = incoming
        .header("content-type")
        .unwrap_or_default()
        .to_ascii_lowercase();
    let mut answer = Answer {
        status,
        session: incoming.header("mcp-session-id"),
        message: None,
        broken: None,
    };
    let read = match awaited {
        // Only a successful answer to a request is read as the protocol;
        // other bodies are read (capped) and dropped.
        Some(id) if (200..300).contains(&status) => {
            if content_type.starts_with("text/event-stream") {
                read_events(&mut incoming, id)
            } else {
                read_json(&mut incoming, id)
            }
        }
        _ => drain(&mut incoming).map(|()| None),
    };
    drop(incoming);
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

/// Read up to [`MAX_REPLY`] bytes; `Ok(None)` at the end of the body.
fn chunk(stream: &mut Incoming, total: &mut usize) -> Result<Option<Vec<u8>>, String> {
    match stream.read() {
        Ok(Some(c)) => {
            *total += c.len();
            if *total > MAX_REPLY {
                return Err(format!(
                    "the reply is larger than {MAX_REPLY} bytes, the most this gatekeeper reads"
                ));
            }
            Ok(Some(c))
        }
        Ok(None) => Ok(None),
        Err(e) => Err(format!("reading the reply failed: {e}")),
    }
}

fn drain(stream: &mut Incoming) -> Result<(), String> {
    let mut total = 0;
    while chunk(stream, &mut total)?.is_some() {}
    Ok(())
}

/// The JSON-RPC response to `id` in a JSON body (one message or a batch).
fn read_json(stream: &mut Incoming, id: &Value) -> Result<Option<Value>, String> {
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
fn read_events(stream: &mut Incoming, id: &Value) -> Result<Option<Value>, String> {
    for data in stream.events(MAX_REPLY) {
        let data = data.map_err(|e| format!("reading the reply failed: {e}"))?;
        let value: Value = serde_json::from_str(&data).map_err(|e| {
            format!(
                "an event of the reply is not JSON ({e}): {}",
                one_line(&data, 120)
            )
        })?;
        if let Some(m) = matching(value, id) {
            return Ok(Some(m));
        }
    }
    Ok(None)
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
