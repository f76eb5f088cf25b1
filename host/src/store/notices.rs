//! Notification targets and the record of what each person was told, as
//! stored. Who is told of what is `crate::notify` (through the one
//! authorization rule); this module records.

use super::sql::{Row, Sql, args};
use super::{Store, now_ms};
use serde::Serialize;
use std::collections::HashSet;

/// Where a person's notices go.
#[derive(Clone, Debug, Serialize)]
pub struct NoticeTarget {
    /// The person.
    pub user: String,
    /// The URL notices are POSTed to (checked by
    /// [`crate::notify::check_destination`] when set and at every send).
    pub url: String,
    /// When the person set it, in ms since the epoch.
    pub set_at: i64,
    /// When the last notice went there: the next waits a batch window after it.
    pub last_sent_at: Option<i64>,
}

/// What a notice tells of: the record of who was told of what is kept
/// per kind, since actions and approval requests are numbered apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Told {
    /// Actions waiting for a decision (`notices`).
    Actions,
    /// Workflow approval requests waiting for a decision
    /// (`request_notices`).
    Requests,
}

impl Told {
    /// `(table, column, the ids that still wait)`.
    pub(super) fn sql(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Told::Actions => (
                "notices",
                "action",
                "SELECT id FROM ledger WHERE kind = 'action' AND state = 'pending'",
            ),
            Told::Requests => (
                "request_notices",
                "request",
                "SELECT id FROM approval_requests WHERE state = 'pending'",
            ),
        }
    }
}

impl Store {
    /// Set (or with `None`, clear) where `user`'s notices go. False: no
    /// such person.
    pub fn set_notify_url(&self, user: &str, url: Option<&str>) -> anyhow::Result<bool> {
        self.write(|db| set_notify_url_in(db, user, url, now_ms()))
    }

    /// Everyone with a notification URL.
    pub fn notify_targets(&self) -> anyhow::Result<Vec<NoticeTarget>> {
        self.with(notify_targets_in)
    }

    /// One person's notification target.
    pub fn notify_target(&self, user: &str) -> anyhow::Result<Option<NoticeTarget>> {
        Ok(self.notify_targets()?.into_iter().find(|t| t.user == user))
    }

    /// The `what` (actions, or approval requests) `user` was already told
    /// of (and that still wait). The record of those that no longer wait
    /// is dropped first, so one that waits again later is told of again.
    pub fn noticed(&self, user: &str, what: Told) -> anyhow::Result<HashSet<i64>> {
        self.write(|db| noticed_in(db, user, what))
    }

    /// Claim the telling of `ids` (actions, or approval requests) to
    /// `user`: the ones no other process claimed first are recorded and
    /// returned, with the time `user` was last sent a notice. Only the
    /// claimer sends them.
    pub fn claim_notices(
        &self,
        user: &str,
        what: Told,
        ids: &[i64],
    ) -> anyhow::Result<(Vec<i64>, Option<i64>)> {
        self.write(|db| claim_notices_in(db, user, what, ids, now_ms()))
    }

    /// A claimed notice was not delivered: forget the claim, so the next
    /// pass tries again.
    pub fn release_notices(&self, user: &str, what: Told, ids: &[i64]) -> anyhow::Result<()> {
        self.write(|db| release_notices_in(db, user, what, ids))
    }

    /// Record that `user` was sent a notice now.
    pub fn notice_sent(&self, user: &str) -> anyhow::Result<()> {
        self.with(|db| notice_sent_in(db, user, now_ms()))
    }
}

// The statements, written once for both engines (`store::sql`).

fn set_notify_url_in(
    db: &dyn Sql,
    user: &str,
    url: Option<&str>,
    now: i64,
) -> anyhow::Result<bool> {
    let known = db
        .row("SELECT 1 FROM users WHERE name = ?1", args![user])?
        .is_some();
    if !known {
        return Ok(false);
    }
    match url {
        Some(url) => db.exec(
            "INSERT INTO notify_targets (\"user\", url, set_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (\"user\") DO UPDATE SET url = excluded.url, set_at = excluded.set_at",
            args![user, url, now],
        )?,
        None => db.exec(
            "DELETE FROM notify_targets WHERE \"user\" = ?1",
            args![user],
        )?,
    };
    Ok(true)
}

fn notify_targets_in(db: &dyn Sql) -> anyhow::Result<Vec<NoticeTarget>> {
    db.rows(
        "SELECT \"user\", url, set_at, last_sent_at FROM notify_targets ORDER BY \"user\"",
        args![],
    )?
    .iter()
    .map(|r| {
        Ok(NoticeTarget {
            user: r.get(0)?,
            url: r.get(1)?,
            set_at: r.get(2)?,
            last_sent_at: r.get(3)?,
        })
    })
    .collect()
}

fn noticed_in(db: &dyn Sql, user: &str, what: Told) -> anyhow::Result<HashSet<i64>> {
    let (table, column, waiting) = what.sql();
    db.exec(
        &format!("DELETE FROM {table} WHERE {column} NOT IN ({waiting})"),
        args![],
    )?;
    db.rows(
        &format!("SELECT {column} FROM {table} WHERE \"user\" = ?1"),
        args![user],
    )?
    .iter()
    .map(|r| r.get(0))
    .collect()
}

fn claim_notices_in(
    db: &dyn Sql,
    user: &str,
    what: Told,
    ids: &[i64],
    now: i64,
) -> anyhow::Result<(Vec<i64>, Option<i64>)> {
    let (table, column, _) = what.sql();
    let mut claimed = Vec::new();
    for id in ids {
        // The notice's key is (user, id): a second claimer's insert does
        // nothing, on either engine.
        let n = db.exec(
            &format!(
                "INSERT INTO {table} (\"user\", {column}, sent_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT DO NOTHING"
            ),
            args![user, id, now],
        )?;
        if n == 1 {
            claimed.push(*id);
        }
    }
    let last = db
        .row(
            "SELECT last_sent_at FROM notify_targets WHERE \"user\" = ?1",
            args![user],
        )?
        .map(|r: Row| r.get::<Option<i64>>(0))
        .transpose()?
        .flatten();
    Ok((claimed, last))
}

fn release_notices_in(db: &dyn Sql, user: &str, what: Told, ids: &[i64]) -> anyhow::Result<()> {
    let (table, column, _) = what.sql();
    for id in ids {
        db.exec(
            &format!("DELETE FROM {table} WHERE \"user\" = ?1 AND {column} = ?2"),
            args![user, id],
        )?;
    }
    Ok(())
}

fn notice_sent_in(db: &dyn Sql, user: &str, now: i64) -> anyhow::Result<()> {
    db.exec(
        "UPDATE notify_targets SET last_sent_at = ?2 WHERE \"user\" = ?1",
        args![user, now],
    )?;
    Ok(())
}

#[cfg(test)]
mod on_both_engines {
    use super::*;
    use crate::store::suite::{Backend, runtime};

    /// Several tellers race to tell one person of the same two actions:
    /// each action is claimed by exactly one of them, and once an action
    /// no longer waits its record is dropped. The same for an approval
    /// request, recorded apart.
    #[test]
    fn each_notice_is_claimed_once_and_forgotten_when_its_action_no_longer_waits() {
        runtime().block_on(async {
            for b in Backend::both().await {
                let e = b.name();
                let (first, second) = (b.pending().await, b.pending().await);
                b.run(|db| {
                    db.exec(
                        "INSERT INTO users (name, created_at) VALUES ('ana', 0)",
                        args![],
                    )
                })
                .await
                .expect("a person");
                let url = "http://127.0.0.1:9/notices";
                assert!(
                    b.run(move |db| set_notify_url_in(db, "ana", Some(url), 5))
                        .await
                        .expect("set"),
                    "{e}"
                );
                assert!(
                    !b.run(move |db| set_notify_url_in(db, "nobody", Some(url), 5))
                        .await
                        .expect("set"),
                    "{e}: a stranger's target is not kept"
                );
                let tellers: Vec<_> = (0..8)
                    .map(|_| {
                        let b = b.clone();
                        tokio::spawn(async move {
                            b.run(move |db| {
                                claim_notices_in(db, "ana", Told::Actions, &[first, second], 7)
                            })
                            .await
                        })
                    })
                    .collect();
                let mut told = Vec::new();
                for t in tellers {
                    let (claimed, last) = t.await.expect("joined").expect("claimed");
                    assert_eq!(last, None, "{e}: nothing was sent yet");
                    told.extend(claimed);
                }
                told.sort_unstable();
                assert_eq!(told, vec![first, second], "{e}: each told once");
                b.run(|db| notice_sent_in(db, "ana", 11))
                    .await
                    .expect("sent");
                let (again, last) = b
                    .run(move |db| claim_notices_in(db, "ana", Told::Actions, &[first], 12))
                    .await
                    .expect("claimed");
                assert_eq!((again, last), (vec![], Some(11)), "{e}");
                b.run(move |db| {
                    db.exec(
                        "UPDATE ledger SET state = 'rejected' WHERE id = ?1",
                        args![first],
                    )
                })
                .await
                .expect("decided");
                let noticed = b
                    .run(|db| noticed_in(db, "ana", Told::Actions))
                    .await
                    .expect("noticed");
                assert_eq!(noticed, HashSet::from([second]), "{e}");
                let targets = b.run(notify_targets_in).await.expect("targets");
                assert_eq!(targets.len(), 1, "{e}");
                assert_eq!(
                    (targets[0].url.as_str(), targets[0].last_sent_at),
                    (url, Some(11)),
                    "{e}"
                );
                // Approval requests are told of apart (their ids are
                // another sequence): claimed once, forgotten once decided.
                let request = b
                    .run(|db| {
                        let run: i64 = db
                            .row(
                                "INSERT INTO workflow_runs (workflow, version, initiator, chat, state, created_at, updated_at)
                                 VALUES ('w', 1, 'ana', 'c', 'waiting', 0, 0) RETURNING id",
                                args![],
                            )?
                            .ok_or_else(|| anyhow::anyhow!("no run"))?
                            .get(0)?;
                        db.row(
                            "INSERT INTO approval_requests (run, step, allowed, reason, state, created_at)
                             VALUES (?1, 's', '{}', 'r', 'pending', 0) RETURNING id",
                            args![run],
                        )?
                        .ok_or_else(|| anyhow::anyhow!("no request"))?
                        .get::<i64>(0)
                    })
                    .await
                    .expect("a request");
                let tellers: Vec<_> = (0..4)
                    .map(|_| {
                        let b = b.clone();
                        tokio::spawn(async move {
                            b.run(move |db| {
                                claim_notices_in(db, "ana", Told::Requests, &[request], 14)
                            })
                            .await
                        })
                    })
                    .collect();
                let mut told = Vec::new();
                for t in tellers {
                    told.extend(t.await.expect("joined").expect("claimed").0);
                }
                assert_eq!(told, vec![request], "{e}: told once");
                let noticed = b
                    .run(|db| noticed_in(db, "ana", Told::Requests))
                    .await
                    .expect("noticed");
                assert_eq!(noticed, HashSet::from([request]), "{e}");
                b.run(move |db| {
                    db.exec(
                        "UPDATE approval_requests SET state = 'expired' WHERE id = ?1",
                        args![request],
                    )
                })
                .await
                .expect("expired");
                let noticed = b
                    .run(|db| noticed_in(db, "ana", Told::Requests))
                    .await
                    .expect("noticed");
                assert!(noticed.is_empty(), "{e}: no longer waits");
                b.run(|db| set_notify_url_in(db, "ana", None, 13))
                    .await
                    .expect("cleared");
                assert!(
                    b.run(notify_targets_in).await.expect("targets").is_empty(),
                    "{e}"
                );
            }
        });
    }
}
