//! `webfetch`: an outbound web fetcher. Its one tool, `fetch`, GETs a url
//! over `wasi:http` and returns the status and (at most 64 KiB of) the body
//! as text. The kernel lets its requests reach only the hosts the operator
//! allowed, so "the web" is whatever the operator opened up.
//!
//! It is the open-world read the restricted-data latch (O3) refuses: each
//! fetch is declared `open-world: true` and reported as a `web:<url>`
//! source. The data is public, so observers need no check (`no-check`).

use gatehouse_gatekeeper::http::Request;
use gatehouse_gatekeeper::manifest::{Manifest, ObserverStrategy, tool};
use gatehouse_gatekeeper::text::one_line;
use gatehouse_gatekeeper::{
    Args, Gatekeeper, Invocation, ObserverCheck, ObserverVerdict, Output, Source, ToolError,
};
use serde_json::{Value, json};

/// The most of a body `fetch` returns, in bytes of UTF-8 text.
const MAX_BODY: usize = 64 * 1024;

struct Webfetch;

impl Gatekeeper for Webfetch {
    fn describe(_settings: &[(String, String)]) -> Result<Manifest, ToolError> {
        Ok(manifest())
    }

    fn call(invocation: Invocation) -> Result<Output, ToolError> {
        if invocation.tool != "fetch" {
            return Err(ToolError::unknown_tool(&invocation.tool, "fetch"));
        }
        let args = Args::parse(&invocation.args)?;
        let url = url_arg(&args)?;
        let reply = Request::get(url.as_str()).send()?;
        if reply.status >= 500 {
            let text = String::from_utf8_lossy(&reply.body);
            return Err(ToolError::UnknownOutcome(format!(
                "GET {}: the server failed (HTTP {}): {}",
                one_line(&url, 200),
                reply.status,
                one_line(&text, 120)
            )));
        }
        let body = String::from_utf8_lossy(&reply.body);
        Ok(Output::read(
            json!({"status": reply.status, "body": cut(&body, MAX_BODY)}),
            Source::public(format!("web:{url}"), one_line(&url, 200)),
        ))
    }

    fn check_observer(_check: ObserverCheck) -> ObserverVerdict {
        // Public data: anyone may observe it.
        ObserverVerdict::admit()
    }

    // `no-check`: the kernel never needs a prediction (the SDK's default).
}

/// The manifest, the same for every instance of this gatekeeper.
fn manifest() -> Manifest {
    Manifest::builder()
        .tool(
            tool(
                "fetch",
                "GET a web page and return {\"status\", \"body\"}; the body is text, cut at 64 KiB. Only hosts the operator allowed can be reached.",
                json!({
                    "type": "object",
                    "properties": {"url": {"type": "string", "description": "An http:// or https:// url."}},
                    "required": ["url"],
                    "additionalProperties": false,
                }),
            )
            .read_only()
            .open_world(true),
        )
        .observers(ObserverStrategy::NoCheck)
        .build()
}

gatehouse_gatekeeper::export!(Webfetch);

/// The `url` argument: a string starting with `http://` or `https://`.
/// Anything else wrong with it (whitespace, no host) is found by the HTTP
/// helper, which refuses to send it.
fn url_arg(args: &Args) -> Result<String, ToolError> {
    let url = match args.get("url") {
        Some(Value::String(s)) => s.trim(),
        Some(_) => return Err(ToolError::InvalidArgs("url must be a string".into())),
        None => return Err(ToolError::InvalidArgs("missing string field url".into())),
    };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(ToolError::InvalidArgs(format!(
            "url must start with http:// or https://, not {:?}",
            one_line(url, 80)
        )));
    }
    Ok(url.to_string())
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_cut_on_character_boundaries() {
        assert_eq!(cut("abc", 5), "abc");
        assert_eq!(cut("abcdef", 3), "abc");
        assert_eq!(cut("aé", 2), "a", "é is two bytes");
        assert_eq!(cut("aé", 3), "aé");
        let big = "é".repeat(MAX_BODY);
        assert!(cut(&big, MAX_BODY).len() <= MAX_BODY);
        assert_eq!(cut(&big, MAX_BODY).len(), MAX_BODY);
    }

    #[test]
    fn url_must_be_an_http_url_string() {
        let args = |v: Value| Args::from(v.as_object().cloned().unwrap_or_default());
        assert_eq!(
            url_arg(&args(json!({"url": " http://h/x "})))
                .ok()
                .as_deref(),
            Some("http://h/x")
        );
        assert!(url_arg(&args(json!({"url": "https://h"}))).is_ok());
        for bad in [
            json!({}),
            json!({"url": 3}),
            json!({"url": ""}),
            json!({"url": "ftp://h/"}),
            json!({"url": "file:///etc/passwd"}),
        ] {
            assert!(matches!(
                url_arg(&args(bad)),
                Err(ToolError::InvalidArgs(_))
            ));
        }
    }
}
