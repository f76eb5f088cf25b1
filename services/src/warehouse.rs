//! The data warehouse: a small, read-only, in-memory HTTP service that
//! the demo and the tests use so that tests of observations, the restricted-data latch
//! (O1-O4) and observers of shared chats (S1-S5) have a real service whose
//! accounts may read different tables.
//!
//! What this module owns: the warehouse's fixed tables and its accounts (a
//! bearer token and the tables it may read); the server, its thread and its
//! request log are the shared [`Service`] skeleton's.
//! Like the issue tracker next to it, it is reached through real sockets and
//! a real HTTP stack, so a gatekeeper test against it exercises the real
//! outbound path, credential injection included.
//!
//! The data is fixed and small: `sales` and `customers` are public tables,
//! `payroll` is owner-only (`"restricted": true`). Which tables an account
//! may read is decided by the builder, so a test can model an owner who may
//! read everything and a collaborator who may not read payroll.
//!
//! What it may not touch: nothing of the kernel. It imports nothing but the
//! skeleton it shares with the other services (`service`, whose
//! [`Received`] record it re-exports), and the kernel must never depend on
//! it to make a decision.

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

pub use crate::service::Received;
use crate::service::{self, Service, error};

/// What the warehouse's handler sees: its state and the request log.
type Shared = service::Shared<WarehouseState>;

/// Largest request body the warehouse reads (it never needs one). Anything
/// bigger is answered 413 and logged with an empty body.
const MAX_BODY: usize = 64 * 1024;

/// One built-in table.
struct Table {
    name: &'static str,
    title: &'static str,
    /// Owner-only data; a gatekeeper reports it as a restricted source.
    restricted: bool,
    rows: Value,
}

/// The fixed data every warehouse serves, in listing order.
fn tables() -> Vec<Table> {
    vec![
        Table {
            name: "sales",
            title: "Sales by region",
            restricted: false,
            rows: json!([
                {"region": "north", "quarter": "Q1", "amount": 120},
                {"region": "south", "quarter": "Q1", "amount": 95},
                {"region": "north", "quarter": "Q2", "amount": 140},
                {"region": "south", "quarter": "Q2", "amount": 110},
            ]),
        },
        Table {
            name: "customers",
            title: "Customers",
            restricted: false,
            rows: json!([
                {"id": 1, "name": "Acme Ltd", "region": "north"},
                {"id": 2, "name": "Globex", "region": "south"},
                {"id": 3, "name": "Initech", "region": "north"},
            ]),
        },
        Table {
            name: "payroll",
            title: "Payroll",
            restricted: true,
            rows: json!([
                {"name": "Ada", "salary": 182000},
                {"name": "Grace", "salary": 176000},
                {"name": "Linus", "salary": 158000},
            ]),
        },
    ]
}

/// Which tables an account may read.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Grant {
    /// Every table (`"*"`).
    All,
    /// Exactly these tables (possibly none: the account is known but reads
    /// nothing, which still lets it list the tables).
    Tables(BTreeSet<String>),
}

impl Grant {
    fn allows(&self, table: &str) -> bool {
        match self {
            Grant::All => true,
            Grant::Tables(names) => names.contains(table),
        }
    }
}

/// Configuration for a [`Warehouse`]; obtained from [`Warehouse::builder`].
#[derive(Clone, Debug, Default)]
pub struct WarehouseBuilder {
    accounts: HashMap<String, Grant>,
    /// Which tables are owner-only; `None`: the built-in flags (payroll).
    owner_only: Option<BTreeSet<String>>,
}

/// A running warehouse on `127.0.0.1` (ephemeral port); see [`Service`]
/// for what every service does.
pub type Warehouse = Service<WarehouseState>;

/// The warehouse's own state, which the server thread and the test thread
/// both see (opaque: reached through [`Warehouse`]'s methods).
pub struct WarehouseState {
    accounts: HashMap<String, Grant>,
    tables: Vec<Table>,
}

impl Service<WarehouseState> {
    /// Starts configuring a warehouse. No account exists until one is added,
    /// so a warehouse never answers anonymous requests by accident.
    pub fn builder() -> WarehouseBuilder {
        WarehouseBuilder::default()
    }
}

impl WarehouseBuilder {
    /// An account: its bearer token and the tables it may read (`"*"` =
    /// all). Adding the same token again replaces its tables. An empty list
    /// makes an account that is known (it may list the tables) but may read
    /// none. Names of tables that do not exist are kept and simply never
    /// match.
    pub fn account(mut self, token: &str, tables: &[&str]) -> Self {
        let grant = if tables.contains(&"*") {
            Grant::All
        } else {
            Grant::Tables(tables.iter().map(|t| (*t).to_owned()).collect())
        };
        self.accounts.insert(token.to_owned(), grant);
        self
    }

    /// Which tables the warehouse flags owner-only (`restricted`), instead
    /// of the built-in `payroll`. A chat that reads owner-only data is
    /// latched and can never be shared, so tests of sharing access-controlled
    /// data (a table some accounts may not read, but which is not owner-only)
    /// flag none.
    pub fn owner_only(mut self, tables: &[&str]) -> Self {
        self.owner_only = Some(tables.iter().map(|t| (*t).to_owned()).collect());
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
    pub fn start(self) -> io::Result<Warehouse> {
        let mut tables = tables();
        if let Some(owner_only) = &self.owner_only {
            for t in &mut tables {
                t.restricted = owner_only.contains(t.name);
            }
        }
        let state = WarehouseState {
            accounts: self.accounts,
            tables,
        };
        // Nothing parks: shutdown only waits for open connections.
        Service::start("Warehouse", state, handle, |_| std::future::pending())
    }
}

impl WarehouseState {
    /// The grant of the account named by the `Authorization` header: only
    /// the `Bearer` scheme (case-insensitive) with a known, non-empty token.
    fn account(&self, authorization: Option<&str>) -> Option<&Grant> {
        self.accounts.get(service::bearer(authorization)?)
    }

    fn table(&self, name: &str) -> Option<&Table> {
        self.tables.iter().find(|t| t.name == name)
    }

    /// The API proper, for an authenticated GET.
    fn route(&self, grant: &Grant, path: &str) -> Response {
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        match segments.as_slice() {
            ["tables"] => {
                let listing: Vec<Value> = self
                    .tables
                    .iter()
                    .map(|t| json!({"name": t.name, "title": t.title, "restricted": t.restricted}))
                    .collect();
                Json(listing).into_response()
            }
            ["tables", name] => {
                let Some((name, table)) = self.named(name) else {
                    return no_such_table(name);
                };
                if !grant.allows(table.name) {
                    return error(
                        StatusCode::FORBIDDEN,
                        &format!("account may not read table {name}"),
                    );
                }
                Json(json!({
                    "table": table.name,
                    "title": table.title,
                    "restricted": table.restricted,
                    "rows": table.rows,
                }))
                .into_response()
            }
            ["access"] => {
                // Every table this account may read: what an observer check
                // needs, in one request (SPEC S2, S3).
                let readable: Vec<&str> = self
                    .tables
                    .iter()
                    .filter(|t| grant.allows(t.name))
                    .map(|t| t.name)
                    .collect();
                Json(json!({"tables": readable})).into_response()
            }
            ["access", name] => {
                let Some((_, table)) = self.named(name) else {
                    return no_such_table(name);
                };
                Json(json!({"table": table.name, "allowed": grant.allows(table.name)}))
                    .into_response()
            }
            _ => error(StatusCode::NOT_FOUND, "not found"),
        }
    }

    /// The table a percent-encoded path segment names, with the decoded name.
    fn named(&self, segment: &str) -> Option<(String, &Table)> {
        let name = percent_decode(segment)?;
        let table = self.table(&name)?;
        Some((name, table))
    }
}

/// The single handler: every request, matched or not, is logged and
/// authenticated the same way before it is routed.
async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, _, received) = match shared.receive(request, MAX_BODY).await {
        Ok(received) => received,
        Err(too_large) => return too_large,
    };
    let Some(grant) = shared.account(received.authorization.as_deref()) else {
        return service::unauthorized();
    };
    if parts.method != Method::GET {
        let mut response = error(
            StatusCode::METHOD_NOT_ALLOWED,
            "the warehouse is read-only: only GET is supported",
        );
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET"));
        return response;
    }
    shared.route(grant, parts.uri.path())
}

fn no_such_table(segment: &str) -> Response {
    let name = percent_decode(segment).unwrap_or_else(|| segment.to_owned());
    let shown: String = name.chars().filter(|c| !c.is_control()).take(80).collect();
    error(
        StatusCode::NOT_FOUND,
        &format!("no table named {shown:?}; GET /tables lists them"),
    )
}

/// Decodes `%XX` escapes; `None` for a malformed escape or invalid UTF-8.
fn percent_decode(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    //! Talks to the warehouse with hand-written HTTP/1.1 over a blocking
    //! `std::net::TcpStream`, like the tracker's tests.

    use super::*;
    use crate::service::SHUTDOWN_GRACE;
    use crate::service::testing::{head, response};
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::{Duration, Instant};

    fn call(w: &Warehouse, method: &str, path: &str, token: Option<&str>) -> (u16, Value) {
        let mut stream = TcpStream::connect(w.addr()).expect("connect");
        let mut head = head(&w.host(), method, path, token);
        if method != "GET" {
            head.push_str("Content-Length: 0\r\n");
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).expect("write");
        let (status, body) = response(&mut stream);
        (status, serde_json::from_str(&body).expect("JSON body"))
    }

    /// An owner who reads everything and an analyst who may not read payroll.
    fn warehouse() -> Warehouse {
        Warehouse::builder()
            .account("owner", &["*"])
            .account("analyst", &["sales", "customers"])
            .account("nobody", &[])
            .start()
            .expect("start warehouse")
    }

    #[test]
    fn every_request_needs_a_known_bearer_token() {
        let w = warehouse();
        for token in [None, Some("stranger"), Some("")] {
            for path in ["/tables", "/tables/sales", "/access/sales", "/nope"] {
                let (status, body) = call(&w, "GET", path, token);
                assert_eq!(status, 401, "{path} with {token:?}");
                assert!(body["error"].is_string());
            }
        }
        // Not a Bearer token, even if the value is known.
        let mut s = TcpStream::connect(w.addr()).expect("connect");
        s.write_all(b"GET /tables HTTP/1.1\r\nHost: x\r\nAuthorization: Basic owner\r\nConnection: close\r\n\r\n")
            .expect("write");
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).expect("read");
        assert!(String::from_utf8_lossy(&raw).starts_with("HTTP/1.1 401"));
        assert_eq!(w.requests().len(), 13);
        assert_eq!(
            w.requests()[1].authorization.as_deref(),
            None,
            "logged as received"
        );
        assert_eq!(
            w.requests()[4].authorization.as_deref(),
            Some("Bearer stranger")
        );
    }

    #[test]
    fn no_accounts_means_nobody_gets_in() {
        let w = Warehouse::builder().start().expect("start");
        assert_eq!(call(&w, "GET", "/tables", Some("owner")).0, 401);
    }

    #[test]
    fn listing_shows_every_table_with_its_restricted_flag() {
        let w = warehouse();
        let expected = json!([
            {"name": "sales", "title": "Sales by region", "restricted": false},
            {"name": "customers", "title": "Customers", "restricted": false},
            {"name": "payroll", "title": "Payroll", "restricted": true},
        ]);
        for token in ["owner", "analyst", "nobody"] {
            let (status, body) = call(&w, "GET", "/tables", Some(token));
            assert_eq!(status, 200, "{token}");
            assert_eq!(body, expected, "{token}");
        }
    }

    #[test]
    fn reading_a_table_returns_its_rows_and_flag() {
        let w = warehouse();
        let (status, body) = call(&w, "GET", "/tables/payroll", Some("owner"));
        assert_eq!(status, 200);
        assert_eq!(body["table"], "payroll");
        assert_eq!(body["restricted"], true);
        assert!(body["title"].is_string());
        assert_eq!(body["rows"][0], json!({"name": "Ada", "salary": 182000}));

        let (status, body) = call(&w, "GET", "/tables/sales", Some("analyst"));
        assert_eq!(status, 200);
        assert_eq!(body["table"], "sales");
        assert_eq!(body["title"], "Sales by region");
        assert_eq!(body["restricted"], false);
        assert_eq!(
            body["rows"][0],
            json!({"region": "north", "quarter": "Q1", "amount": 120})
        );
        let (status, body) = call(&w, "GET", "/tables/customers", Some("owner"));
        assert_eq!(status, 200);
        assert_eq!(body["restricted"], false);
        assert!(body["rows"].as_array().is_some_and(|r| !r.is_empty()));
        // Percent-encoded names are decoded.
        assert_eq!(call(&w, "GET", "/tables/s%61les", Some("analyst")).0, 200);
    }

    #[test]
    fn a_table_the_account_may_not_read_is_403_without_data() {
        let w = warehouse();
        let (status, body) = call(&w, "GET", "/tables/payroll", Some("analyst"));
        assert_eq!(status, 403);
        assert_eq!(body, json!({"error": "account may not read table payroll"}));
        let (status, body) = call(&w, "GET", "/tables/sales", Some("nobody"));
        assert_eq!(status, 403);
        assert_eq!(body, json!({"error": "account may not read table sales"}));
    }

    #[test]
    fn unknown_tables_and_paths_are_404() {
        let w = warehouse();
        for path in [
            "/tables/salaries",
            "/tables/",
            "/tables/%zz",
            "/tables/%ff",
            "/tables/sales/rows",
            "/access/salaries",
            "/access/",
            "/",
            "/table/sales",
        ] {
            let (status, body) = call(&w, "GET", path, Some("owner"));
            assert_eq!(status, 404, "{path}");
            assert!(body["error"].is_string(), "{path}");
        }
        // A 404 for a table that does not exist, whoever asks.
        assert_eq!(call(&w, "GET", "/tables/salaries", Some("nobody")).0, 404);
    }

    #[test]
    fn access_check_answers_without_data() {
        let w = warehouse();
        for (token, table, allowed) in [
            ("owner", "payroll", true),
            ("owner", "sales", true),
            ("analyst", "payroll", false),
            ("analyst", "customers", true),
            ("nobody", "sales", false),
        ] {
            let (status, body) = call(&w, "GET", &format!("/access/{table}"), Some(token));
            assert_eq!(status, 200, "{token} {table}");
            assert_eq!(
                body,
                json!({"table": table, "allowed": allowed}),
                "{token} {table}"
            );
        }
        assert_eq!(call(&w, "GET", "/access/payroll", Some("stranger")).0, 401);
    }

    #[test]
    fn the_access_listing_names_exactly_the_readable_tables() {
        let w = warehouse();
        for (token, tables) in [
            ("owner", json!(["sales", "customers", "payroll"])),
            ("analyst", json!(["sales", "customers"])),
            ("nobody", json!([])),
        ] {
            assert_eq!(
                call(&w, "GET", "/access", Some(token)),
                (200, json!({"tables": tables})),
                "{token}"
            );
        }
        assert_eq!(call(&w, "GET", "/access", Some("stranger")).0, 401);
    }

    #[test]
    fn writes_are_refused_and_logged() {
        let w = warehouse();
        for method in ["POST", "PUT", "DELETE", "PATCH"] {
            let (status, body) = call(&w, method, "/tables/sales", Some("owner"));
            assert_eq!(status, 405, "{method}");
            assert!(body["error"].is_string());
        }
        assert_eq!(call(&w, "POST", "/tables/sales", None).0, 401);
        let log = w.requests();
        assert_eq!(log.len(), 5);
        assert_eq!(log[0].method, "POST");
        assert_eq!(log[0].path, "/tables/sales");
    }

    #[test]
    fn an_account_added_twice_keeps_its_last_tables() {
        let w = Warehouse::builder()
            .account("t", &["*"])
            .account("t", &["sales"])
            .start()
            .expect("start");
        assert_eq!(call(&w, "GET", "/tables/payroll", Some("t")).0, 403);
        assert_eq!(call(&w, "GET", "/tables/sales", Some("t")).0, 200);
    }

    #[test]
    fn requests_are_logged_with_query_and_waited_for() {
        let w = warehouse();
        assert!(w.wait_for_requests(0, Duration::ZERO));
        let started = Instant::now();
        assert!(!w.wait_for_requests(1, Duration::from_millis(150)));
        assert!(started.elapsed() >= Duration::from_millis(150));
        call(&w, "GET", "/tables?x=1", Some("owner"));
        assert!(w.wait_for_requests(1, Duration::from_secs(10)));
        let log = w.requests();
        assert_eq!(log[0].path, "/tables?x=1");
        assert_eq!(log[0].authorization.as_deref(), Some("Bearer owner"));
        assert_eq!(log[0].body, "");
    }

    #[test]
    fn shutdown_is_prompt_and_releases_the_port() {
        let w = warehouse();
        let addr = w.addr();
        let _silent = TcpStream::connect(addr).expect("connect");
        let started = Instant::now();
        w.shutdown();
        assert!(
            started.elapsed() <= SHUTDOWN_GRACE + Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
        assert!(TcpStream::connect(addr).is_err(), "port should be closed");
    }

    #[test]
    fn addresses_are_loopback() {
        let w = warehouse();
        assert_eq!(w.url(), format!("http://{}", w.host()));
        assert!(w.host().starts_with("127.0.0.1:"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn starts_and_drops_inside_a_runtime() {
        let w = warehouse();
        let addr = w.addr();
        let status = tokio::task::spawn_blocking(move || {
            let mut s = TcpStream::connect(addr).expect("connect");
            s.write_all(b"GET /tables HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer owner\r\nConnection: close\r\n\r\n")
                .expect("write");
            let mut raw = Vec::new();
            s.read_to_end(&mut raw).expect("read");
            String::from_utf8_lossy(&raw).starts_with("HTTP/1.1 200")
        })
        .await
        .expect("client");
        assert!(status);
        drop(w);
    }

    #[test]
    fn percent_decoding_is_strict() {
        assert_eq!(percent_decode("a%20b").as_deref(), Some("a b"));
        assert_eq!(percent_decode("%").as_deref(), None);
        assert_eq!(percent_decode("%4").as_deref(), None);
        assert_eq!(percent_decode("%g0").as_deref(), None);
        assert_eq!(percent_decode("%+1").as_deref(), None);
        assert_eq!(percent_decode("%C3%A9").as_deref(), Some("é"));
        assert_eq!(percent_decode("%ff").as_deref(), None);
    }
}
