//! Hooks and their firings, as stored (SPEC H1, L1).
//!
//! A hook is a ledger entry (kind `hook`, the ledger's id sequence) with a
//! row in `hooks` for what the ledger's columns cannot hold. Enabling and
//! disabling apply the one authorization rule inside their transaction, as
//! rejecting an action does, so a person who lost the right a moment
//! before cannot change a hook. A schedule's firing is claimed by a
//! conditional UPDATE, so two `serve` processes never both fire it. Records
//! only: when a hook fires and what its turn may do is `crate::hooks`.

use super::words::{FiringOutcome, HookKind};
use super::{Store, now_ms};
use crate::access::{Need, Refusal};
use rusqlite::{Connection, OptionalExtension as _, TransactionBehavior, params};
use serde::Serialize;

/// A hook as people see it (never its secret).
#[derive(Clone, Debug, Serialize)]
pub struct Hook {
    /// The hook's id, in the ledger's sequence (it is a ledger entry).
    pub id: i64,
    /// The chat its turns run in.
    pub chat: String,
    /// The gatekeeper instance whose trigger it binds.
    pub gatekeeper: String,
    /// The trigger's name, as the gatekeeper declares it.
    pub trigger: String,
    /// The gadget each firing runs a turn of.
    pub gadget: String,
    /// `webhook` or `schedule`.
    pub kind: HookKind,
    /// A schedule's period.
    pub every_secs: Option<i64>,
    /// Whether it fires: a new hook is disabled until a person who may decide
    /// in the chat enables it (its prompt shown first).
    pub enabled: bool,
    /// Who enabled it (last): whose accounts its turns use.
    pub enabled_by: Option<String>,
    /// When it was (last) enabled, in ms since the epoch.
    pub enabled_at: Option<i64>,
    /// Who added it (`hook add`).
    pub created_by: String,
    /// When it was added, in ms since the epoch.
    pub created_at: i64,
    /// A schedule's next firing (while enabled).
    pub next_due_at: Option<i64>,
    /// How many times it fired (deliveries and schedules, refused ones too).
    pub firings: i64,
    /// When it last fired, if ever.
    pub last_fired_at: Option<i64>,
}

/// What `hook add` records.
#[derive(Clone, Debug)]
pub struct NewHook {
    /// The chat its turns will run in.
    pub chat: String,
    /// The gatekeeper instance declaring the trigger.
    pub gatekeeper: String,
    /// The trigger's name.
    pub trigger: String,
    /// The gadget to run.
    pub gadget: String,
    /// A schedule's period in seconds; `None` for a webhook.
    pub every_secs: Option<i64>,
    /// A webhook's URL token digest and signing secret.
    pub webhook: Option<(String, String)>,
    /// The person adding it.
    pub by: String,
}

/// One firing of a hook.
#[derive(Clone, Debug, Serialize)]
pub struct Firing {
    /// The firing's id.
    pub id: i64,
    /// The hook that fired.
    pub hook: i64,
    /// What fired it: `webhook` (a delivery) or `schedule`.
    pub cause: HookKind,
    /// `running`, then `done` or `failed`; `refused` if no turn ran.
    pub outcome: FiringOutcome,
    /// What the turn answered, or why it failed or was refused (capped).
    pub note: Option<String>,
    /// The person its turn acted for: who enabled the hook.
    pub person: String,
    /// When it fired, in ms since the epoch.
    pub fired_at: i64,
    /// When its turn ended.
    pub finished_at: Option<i64>,
}

/// Why a firing was not recorded (and nothing ran).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FiringRefusal {
    /// The same signed body was delivered before.
    Replayed,
    /// The hook is not enabled (any more).
    Disabled,
}

const HOOK_COLUMNS: &str = "h.id, h.chat, h.gatekeeper, h.trigger, h.gadget, h.kind, h.every_secs,
    h.enabled, h.enabled_by, h.enabled_at, h.created_by, h.created_at, h.next_due_at,
    (SELECT count(*) FROM hook_firings f WHERE f.hook = h.id),
    (SELECT max(fired_at) FROM hook_firings f WHERE f.hook = h.id)";

fn hook_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Hook> {
    Ok(Hook {
        id: r.get(0)?,
        chat: r.get(1)?,
        gatekeeper: r.get(2)?,
        trigger: r.get(3)?,
        gadget: r.get(4)?,
        kind: r.get(5)?,
        every_secs: r.get(6)?,
        enabled: r.get::<_, i64>(7)? == 1,
        enabled_by: r.get(8)?,
        enabled_at: r.get(9)?,
        created_by: r.get(10)?,
        created_at: r.get(11)?,
        next_due_at: r.get(12)?,
        firings: r.get(13)?,
        last_fired_at: r.get(14)?,
    })
}

fn hook_in(conn: &Connection, id: i64) -> rusqlite::Result<Option<Hook>> {
    conn.prepare_cached(&format!(
        "SELECT {HOOK_COLUMNS} FROM hooks h WHERE h.id = ?1"
    ))?
    .query_row([id], hook_from_row)
    .optional()
}

fn firing_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Firing> {
    Ok(Firing {
        id: r.get(0)?,
        hook: r.get(1)?,
        cause: r.get(2)?,
        outcome: r.get(3)?,
        note: r.get(4)?,
        person: r.get(5)?,
        fired_at: r.get(6)?,
        finished_at: r.get(7)?,
    })
}

impl Store {
    /// Record a new, disabled hook: its ledger entry and its row, in one
    /// transaction. Returns its id (the ledger's).
    pub fn add_hook(&self, h: &NewHook) -> anyhow::Result<i64> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = now_ms();
        tx.execute(
            "INSERT INTO ledger (chat, kind, caller, person, gadget, gatekeeper, tool, created_at)
             VALUES (?1, 'hook', ?2, ?2, ?3, ?4, ?5, ?6)",
            params![h.chat, h.by, h.gadget, h.gatekeeper, h.trigger, now],
        )?;
        let id = tx.last_insert_rowid();
        let (kind, digest, secret) = match &h.webhook {
            Some((d, s)) => (HookKind::Webhook, Some(d.as_str()), Some(s.as_str())),
            None => (HookKind::Schedule, None, None),
        };
        tx.execute(
            "INSERT INTO hooks (id, chat, gatekeeper, trigger, gadget, kind, every_secs,
               token_digest, secret, created_by, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                id,
                h.chat,
                h.gatekeeper,
                h.trigger,
                h.gadget,
                kind,
                h.every_secs,
                digest,
                secret,
                h.by,
                now
            ],
        )?;
        tx.commit()?;
        Ok(id)
    }

    pub fn hook(&self, id: i64) -> anyhow::Result<Option<Hook>> {
        Ok(hook_in(&self.lock(), id)?)
    }

    /// Every hook (of one chat), oldest first.
    pub fn hooks(&self, chat: Option<&str>) -> anyhow::Result<Vec<Hook>> {
        let conn = self.lock();
        let mut st = conn.prepare_cached(&format!(
            "SELECT {HOOK_COLUMNS} FROM hooks h WHERE (?1 IS NULL OR h.chat = ?1) ORDER BY h.id"
        ))?;
        let rows = st.query_map([chat], hook_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The webhook whose URL token has this digest, with its signing secret.
    pub fn webhook_by_token(&self, digest: &str) -> anyhow::Result<Option<(Hook, String)>> {
        let conn = self.lock();
        let found: Option<(i64, String)> = conn
            .prepare_cached(
                "SELECT id, secret FROM hooks WHERE token_digest = ?1 AND kind = 'webhook'",
            )?
            .query_row([digest], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        let Some((id, secret)) = found else {
            return Ok(None);
        };
        Ok(hook_in(&conn, id)?.map(|h| (h, secret)))
    }

    /// Enable or disable hook `id` as `by`, who must be allowed to decide
    /// in its chat (the one rule, asked in the transaction). Enabling makes
    /// `by` the person its turns act for, and records them as the hook's
    /// `resolved-by` in the ledger; a schedule is next due one period
    /// later. `Ok(None)`: no hook `by` may see.
    pub fn set_hook_enabled(
        &self,
        id: i64,
        by: &str,
        enabled: bool,
    ) -> anyhow::Result<Option<Result<Hook, Refusal>>> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let Some(h) = hook_in(&tx, id)? else {
            return Ok(None);
        };
        let access = super::sharing::access(&tx, &h.chat, by)?;
        if !access.may_see() {
            return Ok(None);
        }
        if let Err(r) = access.require(Need::Hooks, &h.chat, by) {
            return Ok(Some(Err(r)));
        }
        let now = now_ms();
        if enabled {
            let due = h.every_secs.map(|s| now + s * 1000);
            tx.execute(
                "UPDATE hooks SET enabled = 1, enabled_by = ?2, enabled_at = ?3, next_due_at = ?4
                 WHERE id = ?1",
                params![id, by, now, due],
            )?;
            tx.execute(
                "UPDATE ledger SET resolved_by = ?2, decided_at = ?3 WHERE id = ?1 AND kind = 'hook'",
                params![id, by, now],
            )?;
        } else {
            tx.execute(
                "UPDATE hooks SET enabled = 0, next_due_at = NULL WHERE id = ?1",
                [id],
            )?;
        }
        let h = hook_in(&tx, id)?;
        tx.commit()?;
        Ok(h.map(Ok))
    }

    /// Disable a hook whatever anyone's standing (the kernel found that the
    /// person it acts for lost the right to decide in its chat).
    pub fn disable_hook(&self, id: i64) -> anyhow::Result<()> {
        self.lock().execute(
            "UPDATE hooks SET enabled = 0, next_due_at = NULL WHERE id = ?1",
            [id],
        )?;
        Ok(())
    }

    /// Record that hook `hook` fires now for `person`, if it is still
    /// enabled (checked in the transaction) and, for a delivery, its body
    /// was not delivered before. Returns the firing's id.
    pub fn begin_firing(
        &self,
        hook: i64,
        cause: HookKind,
        person: &str,
        body_digest: Option<&str>,
        owner: &str,
    ) -> anyhow::Result<Result<i64, FiringRefusal>> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let enabled: Option<(i64, Option<String>)> = tx
            .prepare_cached("SELECT enabled, enabled_by FROM hooks WHERE id = ?1")?
            .query_row([hook], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        if !matches!(&enabled, Some((1, Some(p))) if p == person) {
            return Ok(Err(FiringRefusal::Disabled));
        }
        if let Some(d) = body_digest {
            let seen: bool = tx
                .prepare_cached(
                    "SELECT EXISTS (SELECT 1 FROM hook_firings WHERE hook = ?1 AND body_digest = ?2)",
                )?
                .query_row(params![hook, d], |r| r.get(0))?;
            if seen {
                return Ok(Err(FiringRefusal::Replayed));
            }
        }
        tx.execute(
            "INSERT INTO hook_firings (hook, cause, outcome, body_digest, person, owner, fired_at)
             VALUES (?1, ?2, 'running', ?3, ?4, ?5, ?6)",
            params![hook, cause, body_digest, person, owner, now_ms()],
        )?;
        let id = tx.last_insert_rowid();
        tx.commit()?;
        Ok(Ok(id))
    }

    /// Record how a firing ended. `note` is cut to fit.
    pub fn finish_firing(
        &self,
        firing: i64,
        outcome: FiringOutcome,
        note: Option<&str>,
    ) -> anyhow::Result<()> {
        let note = note.map(|n| super::cut(n, 3500, "note"));
        self.lock().execute(
            "UPDATE hook_firings SET outcome = ?2, note = ?3, finished_at = ?4, owner = NULL
             WHERE id = ?1",
            params![firing, outcome, note, now_ms()],
        )?;
        Ok(())
    }

    /// Record a firing that ran nothing, with why.
    pub fn refused_firing(
        &self,
        hook: i64,
        cause: HookKind,
        person: &str,
        note: &str,
    ) -> anyhow::Result<()> {
        let now = now_ms();
        self.lock().execute(
            "INSERT INTO hook_firings (hook, cause, outcome, note, person, fired_at, finished_at)
             VALUES (?1, ?2, 'refused', ?3, ?4, ?5, ?5)",
            params![hook, cause, super::cut(note, 3500, "note"), person, now],
        )?;
        Ok(())
    }

    /// A hook's firings, oldest first.
    pub fn firings(&self, hook: i64) -> anyhow::Result<Vec<Firing>> {
        let conn = self.lock();
        let mut st = conn.prepare_cached(
            "SELECT id, hook, cause, outcome, note, person, fired_at, finished_at
             FROM hook_firings WHERE hook = ?1 ORDER BY id",
        )?;
        let rows = st.query_map([hook], firing_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Claim every enabled schedule that is due at `now`: each is moved to
    /// its next period by a conditional UPDATE, and only the hooks this
    /// call moved are returned (another process that claimed one first
    /// fires it instead).
    pub fn claim_due_schedules(&self, now: i64) -> anyhow::Result<Vec<Hook>> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let due: Vec<(i64, i64)> = {
            let mut st = tx.prepare_cached(
                "SELECT id, every_secs FROM hooks
                 WHERE kind = 'schedule' AND enabled = 1 AND next_due_at IS NOT NULL
                   AND next_due_at <= ?1",
            )?;
            st.query_map([now], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()?
        };
        let mut out = Vec::new();
        for (id, every) in due {
            let n = tx.execute(
                "UPDATE hooks SET next_due_at = ?2
                 WHERE id = ?1 AND enabled = 1 AND next_due_at <= ?3",
                params![id, now + every * 1000, now],
            )?;
            if n == 1
                && let Some(h) = hook_in(&tx, id)?
            {
                out.push(h);
            }
        }
        tx.commit()?;
        Ok(out)
    }

    /// Fail every firing left `running` by a process that is gone: its
    /// turn stopped with it (what it staged stays staged).
    pub fn recover_firings(&self, is_alive: impl Fn(&str) -> bool) -> anyhow::Result<usize> {
        let running: Vec<(i64, Option<String>)> = {
            let conn = self.lock();
            let mut st = conn
                .prepare_cached("SELECT id, owner FROM hook_firings WHERE outcome = 'running'")?;
            st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()?
        };
        let mut n = 0;
        for (id, owner) in running {
            if owner.as_deref().is_some_and(&is_alive) {
                continue;
            }
            n += self.lock().execute(
                "UPDATE hook_firings SET outcome = 'failed', finished_at = ?2, owner = NULL,
                   note = 'interrupted: the host stopped during this turn; what it staged before stays staged'
                 WHERE id = ?1 AND outcome = 'running'",
                params![id, now_ms()],
            )?;
        }
        Ok(n)
    }
}
