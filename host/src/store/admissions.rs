//! What this process last learned of its chats' admissions (SPEC A5, H3,
//! C2), kept with the commit mark of the file it holds at, so that the
//! next stage of a chat is admitted without asking the file while nothing
//! else was committed (issue 17: the admission statement, one read
//! transaction with seven searches, was an eighth of a durable stage).
//!
//! A stage's admission asks of its chat: is it latched, how many actions
//! hold it open, is one of its pending ones due to expire, what is the
//! policy epoch, might a rule cover the tag. Every one of those changes
//! only by a commit to the file, of this process or any other, and every
//! commit moves the file's commit mark ([`super::wal_index`]). So while
//! the mark is the one the answers were learned at, they are the answers
//! now. A stage's own commit changes exactly one of them, its chat's open
//! count, by one: it carries what is kept past itself when it was the
//! only commit between the marks before and after it. A read's plain
//! observation and a durability barrier change none of them, and carry
//! what is kept as it is ([`Admissions::unmoved`]).
//!
//! What is kept only ever admits, and only under the write lock: a stage
//! admitted from it takes the lock first (`BEGIN IMMEDIATE`), then checks
//! that the mark is still the one kept (no other writer can commit while
//! the lock is held), and otherwise asks the file as before. A refusal
//! (latched, full, the policy moved, no such chat) and an expiry due are
//! always decided by the file's own statement, in the transaction that
//! stages, so a stale answer can never let an action in, and never keeps
//! one out.
//!
//! Owns: the kept answers. Touches no row and holds no lock of the file;
//! the statements stay in [`super::stages`].

use super::actions::{NewAction, action_tag};
use super::stages::RuleCoverage;
use super::wal_index::{CommitMark, WalIndex};
use super::{MAX_OPEN_ACTIONS, now_ms};
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

/// The admissions known at one mark.
struct Known {
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

/// The kept admissions of one home (see the module).
pub(crate) struct Admissions {
    /// The file's WAL-index header; `None` where it cannot be read, and
    /// then nothing is ever kept.
    wal: Option<Arc<WalIndex>>,
    kept: Mutex<Option<(CommitMark, Known)>>,
}

impl Admissions {
    /// Kept admissions of the file whose WAL-index header is `wal`.
    pub(crate) fn watching(wal: Option<Arc<WalIndex>>) -> Admissions {
        Admissions {
            wal,
            kept: Mutex::default(),
        }
    }

    /// The file's commit mark now, if it can be read.
    pub(crate) fn mark(&self) -> Option<CommitMark> {
        self.wal.as_ref().and_then(|w| w.mark())
    }

    fn kept(&self) -> MutexGuard<'_, Option<(CommitMark, Known)>> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
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

    /// A commit made after `before` changed nothing an admission asks
    /// about (a read's observation of data that latches nothing, a
    /// durability barrier): if it was the only one since `before`, what
    /// was kept at `before` stands past it. The caller made it outside any
    /// transaction of its own, or in one it began and committed.
    pub(crate) fn unmoved(&self, before: CommitMark) {
        let Some(after) = self.mark().filter(|m| m.follows(&before)) else {
            return;
        };
        if let Some((at, _)) = self.kept().as_mut()
            && *at == before
        {
            *at = after;
        }
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
            (_, Some(found)) => Known {
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
