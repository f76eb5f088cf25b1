//! What this process knows of the home's file at its commit mark: the
//! policy epoch, and what its stages learned of their chats' admissions
//! (SPEC A5, H3, C2, K3). Kept with the mark it was learned at, so that a
//! kept resolution is checked, and the next stage of a chat admitted,
//! without asking the file while nothing else was committed (the epoch's
//! read transaction was a fifth of a read, the admission statement, with
//! seven searches, an eighth of a durable stage).
//!
//! Each of these changes only by a commit to the file, of this process or
//! any other, and every commit moves the file's commit mark
//! ([`super::wal_index`]). So while the mark is the one they were learned
//! at, they are the answers now. Two kinds of commit carry them past
//! themselves, when they were the only commit between the marks before
//! and after: one that changes none of them ([`Known::carried`]: a read's
//! plain observation, a durability barrier), and a stage, which changes
//! exactly its chat's open count, by one ([`Known::staged`]).
//!
//! A stage's admission asks of its chat: is it latched, how many actions
//! hold it open, is one of its pending ones due to expire, what is the
//! policy epoch, might a rule cover the tag. What is kept of that only
//! ever admits, and only under the write lock: a stage admitted from it
//! takes the lock first (`BEGIN IMMEDIATE`), then checks that the mark is
//! still the one kept (no other writer can commit while the lock is held),
//! and otherwise asks the file as before. A refusal (latched, full, the
//! policy moved, no such chat) and an expiry due are always decided by the
//! file's own statement, in the transaction that stages, so a stale answer
//! can never let an action in, and never keeps one out.
//!
//! Owns: what is kept, and the one read of the epoch it keeps. Touches no
//! other row and holds no lock of the file; the statements of a stage stay
//! in [`super::stages`], those of a resolution in [`super::dispatch`].

use super::actions::{NewAction, action_tag};
use super::stages::RuleCoverage;
use super::wal_index::{CommitMark, WalIndex};
use super::{MAX_OPEN_ACTIONS, now_ms};
use rusqlite::Connection;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// How many chats are kept before what is kept starts over.
const KEPT_CHATS: usize = 4096;
/// How many tags are kept per chat before its tags start over.
const KEPT_TAGS: usize = 256;

/// What one admission found of its chat in the file, on a snapshot no
/// older than the mark read before it ([`super::stages::admit`]); only an
/// admission that admitted, and marked nothing expired, finds this.
#[derive(Clone, Debug)]
pub(crate) struct Found {
    /// The policy epoch.
    pub(crate) epoch: i64,
    /// The chat's pending (none of them due) and applying actions.
    pub(crate) open: i64,
    /// When its oldest pending action was staged, if it has one.
    pub(crate) oldest: Option<i64>,
    /// Its expiry, in milliseconds (SPEC H3).
    pub(crate) expire_after: i64,
    /// Whether a rule might cover the tag staged.
    pub(crate) may_cover: bool,
}

/// What is known at one mark.
struct AtMark {
    epoch: i64,
    chats: HashMap<String, Chat>,
}

/// One chat's admission as known.
struct Chat {
    /// Its pending and applying actions.
    open: i64,
    /// When its oldest pending action falls due (`i64::MAX`: none is
    /// pending). From then on the file's statement marks it expired.
    due_at: i64,
    /// Its expiry, in milliseconds.
    expire_after: i64,
    /// Per tag asked about: whether a rule might cover it.
    rules: HashMap<String, bool>,
}

/// What this process knows of one database at its commit mark (see the
/// module). On a shared database, or where the home's WAL-index header
/// cannot be read, there is no mark: nothing is kept, and every question
/// goes to the file.
#[derive(Default)]
pub(crate) struct Known {
    /// The file's WAL-index header.
    wal: Option<Arc<WalIndex>>,
    kept: Mutex<Option<(CommitMark, AtMark)>>,
}

/// The policy epoch as `conn` sees it now.
pub(super) fn epoch_in(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached("SELECT n FROM policy_epoch WHERE id = 1")?
        .query_row([], |r| r.get(0))
}

impl Known {
    /// What is known of the file whose WAL-index header is `wal`.
    pub(crate) fn watching(wal: Option<Arc<WalIndex>>) -> Known {
        Known {
            wal,
            kept: Mutex::default(),
        }
    }

    /// The file's commit mark now, if it can be read.
    pub(crate) fn mark(&self) -> Option<CommitMark> {
        self.wal.as_ref().and_then(|w| w.mark())
    }

    fn kept(&self) -> MutexGuard<'_, Option<(CommitMark, AtMark)>> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The policy epoch kept at the file's mark now, if one is.
    pub(crate) fn epoch(&self) -> Option<i64> {
        let mark = self.mark()?;
        let kept = self.kept();
        kept.as_ref()
            .filter(|(at, _)| *at == mark)
            .map(|(_, known)| known.epoch)
    }

    /// The policy epoch now: as kept if the file's mark has not moved
    /// since, else read on `conn` (and kept, if no commit came while it
    /// was read and `conn` read it in a transaction of its own, not on an
    /// older snapshot of one left open).
    pub(crate) fn epoch_now(&self, conn: &Connection) -> rusqlite::Result<i64> {
        if let Some(epoch) = self.epoch() {
            return Ok(epoch);
        }
        let before = self.mark();
        let epoch = epoch_in(conn)?;
        if let Some(before) = before
            && conn.is_autocommit()
            && self.mark() == Some(before)
        {
            let mut kept = self.kept();
            if kept.as_ref().is_none_or(|(at, _)| *at != before) {
                *kept = Some((
                    before,
                    AtMark {
                        epoch,
                        chats: HashMap::new(),
                    },
                ));
            }
        }
        Ok(epoch)
    }

    /// Run `write` on `conn`, outside any transaction of the caller's: a
    /// commit (or one transaction it begins and commits) that changes
    /// nothing kept here (a read's observation of data that latches
    /// nothing, a durability barrier). What was kept just before stands
    /// past it if it was the only commit meanwhile: exactly one came
    /// between the marks before and after, and `conn` was outside any
    /// transaction before and after, so that commit was this one.
    pub(crate) fn carried<T>(
        &self,
        conn: &mut Connection,
        write: impl FnOnce(&mut Connection) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let before = self.mark().filter(|_| conn.is_autocommit());
        let made = write(conn)?;
        if let (Some(before), Some(after)) = (before, self.mark())
            && after.follows(&before)
            && conn.is_autocommit()
            && let Some((at, _)) = self.kept().as_mut()
            && *at == before
        {
            *at = after;
        }
        Ok(made)
    }

    /// If what is kept at the file's mark now admits `a`, that mark and
    /// what the stage finds of the rules; the caller must still see the
    /// same mark once it holds the write lock. `None` whenever anything is
    /// unknown or would refuse: then the file decides.
    pub(crate) fn admits(&self, a: &NewAction) -> Option<(CommitMark, RuleCoverage)> {
        let mark = self.mark()?;
        let kept = self.kept();
        let (at, known) = kept.as_ref()?;
        if *at != mark || a.resolved_at.is_some_and(|e| e != known.epoch) {
            return None;
        }
        let chat = known.chats.get(&a.chat)?;
        if chat.open >= MAX_OPEN_ACTIONS || now_ms() >= chat.due_at {
            return None;
        }
        let covered = *chat.rules.get(&action_tag(&a.gatekeeper, &a.tool))?;
        Some((
            mark,
            if covered {
                RuleCoverage::MayCover
            } else {
                RuleCoverage::NoRule
            },
        ))
    }

    /// `a` was staged, no earlier than `since`, by a commit made after the
    /// mark `before`: with what its admission `found` in the file, or
    /// (`None`) admitted from what was kept at `before`. If that commit
    /// was the only one since `before` (the mark now follows it), what is
    /// kept stands past it, with the chat holding one more open action.
    pub(crate) fn staged(
        &self,
        before: CommitMark,
        found: Option<&Found>,
        a: &NewAction,
        since: i64,
    ) {
        let Some(after) = self.mark().filter(|m| m.follows(&before)) else {
            return;
        };
        let mut kept = self.kept();
        let mut known = match (kept.take(), found) {
            (Some((at, known)), _) if at == before => known,
            (_, Some(found)) => AtMark {
                epoch: found.epoch,
                chats: HashMap::new(),
            },
            (_, None) => return,
        };
        if let Some(found) = found {
            if known.chats.len() >= KEPT_CHATS {
                known.chats.clear();
            }
            let chat = known.chats.entry(a.chat.clone()).or_insert_with(|| Chat {
                open: 0,
                due_at: i64::MAX,
                expire_after: found.expire_after,
                rules: HashMap::new(),
            });
            chat.open = found.open;
            chat.expire_after = found.expire_after;
            chat.due_at = found
                .oldest
                .map_or(i64::MAX, |t| t.saturating_add(found.expire_after));
            if chat.rules.len() >= KEPT_TAGS {
                chat.rules.clear();
            }
            chat.rules
                .insert(action_tag(&a.gatekeeper, &a.tool), found.may_cover);
        }
        let Some(chat) = known.chats.get_mut(&a.chat) else {
            return;
        };
        chat.open += 1;
        chat.due_at = chat.due_at.min(since.saturating_add(chat.expire_after));
        *kept = Some((after, known));
    }
}
