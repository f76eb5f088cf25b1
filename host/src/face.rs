//! Faces: a gadget's page, shown beside a chat (the web inbox, an MCP
//! host), and the calls the page makes (F in docs/rules.md,
//! docs/gadget-faces.md).
//!
//! The rule:
//! - a page is asked of the gadget outside any turn (every kernel call it
//!   makes is refused), checked once per component (size, title, function
//!   names) and kept by digest: the same component always shows the same
//!   page, and a re-installed gadget shows its new one;
//! - a call of the page names one of the functions the page declared (any
//!   other runs nothing) and is a turn of the person viewing the page, in
//!   the chat it is shown in, admitted exactly as that person's own turn
//!   is (`Kernel::verify_runner`, the one standing check) and run through
//!   the one turn path (`Kernel::run_entry`): the page gets no capability
//!   its gadget lacks and skips no gate;
//! - what the turn staged is told by the kernel (`Turn::staged`), never by
//!   the gadget, so a surface can show each pending write with a link to
//!   decide it, drawn by the host.
//!
//! Owns the page's limits, the cache of checked pages and the face call.
//! May not: decide what a call may do (the turn's kernel calls do), reach
//! the store, or render anything for a surface (each surface renders the
//! staged actions through `prompt`, as it renders every action).

use crate::capability::Person;
use crate::kernel::{Kernel, Turn};
use crate::principal::Principal;
use crate::runtime::gadget::{Entry, RawPage};
use crate::runtime::view::NoTurn;
use anyhow::{Context as _, bail};
use std::sync::Arc;

/// The largest page, in bytes.
pub const MAX_HTML_BYTES: usize = 512 * 1024;
/// The most functions a page may call.
pub const MAX_FUNCTIONS: usize = 32;
/// The longest function name.
pub const MAX_FUNCTION_NAME: usize = 64;
/// The largest arguments object of one call, in bytes.
pub const MAX_ARGS_BYTES: usize = 64 * 1024;
/// The largest answer handed back to a page, in bytes.
pub const MAX_ANSWER_BYTES: usize = 1024 * 1024;
/// What the host puts first in every page, before any of the gadget's
/// markup, wherever the page is shown (the inbox, an MCP host).
///
/// Why: browsers put WebRTC outside the Content-Security-Policy (no
/// browser enforces CSP's `webrtc` directive), so a page that can reach
/// `RTCPeerConnection` can send what it was shown to a STUN or TURN server
/// of its choosing, around every `connect-src`. The guard removes WebRTC
/// from the page's realm before the page's own scripts run, and Trusted
/// Types with no policy (`trusted-types 'none'`) take away every way a
/// script could write markup (`innerHTML`, `srcdoc`, `DOMParser`,
/// `document.write`), so that no nested document with a fresh realm can
/// bring WebRTC back; markup of the page's own holding `srcdoc` is refused
/// by [`check`]. A nested frame with no document of its own is a fresh
/// opaque origin the page cannot reach into.
pub const GUARD: &str = concat!(
    r#"<meta http-equiv="Content-Security-Policy" content="require-trusted-types-for 'script'; trusted-types 'none'; frame-src 'none'; child-src 'none'; object-src 'none'; worker-src 'none'; connect-src 'none'; base-uri 'none'; form-action 'none'">"#,
    "<script>(() => { for (const name of Object.getOwnPropertyNames(window)) { if (/^(webkit)?RTC/.test(name)) { try { delete window[name]; } catch (_) {} } } })();</script>",
);

/// The page's side of the bridge, which the host puts into every page right
/// after [`GUARD`], so that it is the page's first script: it greets the
/// host (`ui/initialize`, the MCP Apps handshake) and defines
/// `gatehouse.call(name, args)`, which sends `tools/call` and answers a
/// promise of the function's JSON answer. In an MCP host the page's
/// functions are tools named after the tool that opened the page
/// (`triage.face` opens the face whose `board` is `triage.board`), so the
/// bridge learns that prefix from the handshake; the inbox answers the same
/// way. One copy, the host's: a page in any language is plain HTML, and the
/// bridge always speaks the protocol this host does.
pub const BRIDGE: &str = include_str!("face_bridge.js");

/// The function name kept for the tool that shows a face over MCP.
pub const RESERVED: &str = "face";
/// The longest title shown, in characters.
const MAX_TITLE_CHARS: usize = 80;

pub use crate::manifest::Page;

/// A gadget that has a face, as a surface lists it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Listed {
    /// The gadget's name.
    pub gadget: String,
    /// The page's title.
    pub title: String,
}

/// What a call of a page did.
#[derive(Clone, Debug)]
pub struct Answer {
    /// The gadget's answer (JSON text), or why the call failed, in one
    /// line the person can read.
    pub output: Result<String, String>,
    /// The actions the call staged, in order (from the kernel).
    pub staged: Vec<i64>,
}

/// Check a page a gadget gave: every refusal says what to change.
fn check(digest: &str, gadget: &str, raw: RawPage) -> Result<Page, String> {
    if raw.html.to_ascii_lowercase().contains("srcdoc") {
        return Err(format!(
            "the face of gadget {:?} holds `srcdoc`; a page may hold no nested document (it could run outside the page's guard): build its parts with the DOM",
            crate::prompt::inline(gadget)
        ));
    }
    if raw.html.len() > MAX_HTML_BYTES {
        return Err(format!(
            "the face of gadget {:?} is {} bytes of HTML; at most {MAX_HTML_BYTES} are shown (inline less, or load less)",
            crate::prompt::inline(gadget),
            raw.html.len()
        ));
    }
    if raw.functions.len() > MAX_FUNCTIONS {
        return Err(format!(
            "the face of gadget {:?} declares {} functions; at most {MAX_FUNCTIONS} are accepted",
            crate::prompt::inline(gadget),
            raw.functions.len()
        ));
    }
    let mut functions: Vec<String> = Vec::new();
    for f in raw.functions {
        let valid = !f.is_empty()
            && f.len() <= MAX_FUNCTION_NAME
            && f.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if !valid {
            return Err(format!(
                "the face of gadget {:?} declares the function {:?}; a name is 1 to {MAX_FUNCTION_NAME} characters of a-z, 0-9, _ and -",
                crate::prompt::inline(gadget),
                crate::prompt::as_given(&f)
            ));
        }
        if f == RESERVED {
            return Err(format!(
                "the face of gadget {:?} declares the function {RESERVED:?}, a name kept for showing the face (an MCP host calls GADGET.{RESERVED}); name it otherwise",
                crate::prompt::inline(gadget)
            ));
        }
        if functions.contains(&f) {
            return Err(format!(
                "the face of gadget {:?} declares the function {f:?} twice",
                crate::prompt::inline(gadget)
            ));
        }
        functions.push(f);
    }
    let title = if raw.title.trim().is_empty() {
        crate::prompt::inline(gadget)
    } else {
        crate::prompt::inline(&raw.title)
    };
    let title = match title.char_indices().nth(MAX_TITLE_CHARS) {
        Some((at, _)) => format!("{}…", &title[..at]),
        None => title,
    };
    Ok(Page {
        digest: digest.to_owned(),
        title,
        html: guarded(&raw.html),
        functions,
    })
}

/// What the host puts before any markup of a page: [`GUARD`], then the
/// [`BRIDGE`] as the first script.
fn preamble() -> String {
    format!("{GUARD}<script>{BRIDGE}</script>")
}

/// `html` with [`preamble`] before any of its markup: after its doctype,
/// when it starts with one (a doctype anywhere else would put the page in
/// quirks mode), else at its very start.
fn guarded(html: &str) -> String {
    let trimmed = html.trim_start();
    let starts_with_doctype = trimmed
        .get(..9)
        .is_some_and(|s| s.eq_ignore_ascii_case("<!doctype"));
    match trimmed.find('>') {
        Some(end) if starts_with_doctype => {
            let (doctype, rest) = trimmed.split_at(end + 1);
            format!("{doctype}{}{rest}", preamble())
        }
        _ => format!("{}{html}", preamble()),
    }
}

impl Kernel {
    /// The face of the installed gadget `gadget`: `None` when it has none.
    /// An `Err` says in one line why it cannot be shown (no such gadget, a
    /// page that failed or was refused).
    pub async fn face(&self, gadget: &str) -> anyhow::Result<Option<Arc<Page>>> {
        let g = self
            .blocking(|k| k.gadgets())
            .await?
            .into_iter()
            .find(|g| g.name == gadget)
            .with_context(|| {
                format!(
                    "no gadget named {:?}; install it with `gatehouse install FILE.wasm`",
                    crate::prompt::inline(gadget)
                )
            })?;
        let kept = self
            .faces_kept()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&g.digest)
            .cloned();
        let page = match kept {
            Some(page) => page,
            None => {
                let pre = self.runtime().gadget(&g.digest)?;
                let outside = NoTurn::new(
                    &g.name,
                    "a face's page is asked for outside any turn: it may call nothing; call the kernel from `call`",
                );
                let raw =
                    crate::runtime::gadget::page(&pre, &self.runtime().limits, Box::new(outside))
                        .await;
                let page = Arc::new(
                    raw.and_then(|raw| raw.map(|r| check(&g.digest, &g.name, r)).transpose())
                        .map(|p| p.map(Arc::new)),
                );
                self.faces_kept()
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(g.digest.clone(), page.clone());
                page
            }
        };
        match page.as_ref() {
            Ok(page) => Ok(page.clone()),
            Err(why) => bail!("{why}"),
        }
    }

    /// The installed gadgets that have a face a surface can show, by name.
    /// A gadget whose page is refused is left out, with a warning that
    /// says why.
    pub async fn faces(&self) -> anyhow::Result<Vec<Listed>> {
        let mut out = Vec::new();
        for g in self.blocking(|k| k.gadgets()).await? {
            match self.face(&g.name).await {
                Ok(Some(page)) => out.push(Listed {
                    gadget: g.name,
                    title: page.title.clone(),
                }),
                Ok(None) => {}
                Err(e) => tracing::warn!(
                    gadget = %crate::prompt::inline(&g.name),
                    error = %crate::prompt::terminal_line(&format!("{e:#}")),
                    "a gadget's face cannot be shown"
                ),
            }
        }
        Ok(out)
    }
}

impl Person<'_> {
    /// One call of `gadget`'s face, made by `person` viewing it in `chat`:
    /// a turn of theirs (see the module's rule). An `Err` is a refusal
    /// before anything ran (no such face or function, arguments that are
    /// not a JSON object, a person who may not act in the chat).
    pub async fn face_call(
        &self,
        gadget: &str,
        chat: &str,
        name: &str,
        args: &str,
    ) -> anyhow::Result<Answer> {
        let person = self.name;
        // Standing first, exactly as for any request about the chat: one
        // who may not act there learns nothing else (a chat not theirs
        // answers like a missing one; a collaborator is re-verified).
        self.external_turn(chat).await?;
        let Some(page) = self.kernel.face(gadget).await? else {
            bail!("gadget {:?} has no face", crate::prompt::inline(gadget));
        };
        if !page.functions.iter().any(|f| f == name) {
            bail!(
                "the face of gadget {:?} offers no function {:?}; it offers: [{}]",
                crate::prompt::inline(gadget),
                crate::prompt::as_given(name),
                page.functions.join(", ")
            );
        }
        if args.len() > MAX_ARGS_BYTES {
            bail!(
                "the arguments of {name:?} are {} bytes; at most {MAX_ARGS_BYTES} are accepted",
                args.len()
            );
        }
        match serde_json::from_str::<serde_json::Value>(args) {
            Ok(serde_json::Value::Object(_)) => {}
            _ => bail!("the arguments of {name:?} must be a JSON object"),
        }
        let mut turn = Turn::new(gadget, chat, Principal::person(person));
        // The call runs the component whose page the person was shown.
        turn.pinned = Some(page.digest.clone());
        let staged = turn.staged.clone();
        let report = self
            .kernel
            .run_entry(turn, Entry::Face { name, args })
            .await?;
        let staged = staged.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let output = report.output.and_then(|answer| {
            if answer.len() > MAX_ANSWER_BYTES {
                return Err(format!(
                    "the answer of {name:?} is {} bytes; at most {MAX_ANSWER_BYTES} are handed to a page",
                    answer.len()
                ));
            }
            serde_json::from_str::<serde_json::Value>(&answer)
                .map(|_| answer)
                .map_err(|e| format!("the answer of {name:?} is not JSON: {e}"))
        });
        Ok(Answer { output, staged })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(title: &str, html: &str, functions: &[&str]) -> RawPage {
        RawPage {
            title: title.into(),
            html: html.into(),
            functions: functions.iter().map(|f| f.to_string()).collect(),
        }
    }

    #[test]
    fn a_page_within_its_limits_is_kept_with_a_sanitised_title() {
        let p = check(
            "d",
            "board",
            raw("Triage\n<b>board</b>", "<p>x</p>", &["board", "label"]),
        )
        .expect("accepted");
        assert_eq!(p.title, "Triage bboard/b");
        assert_eq!(p.functions, vec!["board", "label"]);
        let untitled = check("d", "board", raw("  ", "", &[])).expect("accepted");
        assert_eq!(untitled.title, "board");
    }

    #[test]
    fn the_guard_and_the_bridge_come_before_any_markup_of_the_page() {
        let pre = preamble();
        assert!(pre.starts_with(GUARD) && pre.ends_with("</script>"));
        assert_eq!(
            guarded("<!DOCTYPE html><html><script>x</script>"),
            format!("<!DOCTYPE html>{pre}<html><script>x</script>")
        );
        assert_eq!(
            guarded("<script>x</script>"),
            format!("{pre}<script>x</script>")
        );
        // Something before the doctype: the guard still comes first.
        let odd = "<script>x</script><!doctype html>";
        assert!(guarded(odd).starts_with(GUARD));
        let p = check("d", "g", raw("t", "<!doctype html><p>hi</p>", &[])).expect("accepted");
        assert_eq!(p.html, format!("<!doctype html>{pre}<p>hi</p>"));
        // The bridge sits in a script: it never closes one early.
        assert!(!BRIDGE.to_ascii_lowercase().contains("</script"));
    }

    #[test]
    fn a_page_past_its_limits_is_refused_in_one_line() {
        let big = "x".repeat(MAX_HTML_BYTES + 1);
        for (page, says) in [
            (raw("t", &big, &[]), "bytes of HTML"),
            (raw("t", "", &["Board"]), "a-z, 0-9"),
            (raw("t", "", &["a b"]), "a-z, 0-9"),
            (raw("t", "", &[""]), "a-z, 0-9"),
            (raw("t", "", &["x", "x"]), "twice"),
            (raw("t", "", &["face"]), "kept for showing"),
            (
                raw("t", "<iframe SrcDoc='<script>'>", &[]),
                "holds `srcdoc`",
            ),
        ] {
            let e = check("d", "g", page).expect_err("refused");
            assert!(e.contains(says), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
        let many: Vec<String> = (0..=MAX_FUNCTIONS).map(|i| format!("f{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(check("d", "g", raw("t", "", &many)).is_err());
    }
}
