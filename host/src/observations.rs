//! Observations: every read is written down before its data is handed over
//! (SPEC O1), with what it touched (S1). A source marked `restricted` latches
//! the chat in the same transaction (O2, O3).
//!
//! Owns the shape of an observation record; may not call gatekeepers, and
//! writes only through the store (the kernel hands it the store, never
//! itself).

use crate::runtime::gatekeeper::wit;
use crate::store::{
    Action, GatekeeperRecord, NewObservation, Observed, Source, Sources, Store, Trust,
};
use crate::turn::Turn;

/// Record a read's observation. `Ok(Observed::Recorded)` means the data may
/// be handed over; anything else means it may not.
pub(crate) async fn record_read(
    store: &Store,
    turn: &Turn,
    g: &GatekeeperRecord,
    tool: &str,
    account: Option<String>,
    audit: Option<crate::store::workflows::AuditRow>,
    output: &wit::Output,
) -> anyhow::Result<Observed> {
    record(
        store,
        turn,
        g,
        tool,
        "server-annotation",
        account,
        audit,
        output,
    )
    .await
}

/// Record a simulated action's provisional result (SPEC V1) before it is
/// handed over: a simulation reads the service, but on the gatekeeper's
/// word about an action, not under a read-only annotation, so it carries
/// its own label.
pub(crate) async fn record_simulation(
    store: &Store,
    turn: &Turn,
    g: &GatekeeperRecord,
    tool: &str,
    account: Option<String>,
    output: &wit::Output,
) -> anyhow::Result<Observed> {
    record(store, turn, g, tool, "simulation", account, None, output).await
}

#[allow(clippy::too_many_arguments)]
async fn record(
    store: &Store,
    turn: &Turn,
    g: &GatekeeperRecord,
    tool: &str,
    classified_by: &'static str,
    account: Option<String>,
    audit: Option<crate::store::workflows::AuditRow>,
    output: &wit::Output,
) -> anyhow::Result<Observed> {
    // Every source is recorded (S1) and re-verified later (S2): a read
    // naming more than can be recorded, or an id too long to keep whole, is
    // refused rather than recorded in part (A5).
    if output.sources.len() > crate::store::MAX_SOURCES {
        anyhow::bail!(
            "gatekeeper {:?} named {} sources for one read; at most {} are recorded per read",
            g.name,
            output.sources.len(),
            crate::store::MAX_SOURCES
        );
    }
    if let Some(long) = output
        .sources
        .iter()
        .find(|s| s.id.len() > crate::store::MAX_SOURCE_ID_BYTES)
    {
        anyhow::bail!(
            "gatekeeper {:?} named a source id of {} bytes; at most {} are recorded",
            g.name,
            long.id.len(),
            crate::store::MAX_SOURCE_ID_BYTES
        );
    }
    let sources = if output.sources.is_empty() {
        // A read that names no source is of the gatekeeper itself.
        Sources::of(&[Source {
            id: &g.name,
            restricted: false,
            title: &format!("gatekeeper {}", g.name),
        }])
    } else {
        let titles: Vec<_> = output
            .sources
            .iter()
            .map(|s| crate::store::cut(&s.title, crate::store::MAX_SOURCE_TITLE_BYTES, "title"))
            .collect();
        let list: Vec<Source<'_>> = output
            .sources
            .iter()
            .zip(&titles)
            .map(|(s, title)| Source {
                id: &s.id,
                restricted: s.restricted,
                title,
            })
            .collect();
        Sources::of(&list)
    };
    let o = NewObservation {
        chat: turn.chat.clone(),
        principal: turn.principal.clone(),
        gadget: turn.gadget.clone(),
        gatekeeper: g.name.clone(),
        tool: tool.to_owned(),
        classified_by,
        trust: g.trust,
        sources,
        account,
        action_ref: None,
        result_bytes: output.result.len(),
        audit,
    };
    // Right here when the database is free (the read path's one commit).
    store.observe_now(o).await
}

/// Record that an applied action's result was handed to the gadget (A4):
/// once per action and caller, however often the gadget polls (the store
/// keeps the first record).
pub(crate) async fn record_handover(
    store: &Store,
    turn: &Turn,
    a: &Action,
    result: &str,
) -> anyhow::Result<()> {
    let o = NewObservation {
        chat: turn.chat.clone(),
        principal: turn.principal.clone(),
        gadget: turn.gadget.clone(),
        gatekeeper: a.gatekeeper.clone(),
        tool: a.tool.clone(),
        classified_by: "default",
        trust: a.trust.parse().unwrap_or(Trust::Byo),
        sources: Sources::of(&[Source {
            id: &format!("action:{}", a.id),
            restricted: false,
            title: &format!("result of action #{}", a.id),
        }]),
        account: None,
        action_ref: Some(a.id),
        result_bytes: result.len(),
        audit: None,
    };
    store.run(move |s| s.observe(&o)).await?;
    Ok(())
}
