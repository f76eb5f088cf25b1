//! `gatehouse mcp serve`: any MCP client through the gate (SPEC M2).
//!
//! Owns the MCP surface: the tools of one chat offered to an external agent
//! over stdio or Streamable HTTP (loopback only, behind a bearer token),
//! and the translation of the kernel's answers into MCP results. It is one
//! more caller of the kernel and holds no policy: every request asks
//! [`crate::Person::external_turn`] for a turn (who may use the chat at all is
//! `crate::access`'s rule, applied there), lists through
//! [`Kernel::introduced_tools`], and calls through [`Kernel::call`] and the
//! kernel's `action-result`, exactly as a gadget does. Reads therefore run
//! and are recorded by the kernel (O1); writes are staged and answered at
//! once with a non-error `pending #N` result; lockdown, forward exclusion,
//! two-key auto-approval and the web inbox apply unchanged.
//!
//! May not: reach the store or the runtime, decide anything, or offer a
//! way to approve (an agent never decides its own writes).
//!
//! What a tool promises: its `title` (sanitised as a name), and an
//! `outputSchema` that says the shape of a successful answer. A read
//! offers the gatekeeper's own output schema, and its answer is checked
//! against it before it is handed over (a non-conforming one becomes an
//! error); a write offers [`pending_schema`], the envelope every held
//! write answers with. No tool is offered as a task (`execution`): this
//! surface implements none, and without the field a client reads
//! `forbidden`.
//!
//! Faces (MCP Apps): each installed gadget with a face is offered as a
//! `ui://gatehouse/GADGET` resource (`text/html;profile=mcp-app`), linked
//! from a tool `GADGET.face` that an MCP host calls to show it; each of the
//! page's functions is a tool `GADGET.FUNCTION` meant for the page alone
//! (`_meta.ui.visibility: ["app"]`). A call of one runs
//! [`crate::Person::face_call`], a turn of the person this server acts for, the
//! same call the web inbox makes: the page reaches nothing the gate does
//! not let through. A gadget whose name holds `__` or is not a valid tool
//! name is not offered, so a face's tool never looks like an introduced
//! one.
//!
//! Naming: an introduced tool is offered as `KEY__tool` (the chat's key,
//! two underscores, the gatekeeper's tool name), the separator agents'
//! tool-name rules allow. The poll tool, [`POLL_TOOL`], has no `__`, so no
//! introduced tool can take its name. A tool whose offered name would not
//! be a valid MCP tool name, or would not split back into its key and tool,
//! is not offered (a warning on stderr says which).

use crate::classify;
use crate::kernel::{ActionStatus, CallError, CallOutcome, Kernel, PendingAction};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ResultType, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Value, json};
use std::net::SocketAddr;

/// The tool that polls an action's result.
pub const POLL_TOOL: &str = "gatehouse_action_result";
/// Between a chat's key and a tool's name in an offered tool's name.
pub const SEPARATOR: &str = "__";
/// Between a gadget's name and a function of its face in a face's tool.
pub const FACE_SEPARATOR: char = '.';
/// The function name of the tool that shows a face (`GADGET.face`).
pub const FACE_OPENER: &str = crate::face::RESERVED;
/// A face's resource, `ui://gatehouse/GADGET`.
pub const FACE_URI_PREFIX: &str = "ui://gatehouse/";
/// The MIME type MCP Apps reads as a page to render.
pub const FACE_MIME: &str = "text/html;profile=mcp-app";

/// The MCP server for one chat, acting for one person. Cheap to clone.
#[derive(Clone)]
pub struct Gate {
    kernel: Kernel,
    chat: String,
    person: String,
}

impl Gate {
    /// Check that `person` may use `chat` now (the answer every request
    /// will get), then make the server.
    pub async fn open(kernel: Kernel, chat: &str, person: &str) -> anyhow::Result<Gate> {
        kernel.person(person).external_turn(chat).await?;
        Ok(Gate {
            kernel,
            chat: chat.to_owned(),
            person: person.to_owned(),
        })
    }

    /// The tools offered now: the chat's granted tools, then the poll tool.
    pub async fn tools(&self) -> anyhow::Result<Vec<Tool>> {
        let turn = self
            .kernel
            .person(&self.person)
            .external_turn(&self.chat)
            .await?;
        let mut tools = Vec::new();
        for (key, tool) in self.kernel.introduced_tools(&turn).await? {
            match offered(&key, &tool) {
                Ok(t) => tools.push(t),
                Err(why) => tracing::warn!(
                    key = %key,
                    tool = %crate::prompt::inline(&tool.name),
                    "not offered over MCP: {why}"
                ),
            }
        }
        tools.push(poll_tool());
        for face in self.offered_faces().await? {
            tools.extend(face_tools(&face));
        }
        Ok(tools)
    }

    /// The faces offered: installed gadgets with a face whose names make
    /// valid tool names of their own (see the module's naming).
    async fn offered_faces(
        &self,
    ) -> anyhow::Result<Vec<(String, std::sync::Arc<crate::face::Page>)>> {
        let mut out = Vec::new();
        for listed in self.kernel.faces().await? {
            let name = &listed.gadget;
            let valid = !name.contains(SEPARATOR)
                && name.len() + 1 + crate::face::MAX_FUNCTION_NAME <= 128
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
            if !valid {
                tracing::warn!(
                    gadget = %crate::prompt::inline(name),
                    "face not offered over MCP: the gadget's name does not make a tool name of its own (letters, digits, '_', '-', no '__')"
                );
                continue;
            }
            if let Some(page) = self.kernel.face(name).await? {
                out.push((name.clone(), page));
            }
        }
        Ok(out)
    }

    /// The faces as MCP Apps resources.
    pub async fn resources(&self) -> anyhow::Result<Vec<Value>> {
        self.kernel
            .person(&self.person)
            .external_turn(&self.chat)
            .await?;
        Ok(self
            .offered_faces()
            .await?
            .into_iter()
            .map(|(gadget, page)| {
                json!({
                    "uri": format!("{FACE_URI_PREFIX}{gadget}"),
                    "name": gadget,
                    "title": page.title,
                    "description": format!("The face of gadget {gadget}: each of its calls is a turn of yours in chat {}, gated like any other.", self.chat),
                    "mimeType": FACE_MIME,
                })
            })
            .collect())
    }

    /// A face's page, as an MCP Apps resource: the host renders it in a
    /// sandbox; its `_meta.ui.csp` asks for no network at all.
    pub async fn resource(&self, uri: &str) -> anyhow::Result<Value> {
        self.kernel
            .person(&self.person)
            .external_turn(&self.chat)
            .await?;
        let gadget = uri.strip_prefix(FACE_URI_PREFIX).unwrap_or_default();
        let Some((_, page)) = self
            .offered_faces()
            .await?
            .into_iter()
            .find(|(g, _)| g == gadget)
        else {
            anyhow::bail!(
                "no resource {}: resources/list lists the faces offered",
                crate::prompt::as_given(uri)
            );
        };
        Ok(json!({
            "resultType": "complete",
            "contents": [{
                "uri": uri,
                "mimeType": FACE_MIME,
                "text": page.html,
                "_meta": {"ui": {"csp": {"connectDomains": [], "resourceDomains": []}, "prefersBorder": true}},
            }]
        }))
    }

    /// A call of a face's tool (`GADGET.face` or `GADGET.FUNCTION`).
    async fn face_call(&self, gadget: &str, function: &str, args: &JsonObject) -> CallToolResult {
        if function == FACE_OPENER {
            return match self.kernel.face(gadget).await {
                Ok(Some(page)) => CallToolResult::success(vec![ContentBlock::text(format!(
                    "{} (the face of gadget {gadget}) is shown; each of its calls is a turn of {} in chat {}, and its writes wait for a decision.",
                    page.title, self.person, self.chat
                ))]),
                Ok(None) => error("unknown-tool", &format!("gadget {gadget:?} has no face")),
                Err(e) => error("unknown-tool", &one_line(&e)),
            };
        }
        let args = Value::Object(args.clone()).to_string();
        let answer = match self
            .kernel
            .person(&self.person)
            .face_call(gadget, &self.chat, function, &args)
            .await
        {
            Ok(a) => a,
            Err(e) => return error("refused", &one_line(&e)),
        };
        let held: Vec<String> = answer
            .staged
            .iter()
            .map(|id| {
                format!("pending #{id}: staged, nothing sent; a person decides it in the inbox")
            })
            .collect();
        match answer.output {
            Ok(text) => {
                let value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                let mut content = vec![ContentBlock::text(text)];
                content.extend(held.into_iter().map(ContentBlock::text));
                let mut r = CallToolResult::success(content);
                if value.is_object() {
                    r.structured_content = Some(value);
                }
                r
            }
            Err(why) => {
                let mut content = vec![ContentBlock::text(crate::prompt::one_line(&why))];
                content.extend(held.into_iter().map(ContentBlock::text));
                CallToolResult::error(content)
            }
        }
    }

    /// Call an offered tool; every answer is a result the agent reads.
    pub async fn call(&self, name: &str, args: Option<JsonObject>) -> CallToolResult {
        let turn = match self
            .kernel
            .person(&self.person)
            .external_turn(&self.chat)
            .await
        {
            Ok(t) => t,
            Err(e) => return error("refused", &one_line(&e)),
        };
        let args = args.unwrap_or_default();
        if name == POLL_TOOL {
            let Some(id) = args.get("id").and_then(Value::as_u64) else {
                return error(
                    "invalid-args",
                    &format!(
                        "{POLL_TOOL} needs {{\"id\": N}}, N the number in a `pending #N` answer"
                    ),
                );
            };
            return match self.kernel.action_result(&turn, id).await {
                Ok(Ok(status)) => polled(id, status),
                Ok(Err(e)) => refused(&e),
                Err(e) => error("internal", &one_line(&e)),
            };
        }
        if !name.contains(SEPARATOR)
            && let Some((gadget, function)) = name.split_once(FACE_SEPARATOR)
        {
            return self.face_call(gadget, function, &args).await;
        }
        let Some((key, tool)) = name.split_once(SEPARATOR) else {
            return error(
                "unknown-tool",
                &format!(
                    "no tool {:?} in chat {:?}: tools are named KEY{SEPARATOR}TOOL; tools/list lists them",
                    crate::prompt::as_given(name),
                    self.chat
                ),
            );
        };
        let args = Value::Object(args).to_string();
        match self.kernel.call(&turn, key, tool, args).await {
            Ok(Ok(CallOutcome::Done(result))) => self.conforming(&turn, key, tool, &result).await,
            Ok(Ok(CallOutcome::Pending(p))) => pending(&p),
            Ok(Err(e)) => refused(&e),
            Err(e) => error("internal", &one_line(&e)),
        }
    }

    /// A read's answer, checked against the output schema its listing
    /// promised: an answer the client was told the shape of either has
    /// that shape or is an error (the read itself happened and is
    /// recorded; only the hand-over is refused). An error answer promises
    /// no shape and passes as it is.
    async fn conforming(
        &self,
        turn: &crate::turn::Turn,
        key: &str,
        tool: &str,
        result: &str,
    ) -> CallToolResult {
        let r = service_result(result);
        if r.is_error == Some(true) {
            return r;
        }
        let entry = match self.kernel.resolve(turn, key).await {
            Ok(Ok(binding)) => binding.gatekeeper().manifest.tool(tool).cloned(),
            Ok(Err(e)) => return refused(&e),
            Err(e) => return error("internal", &one_line(&e)),
        };
        let Some(schema) = entry.as_ref().and_then(output_schema) else {
            return r;
        };
        let checked = match &r.structured_content {
            Some(structured) => crate::kernel::check_output(&schema.to_string(), structured),
            None => Err("the result has no structured content".to_owned()),
        };
        match checked {
            Ok(()) => r,
            Err(why) => error(
                "service",
                &format!(
                    "{key}{SEPARATOR}{tool} answered, but not in the shape its output schema declares, so the answer was withheld: {why}"
                ),
            ),
        }
    }
}

impl ServerHandler for Gate {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("gatehouse", env!("CARGO_PKG_VERSION")))
        .with_instructions(format!(
            "The tools of Gatehouse chat {chat}, used as {person}. Reads run at once. \
                 A write is held for a person's decision: it answers `pending #N` at once, and \
                 nothing has been sent until a person approves it. Do not repeat a pending \
                 write; poll it with {POLL_TOOL} and {{\"id\": N}}.",
            chat = self.chat,
            person = self.person
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        match self.tools().await {
            Ok(tools) => Ok(ListToolsResult::with_all_items(tools)),
            Err(e) => Err(McpError::invalid_request(one_line(&e), None)),
        }
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, McpError> {
        let listed = self
            .resources()
            .await
            .map_err(|e| McpError::invalid_request(one_line(&e), None))?;
        let resources = serde_json::from_value(Value::Array(listed))
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        Ok(rmcp::model::ListResourcesResult::with_all_items(resources))
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, McpError> {
        let read = self
            .resource(&request.uri)
            .await
            .map_err(|e| McpError::resource_not_found(one_line(&e), None))?;
        let result: rmcp::model::ReadResourceResult = serde_json::from_value(read)
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        Ok(result.into())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        Ok(self.call(&request.name, request.arguments).await.into())
    }
}

/// Serve `gate` over stdin and stdout until the client closes them (or
/// `stop` fires). Stdout carries JSON-RPC only; logs go to stderr.
pub async fn serve_stdio(gate: Gate, stop: impl Future<Output = ()>) -> anyhow::Result<()> {
    use rmcp::ServiceExt as _;
    let running = gate
        .serve(rmcp::transport::stdio_pipes())
        .await
        .map_err(|e| anyhow::anyhow!("the MCP client did not initialize: {e}"))?;
    let cancel = running.cancellation_token();
    tokio::select! {
        r = running.waiting() => { r.map_err(|e| anyhow::anyhow!("the MCP session stopped unexpectedly: {e}"))?; }
        _ = stop => cancel.cancel(),
    }
    Ok(())
}

/// `--http ADDR`: a loopback address (`127.0.0.1:PORT`, `[::1]:PORT` or
/// `localhost:PORT`; port 0 picks a free one). Anything else is refused:
/// the surface is never reachable from another machine.
pub fn parse_http_addr(s: &str) -> anyhow::Result<SocketAddr> {
    let s = s.trim();
    let addr = match s.strip_prefix("localhost:") {
        Some(port) => port
            .parse::<u16>()
            .ok()
            .map(|p| SocketAddr::from(([127, 0, 0, 1], p))),
        None => s.parse::<SocketAddr>().ok(),
    };
    match addr {
        Some(a) if a.ip().is_loopback() => Ok(a),
        Some(a) => anyhow::bail!(
            "--http {a} is not a loopback address; the MCP surface listens only on this machine (use 127.0.0.1:PORT)"
        ),
        None => anyhow::bail!(
            "--http {:?} is not an address like 127.0.0.1:8338 (port 0 picks a free one)",
            crate::prompt::inline(s)
        ),
    }
}

/// A running Streamable HTTP server: `POST/GET/DELETE /mcp`, each request
/// with `Authorization: Bearer TOKEN` or answered 401.
pub struct HttpServer {
    addr: SocketAddr,
    token: String,
    sessions: tokio_util::sync::CancellationToken,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl HttpServer {
    /// The MCP endpoint, `http://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// The bearer token every request must carry (generated at start).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Serve until the server fails (or is stopped from elsewhere).
    pub async fn finished(&mut self) -> anyhow::Result<()> {
        match self.task.as_mut() {
            Some(task) => {
                let r = task.await;
                self.task = None;
                Ok(r.map_err(|e| anyhow::anyhow!("the MCP server task stopped: {e}"))??)
            }
            None => Ok(()),
        }
    }

    /// Close the event streams, stop accepting, let calls in flight finish.
    pub async fn stop(mut self) {
        self.sessions.cancel();
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.sessions.cancel();
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Bind `addr` (loopback, checked by [`parse_http_addr`]) and serve `gate`
/// over Streamable HTTP with a fresh bearer token.
pub async fn start_http(gate: Gate, addr: SocketAddr) -> anyhow::Result<HttpServer> {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    anyhow::ensure!(
        addr.ip().is_loopback(),
        "the MCP surface listens only on loopback"
    );
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        anyhow::anyhow!(
            "cannot listen on {addr}: {e} (is another server using it? port 0 picks a free one)"
        )
    })?;
    let addr = listener.local_addr()?;
    let token = crate::kernel::random_hex(32)?;
    let sessions = tokio_util::sync::CancellationToken::new();
    let port = addr.port();
    // Only this server's own loopback names (a DNS-rebinding page gets
    // nothing), and no browser origin at all: MCP clients send none.
    let hosts = [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
    ];
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .enforce_origin_validation()
        .with_cancellation_token(sessions.clone());
    let service = StreamableHttpService::new(
        move || Ok(gate.clone()),
        LocalSessionManager::default().into(),
        config,
    );
    let expected = std::sync::Arc::new(format!("Bearer {token}"));
    let app = axum::Router::new()
        .route_service("/mcp", service)
        .layer(axum::middleware::from_fn(move |req, next| {
            bearer(expected.clone(), req, next)
        }));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(crate::web::serve_router(
        listener,
        app,
        crate::web::Config::default(),
        rx,
    ));
    Ok(HttpServer {
        addr,
        token,
        sessions,
        shutdown: Some(tx),
        task: Some(task),
    })
}

/// Answer 401 unless the request carries the bearer token, compared in
/// constant time (a timing difference never reveals how much matched).
async fn bearer(
    expected: std::sync::Arc<String>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse as _;
    use subtle::ConstantTimeEq as _;
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes())
        .unwrap_or_default();
    if bool::from(given.ct_eq(expected.as_bytes())) {
        return next.run(req).await;
    }
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        "a bearer token is required: the one `gatehouse mcp serve --http` printed when it started\n",
    )
        .into_response()
}

/// The tools of `gadget`'s face: the one that shows it, and one per
/// function, for the page alone.
fn face_tools((gadget, page): &(String, std::sync::Arc<crate::face::Page>)) -> Vec<Tool> {
    let uri = format!("{FACE_URI_PREFIX}{gadget}");
    let opener = json!({
        "name": format!("{gadget}{FACE_SEPARATOR}{FACE_OPENER}"),
        "title": page.title,
        "description": format!("Show {} (the face of gadget {gadget}) to the person.", page.title),
        "inputSchema": {"type": "object"},
        "_meta": {"ui": {"resourceUri": uri}, "ui/resourceUri": uri},
    });
    let functions = page.functions.iter().map(|f| {
        json!({
            "name": format!("{gadget}{FACE_SEPARATOR}{f}"),
            "description": format!("{f} of the face of gadget {gadget}: a turn of the person, gated like any other."),
            "inputSchema": {"type": "object"},
            "_meta": {"ui": {"resourceUri": uri, "visibility": ["app"]}},
        })
    });
    std::iter::once(opener)
        .chain(functions)
        .filter_map(|t| serde_json::from_value(t).ok())
        .collect()
}

/// The MCP tool for `key`'s `tool`, or why it is not offered.
fn offered(key: &str, tool: &classify::Tool) -> Result<Tool, String> {
    let name = format!("{key}{SEPARATOR}{}", tool.name);
    let valid = name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !valid {
        return Err(
            "its name is not a valid MCP tool name (1-128 letters, digits, '_', '-', '.')".into(),
        );
    }
    if name.split_once(SEPARATOR) != Some((key, tool.name.as_str())) {
        return Err(format!(
            "{name} would not split back into key {key} and its tool (the key contains or ends with '_'); introduce it under another key"
        ));
    }
    let schema: Value = serde_json::from_str(&tool.input_schema)
        .map_err(|e| format!("its input schema is not JSON: {e}"))?;
    if !schema.is_object() {
        return Err("its input schema is not a JSON object".into());
    }
    let a = &tool.annotations;
    let mut annotations = serde_json::Map::new();
    for (hint, value) in [
        ("readOnlyHint", a.read_only),
        ("destructiveHint", a.destructive),
        ("idempotentHint", a.idempotent),
        ("openWorldHint", a.open_world),
    ] {
        if let Some(v) = value {
            annotations.insert(hint.into(), Value::Bool(v));
        }
    }
    let mut t = json!({"name": name, "inputSchema": schema});
    if !tool.description.is_empty() {
        t["description"] = Value::String(tool.description.clone());
    }
    // A title is a name people see: one plain line, like every name the
    // kernel shows (R1).
    if let Some(title) = tool.title.as_deref().filter(|t| !t.trim().is_empty()) {
        t["title"] = Value::String(crate::prompt::inline(title));
    }
    if let Some(schema) = output_schema(tool) {
        t["outputSchema"] = schema;
    } else if tool.output_schema.is_some() {
        return Err("its output schema is not a JSON Schema object".into());
    }
    if !annotations.is_empty() {
        t["annotations"] = Value::Object(annotations);
    }
    serde_json::from_value(t).map_err(|e| format!("it is not a valid MCP tool: {e}"))
}

/// The output schema `tool` is offered with: for a read, the gatekeeper's
/// own (when it is a JSON object); for an action, whatever the gatekeeper
/// declared, the envelope of a held write, since that is what a call
/// answers (the service's own answer comes later, through the poll).
fn output_schema(tool: &classify::Tool) -> Option<Value> {
    match classify::kind(&tool.annotations) {
        classify::Kind::Action => Some(pending_schema()),
        classify::Kind::Read => tool
            .output_schema
            .as_deref()
            .and_then(|s| serde_json::from_str::<Value>(s).ok())
            .filter(Value::is_object),
    }
}

/// The structured content of every held write ([`pending`]).
pub fn pending_schema() -> Value {
    json!({
        "type": "object",
        "description": "A write held for a person's decision: nothing has been sent. Poll it with the poll tool and these arguments.",
        "properties": {
            "action_id": {"type": "integer", "minimum": 1},
            "state": {"const": "pending"},
            "sent": {"const": false},
            "await_decision": {"type": "boolean"},
            "provisional": {"type": ["string", "null"], "description": "the service's own forecast of the effect, when it can simulate; not yet real"},
            "poll": {
                "type": "object",
                "properties": {
                    "tool": {"const": POLL_TOOL},
                    "arguments": {
                        "type": "object",
                        "properties": {"id": {"type": "integer", "minimum": 1}},
                        "required": ["id"]
                    }
                },
                "required": ["tool", "arguments"]
            }
        },
        "required": ["action_id", "state", "sent", "await_decision", "provisional", "poll"]
    })
}

fn poll_tool() -> Tool {
    let t = json!({
        "name": POLL_TOOL,
        "description": "The result of an action of this chat. A write answers `pending #N` at once and \
            waits for a person; pass N as id. Answers: pending (nobody decided yet, nothing was sent), \
            applied (with the service's answer), rejected or expired (never sent), failed (with why).",
        "inputSchema": {
            "type": "object",
            "properties": {"id": {"type": "integer", "minimum": 1, "description": "N in `pending #N`"}},
            "required": ["id"],
            "additionalProperties": false
        },
        "annotations": {"readOnlyHint": true, "destructiveHint": false, "openWorldHint": false}
    });
    serde_json::from_value(t).unwrap_or_else(|_| Tool::default())
}

/// A service's answer as MCP gives it back (the `mcp` gatekeeper hands
/// over `content`, `structuredContent` and `isError` unchanged); any other
/// gatekeeper's JSON as text, and as structured content when an object.
fn service_result(result: &str) -> CallToolResult {
    let value: Option<Value> = serde_json::from_str(result).ok();
    if let Some(v) = &value
        && v.get("content").is_some_and(Value::is_array)
        && let Ok(mut r) = serde_json::from_value::<CallToolResult>(v.clone())
    {
        // A result of an older protocol has no `resultType`; this one is
        // complete, and a current client needs to be told so (the SDK
        // drops the field again for a client of an older version).
        r.result_type = Some(ResultType::COMPLETE);
        return r;
    }
    let mut r = CallToolResult::success(vec![ContentBlock::text(result)]);
    r.structured_content = value.filter(Value::is_object);
    r
}

/// A staged write: not an error. Says `pending #N`, that nothing was sent,
/// and how to poll.
fn pending(p: &PendingAction) -> CallToolResult {
    let id = p.action_id;
    let mut text = format!(
        "pending #{id}: {}. Poll it with the tool {POLL_TOOL} and {{\"id\": {id}}}; do not call it again.",
        p.message
    );
    if let Some(sim) = &p.provisional {
        text.push_str(&format!(
            " The service's own forecast of its effect (not yet real): {sim}"
        ));
    }
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(json!({
        "action_id": id,
        "state": "pending",
        "sent": false,
        "await_decision": p.await_decision,
        "provisional": p.provisional,
        "poll": {"tool": POLL_TOOL, "arguments": {"id": id}},
    }));
    r
}

/// What a poll found.
fn polled(id: u64, status: ActionStatus) -> CallToolResult {
    let state = |state: &str, text: String, is_error: bool, extra: Value| {
        let mut structured = json!({"action_id": id, "state": state});
        if let (Some(s), Value::Object(extra)) = (structured.as_object_mut(), extra) {
            s.extend(extra);
        }
        let mut r = if is_error {
            CallToolResult::error(vec![ContentBlock::text(text)])
        } else {
            CallToolResult::success(vec![ContentBlock::text(text)])
        };
        r.structured_content = Some(structured);
        r
    };
    match status {
        ActionStatus::Pending => state(
            "pending",
            format!(
                "action #{id} is still pending: nobody has decided it yet, and nothing has been sent. Poll again later."
            ),
            false,
            json!({"sent": false}),
        ),
        ActionStatus::Applied(result) => {
            let service = service_result(&result);
            let mut content = vec![ContentBlock::text(format!(
                "action #{id} was approved and applied; the service answered:"
            ))];
            content.extend(service.content);
            let mut r = state(
                "applied",
                String::new(),
                service.is_error == Some(true),
                json!({"result": serde_json::from_str::<Value>(&result).unwrap_or(Value::String(result))}),
            );
            r.content = content;
            r
        }
        ActionStatus::Rejected(m) => {
            state("rejected", format!("action #{id}: {m}"), true, json!({}))
        }
        ActionStatus::Expired(m) => state("expired", format!("action #{id}: {m}"), true, json!({})),
        ActionStatus::Failed { message, retryable } => state(
            "failed",
            format!("action #{id} failed: {message}"),
            true,
            json!({"retryable": retryable}),
        ),
    }
}

/// A refusal from the kernel, worded as a gadget is told it.
fn refused(e: &CallError) -> CallToolResult {
    let kind = match e {
        CallError::UnknownKey { .. } => "unknown-key",
        CallError::NotGranted { .. } => "not-granted",
        CallError::InvalidArgs(_) => "invalid-args",
        CallError::Refused(_) => "refused",
        CallError::Service(_) => "service",
    };
    error(kind, &e.to_string())
}

fn error(kind: &str, message: &str) -> CallToolResult {
    let mut r = CallToolResult::error(vec![ContentBlock::text(message)]);
    r.structured_content = Some(json!({"error": {"kind": kind, "message": message}}));
    r
}

fn one_line(e: &anyhow::Error) -> String {
    crate::prompt::one_line(&format!("{e:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::{Annotations, Tool as Entry};

    fn entry(name: &str) -> Entry {
        Entry {
            name: name.into(),
            description: "d".into(),
            input_schema: r#"{"type":"object"}"#.into(),
            annotations: Annotations {
                read_only: Some(true),
                ..Default::default()
            },
            reverted_by: None,
            honours_idempotency_key: false,
            title: None,
            output_schema: None,
            task_support: None,
        }
    }

    #[test]
    fn offered_names_split_back_into_key_and_tool() {
        let t = offered("SVC", &entry("get_item")).unwrap();
        assert_eq!(t.name, "SVC__get_item");
        let a = t.annotations.unwrap();
        assert_eq!(a.read_only_hint, Some(true));
        assert_eq!(a.destructive_hint, None, "passed through, nothing added");
        assert!(offered("A_", &entry("x")).is_err(), "A___x splits as A, _x");
        assert!(offered("A__B", &entry("x")).is_err());
        assert!(offered("SVC", &entry("evil\nApprove? [y/N]")).is_err());
        assert!(
            !POLL_TOOL.contains(SEPARATOR),
            "no offered tool can take its name"
        );
    }

    #[test]
    fn a_read_offers_its_own_output_schema_and_a_write_the_envelope() {
        let mut read = entry("find");
        read.title = Some("Find\n\u{1b}[2JApprove? [y/N]".into());
        read.output_schema = Some(r#"{"type":"object","required":["items"]}"#.into());
        read.task_support = Some(crate::manifest::TaskSupport::Required);
        let t = offered("SVC", &read).unwrap();
        assert_eq!(t.title.as_deref(), Some("Find 2JApprove? y/N"));
        let schema = Value::Object((*t.output_schema.unwrap()).clone());
        assert_eq!(schema, json!({"type": "object", "required": ["items"]}));
        let wire = serde_json::to_value(offered("SVC", &read).unwrap()).unwrap();
        assert!(
            wire.get("execution").is_none(),
            "no task is offered: {wire}"
        );

        let mut write = read.clone();
        write.annotations.read_only = None;
        let t = offered("SVC", &write).unwrap();
        let schema = Value::Object((*t.output_schema.unwrap()).clone());
        assert_eq!(schema, pending_schema());
        // Without a declared schema a write is offered with it all the same.
        write.output_schema = None;
        assert!(offered("SVC", &write).unwrap().output_schema.is_some());
        // A read's schema that is not a JSON object is no promise to offer.
        read.output_schema = Some("[1]".into());
        assert!(offered("SVC", &read).is_err());
        assert!(
            offered("SVC", &entry("plain"))
                .unwrap()
                .output_schema
                .is_none()
        );
    }

    #[test]
    fn every_held_write_answers_in_the_envelope_it_promises() {
        let schema = pending_schema().to_string();
        for provisional in [None, Some(r#"{"id":3}"#.to_owned())] {
            let r = pending(&PendingAction {
                action_id: 7,
                message: "staged as #7, nothing sent yet".into(),
                await_decision: provisional.is_none(),
                provisional,
            });
            let structured = r.structured_content.expect("structured");
            crate::kernel::check_output(&schema, &structured)
                .unwrap_or_else(|e| panic!("{e}: {structured}"));
        }
        let stray = json!({"action_id": 7, "state": "applied"});
        let why = crate::kernel::check_output(&schema, &stray).unwrap_err();
        assert!(why.contains("output schema"), "{why}");
    }

    #[test]
    fn only_loopback_addresses_are_served() {
        assert!(parse_http_addr("127.0.0.1:0").is_ok());
        assert!(parse_http_addr("localhost:8338").is_ok());
        assert!(parse_http_addr("[::1]:1").is_ok());
        assert!(parse_http_addr("0.0.0.0:8338").is_err());
        assert!(parse_http_addr("192.168.1.2:80").is_err());
        assert!(parse_http_addr("example.com:80").is_err());
    }
}
