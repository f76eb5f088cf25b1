//! The OAuth side of the tests of OAuth accounts: the MCP test server
//! (`tests/mcp/server.py`) as an OAuth resource server that introspects
//! at a real authorization server (the tests' `oidc-provider`, see
//! [`crate::oidc`]), and a person at that server: a small browser with a
//! cookie jar that follows redirects and fills the provider's
//! development login and consent forms.

use crate::oidc::{OidcClient, Provider, ProviderConfig};
use base64::Engine as _;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The resource server's own client at the authorization server (it only
/// introspects).
pub const RS_CLIENT: &str = "mcp-resource-server";
/// Its secret.
pub const RS_SECRET: &str = "rs-secret-4f0e";
/// Who may sign in at the provider.
pub const SUBJECT: &str = "alice-at-idp";

/// An authorization server for an MCP resource on 127.0.0.1: open
/// dynamic client registration, refresh tokens, introspection, access
/// tokens for any loopback resource with scope `mcp` living
/// `access_token_ttl` seconds, and the test controls.
pub fn authorization_server(access_token_ttl: u64) -> Provider {
    Provider::start_with(
        ProviderConfig {
            host: "localhost".into(),
            clients: vec![OidcClient {
                id: RS_CLIENT.into(),
                secret: Some(RS_SECRET.into()),
                redirect_uris: vec![],
            }],
            subjects: vec![SUBJECT.into()],
        },
        json!({
            "registration": true,
            "refresh_tokens": true,
            "introspection": true,
            "resource_server": {
                "prefix": "http://127.0.0.1:",
                "scope": "mcp",
                "access_token_ttl": access_token_ttl,
            },
            "test_controls": true,
        }),
    )
}

/// What the authorization server's token endpoint did: `{grant_type, ok}`
/// per request, and the refresh tokens it issued.
pub fn server_log(issuer: &str) -> Value {
    let (status, _, body) = request("GET", &format!("{issuer}/__test/log"), &[], None);
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("the log is JSON")
}

/// The grants of the token endpoint of type `grant_type` that succeeded
/// (`ok`) or failed.
pub fn grants(issuer: &str, grant_type: &str, ok: bool) -> usize {
    server_log(issuer)["grants"]
        .as_array()
        .expect("grants")
        .iter()
        .filter(|g| g["grant_type"] == grant_type && g["ok"] == ok)
        .count()
}

/// End every grant the server made so far: their tokens stop working.
pub fn revoke_grants(issuer: &str) {
    let (status, _, body) = request(
        "POST",
        &format!("{issuer}/__test/revoke-grants"),
        &[],
        Some(""),
    );
    assert_eq!(status, 200, "{body}");
}

/// What the server's introspection says of `token`, asked as the
/// resource server.
pub fn introspect(issuer: &str, token: &str) -> Value {
    let basic =
        base64::engine::general_purpose::STANDARD.encode(format!("{RS_CLIENT}:{RS_SECRET}"));
    let body = format!("token={}", form_escape(token));
    let (status, _, answer) = request(
        "POST",
        &format!("{issuer}/token/introspection"),
        &[
            ("authorization", &format!("Basic {basic}")),
            ("content-type", "application/x-www-form-urlencoded"),
        ],
        Some(&body),
    );
    assert_eq!(status, 200, "{answer}");
    serde_json::from_str(&answer).expect("introspection answers JSON")
}

/// `tests/mcp/server.py --oauth`: an MCP server requiring tokens from
/// `issuer`, which also takes `operator` (the installation's own
/// credential, for describing the server).
pub struct OAuthMcpServer {
    child: Child,
    port: u16,
}

impl OAuthMcpServer {
    /// Start it and wait until it listens.
    pub fn start(issuer: &str, operator: &str) -> OAuthMcpServer {
        let py = crate::langs::tools_dir().join("py/bin/python");
        assert!(
            py.exists(),
            "{} is missing; run `tools/langs/setup.sh` (as .ci/run does) with the same CARGO_TARGET_DIR",
            py.display()
        );
        let mut child = Command::new(py)
            .arg(crate::langs::repo_root().join("tests/mcp/server.py"))
            .args(["--oauth", issuer, RS_CLIENT, RS_SECRET, operator])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the MCP server starts");
        let stdout = child.stdout.take().expect("its stdout");
        let port = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find_map(|l| {
                l.strip_prefix("PORT ")
                    .map(|p| p.trim().parse().expect("a port"))
            });
        let Some(port) = port else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the OAuth MCP server exited before it printed its port");
        };
        OAuthMcpServer { child, port }
    }

    /// `127.0.0.1:PORT`, for the gatekeeper's allowed host.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The MCP endpoint (the resource), for `--set url=`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// The bearer tokens that arrived, in order.
    pub fn tokens(&self) -> Vec<String> {
        let (status, _, body) =
            request("GET", &format!("http://{}/tokens", self.host()), &[], None);
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).expect("the token log is JSON")
    }

    /// The tool calls the SDK dispatched: `{"tool", "args"}`.
    pub fn calls(&self) -> Vec<Value> {
        let (status, _, body) = request("GET", &format!("http://{}/log", self.host()), &[], None);
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).expect("the call log is JSON")
    }
}

impl Drop for OAuthMcpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A person's browser, as far as the provider's pages need one: cookies
/// (one jar: every test server is on this machine), redirects followed,
/// forms submitted.
#[derive(Default)]
pub struct Person {
    cookies: BTreeMap<String, String>,
}

impl Person {
    /// A cookie this browser already holds (set by another site's answer
    /// the test read itself).
    pub fn with_cookie(mut self, name: &str, value: &str) -> Person {
        self.cookies.insert(name.to_owned(), value.to_owned());
        self
    }

    /// Open `url` (an authorization URL), sign in as `subject`, consent,
    /// and follow the redirects until they leave `issuer`; then open
    /// that last URL too (the client's redirect URI) and return it with
    /// the status and body the client answered.
    pub fn authorize(&mut self, url: &str, issuer: &str, subject: &str) -> (String, u16, String) {
        let mut at = url.to_owned();
        let mut form: Option<Vec<(String, String)>> = None;
        for _ in 0..20 {
            if !at.starts_with(issuer) {
                let (status, _, body) = self.go("GET", &at, None);
                return (at, status, body);
            }
            let (status, headers, body) = match form.take() {
                Some(fields) => self.go("POST", &at, Some(&fields)),
                None => self.go("GET", &at, None),
            };
            if (300..400).contains(&status) {
                let location = header(&headers, "location").expect("a redirect names where");
                at = absolute(&at, &location);
                continue;
            }
            assert_eq!(status, 200, "{at}: {body}");
            let action = form_action(&body).unwrap_or_else(|| panic!("no form at {at}: {body}"));
            let mut fields = hidden_inputs(&body);
            if body.contains("name=\"login\"") {
                fields.push(("login".into(), subject.into()));
                fields.push(("password".into(), "any password".into()));
            }
            at = absolute(&at, &action);
            form = Some(fields);
        }
        panic!("more than 20 steps at the provider, last at {at}");
    }

    fn go(
        &mut self,
        method: &str,
        url: &str,
        form: Option<&[(String, String)]>,
    ) -> (u16, Vec<(String, String)>, String) {
        let body = form.map(|f| {
            f.iter()
                .map(|(k, v)| format!("{}={}", form_escape(k), form_escape(v)))
                .collect::<Vec<_>>()
                .join("&")
        });
        let cookie = self
            .cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ");
        let mut headers = vec![];
        if !cookie.is_empty() {
            headers.push(("cookie", cookie.as_str()));
        }
        if body.is_some() {
            headers.push(("content-type", "application/x-www-form-urlencoded"));
        }
        let (status, got, answer) = request(method, url, &headers, body.as_deref());
        for (k, v) in &got {
            if k == "set-cookie"
                && let Some((pair, _)) = v.split_once(';').or(Some((v.as_str(), "")))
                && let Some((name, value)) = pair.split_once('=')
            {
                if value.is_empty() {
                    self.cookies.remove(name.trim());
                } else {
                    self.cookies
                        .insert(name.trim().to_owned(), value.trim().to_owned());
                }
            }
        }
        (status, got, answer)
    }
}

fn header(headers: &[(String, String)], name: &str) -> Option<String> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
}

/// `location` made absolute against `base` (the provider's redirects
/// are absolute or absolute paths).
fn absolute(base: &str, location: &str) -> String {
    if location.starts_with("http://") || location.starts_with("https://") {
        return location.to_owned();
    }
    assert!(
        location.starts_with('/'),
        "a relative location {location:?}"
    );
    let (scheme, rest) = base.split_once("://").expect("an absolute base");
    let authority = rest.split('/').next().unwrap_or(rest);
    format!("{scheme}://{authority}{location}")
}

fn form_action(html: &str) -> Option<String> {
    let at = html.find("<form")?;
    let rest = &html[at..];
    let a = rest.find("action=\"")? + "action=\"".len();
    let end = rest[a..].find('"')?;
    Some(rest[a..a + end].replace("&amp;", "&"))
}

fn hidden_inputs(html: &str) -> Vec<(String, String)> {
    let mut out = vec![];
    for piece in html.split("<input").skip(1) {
        let tag = piece.split('>').next().unwrap_or("");
        if !tag.contains("type=\"hidden\"") {
            continue;
        }
        let attr = |name: &str| {
            let key = format!("{name}=\"");
            let a = tag.find(&key)? + key.len();
            let end = tag[a..].find('"')?;
            Some(tag[a..a + end].to_owned())
        };
        if let (Some(n), Some(v)) = (attr("name"), attr("value")) {
            out.push((n, v));
        }
    }
    out
}

fn form_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// One HTTP/1.0 request (so the answer is never chunked, and ends when
/// the connection does): status, headers (names lower-cased), body.
pub fn request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> (u16, Vec<(String, String)>, String) {
    let rest = url
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("plain http on loopback only: {url}"));
    let (authority, target) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let target = target.split('#').next().unwrap_or(target);
    let mut s = TcpStream::connect(authority).unwrap_or_else(|e| panic!("{url}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("a timeout");
    let mut head = format!("{method} {target} HTTP/1.0\r\nhost: {authority}\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    let body = body.unwrap_or("");
    if method == "POST" {
        head.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())
        .expect("the request is written");
    s.write_all(body.as_bytes()).expect("the body is written");
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).expect("the answer is read");
    let reply = String::from_utf8_lossy(&reply).into_owned();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("{url}: no status in {head:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, body.to_owned())
}
