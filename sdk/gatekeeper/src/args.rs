//! A call's arguments: the JSON object the kernel passes, read field by
//! field. Owns the `invalid-args` wording for arguments of the wrong shape;
//! what a field means is the gatekeeper's. (The kernel has already checked
//! the arguments against the tool's input schema before staging; these
//! reads keep a gatekeeper honest when a schema is loose.)

use serde_json::{Map, Value};

use crate::ToolError;
use crate::text::kind;

/// The arguments of a call.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Args(Map<String, Value>);

impl Args {
    /// Parses the arguments text: a JSON object (no text counts as `{}`).
    pub fn parse(args: &str) -> Result<Args, ToolError> {
        let text = if args.trim().is_empty() { "{}" } else { args };
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => Ok(Args(map)),
            Ok(other) => Err(ToolError::InvalidArgs(format!(
                "arguments must be a JSON object, not {}",
                kind(&other)
            ))),
            Err(e) => Err(ToolError::InvalidArgs(format!(
                "arguments are not valid JSON: {e}"
            ))),
        }
    }

    /// The field `name`, whatever it holds.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name)
    }

    /// The object itself.
    pub fn as_map(&self) -> &Map<String, Value> {
        &self.0
    }

    /// The object, taken.
    pub fn into_map(self) -> Map<String, Value> {
        self.0
    }

    /// The string field `name`, which must be present and not blank.
    pub fn string(&self, name: &str) -> Result<String, ToolError> {
        match self.0.get(name) {
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
            Some(Value::String(_)) => {
                Err(ToolError::InvalidArgs(format!("{name} must not be empty")))
            }
            Some(other) => Err(ToolError::InvalidArgs(format!(
                "{name} must be a string, not {}",
                kind(other)
            ))),
            None => Err(ToolError::InvalidArgs(format!(
                "missing string field {name}"
            ))),
        }
    }

    /// The string field `name`, if present (`null` counts as absent; an
    /// empty string is kept).
    pub fn optional_string(&self, name: &str) -> Result<Option<String>, ToolError> {
        match self.0.get(name) {
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Null) | None => Ok(None),
            Some(other) => Err(ToolError::InvalidArgs(format!(
                "{name} must be a string, not {}",
                kind(other)
            ))),
        }
    }

    /// The positive integer field `name` (a JSON number, or a string of
    /// digits, as people type ids).
    pub fn positive_integer(&self, name: &str) -> Result<u64, ToolError> {
        let n = match self.0.get(name) {
            Some(Value::Number(n)) => n.as_u64(),
            Some(Value::String(s)) => s.trim().parse::<u64>().ok(),
            Some(_) => None,
            None => return Err(ToolError::InvalidArgs(format!("missing field {name}"))),
        };
        match n {
            Some(n) if n > 0 => Ok(n),
            _ => Err(ToolError::InvalidArgs(format!(
                "{name} must be a positive integer"
            ))),
        }
    }

    /// Refuses any field not in `known`. An action must not run with a
    /// misspelt argument silently dropped, and the person approving it must
    /// see exactly what will be sent.
    pub fn only(&self, known: &[&str]) -> Result<(), ToolError> {
        match self.0.keys().find(|k| !known.contains(&k.as_str())) {
            Some(unknown) => Err(ToolError::InvalidArgs(format!(
                "unknown argument {}; expected: {}",
                crate::text::one_line(unknown, 40),
                known.join(", ")
            ))),
            None => Ok(()),
        }
    }
}

impl From<Map<String, Value>> for Args {
    fn from(map: Map<String, Value>) -> Self {
        Args(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(v: Value) -> Args {
        Args(v.as_object().cloned().unwrap_or_default())
    }

    fn invalid<T>(r: Result<T, ToolError>) -> bool {
        matches!(r, Err(ToolError::InvalidArgs(_)))
    }

    #[test]
    fn arguments_must_be_an_object() {
        assert_eq!(Args::parse("").ok(), Some(Args::default()));
        assert!(Args::parse("{\"a\":1}").is_ok());
        for bad in ["[]", "null", "3", "{"] {
            assert!(invalid(Args::parse(bad)), "{bad}");
        }
    }

    #[test]
    fn typed_reads_fail_with_invalid_args() {
        let a = args(json!({"s": "x", "blank": " ", "n": 3, "id": "7", "zero": 0, "null": null}));
        assert_eq!(a.string("s").ok().as_deref(), Some("x"));
        assert!(invalid(a.string("blank")));
        assert!(invalid(a.string("n")));
        assert!(invalid(a.string("missing")));
        assert_eq!(a.optional_string("null").ok(), Some(None));
        assert_eq!(a.optional_string("blank").ok(), Some(Some(" ".into())));
        assert!(invalid(a.optional_string("n")));
        assert_eq!(a.positive_integer("n").ok(), Some(3));
        assert_eq!(a.positive_integer("id").ok(), Some(7));
        assert!(invalid(a.positive_integer("zero")));
        assert!(invalid(a.positive_integer("s")));
        assert!(a.only(&["s", "blank", "n", "id", "zero", "null"]).is_ok());
        assert!(invalid(a.only(&["s"])));
    }
}
