//! A read-only view of everything stored, for the operator's own tools,
//! tests and benchmarks.
//!
//! It applies no policy and can change nothing: a person's view of a chat
//! goes through the kernel's person-scoped methods, which ask the one
//! authorization rule (`crate::access`). Surfaces (CLI, web, MCP) acting for
//! a person never use this view; a source test in `crate::cli` checks it.

use crate::store::workflows::{Invocation, RequestRecord, RunRecord, StepRecord};
use crate::store::{
    Account, Action, AgentRun, Chat, Collaborator, GadgetRecord, GatekeeperRecord, LedgerEntry,
    LedgerFilter, Observer, Rule, Store,
};
use std::sync::Arc;

/// See [`crate::Kernel::inspect`].
pub struct Inspect<'a> {
    store: &'a Store,
}

impl<'a> Inspect<'a> {
    pub(crate) fn new(store: &'a Store) -> Inspect<'a> {
        Inspect { store }
    }

    pub fn action(&self, id: i64) -> anyhow::Result<Option<Action>> {
        self.store.action(id)
    }

    /// Pending actions of one chat, or of every chat.
    pub fn pending(&self, chat: Option<&str>) -> anyhow::Result<Vec<Action>> {
        match chat {
            Some(c) => self.store.pending_in(c),
            None => self.store.pending_all(),
        }
    }

    pub fn chat(&self, name: &str) -> anyhow::Result<Option<Chat>> {
        self.store.chat(name)
    }

    pub fn gadget(&self, name: &str) -> anyhow::Result<Option<GadgetRecord>> {
        self.store.gadget(name)
    }

    pub fn gatekeeper(&self, name: &str) -> anyhow::Result<Option<Arc<GatekeeperRecord>>> {
        self.store.gatekeeper(name)
    }

    pub fn collaborators(&self, chat: &str) -> anyhow::Result<Vec<Collaborator>> {
        self.store.collaborators(chat)
    }

    pub fn observers(&self, chat: &str) -> anyhow::Result<Vec<Observer>> {
        self.store.observers(chat)
    }

    /// The JSON source lists of every observation of `chat`, per gatekeeper.
    pub fn observed_sources(&self, chat: &str) -> anyhow::Result<Vec<(String, String)>> {
        self.store.observed_sources(chat)
    }

    pub fn ledger(&self, filter: &LedgerFilter) -> anyhow::Result<Vec<LedgerEntry>> {
        self.store.ledger(filter)
    }

    pub fn rules(&self) -> anyhow::Result<Vec<Rule>> {
        self.store.rules()
    }

    pub fn accounts(&self, person: Option<&str>) -> anyhow::Result<Vec<Account>> {
        self.store.accounts(person)
    }

    pub fn agent_run(&self, id: i64) -> anyhow::Result<Option<AgentRun>> {
        self.store.run_record(id)
    }

    pub fn workflow_run(&self, run: i64) -> anyhow::Result<Option<RunRecord>> {
        self.store.workflow_run(run)
    }

    pub fn run_steps(&self, run: i64) -> anyhow::Result<Vec<StepRecord>> {
        self.store.run_steps(run)
    }

    pub fn requests(&self, run: Option<i64>) -> anyhow::Result<Vec<RequestRecord>> {
        self.store.requests(run)
    }

    pub fn invocations(&self, run: i64) -> anyhow::Result<Vec<Invocation>> {
        self.store.invocations(run)
    }
}
