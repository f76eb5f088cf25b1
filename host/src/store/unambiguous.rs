//! Arguments every reader reads alike (SPEC R, A5): what the approver is
//! shown must be what the service acts on.
//!
//! JSON leaves a few things to the reader. An object may name a key twice
//! (`{"amount": 1, "amount": 1000}`: one parser keeps the first, another
//! the last); a number may lie beyond what a double holds (`1e400` is
//! infinity to one reader, an error to another, a big decimal to a third),
//! underflow to zero, carry more digits than a double keeps, or be an
//! integer past 2^53, where readers on doubles (JavaScript among them)
//! round it and 64-bit readers do not. The kernel parses arguments once
//! and shows that reading, but the service parses the same bytes its own
//! way. So a call whose arguments could be read two ways is refused before
//! it is staged or sent, and the gadget is told which value to change.
//!
//! The rule is I-JSON's (RFC 7493): no duplicate names, and numbers within
//! IEEE 754 double precision (integers within ±(2^53 − 1)). Strings are
//! already Unicode without lone surrogates: serde refuses those.
//!
//! Owns the check only; [`super::validate_args`] calls it on every call's
//! arguments (reads, stages, workflow calls, reverts). It may not change
//! what it checks.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use std::collections::HashSet;
use std::fmt;

/// The largest integer every reader on doubles reads exactly.
const SAFE_INTEGER: u64 = (1 << 53) - 1;

/// How many significant digits a double can carry: a literal with more
/// asks for precision no double reader keeps.
const DOUBLE_DIGITS: usize = 17;

/// Why `text` (a JSON object, already parsed as `value`) could be read two
/// ways, in words for the gadget; `None` when it is unambiguous.
pub(crate) fn ambiguity(text: &str, value: &serde_json::Value) -> Option<String> {
    number_ambiguity(value).or_else(|| duplicate_key(text))
}

/// The first key an object of `text` names twice, as a sentence.
fn duplicate_key(text: &str) -> Option<String> {
    let mut reader = serde_json::Deserializer::from_str(text);
    // The text parsed as a `Value` already; an error here is the
    // duplicate this pass looks for.
    Once.deserialize(&mut reader)
        .err()
        .map(|e| strip_position(&e.to_string()))
}

/// serde_json appends "at line L column C"; the key names the place well
/// enough, and the sentence stays one line a person can act on.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message.to_owned(),
    }
}

/// A pass over the JSON that keeps nothing and refuses a repeated key.
struct Once;

impl<'de> DeserializeSeed<'de> for Once {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Once {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Once)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format!(
                    "the key {:?} appears twice in one object, and services keep different ones; send each key once",
                    crate::text::excerpt(&key, 60)
                )));
            }
            map.next_value_seed(Once)?;
        }
        Ok(())
    }
}

/// The first number of `value` that readers would read differently.
fn number_ambiguity(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::Number(n) => number(&n.to_string()),
        serde_json::Value::Array(items) => items.iter().find_map(number_ambiguity),
        serde_json::Value::Object(map) => map.values().find_map(number_ambiguity),
        _ => None,
    }
}

/// Why the JSON number `literal` (as written: the kernel keeps numbers'
/// text) is ambiguous, if it is.
fn number(literal: &str) -> Option<String> {
    let shown = crate::text::excerpt(literal, 40);
    let integer = !literal.contains(['.', 'e', 'E']);
    if integer {
        let magnitude = literal.trim_start_matches('-');
        let safe = magnitude.parse::<u64>().is_ok_and(|m| m <= SAFE_INTEGER);
        return (!safe).then(|| {
            format!(
                "the integer {shown} is beyond ±{SAFE_INTEGER}, where services read it differently; send it as a string"
            )
        });
    }
    let Ok(read) = literal.parse::<f64>() else {
        return Some(format!("the number {shown} cannot be read"));
    };
    if !read.is_finite() {
        return Some(format!(
            "the number {shown} is out of range (beyond a double's largest); send it as a string"
        ));
    }
    let digits = significant_digits(literal);
    if read == 0.0 && digits > 0 {
        return Some(format!(
            "the number {shown} is too small for a double and would be read as 0; send it as a string"
        ));
    }
    (digits > DOUBLE_DIGITS).then(|| {
        format!(
            "the number {shown} has {digits} significant digits, more than a double keeps ({DOUBLE_DIGITS}); round it or send it as a string"
        )
    })
}

/// The significant digits of a JSON number's mantissa (no leading or
/// trailing zeros): `0.0120` has 2, `100` has 1, `0` has 0.
fn significant_digits(literal: &str) -> usize {
    let mantissa = literal.split(['e', 'E']).next().unwrap_or(literal);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    digits.trim_start_matches('0').trim_end_matches('0').len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Option<String> {
        let value: serde_json::Value = serde_json::from_str(text).expect("JSON");
        ambiguity(text, &value)
    }

    #[test]
    fn what_every_reader_reads_alike_passes() {
        for ok in [
            r#"{"a": 1, "b": [1, 2.5, -0, 0.0, 1e20, 9007199254740991, -9007199254740991]}"#,
            r#"{"a": {"a": {"a": 1}}, "b": [{"a": 1}, {"a": 2}]}"#,
            r#"{"pi": 3.141592653589793, "tiny": 5e-324, "big": 1.7976931348623157e308}"#,
            r#"{"zeros": 1.50000000000000000000000, "s": "1e400"}"#,
        ] {
            assert_eq!(check(ok), None, "{ok}");
        }
    }

    #[test]
    fn what_readers_read_differently_is_named() {
        for (text, said) in [
            (r#"{"amount": 1e400}"#, "is out of range"),
            (r#"{"amount": -1E+400}"#, "is out of range"),
            (r#"{"amount": 1e-400}"#, "read as 0"),
            (r#"{"id": 9007199254740993}"#, "beyond ±9007199254740991"),
            (r#"{"id": -9007199254740992}"#, "beyond ±9007199254740991"),
            (
                r#"{"n": 123456789012345678901234567890}"#,
                "send it as a string",
            ),
            (r#"{"x": 0.123456789012345678}"#, "18 significant digits"),
            (r#"{"to": "a", "to": "b"}"#, "the key \"to\" appears twice"),
            (
                r#"{"outer": [{"k": 1, "k": 1}]}"#,
                "the key \"k\" appears twice",
            ),
        ] {
            let why = check(text).unwrap_or_else(|| panic!("{text} passed"));
            assert!(why.contains(said), "{text}: {why}");
            assert!(!why.contains('\n') && !why.contains(" at line "), "{why}");
        }
    }
}
