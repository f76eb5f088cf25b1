//! The claim's statements: at most once, held by the database (SPEC P1,
//! P3), on one home or on a database many hosts share.
//!
//! Owns every statement that moves an action into `applying` or out of
//! it, written once over [`Sql`] so that the embedded home and a shared
//! PostgreSQL database run the very same text. Each is one conditional
//! UPDATE whose WHERE clause is the guarantee: of any number of claimers,
//! on any number of connections or hosts, exactly one sees "1 row
//! changed" (SQLite serialises writers; PostgreSQL re-checks the WHERE
//! clause on the row a concurrent claimer just changed, under READ
//! COMMITTED). It may not decide whether a claim is allowed: the caller
//! (the action store's `claim_in`) checks access, expiry, the latch and
//! the facts first, in the same transaction.

use super::sql::{Sql, args};

/// Take action `id` for sending as process `owner`, decided `by` (a
/// person, `rule:N` or `workflow:N`): `pending`, or `failed` with
/// `retryable = 1`, becomes `applying`. True when this call took it.
pub(crate) fn take(
    db: &dyn Sql,
    id: i64,
    owner: &str,
    by: &str,
    auto: bool,
    now: i64,
) -> anyhow::Result<bool> {
    let n = db.exec(
        "UPDATE ledger SET state = 'applying', claim_owner = ?2, resolved_by = ?3,
           auto_approved = ?4, decided_at = ?5, error = NULL, retryable = NULL
         WHERE id = ?1 AND kind = 'action'
           AND (state = 'pending' OR (state = 'failed' AND retryable = 1))",
        args![id, owner, by, auto, now],
    )?;
    Ok(n == 1)
}

/// The oldest action before `id` in the same queue (its chat, at its
/// gatekeeper) that is still waiting for a decision or being sent, if
/// any. A rule never approves past it (U2): it waits, and follows it in
/// order. Asked in the claim's own transaction, so the order holds
/// whichever process or host drains.
pub(crate) fn waiting_before(db: &dyn Sql, id: i64) -> anyhow::Result<Option<i64>> {
    db.row(
        "SELECT min(earlier.id) FROM ledger AS this, ledger AS earlier
         WHERE this.id = ?1 AND earlier.kind = 'action' AND earlier.chat = this.chat
           AND earlier.gatekeeper = this.gatekeeper AND earlier.id < this.id
           AND earlier.state IN ('pending', 'applying')",
        args![id],
    )?
    .map_or(Ok(None), |r| r.get(0))
}

/// The claim of `id` ended in a send the service accepted: `applied`.
/// True when it was still `applying` (a claim failed meanwhile by a
/// recovery that thought its host dead stays failed: P3 said so first).
pub(crate) fn applied(db: &dyn Sql, id: i64, now: i64) -> anyhow::Result<bool> {
    let n = db.exec(
        "UPDATE ledger SET state = 'applied', finished_at = ?2, claim_owner = NULL
         WHERE id = ?1 AND state = 'applying'",
        args![id, now],
    )?;
    Ok(n == 1)
}

/// The claim of `id` ended in a failed send. A covered workflow call's
/// message may echo its arguments: the step gets it, the database keeps
/// its class only (G7).
pub(crate) fn failed(
    db: &dyn Sql,
    id: i64,
    message: &str,
    retryable: bool,
    now: i64,
) -> anyhow::Result<bool> {
    let n = db.exec(
        "UPDATE ledger SET state = 'failed', retryable = ?3, finished_at = ?4,
           claim_owner = NULL,
           error = CASE WHEN logical_key IS NULL THEN ?2
             ELSE 'the workflow call failed; its message was handed to its step and not kept' END
         WHERE id = ?1 AND state = 'applying'",
        args![id, message, retryable, now],
    )?;
    Ok(n == 1)
}

/// Every claim in flight, with the process that holds it, oldest first.
pub(crate) fn open(db: &dyn Sql) -> anyhow::Result<Vec<(i64, Option<String>)>> {
    db.rows(
        "SELECT id, claim_owner FROM ledger WHERE state = 'applying' ORDER BY id",
        args![],
    )?
    .iter()
    .map(|r| Ok((r.get(0)?, r.get(1)?)))
    .collect()
}

/// Pass the interrupted claim of `id` from `from` (a dead process) to
/// `to`, to be re-sent with the same idempotency key. True when it was
/// still `from`'s: of two recovering processes, one takes it.
pub(crate) fn pass(db: &dyn Sql, id: i64, from: Option<&str>, to: &str) -> anyhow::Result<bool> {
    let n = db.exec(
        "UPDATE ledger SET claim_owner = ?3
         WHERE id = ?1 AND state = 'applying' AND claim_owner IS ?2",
        args![id, from, to],
    )?;
    Ok(n == 1)
}

/// The claim of `id`, held by `from`, whose process is gone: `failed`, not
/// retryable, since its request may have reached the service (P3). True
/// when it was still `from`'s.
pub(crate) fn interrupt(
    db: &dyn Sql,
    id: i64,
    from: Option<&str>,
    now: i64,
) -> anyhow::Result<bool> {
    let n = db.exec(
        "UPDATE ledger SET state = 'failed', retryable = 0, finished_at = ?3, claim_owner = NULL,
           error = 'interrupted after sending: the host stopped while applying this action, so it may or may not have reached the service; check the service and re-stage it if needed'
         WHERE id = ?1 AND state = 'applying' AND claim_owner IS ?2",
        args![id, from, now],
    )?;
    Ok(n == 1)
}

/// A claim in flight, and whether the host that holds it is present.
#[derive(Debug, Clone, serde::Serialize)]
pub struct InFlight {
    /// The action being sent.
    pub action: i64,
    /// The owner token of the process (host) that claimed it.
    pub host: Option<String>,
    /// Whether that host lives: a claim whose host is gone is failed by
    /// the next recovery (P3); a present host's claim is never touched.
    pub present: bool,
}

/// The claims in flight, oldest first, each with whether its host is
/// present as `is_present` tells (the kernel's lock files in a home, the
/// presence locks in a shared database).
pub(crate) fn in_flight(
    db: &dyn Sql,
    is_present: &dyn Fn(&dyn Sql, &str) -> anyhow::Result<bool>,
) -> anyhow::Result<Vec<InFlight>> {
    open(db)?
        .into_iter()
        .map(|(action, host)| {
            let present = match host.as_deref() {
                Some(h) => is_present(db, h)?,
                None => false,
            };
            Ok(InFlight {
                action,
                host,
                present,
            })
        })
        .collect()
}

/// The at-most-once suite, written once and run against both engines: an
/// embedded SQLite file and a real PostgreSQL (a throwaway cluster the
/// test starts). Each claimer, recoverer and finisher is a connection of
/// its own, as separate processes or hosts would be.
#[cfg(test)]
mod tests {
    use super::super::suite::{Backend, runtime};
    use super::*;

    #[test]
    fn of_fifty_concurrent_claimers_exactly_one_takes_the_action() {
        runtime().block_on(async {
            for backend in Backend::both().await {
                let id = backend.pending().await;
                let claimers: Vec<_> = (0..50)
                    .map(|n| {
                        let b = backend.clone();
                        tokio::spawn(async move {
                            b.run(move |db| take(db, id, &format!("host-{n}"), "ana", false, 1))
                                .await
                        })
                    })
                    .collect();
                let mut won = Vec::new();
                for (n, c) in claimers.into_iter().enumerate() {
                    if c.await.expect("a claimer").expect("a claim attempt") {
                        won.push(n);
                    }
                }
                assert_eq!(won.len(), 1, "{}: winners {won:?}", backend.name());
                let (state, _, owner) = backend.state(id).await;
                assert_eq!(state, "applying", "{}", backend.name());
                assert_eq!(
                    owner,
                    Some(format!("host-{}", won[0])),
                    "{}",
                    backend.name()
                );
                // Applied once; a second finish and a late claim change nothing.
                assert!(backend.run(move |db| applied(db, id, 2)).await.unwrap());
                assert!(!backend.run(move |db| applied(db, id, 3)).await.unwrap());
                assert!(
                    !backend
                        .run(move |db| take(db, id, "late", "ana", false, 4))
                        .await
                        .unwrap()
                );
                assert_eq!(backend.state(id).await.0, "applied", "{}", backend.name());
            }
        });
    }

    #[test]
    fn of_two_recoverers_one_takes_an_interrupted_claim_over() {
        runtime().block_on(async {
            for backend in Backend::both().await {
                let id = backend.pending().await;
                backend
                    .run(move |db| take(db, id, "dead", "ana", false, 1))
                    .await
                    .unwrap();
                let takers: Vec<_> = ["left", "right"]
                    .into_iter()
                    .map(|to| {
                        let b = backend.clone();
                        tokio::spawn(async move {
                            b.run(move |db| pass(db, id, Some("dead"), to)).await
                        })
                    })
                    .collect();
                let mut took = 0;
                for t in takers {
                    took += usize::from(t.await.unwrap().unwrap());
                }
                assert_eq!(took, 1, "{}", backend.name());
                // A retryable failure may be claimed again, once.
                backend
                    .run(move |db| {
                        let owner = open(db)?
                            .into_iter()
                            .find(|(i, _)| *i == id)
                            .and_then(|(_, o)| o)
                            .ok_or_else(|| anyhow::anyhow!("the claim is gone"))?;
                        assert!(owner == "left" || owner == "right");
                        assert!(failed(db, id, "the service was down", true, 2)?);
                        Ok(())
                    })
                    .await
                    .unwrap();
                assert_eq!(
                    backend.state(id).await,
                    ("failed".to_owned(), Some(1), None)
                );
                assert!(
                    backend
                        .run(move |db| take(db, id, "again", "ana", false, 3))
                        .await
                        .unwrap()
                );
                assert!(
                    !backend
                        .run(move |db| take(db, id, "twice", "ana", false, 3))
                        .await
                        .unwrap()
                );
            }
        });
    }
}
