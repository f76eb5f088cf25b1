//! Sharing (SPEC S, and the shared-chat half of O3): people and their own
//! accounts, collaborators and share links, the re-verification of every
//! observed source on each open (S2), the refusal of reads a collaborator
//! could not see (S3), and removal (S5).
//!
//! Owns the decision whether a person may observe a chat, made from the
//! chat's observation set alone: it never reads or shows what a gadget
//! produced. Storage (and the transactions that make the latch and a share
//! exclusive) lives in `store::sharing`; asking a gatekeeper lives in
//! `runtime::gatekeeper`. It may not stage, apply or read on a gadget's
//! behalf.

use crate::access::{Need, Refusal};
use crate::capability::{Operator, Person};
use crate::kernel::{Kernel, Turn, check_name, random_hex, settings_for};
use crate::prompt::inline;
use crate::runtime::gatekeeper::{self as gk, Reach, wit as gkwit};
use crate::store::{Account, Collaborator, GatekeeperRecord, Observer};
use anyhow::bail;
use sha2::{Digest as _, Sha256};
use std::collections::BTreeMap;

// How a gatekeeper answers for observers (SPEC S4), as its manifest says;
// the manifest reads unknown text as `Refuse` (fail closed).
use crate::manifest::ObserverStrategy as Strategy;

/// What the opener brings: a share link, and the accounts they choose per
/// gatekeeper (by label; the default account where none is chosen).
#[derive(Clone, Debug, Default)]
pub struct OpenRequest {
    /// The share link's token, when the opener was not added by name.
    pub link: Option<String>,
    /// Gatekeeper name → the label of the opener's account to re-verify with
    /// there; a gatekeeper not named uses their default account.
    pub accounts: BTreeMap<String, String>,
}

/// One binding that failed re-verification (SPEC S2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObserverFailure {
    /// The gatekeeper that served the observed source.
    pub gatekeeper: String,
    /// The source's id, as the gatekeeper reported it when it was read.
    pub source: String,
    /// The source's title (attacker text: shown only through the sanitiser).
    pub title: String,
    /// `user/label`; `None` when the opener has no account there.
    pub account: Option<String>,
    /// Why the check failed: the gatekeeper's denial, or the kernel's own
    /// reason (no account, gatekeeper removed, no answer).
    pub reason: String,
}

impl ObserverFailure {
    /// The one line an opener sees: source, account, reason, each with
    /// control and markup characters removed (the reason is a gatekeeper's
    /// text).
    pub fn line(&self) -> String {
        format!(
            "{} ({}) at {}, account {}: {}",
            inline(&self.source),
            inline(&self.title),
            inline(&self.gatekeeper),
            self.account
                .as_deref()
                .map(inline)
                .unwrap_or_else(|| "(none connected)".into()),
            inline(&self.reason)
        )
    }
}

/// The result of an open.
#[derive(Clone, Debug)]
pub enum OpenOutcome {
    /// The owner opens their own chat: nothing to verify.
    Owner,
    /// Every observed source was re-verified; these observers are stored.
    Admitted {
        /// The opener's bindings, one per gatekeeper of the chat.
        observers: Vec<Observer>,
        /// How many distinct observed sources were checked.
        checked: usize,
    },
    /// Refused; nothing was stored. `alternatives` lists, per failing
    /// gatekeeper, the opener's other accounts to choose from.
    Refused {
        /// Every source that failed, with why.
        failures: Vec<ObserverFailure>,
        /// Gatekeeper name → labels of the opener's other accounts there.
        alternatives: BTreeMap<String, Vec<String>>,
    },
}

impl Kernel {
    /// Whether `user` may connect an account `label` at `gatekeeper`: the
    /// person and the gatekeeper exist, and it has a credential host.
    pub(crate) fn check_account_target(
        &self,
        user: &str,
        gatekeeper: &str,
        label: &str,
    ) -> anyhow::Result<()> {
        check_name(label, "account")?;
        if !self.store().user_exists(user)? {
            bail!("no person named {user:?}; add them first with `gatehouse user add {user}`");
        }
        let Some(g) = self.store().gatekeeper(gatekeeper)? else {
            bail!("no gatekeeper named {gatekeeper:?}; `gatehouse gatekeepers` lists them");
        };
        if g.credential_host().is_none() {
            bail!(
                "gatekeeper {gatekeeper:?} has no host a credential may go to (it allows {} hosts and none was named): add it again with --credential-host HOST",
                g.hosts.len()
            );
        }
        Ok(())
    }

    /// Apply the one authorization rule (W1) for `person` in `chat`.
    pub(crate) fn require(&self, chat: &str, person: &str, need: Need) -> anyhow::Result<()> {
        self.store()
            .access(chat, person)?
            .require(need, chat, person)?;
        Ok(())
    }

    /// Before `user` runs a turn in `chat`: the owner passes; anyone else
    /// must pass an open, re-verified now with the accounts they chose last.
    pub(crate) async fn verify_runner(&self, chat: &str, user: &str) -> anyhow::Result<()> {
        let (c, user_) = (chat.to_owned(), user.to_owned());
        // A reader, in place: this runs before every turn. The chat's
        // observers are read only for someone who is not its owner.
        let observers = self
            .store()
            .read_now(move |conn| {
                match crate::store::chat_in(conn, &c)? {
                    // An unknown chat is reported by the turn itself.
                    None => Ok(None),
                    Some(chat) if chat.owner == user_ => Ok(None),
                    Some(_) => crate::store::observers_in(conn, &c).map(Some),
                }
            })
            .await?;
        let Some(observers) = observers else {
            return Ok(());
        };
        let accounts = observers
            .into_iter()
            .filter(|o| o.user == user)
            .filter_map(|o| {
                let label = o.account?.split_once('/')?.1.to_owned();
                Some((o.gatekeeper, label))
            })
            .collect();
        let request = OpenRequest {
            link: None,
            accounts,
        };
        match self.person(user).open_chat(chat, &request).await? {
            OpenOutcome::Refused { failures, .. } => {
                let lines: Vec<String> = failures.iter().map(ObserverFailure::line).collect();
                bail!(crate::access::Refusal::Unverified(format!(
                    "{user} may not run gadgets in chat {chat:?}: {}",
                    lines.join("; ")
                )))
            }
            OpenOutcome::Owner | OpenOutcome::Admitted { .. } => Ok(()),
        }
    }

    /// Ask gatekeeper `g` whether `account` may observe `sources`, with
    /// that account's credential (never anyone else's). A gatekeeper that
    /// declares `no-check` is not asked; one that crashes refuses.
    async fn ask_observer(
        &self,
        g: &GatekeeperRecord,
        account: Option<(Account, String)>,
        sources: Vec<gkwit::Source>,
    ) -> Result<gkwit::ObserverVerdict, String> {
        if g.manifest.observers == Strategy::NoCheck {
            return Ok(gkwit::ObserverVerdict {
                denials: Vec::new(),
                scope: None,
            });
        }
        let pre = self
            .runtime()
            .gatekeeper(&g.digest)
            .map_err(|e| format!("the gatekeeper cannot be loaded: {e:#}"))?;
        let (label, credential) = match account {
            Some((a, c)) => (Some(a.id()), Some(c)),
            None => (None, None),
        };
        let reach = Reach::of(g, credential);
        let check = gkwit::ObserverCheck {
            account: label,
            settings: settings_for(g),
            sources,
        };
        let called = gk::check_observer(&pre, &self.runtime().limits, &g.name, reach, check).await;
        called.outcome.map_err(|gk::Fault::Crashed(m)| m)
    }

    /// SPEC S3: in a shared chat, may this read be made? `None` admits it;
    /// `Some(reason)` refuses it before the gatekeeper is called, because
    /// some current collaborator (other than the reader) could not see what
    /// it would touch. Collaborators who have not opened the chat yet count
    /// too (the safe side: they may open it later).
    pub(crate) async fn exclude_forward(
        &self,
        turn: &Turn,
        g: &GatekeeperRecord,
        invocation: &gkwit::Invocation,
        collaborators: &[String],
    ) -> anyhow::Result<Option<String>> {
        let strategy = g.manifest.observers;
        let others: Vec<&String> = collaborators
            .iter()
            .filter(|c| c.as_str() != turn.person())
            .collect();
        if others.is_empty() || strategy == Strategy::NoCheck {
            return Ok(None);
        }
        let refuse = |what: &str| {
            Some(format!(
                "refused before it was made: this chat is shared, and a collaborator is not permitted to see {what}; nothing was read"
            ))
        };
        if strategy == Strategy::Refuse {
            return Ok(refuse(&format!(
                "anything from {} (it admits no observers)",
                g.name
            )));
        }
        let predicted = if strategy == Strategy::TrackReads {
            let pre = self.runtime().gatekeeper(&g.digest)?;
            let called =
                gk::predict_sources(&pre, &self.runtime().limits, &g.name, invocation.clone())
                    .await;
            match called.outcome {
                Ok(p) if !p.is_empty() => p,
                _ => {
                    return Ok(refuse(
                        "what this read would touch (the gatekeeper cannot say in advance)",
                    ));
                }
            }
        } else {
            Vec::new()
        };
        let chat = turn.chat.clone();
        let observers = self.store().run(move |s| s.observers(&chat)).await?;
        for user in others {
            let bound = observers
                .iter()
                .find(|o| &o.user == user && o.gatekeeper == g.name);
            match (strategy, bound) {
                // Passed its one access check when it opened (S4).
                (Strategy::AccessCheck, Some(_)) => continue,
                (
                    _,
                    Some(Observer {
                        scope: Some(scope), ..
                    }),
                ) => {
                    if let Some(unseen) = first_unlisted(scope, &predicted) {
                        return Ok(refuse(&inline(&unseen.title)));
                    }
                }
                _ => {
                    // Never checked here (or no list to check against):
                    // ask now, with that collaborator's own account.
                    let label = bound
                        .and_then(|o| o.account.as_deref())
                        .and_then(|a| a.split_once('/'))
                        .map(|(_, l)| l.to_owned());
                    let (u, name) = (user.clone(), g.name.clone());
                    let account = self
                        .store()
                        .run(move |s| s.account_credential(&u, &name, label.as_deref()))
                        .await?;
                    let sources = if predicted.is_empty() {
                        vec![gkwit::Source {
                            id: g.name.clone(),
                            title: format!("gatekeeper {}", g.name),
                            restricted: false,
                        }]
                    } else {
                        predicted.clone()
                    };
                    match self.ask_observer(g, account, sources.clone()).await {
                        Ok(v) if v.denials.is_empty() => {}
                        Ok(v) => {
                            let title = sources
                                .iter()
                                .find(|s| v.denials.iter().any(|d| d.source == s.id))
                                .map(|s| s.title.clone())
                                .unwrap_or_else(|| format!("data from {}", g.name));
                            return Ok(refuse(&inline(&title)));
                        }
                        Err(_) => return Ok(refuse(&format!("data from {}", g.name))),
                    }
                }
            }
        }
        Ok(None)
    }
}

impl Person<'_> {
    /// This person's accounts (never their credentials).
    pub fn accounts(&self) -> anyhow::Result<Vec<crate::store::Account>> {
        self.kernel.store().accounts(Some(self.name))
    }

    /// Connect one of `user`'s own accounts at a gatekeeper's service; the
    /// credential goes to the kernel's secret store and never to a component.
    pub fn connect_account(
        &self,
        gatekeeper: &str,
        label: &str,
        credential: &str,
        make_default: bool,
    ) -> anyhow::Result<Account> {
        let user = self.name;
        self.kernel.check_account_target(user, gatekeeper, label)?;
        let credential = credential.trim();
        if credential.is_empty() {
            bail!(
                "the credential is empty; pipe it on stdin, e.g. `printf %s TOKEN | gatehouse account connect ...`"
            );
        }
        // A static token is never taken for an OAuth grant (whose form
        // the kernel refreshes and opens differently).
        if crate::oauth::is_grant(credential) {
            bail!(
                "the credential has the form of a stored OAuth grant; connect with --oauth instead"
            );
        }
        self.kernel
            .store()
            .connect_account(user, gatekeeper, label, credential, make_default)
    }

    /// Share `chat` with `with` (W1: the owner only). A latched chat gains
    /// no collaborators (O3). The collaborator sees nothing until their
    /// first successful open (W2); `may_decide` lets them decide too.
    /// Sharing again with a collaborator changes only `may_decide`.
    pub fn share(&self, chat: &str, with: &str, may_decide: bool) -> anyhow::Result<bool> {
        let by = self.name;
        self.kernel.require(chat, by, Need::Share)?;
        Ok(self.kernel.store().share(chat, with, by, may_decide)??)
    }

    /// Create a share link: a token whoever holds may open the chat with
    /// (and is then re-verified like any collaborator). Only its digest is
    /// stored, so the token is shown once.
    pub fn create_share_link(&self, chat: &str) -> anyhow::Result<String> {
        let by = self.name;
        self.kernel.require(chat, by, Need::Share)?;
        let token = random_hex(24)?;
        self.kernel
            .store()
            .create_link(chat, &link_digest(&token), by)??;
        Ok(token)
    }

    /// Remove a collaborator and their observers (S5).
    pub fn unshare(&self, chat: &str, user: &str) -> anyhow::Result<bool> {
        let by = self.name;
        self.kernel.require(chat, by, Need::Share)?;
        self.kernel.store().unshare(chat, user)
    }

    /// Revoke every share link of `chat`.
    pub fn revoke_links(&self, chat: &str) -> anyhow::Result<usize> {
        let by = self.name;
        self.kernel.require(chat, by, Need::Share)?;
        self.kernel.store().revoke_links(chat)
    }

    /// A chat's collaborators, for someone who may see it.
    pub fn collaborators(&self, chat: &str) -> anyhow::Result<Vec<Collaborator>> {
        let by = self.name;
        self.kernel.require(chat, by, Need::See)?;
        self.kernel.store().collaborators(chat)
    }

    /// A chat's observers (each collaborator's binding per gatekeeper), for
    /// someone who may see it.
    pub fn observers(&self, chat: &str) -> anyhow::Result<Vec<Observer>> {
        let by = self.name;
        self.kernel.require(chat, by, Need::See)?;
        self.kernel.store().observers(chat)
    }

    /// Open `chat` as `user` (SPEC S2): for every gatekeeper the chat has
    /// observed through, ask it, with the opener's own account, whether
    /// that account may observe every source the chat observed there. All
    /// failures are collected. Only a fully admitted open is stored (the
    /// observers, and the collaborator a share link makes); a refused one
    /// stores nothing.
    pub async fn open_chat(
        &self,
        chat: &str,
        request: &OpenRequest,
    ) -> anyhow::Result<OpenOutcome> {
        let user = self.name;
        // Everything the decision needs from the store, in one trip off the
        // executor: the chat, the opener, the observation set, and for each
        // gatekeeper observed through, its record and the opener's account.
        let link = request.link.as_deref().map(link_digest);
        let (c, user_known, may_see, intros, observed, records, credentials, accounts) = {
            let (chat, user) = (chat.to_owned(), user.to_owned());
            let chosen = request.accounts.clone();
            let link = link.clone();
            self.kernel
                .store()
                .run(move |s| {
                    let observed = s.observed_sources(&chat)?;
                    let mut records = BTreeMap::new();
                    let mut credentials = BTreeMap::new();
                    for (g, _) in &observed {
                        if records.contains_key(g) {
                            continue;
                        }
                        records.insert(g.clone(), s.gatekeeper(g)?);
                        let label = chosen.get(g).map(String::as_str);
                        credentials.insert(g.clone(), s.account_credential(&user, g, label)?);
                    }
                    let link_opens = match &link {
                        Some(d) => s.link_opens(&chat, d)?,
                        None => false,
                    };
                    Ok((
                        s.chat(&chat)?,
                        s.user_exists(&user)?,
                        s.is_collaborator(&chat, &user)? || link_opens,
                        s.introductions(&chat)?,
                        observed,
                        records,
                        credentials,
                        s.accounts(Some(&user))?,
                    ))
                })
                .await?
        };
        let Some(c) = c else {
            bail!(Refusal::NoSuchChat(chat.to_owned()));
        };
        if c.owner == user {
            return Ok(OpenOutcome::Owner);
        }
        // Refusals that no account can fix come first, before any
        // gatekeeper is asked anything. Someone the chat is not shared with
        // (and who brings no valid link) learns nothing of it, not even
        // that it is locked down: the answer for a chat that does not exist.
        if !may_see {
            bail!(Refusal::NoSuchChat(chat.to_owned()));
        }
        if !user_known {
            bail!("no person named {user:?}; add them first with `gatehouse user add {user}`");
        }
        if c.latched {
            bail!(crate::store::ShareRefusal::LatchedOpen(chat.to_owned()));
        }
        for g in request.accounts.keys() {
            if !intros.iter().any(|i| &i.gatekeeper == g) {
                bail!(
                    "chat {chat:?} has no gatekeeper {g:?}; choose accounts only for its gatekeepers"
                );
            }
        }

        // The observation set (S1), per gatekeeper, each source once.
        let mut by_gatekeeper: BTreeMap<String, Vec<gkwit::Source>> = BTreeMap::new();
        for (g, sources) in observed {
            let list = by_gatekeeper.entry(g).or_default();
            for s in parse_sources(&sources) {
                if !list.iter().any(|x| x.id == s.id) {
                    list.push(s);
                }
            }
        }

        let mut failures = Vec::new();
        let mut observers = Vec::new();
        let mut checked = 0;
        for (name, sources) in &by_gatekeeper {
            let label = request.accounts.get(name).map(String::as_str);
            let fail_all = |account: Option<String>, reason: &str| -> Vec<ObserverFailure> {
                sources
                    .iter()
                    .map(|s| ObserverFailure {
                        gatekeeper: name.clone(),
                        source: s.id.clone(),
                        title: s.title.clone(),
                        account: account.clone(),
                        reason: reason.to_owned(),
                    })
                    .collect()
            };
            let Some(g) = records.get(name).cloned().flatten() else {
                failures.extend(fail_all(
                    None,
                    "the gatekeeper was removed, so nobody can check this source",
                ));
                continue;
            };
            let account = credentials.get(name).cloned().flatten();
            if let (Some(l), None) = (label, &account) {
                failures.extend(fail_all(None, &format!("{user} has no account {l:?} here")));
                continue;
            }
            checked += sources.len();
            let verdict = self
                .kernel
                .ask_observer(&g, account.clone(), sources.clone())
                .await;
            let account_id = account.as_ref().map(|(a, _)| a.id());
            match verdict {
                Err(reason) => failures.extend(fail_all(account_id, &reason)),
                Ok(v) if !v.denials.is_empty() => {
                    for d in v.denials {
                        let title = sources
                            .iter()
                            .find(|s| s.id == d.source)
                            .map(|s| s.title.clone())
                            .unwrap_or_else(|| d.source.clone());
                        failures.push(ObserverFailure {
                            gatekeeper: name.clone(),
                            source: d.source,
                            title,
                            account: account_id.clone(),
                            reason: d.reason,
                        });
                    }
                }
                Ok(v) => observers.push(Observer {
                    chat: chat.to_owned(),
                    user: user.to_owned(),
                    gatekeeper: name.clone(),
                    account: account_id,
                    scope: v.scope,
                }),
            }
        }

        if !failures.is_empty() {
            let mut alternatives: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for f in &failures {
                let others: Vec<String> = accounts
                    .iter()
                    .filter(|a| a.gatekeeper == f.gatekeeper && Some(a.id()) != f.account)
                    .map(|a| a.label.clone())
                    .collect();
                if !others.is_empty() {
                    alternatives.insert(f.gatekeeper.clone(), others);
                }
            }
            // A failed check takes away what an earlier open gave (W2):
            // the collaborator sees nothing until an open succeeds again.
            if may_see {
                let (c, u) = (chat.to_owned(), user.to_owned());
                self.kernel.store().run(move |s| s.unverify(&c, &u)).await?;
            }
            return Ok(OpenOutcome::Refused {
                failures,
                alternatives,
            });
        }
        let (c, u, stored) = (chat.to_owned(), user.to_owned(), observers.clone());
        self.kernel
            .store()
            .run(move |s| s.admit(&c, &u, link.as_deref(), &stored))
            .await??;
        Ok(OpenOutcome::Admitted { observers, checked })
    }
}

impl Operator<'_> {
    /// Add a person (SPEC S): someone who can own chats, collaborate and
    /// connect accounts. Adding one who exists is not an error.
    pub fn add_user(&self, name: &str) -> anyhow::Result<bool> {
        check_name(name, "user")?;
        self.kernel.store().add_user(name)
    }
}

/// Whether a collaborator's stored observer binding at a gatekeeper covers
/// these source ids: the binding exists (their re-verification there
/// passed, SPEC S2) and, where the gatekeeper listed what the account may
/// see, lists every one of them. The check a read in a shared chat makes
/// of a bound collaborator (S3), for data already in the chat.
pub(crate) fn binding_covers<'a>(
    bound: Option<&Observer>,
    mut ids: impl Iterator<Item = &'a str>,
) -> bool {
    match bound {
        None => false,
        Some(Observer { scope: None, .. }) => true,
        Some(Observer {
            scope: Some(scope), ..
        }) => ids.all(|id| listed(scope, id)),
    }
}

/// The first of `sources` a gatekeeper's list of what an account may see
/// leaves out: what a shared read refuses to touch for that collaborator.
fn first_unlisted<'a>(scope: &[String], sources: &'a [gkwit::Source]) -> Option<&'a gkwit::Source> {
    sources.iter().find(|s| !listed(scope, &s.id))
}

/// Whether a gatekeeper's list of what an account may see names `id`: the
/// one comparison both a shared read and gadget storage make.
fn listed(scope: &[String], id: &str) -> bool {
    scope.iter().any(|s| s == id)
}

/// What a share link is stored as.
fn link_digest(token: &str) -> String {
    hex::encode(Sha256::digest(token.trim().as_bytes()))
}

/// The sources of one observation's JSON array, as the open reads them
/// (and gadget storage, which keeps exactly what an open would verify).
pub(crate) fn parse_sources(json: &str) -> Vec<gkwit::Source> {
    let Ok(values) = serde_json::from_str::<Vec<serde_json::Value>>(json) else {
        return Vec::new();
    };
    values
        .iter()
        .filter_map(|v| {
            Some(gkwit::Source {
                id: v.get("id")?.as_str()?.to_owned(),
                title: v
                    .get("title")
                    .and_then(|t| t.as_str())
                    .unwrap_or_default()
                    .to_owned(),
                restricted: v.get("restricted").and_then(|r| r.as_bool()) == Some(true),
            })
        })
        .collect()
}
