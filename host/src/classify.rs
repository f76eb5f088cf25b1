//! Classification: the one trust boundary (SPEC K1-K4).
//!
//! [`classify`] is the only function in Gatehouse that reads tool
//! annotations. Everything else asks it. It may not look at tool names,
//! descriptions or arguments: a read-like name means nothing (K2).
//!
//! It is also the one place that says where a guest's claim about itself
//! is believed beyond read vs action (SPEC P9): a claim that would loosen a
//! guarantee (a read that says it stays in a closed world, a service that
//! says it honours idempotency keys) counts only where key one holds for
//! its gatekeeper, i.e. an operator vouched for it ([`vouched`]).

// The manifest's types, at the paths surfaces have always used.
use crate::manifest::Trust;
pub use crate::manifest::{Annotations, Manifest, Tool, ToolChange, Trigger, TriggerKind};
use serde::Serialize;

/// Read or action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Effects stay inside: run at once, record an observation.
    Read,
    /// Effects leave: stage and wait for a decision.
    Action,
}

/// Whose word the classification trusted (SPEC K4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum ClassifiedBy {
    /// The server said `readOnlyHint: true` and we believed it.
    ServerAnnotation,
    /// Nothing to believe: the safe default.
    Default,
}

impl ClassifiedBy {
    /// The name the ledger records (`server-annotation`, `default`).
    pub fn as_str(self) -> &'static str {
        match self {
            ClassifiedBy::ServerAnnotation => "server-annotation",
            ClassifiedBy::Default => "default",
        }
    }
}

/// The verdict for one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Classification {
    /// Read (run now, observe) or action (stage, wait for a decision).
    pub kind: Kind,
    /// Key one of two for auto-approval (SPEC K3); key two is a person's rule.
    pub auto_approvable: bool,
    /// The call may reach beyond a closed service (an outbound fetch):
    /// true unless the gatekeeper declared `open-world` exactly `false`
    /// *and* an operator vouched for it (key one, SPEC P9). A locked-down
    /// chat refuses such reads (SPEC O3), so the safe default is
    /// "outbound": a `byo` gatekeeper's or a remote MCP server's word that
    /// a read stays inside is not enough to let it run under the latch.
    pub outbound: bool,
    /// Whose word the verdict rests on; recorded on the ledger (K4).
    pub classified_by: ClassifiedBy,
}

/// Decide read vs action for a tool of a gatekeeper at its current tier.
///
/// - read iff `read-only` is present and exactly `true` (K2);
/// - auto-approvable iff an action, the tier is `vetted`, `destructive` is
///   exactly `false` and `idempotent` exactly `true` (K3);
/// - outbound unless `open-world` is exactly `false` and the tier is
///   `vetted` (used by O3; SPEC P9: a guest's claim that loosens the latch
///   needs key one).
///
/// Callers pass the tier read at the moment of use, so revoking `vetted`
/// takes effect at the next call.
pub fn classify(annotations: &Annotations, trust: Trust) -> Classification {
    let outbound = !(vouched(trust) && annotations.open_world == Some(false));
    if kind(annotations) == Kind::Read {
        return Classification {
            kind: Kind::Read,
            auto_approvable: false,
            outbound,
            classified_by: ClassifiedBy::ServerAnnotation,
        };
    }
    Classification {
        kind: Kind::Action,
        outbound,
        auto_approvable: vouched(trust)
            && annotations.destructive == Some(false)
            && annotations.idempotent == Some(true),
        classified_by: ClassifiedBy::Default,
    }
}

/// Read or action, the part of [`classify`]'s verdict that does not depend
/// on the tier (K2): read iff `read-only` is present and exactly `true`.
/// For a surface that describes a tool before any call (`mcp serve`'s
/// listing says which shape of answer a tool gives).
pub fn kind(annotations: &Annotations) -> Kind {
    if annotations.read_only == Some(true) {
        Kind::Read
    } else {
        Kind::Action
    }
}

/// Key one for a gatekeeper: an operator vouched for it (`vetted`). A
/// guest's own claims that would loosen a guarantee are believed only
/// under it (SPEC K3 for auto-approval, P9 for re-sends and the latch).
/// Read at each use, so revoking `vetted` takes effect at the next call.
pub fn vouched(trust: Trust) -> bool {
    trust == Trust::Vetted
}

/// Whether an interrupted send of `tool` may be re-sent under its
/// idempotency key instead of failed (SPEC P9): all three must hold,
/// - key one: an operator vouched for the gatekeeper ([`vouched`]);
/// - the gatekeeper declares that the tool's service honours the key
///   (`honours-idempotency-key`);
/// - the operator stated, for this instance, that the service honours keys
///   (`--set idempotency-key=honoured`,
///   [`crate::idempotency::operator_says_honoured`]).
///
/// A guest's declaration alone is never enough: a `byo` gatekeeper (or a
/// vetted one in front of a service nobody vouched for) that declares it
/// against a service ignoring keys would turn one approval into two sends.
pub fn resend_believed(tool: &Tool, trust: Trust, operator_says_honoured: bool) -> bool {
    vouched(trust) && tool.honours_idempotency_key && operator_says_honoured
}

/// Why key one of auto-approval does not hold for a tool at a tier, in
/// words a person can act on; `None` when it holds (K3). The one place that
/// explains key one, so that no surface words it differently.
pub fn key_one_missing(annotations: &Annotations, trust: Trust) -> Option<String> {
    let class = classify(annotations, trust);
    if class.auto_approvable {
        return None;
    }
    if class.kind == Kind::Read {
        return Some("it is a read: reads need no approval".into());
    }
    let mut why = Vec::new();
    if !vouched(trust) {
        why.push("the gatekeeper is not vetted (an operator must vouch for it: `gatehouse gatekeeper trust NAME vetted`)".to_owned());
    }
    if annotations.destructive != Some(false) {
        why.push("the tool is not declared non-destructive".to_owned());
    }
    if annotations.idempotent != Some(true) {
        why.push("the tool is not declared idempotent".to_owned());
    }
    Some(format!(
        "key one is missing: {}; until then nothing is auto-approved",
        why.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(ro: Option<bool>, d: Option<bool>, i: Option<bool>) -> Annotations {
        Annotations {
            read_only: ro,
            destructive: d,
            idempotent: i,
            open_world: None,
        }
    }

    #[test]
    fn manifest_changes_are_listed_tool_by_tool() {
        let tool = |name: &str, ro: Option<bool>, schema: &str| Tool {
            reverted_by: None,
            honours_idempotency_key: false,
            title: None,
            output_schema: None,
            task_support: None,
            name: name.into(),
            description: "d".into(),
            input_schema: schema.into(),
            annotations: ann(ro, None, None),
        };
        let old = Manifest {
            tools: vec![tool("a", Some(true), "{}"), tool("b", None, "{}")],
            ..Manifest::default()
        };
        let new = Manifest {
            tools: vec![
                tool("a", None, "{}"),
                tool("c", None, r#"{"type":"object"}"#),
            ],
            ..Manifest::default()
        };
        let changes = old.changes(&new);
        assert_eq!(changes.len(), 3, "{changes:?}");
        assert_eq!(
            changes[0].line(Trust::Byo),
            "tool a: annotations changed from [readOnlyHint=true] to no hints; it is now an action (was a read)"
        );
        assert_eq!(changes[1], ToolChange::Added("c".into()));
        assert_eq!(changes[2], ToolChange::Removed("b".into()));
        assert!(old.changes(&old).is_empty());
    }

    #[test]
    fn a_re_send_needs_key_one_the_declaration_and_the_operator_s_word() {
        let tool = |honours: bool| Tool {
            reverted_by: None,
            honours_idempotency_key: honours,
            title: None,
            output_schema: None,
            task_support: None,
            name: "createIssue".into(),
            description: String::new(),
            input_schema: "{}".into(),
            annotations: ann(None, None, None),
        };
        assert!(resend_believed(&tool(true), Trust::Vetted, true));
        for (honours, trust, operator) in [
            (true, Trust::Byo, true),
            (false, Trust::Vetted, true),
            (true, Trust::Vetted, false),
            (false, Trust::Byo, false),
        ] {
            assert!(
                !resend_believed(&tool(honours), trust, operator),
                "{honours} {trust:?} {operator}"
            );
        }
    }

    #[test]
    fn only_an_explicit_true_makes_a_read() {
        assert_eq!(
            classify(&ann(Some(true), None, None), Trust::Byo).kind,
            Kind::Read
        );
        for ro in [None, Some(false)] {
            let c = classify(&ann(ro, None, None), Trust::Vetted);
            assert_eq!(c.kind, Kind::Action);
            assert_eq!(c.classified_by, ClassifiedBy::Default);
        }
    }

    #[test]
    fn auto_approval_key_one_needs_vetted_nondestructive_idempotent() {
        let eligible = ann(None, Some(false), Some(true));
        assert!(classify(&eligible, Trust::Vetted).auto_approvable);
        assert!(!classify(&eligible, Trust::Byo).auto_approvable);
        for (d, i) in [
            (None, Some(true)),
            (Some(false), None),
            (Some(true), Some(true)),
        ] {
            assert!(!classify(&ann(None, d, i), Trust::Vetted).auto_approvable);
        }
        // Only an explicit closed world, vouched for, is not outbound.
        let closed = Annotations {
            open_world: Some(false),
            ..ann(Some(true), None, None)
        };
        assert!(!classify(&closed, Trust::Vetted).outbound);
        assert!(
            classify(&closed, Trust::Byo).outbound,
            "a byo claim loosens nothing (P9)"
        );
        assert!(classify(&ann(Some(true), None, None), Trust::Vetted).outbound);
        // A read is never "auto-approved": it needs no approval at all.
        assert!(
            !classify(&ann(Some(true), Some(false), Some(true)), Trust::Vetted).auto_approvable
        );
    }
}
