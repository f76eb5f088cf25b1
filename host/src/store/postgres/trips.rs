//! The shared database's one-statement writes: a stage, a claim's take
//! and a claim's end, each a call of a server-side function (schemas 8, 9)
//! that the host sends in one round trip, without `BEGIN` or `COMMIT`
//! (a single statement is its own transaction, durable at its commit).
//!
//! Why: on PostgreSQL a store call costs its round trips, not its work. A
//! stage was a transaction of seven statements after two reads ahead of
//! it, each a loopback trip through the driver, where the embedded file
//! makes library calls. The functions do what the store's statements do
//! (`stages`, `claims`, `actions`); the store's suites run the same
//! refusals, caps and races against both engines. Reached only from the
//! store's engine (`engine.rs`), on a shared database; nothing here
//! decides who may stage or claim.

use crate::store::action::{DECIDED, NewAction, StageError, action_tag, args_digest};
use crate::store::actions::{ACTION_COLUMNS, Taking, action_from};
use crate::store::sql::{Sql, args};
use crate::store::stages::{RuleCoverage, StagedAction};
use crate::store::words::DecisionOutcome;
use crate::store::{Action, DEFAULT_EXPIRY_MS, MAX_OPEN_ACTIONS, RETAINED_FINISHED, now_ms};

/// Stage `a` in one statement (`gatehouse_stage`): admitted as
/// `stages::admit` admits (the policy epoch `a` was checked under, the
/// latch, the cap under the chat's row lock, what fell due marked
/// expired), inserted pending and announced; or refused with the same
/// [`StageError`] as the staging transaction gives, nothing written.
pub(crate) fn stage(db: &dyn Sql, a: &NewAction) -> Result<StagedAction, StageError> {
    let facts = serde_json::to_string(&a.facts).map_err(anyhow::Error::from)?;
    let kept = a.args.as_str();
    let row = db
        .row(
            "SELECT refused, n FROM gatehouse_stage(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10,
               ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23)",
            args![
                a.chat,
                action_tag(&a.gatekeeper, &a.tool),
                a.resolved_at,
                MAX_OPEN_ACTIONS,
                DEFAULT_EXPIRY_MS,
                RETAINED_FINISHED,
                now_ms(),
                DECIDED,
                a.principal.label(),
                a.principal.acting_for(),
                a.gadget,
                a.key,
                a.gatekeeper,
                a.tool,
                a.classified_by,
                a.trust.as_str(),
                kept,
                args_digest(kept),
                a.await_decision,
                a.provisional,
                facts,
                a.facts.account,
                a.principal.hook()
            ],
        )?
        .ok_or_else(|| anyhow::anyhow!("the stage returned no answer"))?;
    let n: Option<i64> = row.get(1)?;
    match row.get::<Option<String>>(0)?.as_deref() {
        None => Ok(StagedAction {
            id: n.ok_or_else(|| anyhow::anyhow!("the stage returned no id"))?,
            // A rule committed after the function read the rules, before
            // its commit, would not be seen (READ COMMITTED): ask after.
            rules: RuleCoverage::Unknown,
        }),
        Some("no-chat") => Err(StageError::NoChat(a.chat.clone())),
        Some("policy-moved") => Err(StageError::PolicyMoved),
        Some("latched") => Err(StageError::LockedDown(a.chat.clone())),
        Some("full") => Err(StageError::TooManyOpen(n.unwrap_or(MAX_OPEN_ACTIONS))),
        Some(other) => Err(StageError::Store(anyhow::anyhow!(
            "the stage answered {other:?}, which this host does not know"
        ))),
    }
}

/// Take the action for sending in one statement (`gatehouse_claim`): the
/// conditional update, the announcement and the decision's record, which
/// stand or fall together. The action as it is now when this call took
/// it; `None` when another got there first.
pub(crate) fn take(db: &dyn Sql, t: &Taking<'_>) -> anyhow::Result<Option<Action>> {
    let a = t.action;
    let digest = a
        .args_digest
        .clone()
        .unwrap_or_else(|| args_digest(&a.args));
    db.row(
        &format!("SELECT {ACTION_COLUMNS} FROM gatehouse_claim(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"),
        args![
            a.id, t.owner, t.by, t.auto, t.now, t.decision, digest, DECIDED
        ],
    )?
    .as_ref()
    .map(action_from)
    .transpose()
}

/// End the claim of `id` in one statement (`gatehouse_outcome`, schema 9):
/// `applied` with its kept `result`, or `failed` with its `failure` (the
/// message, and whether it provably had no effect); its decision's
/// outcome and the announcement in the same commit, as
/// `actions::finish_in` does in a transaction; then the result and the
/// chat's pruning, which never undo the state (P2). Whether the ledger
/// took this outcome (the claim was still `applying`).
pub(crate) fn finish(
    db: &dyn Sql,
    id: i64,
    failure: Option<(&str, bool)>,
    result: Option<&str>,
) -> anyhow::Result<bool> {
    let (outcome, message, retryable) = match failure {
        None => (DecisionOutcome::Applied, None, false),
        Some((message, retryable)) => (DecisionOutcome::Failed, Some(message), retryable),
    };
    db.row(
        "SELECT gatehouse_outcome(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        args![
            id,
            outcome,
            message,
            retryable,
            now_ms(),
            DECIDED,
            result,
            RETAINED_FINISHED
        ],
    )?
    .map_or(Ok(false), |r| r.get::<bool>(0))
}

/// Keep the newest finished actions of `id`'s chat (`stages::prune`), in
/// one statement.
pub(crate) fn prune_of(db: &dyn Sql, id: i64) -> anyhow::Result<u64> {
    let pruned: Option<i64> = db
        .row(
            "SELECT gatehouse_prune((SELECT chat FROM ledger WHERE id = ?1), ?2)",
            args![id, RETAINED_FINISHED],
        )?
        .map_or(Ok(None), |r| r.get(0))?;
    Ok(pruned.map_or(0, |n| n.max(0) as u64))
}

/// What the hot paths cost on a shared database, in round trips counted
/// at the driver: a stage is one, whatever the kernel's turn did before
/// it; a claim is three reads and one take; an outcome is one. A change
/// that adds a trip to any of them fails here, and says how many it took.
#[cfg(test)]
mod tests {
    use crate::principal::Principal;
    use crate::store::dispatch::Facts;
    use crate::store::registry::Trust;
    use crate::store::suite::{Backend, runtime, shared_chat};
    use crate::store::{ClaimBy, NewAction, validate_args};

    #[test]
    fn a_stage_is_one_round_trip_a_claim_four_and_an_outcome_one() {
        runtime().block_on(async {
            for backend in Backend::both().await {
                let Backend::Postgres(shared, _) = &backend else {
                    continue; // the home's file makes library calls
                };
                backend.run(shared_chat).await.expect("the chat");
                let store = backend.store();
                // As a turn's first call: resolved, and the resolution kept.
                let (resolved, _) = store
                    .run(|s| s.resolve("c", "K", "ann"))
                    .await
                    .expect("resolved")
                    .expect("a binding");
                let (_, epoch) = store
                    .resolution_kept("c", "K", "ann")
                    .expect("the resolution is kept on a shared database too");
                let a = NewAction {
                    chat: "c".into(),
                    principal: Principal::person("ann"),
                    gadget: None,
                    key: "K".into(),
                    gatekeeper: "g".into(),
                    tool: "send".into(),
                    classified_by: "default",
                    trust: Trust::Byo,
                    args: validate_args("{}").expect("an object"),
                    await_decision: true,
                    provisional: None,
                    facts: Facts::of(&resolved, "send").expect("facts"),
                    resolved_at: Some(epoch),
                };
                // Each statement is prepared on a connection's first use
                // of it: warm every connection the pool holds so far.
                for _ in 0..4 {
                    store.stage(a.clone()).await.expect("staged");
                }
                // Counted on a blocking thread, as the store's calls run.
                let counted = |f: Box<dyn FnOnce(&crate::store::Store) + Send>| {
                    let (shared, store) = (shared.clone(), store.clone());
                    async move {
                        tokio::task::spawn_blocking(move || {
                            let before = shared.trips();
                            f(&store);
                            shared.trips() - before
                        })
                        .await
                        .expect("joined")
                    }
                };
                let rt = tokio::runtime::Handle::current();
                let staged = std::sync::Arc::new(std::sync::Mutex::new(None));
                let (kept, aa) = (staged.clone(), a.clone());
                let stage_trips = counted(Box::new(move |s| {
                    let id = rt.block_on(s.stage(aa)).expect("staged").id;
                    *kept.lock().expect("the id") = Some(id);
                }))
                .await;
                assert_eq!(stage_trips, 1, "round trips of a stage");

                let id = staged.lock().expect("the id").expect("staged");
                let claim_trips = counted(Box::new(move |s| {
                    let claimed = s.claim(id, &ClaimBy::Person("ann".into()), "h");
                    assert!(matches!(claimed, Ok(Ok(_))), "claimed");
                }))
                .await;
                // The action with its facts and its chat's expiry, the
                // standing with the latch, the policy epoch, and the take.
                assert_eq!(claim_trips, 4, "round trips of a claim");

                let finish_trips = counted(Box::new(move |s| {
                    assert!(s.finish_applied(id, "{}").expect("finished"), "recorded");
                }))
                .await;
                assert_eq!(finish_trips, 1, "round trips of an outcome");
            }
        });
    }
}
