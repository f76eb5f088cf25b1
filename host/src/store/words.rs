//! The words the store keeps in its state and kind columns, as typed enums.
//!
//! Owns the mapping between each variant and the exact word stored for it
//! (the SQL CHECK lists in `migrations/` admit exactly these words; a unit
//! test below holds the two together). Code decides with exhaustive
//! `match`es on these enums, never by comparing strings. This module may not
//! decide anything itself: it only names states.
//!
//! Reading a word the enum does not know (a hand edit, a newer Gatehouse's
//! row) never fails the read: each enum names its *safe side*, the variant
//! an unknown word is read as, chosen so that nothing proceeds on a state
//! the kernel does not understand (the rules' fail-closed default).

use rusqlite::types::{FromSql, FromSqlResult, ToSql, ToSqlOutput, ValueRef};

/// Declare an enum of stored words: each variant with its word, and the
/// variant an unknown stored word reads as. Generates the word mapping,
/// `Display`, `Serialize` (as the word, so JSON output is unchanged) and
/// the SQLite conversions.
macro_rules! stored_words {
    (
        $(#[$meta:meta])*
        pub enum $name:ident in $table:literal . $column:literal {
            $( $(#[$vmeta:meta])* $variant:ident = $word:literal, )+
        }
        unknown reads as $safe:ident;
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every variant, in the order of the schema's CHECK list.
            pub const ALL: &'static [$name] = &[$( $name::$variant, )+];

            /// The table and column whose CHECK lists these words.
            #[cfg(test)]
            const CHECKED: (&'static str, &'static str) = ($table, $column);

            /// The word stored for this variant.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $word, )+
                }
            }

            /// The variant `word` names exactly; `None` for any other word
            /// (for input from a person, which is refused, not guessed).
            pub fn from_word(word: &str) -> Option<$name> {
                match word {
                    $( $word => Some($name::$variant), )+
                    _ => None,
                }
            }

            /// The variant a stored word names; a word this enum does not
            /// know reads as its safe side.
            pub fn from_stored(word: &str) -> $name {
                $name::from_word(word).unwrap_or($name::$safe)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                // `pad`, so that a width in a format string (`{:<8}`) is
                // honoured as it was for the stored text.
                f.pad(self.as_str())
            }
        }

        // Comparison with the stored word as text, for checks that the word
        // itself is what they expect (the tests' assertions on stored
        // state); kernel code decides with a `match` on the variant.
        impl PartialEq<&str> for $name {
            fn eq(&self, word: &&str) -> bool {
                self.as_str() == *word
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, word: &str) -> bool {
                self.as_str() == word
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl ToSql for $name {
            fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
                Ok(ToSqlOutput::from(self.as_str()))
            }
        }

        impl super::sql::ToArg for $name {
            fn arg(&self) -> super::sql::Arg<'_> {
                super::sql::Arg::Text(self.as_str())
            }
        }

        impl super::sql::FromCell for $name {
            const WHAT: &'static str = "a stored word";
            fn from_cell(cell: &super::sql::Cell) -> Option<$name> {
                match cell {
                    super::sql::Cell::Text(word) => Some($name::from_stored(word)),
                    _ => None,
                }
            }
        }

        impl FromSql for $name {
            fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
                value.as_str().map($name::from_stored)
            }
        }
    };
}

stored_words! {
    /// A workflow run's state (SPEC G).
    ///
    /// An unknown word reads as `Failed`: a run the kernel cannot read is
    /// never advanced (no step of it is started again).
    pub enum RunState in "workflow_runs"."state" {
        /// Steps are being run.
        Running = "running",
        /// A step waits for an approval request's decision.
        Waiting = "waiting",
        /// Every step is done.
        Done = "done",
        /// A step failed; the run goes no further.
        Failed = "failed",
    }
    unknown reads as Failed;
}

stored_words! {
    /// A workflow step's status (SPEC G).
    ///
    /// An unknown word reads as `Failed`: a step the kernel cannot read is
    /// never run, and it stops its run rather than counting as done.
    pub enum StepStatus in "run_steps"."status" {
        /// Not run yet (or sent back to run again).
        Pending = "pending",
        /// Refused by the gate: it waits for an approval request.
        Gated = "gated",
        /// It ran to its end.
        Done = "done",
        /// It failed.
        Failed = "failed",
    }
    unknown reads as Failed;
}

stored_words! {
    /// An approval request's state (SPEC G2).
    ///
    /// An unknown word reads as `Rejected`: a request the kernel cannot
    /// read never covers a call (only `Approved` does).
    pub enum RequestState in "approval_requests"."state" {
        /// Waiting for an approver.
        Pending = "pending",
        /// Approved: it covers its step's calls.
        Approved = "approved",
        /// Rejected by an approver.
        Rejected = "rejected",
        /// Approved, then withdrawn.
        Withdrawn = "withdrawn",
        /// Replaced by a newer request of the same step.
        Replaced = "replaced",
        /// Nobody decided it within its run's chat's expiry (SPEC H3's
        /// parity): it can no longer be approved; re-submitting asks anew.
        Expired = "expired",
    }
    unknown reads as Rejected;
}

stored_words! {
    /// An agent run's state (SPEC V2, V3).
    ///
    /// An unknown word reads as `Stopped`: a run the kernel cannot read is
    /// never resumed.
    pub enum AgentRunState in "agent_runs"."state" {
        /// A turn of it is running.
        Running = "running",
        /// It waits on the actions it awaited.
        Waiting = "waiting",
        /// Its last turn awaited nothing.
        Done = "done",
        /// It was stopped (an awaited action was rejected or failed).
        Stopped = "stopped",
    }
    unknown reads as Stopped;
}

stored_words! {
    /// What a ledger entry records (SPEC L1).
    ///
    /// An unknown word reads as `Observation`: an observation is the entry
    /// nothing is ever sent for or run from, so an entry the kernel cannot
    /// read is shown, never acted on.
    pub enum LedgerKind in "ledger"."kind" {
        /// A staged action.
        Action = "action",
        /// A read (or a hand-over of an applied action's result).
        Observation = "observation",
        /// A hook bound to a gadget (SPEC H1).
        Hook = "hook",
    }
    unknown reads as Observation;
}

stored_words! {
    /// What a hook is bound to (SPEC H1).
    ///
    /// An unknown word reads as `Webhook`: a webhook fires only on a
    /// delivery signed with its secret, never by itself on a schedule.
    pub enum HookKind in "hooks"."kind" {
        /// Fired by a signed delivery to its URL.
        Webhook = "webhook",
        /// Fired every `every_secs` seconds.
        Schedule = "schedule",
    }
    unknown reads as Webhook;
}

stored_words! {
    /// How one firing of a hook ended (SPEC H1).
    ///
    /// An unknown word reads as `Failed`: a firing the kernel cannot read
    /// is not shown as having run well, nor as still running (a running
    /// firing is one recovery would look for).
    pub enum FiringOutcome in "hook_firings"."outcome" {
        /// Its turn is running.
        Running = "running",
        /// Its turn ended.
        Done = "done",
        /// Its turn failed.
        Failed = "failed",
        /// Nothing ran (the firing's note says why).
        Refused = "refused",
    }
    unknown reads as Failed;
}

stored_words! {
    /// What the gate decided about one workflow call, as audited (SPEC G7).
    ///
    /// An unknown word reads as `Denied`: an audit row the kernel cannot
    /// read is never shown as having let a call through.
    pub enum InvocationDecision in "invocations"."decision" {
        /// The call went through (or was staged, for an action).
        Allowed = "allowed",
        /// The call was refused before it reached any gatekeeper.
        Denied = "denied",
    }
    unknown reads as Denied;
}

stored_words! {
    /// Who (or what) decided an action, as the decision history keeps it
    /// (SPEC L2: it outlives pruned payloads).
    ///
    /// An unknown word reads as `Rejected`: a decision the kernel cannot
    /// read never counts as an approval.
    pub enum Verdict in "decisions"."decision" {
        /// A person approved it.
        Approved = "approved",
        /// A person rejected it.
        Rejected = "rejected",
        /// A rule approved it (both keys, SPEC U1).
        AutoApproved = "auto-approved",
        /// A workflow's approvals covered it (SPEC G).
        WorkflowApproved = "workflow-approved",
    }
    unknown reads as Rejected;
}

stored_words! {
    /// How a decided action ended, as the decision history keeps it.
    ///
    /// An unknown word reads as `Failed`: an outcome the kernel cannot read
    /// is never shown as applied.
    pub enum DecisionOutcome in "decisions"."outcome" {
        /// Sent, and the service applied it.
        Applied = "applied",
        /// Sent (or claimed), and it failed.
        Failed = "failed",
        /// Never sent: rejected.
        Rejected = "rejected",
    }
    unknown reads as Failed;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ActionState;

    /// The words a column's CHECK admits, read from the schema the
    /// migrations actually build (so a rebuilt table is read as rebuilt).
    fn checked_words(table: &str, column: &str) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let store =
            crate::store::Store::open(&dir.path().join("state.db"), crate::seal::test_key())
                .unwrap();
        let sql: String = store
            .home()
            .expect("the home")
            .lock()
            .query_row(
                "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?1",
                [table],
                |r| r.get(0),
            )
            .unwrap();
        // Either spelling of "one of these words": `column IN ('a', 'b')`,
        // or (the ledger since schema 9, which SQLite checks without a
        // temporary table) `CHECK (column = 'a' OR column = 'b')`.
        let listed = format!("{column} IN (");
        let compared = format!("CHECK ({column} = '");
        let (start, list) = if let Some(at) = sql.find(&listed) {
            (at + listed.len(), true)
        } else if let Some(at) = sql.find(&compared) {
            (at + "CHECK (".len(), false)
        } else {
            panic!("no CHECK ({listed}...) or {compared}... in table {table}")
        };
        let end = start + sql[start..].find(')').unwrap();
        let body = &sql[start..end];
        if list {
            body.split(',')
                .map(|w| w.trim().trim_matches('\'').to_owned())
                .collect()
        } else {
            body.split(" OR ")
                .map(|w| {
                    let w = w.trim();
                    let word = w
                        .strip_prefix(&format!("{column} = "))
                        .unwrap_or_else(|| panic!("{w:?} in {table}.{column}'s CHECK"));
                    word.trim_matches('\'').to_owned()
                })
                .collect()
        }
    }

    fn words<T: Copy>(all: &[T], word: fn(T) -> &'static str) -> Vec<String> {
        all.iter().map(|v| word(*v).to_owned()).collect()
    }

    #[test]
    fn every_enum_names_exactly_the_words_its_check_admits() {
        let cases = [
            (RunState::CHECKED, words(RunState::ALL, RunState::as_str)),
            (
                StepStatus::CHECKED,
                words(StepStatus::ALL, StepStatus::as_str),
            ),
            (
                RequestState::CHECKED,
                words(RequestState::ALL, RequestState::as_str),
            ),
            (
                AgentRunState::CHECKED,
                words(AgentRunState::ALL, AgentRunState::as_str),
            ),
            (
                LedgerKind::CHECKED,
                words(LedgerKind::ALL, LedgerKind::as_str),
            ),
            (HookKind::CHECKED, words(HookKind::ALL, HookKind::as_str)),
            (Verdict::CHECKED, words(Verdict::ALL, Verdict::as_str)),
            (
                DecisionOutcome::CHECKED,
                words(DecisionOutcome::ALL, DecisionOutcome::as_str),
            ),
            (
                InvocationDecision::CHECKED,
                words(InvocationDecision::ALL, InvocationDecision::as_str),
            ),
            (
                FiringOutcome::CHECKED,
                words(FiringOutcome::ALL, FiringOutcome::as_str),
            ),
            // A firing's cause is the kind of hook that fired.
            (
                ("hook_firings", "cause"),
                words(HookKind::ALL, HookKind::as_str),
            ),
            // The action state keeps its own enum (an unknown one is an
            // error there, not a guess); its words are held here all the same.
            (
                ("ledger", "state"),
                words(
                    &[
                        ActionState::Pending,
                        ActionState::Applying,
                        ActionState::Applied,
                        ActionState::Failed,
                        ActionState::Rejected,
                        ActionState::Expired,
                    ],
                    ActionState::as_str,
                ),
            ),
        ];
        for ((table, column), words) in cases {
            assert_eq!(
                checked_words(table, column),
                words,
                "{table}.{column}: the enum and the schema's CHECK differ"
            );
        }
    }

    #[test]
    fn every_word_reads_back_as_its_variant_and_unknown_words_as_the_safe_side() {
        for v in RunState::ALL {
            assert_eq!(RunState::from_stored(v.as_str()), *v);
        }
        for v in StepStatus::ALL {
            assert_eq!(StepStatus::from_stored(v.as_str()), *v);
        }
        for v in RequestState::ALL {
            assert_eq!(RequestState::from_stored(v.as_str()), *v);
        }
        for v in AgentRunState::ALL {
            assert_eq!(AgentRunState::from_stored(v.as_str()), *v);
        }
        for v in LedgerKind::ALL {
            assert_eq!(LedgerKind::from_stored(v.as_str()), *v);
        }
        for v in HookKind::ALL {
            assert_eq!(HookKind::from_stored(v.as_str()), *v);
        }
        for v in FiringOutcome::ALL {
            assert_eq!(FiringOutcome::from_stored(v.as_str()), *v);
        }
        for v in Verdict::ALL {
            assert_eq!(Verdict::from_stored(v.as_str()), *v);
        }
        for v in DecisionOutcome::ALL {
            assert_eq!(DecisionOutcome::from_stored(v.as_str()), *v);
        }
        assert_eq!(Verdict::from_stored("approve"), Verdict::Rejected);
        assert_eq!(
            DecisionOutcome::from_stored("sent"),
            DecisionOutcome::Failed
        );
        for v in InvocationDecision::ALL {
            assert_eq!(InvocationDecision::from_stored(v.as_str()), *v);
        }
        assert_eq!(RunState::from_stored("paused"), RunState::Failed);
        assert_eq!(StepStatus::from_stored("Done"), StepStatus::Failed);
        assert_eq!(RequestState::from_stored("ok"), RequestState::Rejected);
        assert_eq!(AgentRunState::from_stored(""), AgentRunState::Stopped);
        assert_eq!(LedgerKind::from_stored("note"), LedgerKind::Observation);
        assert_eq!(HookKind::from_stored("cron"), HookKind::Webhook);
        assert_eq!(FiringOutcome::from_stored("?"), FiringOutcome::Failed);
        assert_eq!(
            InvocationDecision::from_stored("allow"),
            InvocationDecision::Denied
        );
        assert_eq!(LedgerKind::from_word("note"), None);
    }

    #[test]
    fn a_word_is_serialized_and_stored_as_itself() {
        assert_eq!(
            serde_json::to_string(&RequestState::Withdrawn).unwrap(),
            "\"withdrawn\""
        );
        assert_eq!(RunState::Waiting.to_string(), "waiting");
    }
}
