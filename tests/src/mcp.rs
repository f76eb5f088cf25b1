//! A real MCP server for the tests: `tests/mcp/server.py`, built with the
//! official Python SDK (`mcp`, pinned in tools/langs/requirements-tests.txt and
//! installed by `tools/langs/setup.sh` into the project's venv), serving
//! Streamable HTTP on an ephemeral loopback port. See the script for its
//! tools and its fault switches.

use serde_json::{Value, json};
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct McpServer {
    child: Child,
    port: u16,
}

impl McpServer {
    /// Start the server; requests must carry `Bearer token`. Waits until
    /// it printed its port (it listens before it prints).
    pub fn start(token: &str) -> McpServer {
        let py = crate::langs::tools_dir().join("py/bin/python");
        assert!(
            py.exists(),
            "{} is missing; run `tools/langs/setup.sh` (as .ci/run does) with the same CARGO_TARGET_DIR",
            py.display()
        );
        let script = crate::langs::repo_root().join("tests/mcp/server.py");
        let mut child = Command::new(py)
            .arg(script)
            .arg(token)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("PYTHONDONTWRITEBYTECODE", "1")
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
        McpServer { child, port }
    }

    /// `127.0.0.1:PORT`, for `--allow-host`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The MCP endpoint, for `--set url=`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
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
