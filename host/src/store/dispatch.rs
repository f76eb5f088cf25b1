//! What a call is dispatched with, read in one place: an introduction of a
//! chat resolved against its gatekeeper (SPEC C2, C3), the credential of the
//! person the call acts for (C4, C5), and the fingerprints of both that an
//! action keeps from staging to its claim (P7).
//!
//! The kernel resolves through here before every read and stage, and the
//! claim transaction resolves through here again before anything is sent,
//! so that what was checked is what is sent. Decides nothing itself: the
//! credential rule is `crate::principal::choose_credential`, the
//! classification `crate::classify`.

use super::registry::GatekeeperRecord;
use crate::classify::{self, Kind};
use crate::principal::{Credential, CredentialFacts, choose_credential};
use rusqlite::{Connection, OptionalExtension as _, params};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use std::sync::Arc;

/// An introduction, resolved against its gatekeeper, for one person.
#[derive(Clone, Debug)]
pub struct Resolved {
    /// The key the chat introduced the gatekeeper under.
    pub key: String,
    /// The gatekeeper instance the key names, as stored now.
    pub gatekeeper: Arc<GatekeeperRecord>,
    /// `None`: every tool of the gatekeeper.
    pub grant: Option<Vec<String>>,
    /// The chat's owner.
    pub owner: String,
    /// The chat's restricted-data latch (O3), read with the binding.
    pub latched: bool,
    /// The chat's collaborators (S3), read with the binding.
    pub collaborators: Vec<String>,
    /// The credential the person's calls here run under.
    pub credential: Credential,
}

/// Why a key did not resolve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unresolved {
    /// Nothing is introduced under the key in this chat (SPEC C2).
    UnknownKey {
        /// The key asked for.
        key: String,
        /// The keys the chat does have, to name in the refusal.
        known: Vec<String>,
    },
    /// The introduction names a gatekeeper that was removed.
    Removed {
        /// The key whose gatekeeper is gone.
        key: String,
    },
}

impl Resolved {
    /// Whether the introduction grants `tool` and the gatekeeper offers it.
    pub fn grants(&self, tool: &str) -> bool {
        self.gatekeeper.manifest.tool(tool).is_some()
            && self
                .grant
                .as_ref()
                .is_none_or(|g| g.iter().any(|t| t == tool))
    }

    /// The names of the tools this introduction grants, in manifest order.
    pub fn granted_names(&self) -> Vec<String> {
        self.gatekeeper
            .manifest
            .tools
            .iter()
            .filter(|t| self.grants(&t.name))
            .map(|t| t.name.clone())
            .collect()
    }
}

/// Resolve `key` in `chat` for `person`, in the caller's transaction.
pub(crate) fn resolve(
    conn: &Connection,
    chat: &str,
    key: &str,
    person: &str,
) -> anyhow::Result<Result<Resolved, Unresolved>> {
    let intros = super::registry::introductions_in(conn, chat)?;
    let Some(intro) = intros.iter().find(|i| i.key == key) else {
        return Ok(Err(Unresolved::UnknownKey {
            key: key.to_owned(),
            known: intros.into_iter().map(|i| i.key).collect(),
        }));
    };
    let Some(gatekeeper) = super::registry::gatekeeper_in(conn, &intro.gatekeeper)? else {
        return Ok(Err(Unresolved::Removed {
            key: key.to_owned(),
        }));
    };
    let (owner, latched) = super::sharing::chat_state(conn, chat)?.unwrap_or_default();
    let collaborators = {
        let mut st = conn.prepare_cached("SELECT user FROM collaborators WHERE chat = ?1")?;
        st.query_map([chat], |r| r.get::<_, String>(0))?
            .collect::<Result<Vec<_>, _>>()?
    };
    let credential = credential_in(conn, chat, &owner, person, &gatekeeper)?;
    Ok(Ok(Resolved {
        key: key.to_owned(),
        grant: intro.tools.clone(),
        gatekeeper,
        owner,
        latched,
        collaborators,
        credential,
    }))
}

/// The credential `person`'s calls in `chat` run under at `g`: gathered
/// here, decided by [`choose_credential`].
pub(crate) fn credential_in(
    conn: &Connection,
    chat: &str,
    owner: &str,
    person: &str,
    g: &GatekeeperRecord,
) -> anyhow::Result<Credential> {
    let is_owner = person == owner;
    // A collaborator uses the account they chose when they opened the chat.
    let chosen: Option<String> = if is_owner {
        None
    } else {
        conn.prepare_cached(
            "SELECT account FROM observers WHERE chat = ?1 AND user = ?2 AND gatekeeper = ?3",
        )?
        .query_row(params![chat, person, g.name], |r| {
            r.get::<_, Option<String>>(0)
        })
        .optional()?
        .flatten()
        .and_then(|a| a.split_once('/').map(|(_, l)| l.to_owned()))
    };
    let own = super::sharing::account_credential_in(conn, person, &g.name, chosen.as_deref())?
        .map(|(a, secret)| (a.id(), secret));
    let operator_value = match &g.secret {
        Some(name) => super::registry::secret_in(conn, name)?,
        None => None,
    };
    Ok(choose_credential(CredentialFacts {
        person,
        gatekeeper: &g.name,
        is_owner,
        chosen: chosen.as_deref(),
        own,
        operator: g.secret.as_deref().map(|n| (n, operator_value)),
    }))
}

/// What was true of an action's dispatch when it was staged (SPEC P7):
/// fingerprints of everything that decides where it goes, how, and as whom.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Facts {
    /// The gatekeeper's component digest.
    pub component: String,
    /// Its hosts, settings and credential name.
    pub instance: String,
    /// The tool's manifest entry (description, schema, annotations, ...).
    pub tool: String,
    /// `read` or `action`, as `classify` says now.
    pub class: String,
    /// The gatekeeper's trust tier (`byo` or `vetted`) at staging.
    pub trust: String,
    /// The introduction: which gatekeeper the key names, and its grant.
    pub introduction: String,
    /// The credential it would be sent with (`user/label`,
    /// `operator:NAME` or `none`; never a secret).
    pub account: String,
}

fn digest(v: &impl Serialize) -> String {
    let bytes = serde_json::to_vec(v).unwrap_or_default();
    hex::encode(Sha256::digest(&bytes))
}

impl Facts {
    /// The facts of calling `tool` through `r` now; `None` when the
    /// introduction no longer grants it.
    pub fn of(r: &Resolved, tool: &str) -> Option<Facts> {
        if !r.grants(tool) {
            return None;
        }
        let g = &r.gatekeeper;
        let entry = g.manifest.tool(tool)?;
        let class = match classify::classify(&entry.annotations, g.trust).kind {
            Kind::Read => "read",
            Kind::Action => "action",
        };
        Some(Facts {
            component: g.digest.clone(),
            instance: digest(&(&g.hosts, &g.settings, &g.secret)),
            tool: digest(entry),
            class: class.into(),
            trust: g.trust.as_str().into(),
            introduction: digest(&(&g.name, &r.grant)),
            account: r.credential.id(),
        })
    }

    /// What changed between these (staged) facts and `now`, in words.
    pub fn changes(&self, now: &Facts, gatekeeper: &str, tool: &str, key: &str) -> Vec<String> {
        let mut out = Vec::new();
        if self.introduction != now.introduction {
            out.push(format!(
                "the introduction {key} was changed (another gatekeeper or another grant)"
            ));
        }
        if self.component != now.component {
            out.push(format!(
                "gatekeeper {gatekeeper} now runs another component ({} -> {})",
                short(&self.component),
                short(&now.component)
            ));
        }
        if self.instance != now.instance {
            out.push(format!(
                "gatekeeper {gatekeeper} was re-added with other hosts, settings or credential"
            ));
        }
        if self.tool != now.tool {
            out.push(format!(
                "the tool {tool}'s description, input schema or annotations changed"
            ));
        }
        if self.class != now.class {
            out.push(format!(
                "the tool {tool} is now classified as a {}",
                now.class
            ));
        }
        if self.trust != now.trust {
            out.push(format!(
                "gatekeeper {gatekeeper}'s trust tier changed from {} to {}",
                self.trust, now.trust
            ));
        }
        if self.account != now.account {
            out.push(format!(
                "it would be sent with the account {} instead of {}",
                now.account, self.account
            ));
        }
        out
    }
}

fn short(digest: &str) -> &str {
    digest.get(..12).unwrap_or(digest)
}
