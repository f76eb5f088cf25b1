//! Text for people: what the gatekeeper puts in messages, titles and
//! errors is one line and bounded. Owns nothing else; the kernel sanitises
//! again whatever a gatekeeper says.

use serde_json::Value;

/// Collapses `text` to one line (control characters and runs of
/// whitespace become one space) of at most `max` characters, marking a cut
/// with `...`.
pub fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let flat = flat.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > max {
        let cut: String = flat.chars().take(max).collect();
        format!("{cut}...")
    } else {
        flat
    }
}

/// What a JSON value is, for messages ("a string", "null"...).
pub fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_flattens_and_caps() {
        assert_eq!(one_line("a\nb\t c", 10), "a b c");
        assert_eq!(one_line("abcdef", 3), "abc...");
    }
}
