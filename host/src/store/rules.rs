//! Auto-approval rules (key two) and agent runs, as stored.
//!
//! Every statement is written once over [`Sql`] for both engines. An
//! agent run's state moves only forward, whichever host writes:
//! a turn is saved only on a running run (running → waiting or done), a
//! waiting run is taken for resumption by one taker (waiting → running)
//! or stopped (waiting → stopped), each by one conditional `UPDATE`. A
//! rule is one row per person, tag and scope (a unique index), so enabling
//! it twice, even at once, keeps one.

use super::sql::{Row, Sql, args};
use super::words::AgentRunState;
use super::{Store, now_ms};
use serde::Serialize;

/// Key two of auto-approval (SPEC U1): a person's rule for exactly one
/// namespaced tag, in the chats they own or in one named chat.
#[derive(Clone, Debug, Serialize)]
pub struct Rule {
    /// The rule's id (`rules remove ID`).
    pub id: i64,
    /// The one `gatekeeper:tool` tag it covers (A6).
    pub tag: String,
    /// The person it belongs to (`resolved-by` of what it approves).
    pub person: String,
    /// `None`: every chat the person owns.
    pub chat: Option<String>,
    /// When it was enabled, in ms since the epoch.
    pub enabled_at: i64,
}

/// A harness run (SPEC V2, V3).
#[derive(Clone, Debug, Serialize)]
pub struct AgentRun {
    /// The run's id (`gatehouse runs`).
    pub id: i64,
    /// The chat its turns run in.
    pub chat: String,
    /// The agent gadget.
    pub gadget: String,
    /// The task it was started on, the first turn's input.
    pub task: String,
    /// `running`, `waiting` (for decisions on `awaited`), `done`, or
    /// `stopped` (an awaited action was rejected, failed or expired, or no
    /// longer exists).
    pub state: AgentRunState,
    /// The actions its last turn staged and waits on; it resumes once every
    /// one is applied.
    pub awaited: Vec<i64>,
    /// Turns run so far.
    pub turns: i64,
    /// What the last turn answered, or why the run stopped (capped).
    pub last_output: Option<String>,
    /// The person the run acts for (SPEC C5).
    pub person: String,
}

fn rule_from_row(r: &Row) -> anyhow::Result<Rule> {
    Ok(Rule {
        id: r.get(0)?,
        tag: r.get(1)?,
        person: r.get(2)?,
        chat: r.get(3)?,
        enabled_at: r.get(4)?,
    })
}

fn run_from_row(r: &Row) -> anyhow::Result<AgentRun> {
    let awaited: String = r.get(5)?;
    Ok(AgentRun {
        id: r.get(0)?,
        chat: r.get(1)?,
        gadget: r.get(2)?,
        task: r.get(3)?,
        state: AgentRunState::from_stored(&r.get::<String>(4)?),
        awaited: serde_json::from_str(&awaited).unwrap_or_default(),
        turns: r.get(6)?,
        last_output: r.get(7)?,
        person: r.get::<Option<String>>(8)?.unwrap_or_default(),
    })
}

const RUN_COLUMNS: &str = "id, chat, gadget, task, state, awaited, turns, last_output, person";
const RULE_COLUMNS: &str = "id, tag, person, chat, enabled_at";

impl Store {
    /// Enable a rule (idempotent); returns it.
    pub fn add_rule(&self, tag: &str, person: &str, chat: Option<&str>) -> anyhow::Result<Rule> {
        self.write(|db| add_rule_in(db, tag, person, chat, now_ms()))
    }

    /// Remove `person`'s rule for `tag` in that scope; false if none.
    pub fn remove_rule(&self, tag: &str, person: &str, chat: Option<&str>) -> anyhow::Result<bool> {
        self.with(|db| remove_rule_in(db, tag, person, chat))
    }

    /// The rules that could cover an action tagged `tag` in `chat` owned by
    /// `owner` (key two candidates; the claim checks them again).
    pub fn rules_covering(&self, tag: &str, chat: &str, owner: &str) -> anyhow::Result<Vec<Rule>> {
        self.with(|db| rules_covering_in(db, tag, chat, owner))
    }

    /// The rules `person` may see: their own, and those scoped to chats
    /// they own.
    pub fn rules_for(&self, person: &str) -> anyhow::Result<Vec<Rule>> {
        self.with(|db| rules_for_in(db, person))
    }

    /// Every rule (operator's view).
    pub fn rules(&self) -> anyhow::Result<Vec<Rule>> {
        self.with(rules_in)
    }

    /// Start an agent run (before its first turn, so the turn can name it).
    pub fn start_run(
        &self,
        chat: &str,
        gadget: &str,
        task: &str,
        person: &str,
    ) -> anyhow::Result<i64> {
        self.with(|db| start_run_in(db, chat, gadget, task, person, now_ms()))
    }

    /// Record a run after a turn: `state` (the harness decides it: waiting
    /// on `awaited`, or done). Only a running run is saved: one stopped
    /// meanwhile stays stopped.
    pub fn save_run(
        &self,
        id: i64,
        state: AgentRunState,
        awaited: &[i64],
        output: &str,
    ) -> anyhow::Result<()> {
        self.with(|db| save_run_in(db, id, state, awaited, output, now_ms()))?;
        Ok(())
    }

    /// The agent run `id`, if there is one.
    pub fn run_record(&self, id: i64) -> anyhow::Result<Option<AgentRun>> {
        self.with(|db| run_record_in(db, id))
    }

    /// The runs waiting on decisions, oldest first.
    pub fn waiting_runs(&self) -> anyhow::Result<Vec<AgentRun>> {
        self.with(waiting_runs_in)
    }

    /// Every agent run, oldest first.
    pub fn agent_runs(&self) -> anyhow::Result<Vec<AgentRun>> {
        self.with(agent_runs_in)
    }

    /// Take a waiting run for resumption; only one taker wins.
    pub fn take_run(&self, id: i64) -> anyhow::Result<bool> {
        self.with(|db| take_run_in(db, id, now_ms()))
    }

    /// Stop a waiting run, saying why; a run another process took
    /// meanwhile is not stopped under it.
    pub fn stop_run(&self, id: i64, why: &str) -> anyhow::Result<()> {
        self.with(|db| stop_run_in(db, id, why, now_ms()))?;
        Ok(())
    }
}

// The statements, written once for both engines (`store::sql`).

/// Whether some rule might auto-approve an action tagged `?2` in chat
/// `?1` (key two only; the claim checks both keys again): a rule of that
/// chat, or one of its owner's for every chat. The one spelling of the
/// question, asked alone ([`may_cover`]) and inside a staging transaction
/// (`stages::ADMISSION`), so the two cannot disagree.
macro_rules! may_cover_sql {
    () => {
        "EXISTS (SELECT 1 FROM rules WHERE tag = ?2 AND (chat = ?1 OR (chat IS NULL
           AND person = (SELECT owner FROM chats WHERE name = ?1))))"
    };
}
pub(crate) use may_cover_sql;

/// Whether some rule might auto-approve an action tagged `tag` in `chat`
/// ([`may_cover_sql`]). On any connection, readers included: the question
/// changes nothing.
pub(crate) fn may_cover(db: &dyn Sql, tag: &str, chat: &str) -> anyhow::Result<bool> {
    let covers: i64 = db
        .row(
            concat!("SELECT CASE WHEN ", may_cover_sql!(), " THEN 1 ELSE 0 END"),
            args![chat, tag],
        )?
        .ok_or_else(|| anyhow::anyhow!("the rules were not asked"))?
        .get(0)?;
    Ok(covers == 1)
}

/// The rule is inserted unless that person already has it in that scope
/// (the unique index makes a second enabler's insert do nothing, on
/// either engine); the one row is returned either way.
fn add_rule_in(
    db: &dyn Sql,
    tag: &str,
    person: &str,
    chat: Option<&str>,
    now: i64,
) -> anyhow::Result<Rule> {
    db.exec(
        "INSERT INTO rules (tag, person, chat, enabled_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT DO NOTHING",
        args![tag, person, chat, now],
    )?;
    let row = db
        .row(
            &format!(
                "SELECT {RULE_COLUMNS} FROM rules
                 WHERE tag = ?1 AND person = ?2 AND COALESCE(chat, '') = COALESCE(?3, '')"
            ),
            args![tag, person, chat],
        )?
        .ok_or_else(|| anyhow::anyhow!("the rule for {tag} was not kept"))?;
    rule_from_row(&row)
}

fn remove_rule_in(
    db: &dyn Sql,
    tag: &str,
    person: &str,
    chat: Option<&str>,
) -> anyhow::Result<bool> {
    Ok(db.exec(
        "DELETE FROM rules WHERE tag = ?1 AND person = ?2 AND COALESCE(chat, '') = COALESCE(?3, '')",
        args![tag, person, chat],
    )? == 1)
}

fn rules_covering_in(
    db: &dyn Sql,
    tag: &str,
    chat: &str,
    owner: &str,
) -> anyhow::Result<Vec<Rule>> {
    db.rows(
        &format!(
            "SELECT {RULE_COLUMNS} FROM rules
             WHERE tag = ?1 AND (chat = ?2 OR (chat IS NULL AND person = ?3)) ORDER BY id"
        ),
        args![tag, chat, owner],
    )?
    .iter()
    .map(rule_from_row)
    .collect()
}

fn rules_for_in(db: &dyn Sql, person: &str) -> anyhow::Result<Vec<Rule>> {
    db.rows(
        &format!(
            "SELECT {RULE_COLUMNS} FROM rules
             WHERE person = ?1 OR chat IN (SELECT name FROM chats WHERE owner = ?1)
             ORDER BY tag, id"
        ),
        args![person],
    )?
    .iter()
    .map(rule_from_row)
    .collect()
}

fn rules_in(db: &dyn Sql) -> anyhow::Result<Vec<Rule>> {
    db.rows(
        &format!("SELECT {RULE_COLUMNS} FROM rules ORDER BY tag, id"),
        args![],
    )?
    .iter()
    .map(rule_from_row)
    .collect()
}

fn start_run_in(
    db: &dyn Sql,
    chat: &str,
    gadget: &str,
    task: &str,
    person: &str,
    now: i64,
) -> anyhow::Result<i64> {
    db.row(
        "INSERT INTO agent_runs (chat, gadget, task, state, awaited, turns, person, updated_at)
         VALUES (?1, ?2, ?3, 'running', '[]', 0, ?4, ?5)
         RETURNING id",
        args![chat, gadget, task, person, now],
    )?
    .ok_or_else(|| anyhow::anyhow!("the run's insert returned no id"))?
    .get(0)
}

/// False: the run was not running (stopped, or not there), and nothing
/// changed.
fn save_run_in(
    db: &dyn Sql,
    id: i64,
    state: AgentRunState,
    awaited: &[i64],
    output: &str,
    now: i64,
) -> anyhow::Result<bool> {
    let awaited = serde_json::to_string(awaited)?;
    // A turn may answer megabytes; the run keeps a capped copy (A5).
    let output = super::cut(output, super::MAX_OUTPUT_BYTES, "output");
    Ok(db.exec(
        "UPDATE agent_runs SET state = ?2, awaited = ?3, turns = turns + 1,
           last_output = ?4, updated_at = ?5 WHERE id = ?1 AND state = 'running'",
        args![id, state, awaited, output, now],
    )? == 1)
}

fn run_record_in(db: &dyn Sql, id: i64) -> anyhow::Result<Option<AgentRun>> {
    db.row(
        &format!("SELECT {RUN_COLUMNS} FROM agent_runs WHERE id = ?1"),
        args![id],
    )?
    .map(|r| run_from_row(&r))
    .transpose()
}

fn waiting_runs_in(db: &dyn Sql) -> anyhow::Result<Vec<AgentRun>> {
    db.rows(
        &format!("SELECT {RUN_COLUMNS} FROM agent_runs WHERE state = 'waiting' ORDER BY id"),
        args![],
    )?
    .iter()
    .map(run_from_row)
    .collect()
}

fn agent_runs_in(db: &dyn Sql) -> anyhow::Result<Vec<AgentRun>> {
    db.rows(
        &format!("SELECT {RUN_COLUMNS} FROM agent_runs ORDER BY id"),
        args![],
    )?
    .iter()
    .map(run_from_row)
    .collect()
}

/// One conditional `UPDATE` decides: of takers racing on one waiting run,
/// on either engine, only the first finds it still waiting.
fn take_run_in(db: &dyn Sql, id: i64, now: i64) -> anyhow::Result<bool> {
    Ok(db.exec(
        "UPDATE agent_runs SET state = 'running', updated_at = ?2 WHERE id = ?1 AND state = 'waiting'",
        args![id, now],
    )? == 1)
}

/// False: the run was no longer waiting (taken, or finished), and nothing
/// changed.
fn stop_run_in(db: &dyn Sql, id: i64, why: &str, now: i64) -> anyhow::Result<bool> {
    Ok(db.exec(
        "UPDATE agent_runs SET state = 'stopped', last_output = ?2, updated_at = ?3
         WHERE id = ?1 AND state = 'waiting'",
        args![id, why, now],
    )? == 1)
}

#[cfg(test)]
mod on_both_engines {
    use super::*;
    use crate::store::suite::{Backend, runtime};

    /// Enablers of one rule at once keep one row, and each is given it;
    /// a rule of every chat its person owns covers those chats only, a
    /// rule of one chat that chat only, and a removed rule covers nothing.
    #[test]
    fn a_rule_is_kept_once_and_covers_its_scope_only() {
        runtime().block_on(async {
            for b in Backend::both().await {
                let e = b.name();
                b.chats(&[("mine", "ann"), ("also-mine", "ann"), ("bobs", "bob")])
                    .await;
                let enablers: Vec<_> = (0..8)
                    .map(|n| {
                        let b = b.clone();
                        tokio::spawn(async move {
                            b.run(move |db| add_rule_in(db, "mail:send", "ann", None, n))
                                .await
                        })
                    })
                    .collect();
                let mut ids = Vec::new();
                for en in enablers {
                    ids.push(en.await.expect("joined").expect(e).id);
                }
                ids.dedup();
                assert_eq!(ids.len(), 1, "{e}: every enabler is given the one rule");
                let scoped = b
                    .run(|db| add_rule_in(db, "mail:send", "bob", Some("mine"), 9))
                    .await
                    .expect("enabled");
                let again = b
                    .run(|db| add_rule_in(db, "mail:send", "bob", Some("mine"), 10))
                    .await
                    .expect("enabled");
                assert_eq!(
                    (again.id, again.chat.as_deref(), again.enabled_at),
                    (scoped.id, Some("mine"), 9),
                    "{e}: enabling again keeps the rule as it was"
                );
                assert_eq!(
                    b.run(rules_in).await.expect("rules").len(),
                    2,
                    "{e}: one row per person, tag and scope"
                );

                let covers = |tag: &'static str, chat: &'static str| {
                    let b = b.clone();
                    async move { b.run(move |db| may_cover(db, tag, chat)).await.expect(e) }
                };
                assert!(covers("mail:send", "mine").await, "{e}");
                assert!(covers("mail:send", "also-mine").await, "{e}");
                assert!(!covers("mail:send", "bobs").await, "{e}: not ann's chat");
                assert!(!covers("mail:delete", "mine").await, "{e}: not its tag");
                assert!(!covers("mail:send", "nowhere").await, "{e}");

                let candidates = |chat: &'static str, owner: &'static str| {
                    let b = b.clone();
                    async move {
                        b.run(move |db| rules_covering_in(db, "mail:send", chat, owner))
                            .await
                            .expect(e)
                            .into_iter()
                            .map(|r| (r.person, r.chat))
                            .collect::<Vec<_>>()
                    }
                };
                assert_eq!(
                    candidates("mine", "ann").await,
                    vec![
                        ("ann".to_owned(), None),
                        ("bob".to_owned(), Some("mine".to_owned()))
                    ],
                    "{e}"
                );
                assert_eq!(candidates("bobs", "bob").await, vec![], "{e}");
                // Ann sees her own rule and bob's in her chat; bob his own.
                let seen = |person: &'static str| {
                    let b = b.clone();
                    async move {
                        b.run(move |db| rules_for_in(db, person))
                            .await
                            .expect(e)
                            .len()
                    }
                };
                assert_eq!((seen("ann").await, seen("bob").await), (2, 1), "{e}");
                assert_eq!(seen("carol").await, 0, "{e}");

                assert!(
                    b.run(|db| remove_rule_in(db, "mail:send", "ann", None))
                        .await
                        .expect("removed"),
                    "{e}"
                );
                assert!(
                    !b.run(|db| remove_rule_in(db, "mail:send", "ann", None))
                        .await
                        .expect("removed"),
                    "{e}: removed once"
                );
                assert!(!covers("mail:send", "also-mine").await, "{e}");
                assert!(covers("mail:send", "mine").await, "{e}: bob's rule stays");
            }
        });
    }

    /// An agent run's state moves only forward: takers racing on a waiting
    /// run resume it once, a run taken is not stopped under its taker, a
    /// finished run is neither saved, taken nor stopped again, and of a
    /// taker and a stopper racing exactly one moves the run.
    #[test]
    fn an_agent_runs_state_moves_only_forward() {
        runtime().block_on(async {
            for b in Backend::both().await {
                let e = b.name();
                let state = |id: i64| {
                    let b = b.clone();
                    async move {
                        b.run(move |db| run_record_in(db, id))
                            .await
                            .expect(e)
                            .expect("the run")
                    }
                };
                let run = b
                    .run(|db| start_run_in(db, "c", "agent", "do it", "ann", 1))
                    .await
                    .expect("started");
                assert_eq!(state(run).await.state, AgentRunState::Running, "{e}");
                let long = "x".repeat(crate::store::MAX_OUTPUT_BYTES + 10);
                assert!(
                    b.run(move |db| save_run_in(
                        db,
                        run,
                        AgentRunState::Waiting,
                        &[7, 8],
                        &long,
                        2
                    ))
                    .await
                    .expect("saved"),
                    "{e}"
                );
                let r = state(run).await;
                assert_eq!(
                    (r.state, r.awaited.clone(), r.turns, r.person.as_str()),
                    (AgentRunState::Waiting, vec![7, 8], 1, "ann"),
                    "{e}"
                );
                assert!(
                    r.last_output.as_deref().is_some_and(
                        |o| o.contains("cut") && o.len() < crate::store::MAX_OUTPUT_BYTES + 200
                    ),
                    "{e}: the output is kept capped"
                );
                let waiting = b.run(waiting_runs_in).await.expect("read");
                assert_eq!(
                    waiting.iter().map(|r| r.id).collect::<Vec<_>>(),
                    vec![run],
                    "{e}"
                );

                let takers: Vec<_> = (0..10)
                    .map(|_| {
                        let b = b.clone();
                        tokio::spawn(async move { b.run(move |db| take_run_in(db, run, 3)).await })
                    })
                    .collect();
                let mut took = 0;
                for t in takers {
                    took += usize::from(t.await.expect("joined").expect(e));
                }
                assert_eq!(took, 1, "{e}: resumed once");
                assert!(
                    !b.run(move |db| stop_run_in(db, run, "late", 4))
                        .await
                        .expect("stop"),
                    "{e}: a taken run is not stopped under its taker"
                );
                assert_eq!(state(run).await.state, AgentRunState::Running, "{e}");
                assert!(
                    b.run(move |db| save_run_in(db, run, AgentRunState::Done, &[], "done", 5))
                        .await
                        .expect("saved"),
                    "{e}"
                );
                for moved in [
                    b.run(move |db| take_run_in(db, run, 6)).await,
                    b.run(move |db| stop_run_in(db, run, "late", 6)).await,
                    b.run(move |db| save_run_in(db, run, AgentRunState::Waiting, &[9], "", 6))
                        .await,
                ] {
                    assert!(!moved.expect(e), "{e}: a finished run stays finished");
                }
                let r = state(run).await;
                assert_eq!(
                    (r.state, r.turns, r.last_output.as_deref()),
                    (AgentRunState::Done, 2, Some("done")),
                    "{e}"
                );

                // A taker and a stopper race on another waiting run.
                let other = b
                    .run(|db| {
                        let id = start_run_in(db, "c", "agent", "again", "ann", 7)?;
                        save_run_in(db, id, AgentRunState::Waiting, &[1], "", 7)?;
                        Ok(id)
                    })
                    .await
                    .expect("waiting");
                let (take, stop) = tokio::join!(
                    b.run(move |db| take_run_in(db, other, 8)),
                    b.run(move |db| stop_run_in(db, other, "rejected", 8)),
                );
                let (take, stop) = (take.expect(e), stop.expect(e));
                assert!(take != stop, "{e}: exactly one moves it");
                let want = if take {
                    AgentRunState::Running
                } else {
                    AgentRunState::Stopped
                };
                assert_eq!(state(other).await.state, want, "{e}");
                let all = b.run(agent_runs_in).await.expect("read");
                assert_eq!(
                    all.iter().map(|r| r.id).collect::<Vec<_>>(),
                    vec![run, other],
                    "{e}"
                );
            }
        });
    }
}
