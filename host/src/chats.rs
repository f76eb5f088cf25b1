//! A person's chats: making one, introducing a service into it, and
//! running a gadget's turn in it (as the person, or as an external agent
//! acting for them).
//!
//! Owns these operations of the [`Person`] handle. It may not decide who
//! may do what (that is `crate::access`, asked through the store) nor run
//! a component itself: a turn goes through the kernel's one turn path.

use crate::capability::Person;
use crate::kernel::{Harness, Turn, check_name};
use crate::principal::Principal;
use crate::runtime::gadget::TurnReport;
use crate::store::Introduction;
use anyhow::bail;
use std::sync::Arc;

impl Person<'_> {
    /// Agent runs in the chats `person` may see.
    pub async fn agent_runs(&self) -> anyhow::Result<Vec<crate::store::AgentRun>> {
        let person = self.name;
        let p = person.to_owned();
        self.kernel
            .store()
            .run(move |s| {
                let mut out = Vec::new();
                for r in s.agent_runs()? {
                    if s.access(&r.chat, &p)?.may_see() {
                        out.push(r);
                    }
                }
                Ok(out)
            })
            .await
    }

    /// Create chat `name`, owned by `owner`: empty, with no services until
    /// its owner introduces some. The name is checked like any name a person
    /// types.
    pub fn new_chat(&self, name: &str) -> anyhow::Result<()> {
        let owner = self.name;
        check_name(name, "chat")?;
        self.kernel.store().create_chat(name, owner)
    }

    /// Introduce a gatekeeper into a chat under a key (SPEC C2, C3). Only
    /// the chat's owner introduces.
    pub fn introduce(
        &self,
        chat: &str,
        gatekeeper: &str,
        key: &str,
        tools: Option<Vec<String>>,
    ) -> anyhow::Result<Introduction> {
        let by = self.name;
        self.kernel
            .store()
            .access(chat, by)?
            .require(crate::access::Need::Manage, chat, by)?;
        let Some(g) = self.kernel.store().gatekeeper(gatekeeper)? else {
            bail!("no gatekeeper named {gatekeeper:?}; `gatehouse gatekeepers` lists them");
        };
        if key.is_empty()
            || key.len() > 64
            || !key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            bail!("key {key:?} must be 1-64 letters, digits, '_' or '-' (like ISSUES)");
        }
        if let Some(tools) = &tools {
            for t in tools {
                if g.manifest.tool(t).is_none() {
                    let all: Vec<_> = g
                        .manifest
                        .tools
                        .iter()
                        .map(|t| crate::prompt::as_given(&t.name))
                        .collect();
                    bail!(
                        "gatekeeper {gatekeeper:?} has no tool {:?}; it offers: {}",
                        crate::prompt::as_given(t),
                        all.join(", ")
                    );
                }
            }
        }
        let intro = Introduction {
            chat: chat.to_owned(),
            key: key.to_owned(),
            gatekeeper: gatekeeper.to_owned(),
            tools,
        };
        self.kernel.store().introduce(&intro, by)?;
        Ok(intro)
    }

    /// Run one turn as `person`. Someone other than the chat's owner is
    /// re-verified first, as on every open (SPEC S2), with the accounts they
    /// chose when they last opened it; their calls run under those accounts.
    pub async fn run(&self, gadget: &str, chat: &str, input: &str) -> anyhow::Result<TurnReport> {
        let person = self.name;
        self.kernel.verify_runner(chat, person).await?;
        let turn = Turn::new(gadget, chat, Principal::person(person));
        self.kernel.run_turn(turn, input).await
    }

    /// A turn of an external agent in `chat`, acting for `person`: no
    /// gadget, the principal `external agent in CHAT, acting for PERSON`.
    /// Admitted exactly as a person's own turn is ([`Person::run`]): the
    /// owner passes; a collaborator is re-verified now, with the accounts
    /// they chose when they last opened the chat; anyone else, and a chat
    /// that does not exist, get the same "no such chat" answer (W2).
    /// A surface asks for one before every request it serves, so that a
    /// person who lost the chat loses it at the next request.
    pub async fn external_turn(&self, chat: &str) -> anyhow::Result<Turn> {
        let person = self.name;
        let c = chat.to_owned();
        let exists = self
            .kernel
            .store()
            .run(move |s| Ok(s.chat(&c)?.is_some()))
            .await?;
        if !exists {
            bail!(crate::access::Refusal::NoSuchChat(chat.to_owned()));
        }
        self.kernel.verify_runner(chat, person).await?;
        Ok(Turn {
            gadget: None,
            chat: chat.to_owned(),
            principal: Principal::External {
                chat: chat.to_owned(),
                person: person.to_owned(),
            },
            harness: Harness::Plain,
            awaited: Arc::default(),
            staged: Arc::default(),
            step: None,
            unsynced: None,
            pinned: None,
        })
    }
}
