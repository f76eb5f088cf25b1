//! The durable state: the home's SQLite file, or a PostgreSQL database
//! that several hosts share.
//!
//! Owns the schema, the connection settings and every SQL statement. The
//! action store's guarantees live here, in the database's own state:
//! durable staging with its caps (SPEC A5; group commit), the claim made
//! durable before anything is sent (P1), recovery of interrupted claims
//! (P3) and retention (P5). It may not call components or decide policy:
//! callers (the kernel and the overseer) decide, this module records.
//!
//! Three layers: the concept modules (`actions`, `claims`, `stages`, ...)
//! hold the statements, written once over the [`sql::Sql`] seam; the
//! [`engine`] is the one door they reach a database through (read, write
//! with a durability, stage, observe) and the only place that tells the
//! engines apart; the engines themselves live in `sqlite/` and
//! `postgres/`. Calls are synchronous and short; async callers go through
//! [`Store::run`], which moves them off the executor, or the engine's
//! async verbs (`read_now`, `stage`, `observe_now`), which run in place
//! where that cannot wait.

mod action;
mod actions;
pub(crate) mod claims;
mod deployment;
pub mod dispatch;
mod engine;
mod gadget_storage;
mod hooks;
mod identities;
mod ledger;
mod notices;
pub mod postgres;
mod push;
mod registry;
pub(crate) mod rules;
pub(crate) mod sealed;
mod sessions;
mod sharing;
pub(crate) mod sql;
mod sqlite;
mod stages;
#[cfg(test)]
pub(crate) mod suite;
mod unambiguous;
pub mod words;
pub mod workflows;

pub(crate) use actions::DECIDED;
pub use actions::{
    Action, ActionState, Args, Claim, ClaimBy, ClaimRefusal, NewAction, Recovered, RevertRefusal,
    StageError, Staged, action_tag, args_digest, validate_args,
};
pub use claims::InFlight;
pub use dispatch::{Facts, Resolved, Unresolved};
pub(crate) use gadget_storage::StoragePut;
pub use hooks::{Firing, FiringRefusal, Hook, NewHook};
pub use identities::{IdentityBinding, PASSKEYS_PER_PERSON, StoredPasskey};
pub use ledger::{LedgerEntry, LedgerFilter, NewObservation, Source, Sources};
pub use notices::{NoticeTarget, Told};
pub use push::{NewPushDevice, PushDevice, PushKeys, PushTarget, Subscribed};
pub use registry::{Chat, GadgetRecord, GatekeeperRecord, Introduction, Trust};
pub(crate) use registry::{chat_in, turn_start_in};
pub use rules::{AgentRun, Rule};
pub use sessions::{Redeemed, SessionLookup, SigninRefusal, new_secret, secret_digest};
pub(crate) use sharing::observers_in;
pub use sharing::{Account, Collaborator, Observed, Observer, ShareRefusal};
pub use stages::{RuleCoverage, StagedAction};
pub use words::{
    AgentRunState, DecisionOutcome, FiringOutcome, HookKind, InvocationDecision, LedgerKind,
    RequestState, RunState, StepStatus, Verdict,
};

use anyhow::Context as _;
use sql::Sql;
use std::path::PathBuf;
use std::sync::Arc;

/// Whether the process or host named by an owner token lives, asked in
/// the caller's transaction (a claim is interrupted exactly when its
/// owner is gone, SPEC P3). The kernel answers it: by the owner's lock
/// file in a home, by its presence lock in a shared database.
pub(crate) type IsPresent<'a> = dyn Fn(&dyn Sql, &str) -> anyhow::Result<bool> + 'a;

/// At most this many actions of one chat may be pending or applying
/// (SPEC A5); one chat never blocks another.
pub const MAX_OPEN_ACTIONS: i64 = 50;
/// Staged arguments are capped at 64 KiB of JSON (SPEC A5).
pub const MAX_ARGS_BYTES: usize = 64 * 1024;
/// A result over this size is replaced by a note with its size (SPEC P2).
pub const MAX_RESULT_BYTES: usize = 128 * 1024;
/// The newest finished actions kept per chat (SPEC P5).
pub const RETAINED_FINISHED: i64 = 100;
/// How long an action may wait for a decision unless its chat says
/// otherwise (SPEC H3): 7 days, in milliseconds.
pub const DEFAULT_EXPIRY_MS: i64 = 7 * 24 * 60 * 60 * 1000;

// Every other size a gatekeeper or gadget controls has a cap too (SPEC A5).
// Texts are cut with a note ([`cut`]); lists and manifests over their caps
// are refused, since cutting them would change what they mean.

/// A failure message, error or refusal from a gatekeeper.
pub const MAX_FAILURE_BYTES: usize = 4 * 1024;
/// Sources one read may name (each is recorded, S1).
pub const MAX_SOURCES: usize = 1000;
/// One source id; a longer one refuses the read (ids are re-verified, S2).
pub const MAX_SOURCE_ID_BYTES: usize = 512;
/// One source title; a longer one is cut.
pub const MAX_SOURCE_TITLE_BYTES: usize = 512;
/// Source ids an observer's scope may list; a longer scope is not kept.
pub const MAX_SCOPE: usize = 10_000;
/// What an agent turn answered, as kept with its run.
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;
/// Tools in one gatekeeper's manifest.
pub const MAX_TOOLS: usize = 1000;
/// Triggers one gatekeeper may declare.
pub const MAX_TRIGGERS: usize = 100;
/// One tool's name.
pub const MAX_TOOL_NAME_BYTES: usize = 128;
/// One tool's description (the prompt shows 600 characters of it).
pub const MAX_DESCRIPTION_BYTES: usize = 16 * 1024;
/// One tool's input schema.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// A whole manifest: names, descriptions and schemas together.
pub const MAX_MANIFEST_BYTES: usize = 1024 * 1024;

/// `text` if it fits in `max` bytes, else its first bytes (cut at a
/// character boundary) and a note saying how long the `what` was.
pub fn cut(text: &str, max: usize, what: &str) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{} […cut: the {what} was {} bytes; the limit is {max}]",
        &text[..end],
        text.len()
    )
}

/// What `PRAGMA quick_check` found in a damaged database. The findings are
/// SQLite's own words about the file, kept as found: the store renders no
/// terminal text, and whoever prints the error makes it one safe line (the
/// CLI does so for every error).
#[derive(Debug)]
pub struct Damaged {
    /// The database file checked.
    pub path: PathBuf,
    /// Up to five findings of the check, none of them `ok`.
    pub findings: Vec<String>,
}

impl std::fmt::Display for Damaged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the state database {} is damaged ({}); move it aside or restore a backup, then retry",
            self.path.display(),
            self.findings.join("; ")
        )
    }
}

impl std::error::Error for Damaged {}

/// A key resolved for a call, shared with what this process keeps of it,
/// and the chat's pending actions at its gatekeeper when that simulates
/// (the overlay, SPEC V1); or why the key did not resolve.
pub type Resolution = Result<(Arc<Resolved>, Vec<Action>), Unresolved>;

/// A handle on the deployment's database, cheap to clone. Crate-private:
/// only the kernel holds one, and surfaces reach the state only through the
/// kernel, so that no surface can skip its authorization rule or its
/// one send path.
#[derive(Clone)]
pub(crate) struct Store {
    db: engine::Db,
    /// What this process resolved, per policy epoch (see
    /// [`dispatch::Resolutions`]).
    resolutions: Arc<dispatch::Resolutions>,
    /// The key the deployment's secrets are sealed with ([`sealed`]).
    key: Arc<crate::seal::Key>,
}

impl Store {
    /// Run `f` on a blocking thread: SQLite never runs on the async executor.
    pub async fn run<T, F>(&self, f: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> anyhow::Result<T> + Send + 'static,
    {
        let store = self.clone();
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .context("a state database task panicked")?
    }
}

/// `resolved` with the chat's pending actions at its gatekeeper when it
/// simulates (its reads overlay them, SPEC V1), read in the same trip.
fn with_overlay(
    db: &dyn Sql,
    chat: &str,
    resolved: Result<Arc<Resolved>, Unresolved>,
) -> anyhow::Result<Resolution> {
    let resolved = match resolved {
        Ok(r) => r,
        Err(e) => return Ok(Err(e)),
    };
    let overlay = if resolved.gatekeeper.manifest.simulates {
        actions::pending_at(db, chat, &resolved.gatekeeper.name)?
    } else {
        Vec::new()
    };
    Ok(Ok((resolved, overlay)))
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
