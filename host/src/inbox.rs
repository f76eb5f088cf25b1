//! What a person sees (SPEC W1, R3, L2): their chats, the inbox of pending
//! actions, one action and its approval prompt, the ledger and the
//! observation set.
//!
//! Every read a surface makes for a person comes through here, and every
//! one asks the one authorization rule (`crate::access`) first: a chat the
//! person may not see does not exist for them, and neither do its actions.
//! Owns no rule of its own and writes nothing.

use crate::access::{Access, Need, Refusal};
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
    /// surface's button; `Kernel::revert` checks everything again.
    pub revertible: bool,
    /// The revert of it that may still be, or was, sent, if any.
    pub reverted_by: Option<i64>,
}

/// Render `a`'s prompt with its tool's description as the gatekeeper
/// declares it now, for `person`.
fn show(s: &crate::store::Store, a: Action, person: &str) -> anyhow::Result<Shown> {
    let tool = s
        .gatekeeper(&a.gatekeeper)?
        .and_then(|g| g.manifest.tool(&a.tool).cloned());
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
    /// What `person` may do in `chat` (the one rule, SPEC W1).
    pub fn access(&self, chat: &str, person: &str) -> anyhow::Result<Access> {
        self.store().access(chat, person)
    }

    /// The chats `person` may see, by name.
    pub async fn chats(&self, person: &str) -> anyhow::Result<Vec<ChatSummary>> {
        let p = person.to_owned();
        self.store()
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
    pub async fn chat(&self, person: &str, chat: &str) -> anyhow::Result<Chat> {
        let (p, c) = (person.to_owned(), chat.to_owned());
        self.store()
            .run(move |s| {
                s.access(&c, &p)?.require(Need::See, &c, &p)?;
                s.chat(&c)?
                    .ok_or_else(|| Refusal::NoSuchChat(c.clone()).into())
            })
            .await
    }

    /// The pending actions `person` may see (of one chat, or of all the
    /// chats they may see), oldest first.
    pub async fn pending(&self, person: &str, chat: Option<&str>) -> anyhow::Result<Vec<Action>> {
        let (p, c) = (person.to_owned(), chat.map(str::to_owned));
        self.store()
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
    pub async fn action(&self, person: &str, id: i64) -> anyhow::Result<Option<Action>> {
        let p = person.to_owned();
        self.store()
            .run(move |s| {
                let Some(a) = s.action(id)? else {
                    return Ok(None);
                };
                Ok(s.access(&a.chat, &p)?.may_see().then_some(a))
            })
            .await
    }

    /// One action with its approval prompt, if `person` may see it.
    pub async fn shown(&self, person: &str, id: i64) -> anyhow::Result<Option<Shown>> {
        let Some(a) = self.action(person, id).await? else {
            return Ok(None);
        };
        let p = person.to_owned();
        self.store().run(move |s| show(s, a, &p).map(Some)).await
    }

    /// The inbox: pending actions `person` may see, with their prompts.
    pub async fn inbox(&self, person: &str, chat: Option<&str>) -> anyhow::Result<Vec<Shown>> {
        let pending = self.pending(person, chat).await?;
        let p = person.to_owned();
        self.store()
            .run(move |s| pending.into_iter().map(|a| show(s, a, &p)).collect())
            .await
    }

    /// The ledger as `person` may see it: only the chats they may see. A
    /// filter naming a chat they may not see is refused as if it did not
    /// exist.
    pub async fn ledger(
        &self,
        person: &str,
        mut filter: LedgerFilter,
    ) -> anyhow::Result<Vec<LedgerEntry>> {
        if let Some(c) = &filter.chat {
            self.store()
                .access(c, person)?
                .require(Need::See, c, person)?;
        } else {
            let visible: Vec<String> = self
                .chats(person)
                .await?
                .into_iter()
                .map(|c| c.name)
                .collect();
            filter.chats = Some(visible);
        }
        self.store().run(move |s| s.ledger(&filter)).await
    }

    /// Everything `filter.approved_by` approved that `person` may see
    /// (SPEC L2), in the order it was approved: the actions, as
    /// [`Kernel::ledger`] answers them, and the workflow approval requests.
    /// A request is listed where `person` may see the requests of its run
    /// (a run's approvers may, without seeing the rest of its chat). With
    /// a chat in the filter, only that chat's; a chat of which `person`
    /// may see neither the ledger nor the requests is refused as if it did
    /// not exist. A filter by kind or by hook keeps to ledger entries, and
    /// leaves requests out. Without `approved_by`, the ledger alone.
    pub async fn approvals(
        &self,
        person: &str,
        filter: LedgerFilter,
    ) -> anyhow::Result<Vec<Approval>> {
        let Some(who) = filter.approved_by.clone() else {
            let entries = self.ledger(person, filter).await?;
            return Ok(entries
                .into_iter()
                .map(|e| Approval::Action(Box::new(e)))
                .collect());
        };
        let chat = filter.chat.clone();
        let actions = match &chat {
            Some(c) => {
                let access = self.store().access(c, person)?;
                if access.may_see() {
                    self.ledger(person, filter.clone()).await?
                } else if access.may_see_requests() {
                    Vec::new()
                } else {
                    access.require(Need::See, c, person)?;
                    Vec::new()
                }
            }
            None => self.ledger(person, filter.clone()).await?,
        };
        let requests = if filter.kind.is_some() || filter.hook.is_some() {
            Vec::new()
        } else {
            let p = person.to_owned();
            self.store()
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

    /// What the live view watches, chat by chat (inbox, requests): a
    /// fingerprint that changes when what a person's page shows changes.
    /// Deployment-wide and naming only chats; the web asks
    /// [`Kernel::live_audience`] before a person hears of a change.
    pub(crate) async fn live_fingerprints(
        &self,
    ) -> anyhow::Result<std::collections::BTreeMap<String, (u64, u64)>> {
        self.store().run(|s| s.live_fingerprints()).await
    }

    /// Whether `person` may hear of a change in `chat` (the one rule):
    /// `(inbox, requests)`: whether they see its inbox, its requests.
    pub async fn live_audience(&self, chat: &str, person: &str) -> anyhow::Result<(bool, bool)> {
        let (c, p) = (chat.to_owned(), person.to_owned());
        self.store()
            .run(move |s| {
                let a = s.access(&c, &p)?;
                Ok((a.may_see(), a.may_see_requests()))
            })
            .await
    }

    /// The chat's observation set (SPEC S1), for someone who may see it.
    pub async fn observations(&self, person: &str, chat: &str) -> anyhow::Result<Vec<LedgerEntry>> {
        self.ledger(
            person,
            LedgerFilter {
                chat: Some(chat.to_owned()),
                kind: Some(LedgerKind::Observation),
                ..LedgerFilter::default()
            },
        )
        .await
    }
}
