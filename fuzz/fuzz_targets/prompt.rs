//! The approval prompt and terminal renderers (SPEC R): attacker text never
//! carries a control character through, and never starts a kernel line.
#![no_main]

use gatehouse::prompt;
use gatehouse::store::{Action, ActionState};
use libfuzzer_sys::fuzz_target;

fn acted_on(c: char, newline_ok: bool) -> bool {
    (c.is_control() && !(newline_ok && c == '\n'))
        || matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
            | '\u{2066}'..='\u{2069}' | '\u{FEFF}' | '\u{2028}' | '\u{2029}')
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let parts: Vec<&str> = text.splitn(4, '\u{0}').collect();
    let part = |i: usize| parts.get(i).copied().unwrap_or("");
    let a = Action {
        id: 7,
        chat: part(0).to_owned(),
        caller: part(1).to_owned(),
        person: part(1).to_owned(),
        gadget: Some(part(2).to_owned()),
        key: Some(part(0).to_owned()),
        gatekeeper: part(0).to_owned(),
        tool: part(1).to_owned(),
        classified_by: "default".into(),
        trust: "byo".into(),
        args: part(2).to_owned(),
        args_digest: None,
        state: ActionState::Pending,
        await_decision: true,
        retryable: None,
        result: None,
        error: Some(part(3).to_owned()),
        auto_approved: false,
        resolved_by: None,
        note: Some(part(3).to_owned()),
        account: Some(part(2).to_owned()),
        created_at: 0,
        decided_at: None,
        finished_at: None,
    };
    let r = prompt::render(&a, Some(part(3)));
    assert!(!r.chars().any(|c| acted_on(c, true)), "render: {r:?}");
    let mut in_fence = false;
    let mut approve = 0;
    for line in r.lines() {
        if line.starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if !in_fence && line.starts_with("Approve") {
            approve += 1;
        }
    }
    assert!(!in_fence, "the fence closes: {r}");
    assert_eq!(approve, 1, "only the kernel's Approve line: {r}");

    let block = prompt::terminal_block(&text);
    assert!(!block.chars().any(|c| acted_on(c, true)));
    for l in block.lines() {
        assert!(!prompt::looks_like_kernel_line(l) || l.starts_with("> "), "{l:?}");
    }
    let line = prompt::terminal_line(&text);
    assert!(!line.chars().any(|c| acted_on(c, false)));
    let json = prompt::terminal_json(&serde_json::json!({ "t": text })).expect("JSON");
    assert!(!json.chars().any(|c| acted_on(c, true)));
});
