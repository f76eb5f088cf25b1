//! `warehouse`: the gatekeeper of the demo data warehouse
//! (`services/src/warehouse.rs`). It lists tables and reads one table over
//! `wasi:http`, reporting each table it read as a source (`table:<name>`,
//! flagged `restricted` when the warehouse says the data is owner-only), so
//! the kernel can record observations, latch a chat that read restricted
//! data and check observers of a shared chat table by table (`track-reads`).
//!
//! The warehouse is a closed service, so its reads are declared
//! `open-world: false`. It accepts no writes: `exportReport` exists only as
//! an action for tests of the approval path and is always refused without a
//! request.

use gatehouse_gatekeeper::http::{HttpError, Request, base_url, encode_query};
use gatehouse_gatekeeper::manifest::{Manifest, ObserverStrategy, tool};
use gatehouse_gatekeeper::text::one_line;
use gatehouse_gatekeeper::{
    Args, Denial, Gatekeeper, Invocation, ObserverCheck, ObserverVerdict, Output, Source, ToolError,
};
use serde_json::{Map, Value, json};

const TOOLS: &str = "listTables, query, exportReport";

/// Source ids of tables start with this; the rest is the table name.
const TABLE_PREFIX: &str = "table:";

/// The source id of the table list.
const CATALOG: &str = "catalog";

struct Warehouse;

impl Gatekeeper for Warehouse {
    fn describe(_settings: &[(String, String)]) -> Result<Manifest, ToolError> {
        Ok(manifest())
    }

    fn call(invocation: Invocation) -> Result<Output, ToolError> {
        let args = Args::parse(&invocation.args)?;
        let args = args.as_map();
        let base = || base_url(&invocation.settings).map_err(ToolError::Refused);
        match invocation.tool.as_str() {
            "listTables" => {
                let url = format!("{}/tables", base()?);
                let result = get(&url, "the table list")?;
                Ok(Output::read(
                    result,
                    Source::public(CATALOG, "Warehouse table list"),
                ))
            }
            "query" => {
                let name = table_arg(args)?;
                let url = format!("{}/tables/{}", base()?, encode_query(&name));
                let result = get(&url, &format!("table {}", one_line(&name, 80)))?;
                let source = table_source(&name, &result);
                Ok(Output::read(result, source))
            }
            "exportReport" => Err(ToolError::Refused("exports are disabled".into())),
            other => Err(ToolError::unknown_tool(other, TOOLS)),
        }
    }

    /// `track-reads`: one request lists every table the account may read;
    /// each table source outside it is denied, and the list itself becomes
    /// the observer's scope, so later reads are checked without a request.
    fn check_observer(check: ObserverCheck) -> ObserverVerdict {
        let readable = base_url(&check.settings).and_then(|base| readable_tables(&base));
        match readable {
            Ok(tables) => {
                let denials = check
                    .sources
                    .iter()
                    .filter_map(|s| {
                        let name = s.id.strip_prefix(TABLE_PREFIX)?;
                        (!tables.iter().any(|t| t == name)).then(|| Denial {
                            source: s.id.clone(),
                            reason: format!("account may not read table {}", one_line(name, 80)),
                        })
                    })
                    .collect();
                let mut scope = vec![CATALOG.to_string()];
                scope.extend(tables.iter().map(|t| format!("{TABLE_PREFIX}{t}")));
                ObserverVerdict {
                    denials,
                    scope: Some(scope),
                }
            }
            Err(reason) => ObserverVerdict {
                denials: Denial::all(check.sources, "warehouse", &reason),
                scope: None,
            },
        }
    }

    fn predict_sources(invocation: Invocation) -> Vec<Source> {
        let Ok(args) = Args::parse(&invocation.args) else {
            return Vec::new();
        };
        match invocation.tool.as_str() {
            "listTables" => vec![Source::public(CATALOG, "Warehouse table list")],
            "query" => match table_arg(args.as_map()) {
                Ok(name) => vec![Source {
                    id: format!("{TABLE_PREFIX}{name}"),
                    title: format!("Warehouse table {}", one_line(&name, 80)),
                    restricted: false,
                }],
                Err(_) => Vec::new(),
            },
            _ => Vec::new(),
        }
    }
}

/// The manifest, the same for every instance of this gatekeeper.
fn manifest() -> Manifest {
    let table = json!({"type": "string", "minLength": 1, "description": "The table's name, as listTables shows it."});
    Manifest::builder()
        // Reads of a closed service: nothing they do reaches the open world.
        .tool(
            tool(
                "listTables",
                "List the warehouse's tables (name, title, whether the data is owner-only). Returns no rows.",
                json!({"type": "object", "properties": {}, "additionalProperties": false}),
            )
            .read_only()
            .open_world(false),
        )
        .tool(
            tool(
                "query",
                "Read every row of one table.",
                json!({"type": "object", "properties": {"table": table},
                       "required": ["table"], "additionalProperties": false}),
            )
            .read_only()
            .open_world(false),
        )
        .tool(tool(
            "exportReport",
            "Export a table as a report to a destination. Exports are disabled in this demo: the call is always refused and nothing is sent.",
            json!({"type": "object",
                   "properties": {"table": table,
                                  "to": {"type": "string", "minLength": 1, "description": "Where the report should go."}},
                   "required": ["table", "to"], "additionalProperties": false}),
        ))
        .observers(ObserverStrategy::TrackReads)
        .build()
}

gatehouse_gatekeeper::export!(Warehouse);

/// The tables the calling account may read (`GET /access`), or why that
/// could not be learned. Fails closed: no answer means no access.
fn readable_tables(base: &str) -> Result<Vec<String>, String> {
    let reply = match Request::get(format!("{base}/access")).send() {
        Ok(reply) => reply,
        Err(HttpError::NotSent(e) | HttpError::OutcomeUnknown(e)) => {
            return Err(format!("could not check access to the warehouse: {e}"));
        }
    };
    match reply.status {
        200..=299 => serde_json::from_slice::<Value>(&reply.body)
            .ok()
            .and_then(|v| {
                v.get("tables")?
                    .as_array()?
                    .iter()
                    .map(|t| t.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
            })
            .ok_or_else(|| {
                "could not check access to the warehouse: its answer lists no tables".to_string()
            }),
        401 => Err("the account is not known to the warehouse".into()),
        403 => Err("the account may not read the warehouse".into()),
        status => Err(format!(
            "could not check access to the warehouse: unexpected HTTP {status}"
        )),
    }
}

/// The source a `query` reply describes: `table:<name>`, titled and flagged
/// as the warehouse says. A reply without a boolean `restricted` flag is
/// treated as restricted (fail closed: unknown data may be owner-only).
fn table_source(requested: &str, reply: &Value) -> Source {
    let name = reply
        .get("table")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .unwrap_or(requested);
    let title = reply
        .get("title")
        .and_then(Value::as_str)
        .map(|t| one_line(t, 120))
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| format!("Warehouse table {}", one_line(name, 80)));
    Source {
        id: format!("{TABLE_PREFIX}{name}"),
        title,
        restricted: reply
            .get("restricted")
            .and_then(Value::as_bool)
            .unwrap_or(true),
    }
}

/// The non-empty string argument `table`.
fn table_arg(args: &Map<String, Value>) -> Result<String, ToolError> {
    match args.get("table") {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_string()),
        Some(Value::String(_)) => Err(ToolError::InvalidArgs("table must not be empty".into())),
        Some(_) => Err(ToolError::InvalidArgs(
            "table must be a string (a name from listTables)".into(),
        )),
        None => Err(ToolError::InvalidArgs("missing string field table".into())),
    }
}

/// GETs `url` and returns its JSON, mapping failures to the `tool-error`
/// the kernel expects. `what` names the thing read, for messages.
fn get(url: &str, what: &str) -> Result<Value, ToolError> {
    let reply = Request::get(url)
        .send()
        .map_err(HttpError::into_tool_error)?;
    let status = reply.status;
    let text = String::from_utf8_lossy(&reply.body);
    let detail = || service_error(&text);
    match status {
        200..=299 => serde_json::from_str(&text).map_err(|e| {
            ToolError::UnknownOutcome(format!(
                "reading {what}: HTTP {status}, but the reply is not JSON ({e}): {}",
                one_line(&text, 120)
            ))
        }),
        401 => Err(ToolError::Refused(format!(
            "reading {what}: the account is not known to the warehouse (HTTP 401)"
        ))),
        403 => Err(ToolError::Refused(format!(
            "the account may not read {what} (HTTP 403)"
        ))),
        404 => Err(ToolError::InvalidArgs(format!(
            "the warehouse has no {what}; listTables shows the tables"
        ))),
        _ => Err(ToolError::UnknownOutcome(format!(
            "reading {what}: unexpected HTTP {status}: {}",
            detail()
        ))),
    }
}

/// The service's `{"error": ...}` message, else the body, on one line.
fn service_error(text: &str) -> String {
    let message = serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_string));
    one_line(message.as_deref().unwrap_or(text), 120)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_sources_follow_the_reply_and_fail_closed() {
        let s = table_source(
            "payroll",
            &json!({"table": "payroll", "title": "Payroll", "restricted": true, "rows": []}),
        );
        assert_eq!(s.id, "table:payroll");
        assert_eq!(s.title, "Payroll");
        assert!(s.restricted);
        let s = table_source("sales", &json!({"restricted": false}));
        assert_eq!(s.id, "table:sales");
        assert_eq!(s.title, "Warehouse table sales");
        assert!(!s.restricted);
        let s = table_source("odd", &json!({"restricted": "no", "title": "a\nb"}));
        assert!(s.restricted, "a non-boolean flag counts as restricted");
        assert_eq!(s.title, "a b");
        assert!(table_source("odd", &json!([])).restricted);
    }

    #[test]
    fn table_argument_is_a_non_empty_string() {
        let args = |v: Value| v.as_object().cloned().unwrap_or_default();
        assert_eq!(
            table_arg(&args(json!({"table": " sales "})))
                .ok()
                .as_deref(),
            Some("sales")
        );
        for bad in [
            json!({}),
            json!({"table": ""}),
            json!({"table": 3}),
            json!({"table": null}),
        ] {
            assert!(matches!(
                table_arg(&args(bad)),
                Err(ToolError::InvalidArgs(_))
            ));
        }
    }

    #[test]
    fn arguments_must_be_an_object() {
        assert!(Args::parse("").is_ok());
        assert!(Args::parse("{\"table\":\"sales\"}").is_ok());
        for bad in ["[]", "null", "3", "{"] {
            assert!(matches!(Args::parse(bad), Err(ToolError::InvalidArgs(_))));
        }
    }

    #[test]
    fn service_errors_are_one_line() {
        assert_eq!(
            service_error(r#"{"error":"account may not read table payroll"}"#),
            "account may not read table payroll"
        );
        assert_eq!(service_error("plain\ntext"), "plain text");
    }
}
