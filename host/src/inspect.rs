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

    /// The statements this host has sent to its shared database since it
    /// opened, each a round trip on the wire (none on a home): what a
    /// path costs on PostgreSQL, for benchmarks and tests.
    pub fn round_trips(&self) -> Option<u64> {
        self.store.round_trips()
    }

    /// One action by id, in whatever chat and state it is.
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

    /// A chat's record (owner, latch, expiry), whoever owns it.
    pub fn chat(&self, name: &str) -> anyhow::Result<Option<Chat>> {
        self.store.chat(name)
    }

    /// An installed gadget's record (name and component digest).
    pub fn gadget(&self, name: &str) -> anyhow::Result<Option<GadgetRecord>> {
        self.store.gadget(name)
    }

    /// A gatekeeper instance's record: manifest, trust tier, allowed hosts.
    pub fn gatekeeper(&self, name: &str) -> anyhow::Result<Option<Arc<GatekeeperRecord>>> {
        self.store.gatekeeper(name)
    }

    /// The collaborators a chat was shared with, verified or not.
    pub fn collaborators(&self, chat: &str) -> anyhow::Result<Vec<Collaborator>> {
        self.store.collaborators(chat)
    }

    /// The observers of a chat: who re-verified which source, with what result.
    pub fn observers(&self, chat: &str) -> anyhow::Result<Vec<Observer>> {
        self.store.observers(chat)
    }

    /// The JSON source lists of every observation of `chat`, per gatekeeper.
    pub fn observed_sources(&self, chat: &str) -> anyhow::Result<Vec<(String, String)>> {
        self.store.observed_sources(chat)
    }

    /// Ledger entries matching `filter`, across every chat unless the filter
    /// names one.
    pub fn ledger(&self, filter: &LedgerFilter) -> anyhow::Result<Vec<LedgerEntry>> {
        self.store.ledger(filter)
    }

    /// Every auto-approval rule (key two), of every person.
    pub fn rules(&self) -> anyhow::Result<Vec<Rule>> {
        self.store.rules()
    }

    /// Connected accounts of one person, or of everyone (labels only: the
    /// credentials stay in the kernel's secret store).
    pub fn accounts(&self, person: Option<&str>) -> anyhow::Result<Vec<Account>> {
        self.store.accounts(person)
    }

    /// One agent-harness run: its state and the actions it waits on.
    pub fn agent_run(&self, id: i64) -> anyhow::Result<Option<AgentRun>> {
        self.store.run_record(id)
    }

    /// One workflow run's record.
    pub fn workflow_run(&self, run: i64) -> anyhow::Result<Option<RunRecord>> {
        self.store.workflow_run(run)
    }

    /// The steps a workflow run has taken, in order.
    pub fn run_steps(&self, run: i64) -> anyhow::Result<Vec<StepRecord>> {
        self.store.run_steps(run)
    }

    /// Workflow approval requests of one run, or of every run.
    pub fn requests(&self, run: Option<i64>) -> anyhow::Result<Vec<RequestRecord>> {
        self.store.requests(run)
    }

    /// Every call a workflow run made under a step certificate, with who
    /// allowed it (argument digests only).
    pub fn invocations(&self, run: i64) -> anyhow::Result<Vec<Invocation>> {
        self.store.invocations(run)
    }
}
