//! A real MCP server for the tests: `tests/mcp/server.py`, built with the
//! official Python SDK (`mcp`, pinned in tools/langs/requirements-tests.txt and
//! installed by `tools/langs/setup.sh` into the project's venv), serving
//! Streamable HTTP on an ephemeral loopback port. See the script for its
//! tools and its fault switches.
//!
//! And the other direction: the same SDK's client (`tests/mcp/client.py`,
//! [`McpClient`]) driving `gatehouse mcp serve` over stdio or HTTP
//! ([`McpHttpServe`]), as an agent would.

use serde_json::{Value, json};
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct McpServer {
    child: Child,
    port: u16,
    /// Serving HTTPS (its control endpoints too, so [`McpServer::fault`]
    /// and the logs are for plain servers only).
    tls: bool,
}

impl McpServer {
    /// Start the server; requests must carry `Bearer token`. Waits until
    /// it printed its port (it listens before it prints).
    pub fn start(token: &str) -> McpServer {
        McpServer::launch(token, None)
    }

    /// Start the server over HTTPS with the certificate and key in these
    /// PEM files (for the name `localhost`).
    pub fn start_tls(token: &str, cert: &Path, key: &Path) -> McpServer {
        McpServer::launch(token, Some((cert, key)))
    }

    fn launch(token: &str, tls: Option<(&Path, &Path)>) -> McpServer {
        let py = crate::langs::tools_dir().join("py/bin/python");
        assert!(
            py.exists(),
            "{} is missing; run `tools/langs/setup.sh` (as .ci/run does) with the same CARGO_TARGET_DIR",
            py.display()
        );
        let script = crate::langs::repo_root().join("tests/mcp/server.py");
        let mut command = Command::new(py);
        command
            .arg(script)
            .arg(token)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("PYTHONDONTWRITEBYTECODE", "1");
        if let Some((cert, key)) = tls {
            command.env("MCP_TLS_CERT", cert).env("MCP_TLS_KEY", key);
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the MCP server starts");
        let stdout = child.stdout.take().expect("its stdout");
        let mut lines = BufReader::new(stdout).lines();
        let port = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(p) = line.strip_prefix("PORT ") {
                        break p.trim().parse().expect("a port number");
                    }
                }
                _ => {
                    let _ = child.kill();
                    panic!("the MCP server exited before it printed its port");
                }
            }
        };
        McpServer {
            child,
            port,
            tls: tls.is_some(),
        }
    }

    /// `127.0.0.1:PORT`, for `--allow-host`.
    pub fn host(&self) -> String {
        if self.tls {
            format!("localhost:{}", self.port)
        } else {
            format!("127.0.0.1:{}", self.port)
        }
    }

    /// The MCP endpoint, for `--set url=`.
    pub fn url(&self) -> String {
        if self.tls {
            format!("https://localhost:{}/mcp", self.port)
        } else {
            format!("http://127.0.0.1:{}/mcp", self.port)
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Every JSON-RPC method that arrived, in order, with the session id
    /// it carried: `{"method", "session"}`.
    pub fn methods(&self) -> Vec<Value> {
        let body = self.http("GET", "/methods", "");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("methods {body:?}: {e}"))
    }

    /// How many times a session was set up (`initialize` arrived).
    pub fn initializations(&self) -> usize {
        self.methods()
            .iter()
            .filter(|m| m["method"] == "initialize")
            .count()
    }

    /// Make the next matching request fail (see tests/mcp/server.py).
    pub fn fault(&self, name: &str) {
        self.http("POST", "/control", &json!({"fault": name}).to_string());
    }

    /// Change the annotations of `tag_item` (it becomes destructive).
    pub fn flip(&self) {
        self.http("POST", "/control", &json!({"flip": true}).to_string());
    }

    /// The tool calls the SDK dispatched, in order: `{"tool", "args"}`.
    pub fn calls(&self) -> Vec<Value> {
        let body = self.http("GET", "/log", "");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("log {body:?}: {e}"))
    }

    /// The calls of one tool.
    pub fn calls_of(&self, tool: &str) -> usize {
        self.calls().iter().filter(|c| c["tool"] == tool).count()
    }

    fn http(&self, method: &str, path: &str, body: &str) -> String {
        assert!(
            !self.tls,
            "the test server's controls are for plain-HTTP servers"
        );
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("the MCP server answers");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("a timeout");
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .expect("the request is written");
        let mut reply = String::new();
        s.read_to_string(&mut reply).expect("the reply is read");
        let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
        assert!(head.starts_with("HTTP/1.1 200"), "{method} {path}: {head}");
        body.to_owned()
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The official Python SDK's MCP client (`tests/mcp/client.py`), driving
/// one server the way an agent would: one JSON step in, one JSON answer
/// out. Hermetic: started from an empty environment.
pub struct McpClient {
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    answers: std::sync::mpsc::Receiver<Value>,
    /// The protocol version the session agreed on.
    pub protocol: String,
}

/// How long one step may take before the test fails instead of hanging.
const STEP_TIMEOUT: Duration = Duration::from_secs(120);

impl McpClient {
    /// Connect to `connect` (see tests/mcp/client.py); `Err` holds the
    /// client's one-line account of a connection that failed.
    pub fn connect(connect: &Value) -> Result<McpClient, String> {
        let py = crate::langs::tools_dir().join("py/bin/python");
        assert!(
            py.exists(),
            "{} is missing; run `tools/langs/setup.sh` (as .ci/run does) with the same CARGO_TARGET_DIR",
            py.display()
        );
        let script = crate::langs::repo_root().join("tests/mcp/client.py");
        let scratch = std::env::temp_dir();
        let mut child = Command::new(py)
            .arg(script)
            .arg(connect.to_string())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &scratch)
            .env("LANG", "C.UTF-8")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the MCP client starts");
        let stdout = child.stdout.take().expect("its stdout");
        let (tx, answers) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let v = serde_json::from_str(&line)
                    .unwrap_or_else(|e| json!({"error": format!("not JSON ({e}): {line}")}));
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        let mut client = McpClient {
            child,
            stdin,
            answers,
            protocol: String::new(),
        };
        let first = client.next();
        match first.get("connected").and_then(Value::as_str) {
            Some(p) => {
                client.protocol = p.to_owned();
                Ok(client)
            }
            None => Err(first["error"].as_str().unwrap_or("").to_owned()),
        }
    }

    /// `gatehouse mcp serve --chat CHAT` over stdio, as `person`, on `home`;
    /// the server's stderr goes to `stderr`.
    pub fn stdio(home: &Path, chat: &str, person: &str, stderr: &Path) -> McpClient {
        McpClient::connect(&stdio_connect(home, chat, person, stderr))
            .unwrap_or_else(|e| panic!("the MCP client could not connect over stdio: {e}"))
    }

    /// A Streamable HTTP server at `url`, with this bearer token.
    pub fn http(url: &str, token: Option<&str>) -> Result<McpClient, String> {
        McpClient::connect(&json!({"http": {"url": url, "token": token}}))
    }

    fn next(&mut self) -> Value {
        self.answers.recv_timeout(STEP_TIMEOUT).unwrap_or_else(
            |_| json!({"error": "the MCP client answered nothing (it exited or hung)"}),
        )
    }

    /// One step (see tests/mcp/client.py); its answer.
    pub fn step(&mut self, step: &Value) -> Value {
        let stdin = self.stdin.as_mut().expect("the client is open");
        writeln!(stdin, "{step}").expect("the step is sent");
        stdin.flush().expect("the step is flushed");
        self.next()
    }

    /// `tools/list`: the tools as the SDK parsed them.
    pub fn list(&mut self) -> Vec<Value> {
        let a = self.step(&json!({"list": true}));
        a["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("tools/list failed: {a}"))
            .clone()
    }

    /// `resources/list`: the resources as the SDK parsed them.
    pub fn resources(&mut self) -> Vec<Value> {
        let a = self.step(&json!({"resources": true}));
        a["resources"]
            .as_array()
            .unwrap_or_else(|| panic!("resources/list failed: {a}"))
            .clone()
    }

    /// `resources/read`: the result as the SDK parsed it, or the step's
    /// `{"error"}` when the server refused.
    pub fn read(&mut self, uri: &str) -> Value {
        self.step(&json!({"read": uri}))
    }

    /// `tools/call`: the CallToolResult as the SDK parsed it.
    pub fn call(&mut self, name: &str, arguments: Value) -> Value {
        let a = self.step(&json!({"call": name, "arguments": arguments}));
        a.get("result")
            .unwrap_or_else(|| panic!("tools/call {name} failed: {a}"))
            .clone()
    }
}

impl Drop for McpClient {
    fn drop(&mut self) {
        // Closing stdin ends the script, which closes its session.
        drop(self.stdin.take());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The client's `stdio` connection for `gatehouse mcp serve --chat CHAT`
/// as `person` on `home`: the real binary, with only the environment it
/// needs (the SDK adds PATH and HOME from the client's own, empty one).
pub fn stdio_connect(home: &Path, chat: &str, person: &str, stderr: &Path) -> Value {
    json!({"stdio": {
        "command": crate::cli_binary(),
        "args": ["mcp", "serve", "--chat", chat],
        "env": {
            "GATEHOUSE_HOME": home,
            "GATEHOUSE_USER": person,
            "GATEHOUSE_GATEKEEPER_DEADLINE_MS": "5000",
            "LANG": "C.UTF-8",
        },
        "stderr": stderr,
    }})
}

/// `gatehouse mcp serve --chat CHAT --http 127.0.0.1:0`, as a process of
/// its own; stopped (SIGTERM) when dropped.
pub struct McpHttpServe {
    child: Child,
    /// `http://127.0.0.1:PORT/mcp`.
    pub url: String,
    pub token: String,
}

impl McpHttpServe {
    pub fn start(home: &Path, chat: &str, person: &str) -> McpHttpServe {
        McpHttpServe::start_with(home, chat, person, &[])
    }

    /// [`McpHttpServe::start`] with these environment variables besides.
    pub fn start_with(
        home: &Path,
        chat: &str,
        person: &str,
        env: &[(&str, &std::ffi::OsStr)],
    ) -> McpHttpServe {
        let mut child = crate::cli_command(
            home,
            &["mcp", "serve", "--chat", chat, "--http", "127.0.0.1:0"],
        )
        .env("GATEHOUSE_USER", person)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("gatehouse mcp serve starts");
        let mut lines = BufReader::new(child.stdout.take().expect("its stdout")).lines();
        let (mut url, mut token) = (None, None);
        while url.is_none() || token.is_none() {
            let Some(Ok(line)) = lines.next() else {
                let _ = child.kill();
                panic!("gatehouse mcp serve exited before it printed its address and token");
            };
            if let Some(rest) = line.split(" at ").nth(1) {
                url = rest.split_whitespace().next().map(str::to_owned);
            }
            if let Some(t) = line.strip_prefix("bearer token (shown once): ") {
                token = Some(t.trim().to_owned());
            }
        }
        McpHttpServe {
            child,
            url: url.unwrap_or_default(),
            token: token.unwrap_or_default(),
        }
    }

    /// The server's `127.0.0.1:PORT`.
    pub fn authority(&self) -> String {
        self.url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
            .to_owned()
    }

    /// Stop with SIGTERM; the exit status.
    pub fn stop(mut self) -> std::process::ExitStatus {
        crate::signal(self.child.id(), "TERM");
        self.child.wait().expect("the server exits")
    }
}

impl Drop for McpHttpServe {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One raw HTTP/1.1 request to `authority` (`127.0.0.1:PORT`): the status
/// code and the body.
pub fn raw_http(
    authority: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut s = TcpStream::connect(authority).expect("the server answers");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("a timeout");
    // `host` may be given, to send another one than the address.
    let host = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("host"))
        .map_or(authority, |(_, v)| *v);
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nhost: {host}\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    let headers: Vec<_> = headers
        .iter()
        .filter(|(k, _)| !k.eq_ignore_ascii_case("host"))
        .collect();
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).expect("the request is written");
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, body.to_owned())
}
