//! Notification targets and the record of what each person was told, as
//! stored. Who is told of what is `crate::notify` (through the one
//! authorization rule); this module records.

use super::{Store, now_ms};
use rusqlite::{OptionalExtension as _, TransactionBehavior, params};
use serde::Serialize;
use std::collections::HashSet;

/// Where a person's notices go.
#[derive(Clone, Debug, Serialize)]
pub struct NoticeTarget {
    /// The person.
    pub user: String,
    /// The URL notices are POSTed to (checked by [`crate::notify::check_url`]).
    pub url: String,
    /// When the person set it, in ms since the epoch.
    pub set_at: i64,
    /// When the last notice went there: the next waits a batch window after it.
    pub last_sent_at: Option<i64>,
}

impl Store {
    /// Set (or with `None`, clear) where `user`'s notices go. False: no
    /// such person.
    pub fn set_notify_url(&self, user: &str, url: Option<&str>) -> anyhow::Result<bool> {
        let conn = self.lock();
        let known: bool = conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM users WHERE name = ?1)",
            [user],
            |r| r.get(0),
        )?;
        if !known {
            return Ok(false);
        }
        match url {
            Some(url) => conn.execute(
                "INSERT INTO notify_targets (user, url, set_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (user) DO UPDATE SET url = excluded.url, set_at = excluded.set_at",
                params![user, url, now_ms()],
            )?,
            None => conn.execute("DELETE FROM notify_targets WHERE user = ?1", [user])?,
        };
        Ok(true)
    }

    /// Everyone with a notification URL.
    pub fn notify_targets(&self) -> anyhow::Result<Vec<NoticeTarget>> {
        let conn = self.lock();
        let mut st = conn.prepare_cached(
            "SELECT user, url, set_at, last_sent_at FROM notify_targets ORDER BY user",
        )?;
        let rows = st.query_map([], |r| {
            Ok(NoticeTarget {
                user: r.get(0)?,
                url: r.get(1)?,
                set_at: r.get(2)?,
                last_sent_at: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// One person's notification target.
    pub fn notify_target(&self, user: &str) -> anyhow::Result<Option<NoticeTarget>> {
        Ok(self.notify_targets()?.into_iter().find(|t| t.user == user))
    }

    /// The actions `user` was already told of (and that still wait). The
    /// record of actions that no longer wait is dropped first, so an
    /// action that waits again later is told of again.
    pub fn noticed(&self, user: &str) -> anyhow::Result<HashSet<i64>> {
        let conn = self.lock();
        conn.execute(
            "DELETE FROM notices WHERE action NOT IN
               (SELECT id FROM ledger WHERE kind = 'action' AND state = 'pending')",
            [],
        )?;
        let mut st = conn.prepare_cached("SELECT action FROM notices WHERE user = ?1")?;
        let rows = st.query_map([user], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Claim the telling of `actions` to `user`: the ones no other process
    /// claimed first are recorded and returned, with the time `user` was
    /// last sent a notice. Only the claimer sends them.
    pub fn claim_notices(
        &self,
        user: &str,
        actions: &[i64],
    ) -> anyhow::Result<(Vec<i64>, Option<i64>)> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = now_ms();
        let mut claimed = Vec::new();
        for id in actions {
            let n = tx.execute(
                "INSERT OR IGNORE INTO notices (user, action, sent_at) VALUES (?1, ?2, ?3)",
                params![user, id, now],
            )?;
            if n == 1 {
                claimed.push(*id);
            }
        }
        let last: Option<i64> = tx
            .query_row(
                "SELECT last_sent_at FROM notify_targets WHERE user = ?1",
                [user],
                |r| r.get(0),
            )
            .optional()?
            .flatten();
        tx.commit()?;
        Ok((claimed, last))
    }

    /// A claimed notice was not delivered: forget the claim, so the next
    /// pass tries again.
    pub fn release_notices(&self, user: &str, actions: &[i64]) -> anyhow::Result<()> {
        let conn = self.lock();
        for id in actions {
            conn.execute(
                "DELETE FROM notices WHERE user = ?1 AND action = ?2",
                params![user, id],
            )?;
        }
        Ok(())
    }

    /// Record that `user` was sent a notice now.
    pub fn notice_sent(&self, user: &str) -> anyhow::Result<()> {
        self.lock().execute(
            "UPDATE notify_targets SET last_sent_at = ?2 WHERE user = ?1",
            params![user, now_ms()],
        )?;
        Ok(())
    }
}
