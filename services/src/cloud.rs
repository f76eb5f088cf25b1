//! The cloud: a small, in-memory HTTP service that launches and tags
//! "instances", so that tests of multi-step workflows ("launch an instance,
//! then tag it") have a real service whose second write depends on the
//! answer to the first (the id the launch assigned).
//!
//! What this module owns: the cloud's in-memory instances and the one bearer
//! token it accepts; the server, its thread and its request log are the
//! shared [`Service`] skeleton's. Like the tracker and
//! the warehouse next to it, it is reached through real sockets and a real
//! HTTP stack, so a gatekeeper test against it exercises the real outbound
//! path, credential injection included. Nothing is ever actually launched.
//!
//! What it may not touch: nothing of the kernel. It imports nothing but the
//! skeleton it shares with the other services (`service`, whose
//! [`Received`] record it re-exports), and the
//! kernel must never depend on it to make a decision: it stands for a
//! third-party service on the far side of the boundary the host enforces.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Json;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Map, Value};

pub use crate::service::Received;
use crate::service::{self, Service, error, lock};

/// What the cloud's handler sees: its state and the request log.
type Shared = service::Shared<CloudState>;

/// Largest request body the cloud reads: room for a generous `userData`
/// script. Anything bigger is answered 413 and logged with an empty body.
const MAX_BODY: usize = 64 * 1024;

/// One instance, as the cloud stores it and as it appears on the wire (the
/// JSON field order is the order of the fields here). The launch's
/// `userData` is accepted but never stored or echoed: real clouds treat it
/// as possibly secret, and tests can read it from [`Cloud::writes`].
#[derive(Clone, Debug, Serialize)]
struct Instance {
    /// `i-1`, `i-2`, ... in launch order, never reused.
    id: String,
    #[serde(rename = "type")]
    kind: String,
    region: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    /// Distinct tags in the order they were first added.
    tags: Vec<String>,
}

/// Configuration for a [`Cloud`]; obtained from [`Cloud::builder`].
#[derive(Clone, Debug, Default)]
pub struct CloudBuilder {
    token: Option<String>,
    /// Instances that exist at start: (type, region, tags).
    seeds: Vec<(String, String, Vec<String>)>,
}

/// A running cloud on `127.0.0.1` (ephemeral port); see [`Service`] for
/// what every service does.
pub type Cloud = Service<CloudState>;

/// The cloud's own state, which the server thread and the test thread both
/// see (opaque: reached through [`Cloud`]'s methods).
pub struct CloudState {
    /// The one accepted bearer token; `None`: nobody gets in.
    token: Option<String>,
    state: Mutex<World>,
}

/// The mutable state, under one mutex so that "apply the write, log it" is
/// atomic with respect to other requests.
struct World {
    instances: Vec<Instance>,
    next_id: u64,
    writes: Vec<Received>,
}

impl Service<CloudState> {
    /// Starts configuring a cloud. No token is accepted until one is set,
    /// so a cloud never answers anonymous requests by accident.
    pub fn builder() -> CloudBuilder {
        CloudBuilder::default()
    }

    /// The non-GET requests that got past authentication and reached the
    /// cloud's logic, in order, including those it answered 400 or 404
    /// (check [`Cloud::instances`] for the resulting state). This is the
    /// list to count when asserting "the write was sent exactly once".
    pub fn writes(&self) -> Vec<Received> {
        self.state().lock().writes.clone()
    }

    /// The current instances in launch order, as `GET /instances` shows them.
    pub fn instances(&self) -> Vec<Value> {
        self.state()
            .lock()
            .instances
            .iter()
            .map(|i| serde_json::to_value(i).unwrap_or(Value::Null))
            .collect()
    }
}

impl CloudBuilder {
    /// The bearer token the cloud accepts (for reads and writes); setting it
    /// again replaces it.
    pub fn token(mut self, t: &str) -> Self {
        self.token = Some(t.to_owned());
        self
    }

    /// Seeds an instance without a name; seeds get ids `i-1`, `i-2`, ... in
    /// the order given, so tests know their ids without asking.
    pub fn instance(mut self, kind: &str, region: &str, tags: &[&str]) -> Self {
        self.seeds.push((
            kind.to_owned(),
            region.to_owned(),
            tags.iter().map(|t| (*t).to_owned()).collect(),
        ));
        self
    }

    /// Binds `127.0.0.1:0`, starts the server on its own thread and runtime,
    /// and returns once it is listening. Works with or without a surrounding
    /// tokio runtime.
    ///
    /// # Errors
    ///
    /// Whatever binding the loopback port, or building the server's
    /// runtime, fails with; no thread is left behind in that case.
    pub fn start(self) -> io::Result<Cloud> {
        let mut world = World {
            instances: Vec::new(),
            next_id: 1,
            writes: Vec::new(),
        };
        for (kind, region, tags) in self.seeds {
            let index = world.launch(kind, region, None);
            if let Some(instance) = world.instances.get_mut(index) {
                for tag in tags {
                    instance.tag(tag);
                }
            }
        }
        let state = CloudState {
            token: self.token.filter(|t| !t.is_empty()),
            state: Mutex::new(world),
        };
        // Nothing parks: shutdown only waits for open connections.
        Service::start("Cloud", state, handle, |_| std::future::pending())
    }
}

impl CloudState {
    /// Locks the state (see [`lock`]).
    fn lock(&self) -> MutexGuard<'_, World> {
        lock(&self.state)
    }

    /// Whether the `Authorization` header carries the cloud's token (only
    /// the `Bearer` scheme, case-insensitive).
    fn authorised(&self, authorization: Option<&str>) -> bool {
        match (&self.token, service::bearer(authorization)) {
            (Some(token), Some(given)) => token == given,
            _ => false,
        }
    }
}

/// The single handler: every request, matched or not, is logged and
/// authenticated the same way before it is routed.
async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, bytes, received) = match shared.receive(request, MAX_BODY).await {
        Ok(received) => received,
        Err(too_large) => return too_large,
    };
    if !shared.authorised(received.authorization.as_deref()) {
        return service::unauthorized();
    }
    let mut world = shared.lock();
    let response = world.route(&parts.method, parts.uri.path(), &bytes);
    if parts.method != Method::GET {
        world.writes.push(received);
    }
    response
}

impl World {
    /// Adds an instance and returns its index.
    fn launch(&mut self, kind: String, region: String, name: Option<String>) -> usize {
        let id = format!("i-{}", self.next_id);
        self.next_id += 1;
        self.instances.push(Instance {
            id,
            kind,
            region,
            name,
            tags: Vec::new(),
        });
        self.instances.len() - 1
    }

    /// The API proper, for an authenticated request whose body was read.
    /// Instance ids are matched exactly: they are plain ASCII (`i-N`), so
    /// a percent-encoded segment names no instance.
    fn route(&mut self, method: &Method, path: &str, body: &[u8]) -> Response {
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        match (method, segments.as_slice()) {
            (&Method::GET, ["instances"]) => Json(&self.instances).into_response(),
            (&Method::POST, ["instances"]) => {
                let launch = match parse_launch(body) {
                    Ok(launch) => launch,
                    Err(message) => return error(StatusCode::BAD_REQUEST, &message),
                };
                let index = self.launch(launch.kind, launch.region, launch.name);
                match self.instances.get(index) {
                    Some(instance) => (StatusCode::CREATED, Json(instance)).into_response(),
                    None => error(StatusCode::INTERNAL_SERVER_ERROR, "instance vanished"),
                }
            }
            (&Method::POST, ["instances", id, "tags"]) => {
                let Some(instance) = self.instances.iter_mut().find(|i| i.id == *id) else {
                    let shown: String = id.chars().filter(|c| !c.is_control()).take(80).collect();
                    return error(
                        StatusCode::NOT_FOUND,
                        &format!("no instance {shown:?}; GET /instances lists them"),
                    );
                };
                let tag = match parse_tag(body) {
                    Ok(tag) => tag,
                    Err(message) => return error(StatusCode::BAD_REQUEST, &message),
                };
                instance.tag(tag);
                Json(&*instance).into_response()
            }
            _ => error(StatusCode::NOT_FOUND, "not found"),
        }
    }
}

impl Instance {
    /// Adds `tag` unless present: tagging is idempotent, so a retried tag
    /// request is harmless and tests can tell retries from damage.
    fn tag(&mut self, tag: String) {
        if !self.tags.contains(&tag) {
            self.tags.push(tag);
        }
    }
}

/// A valid launch request.
struct Launch {
    kind: String,
    region: String,
    name: Option<String>,
}

/// The body of `POST /instances`: a JSON object with non-empty strings
/// `type` and `region`, and optional strings `userData` and `name`.
fn parse_launch(body: &[u8]) -> Result<Launch, String> {
    let fields = object(body, r#"{"type": ..., "region": ...}"#)?;
    let kind = required(&fields, "type")?;
    let region = required(&fields, "region")?;
    optional(&fields, "userData")?;
    let name = optional(&fields, "name")?;
    Ok(Launch { kind, region, name })
}

/// The body of `POST /instances/{id}/tags`: `{"tag": non-empty string}`.
fn parse_tag(body: &[u8]) -> Result<String, String> {
    required(&object(body, r#"{"tag": ...}"#)?, "tag")
}

/// The body as a JSON object; else an error naming the `expected` shape.
fn object(body: &[u8], expected: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(fields)) => Ok(fields),
        _ => Err(format!("expected a JSON object {expected}")),
    }
}

/// The non-empty string field `name`.
fn required(fields: &Map<String, Value>, name: &str) -> Result<String, String> {
    match fields.get(name) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
        Some(Value::String(_)) => Err(format!("{name} must not be empty")),
        Some(_) => Err(format!("{name} must be a string")),
        None => Err(format!("missing string field {name}")),
    }
}

/// The string field `name`, if present (`null` counts as absent).
fn optional(fields: &Map<String, Value>, name: &str) -> Result<Option<String>, String> {
    match fields.get(name) {
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Null) | None => Ok(None),
        Some(_) => Err(format!("{name} must be a string")),
    }
}

#[cfg(test)]
mod tests {
    //! Talks to the cloud with hand-written HTTP/1.1 over a blocking
    //! `std::net::TcpStream`, like the tracker's and the warehouse's tests.

    use super::*;
    use crate::service::SHUTDOWN_GRACE;
    use crate::service::testing::response;
    use serde_json::json;
    use std::net::TcpStream;
    use std::time::{Duration, Instant};

    fn call(
        c: &Cloud,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> (u16, Value) {
        let mut stream = crate::service::testing::send(c.addr(), method, path, token, body);
        let (status, body) = response(&mut stream);
        (status, serde_json::from_str(&body).expect("JSON body"))
    }

    /// A cloud with one seeded instance, `i-1`.
    fn cloud() -> Cloud {
        Cloud::builder()
            .token("secret")
            .instance("small", "eu-1", &["web"])
            .start()
            .expect("start cloud")
    }

    #[test]
    fn every_request_needs_the_bearer_token() {
        let c = cloud();
        for token in [None, Some("stranger"), Some("")] {
            for (method, path) in [
                ("GET", "/instances"),
                ("POST", "/instances"),
                ("POST", "/instances/i-1/tags"),
                ("GET", "/nope"),
            ] {
                let (status, body) = call(&c, method, path, token, Some("{}"));
                assert_eq!(status, 401, "{method} {path} with {token:?}");
                assert!(body["error"].is_string());
            }
        }
        assert_eq!(c.requests().len(), 12);
        assert!(c.writes().is_empty(), "refused requests are not writes");
        assert_eq!(c.instances().len(), 1);
        let none = Cloud::builder().start().expect("start");
        assert_eq!(
            call(&none, "GET", "/instances", Some("secret"), None).0,
            401
        );
    }

    #[test]
    fn listing_shows_the_seeded_instances() {
        let c = cloud();
        let (status, body) = call(&c, "GET", "/instances", Some("secret"), None);
        assert_eq!(status, 200);
        assert_eq!(
            body,
            json!([{"id": "i-1", "type": "small", "region": "eu-1", "tags": ["web"]}])
        );
        assert_eq!(Value::Array(c.instances()), body);
    }

    #[test]
    fn launch_then_tag() {
        let c = cloud();
        let (status, body) = call(
            &c,
            "POST",
            "/instances",
            Some("secret"),
            Some(r##"{"type":"large","region":"us-2","userData":"#!/bin/sh","name":"db"}"##),
        );
        assert_eq!(status, 201);
        assert_eq!(
            body,
            json!({"id": "i-2", "type": "large", "region": "us-2", "name": "db", "tags": []})
        );
        let (status, body) = call(
            &c,
            "POST",
            "/instances",
            Some("secret"),
            Some(r#"{"type":"small","region":"eu-1","name":null}"#),
        );
        assert_eq!(status, 201);
        assert_eq!(
            body,
            json!({"id": "i-3", "type": "small", "region": "eu-1", "tags": []})
        );

        let (status, body) = call(
            &c,
            "POST",
            "/instances/i-2/tags",
            Some("secret"),
            Some(r#"{"tag":"prod"}"#),
        );
        assert_eq!(status, 200);
        assert_eq!(body["id"], "i-2");
        assert_eq!(body["tags"], json!(["prod"]));
        let (status, body) = call(
            &c,
            "POST",
            "/instances/i-2/tags",
            Some("secret"),
            Some(r#"{"tag":"prod"}"#),
        );
        assert_eq!(status, 200, "tagging again is a no-op");
        assert_eq!(body["tags"], json!(["prod"]));

        let ids: Vec<Value> = c.instances().iter().map(|i| i["id"].clone()).collect();
        assert_eq!(ids, vec![json!("i-1"), json!("i-2"), json!("i-3")]);
        assert_eq!(c.instances()[1]["tags"], json!(["prod"]));
        let writes = c.writes();
        assert_eq!(writes.len(), 4);
        assert_eq!(writes[0].method, "POST");
        assert!(writes[0].body.contains("userData"), "logged as sent");
        assert_eq!(writes[2].path, "/instances/i-2/tags");
        assert_eq!(writes[0].authorization.as_deref(), Some("Bearer secret"));
    }

    #[test]
    fn bad_launches_are_400_and_launch_nothing() {
        let c = cloud();
        for body in [
            r#"{"region":"eu-1"}"#,
            r#"{"type":"small"}"#,
            r#"{"type":3,"region":"eu-1"}"#,
            r#"{"type":"small","region":null}"#,
            r#"{"type":"","region":"eu-1"}"#,
            r#"{"type":"small","region":"eu-1","name":7}"#,
            r#"{"type":"small","region":"eu-1","userData":{}}"#,
            r#"["small","eu-1"]"#,
            "not json",
            "",
        ] {
            let (status, answer) = call(&c, "POST", "/instances", Some("secret"), Some(body));
            assert_eq!(status, 400, "{body}");
            assert!(answer["error"].is_string(), "{body}");
        }
        assert_eq!(c.instances().len(), 1);
        assert_eq!(c.writes().len(), 10, "they reached the logic");
        // Ids are not used up by refused launches.
        let (_, body) = call(
            &c,
            "POST",
            "/instances",
            Some("secret"),
            Some(r#"{"type":"small","region":"eu-1"}"#),
        );
        assert_eq!(body["id"], "i-2");
    }

    #[test]
    fn tagging_an_unknown_instance_is_404_and_a_bad_tag_400() {
        let c = cloud();
        for path in [
            "/instances/i-9/tags",
            "/instances/i%2D1/tags",
            "/instances//tags",
        ] {
            let (status, body) = call(&c, "POST", path, Some("secret"), Some(r#"{"tag":"x"}"#));
            assert_eq!(status, 404, "{path}");
            assert!(body["error"].is_string());
        }
        for body in [r#"{}"#, r#"{"tag":""}"#, r#"{"tag":1}"#, "nope"] {
            let (status, _) = call(
                &c,
                "POST",
                "/instances/i-1/tags",
                Some("secret"),
                Some(body),
            );
            assert_eq!(status, 400, "{body}");
        }
        assert_eq!(c.instances()[0]["tags"], json!(["web"]));
    }

    #[test]
    fn anything_else_is_404() {
        let c = cloud();
        for (method, path) in [
            ("GET", "/"),
            ("GET", "/instances/i-1"),
            ("GET", "/instances/i-1/tags"),
            ("PUT", "/instances"),
            ("DELETE", "/instances/i-1"),
            ("POST", "/instances/i-1"),
        ] {
            let (status, body) = call(&c, method, path, Some("secret"), Some("{}"));
            assert_eq!(status, 404, "{method} {path}");
            assert!(body["error"].is_string());
        }
        assert_eq!(c.instances().len(), 1);
    }

    #[test]
    fn requests_are_waited_for_and_oversized_bodies_refused() {
        let c = cloud();
        assert!(c.wait_for_requests(0, Duration::ZERO));
        assert!(!c.wait_for_requests(1, Duration::from_millis(100)));
        let big = format!(
            r#"{{"type":"small","region":"eu-1","userData":"{}"}}"#,
            "x".repeat(MAX_BODY)
        );
        assert_eq!(
            call(&c, "POST", "/instances", Some("secret"), Some(&big)).0,
            413
        );
        assert!(c.wait_for_requests(1, Duration::from_secs(10)));
        assert_eq!(c.requests()[0].body, "");
        assert!(c.writes().is_empty());
        assert_eq!(c.instances().len(), 1);
    }

    #[test]
    fn shutdown_is_prompt_and_releases_the_port() {
        let c = cloud();
        assert_eq!(c.url(), format!("http://{}", c.host()));
        assert!(c.host().starts_with("127.0.0.1:"));
        let addr = c.addr();
        let _silent = TcpStream::connect(addr).expect("connect");
        let started = Instant::now();
        c.shutdown();
        assert!(
            started.elapsed() <= SHUTDOWN_GRACE + Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
        assert!(TcpStream::connect(addr).is_err(), "port should be closed");
    }
}
