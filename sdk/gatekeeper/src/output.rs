//! What a gatekeeper answers: outputs with the sources a read touched,
//! tool errors, and observer verdicts. Owns the shapes only; what is
//! restricted, and who may observe what, is the gatekeeper's to say and the
//! kernel's to enforce.

use serde_json::Value;

use crate::text::one_line;
use crate::{Denial, ObserverVerdict, Output, Source, ToolError};

impl Output {
    /// The output of a read of `source`.
    pub fn read(result: Value, source: Source) -> Output {
        Output {
            result: result.to_string(),
            sources: vec![source],
        }
    }

    /// The output of a read that touched these sources (empty means "the
    /// service itself").
    pub fn read_all(result: Value, sources: Vec<Source>) -> Output {
        Output {
            result: result.to_string(),
            sources,
        }
    }

    /// The output of an action (or of anything that read no source).
    pub fn action(result: Value) -> Output {
        Output {
            result: result.to_string(),
            sources: Vec::new(),
        }
    }
}

impl Source {
    /// A source anyone who may observe the chat may see.
    pub fn public(id: impl Into<String>, title: impl Into<String>) -> Source {
        Source {
            id: id.into(),
            title: title.into(),
            restricted: false,
        }
    }

    /// Owner-only data: reading it locks the chat down.
    pub fn restricted(id: impl Into<String>, title: impl Into<String>) -> Source {
        Source {
            id: id.into(),
            title: title.into(),
            restricted: true,
        }
    }
}

impl ToolError {
    /// The error for a call of a tool the gatekeeper does not have;
    /// `offered` lists its tools.
    pub fn unknown_tool(name: &str, offered: &str) -> ToolError {
        ToolError::UnknownTool(format!(
            "unknown tool {}; this gatekeeper offers: {offered}",
            one_line(name, 80)
        ))
    }
}

impl Denial {
    /// One denial per source (`fallback` when there is none), all for
    /// `reason`.
    pub fn all(sources: Vec<Source>, fallback: &str, reason: &str) -> Vec<Denial> {
        let mut sources: Vec<String> = sources.into_iter().map(|s| s.id).collect();
        if sources.is_empty() {
            sources.push(fallback.to_string());
        }
        sources
            .into_iter()
            .map(|source| Denial {
                source,
                reason: reason.to_string(),
            })
            .collect()
    }
}

impl ObserverVerdict {
    /// Admits the observer, with no scope.
    pub fn admit() -> ObserverVerdict {
        ObserverVerdict {
            denials: Vec::new(),
            scope: None,
        }
    }

    /// Denies these sources (empty admits), with no scope.
    pub fn deny(denials: Vec<Denial>) -> ObserverVerdict {
        ObserverVerdict {
            denials,
            scope: None,
        }
    }
}
