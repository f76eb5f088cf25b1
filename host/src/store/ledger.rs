//! The ledger's observations and its queries (SPEC L1, L2, O1).

use super::sql::{Row, Sql, args};
use super::words::LedgerKind;
use super::{Store, now_ms};
use serde::Serialize;

/// One source of a read (SPEC S1): what the gatekeeper named, and whether
/// it is owner-only (O3). The fields are in the order the ledger has always
/// kept them (sorted), so entries written before and after read alike.
#[derive(Serialize)]
pub struct Source<'a> {
    /// The gatekeeper's id for it, kept whole (re-verified later, S2).
    pub id: &'a str,
    /// Owner-only: reading it latches the chat (O3).
    pub restricted: bool,
    /// What a person reads in the ledger.
    pub title: &'a str,
}

/// An observation's sources: the JSON array the ledger keeps, and whether
/// any of them is owner-only. Both are made here, from one list, so they
/// cannot disagree, and recording a read never parses its array back to
/// learn whether it latches the chat.
#[derive(Clone, Debug)]
pub struct Sources {
    json: String,
    restricted: bool,
}

impl Sources {
    /// The sources of a read of `list`.
    pub fn of(list: &[Source<'_>]) -> Sources {
        Sources {
            // A list of strings and booleans always serializes; were it
            // ever not to, the ledger's CHECK refuses the empty text and
            // the read is withheld.
            json: serde_json::to_string(list).unwrap_or_default(),
            restricted: list.iter().any(|s| s.restricted),
        }
    }
}

/// A read about to hand data to a gadget (SPEC O1).
#[derive(Clone, Debug)]
pub struct NewObservation {
    /// The chat whose observation set it joins (SPEC S1).
    pub chat: String,
    /// Who read, and for whom (SPEC C5).
    pub principal: crate::principal::Principal,
    /// The gadget the data is handed to, if a gadget's turn read it.
    pub gadget: Option<String>,
    /// The gatekeeper instance that served the read.
    pub gatekeeper: String,
    /// The tool called.
    pub tool: String,
    /// `server-annotation` for reads; `simulation` for a simulated
    /// action's provisional result; `default` for applied results.
    pub classified_by: &'static str,
    /// The gatekeeper's trust tier at the read.
    pub trust: super::Trust,
    /// What was read, as the ledger keeps it.
    pub sources: Sources,
    /// The account it ran under (`user/label`); `None`: the gatekeeper's own.
    pub account: Option<String>,
    /// For the hand-over of an applied action's result (SPEC A4).
    pub action_ref: Option<i64>,
    /// The size of what was handed over, in bytes (the data itself is never
    /// kept).
    pub result_bytes: usize,
    /// The audit row of a workflow step's allowed read (SPEC G7), written
    /// in the same commit as the observation.
    pub audit: Option<super::workflows::AuditRow>,
}

/// One ledger line, as `log` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct LedgerEntry {
    /// The entry's id, in the one sequence actions and observations share.
    pub id: i64,
    /// The chat it belongs to.
    pub chat: String,
    /// `action`, `observation` or `hook` (a hook's binding).
    pub kind: LedgerKind,
    /// The principal, as people read it (SPEC C5).
    pub caller: String,
    /// The person the principal acted for.
    pub person: String,
    /// The gadget whose turn made it, if any.
    pub gadget: Option<String>,
    /// The gatekeeper instance called.
    pub gatekeeper: Option<String>,
    /// The tool called.
    pub tool: Option<String>,
    /// Whose word classified the call (K4): `server-annotation`, `default`,
    /// or `simulation` for a provisional result.
    pub classified_by: Option<String>,
    /// The gatekeeper's trust tier at the time.
    pub trust: Option<String>,
    /// An action's state ([`crate::store::ActionState`] as text).
    pub state: Option<String>,
    /// An action claimed by a rule's two keys (SPEC U).
    pub auto_approved: bool,
    /// Who decided an action.
    pub resolved_by: Option<String>,
    /// For a failed action: whether it provably had no effect (SPEC P2).
    pub retryable: Option<bool>,
    /// Why an action failed, expired or was sent back.
    pub error: Option<String>,
    /// Why the last claim sent an action back to pending (SPEC P7).
    pub note: Option<String>,
    /// An observation's sources: `[{id, title, restricted}]`.
    pub sources: Option<serde_json::Value>,
    /// The account a read ran under (`user/label`; none: the gatekeeper's own).
    pub account: Option<String>,
    /// For an observation of an applied action's result: that action.
    pub action_ref: Option<i64>,
    /// The hook whose turn made this entry (SPEC L1).
    pub hook: Option<i64>,
    /// When it was written, in ms since the epoch.
    pub created_at: i64,
    /// When an action was decided.
    pub decided_at: Option<i64>,
    /// When an action's outcome was recorded.
    pub finished_at: Option<i64>,
}

/// What `log` asks for. Empty filter: everything.
#[derive(Clone, Debug, Default)]
pub struct LedgerFilter {
    /// Only this chat.
    pub chat: Option<String>,
    /// Only these chats (the ones the asking person may see); `None`: all.
    pub chats: Option<Vec<String>>,
    /// Only this kind (`action`, `observation`, `hook`).
    pub kind: Option<LedgerKind>,
    /// Actions this person approved (SPEC L2), from the decision history,
    /// which outlives pruned payloads.
    pub approved_by: Option<String>,
    /// Calls that went through on a server's own read-only claim (K5, L2).
    pub server_claims: bool,
    /// Only actions auto-approved by a rule (L2).
    pub auto_approved: bool,
    /// Observations made by this gadget (L2).
    pub observed_by: Option<String>,
    /// This hook's entry and everything its turns wrote (L1).
    pub hook: Option<i64>,
}

impl Store {
    pub fn ledger(&self, f: &LedgerFilter) -> anyhow::Result<Vec<LedgerEntry>> {
        let mut out = self.with(|db| ledger_in(db, f))?;
        // The set of chats a person may see is applied here rather than in
        // the statement: it is a list, which the two engines would spell
        // differently.
        if let Some(chats) = &f.chats {
            out.retain(|e| chats.contains(&e.chat));
        }
        Ok(out)
    }
}

/// The entries `f` selects, but for its `chats` list. An optional
/// filter is `CAST(?N AS type) IS NULL OR ...`: PostgreSQL must be told the
/// type of an argument that is only compared with NULL.
fn ledger_in(db: &dyn Sql, f: &LedgerFilter) -> anyhow::Result<Vec<LedgerEntry>> {
    if let Some(person) = &f.approved_by {
        // Everything a person approved, from the decision history: it
        // is never pruned, whatever happens to the actions' payloads.
        let rows = db.rows(
            "SELECT d.action, d.chat, 'action', COALESCE(l.caller, ''), COALESCE(l.person, ''),
                    l.gadget, d.gatekeeper, d.tool, l.classified_by, l.trust,
                    COALESCE(l.state, d.outcome, 'applying'), COALESCE(l.auto_approved, 0),
                    d.by, l.retryable, l.error, l.note, NULL, NULL,
                    COALESCE(l.created_at, d.at), d.at, l.finished_at, l.account, l.hook
             FROM decisions d LEFT JOIN ledger l ON l.id = d.action
             WHERE d.by = ?1 AND d.decision = 'approved'
               AND (CAST(?2 AS TEXT) IS NULL OR d.chat = ?2)
               AND (CAST(?3 AS BIGINT) IS NULL OR l.hook = ?3)
             ORDER BY d.action, d.id",
            args![person, f.chat, f.hook],
        )?;
        let mut out = rows
            .iter()
            .map(entry_from)
            .collect::<anyhow::Result<Vec<_>>>()?;
        out.dedup_by_key(|e| e.id);
        return Ok(out);
    }
    db.rows(
        "SELECT id, chat, kind, caller, person, gadget, gatekeeper, tool, classified_by, trust,
                state, auto_approved, resolved_by, retryable, error, note, sources, action_ref,
                created_at, decided_at, finished_at, account, hook
         FROM ledger
         WHERE (CAST(?1 AS TEXT) IS NULL OR chat = ?1)
           AND (CAST(?2 AS TEXT) IS NULL OR kind = ?2)
           AND (?3 = 0 OR (kind = 'observation' AND classified_by = 'server-annotation'))
           AND (?4 = 0 OR auto_approved = 1)
           AND (CAST(?5 AS TEXT) IS NULL OR (kind = 'observation' AND gadget = ?5))
           AND (CAST(?6 AS BIGINT) IS NULL OR (kind = 'hook' AND id = ?6) OR hook = ?6)
         ORDER BY id",
        args![
            f.chat,
            f.kind,
            f.server_claims,
            f.auto_approved,
            f.observed_by,
            f.hook
        ],
    )?
    .iter()
    .map(entry_from)
    .collect()
}

fn entry_from(r: &Row) -> anyhow::Result<LedgerEntry> {
    let sources: Option<String> = r.get(16)?;
    Ok(LedgerEntry {
        id: r.get(0)?,
        chat: r.get(1)?,
        kind: r.get(2)?,
        caller: r.get(3)?,
        person: r.get(4)?,
        gadget: r.get(5)?,
        gatekeeper: r.get(6)?,
        tool: r.get(7)?,
        classified_by: r.get(8)?,
        trust: r.get(9)?,
        state: r.get(10)?,
        auto_approved: r.get::<i64>(11)? == 1,
        resolved_by: r.get(12)?,
        retryable: r.get::<Option<i64>>(13)?.map(|v| v == 1),
        error: r.get(14)?,
        note: r.get(15)?,
        sources: sources.and_then(|s| serde_json::from_str(&s).ok()),
        action_ref: r.get(17)?,
        created_at: r.get(18)?,
        decided_at: r.get(19)?,
        finished_at: r.get(20)?,
        account: r.get(21)?,
        hook: r.get(22)?,
    })
}

/// [`Store::observe`] on the home's connection, which the caller holds.
pub(super) fn observe_in(
    conn: &mut rusqlite::Connection,
    o: &NewObservation,
) -> anyhow::Result<super::Observed> {
    // A plain read writes one row, and one statement is its own
    // transaction: a BEGIN and a COMMIT around it would cost two more
    // statements on the read path.
    if !needs_transaction(o) {
        let id = insert_observation(&*conn, o)?;
        return Ok(super::Observed::Recorded(id));
    }
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let observed = observe_tx(&tx, o)?;
    tx.commit()?;
    Ok(observed)
}

/// Whether recording `o` takes more than its one row: owner-only data
/// (which latches), a hand-over (recorded once), or a workflow's audit row.
fn needs_transaction(o: &NewObservation) -> bool {
    o.sources.restricted || o.action_ref.is_some() || o.audit.is_some()
}

/// Record `o` in the caller's writing transaction, on either engine.
pub(super) fn observe_tx(db: &dyn Sql, o: &NewObservation) -> anyhow::Result<super::Observed> {
    let restricted = o.sources.restricted;
    // Owner-only data is never admitted into a shared chat (SPEC O3);
    // checked in the transaction that would latch, so a concurrent
    // `share` either sees the latch or makes this read refused.
    if restricted && super::sharing::is_shared(db, &o.chat)? {
        return Ok(super::Observed::RestrictedInSharedChat);
    }
    // A hand-over is recorded once per action and caller: polling a
    // finished action again observes nothing new (SPEC A4).
    if let Some(action) = o.action_ref {
        let first = db.row(
            "SELECT id FROM ledger WHERE kind = 'observation' AND action_ref = ?1
               AND caller = ?2 AND chat = ?3 ORDER BY id LIMIT 1",
            args![action, o.principal.label(), o.chat],
        )?;
        if let Some(first) = first {
            return Ok(super::Observed::Recorded(first.get(0)?));
        }
    }
    let id = insert_observation(db, o)?;
    if let Some(a) = &o.audit {
        super::workflows::insert_invocation(db, &a.allowed())?;
    }
    // The latch and the observation are written together (SPEC O3).
    if restricted {
        db.exec(
            "UPDATE chats SET latched = 1 WHERE name = ?1",
            args![o.chat],
        )?;
    }
    Ok(super::Observed::Recorded(id))
}

/// The observation's ledger row; its id.
fn insert_observation(db: &dyn Sql, o: &NewObservation) -> anyhow::Result<i64> {
    db.insert(
        "INSERT INTO ledger (chat, kind, caller, person, gadget, gatekeeper, tool, classified_by,
           trust, sources, account, action_ref, result_bytes, created_at, hook)
         VALUES (?1, 'observation', ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
        args![
            o.chat,
            o.principal.label(),
            o.principal.acting_for(),
            o.gadget,
            o.gatekeeper,
            o.tool,
            o.classified_by,
            o.trust.as_str(),
            o.sources.json,
            o.account,
            o.action_ref,
            o.result_bytes as i64,
            now_ms(),
            o.principal.hook()
        ],
    )
}

impl Store {
    /// What the live view watches, chat by chat: fingerprints of the chat's
    /// open actions and of its workflow runs and requests. A fingerprint
    /// changes when anything a person's inbox or requests page shows
    /// changes; it names nothing but the chat.
    pub fn live_fingerprints(
        &self,
    ) -> anyhow::Result<std::collections::BTreeMap<String, (u64, u64)>> {
        use std::hash::{Hash as _, Hasher as _};
        let (actions, runs) = self.with(|db| {
            let actions = db.rows(
                "SELECT chat, id, state, COALESCE(note, '') FROM ledger
                 WHERE kind = 'action' AND state IN ('pending', 'applying') ORDER BY id",
                args![],
            )?;
            let runs = db.rows(
                "SELECT w.chat, 'run', w.id, w.state, w.updated_at FROM workflow_runs w
                 UNION ALL
                 SELECT w.chat, 'request', a.id, a.state, COALESCE(a.decided_at, a.created_at)
                   FROM approval_requests a JOIN workflow_runs w ON w.id = a.run
                 ORDER BY 1, 2, 3",
                args![],
            )?;
            Ok((actions, runs))
        })?;
        let mut inbox: std::collections::BTreeMap<
            String,
            std::collections::hash_map::DefaultHasher,
        > = Default::default();
        for r in actions {
            let (id, state, note) = (r.get::<i64>(1)?, r.get::<String>(2)?, r.get::<String>(3)?);
            (id, state, note).hash(inbox.entry(r.get::<String>(0)?).or_default());
        }
        let mut requests: std::collections::BTreeMap<
            String,
            std::collections::hash_map::DefaultHasher,
        > = Default::default();
        for r in runs {
            let (what, id, state, at) = (
                r.get::<String>(1)?,
                r.get::<i64>(2)?,
                r.get::<String>(3)?,
                r.get::<i64>(4)?,
            );
            (what, id, state, at).hash(requests.entry(r.get::<String>(0)?).or_default());
        }
        let mut out = std::collections::BTreeMap::new();
        for (chat, h) in inbox {
            out.entry(chat).or_insert((0, 0)).0 = h.finish();
        }
        for (chat, h) in requests {
            out.entry(chat).or_insert((0, 0)).1 = h.finish();
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::{Source, Sources};

    /// The array is what the ledger kept before `Sources` (keys sorted, as
    /// `serde_json::json!` wrote them), so old and new entries read alike;
    /// the restriction is any source's.
    #[test]
    fn sources_keep_their_old_text_and_know_their_restriction() {
        let list = [
            Source {
                id: "issues/7",
                restricted: false,
                title: "Issue \"7\"",
            },
            Source {
                id: "hr/salaries",
                restricted: true,
                title: "Salaries",
            },
        ];
        let made = Sources::of(&list);
        let old = serde_json::json!([
            {"id": "issues/7", "title": "Issue \"7\"", "restricted": false},
            {"id": "hr/salaries", "title": "Salaries", "restricted": true},
        ])
        .to_string();
        assert_eq!(made.json, old);
        assert!(made.restricted);
        assert!(!Sources::of(&list[..1]).restricted);
    }
}
