//! A turn: who is calling, from where, and what the turn carries through
//! the kernel (its harness, the actions it awaits, a workflow step's side).
//!
//! Owns the shape of a turn, shared by the kernel (which re-exports it),
//! the record of reads (`crate::observations`) and the workflow runner. It
//! holds no policy and may not reach the store, the runtime or a component.

use crate::principal::Principal;
use std::sync::Arc;

/// How the kernel treats a turn's pending writes (SPEC V).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Harness {
    /// A plain turn: the gadget sees `pending` and decides for itself.
    #[default]
    Plain,
    /// The kernel's agent harness: an action that awaits a decision ends the
    /// turn; the run resumes when every awaited action is applied (V2, V3).
    Honest,
    /// What V2 warns against, kept to demonstrate it: pending writes are
    /// hidden from the gadget (answered as if done). Never the default.
    Naive,
}

/// Who is calling, from where (SPEC C5), and the turn's harness state.
#[derive(Clone, Debug)]
pub struct Turn {
    /// The gadget running the turn; `None` for a caller without one (an
    /// external agent over MCP).
    pub gadget: Option<String>,
    /// The chat the turn runs in: its introductions are all it can reach.
    pub chat: String,
    /// Who is acting; calls run under the accounts of the person it acts
    /// for, and what it stages is sent with that person's account.
    pub principal: Principal,
    /// How its pending writes are treated (SPEC V).
    pub harness: Harness,
    /// Actions of this turn that await a decision (honest harness).
    pub awaited: Arc<std::sync::Mutex<Vec<i64>>>,
    /// Every action the turn staged, in order: what a surface shows as
    /// the turn's pending writes (a face's host draws a link to decide
    /// each), known from the kernel, never from the gadget's word.
    pub(crate) staged: Arc<std::sync::Mutex<Vec<i64>>>,
    /// Set when the turn is a workflow step (SPEC G).
    pub step: Option<StepContext>,
    /// `Some` for a gadget's turn the kernel runs: its stages commit in
    /// place, without an fsync each, and the kernel makes them durable
    /// before anything leaves the turn (an egress) and before the turn
    /// ends, when the flag says something staged is not yet durable. Nobody
    /// outside the turn hears of a stage before then, so a power cut loses
    /// only stages nobody was told of (and a turn of three writes waits for
    /// one fsync, not three). `None`: each stage is durable before it is
    /// answered, for a caller the answer reaches at once (an external
    /// agent, an embedder).
    pub(crate) unsynced: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// The component the turn must run, by digest, when the caller vouched
    /// for that code and no other (a hook runs what it was enabled for):
    /// a gadget name that now names another component runs nothing.
    pub pinned: Option<String>,
}

/// A workflow step's side of a turn (SPEC G).
#[derive(Clone, Debug)]
pub struct StepContext {
    /// The workflow run the step belongs to.
    pub run: i64,
    /// The step's name in the run's design.
    pub step: String,
    /// The certificate issued for this attempt, until the gadget takes it.
    pub certificate: Arc<std::sync::Mutex<Option<(String, crate::grants::Claims)>>>,
    /// Set when a call was refused by the gate: the step waits for a decision.
    pub gated: Arc<std::sync::atomic::AtomicBool>,
    /// The certificate whose signature was verified in this attempt.
    pub verified: Arc<std::sync::Mutex<Option<(String, crate::grants::Claims)>>>,
    /// How many times each `(tool, args digest)` was called in this
    /// attempt: with the run and step, the logical identity of a call
    /// across re-runs (SPEC G8).
    pub calls: Arc<std::sync::Mutex<std::collections::HashMap<String, u32>>>,
}

impl Turn {
    /// A turn of `gadget` in `chat` for `principal`.
    pub fn new(gadget: &str, chat: &str, principal: Principal) -> Turn {
        Turn {
            gadget: Some(gadget.to_owned()),
            chat: chat.to_owned(),
            principal,
            harness: Harness::Plain,
            awaited: Arc::default(),
            staged: Arc::default(),
            step: None,
            unsynced: None,
            pinned: None,
        }
    }

    /// The person the turn acts for.
    pub fn person(&self) -> &str {
        self.principal.acting_for()
    }

    /// The step's certificate, handed over once (SPEC G3).
    pub fn take_certificate(&self) -> Option<(String, crate::grants::Claims)> {
        self.step.as_ref().and_then(|s| {
            s.certificate
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
        })
    }

    /// The actions this turn ended on.
    pub fn awaited(&self) -> Vec<i64> {
        self.awaited
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}
