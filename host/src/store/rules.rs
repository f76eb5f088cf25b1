//! Auto-approval rules (key two) and agent runs, as stored.

use super::words::AgentRunState;
use super::{Store, now_ms};
use rusqlite::{OptionalExtension as _, params};
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

/// Whether some rule might auto-approve an action tagged `tag` in `chat`
/// (key two only; the claim checks both keys again). On any connection,
/// readers included: the question changes nothing.
pub(crate) fn may_cover(
    conn: &rusqlite::Connection,
    tag: &str,
    chat: &str,
) -> anyhow::Result<bool> {
    Ok(conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM rules WHERE tag = ?1 AND (chat = ?2 OR (chat IS NULL
               AND person = (SELECT owner FROM chats WHERE name = ?2))))",
        )?
        .query_row(params![tag, chat], |r| r.get(0))?)
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

fn rule_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Rule> {
    Ok(Rule {
        id: r.get(0)?,
        tag: r.get(1)?,
        person: r.get(2)?,
        chat: r.get(3)?,
        enabled_at: r.get(4)?,
    })
}

fn run_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<AgentRun> {
    let awaited: String = r.get(5)?;
    Ok(AgentRun {
        id: r.get(0)?,
        chat: r.get(1)?,
        gadget: r.get(2)?,
        task: r.get(3)?,
        state: r.get(4)?,
        awaited: serde_json::from_str(&awaited).unwrap_or_default(),
        turns: r.get(6)?,
        last_output: r.get(7)?,
        person: r.get::<_, Option<String>>(8)?.unwrap_or_default(),
    })
}

const RUN_COLUMNS: &str = "id, chat, gadget, task, state, awaited, turns, last_output, person";
const RULE_COLUMNS: &str = "id, tag, person, chat, enabled_at";

impl Store {
    /// Enable a rule (idempotent); returns it.
    pub fn add_rule(&self, tag: &str, person: &str, chat: Option<&str>) -> anyhow::Result<Rule> {
        let conn = self.lock();
        conn.execute(
            "INSERT INTO rules (tag, person, chat, enabled_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT DO NOTHING",
            params![tag, person, chat, now_ms()],
        )?;
        Ok(conn.query_row(
            &format!(
                "SELECT {RULE_COLUMNS} FROM rules
                 WHERE tag = ?1 AND person = ?2 AND COALESCE(chat, '') = COALESCE(?3, '')"
            ),
            params![tag, person, chat],
            rule_from_row,
        )?)
    }

    /// Remove `person`'s rule for `tag` in that scope; false if none.
    pub fn remove_rule(&self, tag: &str, person: &str, chat: Option<&str>) -> anyhow::Result<bool> {
        Ok(self.lock().execute(
            "DELETE FROM rules WHERE tag = ?1 AND person = ?2 AND COALESCE(chat, '') = COALESCE(?3, '')",
            params![tag, person, chat],
        )? == 1)
    }

    /// The rules that could cover an action tagged `tag` in `chat` owned by
    /// `owner` (key two candidates; the claim checks them again).
    pub fn rules_covering(&self, tag: &str, chat: &str, owner: &str) -> anyhow::Result<Vec<Rule>> {
        let conn = self.lock();
        let mut st = conn.prepare_cached(&format!(
            "SELECT {RULE_COLUMNS} FROM rules
             WHERE tag = ?1 AND (chat = ?2 OR (chat IS NULL AND person = ?3)) ORDER BY id"
        ))?;
        let rows = st.query_map(params![tag, chat, owner], rule_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The rules `person` may see: their own, and those scoped to chats
    /// they own.
    pub fn rules_for(&self, person: &str) -> anyhow::Result<Vec<Rule>> {
        let conn = self.lock();
        let mut st = conn.prepare_cached(&format!(
            "SELECT {RULE_COLUMNS} FROM rules
             WHERE person = ?1 OR chat IN (SELECT name FROM chats WHERE owner = ?1)
             ORDER BY tag, id"
        ))?;
        let rows = st.query_map([person], rule_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every rule (operator's view).
    pub fn rules(&self) -> anyhow::Result<Vec<Rule>> {
        let conn = self.lock();
        let mut st = conn.prepare_cached(&format!(
            "SELECT {RULE_COLUMNS} FROM rules ORDER BY tag, id"
        ))?;
        let rows = st.query_map([], rule_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Start an agent run (before its first turn, so the turn can name it).
    pub fn start_run(
        &self,
        chat: &str,
        gadget: &str,
        task: &str,
        person: &str,
    ) -> anyhow::Result<i64> {
        let conn = self.lock();
        conn.execute(
            "INSERT INTO agent_runs (chat, gadget, task, state, awaited, turns, person, updated_at)
             VALUES (?1, ?2, ?3, 'running', '[]', 0, ?4, ?5)",
            params![chat, gadget, task, person, now_ms()],
        )?;
        Ok(conn.last_insert_rowid())
    }

    /// Record a run after a turn: `state` (the harness decides it: waiting
    /// on `awaited`, or done).
    pub fn save_run(
        &self,
        id: i64,
        state: AgentRunState,
        awaited: &[i64],
        output: &str,
    ) -> anyhow::Result<()> {
        let awaited = serde_json::to_string(awaited)?;
        // A turn may answer megabytes; the run keeps a capped copy (A5).
        let output = super::cut(output, super::MAX_OUTPUT_BYTES, "output");
        self.lock().execute(
            "UPDATE agent_runs SET state = ?2, awaited = ?3, turns = turns + 1,
               last_output = ?4, updated_at = ?5 WHERE id = ?1",
            params![id, state, awaited, output, now_ms()],
        )?;
        Ok(())
    }

    pub fn run_record(&self, id: i64) -> anyhow::Result<Option<AgentRun>> {
        Ok(self
            .lock()
            .query_row(
                &format!("SELECT {RUN_COLUMNS} FROM agent_runs WHERE id = ?1"),
                [id],
                run_from_row,
            )
            .optional()?)
    }

    pub fn waiting_runs(&self) -> anyhow::Result<Vec<AgentRun>> {
        let conn = self.lock();
        let mut st = conn.prepare_cached(&format!(
            "SELECT {RUN_COLUMNS} FROM agent_runs WHERE state = 'waiting' ORDER BY id"
        ))?;
        let rows = st.query_map([], run_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn agent_runs(&self) -> anyhow::Result<Vec<AgentRun>> {
        let conn = self.lock();
        let mut st =
            conn.prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM agent_runs ORDER BY id"))?;
        let rows = st.query_map([], run_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Take a waiting run for resumption; only one taker wins.
    pub fn take_run(&self, id: i64) -> anyhow::Result<bool> {
        Ok(self.lock().execute(
            "UPDATE agent_runs SET state = 'running', updated_at = ?2 WHERE id = ?1 AND state = 'waiting'",
            params![id, now_ms()],
        )? == 1)
    }

    pub fn stop_run(&self, id: i64, why: &str) -> anyhow::Result<()> {
        self.lock().execute(
            "UPDATE agent_runs SET state = 'stopped', last_output = ?2, updated_at = ?3 WHERE id = ?1",
            params![id, why, now_ms()],
        )?;
        Ok(())
    }
}
