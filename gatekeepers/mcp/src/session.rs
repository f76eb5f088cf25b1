//! An MCP client session over Streamable HTTP: `initialize` (protocol
//! version negotiation), `notifications/initialized`, the `Mcp-Session-Id`
//! and `MCP-Protocol-Version` headers on every later request, and JSON-RPC
//! requests whose failures are sorted into what the wire proves.

use serde_json::{Value, json};

use gatehouse_gatekeeper::http::HttpError;

use crate::wire::{self, Answer, one_line};

/// The protocol revisions this client speaks with the `initialize`
/// handshake, newest first; the first is the one it asks for.
pub const VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// Why a request failed, as far as the client can tell.
#[derive(Debug)]
pub enum Error {
    /// Provably not acted on: never sent, or refused with 401/403.
    NotTaken(String),
    /// The session expired (404 to a request that carried a session id):
    /// the server may or may not have acted on the request.
    Expired(String),
    /// Anything else: the server may have acted.
    Unknown(String),
    /// The server answered with a JSON-RPC error.
    Rpc { code: i64, message: String },
}

impl Error {
    pub fn text(&self) -> String {
        match self {
            Error::NotTaken(m) | Error::Expired(m) | Error::Unknown(m) => m.clone(),
            Error::Rpc { code, message } => {
                format!(
                    "the server answered error {code}: {}",
                    one_line(message, 300)
                )
            }
        }
    }
}

pub struct Session {
    url: String,
    id: Option<String>,
    pub version: String,
    next_id: i64,
}

impl Session {
    /// Open a session with the server at `url`: `initialize`, then
    /// `notifications/initialized`.
    pub fn open(url: &str) -> Result<Session, Error> {
        wire::check_url(url).map_err(Error::NotTaken)?;
        let mut s = Session {
            url: url.to_owned(),
            id: None,
            version: VERSIONS[0].to_owned(),
            next_id: 1,
        };
        let result = s.request(
            "initialize",
            json!({
                "protocolVersion": VERSIONS[0],
                "capabilities": {},
                "clientInfo": {"name": "gatehouse-mcp-gatekeeper", "version": env!("CARGO_PKG_VERSION")},
            }),
        )?;
        let offered = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !VERSIONS.contains(&offered) {
            return Err(Error::NotTaken(format!(
                "the server speaks MCP protocol version {}, which this gatekeeper does not know (it knows {})",
                one_line(offered, 40),
                VERSIONS.join(", ")
            )));
        }
        s.version = offered.to_owned();
        s.notify("notifications/initialized")?;
        Ok(s)
    }

    /// Resume the session `id` the host held from an earlier call (the
    /// setting `held-mcp-session`), at the protocol `version` it
    /// negotiated: no handshake, the next request goes straight out.
    /// `None` for a version this client does not speak.
    pub fn resume(url: &str, version: &str, id: &str) -> Option<Session> {
        wire::check_url(url).ok()?;
        let version = VERSIONS.iter().find(|v| **v == version)?;
        Some(Session {
            url: url.to_owned(),
            id: Some(id.to_owned()),
            version: (*version).to_owned(),
            // Past the handshake: every request carries the version.
            next_id: 2,
        })
    }

    fn headers(&self) -> Vec<(&str, &str)> {
        let mut h = Vec::new();
        if let Some(id) = &self.id {
            h.push(("mcp-session-id", id.as_str()));
        }
        if self.next_id > 1 {
            h.push(("mcp-protocol-version", self.version.as_str()));
        }
        h
    }

    fn notify(&mut self, method: &str) -> Result<(), Error> {
        let body = json!({"jsonrpc": "2.0", "method": method}).to_string();
        let answer = wire::post(&self.url, &self.headers(), body.as_bytes(), None)
            .map_err(|f| transport(f, method))?;
        self.status(&answer, method)
    }

    /// Send one request; its `result`, or why there is none.
    pub fn request(&mut self, method: &str, params: Value) -> Result<Value, Error> {
        let id = json!(self.next_id);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let body = body.to_string();
        let headers = self.headers();
        let answer = wire::post(&self.url, &headers, body.as_bytes(), Some(&id))
            .map_err(|f| transport(f, method))?;
        self.next_id += 1;
        self.status(&answer, method)?;
        if method == "initialize" {
            self.id = answer.session.clone();
        }
        if let Some(broken) = answer.broken {
            return Err(Error::Unknown(format!("{method}: {broken}")));
        }
        let Some(message) = answer.message else {
            return Err(Error::Unknown(format!("{method}: no response")));
        };
        if let Some(e) = message.get("error") {
            return Err(Error::Rpc {
                code: e.get("code").and_then(Value::as_i64).unwrap_or(0),
                message: e
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("(no message)")
                    .to_owned(),
            });
        }
        Ok(message.get("result").cloned().unwrap_or(Value::Null))
    }

    fn status(&self, answer: &Answer, method: &str) -> Result<(), Error> {
        match answer.status {
            200..=299 => Ok(()),
            401 | 403 => Err(Error::NotTaken(format!(
                "{method}: the server refused the credential (HTTP {}); check the operator's secret (`gatehouse secret set`) or reconnect the person's account (`gatehouse account connect`)",
                answer.status
            ))),
            404 if self.id.is_some() => Err(Error::Expired(format!(
                "{method}: the server no longer knows the session (HTTP 404)"
            ))),
            s => Err(Error::Unknown(format!(
                "{method}: the server answered HTTP {s}"
            ))),
        }
    }
}

fn transport(f: HttpError, method: &str) -> Error {
    match f {
        HttpError::NotSent(m) => Error::NotTaken(format!("{method} was not sent: {m}")),
        HttpError::OutcomeUnknown(m) => Error::Unknown(format!("{method}: {m}")),
    }
}
