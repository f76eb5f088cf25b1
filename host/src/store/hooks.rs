//! Hooks and their firings, as stored (SPEC H1, L1).
//!
//! A hook is a ledger entry (kind `hook`, the ledger's id sequence) with a
//! row in `hooks` for what the ledger's columns cannot hold. Enabling and
//! disabling apply the one authorization rule inside their transaction, as
//! rejecting an action does, so a person who lost the right a moment
//! before cannot change a hook. A schedule's firing is claimed by a
//! conditional UPDATE, so two `serve` processes never both fire it, and a
//! delivery's firing is one insert that a replayed body cannot repeat (the
//! `hook_firings_once` index). Records only: when a hook fires and what its
//! turn may do is `crate::hooks`.
//!
//! Every statement is written once over [`Sql`] for both engines: on
//! PostgreSQL, where writers do not exclude each other, a decision that
//! reads a hook's row before writing (enabling, firing) first locks that
//! row (`FOR UPDATE`), as SQLite's `IMMEDIATE` transactions already do for
//! the whole file.

use super::sealed;
use super::sql::{Hold, Row, Sql, args};
use super::words::{FiringOutcome, HookKind};
use super::{Store, now_ms};
use crate::access::{Need, Refusal};
use crate::seal::{Key, Place};
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
    /// The SHA-256 of the gadget's component it runs: the one installed
    /// under `gadget` when the hook was added, and again when it was (last)
    /// enabled. A gadget re-installed under that name since is another
    /// component, which the hook does not run until a person who was shown
    /// it enables the hook again.
    pub gadget_digest: Option<String>,
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
    /// The digest of the component installed under `gadget` now: what the
    /// hook runs until it is enabled again.
    pub gadget_digest: String,
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

/// What a firing's note may hold (the column's CHECK allows 4096 characters;
/// the cut's own note fits in the rest).
const MAX_NOTE_BYTES: usize = 3500;

impl Store {
    /// Record a new, disabled hook: its ledger entry and its row, in one
    /// transaction. Returns its id (the ledger's).
    pub fn add_hook(&self, h: &NewHook) -> anyhow::Result<i64> {
        self.write(|db| add_hook_in(db, &self.key, h, now_ms()))
    }

    pub fn hook(&self, id: i64) -> anyhow::Result<Option<Hook>> {
        self.with(|db| hook_in(db, id))
    }

    /// Every hook (of one chat), oldest first.
    pub fn hooks(&self, chat: Option<&str>) -> anyhow::Result<Vec<Hook>> {
        self.with(|db| hooks_in(db, chat))
    }

    /// The webhook whose URL token has this digest, with its signing secret.
    pub fn webhook_by_token(&self, digest: &str) -> anyhow::Result<Option<(Hook, String)>> {
        self.with(|db| webhook_by_token_in(db, &self.key, digest))
    }

    /// Enable or disable hook `id` as `by`, who must be allowed to decide
    /// in its chat (the one rule, asked in the transaction). Enabling makes
    /// `by` the person its turns act for, and records them as the hook's
    /// `resolved-by` in the ledger; a schedule is next due one period
    /// later. `Ok(None)`: no hook `by` may see.
    ///
    /// Enabling pins the component installed under the hook's gadget name
    /// now (its digest), the code its turns will run; with `shown`, the
    /// digest the person was shown in the hook's prompt, it must be that
    /// one (a re-install while they read is refused, and nothing changes).
    pub fn set_hook_enabled(
        &self,
        id: i64,
        by: &str,
        enabled: bool,
        shown: Option<&str>,
    ) -> anyhow::Result<Option<Result<Hook, Refusal>>> {
        self.write(|db| set_hook_enabled_in(db, id, by, enabled, shown, now_ms()))
    }

    /// Disable a hook whatever anyone's standing (the kernel found that the
    /// person it acts for lost the right to decide in its chat).
    pub fn disable_hook(&self, id: i64) -> anyhow::Result<()> {
        self.with(|db| disable_hook_in(db, id))
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
        self.write(|db| begin_firing_in(db, hook, cause, person, body_digest, owner, now_ms()))
    }

    /// Record how a firing ended. `note` is cut to fit.
    pub fn finish_firing(
        &self,
        firing: i64,
        outcome: FiringOutcome,
        note: Option<&str>,
    ) -> anyhow::Result<()> {
        self.with(|db| finish_firing_in(db, firing, outcome, note, now_ms()))
    }

    /// Record a firing that ran nothing, with why.
    pub fn refused_firing(
        &self,
        hook: i64,
        cause: HookKind,
        person: &str,
        note: &str,
    ) -> anyhow::Result<()> {
        self.with(|db| refused_firing_in(db, hook, cause, person, note, now_ms()))
    }

    /// A hook's firings, oldest first.
    pub fn firings(&self, hook: i64) -> anyhow::Result<Vec<Firing>> {
        self.with(|db| firings_in(db, hook))
    }

    /// Claim every enabled schedule that is due at `now`: each is moved to
    /// its next period by a conditional UPDATE, and only the hooks this
    /// call moved are returned (another process that claimed one first
    /// fires it instead).
    pub fn claim_due_schedules(&self, now: i64) -> anyhow::Result<Vec<Hook>> {
        self.write(|db| claim_due_schedules_in(db, now))
    }

    /// Fail every firing left `running` by a process that is gone: its
    /// turn stopped with it (what it staged stays staged).
    pub fn recover_firings(&self, is_present: &super::IsPresent<'_>) -> anyhow::Result<usize> {
        self.with(|db| recover_firings_in(db, is_present, now_ms()))
    }
}

// The statements, written once for both engines (`store::sql`).

const HOOK_COLUMNS: &str = "h.id, h.chat, h.gatekeeper, h.trigger, h.gadget, h.kind, h.every_secs,
    h.enabled, h.enabled_by, h.enabled_at, h.created_by, h.created_at, h.next_due_at,
    (SELECT count(*) FROM hook_firings f WHERE f.hook = h.id),
    (SELECT max(fired_at) FROM hook_firings f WHERE f.hook = h.id), h.gadget_digest";

fn hook_from_row(r: &Row) -> anyhow::Result<Hook> {
    Ok(Hook {
        id: r.get(0)?,
        chat: r.get(1)?,
        gatekeeper: r.get(2)?,
        trigger: r.get(3)?,
        gadget: r.get(4)?,
        kind: HookKind::from_stored(&r.get::<String>(5)?),
        every_secs: r.get(6)?,
        enabled: r.get::<i64>(7)? == 1,
        enabled_by: r.get(8)?,
        enabled_at: r.get(9)?,
        created_by: r.get(10)?,
        created_at: r.get(11)?,
        next_due_at: r.get(12)?,
        firings: r.get(13)?,
        last_fired_at: r.get(14)?,
        gadget_digest: r.get(15)?,
    })
}

fn firing_from_row(r: &Row) -> anyhow::Result<Firing> {
    Ok(Firing {
        id: r.get(0)?,
        hook: r.get(1)?,
        cause: HookKind::from_stored(&r.get::<String>(2)?),
        outcome: FiringOutcome::from_stored(&r.get::<String>(3)?),
        note: r.get(4)?,
        person: r.get(5)?,
        fired_at: r.get(6)?,
        finished_at: r.get(7)?,
    })
}

fn add_hook_in(db: &dyn Sql, key: &Key, h: &NewHook, now: i64) -> anyhow::Result<i64> {
    let id: i64 = db
        .row(
            "INSERT INTO ledger (chat, kind, caller, person, gadget, gatekeeper, tool, created_at)
             VALUES (?1, 'hook', ?2, ?2, ?3, ?4, ?5, ?6)
             RETURNING id",
            args![h.chat, h.by, h.gadget, h.gatekeeper, h.trigger, now],
        )?
        .ok_or_else(|| anyhow::anyhow!("the ledger returned no id for the new hook"))?
        .get(0)?;
    let row = id.to_string();
    if h.webhook.is_some() {
        sealed::check_key_in(db, key)?;
    }
    let (kind, digest, secret) = match &h.webhook {
        Some((d, s)) => (
            HookKind::Webhook,
            Some(d.as_str()),
            Some(key.seal_text(Place::new(sealed::HOOKS, &row), s)?),
        ),
        None => (HookKind::Schedule, None, None),
    };
    db.exec(
        "INSERT INTO hooks (id, chat, gatekeeper, trigger, gadget, kind, every_secs,
           token_digest, secret, created_by, created_at, gadget_digest)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        args![
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
            now,
            h.gadget_digest
        ],
    )?;
    Ok(id)
}

fn hook_in(db: &dyn Sql, id: i64) -> anyhow::Result<Option<Hook>> {
    db.row(
        &format!("SELECT {HOOK_COLUMNS} FROM hooks h WHERE h.id = ?1"),
        args![id],
    )?
    .map(|r| hook_from_row(&r))
    .transpose()
}

fn hooks_in(db: &dyn Sql, chat: Option<&str>) -> anyhow::Result<Vec<Hook>> {
    let rows = match chat {
        Some(chat) => db.rows(
            &format!("SELECT {HOOK_COLUMNS} FROM hooks h WHERE h.chat = ?1 ORDER BY h.id"),
            args![chat],
        )?,
        None => db.rows(
            &format!("SELECT {HOOK_COLUMNS} FROM hooks h ORDER BY h.id"),
            args![],
        )?,
    };
    rows.iter().map(hook_from_row).collect()
}

fn webhook_by_token_in(
    db: &dyn Sql,
    key: &Key,
    digest: &str,
) -> anyhow::Result<Option<(Hook, String)>> {
    let found: Option<(i64, String)> = db
        .row(
            "SELECT id, secret FROM hooks WHERE token_digest = ?1 AND kind = 'webhook'",
            args![digest],
        )?
        .map(|r| Ok::<_, anyhow::Error>((r.get(0)?, r.get(1)?)))
        .transpose()?;
    let Some((id, secret)) = found else {
        return Ok(None);
    };
    let secret = key
        .open_text(Place::new(sealed::HOOKS, &id.to_string()), &secret)?
        .to_string();
    Ok(hook_in(db, id)?.map(|h| (h, secret)))
}

/// Hold hook `id`'s row until the transaction ends, so that what is read
/// of it (whether it is enabled, and for whom) stays true while deciding:
/// on PostgreSQL by locking the row; SQLite's writing transaction already
/// excludes every other writer. Whether the hook exists.
fn hold_hook(db: &dyn Sql, id: i64) -> anyhow::Result<Option<(bool, Option<String>)>> {
    db.row_held(
        "SELECT enabled, enabled_by FROM hooks WHERE id = ?1",
        args![id],
        Hold::Update,
    )?
    .map(|r| Ok((r.get::<i64>(0)? == 1, r.get(1)?)))
    .transpose()
}

fn set_hook_enabled_in(
    db: &dyn Sql,
    id: i64,
    by: &str,
    enabled: bool,
    shown: Option<&str>,
    now: i64,
) -> anyhow::Result<Option<Result<Hook, Refusal>>> {
    if hold_hook(db, id)?.is_none() {
        return Ok(None);
    }
    let Some(h) = hook_in(db, id)? else {
        return Ok(None);
    };
    let access = super::sharing::access(db, &h.chat, by)?;
    if !access.may_see() {
        return Ok(None);
    }
    if let Err(r) = access.require(Need::Hooks, &h.chat, by) {
        return Ok(Some(Err(r)));
    }
    if enabled {
        let Some(code) = super::registry::gadget_in(db, &h.gadget)?.map(|g| g.digest) else {
            anyhow::bail!(
                "gadget {:?} is not installed, so hook {id} has nothing to run; install it, then enable the hook",
                h.gadget
            );
        };
        if let Some(shown) = shown
            && shown != code
        {
            anyhow::bail!(
                "gadget {:?} was re-installed while hook {id}'s prompt was shown (it is now sha256 {code}); nothing was enabled: show the hook again (`gatehouse hook show {id}`) and enable what it shows",
                h.gadget
            );
        }
        let due = h.every_secs.map(|s| now + s * 1000);
        db.exec(
            "UPDATE hooks SET enabled = 1, enabled_by = ?2, enabled_at = ?3, next_due_at = ?4,
               gadget_digest = ?5
             WHERE id = ?1",
            args![id, by, now, due, code],
        )?;
        db.exec(
            "UPDATE ledger SET resolved_by = ?2, decided_at = ?3 WHERE id = ?1 AND kind = 'hook'",
            args![id, by, now],
        )?;
    } else {
        disable_hook_in(db, id)?;
    }
    Ok(hook_in(db, id)?.map(Ok))
}

fn disable_hook_in(db: &dyn Sql, id: i64) -> anyhow::Result<()> {
    db.exec(
        "UPDATE hooks SET enabled = 0, next_due_at = NULL WHERE id = ?1",
        args![id],
    )?;
    Ok(())
}

/// The hook's row is held while deciding (see [`hold_hook`]), so a firing
/// is never recorded for a hook disabled a moment before. A delivery's
/// body is recorded by one insert that the `hook_firings_once` index makes
/// happen once: of two processes handed the same signed body at once, on
/// either engine, one records the firing and the other finds it replayed.
fn begin_firing_in(
    db: &dyn Sql,
    hook: i64,
    cause: HookKind,
    person: &str,
    body_digest: Option<&str>,
    owner: &str,
    now: i64,
) -> anyhow::Result<Result<i64, FiringRefusal>> {
    let held = hold_hook(db, hook)?;
    if !matches!(&held, Some((true, Some(p))) if p == person) {
        return Ok(Err(FiringRefusal::Disabled));
    }
    let recorded = db.row(
        "INSERT INTO hook_firings (hook, cause, outcome, body_digest, person, owner, fired_at)
         VALUES (?1, ?2, 'running', ?3, ?4, ?5, ?6)
         ON CONFLICT DO NOTHING
         RETURNING id",
        args![hook, cause, body_digest, person, owner, now],
    )?;
    match recorded {
        Some(r) => Ok(Ok(r.get(0)?)),
        None => Ok(Err(FiringRefusal::Replayed)),
    }
}

fn finish_firing_in(
    db: &dyn Sql,
    firing: i64,
    outcome: FiringOutcome,
    note: Option<&str>,
    now: i64,
) -> anyhow::Result<()> {
    let note = note.map(|n| super::cut(n, MAX_NOTE_BYTES, "note"));
    db.exec(
        "UPDATE hook_firings SET outcome = ?2, note = ?3, finished_at = ?4, owner = NULL
         WHERE id = ?1",
        args![firing, outcome, note, now],
    )?;
    Ok(())
}

fn refused_firing_in(
    db: &dyn Sql,
    hook: i64,
    cause: HookKind,
    person: &str,
    note: &str,
    now: i64,
) -> anyhow::Result<()> {
    db.exec(
        "INSERT INTO hook_firings (hook, cause, outcome, note, person, fired_at, finished_at)
         VALUES (?1, ?2, 'refused', ?3, ?4, ?5, ?5)",
        args![
            hook,
            cause,
            super::cut(note, MAX_NOTE_BYTES, "note"),
            person,
            now
        ],
    )?;
    Ok(())
}

fn firings_in(db: &dyn Sql, hook: i64) -> anyhow::Result<Vec<Firing>> {
    db.rows(
        "SELECT id, hook, cause, outcome, note, person, fired_at, finished_at
         FROM hook_firings WHERE hook = ?1 ORDER BY id",
        args![hook],
    )?
    .iter()
    .map(firing_from_row)
    .collect()
}

/// The UPDATE's WHERE clause is the claim: of any number of processes
/// claiming at once, on either engine, one moves each schedule
/// (PostgreSQL re-checks the clause on a row another claimer just moved).
/// The schedules are claimed in id order, so two claimers never wait on
/// each other's rows crosswise.
fn claim_due_schedules_in(db: &dyn Sql, now: i64) -> anyhow::Result<Vec<Hook>> {
    let due: Vec<(i64, i64)> = db
        .rows(
            "SELECT id, every_secs FROM hooks
             WHERE kind = 'schedule' AND enabled = 1 AND next_due_at IS NOT NULL
               AND next_due_at <= ?1
             ORDER BY id",
            args![now],
        )?
        .iter()
        .map(|r| Ok((r.get(0)?, r.get(1)?)))
        .collect::<anyhow::Result<_>>()?;
    let mut out = Vec::new();
    for (id, every) in due {
        let n = db.exec(
            "UPDATE hooks SET next_due_at = ?2
             WHERE id = ?1 AND enabled = 1 AND next_due_at <= ?3",
            args![id, now + every * 1000, now],
        )?;
        if n == 1
            && let Some(h) = hook_in(db, id)?
        {
            out.push(h);
        }
    }
    Ok(out)
}

fn recover_firings_in(
    db: &dyn Sql,
    is_present: &super::IsPresent<'_>,
    now: i64,
) -> anyhow::Result<usize> {
    let running: Vec<(i64, Option<String>)> = db
        .rows(
            "SELECT id, owner FROM hook_firings WHERE outcome = 'running'",
            args![],
        )?
        .iter()
        .map(|r| Ok((r.get(0)?, r.get(1)?)))
        .collect::<anyhow::Result<_>>()?;
    let mut n = 0;
    for (id, owner) in running {
        if let Some(host) = owner.as_deref()
            && is_present(db, host)?
        {
            continue;
        }
        n += db.exec(
            "UPDATE hook_firings SET outcome = 'failed', finished_at = ?2, owner = NULL,
               note = 'interrupted: the host stopped during this turn; what it staged before stays staged'
             WHERE id = ?1 AND outcome = 'running'",
            args![id, now],
        )?;
    }
    Ok(usize::try_from(n)?)
}

#[cfg(test)]
mod on_both_engines {
    use super::*;
    use crate::store::suite::{Backend, raced, runtime};
    use std::sync::{Arc, Barrier};
    use std::time::Duration;

    /// Ana's chat `c`, with bob a stranger to it.
    async fn chat(b: &Backend) {
        b.run(|db| {
            for user in ["ana", "bob"] {
                db.exec(
                    "INSERT INTO users (name, created_at) VALUES (?1, 0)",
                    args![user],
                )?;
            }
            db.exec(
                "INSERT INTO gadgets (name, digest, installed_at) VALUES (?1, ?2, 0)
                 ON CONFLICT DO NOTHING",
                args!["triage", "d".repeat(64)],
            )?;
            db.exec(
                "INSERT INTO chats (name, owner, created_at) VALUES ('c', 'ana', 0)",
                args![],
            )
        })
        .await
        .expect("a chat");
    }

    /// A new hook of `c` added by ana: a webhook with a token digest made
    /// of `token`, else a schedule every `every` seconds.
    async fn add(b: &Backend, token: Option<char>, every: Option<i64>) -> i64 {
        let h = NewHook {
            chat: "c".into(),
            gatekeeper: "g".into(),
            trigger: "pinged".into(),
            gadget: "triage".into(),
            gadget_digest: "d".repeat(64),
            every_secs: every,
            webhook: token.map(|t| (t.to_string().repeat(64), "signing-key".into())),
            by: "ana".into(),
        };
        b.run(move |db| add_hook_in(db, &crate::seal::test_key(), &h, 5))
            .await
            .expect("a hook")
    }

    async fn enable(
        b: &Backend,
        id: i64,
        by: &'static str,
        now: i64,
    ) -> Option<Result<Hook, Refusal>> {
        b.run(move |db| set_hook_enabled_in(db, id, by, true, None, now))
            .await
            .expect("set")
    }

    /// SPEC H1: a hook is pinned to the component its gadget's name held
    /// when it was added, and enabling pins what the name holds then: only
    /// the digest the person was shown (a re-install while they read is
    /// refused, and nothing changes), and never nothing (a gadget no longer
    /// installed is refused).
    #[test]
    fn enabling_a_hook_pins_the_code_its_person_was_shown() {
        runtime().block_on(async {
            for b in Backend::both().await {
                let e = b.name();
                chat(&b).await;
                let id = add(&b, None, Some(60)).await;
                let (old, new) = ("d".repeat(64), "e".repeat(64));
                let h = b.run(move |db| hook_in(db, id)).await.expect("read");
                assert_eq!(h.and_then(|h| h.gadget_digest), Some(old.clone()), "{e}");
                let reinstall = |digest: String| {
                    b.run(move |db| {
                        db.exec(
                            "UPDATE gadgets SET digest = ?1 WHERE name = 'triage'",
                            args![digest],
                        )
                    })
                };
                reinstall(new.clone()).await.expect("re-installed");
                // Shown the old code, enabling is refused, and nothing changes.
                let o = old.clone();
                let refused = b
                    .run(move |db| set_hook_enabled_in(db, id, "ana", true, Some(&o), 10))
                    .await;
                let err = format!("{:#}", refused.expect_err("refused"));
                assert!(err.contains("was re-installed while hook"), "{e}: {err}");
                let h = b
                    .run(move |db| hook_in(db, id))
                    .await
                    .expect("read")
                    .expect("the hook");
                assert_eq!(
                    (h.enabled, h.gadget_digest),
                    (false, Some(old.clone())),
                    "{e}"
                );
                // Shown the new code, it pins the new code.
                let n = new.clone();
                let h = b
                    .run(move |db| set_hook_enabled_in(db, id, "ana", true, Some(&n), 11))
                    .await
                    .expect("enabled")
                    .and_then(Result::ok)
                    .unwrap_or_else(|| panic!("{e}: enabled"));
                assert_eq!(
                    (h.enabled, h.gadget_digest),
                    (true, Some(new.clone())),
                    "{e}"
                );
                // No gadget under the name: nothing to enable.
                b.run(|db| db.exec("DELETE FROM gadgets WHERE name = 'triage'", args![]))
                    .await
                    .expect("removed");
                let refused = b
                    .run(move |db| set_hook_enabled_in(db, id, "ana", true, None, 12))
                    .await;
                let err = format!("{:#}", refused.expect_err("refused"));
                assert!(err.contains("is not installed"), "{e}: {err}");
            }
        });
    }

    /// A hook is added disabled; only a person who may decide in its chat
    /// enables it, who becomes the person its turns act for; its binding
    /// (chat, gatekeeper, trigger, gadget, kind, token, secret) never
    /// changes: the schema's trigger refuses on both engines.
    #[test]
    fn a_hook_is_enabled_by_who_may_decide_and_its_binding_never_changes() {
        runtime().block_on(async {
            for b in Backend::both().await {
                let e = b.name();
                chat(&b).await;
                let web = add(&b, Some('a'), None).await;
                let every = add(&b, None, Some(60)).await;
                assert!(web < every, "{e}: ids from the ledger's sequence");
                let h = b.run(move |db| hook_in(db, web)).await.expect("read");
                let h = h.unwrap_or_else(|| panic!("{e}: the hook"));
                assert_eq!(
                    (h.kind, h.enabled, h.firings, h.last_fired_at, h.created_at),
                    (HookKind::Webhook, false, 0, None, 5),
                    "{e}"
                );
                let (found, secret) = b
                    .run(|db| webhook_by_token_in(db, &crate::seal::test_key(), &"a".repeat(64)))
                    .await
                    .expect("read")
                    .unwrap_or_else(|| panic!("{e}: found by its token's digest"));
                assert_eq!((found.id, secret.as_str()), (web, "signing-key"), "{e}");
                assert!(
                    b.run(|db| webhook_by_token_in(db, &crate::seal::test_key(), &"b".repeat(64)))
                        .await
                        .expect("read")
                        .is_none(),
                    "{e}"
                );
                let all = b.run(|db| hooks_in(db, None)).await.expect("read");
                let of_c = b.run(|db| hooks_in(db, Some("c"))).await.expect("read");
                let of_d = b.run(|db| hooks_in(db, Some("d"))).await.expect("read");
                let ids = |hs: &[Hook]| hs.iter().map(|h| h.id).collect::<Vec<_>>();
                assert_eq!(ids(&all), vec![web, every], "{e}");
                assert_eq!(ids(&of_c), vec![web, every], "{e}");
                assert!(of_d.is_empty(), "{e}");

                // A stranger does not see it; a missing hook is none.
                assert!(enable(&b, every, "bob", 10).await.is_none(), "{e}");
                assert!(enable(&b, 9999, "ana", 10).await.is_none(), "{e}");
                let h = enable(&b, every, "ana", 10)
                    .await
                    .unwrap_or_else(|| panic!("{e}: seen"))
                    .unwrap_or_else(|r| panic!("{e}: refused: {r:?}"));
                assert_eq!(
                    (
                        h.enabled,
                        h.enabled_by.as_deref(),
                        h.enabled_at,
                        h.next_due_at
                    ),
                    (true, Some("ana"), Some(10), Some(10 + 60_000)),
                    "{e}"
                );
                let resolved: (Option<String>, Option<i64>) = b
                    .run(move |db| {
                        let r = db
                            .row(
                                "SELECT resolved_by, decided_at FROM ledger WHERE id = ?1",
                                args![every],
                            )?
                            .ok_or_else(|| anyhow::anyhow!("no ledger entry"))?;
                        Ok((r.get(0)?, r.get(1)?))
                    })
                    .await
                    .expect("read");
                assert_eq!(resolved, (Some("ana".into()), Some(10)), "{e}");
                let h = b
                    .run(move |db| set_hook_enabled_in(db, every, "ana", false, None, 11))
                    .await
                    .expect("set")
                    .and_then(Result::ok)
                    .unwrap_or_else(|| panic!("{e}: disabled"));
                assert_eq!((h.enabled, h.next_due_at), (false, None), "{e}");

                for (column, value) in [
                    ("chat", "'d'"),
                    ("gatekeeper", "'h'"),
                    ("trigger", "'other'"),
                    ("gadget", "'other'"),
                    ("kind", "'schedule'"),
                    (
                        "token_digest",
                        "'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb'",
                    ),
                    ("secret", "'another-key'"),
                ] {
                    let changed = b
                        .run(move |db| {
                            db.exec(
                                &format!("UPDATE hooks SET {column} = {value} WHERE id = ?1"),
                                args![web],
                            )
                        })
                        .await;
                    let refused = changed.expect_err(&format!("{e}: {column} changed"));
                    assert!(
                        format!("{refused:#}").contains("a hook's binding never changes"),
                        "{e}: {column}: {refused:#}"
                    );
                }
                let h = enable(&b, web, "ana", 12)
                    .await
                    .and_then(Result::ok)
                    .unwrap_or_else(|| panic!("{e}: enabled"));
                assert_eq!(
                    (h.chat.as_str(), h.trigger.as_str(), h.next_due_at),
                    ("c", "pinged", None),
                    "{e}: a webhook is never due"
                );
                b.run(move |db| disable_hook_in(db, web))
                    .await
                    .expect("disabled");
                let h = b.run(move |db| hook_in(db, web)).await.expect("read");
                assert!(h.is_some_and(|h| !h.enabled), "{e}");
            }
        });
    }

    /// Several processes handed the same signed delivery at once: one
    /// records its firing, every other finds it replayed; a firing is
    /// recorded only for the person who enabled the hook while it is
    /// enabled, never for a hook being disabled at that moment; a firing
    /// left running by a gone process is failed.
    #[test]
    fn a_delivery_fires_once_when_processes_race() {
        runtime().block_on(async {
            for b in Backend::both().await {
                let e = b.name();
                chat(&b).await;
                let web = add(&b, Some('a'), None).await;
                let body = "d".repeat(64);
                let fire = move |b: &Backend,
                                 person: &'static str,
                                 body: Option<String>,
                                 gate: Option<Arc<Barrier>>| {
                    let b = b.clone();
                    async move {
                        b.run(move |db| {
                            let fire = |db: &dyn Sql| {
                                begin_firing_in(
                                    db,
                                    web,
                                    HookKind::Webhook,
                                    person,
                                    body.as_deref(),
                                    "host-1",
                                    20,
                                )
                            };
                            match gate {
                                Some(gate) => raced(db, &gate, fire),
                                None => fire(db),
                            }
                        })
                        .await
                        .expect("a firing attempt")
                    }
                };
                assert_eq!(
                    fire(&b, "ana", Some(body.clone()), None).await,
                    Err(FiringRefusal::Disabled),
                    "{e}: a disabled hook never fires"
                );
                enable(&b, web, "ana", 10).await;
                assert_eq!(
                    fire(&b, "bob", Some(body.clone()), None).await,
                    Err(FiringRefusal::Disabled),
                    "{e}: only for whom enabled it"
                );
                let gate = Arc::new(Barrier::new(8));
                let racers: Vec<_> = (0..8)
                    .map(|_| tokio::spawn(fire(&b, "ana", Some(body.clone()), Some(gate.clone()))))
                    .collect();
                let mut fired = Vec::new();
                for r in racers {
                    match r.await.expect("joined") {
                        Ok(id) => fired.push(id),
                        Err(refusal) => assert_eq!(refusal, FiringRefusal::Replayed, "{e}"),
                    }
                }
                assert_eq!(fired.len(), 1, "{e}: fired {fired:?}");
                assert_eq!(
                    fire(&b, "ana", Some(body.clone()), None).await,
                    Err(FiringRefusal::Replayed),
                    "{e}"
                );
                let other = fire(&b, "ana", Some("e".repeat(64)), None)
                    .await
                    .unwrap_or_else(|r| panic!("{e}: another body fires: {r:?}"));
                let unsigned = fire(&b, "ana", None, None)
                    .await
                    .unwrap_or_else(|r| panic!("{e}: {r:?}"));
                let first = fired[0];
                b.run(move |db| {
                    finish_firing_in(db, first, FiringOutcome::Done, Some(&"x".repeat(5000)), 30)
                })
                .await
                .expect("finished");
                b.run(move |db| refused_firing_in(db, web, HookKind::Webhook, "ana", "no", 31))
                    .await
                    .expect("refused");
                let recovered = b
                    .run(move |db| recover_firings_in(db, &|_, owner| Ok(owner == "host-2"), 40))
                    .await
                    .expect("recovered");
                assert_eq!(recovered, 2, "{e}: the gone host's two running firings");
                let firings = b.run(move |db| firings_in(db, web)).await.expect("read");
                let seen: Vec<_> = firings
                    .iter()
                    .map(|f| (f.id, f.outcome, f.finished_at))
                    .collect();
                assert_eq!(firings.len(), 4, "{e}: {seen:?}");
                assert_eq!(
                    (firings[0].id, firings[0].outcome, firings[0].finished_at),
                    (first, FiringOutcome::Done, Some(30)),
                    "{e}"
                );
                let note = firings[0].note.as_deref().unwrap_or_default();
                assert!(note.len() < 4096 && note.contains("cut"), "{e}: {note}");
                for f in &firings[1..3] {
                    assert!([other, unsigned].contains(&f.id), "{e}: {seen:?}");
                    assert_eq!(
                        (f.outcome, f.finished_at),
                        (FiringOutcome::Failed, Some(40)),
                        "{e}"
                    );
                }
                assert_eq!(
                    (
                        firings[3].outcome,
                        firings[3].note.as_deref(),
                        firings[3].cause
                    ),
                    (FiringOutcome::Refused, Some("no"), HookKind::Webhook),
                    "{e}"
                );
                let h = b.run(move |db| hook_in(db, web)).await.expect("read");
                let h = h.unwrap_or_else(|| panic!("{e}: the hook"));
                assert_eq!((h.firings, h.last_fired_at), (4, Some(31)), "{e}");
                // A live host's firing is left running.
                let live = b
                    .run(move |db| {
                        begin_firing_in(db, web, HookKind::Webhook, "ana", None, "host-2", 50)
                    })
                    .await
                    .expect("fired");
                assert!(live.is_ok(), "{e}");
                let recovered = b
                    .run(move |db| recover_firings_in(db, &|_, owner| Ok(owner == "host-2"), 60))
                    .await
                    .expect("recovered");
                assert_eq!(recovered, 0, "{e}");

                // A delivery arriving while the hook is being disabled
                // waits for the disabling and is refused: it never records
                // a firing of a hook disabled before it committed.
                let gate = Arc::new(Barrier::new(1));
                let disabler = {
                    let b = b.clone();
                    tokio::spawn(async move {
                        b.run(move |db| raced(db, &gate, |db| disable_hook_in(db, web)))
                            .await
                    })
                };
                tokio::time::sleep(Duration::from_millis(30)).await;
                assert_eq!(
                    fire(&b, "ana", Some("f".repeat(64)), None).await,
                    Err(FiringRefusal::Disabled),
                    "{e}: fired while being disabled"
                );
                disabler.await.expect("joined").expect("disabled");
            }
        });
    }

    /// Several `serve` processes claim due schedules at once: each due
    /// schedule is claimed by exactly one of them, moved one period on,
    /// and a disabled schedule is never claimed.
    #[test]
    fn each_due_schedule_is_claimed_once_when_processes_race() {
        runtime().block_on(async {
            for b in Backend::both().await {
                let e = b.name();
                chat(&b).await;
                let (one, two, off) = (
                    add(&b, None, Some(60)).await,
                    add(&b, None, Some(120)).await,
                    add(&b, None, Some(60)).await,
                );
                for id in [one, two, off] {
                    enable(&b, id, "ana", 0).await;
                }
                b.run(move |db| disable_hook_in(db, off))
                    .await
                    .expect("off");
                let none = b
                    .run(|db| claim_due_schedules_in(db, 59_999))
                    .await
                    .expect("claimed");
                assert!(none.is_empty(), "{e}: nothing is due yet");
                let now = 120_000;
                let gate = Arc::new(Barrier::new(12));
                let claimers: Vec<_> = (0..12)
                    .map(|_| {
                        let (b, gate) = (b.clone(), gate.clone());
                        tokio::spawn(async move {
                            b.run(move |db| raced(db, &gate, |db| claim_due_schedules_in(db, now)))
                                .await
                        })
                    })
                    .collect();
                let mut claimed = Vec::new();
                for c in claimers {
                    for h in c.await.expect("joined").expect("a claim") {
                        claimed.push((h.id, h.next_due_at));
                    }
                }
                claimed.sort_unstable();
                assert_eq!(
                    claimed,
                    vec![(one, Some(now + 60_000)), (two, Some(now + 120_000))],
                    "{e}: each claimed once"
                );
                let again = b
                    .run(move |db| claim_due_schedules_in(db, now))
                    .await
                    .expect("claimed");
                assert!(again.is_empty(), "{e}");
            }
        });
    }
}
