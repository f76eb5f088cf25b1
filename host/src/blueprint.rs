//! Blueprints (SPEC B1): a gadget as something another person can take.
//!
//! A blueprint holds the gadget's code and its binding *requirements*: for
//! each key it needs, the kind of service (the gatekeeper's component digest
//! and the tools it offers) and the tools granted. It never holds chat
//! history, stored data, credentials, owners, people, or the names of this
//! deployment's instances (gatekeepers and chats), because what it is built
//! from is exactly the list above and nothing else is read.
//!
//! Owns the file format and its checks; installing and introducing go
//! through the kernel's ordinary paths, so an import is validated like any
//! install. It may not copy rows from the ledger.

use crate::capability::Person;
use anyhow::{Context as _, bail};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use std::collections::BTreeMap;

/// The format tag; a file without it is not a blueprint.
const FORMAT: &str = "gatehouse-blueprint/1";

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Blueprint {
    pub format: String,
    pub gadget: BlueprintGadget,
    pub requirements: Vec<Requirement>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BlueprintGadget {
    /// The gadget's name, a suggestion for the importer.
    pub name: String,
    pub sha256: String,
    /// The component, base64.
    pub component: String,
}

/// One key the gadget needs introduced.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub(crate) struct Requirement {
    pub key: String,
    /// The service kind: which gatekeeper component, and its tools.
    pub gatekeeper_sha256: String,
    pub tools_offered: Vec<String>,
    /// The tools granted (`None`: all).
    pub grant: Option<Vec<String>>,
}

/// What an import did, key by key.
#[derive(Clone, Debug, Serialize)]
pub struct Imported {
    /// The name the gadget was installed under (the blueprint's suggestion
    /// unless the importer chose another).
    pub gadget: String,
    /// The new chat created for the importer, where each key was introduced.
    pub chat: String,
    /// The importer, who owns the new chat; calls run under their accounts.
    pub owner: String,
    /// One entry per requirement, in the blueprint's order.
    pub bound: Vec<Bound>,
}

/// How one required key was satisfied on import.
#[derive(Clone, Debug, Serialize)]
pub struct Bound {
    /// The key the gadget calls, as the blueprint names it.
    pub key: String,
    /// The importer's gatekeeper instance introduced under that key.
    pub gatekeeper: String,
    /// The importer's account used there, if they connected one.
    pub account: Option<String>,
}

impl Person<'_> {
    /// The blueprint of `gadget`, with the requirements of the chat it ran
    /// in (or `chat`), as `by` may see it: only a chat they may see (W1).
    pub fn export_blueprint(&self, gadget: &str, chat: Option<&str>) -> anyhow::Result<Vec<u8>> {
        let by = self.name;
        let Some(g) = self.kernel.store().gadget(gadget)? else {
            bail!("no gadget named {gadget:?}; `gatehouse gadgets` lists them");
        };
        let chat = match chat {
            Some(c) => {
                self.kernel.require(c, by, crate::access::Need::See)?;
                c.to_owned()
            }
            None => {
                let mut chats = Vec::new();
                for c in self.kernel.store().chats_called_from(gadget)? {
                    if self.kernel.store().access(&c, by)?.may_see() {
                        chats.push(c);
                    }
                }
                match chats.as_slice() {
                    [one] => one.clone(),
                    [] => bail!(
                        "gadget {gadget:?} has not called any service yet; name the chat whose services it needs with --chat"
                    ),
                    many => bail!(
                        "gadget {gadget:?} ran in chats {}; choose one with --chat",
                        many.join(", ")
                    ),
                }
            }
        };
        let mut requirements = Vec::new();
        for i in self.kernel.store().introductions(&chat)? {
            let Some(k) = self.kernel.store().gatekeeper(&i.gatekeeper)? else {
                continue;
            };
            requirements.push(Requirement {
                key: i.key,
                gatekeeper_sha256: k.digest.clone(),
                tools_offered: k.manifest.tools.iter().map(|t| t.name.clone()).collect(),
                grant: i.tools,
            });
        }
        let bytes = self.kernel.runtime().component_bytes(&g.digest)?;
        let blueprint = Blueprint {
            format: FORMAT.into(),
            gadget: BlueprintGadget {
                name: g.name,
                sha256: g.digest,
                component: base64::engine::general_purpose::STANDARD.encode(bytes),
            },
            requirements,
        };
        Ok(serde_json::to_vec_pretty(&blueprint)?)
    }

    /// Install a blueprint for `owner`: the gadget (validated like any
    /// install), a new chat of theirs, and each required key introduced to
    /// a gatekeeper they choose (`bind`: key → gatekeeper) or, by default,
    /// the one gatekeeper built from the same component. Calls then run
    /// under the owner's own accounts.
    pub fn import_blueprint(
        &self,
        bytes: &[u8],
        name: Option<&str>,
        chat: Option<&str>,
        bind: &BTreeMap<String, String>,
        progress: &dyn Fn(&str),
    ) -> anyhow::Result<Imported> {
        let owner = self.name;
        let b: Blueprint = serde_json::from_slice(bytes).context(
            "this file is not a Gatehouse blueprint (export one with `gatehouse export GADGET -o FILE`)",
        )?;
        if b.format != FORMAT {
            bail!(
                "unsupported blueprint format {:?}; this Gatehouse reads {FORMAT}",
                b.format
            );
        }
        let component = base64::engine::general_purpose::STANDARD
            .decode(b.gadget.component.as_bytes())
            .context("the blueprint's component is not valid base64; the file is damaged")?;
        if hex::encode(Sha256::digest(&component)) != b.gadget.sha256 {
            bail!("the blueprint's component does not match its digest; the file is damaged");
        }
        if !self.kernel.store().user_exists(owner)? {
            bail!("no person named {owner:?}; add them first with `gatehouse user add {owner}`");
        }
        for key in bind.keys() {
            if !b.requirements.iter().any(|r| &r.key == key) {
                bail!("the blueprint needs no key {key:?}; it needs: {}", keys(&b));
            }
        }
        let name = name.unwrap_or(&b.gadget.name).to_owned();
        let chat = chat.unwrap_or(&name).to_owned();
        if let Some(existing) = self.kernel.store().gadget(&name)?
            && existing.digest != b.gadget.sha256
        {
            bail!(
                "a different gadget is already installed as {name:?}; choose another with --name"
            );
        }
        if self.kernel.store().chat(&chat)?.is_some() {
            bail!("chat {chat:?} exists; choose a new one with --chat");
        }

        // Choose every binding before changing anything.
        let gatekeepers = self.kernel.store().gatekeepers()?;
        let mut chosen = Vec::new();
        for r in &b.requirements {
            let g = match bind.get(&r.key) {
                Some(gname) => {
                    gatekeepers
                        .iter()
                        .find(|g| &g.name == gname)
                        .with_context(|| {
                            format!(
                                "no gatekeeper named {gname:?}; `gatehouse gatekeepers` lists them"
                            )
                        })?
                }
                None => {
                    let same: Vec<_> = gatekeepers
                        .iter()
                        .filter(|g| g.digest == r.gatekeeper_sha256)
                        .collect();
                    match same.as_slice() {
                        [one] => *one,
                        [] => bail!(
                            "no gatekeeper here is built from the component key {} needs ({}); add one, or choose with --bind {}=GATEKEEPER",
                            r.key,
                            &r.gatekeeper_sha256[..12.min(r.gatekeeper_sha256.len())],
                            r.key
                        ),
                        many => bail!(
                            "several gatekeepers could serve {}: {}; choose with --bind {}=GATEKEEPER",
                            r.key,
                            many.iter()
                                .map(|g| g.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", "),
                            r.key
                        ),
                    }
                }
            };
            let needed = r.grant.as_ref().unwrap_or(&r.tools_offered);
            let missing: Vec<&String> = needed
                .iter()
                .filter(|t| g.manifest.tool(t).is_none())
                .collect();
            if !missing.is_empty() {
                bail!(
                    "gatekeeper {:?} cannot serve {}: it lacks {}",
                    g.name,
                    r.key,
                    missing
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            chosen.push((r, g.name.clone()));
        }

        // Importing a blueprint installs its component, an operator's act:
        // whoever may run `blueprint import` on this host already may.
        self.kernel
            .operator()
            .install(&name, &component, progress)?;
        self.new_chat(&chat)?;
        let mut bound = Vec::new();
        for (r, gatekeeper) in chosen {
            self.introduce(&chat, &gatekeeper, &r.key, r.grant.clone())?;
            let account = self
                .kernel
                .store()
                .account_credential(owner, &gatekeeper, None)?
                .map(|(a, _)| a.id());
            bound.push(Bound {
                key: r.key.clone(),
                gatekeeper,
                account,
            });
        }
        Ok(Imported {
            gadget: name,
            chat,
            owner: owner.to_owned(),
            bound,
        })
    }
}

fn keys(b: &Blueprint) -> String {
    b.requirements
        .iter()
        .map(|r| r.key.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
