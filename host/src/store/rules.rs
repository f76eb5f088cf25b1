//! Auto-approval rules (key two) and agent runs, as stored.

use super::{Store, now_ms};
use rusqlite::{OptionalExtension as _, params};
use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct Rule {
    pub tag: String,
    pub enabled_by: String,
    pub enabled_at: i64,
}

/// A harness run (SPEC V2, V3).
#[derive(Clone, Debug, Serialize)]
pub struct AgentRun {
    pub id: i64,
    pub chat: String,
    pub gadget: String,
    pub task: String,
    pub state: String,
    pub awaited: Vec<i64>,
    pub turns: i64,
    pub last_output: Option<String>,
}

fn rule_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Rule> {
    Ok(Rule {
        tag: r.get(0)?,
        enabled_by: r.get(1)?,
        enabled_at: r.get(2)?,
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
    })
}

const RUN_COLUMNS: &str = "id, chat, gadget, task, state, awaited, turns, last_output";

impl Store {
    pub fn add_rule(&self, tag: &str, by: &str) -> anyhow::Result<()> {
        self.lock().execute(
            "INSERT INTO rules (tag, enabled_by, enabled_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (tag) DO UPDATE SET enabled_by = excluded.enabled_by,
               enabled_at = excluded.enabled_at",
            params![tag, by, now_ms()],
        )?;
        Ok(())
    }

    /// Remove a rule; false if there was none.
    pub fn remove_rule(&self, tag: &str) -> anyhow::Result<bool> {
        Ok(self
            .lock()
            .execute("DELETE FROM rules WHERE tag = ?1", [tag])?
            == 1)
    }

    pub fn rule(&self, tag: &str) -> anyhow::Result<Option<Rule>> {
        Ok(self
            .lock()
            .query_row(
                "SELECT tag, enabled_by, enabled_at FROM rules WHERE tag = ?1",
                [tag],
                rule_from_row,
            )
            .optional()?)
    }

    pub fn rules(&self) -> anyhow::Result<Vec<Rule>> {
        let conn = self.lock();
        let mut st =
            conn.prepare_cached("SELECT tag, enabled_by, enabled_at FROM rules ORDER BY tag")?;
        let rows = st.query_map([], rule_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Record a run after a turn: waiting on `awaited`, or done.
    pub fn save_run(
        &self,
        id: Option<i64>,
        chat: &str,
        gadget: &str,
        task: &str,
        awaited: &[i64],
        output: &str,
    ) -> anyhow::Result<i64> {
        let state = if awaited.is_empty() {
            "done"
        } else {
            "waiting"
        };
        let awaited = serde_json::to_string(awaited)?;
        // A turn may answer megabytes; the run keeps a capped copy (A5).
        let output = super::cut(output, super::MAX_OUTPUT_BYTES, "output");
        let output = output.as_str();
        let conn = self.lock();
        match id {
            None => {
                conn.execute(
                    "INSERT INTO agent_runs (chat, gadget, task, state, awaited, turns, last_output, updated_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6, ?7)",
                    params![chat, gadget, task, state, awaited, output, now_ms()],
                )?;
                Ok(conn.last_insert_rowid())
            }
            Some(id) => {
                conn.execute(
                    "UPDATE agent_runs SET state = ?2, awaited = ?3, turns = turns + 1,
                       last_output = ?4, updated_at = ?5 WHERE id = ?1",
                    params![id, state, awaited, output, now_ms()],
                )?;
                Ok(id)
            }
        }
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
