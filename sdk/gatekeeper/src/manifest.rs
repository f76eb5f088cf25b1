//! The manifest a gatekeeper describes itself with: its tools (name,
//! description, input schema, behaviour hints, revert, idempotency key,
//! and MCP's title, output schema and task support) and what it can do
//! besides (simulate, admit observers, start turns).
//!
//! Owns the builders only. The hints are claims: the kernel reads them in
//! one place (a tool is a *read* only when it is annotated `read-only:
//! true`; anything else is an action and waits for a person), and no hint
//! written here can loosen that.
//!
//! ```
//! use gatehouse_gatekeeper::manifest::{Manifest, tool};
//! use serde_json::json;
//!
//! let manifest = Manifest::builder()
//!     .tool(tool("listNotes", "List the notes.", json!({"type": "object"})).read_only())
//!     .tool(
//!         tool("addNote", "Add a note.", json!({"type": "object"}))
//!             .writes()
//!             .destructive(false)
//!             .idempotent(false),
//!     )
//!     .build();
//! assert_eq!(manifest.tools.len(), 2);
//! ```

use serde_json::Value;

pub use crate::bindings::exports::gatehouse::os::tool::{
    Manifest, ObserverStrategy, Trigger, TriggerKind,
};
pub use crate::bindings::gatehouse::os::types::{Annotations, TaskSupport, ToolInfo};

/// Starts a tool's entry: `schema` is the JSON Schema of its arguments
/// object. With no hint at all it is an action (safe side).
pub fn tool(name: &str, description: &str, schema: Value) -> Tool {
    Tool(ToolInfo {
        name: name.to_string(),
        description: description.to_string(),
        input_schema: schema.to_string(),
        annotations: Annotations {
            read_only: None,
            destructive: None,
            idempotent: None,
            open_world: None,
        },
        reverted_by: None,
        honours_idempotency_key: false,
        title: None,
        output_schema: None,
        task_support: None,
    })
}

/// A tool's entry in the manifest, being built.
#[derive(Clone, Debug)]
pub struct Tool(ToolInfo);

impl Tool {
    /// Hint `read-only: true`: the kernel answers it at once as a read.
    /// Declare it only for a tool that changes nothing.
    pub fn read_only(mut self) -> Tool {
        self.0.annotations.read_only = Some(true);
        self
    }

    /// Hint `read-only: false`: it changes the service (staged for a
    /// decision). A tool with no read-only hint is treated the same way.
    pub fn writes(mut self) -> Tool {
        self.0.annotations.read_only = Some(false);
        self
    }

    /// Hint `destructive`: whether it takes something away.
    pub fn destructive(mut self, destructive: bool) -> Tool {
        self.0.annotations.destructive = Some(destructive);
        self
    }

    /// Hint `idempotent`: whether doing it twice is the same as once.
    pub fn idempotent(mut self, idempotent: bool) -> Tool {
        self.0.annotations.idempotent = Some(idempotent);
        self
    }

    /// Hint `open-world`: whether it reaches beyond a closed service (the
    /// web, say).
    pub fn open_world(mut self, open_world: bool) -> Tool {
        self.0.annotations.open_world = Some(open_world);
        self
    }

    /// All four hints at once, as given.
    pub fn annotations(mut self, annotations: Annotations) -> Tool {
        self.0.annotations = annotations;
        self
    }

    /// The tool of this gatekeeper that undoes this one, called with the
    /// same arguments (`removeLabel` reverts `addLabel`).
    pub fn reverted_by(mut self, tool: &str) -> Tool {
        self.0.reverted_by = Some(tool.to_string());
        self
    }

    /// Whether the service honours the kernel's idempotency key for this
    /// tool (the gatekeeper then sends it, e.g. as `Idempotency-Key`).
    pub fn honours_idempotency_key(mut self, honours: bool) -> Tool {
        self.0.honours_idempotency_key = honours;
        self
    }

    /// A name for people (MCP `title`), such as "Create an issue"; shown
    /// sanitised. Without it the tool's name is shown.
    pub fn title(mut self, title: &str) -> Tool {
        self.0.title = Some(title.to_string());
        self
    }

    /// The JSON Schema of the result (MCP `outputSchema`), for a tool whose
    /// result is a JSON object. Declare it only if every successful result
    /// conforms: where the kernel hands a read's result to an MCP client,
    /// a result that does not is turned into an error.
    pub fn output_schema(mut self, schema: Value) -> Tool {
        self.0.output_schema = Some(schema.to_string());
        self
    }

    /// Whether the service can run the tool as an MCP task (MCP
    /// `execution.taskSupport`). A hint only; without it, `forbidden`.
    pub fn task_support(mut self, support: TaskSupport) -> Tool {
        self.0.task_support = Some(support);
        self
    }

    /// The finished entry.
    pub fn build(self) -> ToolInfo {
        self.0
    }
}

impl From<Tool> for ToolInfo {
    fn from(tool: Tool) -> Self {
        tool.0
    }
}

impl Manifest {
    /// Starts a manifest: no tools, no simulation, observers refused, no
    /// triggers.
    pub fn builder() -> ManifestBuilder {
        ManifestBuilder(Manifest {
            tools: Vec::new(),
            simulates: false,
            observers: ObserverStrategy::Refuse,
            triggers: Vec::new(),
        })
    }
}

/// A manifest being built; see [`Manifest::builder`].
#[derive(Clone, Debug)]
pub struct ManifestBuilder(Manifest);

impl ManifestBuilder {
    /// Adds a tool.
    pub fn tool(mut self, tool: impl Into<ToolInfo>) -> ManifestBuilder {
        self.0.tools.push(tool.into());
        self
    }

    /// Declares that `simulate` can predict an action's result.
    pub fn simulates(mut self) -> ManifestBuilder {
        self.0.simulates = true;
        self
    }

    /// How observers of a shared chat are admitted (default: refused).
    pub fn observers(mut self, strategy: ObserverStrategy) -> ManifestBuilder {
        self.0.observers = strategy;
        self
    }

    /// A trigger the service fires by delivering an event to a hook's
    /// webhook URL.
    pub fn webhook(mut self, name: &str, description: &str) -> ManifestBuilder {
        self.0.triggers.push(Trigger {
            name: name.to_string(),
            description: description.to_string(),
            kind: TriggerKind::Webhook,
        });
        self
    }

    /// A trigger that fires every `seconds` while `gatehouse serve` runs.
    pub fn schedule(mut self, name: &str, description: &str, seconds: u32) -> ManifestBuilder {
        self.0.triggers.push(Trigger {
            name: name.to_string(),
            description: description.to_string(),
            kind: TriggerKind::Schedule(seconds),
        });
        self
    }

    /// The finished manifest.
    pub fn build(self) -> Manifest {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_tool_without_hints_is_an_action_and_hints_are_kept_as_given() {
        let t = tool("t", "d", json!({"type": "object"})).build();
        assert_eq!(t.annotations.read_only, None);
        assert_eq!(t.title, None);
        assert_eq!(t.output_schema, None);
        assert!(t.task_support.is_none());
        assert_eq!(t.input_schema, r#"{"type":"object"}"#);
        let t = tool("t", "d", json!({}))
            .writes()
            .destructive(true)
            .idempotent(true)
            .open_world(false)
            .reverted_by("u")
            .honours_idempotency_key(true)
            .title("T")
            .output_schema(json!({"type": "object"}))
            .task_support(TaskSupport::Optional)
            .build();
        assert_eq!(t.annotations.read_only, Some(false));
        assert_eq!(t.annotations.destructive, Some(true));
        assert_eq!(t.annotations.idempotent, Some(true));
        assert_eq!(t.annotations.open_world, Some(false));
        assert_eq!(t.reverted_by.as_deref(), Some("u"));
        assert!(t.honours_idempotency_key);
        assert_eq!(t.title.as_deref(), Some("T"));
        assert_eq!(t.output_schema.as_deref(), Some(r#"{"type":"object"}"#));
        assert!(matches!(t.task_support, Some(TaskSupport::Optional)));
    }

    #[test]
    fn a_manifest_starts_on_the_safe_side() {
        let m = Manifest::builder().build();
        assert!(!m.simulates);
        assert!(matches!(m.observers, ObserverStrategy::Refuse));
        assert!(m.tools.is_empty() && m.triggers.is_empty());
        let m = Manifest::builder()
            .simulates()
            .webhook("opened", "d")
            .schedule("hourly", "d", 3600)
            .build();
        assert!(m.simulates);
        assert!(matches!(m.triggers[1].kind, TriggerKind::Schedule(3600)));
    }
}
