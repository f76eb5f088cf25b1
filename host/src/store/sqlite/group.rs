//! The home's group commit: concurrent stages queue, and one committer
//! at a time takes the whole queue in one durable transaction, so many
//! stages share one fsync of the log.
//!
//! Owns the staging queue, who commits it and when. It may not decide
//! whether a stage is admitted: that is [`stages`](crate::store::stages),
//! asked inside each transaction.

use super::Begun;
use crate::store::stages::{self, StagedAction};
use crate::store::{NewAction, StageError, Store};
use rusqlite::{Connection, TransactionBehavior};

/// What waits for the next group commit ([`Store::stage`]): a stage, or
/// only the fsync (`action` is `None`, [`Store::sync`]).
pub(super) struct QueuedStage {
    action: Option<NewAction>,
    /// The stage's answer; `None` for a barrier (only the fsync).
    answer: tokio::sync::oneshot::Sender<Result<Option<StagedAction>, StageError>>,
}

/// The group commit's queue, and whether a committer is draining it.
#[derive(Default)]
pub(crate) struct StagingQueue {
    waiting: Vec<QueuedStage>,
    committing: bool,
}

fn lock_queue(q: &std::sync::Mutex<StagingQueue>) -> std::sync::MutexGuard<'_, StagingQueue> {
    q.lock().unwrap_or_else(|e| e.into_inner())
}

/// Commit `batch` in one durable transaction and answer each stage. A
/// commit that fails answers every stage of the batch with its error:
/// none of them was stored. `conn` is at `synchronous=FULL`
/// ([`Home::lock_durable`](super::Home::lock_durable)). A batch of one
/// stage is staged by [`stage_alone`]; a larger one as follows.
///
/// The transaction begins deferred: admission reads the chat on the
/// snapshot it opens, and only a stage it admits takes the database's write
/// lock, to insert. So a stage refused for a full or latched chat does not
/// take the write lock (a gadget hammering a full chat starves no approver
/// in another process), and no read ahead of the commit is needed for that.
/// If another process wrote since the snapshot, or holds the lock, taking
/// it fails at once (SQLite will not wait with a snapshot open), and the
/// batch runs again in a transaction that begins by taking the lock,
/// waiting for it: what admission read always still holds when the stage
/// commits. Only a stage admitted on the snapshot comes to that second try,
/// so a refusal takes the lock only when the chat filled in the moment
/// between the two.
fn commit_group(conn: &mut Connection, batch: Vec<QueuedStage>) {
    let committed = match batch.as_slice() {
        [
            QueuedStage {
                action: Some(action),
                ..
            },
        ] => stage_alone(conn, action).map(|staged| vec![staged.map(Some)]),
        _ => snapshot_first(conn, |conn, begin| stage_batch(conn, &batch, begin)),
    };
    match committed {
        Ok(answers) => {
            for (q, a) in batch.into_iter().zip(answers) {
                let _ = q.answer.send(a);
            }
        }
        Err(e) => {
            let said = format!("{e:#}");
            for q in batch {
                let _ = q.answer.send(Err(StageError::Store(anyhow::anyhow!(
                    "cannot stage in the state database: {said}"
                ))));
            }
        }
    }
}

/// Stage `a` alone in a transaction of its own on the writer `conn`,
/// admitted as [`commit_group`] says: its answer, a refusal, or the error
/// that undid it (the database busy, to be tried again, among them). The
/// one way both a group commit of one stage and a turn's in-place stage
/// stage on the home's file; no savepoint, which a lone stage does not
/// need.
pub(in crate::store) fn stage_alone(
    conn: &mut Connection,
    a: &NewAction,
) -> anyhow::Result<Result<StagedAction, StageError>> {
    snapshot_first(conn, |conn, begin| {
        let tx = Begun::on(conn, begin)?;
        match stages::stage(&*tx, a) {
            Ok(staged) => {
                tx.commit()?;
                Ok(Ok(staged))
            }
            // The database failing (or busy, to be tried again) is an
            // error of the trip, not a refusal.
            Err(StageError::Store(e)) => Err(e),
            Err(refused) => Ok(Err(refused)),
        }
    })
}

/// Run a staging transaction `attempt` begun deferred, so that admission
/// reads on a snapshot and only an insert takes the write lock; if taking
/// it failed busy (another process wrote since the snapshot, or holds the
/// lock), run it once more begun `IMMEDIATE`, waiting for the lock. The
/// one place both ways of staging on the home's file take this rule from
/// (see [`commit_group`]).
fn snapshot_first<T>(
    conn: &mut Connection,
    attempt: impl Fn(&mut Connection, TransactionBehavior) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    match attempt(conn, TransactionBehavior::Deferred) {
        Err(e) if super::is_busy(&e) => attempt(conn, TransactionBehavior::Immediate),
        tried => tried,
    }
}

/// One attempt at [`commit_group`]'s transaction, begun as `begin` says;
/// each stage's answer, or the error that undid the whole attempt (the
/// database busy, to be tried again, among them).
fn stage_batch(
    conn: &mut Connection,
    batch: &[QueuedStage],
    begin: TransactionBehavior,
) -> anyhow::Result<Vec<Result<Option<StagedAction>, StageError>>> {
    let mut answers = Vec::with_capacity(batch.len());
    let barrier = batch.iter().any(|q| q.action.is_none());
    let mut tx = conn.transaction_with_behavior(begin)?;
    let mut wrote = false;
    for q in batch {
        let Some(action) = &q.action else {
            answers.push(Ok(None));
            continue;
        };
        // Each in a savepoint of its own: a refusal undoes only its stage.
        // (A lone stage is staged by `stage_alone`.)
        let sp = tx.savepoint()?;
        let staged = stages::stage(&sp, action);
        if staged.is_ok() {
            sp.commit()?;
        }
        match staged.map(Some) {
            Err(StageError::Store(e)) if super::is_busy(&e) => return Err(e),
            staged => {
                wrote |= staged.is_ok();
                answers.push(staged);
            }
        }
    }
    if !wrote && !barrier {
        tx.rollback()?;
        return Ok(answers);
    }
    if !wrote {
        // A commit that wrote nothing is not synced: write the mark,
        // so that the fsync a barrier waits for happens.
        tx.prepare_cached("UPDATE durability_mark SET n = n + 1 WHERE id = 1")?
            .execute([])?;
    }
    tx.commit()?;
    Ok(answers)
}

impl Store {
    /// Queue `stage` (or, with `None`, only the fsync) and wait for the
    /// group commit that takes it. One committer at a time drains the
    /// queue, a whole batch per transaction, until it finds it empty:
    /// concurrent stagers wait on the executor, not each on a thread of
    /// its own queued for the connection.
    ///
    /// The stage that finds no committer commits its own batch on its own
    /// thread, handed over to blocking work (`block_in_place`), and leaves
    /// what queued meanwhile to a committer on a blocking thread. Why: a
    /// lone stage then costs one transaction, not also a hop to a pooled
    /// thread and a wake-up back (so a durable stage costs at most 1.2× a
    /// bare fsynced commit), and no stager commits others' batches for long.
    pub(in crate::store) async fn join_group(
        &self,
        stage: Option<NewAction>,
    ) -> Result<Option<StagedAction>, StageError> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let start = {
            let mut queue = lock_queue(&self.home()?.staging);
            queue.waiting.push(QueuedStage {
                action: stage,
                answer,
            });
            !std::mem::replace(&mut queue.committing, true)
        };
        if start {
            let store = self.clone();
            match tokio::runtime::Handle::current().runtime_flavor() {
                // Only a multi-threaded executor can hand this thread over.
                tokio::runtime::RuntimeFlavor::CurrentThread => {
                    tokio::task::spawn_blocking(move || store.commit_queued(false));
                }
                _ => tokio::task::block_in_place(move || store.commit_queued(true)),
            }
        }
        answered.await.unwrap_or_else(|_| {
            Err(StageError::Store(anyhow::anyhow!(
                "the staging commit stopped before it answered; nothing was staged"
            )))
        })
    }

    /// The committer: commit what waits, batch after batch, until nothing
    /// does; `in_place`, one batch only, then hand what waits to a
    /// committer on a blocking thread. The flag is cleared under the
    /// queue's lock, so a stage queued after the last batch starts a
    /// committer of its own.
    fn commit_queued(&self, in_place: bool) {
        /// Clears the flag if the committer unwinds, so that the next
        /// stage starts another instead of waiting for this one forever
        /// (the stages it held are answered: their senders are dropped).
        struct Unwinding<'a>(&'a std::sync::Mutex<StagingQueue>);
        impl Drop for Unwinding<'_> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    lock_queue(self.0).committing = false;
                }
            }
        }
        let Ok(home) = self.home() else {
            return;
        };
        let _unwinding = Unwinding(&home.staging);
        let mut batches = 0;
        loop {
            let mut conn = match home.lock_durable() {
                Ok(conn) => conn,
                Err(e) => {
                    let said = format!("{e:#}");
                    let mut queue = lock_queue(&home.staging);
                    queue.committing = false;
                    for q in std::mem::take(&mut queue.waiting) {
                        let _ = q.answer.send(Err(StageError::Store(anyhow::anyhow!(
                            "cannot stage in the state database: {said}"
                        ))));
                    }
                    return;
                }
            };
            let batch = {
                let mut queue = lock_queue(&home.staging);
                if queue.waiting.is_empty() {
                    queue.committing = false;
                    return;
                }
                if in_place && batches == 1 {
                    let store = self.clone();
                    tokio::task::spawn_blocking(move || store.commit_queued(false));
                    return;
                }
                std::mem::take(&mut queue.waiting)
            };
            commit_group(&mut conn, batch);
            batches += 1;
        }
    }
}
