//! The approval prompt: a security boundary (SPEC R1-R3).
//!
//! Everything shown to an approver that a gatekeeper or gadget wrote (names,
//! descriptions, arguments) is attacker text. This module is the one
//! renderer every surface uses (terminal and web), and it guarantees:
//!
//! - names are plain inline text on the kernel's own line: markup removed,
//!   whitespace collapsed, at most 120 characters, `(unnamed)` if empty;
//! - descriptions are capped at 600 characters, fences defused, leading
//!   heading/quote markers stripped, and every line quoted with `> `;
//! - arguments are pretty JSON inside a fence that no argument can close,
//!   capped at 4000 characters with a note;
//! - control, zero-width and bidi-override characters never pass through.
//!
//! So no attacker text can start a line that looks like a kernel field. It
//! may not decide anything; it only renders.

use crate::store::{Action, LedgerKind};
pub use crate::text::excerpt;
use crate::text::{cap, is_hidden};

/// Longest name (tool, gatekeeper, gadget) shown inline, in characters.
pub(crate) const NAME_CAP: usize = 120;
/// Longest tool description quoted in a prompt, in characters.
pub(crate) const DESCRIPTION_CAP: usize = 600;
/// Most characters of pretty-printed arguments shown; the rest is counted.
pub(crate) const ARGS_CAP: usize = 4000;

/// The kernel's own field labels. No attacker-controlled line may start with
/// one of these outside a quoted or fenced block.
pub const FIELD_LABELS: &[&str] = &[
    "Action",
    "Gatekeeper:",
    "Tool:",
    "Endpoint:",
    "Caller:",
    "Staged by:",
    "Sent with:",
    "Changed:",
    "Reverts:",
    "Chat:",
    "Why held:",
    "Description:",
    "Arguments:",
    "Approve",
    "Reject",
    "Status:",
    "Hook #",
    "Trigger:",
    "Gadget:",
    "Added by:",
    "Code:",
    "Runs as:",
    "Enable:",
    "Disable:",
    "request #",
    "Reason:",
    "Allowed calls",
];

/// Make a hidden character visible as `<U+XXXX>`.
fn visible(c: char) -> String {
    format!("<U+{:04X}>", c as u32)
}

/// Characters that could carry structure in Markdown or HTML.
fn is_markup(c: char) -> bool {
    matches!(
        c,
        '`' | '*'
            | '_'
            | '#'
            | '>'
            | '<'
            | '['
            | ']'
            | '('
            | ')'
            | '|'
            | '~'
            | '!'
            | '\\'
            | '{'
            | '}'
            | '"'
            | '\''
    )
}

/// A name as plain inline text (R1).
pub fn inline(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c == '\n' || c == '\r' || c == '\t' || c.is_whitespace() {
            out.push(' ');
        } else if is_hidden(c) || is_markup(c) {
            continue;
        } else {
            out.push(c);
        }
    }
    let collapsed = out.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.is_empty() {
        return "(unnamed)".into();
    }
    cap(collapsed, NAME_CAP)
}

/// Block text with hidden characters made visible and fences defused.
fn block_clean(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            // Unicode line separators break lines in some renderers (the
            // page): they become real line breaks, quoted like any other.
            '\n' | '\u{2028}' | '\u{2029}' => out.push('\n'),
            '\t' => out.push(' '),
            '\r' => {}
            c if is_hidden(c) => out.push_str(&visible(c)),
            c => out.push(c),
        }
    }
    // A run of three backticks or tildes could close our fence: break it.
    out.replace("```", "`\u{2009}`\u{2009}`")
        .replace("~~~", "~\u{2009}~\u{2009}~")
}

/// A description as quoted lines (R1).
pub fn quoted(s: &str) -> String {
    let text = cap(block_clean(s), DESCRIPTION_CAP);
    let mut lines = Vec::new();
    for line in text.lines() {
        let mut l = line.trim_start();
        // Strip leading heading and quote markers, repeatedly.
        loop {
            let t = l.trim_start_matches(['#', '>']).trim_start();
            if t.len() == l.len() {
                break;
            }
            l = t;
        }
        lines.push(format!("> {l}"));
    }
    if lines.is_empty() {
        lines.push("> (no description)".into());
    }
    lines.join("\n")
}

/// Arguments as pretty JSON in a fence that always closes (R1).
pub fn args_block(args: &str) -> String {
    let pretty = serde_json::from_str::<serde_json::Value>(args)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| args.to_owned());
    let body = block_clean(&pretty);
    let total = body.chars().count();
    let (body, note) = if total > ARGS_CAP {
        (
            body.chars().take(ARGS_CAP).collect::<String>(),
            format!("\n(arguments cut: showing {ARGS_CAP} of {total} characters)"),
        )
    } else {
        (body, String::new())
    };
    // Every line is indented, so even a stray fence-like line cannot end the
    // block: the closing fence is the only line at column 0 starting "```".
    let indented: Vec<String> = body.lines().map(|l| format!("  {l}")).collect();
    format!("```json\n{}\n```{note}", indented.join("\n"))
}

/// Whether a line of attacker text could pass for one the kernel prints:
/// a prompt field ([`FIELD_LABELS`]), a decision or ledger line (`#12
/// applied: ...`), or the CLI's own `error:` line. Leading whitespace does
/// not hide it.
pub fn looks_like_kernel_line(line: &str) -> bool {
    let t = line.trim_start();
    FIELD_LABELS.iter().any(|l| t.starts_with(l))
        || t.strip_prefix('#')
            .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
        || t.starts_with("error:")
}

/// The longest [`terminal_line`]: a 10 MiB message is not a line.
pub const TERMINAL_LINE_CAP: usize = 4000;

/// Attacker text as one line for a terminal or the inbox: an error, a
/// failure message, a refusal. Hidden characters (controls, escapes, bidi
/// and zero-width) are made visible as `<U+XXXX>`, every line break and
/// run of whitespace becomes one space, and it is capped at
/// [`TERMINAL_LINE_CAP`] characters. Printed after the kernel's own words
/// (`#3 failed: ...`), it can never start a line of its own.
pub fn terminal_line(s: &str) -> String {
    let mut out = String::new();
    let mut shown = 0usize;
    let mut space = false;
    for c in s.chars() {
        if c.is_whitespace() {
            space = !out.is_empty();
            continue;
        }
        let piece = if is_hidden(c) {
            visible(c)
        } else {
            c.to_string()
        };
        let width = piece.chars().count() + usize::from(space);
        if shown + width > TERMINAL_LINE_CAP {
            out.push_str(" […cut]");
            break;
        }
        if space {
            out.push(' ');
            space = false;
        }
        out.push_str(&piece);
        shown += width;
    }
    out
}

/// A name quoted in a one-line refusal, as it was given: "no tool
/// \"ISSUES_listIssues\" in chat ...". A refusal tells its reader what
/// they (or a gadget, or a gatekeeper) wrote, so that it can be corrected;
/// [`inline`] drops markup characters such as `_`, and the name it showed
/// was not the name given (`ISSUES_listIssues` read as `ISSUESlistIssues`).
/// Markup is harmless here: a refusal is one line of the kernel's own
/// words, printed after them, never rendered as Markdown or HTML (the web
/// shows it as text). What is dangerous on a terminal stays out, by the
/// one terminal-safe rendering, [`terminal_line`]: hidden characters
/// (controls, escapes, bidi and zero-width) are made visible as
/// `<U+XXXX>`, whitespace becomes one space. It is cut at [`NAME_CAP`]
/// characters. Quote it with `{:?}`, which escapes a quote or a backslash
/// in it, so that it cannot end its quotes either.
pub fn as_given(s: &str) -> String {
    cap(terminal_line(s), NAME_CAP)
}

/// Attacker text as lines for a terminal: a gadget's answer, its stdout and
/// stderr. Line breaks are kept (a carriage return, which could overwrite
/// the start of a line, is not); every other hidden character is made
/// visible as `<U+XXXX>`; and a line that could pass for the kernel's own
/// ([`looks_like_kernel_line`]) is marked as quoted with `> `, like a tool's
/// description in the prompt.
pub fn terminal_block(s: &str) -> String {
    let mut clean = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' | '\u{2028}' | '\u{2029}' => clean.push('\n'),
            '\t' => clean.push(' '),
            '\r' => {}
            c if is_hidden(c) => clean.push_str(&visible(c)),
            c => clean.push(c),
        }
    }
    let mut out = String::with_capacity(clean.len());
    for (i, line) in clean.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        if looks_like_kernel_line(line) {
            out.push_str("> ");
        }
        out.push_str(line);
    }
    out
}

/// JSON for a terminal: the same document `serde_json` writes, with every
/// hidden character (and the Unicode line separators) inside a string
/// escaped as `\uXXXX`, so `--json`
/// output shown on a screen carries no escape sequence either (serde_json
/// itself escapes only the C0 controls).
pub fn terminal_json<T: serde::Serialize + ?Sized>(v: &T) -> serde_json::Result<String> {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, VisibleJson::default());
    v.serialize(&mut ser)?;
    // serde_json writes only valid UTF-8.
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// serde_json's pretty formatter, escaping hidden characters in strings.
#[derive(Default)]
struct VisibleJson<'a>(serde_json::ser::PrettyFormatter<'a>);

impl serde_json::ser::Formatter for VisibleJson<'_> {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            if is_hidden(c) || matches!(c, '\u{2028}' | '\u{2029}') {
                w.write_all(&fragment.as_bytes()[start..i])?;
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    write!(w, "\\u{:04x}", u)?;
                }
                start = i + c.len_utf8();
            }
        }
        w.write_all(&fragment.as_bytes()[start..])
    }
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_array(w)
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array(w)
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_array_value(w, first)
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_array_value(w)
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object(w)
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object(w)
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_object_key(w, first)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.begin_object_value(w)
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.0.end_object_value(w)
    }
}

/// One ledger entry's fields as a person sees them, in the terminal's
/// `log` and in the web inbox alike: every field a gadget, a gatekeeper or
/// a person named through [`inline`], so that none can break a line or
/// carry markup. The one place that decides how a ledger entry is shown:
/// [`ledger_line`] is these fields on one line, and the web's ledger table
/// shows them as they are.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LedgerShown {
    /// The chat.
    pub chat: String,
    /// `action`, `observation` or `hook` (or `request`, for a workflow
    /// approval request in `log --approved-by`).
    pub kind: String,
    /// `gatekeeper:tool`.
    pub what: String,
    /// Who called (a gadget, or a person for a hook).
    pub caller: String,
    /// An action's state; `observed` for an entry without one.
    pub state: String,
    /// Who decided (an action), or enabled (a hook).
    pub resolved_by: Option<String>,
    /// Who classified an observed read (the gatekeeper's trust).
    pub classified_by: Option<String>,
    /// The status column of [`ledger_line`]: state, decider, auto.
    pub status: String,
}

/// The shown fields of one ledger entry ([`LedgerShown`]).
pub fn ledger_shown(e: &crate::store::LedgerEntry) -> LedgerShown {
    let resolved_by = e.resolved_by.as_deref().map(inline);
    let classified_by = e.classified_by.as_deref().map(inline);
    let status = match e.kind {
        LedgerKind::Action => format!(
            "{}{}{}",
            inline(e.state.as_deref().unwrap_or("")),
            resolved_by
                .as_deref()
                .map(|b| format!(" by {b}"))
                .unwrap_or_default(),
            if e.auto_approved { " (auto)" } else { "" }
        ),
        LedgerKind::Hook => match &resolved_by {
            Some(p) => format!("hook, enabled by {p}"),
            None => "hook, never enabled".to_owned(),
        },
        LedgerKind::Observation => {
            format!("observed ({})", classified_by.as_deref().unwrap_or(""))
        }
    };
    LedgerShown {
        chat: inline(&e.chat),
        kind: inline(e.kind.as_str()),
        what: format!(
            "{}:{}",
            e.gatekeeper.as_deref().map(inline).unwrap_or_default(),
            e.tool.as_deref().map(inline).unwrap_or_default()
        ),
        caller: inline(&e.caller),
        state: e
            .state
            .as_deref()
            .map(inline)
            .unwrap_or_else(|| "observed".to_owned()),
        resolved_by,
        classified_by,
        status,
    }
}

/// One ledger entry as one line, the same in the terminal's `log` and the
/// web inbox: its [`ledger_shown`] fields.
pub fn ledger_line(e: &crate::store::LedgerEntry) -> String {
    let s = ledger_shown(e);
    format!(
        "#{:<5} {:<12} {:<11} {:<32} {:<20} {}",
        e.id, s.chat, s.kind, s.what, s.caller, s.status
    )
}

/// The shown fields of a workflow approval request someone approved
/// (`log --approved-by`, SPEC L2), as [`ledger_shown`] gives them for an
/// action: its kind is `request`, what it is the step of a run of a
/// design, its caller the run's initiator, its state what it is now, and
/// who approved it (kept when it was since withdrawn or replaced).
pub fn approved_request_shown(r: &crate::store::workflows::ApprovedRequest) -> LedgerShown {
    let state = inline(r.state.as_str());
    let by = inline(&r.approved_by);
    LedgerShown {
        chat: inline(&r.chat),
        kind: "request".to_owned(),
        what: format!(
            "workflow {} run {} step {}",
            inline(&r.workflow),
            r.run,
            inline(&r.step)
        ),
        caller: inline(&r.initiator),
        status: match r.state {
            crate::store::RequestState::Approved => format!("approved by {by}"),
            _ => format!("approved by {by}, {state} since"),
        },
        state,
        resolved_by: Some(by),
        classified_by: None,
    }
}

/// A request someone approved as one line, beside [`ledger_line`]'s
/// actions: `request #N` (its own sequence, so never read as action #N),
/// then its [`approved_request_shown`] fields.
pub fn approved_request_line(r: &crate::store::workflows::ApprovedRequest) -> String {
    let s = approved_request_shown(r);
    format!(
        "request #{:<5} {:<12} {:<32} {:<20} {}",
        r.id, s.chat, s.what, s.caller, s.status
    )
}

/// Multi-line text (an error chain, which may quote a gatekeeper or a
/// gadget) as one terminal-safe line: [`terminal_line`].
pub fn one_line(s: &str) -> String {
    terminal_line(s)
}

/// One action as one line, for a notice (a webhook message, the live
/// view): who staged what where, every name through [`inline`], and never
/// any of its arguments (they may carry what the chat read).
pub fn summary(a: &Action) -> String {
    format!(
        "Action #{} waits for a decision: {}:{} in chat {}, staged by {} (`gatehouse show {}`)",
        a.id,
        inline(&a.gatekeeper),
        inline(&a.tool),
        inline(&a.chat),
        inline(&a.caller),
        a.id
    )
}

/// One waiting approval request as one line, for a notice (as
/// [`summary`] is for an action): which step of which run asks, where, and
/// how to see it; every name through [`inline`], and never its
/// allowed-calls list or its reason (the gadget wrote them; they may carry
/// what the run read).
pub fn request_summary(r: &crate::store::workflows::WaitingRequest) -> String {
    format!(
        "Approval request #{} waits for a decision: step {} of workflow {} (run {}) in chat {}, started by {} (`gatehouse workflow requests --run {}`)",
        r.id,
        inline(&r.step),
        inline(&r.workflow),
        r.run,
        inline(&r.chat),
        inline(&r.initiator),
        r.run
    )
}

/// The prompt for a hook (SPEC H1, R1): what a person enables. The
/// trigger's name and description are the gatekeeper's words, shown as an
/// action's are (inline name, quoted description). `code` is the digest of
/// the component installed under the hook's gadget name now: what
/// enabling lets its turns run, shown so that a person enables code, not
/// a name (a re-install under the name is told as a change).
pub fn render_hook(
    h: &crate::store::Hook,
    description: Option<&str>,
    code: Option<&str>,
) -> String {
    let state = if h.enabled { "enabled" } else { "disabled" };
    let mut out = String::new();
    out.push_str(&format!("Hook #{} ({state})\n", h.id));
    out.push_str(&format!("Gatekeeper: {}\n", inline(&h.gatekeeper)));
    let how = match h.every_secs {
        Some(s) => format!("schedule: every {s} s while `gatehouse serve` runs"),
        None => {
            "webhook: a delivery signed with the hook's secret, to its URL on `gatehouse serve`"
                .to_owned()
        }
    };
    out.push_str(&format!("Trigger: {} ({how})\n", inline(&h.trigger)));
    out.push_str(&format!(
        "Gadget: {} in chat {}; its input is the event\n",
        inline(&h.gadget),
        inline(&h.chat)
    ));
    match code {
        Some(code) => out.push_str(&format!(
            "Code: sha256 {} (what enabling it runs; code installed under the name later runs only once it is enabled again)\n",
            inline(code)
        )),
        None => out.push_str(&format!(
            "Code: none: no gadget named {} is installed, so enabling it is refused\n",
            inline(&h.gadget)
        )),
    }
    if let (Some(pinned), Some(code)) = (&h.gadget_digest, code)
        && pinned != code
    {
        out.push_str(&format!(
            "Changed: gadget {} was re-installed since this hook was set up to run sha256 {}; {}\n",
            inline(&h.gadget),
            inline(pinned),
            if h.enabled {
                "its firings run nothing until it is enabled again"
            } else {
                "enabling it runs the new code above"
            }
        ));
    }
    out.push_str(&format!("Added by: {}\n", inline(&h.created_by)));
    let person = match (&h.enabled_by, h.enabled) {
        (Some(p), true) => inline(p),
        _ => "the person who enables it".to_owned(),
    };
    out.push_str(&format!(
        "Runs as: hook {} in {} for {person}: its turns use {person}'s accounts, and every write they stage waits for a decision like any other\n",
        h.id,
        inline(&h.chat)
    ));
    out.push_str("Description:\n");
    out.push_str(&quoted(description.unwrap_or("")));
    out.push('\n');
    if h.enabled {
        out.push_str(&format!("Disable: gatehouse hook disable {}\n", h.id));
    } else {
        out.push_str(&format!(
            "Enable: gatehouse hook enable {0}    (nothing runs until then)\n",
            h.id
        ));
    }
    out
}

/// A workflow approval request with its allowed-calls list (SPEC G4), as
/// the approver reads it: the same text in `gatehouse workflow requests`
/// and the web inbox. Every name through [`inline`]; constraints are shown
/// exactly (brackets and quotes kept), hidden characters removed.
pub fn request(r: &crate::store::workflows::RequestRecord) -> String {
    let mut out = format!(
        "request #{} (run {}, step {}) {}{}\n",
        r.id,
        r.run,
        inline(&r.step),
        inline(r.state.as_str()),
        r.decided_by
            .as_deref()
            .map(|b| format!(" by {}", inline(b)))
            .unwrap_or_default()
    );
    out.push_str(&format!("  Reason: {}\n", excerpt(&r.reason, 300)));
    out.push_str("  Allowed calls (nothing else will be permitted):\n");
    if let Some(tools) = r.allowed.as_object() {
        for (tool, inputs) in tools {
            match inputs.as_object() {
                None => out.push_str(&format!("    {}: any input (read-only)\n", inline(tool))),
                Some(inputs) => {
                    out.push_str(&format!("    {}:\n", inline(tool)));
                    for (name, c) in inputs {
                        out.push_str(&format!("      {} = {}\n", inline(name), constraint(c)));
                    }
                }
            }
        }
    }
    out
}

/// One input's constraint as the approver reads it.
fn constraint(c: &serde_json::Value) -> String {
    let stored = serde_json::json!({ "T:t": { "x": c } }).to_string();
    let text = crate::grants::allowed_from_stored(&stored)
        .ok()
        .and_then(|l| match l.into_iter().next() {
            Some((_, crate::grants::ToolRule::Inputs(mut i))) if !i.is_empty() => {
                let (_, r) = i.remove(0);
                Some(format!(
                    "{}{}",
                    r.constraint.describe(),
                    if r.optional { " (optional)" } else { "" }
                ))
            }
            _ => None,
        })
        .unwrap_or_else(|| c.to_string());
    // Not `inline`: the approver must see brackets and quotes exactly.
    excerpt(&text, 300)
}

/// One audit row of a workflow run (SPEC G7): who allowed the call, on what
/// grounds, and a digest of its arguments (never the arguments).
pub fn invocation(i: &crate::store::workflows::Invocation) -> String {
    format!(
        "#{:<4} {:<10} {:<28} {:<8} authority {}  requests {:?}  cert {}  args sha256:{}{}",
        i.id,
        inline(&i.step),
        inline(&i.tool),
        i.decision,
        inline(&i.authority),
        i.requests,
        i.certificate
            .as_deref()
            .map(|c| inline(&c.chars().take(8).collect::<String>()))
            .unwrap_or_else(|| "-".into()),
        i.args_digest.chars().take(12).collect::<String>(),
        i.reason
            .as_deref()
            .map(|r| format!("  ({})", inline(r)))
            .unwrap_or_default()
    )
}

/// The prompt for one action.
pub fn render(a: &Action, description: Option<&str>) -> String {
    let gk = inline(&a.gatekeeper);
    let tool = inline(&a.tool);
    // Only actions are ever staged, and an action is always classified by
    // the safe default: the provenance line says so, and what has been sent.
    let sent = if a.state == crate::store::ActionState::Pending {
        "Nothing has been sent yet.".to_owned()
    } else {
        format!("It is now {}.", a.state)
    };
    let why = format!(
        "Why held: {tool} is an action: its gatekeeper did not declare it read-only, so it may change the outside world (classified by: {}). {sent}",
        inline(&a.classified_by)
    );
    let mut out = String::new();
    out.push_str(&format!("Action #{} ({})\n", a.id, a.state));
    out.push_str(&format!("Gatekeeper: {gk} (trust: {})\n", inline(&a.trust)));
    out.push_str(&format!("Tool: {tool}\n"));
    let through = match &a.gadget {
        Some(g) => format!(", through gadget {}", inline(g)),
        None => String::new(),
    };
    out.push_str(&format!(
        "Staged by: {} in chat {}{through}\n",
        inline(&a.caller),
        inline(&a.chat)
    ));
    out.push_str(&format!(
        "Sent with: {}'s credential ({})\n",
        inline(&a.person),
        inline(a.account.as_deref().unwrap_or("none"))
    ));
    out.push_str(&why);
    out.push('\n');
    if let Some(original) = a.reverts {
        out.push_str(&format!(
            "Reverts: action #{original}: this new action undoes it by calling {tool} with #{original}'s arguments; #{original} itself stays in the ledger as applied\n"
        ));
    }
    if let (Some(note), crate::store::ActionState::Pending) = (&a.note, a.state) {
        out.push_str(&format!(
            "Changed: {} since it was staged; decide again on these facts\n",
            excerpt(note, 600)
        ));
    }
    out.push_str("Description:\n");
    out.push_str(&quoted(description.unwrap_or("")));
    out.push('\n');
    out.push_str("Arguments:\n");
    out.push_str(&args_block(&a.args));
    out.push('\n');
    if let Some(e) = &a.error {
        out.push_str(&format!("Status: failed: {}\n", excerpt(e, 600)));
    }
    if a.state == crate::store::ActionState::Expired {
        out.push_str(
            "Status: expired: nobody decided it within its chat's expiry, so it was never sent and never will be\n",
        );
    }
    if a.state == crate::store::ActionState::Pending {
        out.push_str(&format!(
            "Approve: gatehouse approve {0}    Reject: gatehouse reject {0}\n",
            a.id
        ));
    }
    out
}

/// Who wrote a piece of what a person reads on a card: the kernel's own
/// words, a name a person or the operator chose (sanitised, shown as a
/// name), or attacker text: a gatekeeper's (tool names, descriptions) or
/// a gadget's (arguments). A surface must show the last two so that they
/// can never pass for the kernel's words or controls (the web quotes,
/// borders and labels them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Author {
    /// The kernel's own words.
    Kernel,
    /// A name a person or the operator chose: a chat, a gatekeeper
    /// instance, a person, a host (through [`inline`]).
    Name,
    /// Written by the gatekeeper: a tool's name.
    Gatekeeper,
    /// Written by the gadget: an argument's value.
    Gadget,
}

/// One piece of a card's summary line, with who wrote it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Piece {
    /// The text, already through the sanitiser.
    pub text: String,
    /// Who wrote it.
    pub by: Author,
}

fn piece(text: impl Into<String>, by: Author) -> Piece {
    Piece {
        text: text.into(),
        by,
    }
}

/// Longest argument value shown in a card's table, in characters.
pub(crate) const CELL_CAP: usize = 200;
/// Longest argument value quoted in a card's summary line.
pub(crate) const HEADLINE_CAP: usize = 60;
/// Most arguments a card's table shows; the full JSON has the rest.
pub(crate) const ARG_ROWS: usize = 20;

/// An argument's value as one table cell (R1): on one line, every line
/// break shown as `↵`, every hidden character (controls, bidi overrides,
/// zero-width) made visible as `<U+XXXX>`, capped at `max` characters.
/// Markup characters are kept (the value is shown exactly, as text).
pub fn cell(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max * 4));
    let mut shown = 0usize;
    for c in s.chars() {
        let piece = match c {
            '\n' | '\u{2028}' | '\u{2029}' => "↵".to_owned(),
            '\t' => " ".to_owned(),
            c if is_hidden(c) => visible(c),
            c => c.to_string(),
        };
        shown += piece.chars().count();
        out.push_str(&piece);
        if shown > max + 12 {
            break;
        }
    }
    cap(out, max)
}

fn value_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn value_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

/// One row of a card's argument table: the argument's name through
/// [`inline`], its value through [`cell`] (both written by the gadget).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ArgRow {
    /// The argument's name.
    pub name: String,
    /// Its value on one line, capped ([`CELL_CAP`]).
    pub value: String,
    /// Its JSON type (`string`, `number`, `boolean`, `null`, `array`,
    /// `object`).
    pub kind: &'static str,
}

/// The arguments as a readable table: one row per top-level argument (at
/// most [`ARG_ROWS`]), and a note when some are not shown or they are not
/// a JSON object. The full JSON is [`args_block`]'s.
pub fn arg_rows(args: &str) -> (Vec<ArgRow>, Option<String>) {
    match serde_json::from_str::<serde_json::Value>(args) {
        Ok(serde_json::Value::Object(map)) => {
            let total = map.len();
            let rows = map
                .iter()
                .take(ARG_ROWS)
                .map(|(k, v)| ArgRow {
                    name: inline(k),
                    value: cell(&value_text(v), CELL_CAP),
                    kind: value_kind(v),
                })
                .collect();
            let note = (total > ARG_ROWS).then(|| {
                format!(
                    "{} more arguments are not shown here: see the full JSON",
                    total - ARG_ROWS
                )
            });
            (rows, note)
        }
        Ok(_) | Err(_) => (
            vec![ArgRow {
                name: "(arguments)".to_owned(),
                value: cell(args, CELL_CAP),
                kind: "raw",
            }],
            Some("the arguments are not a JSON object".to_owned()),
        ),
    }
}

/// The argument a summary line quotes: a title-like one if there is one,
/// else the first string or number.
fn headline(args: &str) -> Option<(String, String)> {
    const PREFERRED: &[&str] = &[
        "title", "name", "label", "subject", "summary", "message", "text", "path", "url", "body",
        "id",
    ];
    let serde_json::Value::Object(map) = serde_json::from_str(args).ok()? else {
        return None;
    };
    let simple = |v: &serde_json::Value| v.is_string() || v.is_number() || v.is_boolean();
    PREFERRED
        .iter()
        .find_map(|k| map.get(*k).filter(|v| simple(v)).map(|v| (*k, v)))
        .or_else(|| {
            map.iter()
                .find(|(_, v)| simple(v))
                .map(|(k, v)| (k.as_str(), v))
        })
        .map(|(k, v)| (inline(k), cell(&value_text(v), HEADLINE_CAP)))
}

/// Where an action goes, as the operator configured its gatekeeper (never
/// anything the gadget or the gatekeeper wrote): the host credentials go
/// to, else the only allowed host; `None` when the record names none.
pub fn destination(g: &crate::store::GatekeeperRecord) -> Option<String> {
    match (g.credential_host(), g.hosts.as_slice()) {
        (Some(h), _) => Some(inline(h)),
        (None, []) => None,
        (None, hosts) => Some(format!("one of {} hosts", hosts.len())),
    }
}

/// A card's one-line summary a person can judge: `createIssue on tracker
/// at HOST — title “X”`. The tool's name is the gatekeeper's word, the
/// quoted value the gadget's; the host is the operator's record. Every
/// piece through the sanitiser, each marked with its author.
pub fn summary_pieces(a: &Action, host: Option<&str>) -> Vec<Piece> {
    let mut out = vec![
        piece(inline(&a.tool), Author::Gatekeeper),
        piece(" on ", Author::Kernel),
        piece(inline(&a.gatekeeper), Author::Name),
    ];
    if let Some(h) = host {
        out.push(piece(" at ", Author::Kernel));
        out.push(piece(inline(h), Author::Name));
    }
    if let Some((k, v)) = headline(&a.args) {
        out.push(piece(" — ", Author::Kernel));
        out.push(piece(k, Author::Gadget));
        out.push(piece(" ", Author::Kernel));
        out.push(piece(v, Author::Gadget));
    }
    out
}

/// [`summary_pieces`] as one plain line: the gadget's value in quotes
/// (“…”), so the line reads the same on a terminal.
pub fn summary_line(pieces: &[Piece]) -> String {
    // The gadget's pieces come in pairs: an argument's name, its value.
    let mut out = String::new();
    let mut gadget = 0usize;
    for p in pieces {
        if p.by == Author::Gadget {
            gadget += 1;
            if gadget.is_multiple_of(2) {
                out.push('“');
                out.push_str(&p.text);
                out.push('”');
                continue;
            }
        }
        out.push_str(&p.text);
    }
    out
}

/// Why an action waits for a person, in the kernel's words, one reason a
/// line: its classification, auto-approval's key one (as
/// [`crate::classify::key_one_missing`] says), what changed since it was
/// staged, the chat's latch, and when it expires. No line names the tool
/// (the gatekeeper's word): the card's summary does, boxed as the
/// gatekeeper's, and these lines are the kernel's alone.
pub fn held(
    a: &Action,
    tool: Option<&crate::manifest::Tool>,
    trust: crate::manifest::Trust,
    latched: bool,
    expires_at: Option<i64>,
) -> Vec<String> {
    let mut out = vec![format!(
        "An action: the tool is not declared read-only, so it may change the outside world (classified by: {}); nothing has been sent.",
        inline(&a.classified_by)
    )];
    match tool {
        None => out.push(
            "Its gatekeeper no longer declares the tool: approving it sends nothing if anything changed since it was staged."
                .to_owned(),
        ),
        Some(t) => match crate::classify::key_one_missing(&t.annotations, trust) {
            Some(m) => out.push(format!("Not auto-approvable: {m}.")),
            None => out.push(
                "Key one holds (a vetted gatekeeper, a non-destructive idempotent tool): a rule for exactly this gatekeeper's tool (key two) would approve it without a person."
                    .to_owned(),
            ),
        },
    }
    if let Some(note) = &a.note {
        out.push(format!(
            "Changed since it was staged: {}; decide again on these facts.",
            excerpt(note, 600)
        ));
    }
    if latched {
        out.push(format!(
            "Chat {} is locked down (it read owner-only data): nothing from it is auto-approved.",
            inline(&a.chat)
        ));
    }
    if let Some(at) = expires_at {
        let when = u64::try_from(at)
            .ok()
            .map(|ms| std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
            .map(|t| humantime::format_rfc3339_seconds(t).to_string())
            .unwrap_or_else(|| at.to_string());
        out.push(format!(
            "Expires {when} if nobody decides it; then it is never sent."
        ));
    }
    out
}

/// Who staged an action, as a card says it: the principal, the gadget,
/// the chat, and whose account it is sent with.
pub fn staged_by(a: &Action) -> String {
    let through = match &a.gadget {
        Some(g) => format!(" through gadget {}", inline(g)),
        None => String::new(),
    };
    format!(
        "{}{through} in chat {}; sent with {}'s credential ({})",
        inline(&a.caller),
        inline(&a.chat),
        inline(&a.person),
        inline(a.account.as_deref().unwrap_or("none"))
    )
}

// Worded here, the one renderer: a tool name is the component's word, and
// what a changed annotation now means is `classify`'s verdict, said for people.
impl crate::manifest::ToolChange {
    /// One line for the operator; tool names are the component's words,
    /// shown through the sanitiser (SPEC R1). `trust` is the instance's
    /// tier, to say what a changed annotation now means.
    pub fn line(&self, trust: crate::manifest::Trust) -> String {
        use crate::classify::{Kind, classify};
        use crate::manifest::{Annotations, ToolChange};
        let name = |n: &str| inline(n);
        match self {
            ToolChange::Added(t) => format!("added tool {}", name(t)),
            ToolChange::Removed(t) => format!("removed tool {}", name(t)),
            ToolChange::Annotations { tool, from, to } => {
                let kind = |a: &Annotations| match classify(a, trust).kind {
                    Kind::Read => "a read",
                    Kind::Action => "an action",
                };
                let class = if kind(to) == kind(from) {
                    format!("still {}", kind(to))
                } else {
                    format!("now {} (was {})", kind(to), kind(from))
                };
                format!(
                    "tool {}: annotations changed from {} to {}; it is {class}",
                    name(tool),
                    from.hints(),
                    to.hints(),
                )
            }
            ToolChange::Schema(t) => format!("tool {}: input schema changed", name(t)),
            ToolChange::Description(t) => format!("tool {}: description changed", name(t)),
            ToolChange::OutputSchema(t) => format!("tool {}: output schema changed", name(t)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cannot_break_lines_or_carry_markup() {
        let n = inline("createIssue\nEndpoint: https://evil\u{202E}");
        assert!(!n.contains('\n'));
        assert_eq!(n, "createIssue Endpoint: https://evil");
        assert_eq!(inline("  \u{200B}  "), "(unnamed)");
        assert!(inline(&"x".repeat(500)).chars().count() < NAME_CAP + 10);
    }

    /// A refusal quotes a name as it was given (`_` and other markup
    /// characters kept), and still nothing of it can act on a terminal or
    /// break the line.
    #[test]
    fn refusals_quote_names_as_given() {
        assert_eq!(as_given("ISSUES_listIssues"), "ISSUES_listIssues");
        assert_eq!(as_given("a*b_[c](d)`e`#f"), "a*b_[c](d)`e`#f");
        assert_eq!(as_given(""), "");
        let hostile = as_given("x\n\u{1b}[31mEndpoint: evil\u{202E}\u{200B}y");
        assert!(
            !hostile.contains('\n') && !hostile.contains('\u{1b}'),
            "{hostile}"
        );
        assert!(
            !hostile.contains('\u{202E}') && !hostile.contains('\u{200B}'),
            "{hostile}"
        );
        assert_eq!(hostile, "x <U+001B>[31mEndpoint: evil<U+202E><U+200B>y");
        assert!(as_given(&"x".repeat(500)).chars().count() < NAME_CAP + 10);
        let quoted = format!("no tool {:?} here", as_given("a\"b\\c"));
        assert_eq!(quoted, r#"no tool "a\"b\\c" here"#);
    }

    #[test]
    fn descriptions_are_quoted_and_defused() {
        let q = quoted("## Approve\n> Endpoint: x\n```\nfence");
        for line in q.lines() {
            assert!(line.starts_with("> "), "{line}");
        }
        assert!(!q.contains("```"));
        assert!(q.contains("> Approve"));
    }

    fn action(gatekeeper: &str, tool: &str, args: &str) -> Action {
        Action {
            id: 7,
            chat: "work".into(),
            caller: "alice".into(),
            person: "alice".into(),
            gadget: Some("g".into()),
            key: Some("K".into()),
            gatekeeper: gatekeeper.into(),
            tool: tool.into(),
            classified_by: "default".into(),
            trust: "byo".into(),
            args: args.into(),
            args_digest: None,
            state: crate::store::ActionState::Pending,
            await_decision: true,
            retryable: None,
            result: None,
            error: None,
            auto_approved: false,
            resolved_by: None,
            note: None,
            account: Some("operator:tracker-token".into()),
            reverts: None,
            created_at: 0,
            decided_at: None,
            finished_at: None,
        }
    }

    /// The lines of a rendered prompt that are *not* inside a quoted
    /// description or the arguments fence.
    fn structural_lines(rendered: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut in_fence = false;
        for line in rendered.lines() {
            if line.starts_with("```") {
                in_fence = !in_fence;
                continue;
            }
            if in_fence || line.starts_with("> ") {
                continue;
            }
            out.push(line.to_owned());
        }
        out
    }

    #[test]
    fn a_forged_endpoint_line_cannot_appear() {
        let a = action(
            "gk",
            "createIssue\nEndpoint: https://evil",
            r#"{"x":"\nApprove: all"}"#,
        );
        let r = render(&a, Some("ok\nEndpoint: https://evil\n## Approve"));
        let endpoint_lines: Vec<_> = r.lines().filter(|l| l.starts_with("Endpoint:")).collect();
        assert!(endpoint_lines.is_empty(), "{r}");
        let approve_lines: Vec<_> = r.lines().filter(|l| l.starts_with("Approve")).collect();
        assert_eq!(
            approve_lines.len(),
            1,
            "only the kernel's own Approve line: {r}"
        );
    }

    #[test]
    fn bidi_and_zero_width_are_neutralised_and_long_fields_cut() {
        let a = action(
            "g\u{202E}k\u{200B}",
            &"t".repeat(300),
            &format!(r#"{{"a":"{}"}}"#, "x".repeat(5000)),
        );
        let r = render(&a, Some(&format!("\u{2066}{}", "d".repeat(900))));
        assert!(!r.contains('\u{202E}') && !r.contains('\u{200B}') && !r.contains('\u{2066}'));
        assert!(
            r.contains("<U+2066>"),
            "block text makes hidden characters visible"
        );
        assert!(r.contains("[…cut]"));
        assert!(r.contains("(arguments cut: showing 4000 of"));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// R1/R2: whatever a gatekeeper or gadget writes, no line outside
        /// the quoted description and the arguments fence starts with a
        /// kernel field label unless the kernel wrote it, and the fence
        /// always closes.
        #[test]
        fn attacker_text_never_forges_structure(
            gk in ".{0,200}",
            tool in ".{0,200}",
            desc in ".{0,800}",
            arg in ".{0,300}",
            raw in proptest::bool::ANY,
        ) {
            let args = if raw { arg.clone() } else { serde_json::json!({"v": arg}).to_string() };
            let r = render(&action(&gk, &tool, &args), Some(&desc));
            // The fence opens and closes exactly once.
            let fences = r.lines().filter(|l| l.starts_with("```")).count();
            proptest::prop_assert_eq!(fences, 2);
            // The kernel's own structure, line by line, in order.
            let lines = structural_lines(&r);
            let expected_prefixes = ["Action #7 (pending)", "Gatekeeper: ", "Tool: ", "Staged by: ", "Sent with: ", "Why held: ", "Description:", "Arguments:", "Approve: gatehouse approve 7"];
            let mut it = lines.iter().filter(|l| !l.starts_with("(arguments cut"));
            for p in expected_prefixes {
                let l = it.next();
                proptest::prop_assert!(l.is_some_and(|l| l.starts_with(p)), "expected {p:?}, got {l:?} in\n{r}");
            }
            proptest::prop_assert!(it.next().is_none(), "no extra structural line in\n{r}");
            // Hidden characters never survive.
            let hidden = r.chars().any(|c| matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200B}'..='\u{200F}'));
            proptest::prop_assert!(!hidden, "a hidden character survived in\n{}", r);
        }
    }

    /// What a terminal would act on or hide, decided independently of the
    /// renderer's own list: controls (escapes among them), bidi controls,
    /// zero-width characters and Unicode line separators.
    fn acted_on(c: char, newline_ok: bool) -> bool {
        (c.is_control() && !(newline_ok && c == '\n'))
            || matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
                | '\u{2066}'..='\u{2069}' | '\u{FEFF}' | '\u{2028}' | '\u{2029}')
    }

    /// Text built from the pieces attackers use, or anything at all.
    fn hostile_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let pieces = prop::sample::select(vec![
            "\n",
            "\r",
            "\r\n",
            "\t",
            "\u{1b}[2J",
            "\u{1b}]8;;https://evil/\u{7}",
            "\u{9b}31m",
            "\u{202E}",
            "\u{2066}",
            "\u{200B}",
            "\u{feff}",
            "\u{2028}",
            "\u{85}",
            "\u{7f}",
            "Approve: gatehouse approve 1",
            "#1 applied: ok",
            "#12 failed",
            "Status: applied",
            "Endpoint: https://evil",
            "error: none",
            "  ",
            "> ",
            "```",
            "word",
            "é",
            "\u{1F600}",
        ]);
        prop_oneof![
            any::<String>(),
            prop::collection::vec(pieces, 0..40).prop_map(|p| p.concat()),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// R for every terminal and inbox rendering of attacker text: no
        /// control character, escape, bidi or zero-width character survives,
        /// and no line of attacker text passes for one of the kernel's.
        #[test]
        fn no_rendering_lets_attacker_text_act_on_a_terminal(text in hostile_text()) {
            use proptest::prop_assert;
            let line = terminal_line(&text);
            prop_assert!(!line.chars().any(|c| acted_on(c, false)), "terminal_line: {line:?}");
            prop_assert!(line.chars().count() <= TERMINAL_LINE_CAP + 8);

            let block = terminal_block(&text);
            prop_assert!(!block.chars().any(|c| acted_on(c, true)), "terminal_block: {block:?}");
            for l in block.lines() {
                prop_assert!(
                    !looks_like_kernel_line(l) || l.starts_with("> "),
                    "terminal_block left a kernel-like line: {l:?}"
                );
                prop_assert!(!FIELD_LABELS.iter().any(|f| l.trim_start().starts_with(f)), "{l:?}");
            }

            for shown in [inline(&text), excerpt(&text, 300), as_given(&text)] {
                prop_assert!(!shown.chars().any(|c| acted_on(c, false)), "{shown:?}");
            }
            let refusal = format!("no tool {:?} here", as_given(&text));
            prop_assert!(!refusal.chars().any(|c| acted_on(c, false)), "{refusal:?}");

            let json = terminal_json(&serde_json::json!({ "text": text })).unwrap();
            prop_assert!(!json.chars().any(|c| acted_on(c, true)), "terminal_json: {json:?}");
            let back: serde_json::Value = serde_json::from_str(&json).unwrap();
            prop_assert!(back["text"] == text.as_str(), "terminal_json changed the value");

            use crate::overseer::Decision;
            for d in [
                Decision::Failed { id: 7, message: text.clone(), retryable: false },
                Decision::Failed { id: 7, message: text.clone(), retryable: true },
                Decision::Refused { id: 7, reason: text.clone() },
                Decision::Applied { id: 7, result: text.clone() },
            ] {
                let l = d.line();
                prop_assert!(l.starts_with("#7 "), "{l:?}");
                prop_assert!(!l.chars().any(|c| acted_on(c, false)), "Decision::line: {l:?}");
            }
            let f = crate::sharing::ObserverFailure {
                gatekeeper: text.clone(),
                source: text.clone(),
                title: text.clone(),
                account: Some(text.clone()),
                reason: text.clone(),
            };
            let l = f.line();
            prop_assert!(!l.chars().any(|c| acted_on(c, false)), "ObserverFailure::line: {l:?}");

            let mut a = action(&text, &text, &serde_json::json!({ "v": text }).to_string());
            a.error = Some(text.clone());
            a.caller = text.clone();
            a.chat = text.clone();
            let r = render(&a, Some(&text));
            prop_assert!(!r.chars().any(|c| acted_on(c, true)), "render: {r:?}");
        }
    }

    /// A card's summary line and argument table are built from the
    /// sanitised pieces: hidden characters visible, line breaks shown as
    /// `↵`, values capped, and each piece marked with its author.
    #[test]
    fn card_pieces_are_sanitised_and_attributed() {
        let args = serde_json::json!({
            "body": "x",
            "title": "[Approve]\nApprove: gatehouse approve 9\u{202E}",
            "n": 3,
        });
        let mut a = action("tracker", "create\nIssue\u{202E}", &args.to_string());
        a.note = None;
        let p = summary_pieces(&a, Some("127.0.0.1:4000"));
        let line = summary_line(&p);
        assert_eq!(
            line,
            "create Issue on tracker at 127.0.0.1:4000 — title “[Approve]↵Approve: gatehouse approve 9<U+202E>”"
        );
        assert!(!line.contains('\n') && !line.contains('\u{202E}'));
        assert_eq!(p[0].by, Author::Gatekeeper);
        assert_eq!(p[2].by, Author::Name);
        assert_eq!(p.last().map(|p| p.by), Some(Author::Gadget));
        let (rows, note) = arg_rows(&a.args);
        assert!(note.is_none());
        assert_eq!(rows.len(), 3);
        let title = rows.iter().find(|r| r.name == "title").unwrap();
        assert_eq!(title.kind, "string");
        assert!(title.value.starts_with("[Approve]↵Approve"), "{title:?}");
        let long = cell(&"y".repeat(5000), CELL_CAP);
        assert!(long.chars().count() <= CELL_CAP + 8 && long.ends_with("[…cut]"));
        let many: serde_json::Map<String, serde_json::Value> = (0..30)
            .map(|i| (format!("k{i:02}"), serde_json::json!(i)))
            .collect();
        let (rows, note) = arg_rows(&serde_json::Value::Object(many).to_string());
        assert_eq!(rows.len(), ARG_ROWS);
        assert!(note.unwrap().starts_with("10 more arguments"));
        let (rows, note) = arg_rows("[1,2]");
        assert_eq!(rows.len(), 1);
        assert!(note.is_some());
    }

    #[test]
    fn held_says_why_in_the_kernels_words() {
        let mut a = action("tracker", "createIssue", "{}");
        a.note = Some("the grant changed".into());
        let tool = crate::manifest::Tool {
            name: "createIssue".into(),
            description: String::new(),
            input_schema: "{}".into(),
            annotations: crate::manifest::Annotations::default(),
            reverted_by: None,
            honours_idempotency_key: false,
            title: None,
            output_schema: None,
            task_support: None,
        };
        let h = held(&a, Some(&tool), crate::manifest::Trust::Byo, true, Some(0));
        assert!(h[0].starts_with("An action: the tool is not declared read-only"));
        let hostile = action("tracker", "Approve all\u{202E}", "{}");
        let quiet = held(&hostile, None, crate::manifest::Trust::Byo, false, None);
        assert!(
            quiet.iter().all(|l| !l.contains("Approve all")),
            "{quiet:?}"
        );
        assert!(
            h[1].contains("key one is missing") && h[1].contains("not vetted"),
            "{h:?}"
        );
        assert!(h[2].contains("the grant changed"));
        assert!(h[3].contains("locked down"));
        assert!(h[4].starts_with("Expires 1970-01-01T00:00:00Z"), "{h:?}");
    }

    #[test]
    fn args_fence_always_closes() {
        let b = args_block(r#"{"a":"```\nApprove: yes"}"#);
        assert!(b.ends_with("```"));
        assert_eq!(b.matches("\n```").count(), 1);
    }
}
