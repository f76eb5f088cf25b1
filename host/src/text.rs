//! Text from anyone, made safe to show: the character-level rules every
//! rendering of a stranger's words rests on (hidden characters dropped,
//! whitespace folded, a cap on length). The renderer, `crate::prompt`, is
//! built on these and composes everything a person reads; lower layers
//! (the store's checks of a write's arguments) quote with them directly, so
//! no layer shows a stranger's characters raw and none needs the renderer.
//!
//! Owns: which characters are hidden, how text is cut. May not: know what
//! any text means, or import another module of the kernel.

/// True for characters that must never reach an approver's screen as-is:
/// controls (but newline and tab in block text), zero-width and bidi
/// controls, and other invisible formatting characters.
pub(crate) fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}' | '\u{FEFF}' | '\u{00AD}' | '\u{034F}' | '\u{061C}'
            | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}' | '\u{180E}' | '\u{3164}'
            | '\u{FFA0}' | '\u{FFF9}'..='\u{FFFB}' | '\u{E0000}'..='\u{E007F}')
}

/// `s` cut to `max` characters, saying so.
pub(crate) fn cap(s: String, max: usize) -> String {
    if s.chars().count() <= max {
        return s;
    }
    let mut out: String = s.chars().take(max).collect();
    out.push_str(" […cut]");
    out
}

/// One line, shortened, with hidden characters removed: for results in
/// status lines.
pub fn excerpt(s: &str, max: usize) -> String {
    let one: String = s
        .chars()
        .map(|c| if c.is_whitespace() { ' ' } else { c })
        .filter(|c| !is_hidden(*c))
        .collect();
    cap(one.split_whitespace().collect::<Vec<_>>().join(" "), max)
}
