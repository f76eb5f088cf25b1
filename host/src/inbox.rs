//! What a person sees (SPEC W1, R3, L2): their chats, the inbox of pending
//! actions, one action and its approval prompt, the ledger and the
//! observation set.
//!
//! Every read a surface makes for a person comes through here, and every
//! one asks the one authorization rule (`crate::access`) first: a chat the
//! person may not see does not exist for them, and neither do its actions.
//! Owns no rule of its own and writes nothing.

use crate::access::{Access, Need, Refusal};
use crate::capability::Person;
use crate::kernel::Kernel;
use crate::store::workflows::ApprovedRequest;
use crate::store::{Action, Chat, LedgerEntry, LedgerFilter, LedgerKind};
use serde::Serialize;

/// One record of what a person approved (SPEC L2): an action of a chat's
/// ledger, or a workflow approval request. They are distinct records, told
/// apart by `kind` (`action` or `request`): a request is not a ledger
/// entry, and its id is from the requests' own sequence.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum Approval {
    /// An action they approved (from the decision history), boxed: an
    /// entry is several times a request's size.
    Action(Box<LedgerEntry>),
    /// A workflow approval request they approved.
    Request(ApprovedRequest),
}

impl Approval {
    /// When it was approved, for the order of the list.
    fn at(&self) -> i64 {
        match self {
            Approval::Action(e) => e.decided_at.unwrap_or(e.created_at),
            Approval::Request(r) => r.approved_at,
        }
    }
}

/// An action with its approval prompt: the one rendering every surface
/// shows (SPEC R3).
#[derive(Clone, Debug, Serialize)]
pub struct Shown {
    /// The action as stored: state, arguments, principal, decision.
    pub action: Action,
    /// The approval prompt ([`crate::prompt::render`]): sanitised and capped,
    /// so attacker-chosen text cannot pass for the kernel's own.
    pub prompt: String,
    /// Whether the viewer may stage a revert of it now (SPEC H2): it is
    /// applied, its gatekeeper declares a tool that undoes it, no revert of
    /// it is live, and the viewer may decide in its chat. A hint for a
    /// surface's button; `Person::revert` checks everything again.
    pub revertible: bool,
    /// The revert of it that may still be, or was, sent, if any.
    pub reverted_by: Option<i64>,
    /// The action as a card: a summary line, the arguments as a table, who
    /// staged it and why it is held, every piece through the one sanitiser
    /// ([`crate::prompt`]).
    pub card: Card,
}

/// One action as the web inbox's card shows it: kernel renderings only
/// ([`crate::prompt::summary_pieces`], [`crate::prompt::arg_rows`],
/// [`crate::prompt::held`], [`crate::prompt::staged_by`]). Nothing here is
/// raw attacker text but `chat` (a chat's name, for addressing it).
#[derive(Clone, Debug, Serialize)]
pub struct Card {
    /// The action's id.
    pub id: i64,
    /// The chat's name, as stored (for links and grouping).
    pub chat: String,
    /// The chat's name through the sanitiser, for display.
    pub chat_shown: String,
    /// The gatekeeper instance's name through the sanitiser.
    pub gatekeeper_shown: String,
    /// The tool's name through the sanitiser (the gatekeeper wrote it).
    pub tool_shown: String,
    /// Where it is now (`pending`, `applied`, ...).
    pub state: String,
    /// When it was staged (ms since the epoch).
    pub created_at: i64,
    /// When it expires if nobody decides it (pending only).
    pub expires_at: Option<i64>,
    /// Where it goes, from the gatekeeper's record (the operator's word).
    pub host: Option<String>,
    /// The one-line summary, plain ([`crate::prompt::summary_line`]).
    pub summary: String,
    /// The same, piece by piece, each with its author.
    pub summary_pieces: Vec<crate::prompt::Piece>,
    /// The arguments as a table (at most 20 rows, values capped).
    pub args: Vec<crate::prompt::ArgRow>,
    /// Said when the table does not show every argument.
    pub args_note: Option<String>,
    /// Who staged it, through which gadget, with whose account.
    pub staged_by: String,
    /// Why it waits for a person, one reason a line.
    pub held: Vec<String>,
    /// For a revert: the action it undoes.
    pub reverts: Option<i64>,
    /// Whether the viewer may decide it (the one rule, SPEC W1).
    pub may_decide: bool,
}

/// Per chat, what a card needs of it, looked up once per chat.
#[derive(Default)]
struct ChatFacts {
    facts: std::collections::HashMap<String, (bool, i64, bool)>,
}

impl ChatFacts {
    /// `(latched, expiry ms, may_decide)` of `chat` for `person`.
    fn get(
        &mut self,
        s: &crate::store::Store,
        chat: &str,
        person: &str,
    ) -> anyhow::Result<(bool, i64, bool)> {
        if let Some(f) = self.facts.get(chat) {
            return Ok(*f);
        }
        let latched = s.chat(chat)?.is_some_and(|c| c.latched);
        let f = (
            latched,
            s.expiry(chat)?,
            s.access(chat, person)?.may_decide(),
        );
        self.facts.insert(chat.to_owned(), f);
        Ok(f)
    }
}

/// The card of `a`, whose gatekeeper's record is `g` (if it still exists).
fn card(
    a: &Action,
    g: Option<&crate::store::GatekeeperRecord>,
    (latched, expiry_ms, may_decide): (bool, i64, bool),
) -> Card {
    use crate::prompt;
    let tool = g.and_then(|g| g.manifest.tool(&a.tool));
    let host = g.and_then(prompt::destination);
    let trust = g.map(|g| g.trust).unwrap_or(crate::manifest::Trust::Byo);
    let pending = a.state == crate::store::ActionState::Pending;
    let expires_at = pending.then(|| a.created_at.saturating_add(expiry_ms));
    let pieces = prompt::summary_pieces(a, host.as_deref());
    let (args, args_note) = prompt::arg_rows(&a.args);
    Card {
        id: a.id,
        chat: a.chat.clone(),
        chat_shown: prompt::inline(&a.chat),
        gatekeeper_shown: prompt::inline(&a.gatekeeper),
        tool_shown: prompt::inline(&a.tool),
        state: a.state.to_string(),
        created_at: a.created_at,
        expires_at,
        summary: prompt::summary_line(&pieces),
        summary_pieces: pieces,
        args,
        args_note,
        staged_by: prompt::staged_by(a),
        held: if pending {
            prompt::held(a, tool, trust, latched, expires_at)
        } else {
            Vec::new()
        },
        host,
        reverts: a.reverts,
        may_decide,
    }
}

/// One page of the inbox, so that a long inbox opens at once: cards oldest
/// first, after a cursor, with what the page shows of their chats.
#[derive(Clone, Debug, Serialize)]
pub struct InboxPage {
    /// The cards, oldest first.
    pub cards: Vec<Card>,
    /// How many pending actions this person may see (in the chat asked
    /// for, or in all), this page's included.
    pub total: usize,
    /// Ask again with `after` = this for the next page; `None`: no more.
    pub next_after: Option<i64>,
    /// The chats of this page's cards: latch, whether the person may
    /// decide there, and their observation sets.
    pub chats: Vec<InboxChat>,
}

/// A chat as the inbox shows it beside its cards.
#[derive(Clone, Debug, Serialize)]
pub struct InboxChat {
    /// The chat's name, as stored.
    pub name: String,
    /// Its name through the sanitiser.
    pub shown: String,
    /// The restricted-data latch (SPEC O3).
    pub latched: bool,
    /// Whether this person may decide there.
    pub may_decide: bool,
    /// What the chat has read (SPEC S1), in brief.
    pub observed: ObservedSet,
}

/// A chat's observation set in brief (SPEC S1): how many reads, of how
/// many distinct sources, how many of them restricted (owner-only, O2),
/// per gatekeeper. Names through the sanitiser; no source's title (a
/// gatekeeper wrote it, and it may carry what the chat read).
#[derive(Clone, Debug, Default, Serialize)]
pub struct ObservedSet {
    /// Observations recorded.
    pub reads: usize,
    /// Distinct sources they touched.
    pub sources: usize,
    /// Distinct restricted sources among them.
    pub restricted: usize,
    /// The same per gatekeeper, in name order.
    pub gatekeepers: Vec<ObservedBy>,
}

/// One gatekeeper's share of an [`ObservedSet`].
#[derive(Clone, Debug, Default, Serialize)]
pub struct ObservedBy {
    /// The gatekeeper's name through the sanitiser.
    pub gatekeeper: String,
    /// Observations recorded through it.
    pub reads: usize,
    /// Distinct sources.
    pub sources: usize,
    /// Distinct restricted sources.
    pub restricted: usize,
}

/// The brief of `chat`'s observation set, read from its ledger.
fn observed_set(s: &crate::store::Store, chat: &str) -> anyhow::Result<ObservedSet> {
    use std::collections::{BTreeMap, BTreeSet};
    let entries = s.ledger(&LedgerFilter {
        chat: Some(chat.to_owned()),
        kind: Some(LedgerKind::Observation),
        ..LedgerFilter::default()
    })?;
    type Seen = (usize, BTreeSet<String>, BTreeSet<String>);
    let mut by: BTreeMap<String, Seen> = BTreeMap::new();
    let (mut all, mut all_restricted) = (BTreeSet::new(), BTreeSet::new());
    let mut reads = 0;
    for e in entries {
        reads += 1;
        let gk = e.gatekeeper.clone().unwrap_or_default();
        let slot = by.entry(gk.clone()).or_default();
        slot.0 += 1;
        let list = e
            .sources
            .as_ref()
            .and_then(|v| v.as_array())
            .cloned()
            .unwrap_or_default();
        for src in list {
            let id = match src.get("id") {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => continue,
            };
            let key = format!("{gk}\u{0}{id}");
            let restricted = src.get("restricted") == Some(&serde_json::Value::Bool(true));
            slot.1.insert(id.clone());
            all.insert(key.clone());
            if restricted {
                slot.2.insert(id);
                all_restricted.insert(key);
            }
        }
    }
    Ok(ObservedSet {
        reads,
        sources: all.len(),
        restricted: all_restricted.len(),
        gatekeepers: by
            .into_iter()
            .map(|(gk, (reads, sources, restricted))| ObservedBy {
                gatekeeper: crate::prompt::inline(&gk),
                reads,
                sources: sources.len(),
                restricted: restricted.len(),
            })
            .collect(),
    })
}

/// Render `a`'s prompt with its tool's description as the gatekeeper
/// declares it now, for `person`.
fn show(s: &crate::store::Store, a: Action, person: &str) -> anyhow::Result<Shown> {
    let record = s.gatekeeper(&a.gatekeeper)?;
    let facts = ChatFacts::default().get(s, &a.chat, person)?;
    let card = card(&a, record.as_deref(), facts);
    let tool = record.and_then(|g| g.manifest.tool(&a.tool).cloned());
    let prompt = crate::prompt::render(&a, tool.as_ref().map(|t| t.description.as_str()));
    let applied = a.state == crate::store::ActionState::Applied;
    let reverted_by = if applied {
        s.revert_of(a.id)?.map(|(id, _)| id)
    } else {
        None
    };
    let revertible = applied
        && reverted_by.is_none()
        && tool.is_some_and(|t| t.reverted_by.is_some())
        && s.access(&a.chat, person)?.may_decide();
    Ok(Shown {
        action: a,
        prompt,
        revertible,
        reverted_by,
        card,
    })
}

/// A chat as its visitor sees it in a list.
#[derive(Clone, Debug, Serialize)]
pub struct ChatSummary {
    /// The chat's name.
    pub name: String,
    /// The person who created the chat.
    pub owner: String,
    /// Whether the restricted-data latch closed it (SPEC O3): locked down,
    /// the owner's alone, and no outbound reads.
    pub latched: bool,
    /// Actions awaiting a decision.
    pub pending: usize,
    /// Whether this person may decide there.
    pub may_decide: bool,
    /// How long its actions may wait for a decision (SPEC H3), in ms.
    pub expire_after_ms: i64,
}

impl Kernel {
    /// What `person` may do in `chat` (the one rule, SPEC W1), read off
    /// the executor.
    pub async fn access(&self, chat: &str, person: &str) -> anyhow::Result<Access> {
        let (chat, person) = (chat.to_owned(), person.to_owned());
        self.store().run(move |s| s.access(&chat, &person)).await
    }

    /// What the live view watches, chat by chat (inbox, requests): a
    /// fingerprint that changes when what a person's page shows changes.
    /// Deployment-wide and naming only chats; the web asks
    /// [`Person::live_audience`] before a person hears of a change.
    pub(crate) async fn live_fingerprints(
        &self,
    ) -> anyhow::Result<std::collections::BTreeMap<String, (u64, u64)>> {
        self.store().run(|s| s.live_fingerprints()).await
    }
}

impl Person<'_> {
    /// The chats `person` may see, by name.
    pub async fn chats(&self) -> anyhow::Result<Vec<ChatSummary>> {
        let person = self.name;
        let p = person.to_owned();
        self.kernel
            .store()
            .run(move |s| {
                let mut out = Vec::new();
                for c in s.chats()? {
                    let access = s.access(&c.name, &p)?;
                    if !access.may_see() {
                        continue;
                    }
                    out.push(ChatSummary {
                        pending: s.pending_in(&c.name)?.len(),
                        may_decide: access.may_decide(),
                        expire_after_ms: s.expiry(&c.name)?,
                        name: c.name,
                        owner: c.owner,
                        latched: c.latched,
                    });
                }
                Ok(out)
            })
            .await
    }

    /// A chat `person` may see.
    pub async fn chat(&self, chat: &str) -> anyhow::Result<Chat> {
        let person = self.name;
        let (p, c) = (person.to_owned(), chat.to_owned());
        self.kernel
            .store()
            .run(move |s| {
                s.access(&c, &p)?.require(Need::See, &c, &p)?;
                s.chat(&c)?
                    .ok_or_else(|| Refusal::NoSuchChat(c.clone()).into())
            })
            .await
    }

    /// The pending actions `person` may see (of one chat, or of all the
    /// chats they may see), oldest first.
    pub async fn pending(&self, chat: Option<&str>) -> anyhow::Result<Vec<Action>> {
        let person = self.name;
        let (p, c) = (person.to_owned(), chat.map(str::to_owned));
        self.kernel
            .store()
            .run(move |s| match c {
                Some(c) => {
                    s.access(&c, &p)?.require(Need::See, &c, &p)?;
                    s.pending_in(&c)
                }
                None => {
                    let mut visible = std::collections::HashMap::new();
                    let mut out = Vec::new();
                    for a in s.pending_all()? {
                        let see = match visible.get(&a.chat) {
                            Some(v) => *v,
                            None => {
                                let v = s.access(&a.chat, &p)?.may_see();
                                visible.insert(a.chat.clone(), v);
                                v
                            }
                        };
                        if see {
                            out.push(a);
                        }
                    }
                    Ok(out)
                }
            })
            .await
    }

    /// One action, if `person` may see its chat. `None` is also the answer
    /// for an action that does not exist: the two are not told apart.
    pub async fn action(&self, id: i64) -> anyhow::Result<Option<Action>> {
        let person = self.name;
        let p = person.to_owned();
        self.kernel
            .store()
            .run(move |s| {
                let Some(a) = s.action(id)? else {
                    return Ok(None);
                };
                Ok(s.access(&a.chat, &p)?.may_see().then_some(a))
            })
            .await
    }

    /// One action with its approval prompt, if `person` may see it.
    pub async fn shown(&self, id: i64) -> anyhow::Result<Option<Shown>> {
        let person = self.name;
        let Some(a) = self.action(id).await? else {
            return Ok(None);
        };
        let p = person.to_owned();
        self.kernel
            .store()
            .run(move |s| show(s, a, &p).map(Some))
            .await
    }

    /// The inbox: pending actions `person` may see, with their prompts.
    pub async fn inbox(&self, chat: Option<&str>) -> anyhow::Result<Vec<Shown>> {
        let person = self.name;
        let pending = self.pending(chat).await?;
        let p = person.to_owned();
        self.kernel
            .store()
            .run(move |s| pending.into_iter().map(|a| show(s, a, &p)).collect())
            .await
    }

    /// One page of the inbox as cards: the pending actions `person` may see
    /// (of one chat, or of all), oldest first, those with an id after
    /// `after`, at most `limit` of them. Only the page's cards are
    /// rendered, so the first page of a long inbox answers at once.
    pub async fn inbox_page(
        &self,
        chat: Option<&str>,
        after: Option<i64>,
        limit: usize,
    ) -> anyhow::Result<InboxPage> {
        let person = self.name;
        let pending = self.pending(chat).await?;
        let total = pending.len();
        let mut rest: Vec<Action> = pending
            .into_iter()
            .filter(|a| after.is_none_or(|after| a.id > after))
            .collect();
        let more = rest.len() > limit;
        rest.truncate(limit);
        let next_after = if more {
            rest.last().map(|a| a.id)
        } else {
            None
        };
        let p = person.to_owned();
        self.kernel
            .store()
            .run(move |s| {
                let mut facts = ChatFacts::default();
                let mut records = std::collections::HashMap::new();
                let mut cards = Vec::with_capacity(rest.len());
                let mut chats: Vec<InboxChat> = Vec::new();
                for a in &rest {
                    let f = facts.get(s, &a.chat, &p)?;
                    if !records.contains_key(&a.gatekeeper) {
                        records.insert(a.gatekeeper.clone(), s.gatekeeper(&a.gatekeeper)?);
                    }
                    let g = records.get(&a.gatekeeper).and_then(|g| g.as_deref());
                    cards.push(card(a, g, f));
                    if !chats.iter().any(|c| c.name == a.chat) {
                        chats.push(InboxChat {
                            shown: crate::prompt::inline(&a.chat),
                            latched: f.0,
                            may_decide: f.2,
                            observed: observed_set(s, &a.chat)?,
                            name: a.chat.clone(),
                        });
                    }
                }
                Ok(InboxPage {
                    cards,
                    total,
                    next_after,
                    chats,
                })
            })
            .await
    }

    /// The brief of a chat's observation set (SPEC S1), for someone who
    /// may see the chat.
    pub async fn observed_set(&self, chat: &str) -> anyhow::Result<ObservedSet> {
        let person = self.name;
        let (p, c) = (person.to_owned(), chat.to_owned());
        self.kernel
            .store()
            .run(move |s| {
                s.access(&c, &p)?.require(Need::See, &c, &p)?;
                observed_set(s, &c)
            })
            .await
    }

    /// The ledger as `person` may see it: only the chats they may see. A
    /// filter naming a chat they may not see is refused as if it did not
    /// exist.
    pub async fn ledger(&self, mut filter: LedgerFilter) -> anyhow::Result<Vec<LedgerEntry>> {
        let person = self.name;
        if let Some(c) = &filter.chat {
            self.kernel
                .access(c, person)
                .await?
                .require(Need::See, c, person)?;
        } else {
            let visible: Vec<String> = self
                .kernel
                .person(person)
                .chats()
                .await?
                .into_iter()
                .map(|c| c.name)
                .collect();
            filter.chats = Some(visible);
        }
        self.kernel.store().run(move |s| s.ledger(&filter)).await
    }

    /// Everything `filter.approved_by` approved that `person` may see
    /// (SPEC L2), in the order it was approved: the actions, as
    /// [`Person::ledger`] answers them, and the workflow approval requests.
    /// A request is listed where `person` may see the requests of its run
    /// (a run's approvers may, without seeing the rest of its chat). With
    /// a chat in the filter, only that chat's; a chat of which `person`
    /// may see neither the ledger nor the requests is refused as if it did
    /// not exist. A filter by kind or by hook keeps to ledger entries, and
    /// leaves requests out. Without `approved_by`, the ledger alone.
    pub async fn approvals(&self, filter: LedgerFilter) -> anyhow::Result<Vec<Approval>> {
        let person = self.name;
        let Some(who) = filter.approved_by.clone() else {
            let entries = self.ledger(filter).await?;
            return Ok(entries
                .into_iter()
                .map(|e| Approval::Action(Box::new(e)))
                .collect());
        };
        let chat = filter.chat.clone();
        let actions = match &chat {
            Some(c) => {
                let access = self.kernel.access(c, person).await?;
                if access.may_see() {
                    self.ledger(filter.clone()).await?
                } else if access.may_see_requests() {
                    Vec::new()
                } else {
                    access.require(Need::See, c, person)?;
                    Vec::new()
                }
            }
            None => self.ledger(filter.clone()).await?,
        };
        let requests = if filter.kind.is_some() || filter.hook.is_some() {
            Vec::new()
        } else {
            let p = person.to_owned();
            self.kernel
                .store()
                .run(move |s| {
                    let mut sees = std::collections::HashMap::new();
                    let mut out = Vec::new();
                    for r in s.requests_approved_by(&who, chat.as_deref())? {
                        let may = match sees.get(&r.chat) {
                            Some(m) => *m,
                            None => {
                                let m = s.access(&r.chat, &p)?.may_see_requests();
                                sees.insert(r.chat.clone(), m);
                                m
                            }
                        };
                        if may {
                            out.push(r);
                        }
                    }
                    Ok(out)
                })
                .await?
        };
        let mut all: Vec<Approval> = actions
            .into_iter()
            .map(|e| Approval::Action(Box::new(e)))
            .chain(requests.into_iter().map(Approval::Request))
            .collect();
        all.sort_by_key(|a| a.at());
        Ok(all)
    }

    /// Whether `person` may hear of a change in `chat` (the one rule):
    /// `(inbox, requests)`: whether they see its inbox, its requests.
    pub async fn live_audience(&self, chat: &str) -> anyhow::Result<(bool, bool)> {
        let person = self.name;
        let (c, p) = (chat.to_owned(), person.to_owned());
        self.kernel
            .store()
            .run(move |s| {
                let a = s.access(&c, &p)?;
                Ok((a.may_see(), a.may_see_requests()))
            })
            .await
    }

    /// The chat's observation set (SPEC S1), for someone who may see it.
    pub async fn observations(&self, chat: &str) -> anyhow::Result<Vec<LedgerEntry>> {
        self.ledger(LedgerFilter {
            chat: Some(chat.to_owned()),
            kind: Some(LedgerKind::Observation),
            ..LedgerFilter::default()
        })
        .await
    }
}
