//! The stage's statements (SPEC A3, A5, H3, P5): admission with
//! the per-chat cap inside the staging transaction, the insert of a
//! pending action, expiry and retention, written once over [`Sql`] for
//! both engines.
//!
//! The cap holds inside the transaction on both. On SQLite, a staging
//! transaction admits on its snapshot and takes the write lock only to
//! insert, which fails if anyone wrote since the snapshot (then the store
//! runs it again holding the lock from its start; see
//! `actions::commit_group`): what admission counted still holds at the
//! commit, and a refusal never needed the lock. On PostgreSQL admission
//! first locks the chat's row (`FOR UPDATE`), so two stagers of one chat
//! count and insert one after the other, while stagers of different chats
//! never wait for each other. A host on a shared database stages in one
//! statement instead, a server-side function that spells these rules for
//! PostgreSQL (`postgres::trips::stage`, schema 8); the suites below stage
//! through the store on both engines and hold it to the same answers. It
//! may not decide what is staged: the kernel classified and checked it
//! before.

use super::action::{NewAction, StageError, UNKEPT_ARGS, action_tag, args_digest};
use super::sql::{Engine, Sql, args};
use super::{DEFAULT_EXPIRY_MS, MAX_OPEN_ACTIONS, RETAINED_FINISHED, now_ms};

/// Refuse staging `a` if its chat is missing, latched or full, or if the
/// policy epoch is no longer the one it was checked under
/// ([`NewAction::resolved_at`], when it says one); else hold the chat's
/// admission until the transaction ends (see the module). One statement
/// asks all four, and whether anything waits to be marked expired (after,
/// on PostgreSQL, the row lock): a stage is the transaction a gadget
/// waits for the fsync of, and each statement more is time under the
/// write lock. The epoch is asked first: every other answer is given
/// under the policy the stage was checked on.
pub(crate) fn admit(db: &dyn Sql, a: &NewAction) -> Result<RuleCoverage, StageError> {
    let chat = a.chat.as_str();
    if db.engine() == Engine::Postgres {
        // The lock first, in a statement of its own: a statement that
        // waited for a row lock still counts from the snapshot it took
        // before it waited, and would miss what the stager before it
        // inserted.
        db.row(
            "SELECT 1 FROM chats WHERE name = ?1 FOR UPDATE",
            args![chat],
        )?;
    }
    let tag = action_tag(&a.gatekeeper, &a.tool);
    let Some(row) = db.row(ADMISSION, args![chat, tag, DEFAULT_EXPIRY_MS, now_ms()])? else {
        return Err(StageError::NoChat(chat.to_owned()));
    };
    let epoch: i64 = row.get(3)?;
    if a.resolved_at.is_some_and(|at| at != epoch) {
        return Err(StageError::PolicyMoved);
    }
    if row.get::<i64>(0)? == 1 {
        return Err(StageError::LockedDown(chat.to_owned()));
    }
    // What expired is closed (H3): mark it, so the gadget sees it too.
    // The count already leaves it out.
    let due = row.get::<i64>(2)? == 1;
    if due {
        expire_due(db, Some(chat))?;
    }
    let open: i64 = row.get(1)?;
    if open >= MAX_OPEN_ACTIONS {
        return Err(StageError::TooManyOpen(open));
    }
    Ok(match db.engine() {
        // A rule committed after the statement began, before the stage
        // commits, is not seen (READ COMMITTED): ask after the commit.
        Engine::Postgres => RuleCoverage::Unknown,
        Engine::Sqlite if row.get::<i64>(4)? == 1 => RuleCoverage::MayCover,
        Engine::Sqlite => RuleCoverage::NoRule,
    })
}

/// An action staged pending: its id in the ledger, and whether a rule
/// might auto-approve it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StagedAction {
    /// Its id, in the ledger's one sequence.
    pub id: i64,
    /// What its staging transaction found of the rules.
    pub rules: RuleCoverage,
}

/// The whole of a stage inside its transaction: admit `a` ([`admit`]),
/// then insert it pending.
pub(crate) fn stage(db: &dyn Sql, a: &NewAction) -> Result<StagedAction, StageError> {
    let rules = admit(db, a)?;
    let id = insert(db, a, None, None)?;
    Ok(StagedAction { id, rules })
}

/// Whether a rule might auto-approve the action just staged (key two's
/// candidates; the claim checks both keys again), as its staging
/// transaction found the rules. Why ask there: a drain takes the writer,
/// and only a stage some rule might cover can have become drainable by
/// its own stage (`Kernel::drain_if_covered`); asked in the transaction
/// that stages it, the answer costs one index probe instead of a read of
/// its own beside the gadget.
///
/// On SQLite the answer holds at the commit: a staging transaction
/// commits on the snapshot it admitted on (see the module), so a rule
/// committed before the stage is seen, and one committed after it drains
/// every chat itself, this action included. On PostgreSQL it does not
/// (see [`admit`]), so there the answer is [`RuleCoverage::Unknown`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleCoverage {
    /// No rule names the action's tag in its chat: no drain is owed.
    NoRule,
    /// Some rule might: drain the chat.
    MayCover,
    /// Not known at the commit: ask after it.
    Unknown,
}

/// [`admit`]'s question: `?1` the chat, `?2` the action's tag, `?3` the
/// default expiry, `?4` now; the chat's latch, its open actions
/// (pending or applying, not past expiry), whether any of its pending ones is due to be marked
/// expired ([`DUE_IN_CHAT`]), the policy epoch, and whether a rule might
/// cover the tag there ([`RuleCoverage`]). No row: no such chat.
/// Answered from `ledger_actions_by_state` alone
/// (schemas 8 and 10), and only from the entries it counts: one search per
/// state and chat, never an `OR` across the two states, which would step
/// over every finished action the chat retains (up to
/// [`RETAINED_FINISHED`]). The chat's pending entries are stepped over
/// once, for what is live, what is due and the oldest: two searches of them
/// were an eighth of a stage's own work. No `kind = 'action'`: only an
/// action has a state (schema 9 checks it on both engines), and testing it
/// read one more column of every entry.
const ADMISSION: &str = concat!(
    "SELECT c.latched,
           p.n - p.due + (SELECT count(*) FROM ledger
             WHERE chat = ?1 AND state = 'applying'),
           CASE WHEN p.due > 0 THEN 1 ELSE 0 END,
           (SELECT n FROM policy_epoch WHERE id = 1),
           CASE WHEN ",
    super::rules::may_cover_sql!(),
    " THEN 1 ELSE 0 END
         FROM chats c,
           (SELECT count(*) AS n,
                   count(*) FILTER (WHERE created_at <= ?4 - COALESCE(
                     (SELECT expire_after_ms FROM chats WHERE name = ?1), ?3)) AS due
              FROM ledger
             WHERE chat = ?1 AND state = 'pending') p
         WHERE c.name = ?1"
);

/// How many actions of `chat` are pending or applying (the cap counts
/// these; SPEC A5, per chat so that one chat never blocks another). A
/// pending action past its chat's expiry is closed (H3) even before a
/// sweep marks it, so the count is right on a read-only connection too.
/// Counted by [`ADMISSION`], the one statement that spells the rule (and
/// the shared database's staging function, schema 8, which the suites
/// hold to it).
#[cfg(test)]
pub(crate) fn open_count(db: &dyn Sql, chat: &str) -> anyhow::Result<i64> {
    db.row(ADMISSION, args![chat, "", DEFAULT_EXPIRY_MS, now_ms()])?
        .map_or(Ok(0), |r| r.get(1))
}

/// The pending actions of chat `?1` past its expiry (`?2` the default,
/// `?3` now), found in `ledger_actions_by_state` alone (schemas 8 and
/// 10), among the chat's pending ones.
const DUE_IN_CHAT: &str = "SELECT id, chat FROM ledger
     WHERE chat = ?1 AND kind = 'action' AND state = 'pending'
       AND created_at <= ?3 - COALESCE(
             (SELECT expire_after_ms FROM chats WHERE chats.name = ?1), ?2)";

/// How long actions of `chat` may wait for a decision (SPEC H3), in
/// milliseconds: the chat's own setting, else [`DEFAULT_EXPIRY_MS`].
pub(crate) fn expiry(db: &dyn Sql, chat: &str) -> anyhow::Result<i64> {
    let own: Option<i64> = db
        .row(
            "SELECT expire_after_ms FROM chats WHERE name = ?1",
            args![chat],
        )?
        .map(|r| r.get(0))
        .transpose()?
        .flatten();
    Ok(own.unwrap_or(DEFAULT_EXPIRY_MS))
}

/// Mark the pending action `id` expired: it will never be sent (H3).
pub(crate) fn expire(db: &dyn Sql, id: i64) -> anyhow::Result<u64> {
    db.exec(
        "UPDATE ledger SET state = 'expired', finished_at = ?2, claim_owner = NULL
         WHERE id = ?1 AND kind = 'action' AND state = 'pending'",
        args![id, now_ms()],
    )
}

/// Mark every pending action of `chat` (`None`: of every chat) that is past
/// its chat's expiry `expired` (SPEC H3), then keep the chats' retention.
/// Only looks when nothing is due, so a sweep takes the write lock only
/// when it has something to write.
pub(crate) fn expire_due(db: &dyn Sql, chat: Option<&str>) -> anyhow::Result<u64> {
    let now = now_ms();
    // Two statements, not one with `?1 IS NULL OR l.chat = ?1`: that `OR`
    // keeps SQLite from searching by chat, and every stage would scan the
    // pending rows of the whole deployment (67 ms per stage with 1,000
    // chats × 50 pending).
    let due = match chat {
        Some(chat) => db.rows(DUE_IN_CHAT, args![chat, DEFAULT_EXPIRY_MS, now])?,
        None => db.rows(
            "SELECT l.id, l.chat FROM ledger l LEFT JOIN chats c ON c.name = l.chat
             WHERE l.kind = 'action' AND l.state = 'pending'
               AND l.created_at + COALESCE(c.expire_after_ms, ?1) <= ?2",
            args![DEFAULT_EXPIRY_MS, now],
        )?,
    };
    let mut expired = 0;
    let mut chats = std::collections::BTreeSet::new();
    for row in due {
        expired += expire(db, row.get(0)?)?;
        chats.insert(row.get::<String>(1)?);
    }
    for chat in chats {
        prune(db, &chat)?;
    }
    Ok(expired)
}

/// Keep the newest finished actions of `chat`; never prune open ones
/// (SPEC P5). The decision history is kept regardless.
pub(crate) fn prune(db: &dyn Sql, chat: &str) -> anyhow::Result<u64> {
    db.exec(
        "DELETE FROM ledger WHERE chat = ?1 AND kind = 'action'
           AND state IN ('applied', 'failed', 'rejected', 'expired')
           AND id NOT IN (SELECT id FROM ledger WHERE chat = ?1 AND kind = 'action'
                            AND state IN ('applied', 'failed', 'rejected', 'expired')
                          ORDER BY id DESC LIMIT ?2)",
        args![chat, RETAINED_FINISHED],
    )
}

/// Insert `a` as a pending action with its checked arguments; its id. A
/// covered workflow call (`logical_key`) keeps a digest of its arguments
/// only (G7); a revert names the action it undoes.
pub(crate) fn insert(
    db: &dyn Sql,
    a: &NewAction,
    logical_key: Option<&str>,
    reverts: Option<i64>,
) -> Result<i64, StageError> {
    let facts = serde_json::to_string(&a.facts).map_err(anyhow::Error::from)?;
    let args = a.args.as_str();
    let digest = args_digest(args);
    let kept = match logical_key {
        Some(_) => UNKEPT_ARGS,
        None => args,
    };
    // `Sql::insert`, not `RETURNING id`: SQLite gathers what a RETURNING
    // clause returns in a temporary b-tree, opened and freed in every
    // stage (PostgreSQL gets its RETURNING from `Sql::insert`).
    let id = db.insert(
        "INSERT INTO ledger (chat, kind, caller, person, gadget, intro_key, gatekeeper, tool,
           classified_by, trust, args, args_digest, state, await_decision, provisional, facts,
           account, logical_key, created_at, reverts, hook)
         VALUES (?1, 'action', ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 'pending', ?12, ?13, ?14,
           ?15, ?16, ?17, ?18, ?19)",
        args![
            a.chat,
            a.principal.label(),
            a.principal.acting_for(),
            a.gadget,
            a.key,
            a.gatekeeper,
            a.tool,
            a.classified_by,
            a.trust.as_str(),
            kept,
            digest,
            a.await_decision,
            a.provisional,
            facts,
            a.facts.account,
            logical_key,
            now_ms(),
            reverts,
            a.principal.hook()
        ],
    )?;
    // Other hosts' inboxes show it without polling.
    super::action::announce(db, id)?;
    Ok(id)
}

/// The cap holds inside the staging transaction on both engines: of many
/// stagers of one chat at once, each on a connection of its own, exactly
/// the cap's number are staged and the rest refused, while another chat
/// stages beside them.
#[cfg(test)]
mod tests {
    use super::super::dispatch::Facts;
    use super::super::registry::Trust;
    use super::super::suite::{Backend, runtime};
    use super::*;
    use crate::principal::Principal;

    /// Stage into `chat` both ways a process stages: through the group
    /// commit ([`Store::stage`](crate::store::Store::stage)) and in place
    /// ([`Store::stage_now`](crate::store::Store::stage_now)); the two answers.
    async fn stage_both_ways(
        store: &crate::store::Store,
        chat: &str,
    ) -> [Result<StagedAction, StageError>; 2] {
        [
            store.stage(new_action(chat)).await,
            store.stage_now(new_action(chat)).await.unwrap(),
        ]
    }

    fn new_action(chat: &str) -> NewAction {
        NewAction {
            chat: chat.to_owned(),
            principal: Principal::person("ana"),
            gadget: None,
            key: "MAIL".into(),
            gatekeeper: "mail".into(),
            tool: "send".into(),
            classified_by: "default",
            trust: Trust::Vetted,
            args: super::super::validate_args("{}").unwrap(),
            await_decision: false,
            provisional: None,
            facts: Facts {
                component: "c".into(),
                instance: "i".into(),
                tool: "t".into(),
                class: "action".into(),
                trust: "vetted".into(),
                introduction: "n".into(),
                account: "none".into(),
            },
            resolved_at: None,
        }
    }

    /// What a chat holds open, on both engines: the applying actions and
    /// the pending ones not yet past the chat's expiry, whatever it
    /// finished; and the sweep closes exactly the pending ones past it.
    #[test]
    fn a_chats_open_actions_are_its_applying_and_its_live_pending_ones() {
        runtime().block_on(async {
            for backend in Backend::both().await {
                let chat = format!("open-{}", crate::entropy::random_hex(6).unwrap());
                // Created at 0: long past the default expiry.
                backend.pending_in(&chat).await;
                let c = chat.clone();
                let (open, swept, after) = backend
                    .run(move |db| {
                        let a = new_action(&c);
                        let mut ids = Vec::new();
                        for _ in 0..6 {
                            ids.push(insert(db, &a, None, None)?);
                        }
                        db.exec(
                            "UPDATE ledger SET state = 'applying' WHERE id = ?1",
                            args![ids[0]],
                        )?;
                        for id in &ids[1..3] {
                            db.exec(
                                "UPDATE ledger SET state = 'rejected' WHERE id = ?1",
                                args![*id],
                            )?;
                        }
                        // Past the chat's own expiry of a minute, not the default.
                        db.exec(
                            "UPDATE chats SET expire_after_ms = 60000 WHERE name = ?1",
                            args![c],
                        )?;
                        db.exec(
                            "UPDATE ledger SET created_at = ?2 WHERE id = ?1",
                            args![ids[3], now_ms() - 61_000],
                        )?;
                        let open = open_count(db, &c)?;
                        let swept = expire_due(db, Some(&c))?;
                        Ok((open, swept, open_count(db, &c)?))
                    })
                    .await
                    .unwrap();
                // Applying ids[0], pending ids[4] and ids[5].
                assert_eq!(open, 3, "{}", backend.name());
                // The one created at 0 and ids[3].
                assert_eq!(swept, 2, "{}", backend.name());
                assert_eq!(after, 3, "{}", backend.name());
            }
        });
    }

    /// A stage checked on a binding this process kept carries the policy
    /// epoch it was read under (so it needs no read of the epoch first); on
    /// both engines its transaction stages it only while the epoch is still
    /// that one, and stages nothing once it moved. A stage checked on a
    /// binding read now carries none and is not held to it.
    #[test]
    fn a_stage_checked_on_an_older_policy_stages_nothing() {
        runtime().block_on(async {
            for backend in Backend::both().await {
                let chat = format!("epoch-{}", crate::entropy::random_hex(6).unwrap());
                let c = chat.clone();
                let epoch: i64 = backend
                    .run(move |db| {
                        db.exec(
                            "INSERT INTO chats (name, owner, created_at) VALUES (?1, 'ana', 0)",
                            args![c],
                        )?;
                        db.row("SELECT n FROM policy_epoch WHERE id = 1", args![])?
                            .ok_or_else(|| anyhow::anyhow!("no epoch"))?
                            .get(0)
                    })
                    .await
                    .unwrap();
                let stage_at = |at: Option<i64>| {
                    let (b, c) = (backend.clone(), chat.clone());
                    async move {
                        b.run(move |db| {
                            let mut a = new_action(&c);
                            a.resolved_at = at;
                            let staged = stage(db, &a);
                            let rows: i64 = db
                                .row("SELECT count(*) FROM ledger WHERE chat = ?1", args![c])?
                                .ok_or_else(|| anyhow::anyhow!("no count"))?
                                .get(0)?;
                            Ok((staged, rows))
                        })
                        .await
                        .unwrap()
                    }
                };
                let (staged, rows) = stage_at(Some(epoch)).await;
                assert!(staged.is_ok(), "{}: {staged:?}", backend.name());
                assert_eq!(rows, 1, "{}", backend.name());

                backend
                    .run(|db| db.exec("UPDATE policy_epoch SET n = n + 1 WHERE id = 1", args![]))
                    .await
                    .unwrap();
                let (staged, rows) = stage_at(Some(epoch)).await;
                assert!(
                    matches!(staged, Err(StageError::PolicyMoved)),
                    "{}: {staged:?}",
                    backend.name()
                );
                assert_eq!(rows, 1, "{}: nothing more was staged", backend.name());

                let (staged, rows) = stage_at(None).await;
                assert!(staged.is_ok(), "{}: {staged:?}", backend.name());
                assert_eq!(rows, 2, "{}", backend.name());
            }
        });
    }

    /// Admission tells whether a rule might cover the action it admits,
    /// exactly as [`super::super::rules::may_cover`] answers it (one
    /// spelling, `may_cover_sql`): a rule of the chat or one of its
    /// owner's for every chat, of the action's tag. On PostgreSQL, where
    /// the answer would not hold at the commit, it says it does not know.
    #[test]
    fn admission_says_whether_a_rule_might_cover_what_it_admits() {
        runtime().block_on(async {
            for backend in Backend::both().await {
                let e = backend.name();
                let r = crate::entropy::random_hex(6).unwrap();
                let (mine, theirs) = (format!("mine-{r}"), format!("theirs-{r}"));
                let (ana, bob) = (format!("ana-{r}"), format!("bob-{r}"));
                backend.chats(&[(&mine, &ana), (&theirs, &bob)]).await;
                let admitted = |chat: &str, tool: &'static str| {
                    let (b, c) = (backend.clone(), chat.to_owned());
                    async move {
                        b.run(move |db| {
                            let mut a = new_action(&c);
                            a.tool = tool.into();
                            let covers =
                                super::super::rules::may_cover(db, &format!("mail:{tool}"), &c)?;
                            Ok((admit(db, &a).expect("admitted"), covers))
                        })
                        .await
                        .unwrap()
                    }
                };
                let rule = |person: &str, chat: Option<&str>| {
                    let (b, p, c) = (backend.clone(), person.to_owned(), chat.map(str::to_owned));
                    async move {
                        b.run(move |db| {
                            db.exec(
                                "INSERT INTO rules (tag, person, chat, enabled_at)
                                 VALUES ('mail:send', ?1, ?2, 0)",
                                args![p, c],
                            )
                        })
                        .await
                        .unwrap();
                    }
                };
                let expect = |covered: bool| match (e, covered) {
                    ("postgres", covered) => (RuleCoverage::Unknown, covered),
                    (_, true) => (RuleCoverage::MayCover, true),
                    (_, false) => (RuleCoverage::NoRule, false),
                };
                assert_eq!(admitted(&mine, "send").await, expect(false), "{e}: no rule");
                rule(&ana, None).await;
                assert_eq!(
                    admitted(&mine, "send").await,
                    expect(true),
                    "{e}: the owner's"
                );
                assert_eq!(
                    admitted(&mine, "drop").await,
                    expect(false),
                    "{e}: another tag"
                );
                assert_eq!(
                    admitted(&theirs, "send").await,
                    expect(false),
                    "{e}: not bob's"
                );
                rule(&ana, Some(&theirs)).await;
                assert_eq!(
                    admitted(&theirs, "send").await,
                    expect(true),
                    "{e}: the chat's"
                );
            }
        });
    }

    /// A stage counts its chat's open actions three times, two of them
    /// under the write lock, so each must stay cheap: no count may read a
    /// ledger row per open action, nor step over the finished actions the
    /// chat retains: every search is of the index, by chat and state. And
    /// the question of the rules asked beside it searches the rules by tag.
    #[test]
    fn a_chats_open_actions_are_counted_from_the_index_alone() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            crate::store::Store::open(&dir.path().join("gatehouse.db"), crate::seal::test_key())
                .unwrap();
        store
            .read(|conn| {
                let admission: &[&dyn rusqlite::ToSql] = &[&"work", &"mail:send", &1, &2];
                let due: &[&dyn rusqlite::ToSql] = &[&"work", &1, &2];
                for (sql, params) in [(ADMISSION, admission), (DUE_IN_CHAT, due)] {
                    let plan: Vec<String> = conn
                        .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?
                        .query_map(params, |r| r.get(3))?
                        .collect::<Result<_, _>>()?;
                    let ledger: Vec<_> = plan.iter().filter(|s| s.contains("ledger")).collect();
                    assert!(
                        !ledger.is_empty()
                            && ledger.iter().all(|step| step.contains(
                                "COVERING INDEX ledger_actions_by_state (state=? AND chat=?)"
                            )),
                        "{sql}\n{plan:#?}"
                    );
                    let rules: Vec<_> = plan.iter().filter(|s| s.contains("rules")).collect();
                    assert!(
                        rules.iter().all(|step| step.contains("INDEX")),
                        "{sql}\n{plan:#?}"
                    );
                    if sql == ADMISSION {
                        assert!(!rules.is_empty(), "{sql}\n{plan:#?}");
                    }
                }
                Ok(())
            })
            .unwrap();
    }

    /// A durable stage waits for every page it wrote to reach the disk:
    /// its row and the actions by state (schema 10), two pages, where
    /// schema 9 wrote four; and a new home's pages are 2 KB, so the two
    /// are about what a bare one-row commit writes at SQLite's default.
    #[test]
    fn a_stage_writes_two_pages() {
        let (_dir, path, store) = home_with(&["work"]);
        let log = || -> i64 {
            // Frames in the log, which this checkpoint then empties.
            let conn = rusqlite::Connection::open(&path).unwrap();
            let frames = conn
                .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1))
                .unwrap();
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
                .unwrap();
            frames
        };
        runtime().block_on(async {
            // The first stage of the chat, and a second one on a log
            // emptied in between: that one's pages are the commit's alone.
            store.stage(new_action("work")).await.unwrap();
            log();
            store.stage(new_action("work")).await.unwrap();
        });
        assert_eq!(log(), 2, "pages a stage wrote");
        // Of 2 KB each: with their headers, 4,144 bytes for the fsync.
        let page: i64 = rusqlite::Connection::open(&path)
            .unwrap()
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .unwrap();
        assert_eq!(page, 2048, "a new home's page size");
    }

    /// A full chat is refused without the database's write lock, by both
    /// ways of staging (else a gadget hammering a full chat starves an
    /// approver in another process): while another process holds the
    /// lock, refusals answer at once, and a stage into a chat with room
    /// waits for the lock and then lands.
    #[test]
    fn a_full_chat_is_refused_while_another_process_holds_the_write_lock() {
        let (_dir, path, store) = home_with(&["full", "room"]);
        runtime().block_on(async {
            for _ in 0..MAX_OPEN_ACTIONS {
                store.stage(new_action("full")).await.unwrap();
            }
            let (held, release) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
            let holder = {
                let path = path.clone();
                std::thread::spawn(move || {
                    let mut conn = rusqlite::Connection::open(&path).unwrap();
                    let tx = conn
                        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                        .unwrap();
                    tx.execute("UPDATE durability_mark SET n = n + 1 WHERE id = 1", [])
                        .unwrap();
                    held.0.send(()).unwrap();
                    // Released by the test, or given up long after any
                    // wait the test allows.
                    let _ = release.1.recv_timeout(std::time::Duration::from_secs(90));
                    tx.commit().unwrap();
                })
            };
            held.1.recv().unwrap();
            // A stage waiting for the lock would wait the busy timeout
            // (30 s) and fail: these answer well inside it.
            let started = std::time::Instant::now();
            for refused in stage_both_ways(&store, "full").await {
                assert!(
                    matches!(refused, Err(StageError::TooManyOpen(MAX_OPEN_ACTIONS))),
                    "{refused:?}"
                );
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(15),
                "the refusals waited for the write lock: {:?}",
                started.elapsed()
            );
            // A stage with room cannot land while the lock is held.
            let waiting = {
                let store = store.clone();
                tokio::spawn(async move { store.stage(new_action("room")).await })
            };
            release.0.send(()).unwrap();
            holder.join().unwrap();
            waiting.await.unwrap().unwrap();
            assert_eq!(store.read(|c| open_count(c, "room")).unwrap(), 1);
            assert_eq!(
                store.read(|c| open_count(c, "full")).unwrap(),
                MAX_OPEN_ACTIONS
            );
        });
    }

    /// A home's store with the chats `chats` of `ana`: its directory
    /// (removed when dropped), its file, and the store.
    fn home_with(chats: &[&str]) -> (tempfile::TempDir, std::path::PathBuf, crate::store::Store) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gatehouse.db");
        let store = crate::store::Store::open(&path, crate::seal::test_key()).unwrap();
        for chat in chats {
            store.create_chat(chat, "ana").unwrap();
        }
        (dir, path, store)
    }

    /// Another process's connection to the same file.
    fn elsewhere(path: &std::path::Path) -> rusqlite::Connection {
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.busy_timeout(std::time::Duration::from_secs(30))
            .unwrap();
        conn
    }

    /// A read's observation in `chat`, of owner-only data when
    /// `restricted` (which latches the chat, SPEC O3).
    fn observation(chat: &str, restricted: bool) -> crate::store::NewObservation {
        crate::store::NewObservation {
            chat: chat.into(),
            principal: Principal::person("ana"),
            gadget: None,
            gatekeeper: "mail".into(),
            tool: "read".into(),
            classified_by: "server-annotation",
            trust: Trust::Vetted,
            sources: crate::store::Sources::of(&[crate::store::Source {
                id: "mail",
                restricted,
                title: "gatekeeper mail",
            }]),
            account: None,
            action_ref: None,
            result_bytes: 0,
            audit: None,
        }
    }

    /// A plain read's observation and the turn's durability barrier leave
    /// the chat open to stages; an observation that latches it (SPEC O3)
    /// refuses the next.
    #[test]
    fn an_observation_that_latches_the_chat_refuses_the_next_stage() {
        let (_dir, _, store) = home_with(&["work"]);
        runtime().block_on(async {
            store.stage_now(new_action("work")).await.unwrap().unwrap();
            store.observe_now(observation("work", false)).await.unwrap();
            store.sync().await.unwrap();
            store.stage_now(new_action("work")).await.unwrap().unwrap();
            store.observe_now(observation("work", true)).await.unwrap();
            let refused = store.stage_now(new_action("work")).await.unwrap();
            assert!(
                matches!(refused, Err(StageError::LockedDown(_))),
                "{refused:?}"
            );
        });
    }

    /// What another process committed is seen by the next stage: a chat
    /// that process filled to the cap, or latched, refuses the next stage
    /// of this one, by both ways of staging, though this process's last
    /// stage there found room and no latch.
    #[test]
    fn a_chat_filled_or_latched_by_another_process_refuses_the_next_stage() {
        let (_dir, path, store) = home_with(&["full", "shut"]);
        runtime().block_on(async {
            store.stage(new_action("full")).await.unwrap();
            store.stage(new_action("shut")).await.unwrap();
            let other = elsewhere(&path);
            for _ in 1..MAX_OPEN_ACTIONS {
                insert(&other, &new_action("full"), None, None).unwrap();
            }
            for refused in stage_both_ways(&store, "full").await {
                assert!(
                    matches!(refused, Err(StageError::TooManyOpen(MAX_OPEN_ACTIONS))),
                    "{refused:?}"
                );
            }

            // Filled while this process's stage waits for the write lock:
            // what it admitted on its snapshot before it waited no longer
            // holds once it has the lock.
            store.create_chat("late", "ana").unwrap();
            store.stage(new_action("late")).await.unwrap();
            let (held, release) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
            let holder = {
                let path = path.clone();
                std::thread::spawn(move || {
                    let mut conn = elsewhere(&path);
                    let tx = conn
                        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                        .unwrap();
                    for _ in 1..MAX_OPEN_ACTIONS {
                        insert(&*tx, &new_action("late"), None, None).unwrap();
                    }
                    held.0.send(()).unwrap();
                    let _ = release.1.recv_timeout(std::time::Duration::from_secs(90));
                    tx.commit().unwrap();
                })
            };
            held.1.recv().unwrap();
            let waiting = {
                let store = store.clone();
                tokio::spawn(async move { store.stage(new_action("late")).await })
            };
            // Let the stage reach the lock and wait there (it is refused
            // either way; this is the order that tests the check under
            // the lock).
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            release.0.send(()).unwrap();
            holder.join().unwrap();
            let refused = waiting.await.unwrap();
            assert!(
                matches!(refused, Err(StageError::TooManyOpen(MAX_OPEN_ACTIONS))),
                "{refused:?}"
            );

            store.stage(new_action("shut")).await.unwrap();
            other
                .execute("UPDATE chats SET latched = 1 WHERE name = 'shut'", [])
                .unwrap();
            for refused in stage_both_ways(&store, "shut").await {
                assert!(
                    matches!(refused, Err(StageError::LockedDown(_))),
                    "{refused:?}"
                );
            }
        });
        assert_eq!(
            store.read(|c| open_count(c, "full")).unwrap(),
            MAX_OPEN_ACTIONS
        );
        assert_eq!(store.read(|c| open_count(c, "shut")).unwrap(), 2);
        assert_eq!(
            store.read(|c| open_count(c, "late")).unwrap(),
            MAX_OPEN_ACTIONS
        );
    }

    /// A pending action that falls due while nothing is committed is
    /// marked expired by the next stage of its chat (SPEC H3).
    #[test]
    fn a_stage_after_a_pending_action_falls_due_marks_it_expired() {
        let (_dir, path, store) = home_with(&["work"]);
        store.set_expiry("work", "ana", 300).unwrap();
        let state = |id: i64| -> String {
            elsewhere(&path)
                .query_row("SELECT state FROM ledger WHERE id = ?1", [id], |r| r.get(0))
                .unwrap()
        };
        runtime().block_on(async {
            let first = store.stage(new_action("work")).await.unwrap().id;
            // Wait for the clock, not for a commit: nothing is written
            // until the next stage.
            let created: i64 = elsewhere(&path)
                .query_row(
                    "SELECT created_at FROM ledger WHERE id = ?1",
                    [first],
                    |r| r.get(0),
                )
                .unwrap();
            while now_ms() <= created + 300 {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            assert_eq!(state(first), "pending", "nothing marked it yet");
            let second = store.stage(new_action("work")).await.unwrap().id;
            assert_eq!(state(first), "expired");
            assert_eq!(state(second), "pending");
        });
        assert_eq!(store.read(|c| open_count(c, "work")).unwrap(), 1);
    }

    /// Every refusal of a stage, made through the store as the kernel
    /// stages (the home's group commit and in place; the shared
    /// database's one statement), is the same on both engines, and
    /// nothing is written by one: no such chat; a policy moved since the
    /// binding was kept; a latched chat, even when full too (the latch is
    /// asked first); a full chat. And a pending action past its chat's
    /// expiry is marked expired by the next stage there, which it no
    /// longer counts against the cap.
    #[test]
    fn a_stage_through_the_store_refuses_alike_on_both_engines() {
        runtime().block_on(async {
            for backend in Backend::both().await {
                let e = backend.name();
                let store = backend.store();
                let r = crate::entropy::random_hex(6).unwrap();
                let (full, shut, due) =
                    (format!("full-{r}"), format!("shut-{r}"), format!("due-{r}"));
                backend
                    .chats(&[(&full, "ana"), (&shut, "ana"), (&due, "ana")])
                    .await;
                let rows = |chat: &str| {
                    let (b, c) = (backend.clone(), chat.to_owned());
                    async move {
                        b.run(move |db| {
                            db.row("SELECT count(*) FROM ledger WHERE chat = ?1", args![c])?
                                .ok_or_else(|| anyhow::anyhow!("no count"))?
                                .get::<i64>(0)
                        })
                        .await
                        .unwrap()
                    }
                };
                let both = |a: NewAction| {
                    let store = store.clone();
                    async move {
                        [
                            store.stage(a.clone()).await,
                            store.stage_now(a).await.expect("no store error"),
                        ]
                    }
                };

                for refused in both(new_action(&format!("none-{r}"))).await {
                    assert!(
                        matches!(refused, Err(StageError::NoChat(_))),
                        "{e}: {refused:?}"
                    );
                }

                let epoch: i64 = backend
                    .run(|db| {
                        db.row("SELECT n FROM policy_epoch WHERE id = 1", args![])?
                            .ok_or_else(|| anyhow::anyhow!("no epoch"))?
                            .get(0)
                    })
                    .await
                    .unwrap();
                let mut kept = new_action(&full);
                kept.resolved_at = Some(epoch);
                store
                    .stage(kept.clone())
                    .await
                    .expect("staged at the epoch");
                backend
                    .run(|db| db.exec("UPDATE policy_epoch SET n = n + 1 WHERE id = 1", args![]))
                    .await
                    .unwrap();
                for refused in both(kept).await {
                    assert!(
                        matches!(refused, Err(StageError::PolicyMoved)),
                        "{e}: {refused:?}"
                    );
                }
                assert_eq!(
                    rows(&full).await,
                    1,
                    "{e}: nothing staged on a moved policy"
                );

                for _ in 1..MAX_OPEN_ACTIONS {
                    store.stage(new_action(&full)).await.expect("room");
                }
                for refused in both(new_action(&full)).await {
                    assert!(
                        matches!(refused, Err(StageError::TooManyOpen(MAX_OPEN_ACTIONS))),
                        "{e}: {refused:?}"
                    );
                }
                assert_eq!(rows(&full).await, MAX_OPEN_ACTIONS, "{e}");

                store.stage(new_action(&shut)).await.expect("room");
                let (f, s) = (full.clone(), shut.clone());
                backend
                    .run(move |db| {
                        db.exec(
                            "UPDATE chats SET latched = 1 WHERE name = ?1 OR name = ?2",
                            args![f, s],
                        )
                    })
                    .await
                    .unwrap();
                for chat in [&shut, &full] {
                    for refused in both(new_action(chat)).await {
                        assert!(
                            matches!(refused, Err(StageError::LockedDown(_))),
                            "{e}: {refused:?}"
                        );
                    }
                }
                assert_eq!(rows(&shut).await, 1, "{e}");

                // Due: the chat's expiry is a minute, and its action was
                // staged two minutes ago.
                let old = store.stage(new_action(&due)).await.expect("room").id;
                let d = due.clone();
                backend
                    .run(move |db| {
                        db.exec(
                            "UPDATE chats SET expire_after_ms = 60000 WHERE name = ?1",
                            args![d],
                        )?;
                        db.exec(
                            "UPDATE ledger SET created_at = ?2 WHERE id = ?1",
                            args![old, now_ms() - 120_000],
                        )
                    })
                    .await
                    .unwrap();
                let new = store.stage(new_action(&due)).await.expect("room").id;
                let states = backend
                    .run(move |db| {
                        let state = |id: i64| -> anyhow::Result<String> {
                            db.row("SELECT state FROM ledger WHERE id = ?1", args![id])?
                                .ok_or_else(|| anyhow::anyhow!("no action {id}"))?
                                .get(0)
                        };
                        Ok((state(old)?, state(new)?))
                    })
                    .await
                    .unwrap();
                assert_eq!(states, ("expired".into(), "pending".into()), "{e}");
            }
        });
    }

    #[test]
    fn of_eighty_stagers_of_one_chat_at_once_exactly_the_cap_are_staged() {
        runtime().block_on(async {
            for backend in Backend::both().await {
                let (full, other) = (
                    format!("full-{}", crate::entropy::random_hex(6).unwrap()),
                    format!("other-{}", crate::entropy::random_hex(6).unwrap()),
                );
                // The chats exist (one staged action each would do it; the
                // fixture makes them), then hold nothing open.
                for chat in [&full, &other] {
                    let id = backend.pending_in(chat).await;
                    backend
                        .run(move |db| {
                            db.exec(
                                "UPDATE ledger SET state = 'rejected' WHERE id = ?1",
                                args![id],
                            )
                        })
                        .await
                        .unwrap();
                }
                let stagers: Vec<_> = (0..80)
                    .map(|n| {
                        let b = backend.clone();
                        let chat = if n % 8 == 7 {
                            other.clone()
                        } else {
                            full.clone()
                        };
                        tokio::spawn(async move {
                            b.run(move |db| {
                                let a = new_action(&chat);
                                Ok(stage(db, &a))
                            })
                            .await
                            .unwrap()
                        })
                    })
                    .collect();
                let (mut staged, mut refused) = (0, 0);
                for s in stagers {
                    match s.await.unwrap() {
                        Ok(_) => staged += 1,
                        Err(StageError::TooManyOpen(n)) => {
                            assert_eq!(n, MAX_OPEN_ACTIONS, "{}", backend.name());
                            refused += 1
                        }
                        Err(e) => panic!("{}: {e}", backend.name()),
                    }
                }
                // 70 stagers of the full chat, 10 of the other.
                assert_eq!(staged, 50 + 10, "{}", backend.name());
                assert_eq!(refused, 20, "{}", backend.name());
                for (chat, want) in [(full, 50), (other, 10)] {
                    let open = backend.run(move |db| open_count(db, &chat)).await.unwrap();
                    assert_eq!(open, want, "{}", backend.name());
                }
            }
        });
    }
}
