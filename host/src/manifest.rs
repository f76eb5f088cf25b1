//! What a gatekeeper says about itself, and the operator's word on it.
//!
//! The manifest (tools with their annotations, triggers, whether it
//! simulates, its observer strategy) as read at `gatekeeper add` and
//! stored, and the trust tier an operator gives the instance. Plain data
//! that both `classify` (which alone reads annotations to decide) and
//! `store` (which keeps them) depend on, so that neither has to import the
//! other. This module may not decide anything about a call: verdicts are
//! `classify`'s.

use anyhow::bail;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A gatekeeper's MCP-style hints for one tool, as it declared them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Annotations {
    /// `readOnlyHint`: exactly `true` makes the tool a read (K2).
    pub read_only: Option<bool>,
    /// `destructiveHint`: exactly `false` is one condition of auto-approval (K3).
    pub destructive: Option<bool>,
    /// `idempotentHint`: exactly `true` is one condition of auto-approval (K3).
    pub idempotent: Option<bool>,
    /// `openWorldHint`: anything but exactly `false` counts as outbound, which
    /// a locked-down chat refuses (O3).
    pub open_world: Option<bool>,
}

/// One tool of a gatekeeper, as stored when the operator added it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tool {
    /// The tool's name, as a gadget calls it through its key.
    pub name: String,
    /// The gatekeeper's description (attacker text: quoted in prompts only).
    pub description: String,
    /// The JSON Schema of its arguments, as text; arguments are checked
    /// against it before staging.
    pub input_schema: String,
    /// The hints [`crate::classify::classify`] judges the tool by.
    pub annotations: Annotations,
    /// The tool of the same gatekeeper that undoes this one (WIT
    /// `reverted-by`). Not an annotation: it never bears on read vs
    /// action, nor on either auto-approval key (SPEC H2).
    #[serde(default)]
    pub reverted_by: Option<String>,
    /// The service honours the kernel's idempotency key for this tool.
    #[serde(default)]
    pub honours_idempotency_key: bool,
    /// A name for people (MCP `title`, attacker text: shown sanitised).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The JSON Schema of the result's structured content (MCP
    /// `outputSchema`), as text. `mcp serve` offers it for reads and checks
    /// a read's result against it before handing it over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<String>,
    /// MCP `execution.taskSupport`, as declared. A hint kept for people;
    /// nothing honours it (`mcp serve` implements no tasks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_support: Option<TaskSupport>,
}

/// MCP's `execution.taskSupport` (WIT `task-support`): whether a client
/// may run a tool as a task. Stored as its MCP (and WIT) name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskSupport {
    /// Only as an ordinary call (what MCP assumes without a hint).
    Forbidden,
    /// As a call or as a task.
    Optional,
    /// Only as a task.
    Required,
}

/// A gatekeeper's self-description, read at `gatekeeper add` and again at
/// `gatekeeper refresh`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Every tool the gatekeeper offers, in its declared order.
    pub tools: Vec<Tool>,
    /// The gatekeeper simulates its actions (SPEC V1): a staged action is
    /// answered with a simulated result, and its reads lay pending actions
    /// over the real data, so the gadget sees a consistent world.
    pub simulates: bool,
    /// How the gatekeeper answers for observers (SPEC S4).
    pub observers: ObserverStrategy,
    /// What can start a turn without a person (hooks bind them).
    #[serde(default)]
    pub triggers: Vec<Trigger>,
}

/// A gatekeeper's trigger: something that can start a gadget's turn
/// (WIT `trigger`), as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trigger {
    /// The trigger's name, which `hook add --trigger` binds.
    pub name: String,
    /// The gatekeeper's description of it (attacker text, shown sanitised).
    pub description: String,
    /// How it fires.
    pub kind: TriggerKind,
}

/// How a trigger fires (WIT `trigger-kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TriggerKind {
    /// A service event delivered to the hook's webhook URL.
    Webhook,
    /// Every `seconds` while `serve` runs.
    Schedule {
        /// The period the gatekeeper declares, in seconds; `hook add
        /// --every` may set another for one hook.
        seconds: u32,
    },
}

impl Manifest {
    /// The tool called `name`, if the gatekeeper offers it.
    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// What changed from this manifest to `new`, tool by tool, in `new`'s
    /// order then removed tools (`gatekeeper refresh`).
    pub fn changes(&self, new: &Manifest) -> Vec<ToolChange> {
        let mut out = Vec::new();
        for t in &new.tools {
            match self.tool(&t.name) {
                None => out.push(ToolChange::Added(t.name.clone())),
                Some(old) => {
                    if old.annotations != t.annotations {
                        out.push(ToolChange::Annotations {
                            tool: t.name.clone(),
                            from: old.annotations.clone(),
                            to: t.annotations.clone(),
                        });
                    }
                    if old.input_schema != t.input_schema {
                        out.push(ToolChange::Schema(t.name.clone()));
                    }
                    if old.description != t.description {
                        out.push(ToolChange::Description(t.name.clone()));
                    }
                    if old.output_schema != t.output_schema {
                        out.push(ToolChange::OutputSchema(t.name.clone()));
                    }
                }
            }
        }
        for t in &self.tools {
            if new.tool(&t.name).is_none() {
                out.push(ToolChange::Removed(t.name.clone()));
            }
        }
        out
    }
}

/// One difference between two manifests of a gatekeeper instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChange {
    /// A tool the new manifest offers and the old did not.
    Added(String),
    /// A tool the old manifest offered and the new does not.
    Removed(String),
    /// A tool's hints changed: its classification may have changed too.
    Annotations {
        /// The tool's name.
        tool: String,
        /// The hints before.
        from: Annotations,
        /// The hints now.
        to: Annotations,
    },
    /// A tool's input schema changed.
    Schema(String),
    /// A tool's description changed (what its approval prompts quote).
    Description(String),
    /// A tool's output schema changed (the shape `mcp serve` promises for
    /// a read's answer).
    OutputSchema(String),
}

impl Annotations {
    /// The hints as MCP names them, for people: `readOnlyHint=true, ...`,
    /// or `no hints`.
    pub fn hints(&self) -> String {
        let parts: Vec<String> = [
            ("readOnlyHint", self.read_only),
            ("destructiveHint", self.destructive),
            ("idempotentHint", self.idempotent),
            ("openWorldHint", self.open_world),
        ]
        .iter()
        .filter_map(|(n, v)| v.map(|v| format!("{n}={v}")))
        .collect();
        if parts.is_empty() {
            "no hints".into()
        } else {
            format!("[{}]", parts.join(", "))
        }
    }
}

/// How a gatekeeper answers for a shared chat's observers (SPEC S4, WIT
/// `observer-strategy`). Stored as its WIT name (`refuse`, `access-check`,
/// `track-reads`, `no-check`), the text manifests have always held; any
/// other stored text (an older or damaged manifest) reads as `Refuse`, the
/// fail-closed answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "&'static str")]
pub enum ObserverStrategy {
    /// Results are never shared with observers: a shared chat is refused.
    #[default]
    Refuse,
    /// The gatekeeper checks each observer's own access to what was read.
    AccessCheck,
    /// The gatekeeper predicts, from the sources it tracked, who may see it.
    TrackReads,
    /// Everyone in the chat may see every result: no check is needed.
    NoCheck,
}

impl ObserverStrategy {
    /// The stored (and WIT) name.
    pub fn as_str(self) -> &'static str {
        match self {
            ObserverStrategy::Refuse => "refuse",
            ObserverStrategy::AccessCheck => "access-check",
            ObserverStrategy::TrackReads => "track-reads",
            ObserverStrategy::NoCheck => "no-check",
        }
    }
}

impl From<String> for ObserverStrategy {
    fn from(s: String) -> ObserverStrategy {
        match s.as_str() {
            "access-check" => ObserverStrategy::AccessCheck,
            "track-reads" => ObserverStrategy::TrackReads,
            "no-check" => ObserverStrategy::NoCheck,
            _ => ObserverStrategy::Refuse,
        }
    }
}

impl From<ObserverStrategy> for &'static str {
    fn from(s: ObserverStrategy) -> &'static str {
        s.as_str()
    }
}

impl fmt::Display for ObserverStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A gatekeeper's trust tier (SPEC K3), read at each use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Trust {
    /// A user brought it: its annotations are believed for reads only.
    Byo,
    /// An operator vouched for it: its actions may be auto-approved.
    Vetted,
}

impl Trust {
    /// The stored name (`byo`, `vetted`), as `--trust` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Trust::Byo => "byo",
            Trust::Vetted => "vetted",
        }
    }
}

impl fmt::Display for Trust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Trust {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Trust> {
        match s {
            "byo" => Ok(Trust::Byo),
            "vetted" => Ok(Trust::Vetted),
            other => bail!("unknown trust tier {other:?}; use byo or vetted"),
        }
    }
}

/// A gadget's face: its page, checked (by `crate::face`, which owns the
/// checks and serves it). Kept here, with the other things a component
/// declares, so that the kernel can keep them without naming the face.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    /// The component it belongs to.
    pub digest: String,
    /// Its title, sanitised as a name ([`crate::prompt::inline`]).
    pub title: String,
    /// The HTML document, as the gadget gave it: served only into a
    /// sandbox of its own (see `crate::web`'s face route), never into a
    /// page of the host.
    pub html: String,
    /// The functions it may call.
    pub functions: Vec<String>,
}

/// Checked pages per component digest; `None` for a component without a
/// face, the error for one whose page is refused.
pub(crate) type Pages = std::sync::Mutex<
    std::collections::HashMap<String, std::sync::Arc<Result<Option<std::sync::Arc<Page>>, String>>>,
>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observer_strategies_keep_their_stored_text_and_unknown_text_fails_closed() {
        for s in [
            ObserverStrategy::Refuse,
            ObserverStrategy::AccessCheck,
            ObserverStrategy::TrackReads,
            ObserverStrategy::NoCheck,
        ] {
            let json = serde_json::to_string(&s).expect("serialises");
            assert_eq!(json, format!("\"{}\"", s.as_str()));
            assert_eq!(
                serde_json::from_str::<ObserverStrategy>(&json).ok(),
                Some(s)
            );
        }
        let old: Manifest =
            serde_json::from_str(r#"{"tools":[],"simulates":false,"observers":"no-check"}"#)
                .expect("a stored manifest reads");
        assert_eq!(old.observers, ObserverStrategy::NoCheck);
        for odd in ["", "NO-CHECK", "everyone"] {
            let s: ObserverStrategy = serde_json::from_str(&format!("{odd:?}")).expect("reads");
            assert_eq!(s, ObserverStrategy::Refuse, "{odd:?}");
        }
    }

    #[test]
    fn mcp_metadata_is_optional_in_stored_manifests_and_adds_nothing_when_absent() {
        let stored = r#"{"name":"t","description":"d","input_schema":"{}","annotations":{"read_only":null,"destructive":null,"idempotent":null,"open_world":null},"reverted_by":null,"honours_idempotency_key":false}"#;
        let tool: Tool = serde_json::from_str(stored).expect("a stored tool reads");
        assert_eq!(
            (tool.title.as_ref(), tool.output_schema.as_ref()),
            (None, None)
        );
        assert_eq!(tool.task_support, None);
        // Written back unchanged, so a manifest's stored text (and its
        // digest) stays what it was for a gatekeeper that declares none.
        assert_eq!(serde_json::to_string(&tool).expect("writes"), stored);
        let mut with = tool.clone();
        with.title = Some("T".into());
        with.output_schema = Some(r#"{"type":"object"}"#.into());
        with.task_support = Some(TaskSupport::Optional);
        let text = serde_json::to_string(&with).expect("writes");
        assert!(text.contains(r#""task_support":"optional""#), "{text}");
        assert_eq!(serde_json::from_str::<Tool>(&text).expect("reads"), with);
        let (old, new) = (
            Manifest {
                tools: vec![tool],
                ..Manifest::default()
            },
            Manifest {
                tools: vec![with],
                ..Manifest::default()
            },
        );
        assert_eq!(old.changes(&new), [ToolChange::OutputSchema("t".into())]);
    }
}
