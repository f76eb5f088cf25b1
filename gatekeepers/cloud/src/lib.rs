//! `cloud`: the gatekeeper of the demo cloud (`services/src/cloud.rs`). It
//! lists instances, launches one and tags one over `wasi:http`; the kernel
//! adds the credential and limits where its requests may go.
//!
//! It exists for tests of multi-step workflows ("launch an instance, then
//! tag it"): the tag needs the id the launch answered, so a gadget cannot
//! finish the workflow until the launch was approved and sent.
//!
//! The cloud is a closed service, so its read is declared `open-world:
//! false`. Launching is neither destructive nor idempotent (each launch is
//! a new instance); tagging is idempotent (a tag is added once). Observers
//! are admitted by one access check (`access-check`): an account that may
//! list the instances may see everything this gatekeeper read.

use gatehouse_gatekeeper::http::{HttpError, Method, Request, base_url, encode_query};
use gatehouse_gatekeeper::manifest::{Manifest, ObserverStrategy, tool};
use gatehouse_gatekeeper::text::one_line;
use gatehouse_gatekeeper::{
    Args, Denial, Gatekeeper, Invocation, ObserverCheck, ObserverVerdict, Output, Source, ToolError,
};
use serde_json::{Value, json};

const TOOLS: &str = "describeInstances, launchInstance, tagInstance";

/// The one source a read reports: the cloud's instance list.
const INSTANCES: &str = "cloud:instances";
const INSTANCES_TITLE: &str = "Cloud instances";

/// The arguments `launchInstance` accepts.
const LAUNCH_FIELDS: &[&str] = &["type", "region", "userData", "name"];
/// The arguments `tagInstance` accepts.
const TAG_FIELDS: &[&str] = &["id", "tag"];

struct Cloud;

impl Gatekeeper for Cloud {
    fn describe(_settings: &[(String, String)]) -> Result<Manifest, ToolError> {
        Ok(manifest())
    }

    fn call(invocation: Invocation) -> Result<Output, ToolError> {
        let args = Args::parse(&invocation.args)?;
        let base = || base_url(&invocation.settings).map_err(ToolError::Refused);
        match invocation.tool.as_str() {
            "describeInstances" => {
                let url = format!("{}/instances", base()?);
                let result = request(Method::Get, &url, None, None)?;
                Ok(Output::read(
                    result,
                    Source::public(INSTANCES, INSTANCES_TITLE),
                ))
            }
            "launchInstance" => {
                let body = launch_body(&args)?;
                let url = format!("{}/instances", base()?);
                let result = request(Method::Post, &url, Some(body), None)?;
                Ok(Output::action(result))
            }
            "tagInstance" => {
                let (id, body) = tag_request(&args)?;
                let url = format!("{}/instances/{}/tags", base()?, encode_query(&id));
                let missing = format!(
                    "the cloud has no instance {}; describeInstances lists them",
                    one_line(&id, 80)
                );
                let result = request(Method::Post, &url, Some(body), Some(&missing))?;
                Ok(Output::action(result))
            }
            other => Err(ToolError::unknown_tool(other, TOOLS)),
        }
    }

    /// `access-check`: one `GET /instances` with the observer's credential.
    /// Fails closed: an access check that could not be made admits nobody.
    fn check_observer(check: ObserverCheck) -> ObserverVerdict {
        let denials = match access_denied(&check.settings) {
            Some(reason) => Denial::all(check.sources, INSTANCES, &reason),
            None => Vec::new(),
        };
        ObserverVerdict::deny(denials)
    }

    // One access check covers everything (`access-check`): no prediction,
    // the SDK's default.
}

/// The manifest, the same for every instance of this gatekeeper.
fn manifest() -> Manifest {
    let text =
        |description: &str| json!({"type": "string", "minLength": 1, "description": description});
    Manifest::builder()
        .tool(
            tool(
                "describeInstances",
                "List every instance (id, type, region, name, tags).",
                json!({"type": "object", "properties": {}, "additionalProperties": false}),
            )
            // A read of a closed service: nothing it does reaches the open world.
            .read_only()
            .open_world(false),
        )
        .tool(
            tool(
                "launchInstance",
                "Launch a new instance. Every call launches another one; the answer carries its id.",
                json!({"type": "object",
                       "properties": {
                           "type": text("The instance type, e.g. small."),
                           "region": text("The region to launch in, e.g. eu-1."),
                           "userData": {"type": "string", "description": "A script the instance runs at boot."},
                           "name": {"type": "string", "description": "A name for the instance."}},
                       "required": ["type", "region"], "additionalProperties": false}),
            )
            .writes()
            .destructive(false)
            .idempotent(false),
        )
        .tool(
            tool(
                "tagInstance",
                "Add a tag to an instance (adding a tag it already has changes nothing).",
                json!({"type": "object",
                       "properties": {
                           "id": text("The instance id, as launchInstance or describeInstances shows it (i-1...)."),
                           "tag": text("The tag to add.")},
                       "required": ["id", "tag"], "additionalProperties": false}),
            )
            .destructive(false)
            .idempotent(true),
        )
        .observers(ObserverStrategy::AccessCheck)
        .build()
}

gatehouse_gatekeeper::export!(Cloud);

/// Why the calling account may not observe the cloud, or `None` when it may
/// list the instances.
fn access_denied(settings: &[(String, String)]) -> Option<String> {
    let base = match base_url(settings) {
        Ok(base) => base,
        Err(e) => return Some(format!("could not check access to the cloud: {e}")),
    };
    match Request::get(format!("{base}/instances")).send() {
        Ok(reply) if (200..300).contains(&reply.status) => None,
        Ok(reply) if reply.status == 401 || reply.status == 403 => Some(format!(
            "the account is not allowed to read the cloud (HTTP {})",
            reply.status
        )),
        Ok(reply) => Some(format!(
            "could not check access to the cloud: unexpected HTTP {}",
            reply.status
        )),
        Err(HttpError::NotSent(e) | HttpError::OutcomeUnknown(e)) => {
            Some(format!("could not check access to the cloud: {e}"))
        }
    }
}

/// The JSON body of `POST /instances` for `launchInstance`'s arguments.
fn launch_body(args: &Args) -> Result<Value, ToolError> {
    args.only(LAUNCH_FIELDS)?;
    let mut body = serde_json::Map::new();
    body.insert("type".into(), Value::String(args.string("type")?));
    body.insert("region".into(), Value::String(args.string("region")?));
    for name in ["userData", "name"] {
        if let Some(value) = args.optional_string(name)? {
            body.insert(name.into(), Value::String(value));
        }
    }
    Ok(Value::Object(body))
}

/// The instance id and the JSON body of `POST /instances/{id}/tags` for
/// `tagInstance`'s arguments.
fn tag_request(args: &Args) -> Result<(String, Value), ToolError> {
    args.only(TAG_FIELDS)?;
    let id = args.string("id")?.trim().to_string();
    let tag = args.string("tag")?;
    Ok((id, json!({ "tag": tag })))
}

/// Sends a request and returns the reply's JSON, mapping every failure to
/// the `tool-error` the kernel needs to decide about retries: 400 (and 404
/// when `not_found` says what is missing) are the caller's mistake and
/// provably changed nothing; 401/403 were refused; anything else (5xx, an
/// unexpected status, a reply that is not JSON, a timeout) may have taken
/// effect, so it is an unknown outcome.
fn request(
    method: Method,
    url: &str,
    body: Option<Value>,
    not_found: Option<&str>,
) -> Result<Value, ToolError> {
    let mut request = Request::new(method, url);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let what = request.describe();
    let reply = request.send().map_err(HttpError::into_tool_error)?;
    classify(&what, reply.status, &reply.body, not_found)
}

/// The outcome of a reply with `status` and `body` to the request `what`;
/// see [`request`].
fn classify(
    what: &str,
    status: u16,
    body: &[u8],
    not_found: Option<&str>,
) -> Result<Value, ToolError> {
    let text = String::from_utf8_lossy(body);
    match (status, not_found) {
        (200..=299, _) => serde_json::from_str(&text).map_err(|e| {
            ToolError::UnknownOutcome(format!(
                "{what}: HTTP {status}, but the reply is not JSON ({e}): {}",
                one_line(&text, 120)
            ))
        }),
        (400, _) => Err(ToolError::InvalidArgs(format!(
            "the cloud refused the arguments (HTTP 400): {}",
            service_error(&text)
        ))),
        (401 | 403, _) => Err(ToolError::Refused(format!(
            "{what}: the cloud refused the request (HTTP {status}): {}",
            service_error(&text)
        ))),
        (404, Some(missing)) => Err(ToolError::InvalidArgs(missing.to_string())),
        _ => Err(ToolError::UnknownOutcome(format!(
            "{what}: unexpected HTTP {status}: {}",
            service_error(&text)
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

    fn args(v: Value) -> Args {
        Args::from(v.as_object().cloned().unwrap_or_default())
    }

    fn invalid<T>(r: Result<T, ToolError>) -> bool {
        matches!(r, Err(ToolError::InvalidArgs(_)))
    }

    #[test]
    fn launch_bodies_carry_exactly_the_given_fields() {
        let body = launch_body(&args(json!({"type": "small", "region": "eu-1"})));
        assert_eq!(body.ok(), Some(json!({"type": "small", "region": "eu-1"})));
        let body = launch_body(&args(json!({
            "type": "large", "region": "us-2", "userData": "#!/bin/sh", "name": "db"
        })));
        assert_eq!(
            body.ok(),
            Some(json!({"type": "large", "region": "us-2", "userData": "#!/bin/sh", "name": "db"}))
        );
        let body = launch_body(&args(json!({"type": "s", "region": "r", "name": null})));
        assert_eq!(body.ok(), Some(json!({"type": "s", "region": "r"})));
    }

    #[test]
    fn bad_launch_arguments_are_invalid() {
        for bad in [
            json!({}),
            json!({"region": "eu-1"}),
            json!({"type": "small"}),
            json!({"type": "", "region": "eu-1"}),
            json!({"type": 3, "region": "eu-1"}),
            json!({"type": "small", "region": null}),
            json!({"type": "small", "region": "eu-1", "name": 7}),
            json!({"type": "small", "region": "eu-1", "userdata": "x"}),
        ] {
            assert!(invalid(launch_body(&args(bad.clone()))), "{bad}");
        }
    }

    #[test]
    fn tag_requests_need_an_id_and_a_tag() {
        let (id, body) = tag_request(&args(json!({"id": " i-2 ", "tag": "prod"})))
            .unwrap_or_else(|_| (String::new(), Value::Null));
        assert_eq!(id, "i-2");
        assert_eq!(body, json!({"tag": "prod"}));
        for bad in [
            json!({"tag": "prod"}),
            json!({"id": "i-1"}),
            json!({"id": 1, "tag": "prod"}),
            json!({"id": "i-1", "tag": ""}),
            json!({"id": "i-1", "tag": "x", "label": "y"}),
        ] {
            assert!(invalid(tag_request(&args(bad.clone()))), "{bad}");
        }
        // The id is one path segment, whatever it contains.
        assert_eq!(encode_query("i-1/../x"), "i-1%2F..%2Fx");
    }

    #[test]
    fn arguments_must_be_an_object() {
        assert!(Args::parse("").is_ok());
        for bad in ["[]", "null", "3", "{"] {
            assert!(invalid(Args::parse(bad)), "{bad}");
        }
    }

    #[test]
    fn replies_map_to_the_errors_the_kernel_needs() {
        let w = "POST http://h/instances";
        assert_eq!(
            classify(w, 201, br#"{"id":"i-2"}"#, None).ok(),
            Some(json!({"id": "i-2"}))
        );
        assert!(invalid(classify(w, 400, br#"{"error":"x"}"#, None)));
        assert!(invalid(classify(w, 404, b"{}", Some("no instance i-9"))));
        for status in [401, 403] {
            assert!(matches!(
                classify(w, status, b"{}", None),
                Err(ToolError::Refused(_))
            ));
        }
        for (status, body) in [
            (404, &b"{}"[..]),
            (500, b"{}"),
            (503, b""),
            (409, b"{}"),
            (200, b"<html>"),
            (201, b""),
        ] {
            assert!(
                matches!(
                    classify(w, status, body, None),
                    Err(ToolError::UnknownOutcome(_))
                ),
                "{status}"
            );
        }
    }

    #[test]
    fn service_errors_are_one_line() {
        assert_eq!(
            service_error(r#"{"error":"missing string field type"}"#),
            "missing string field type"
        );
        assert_eq!(service_error("plain\ntext"), "plain text");
    }
}
