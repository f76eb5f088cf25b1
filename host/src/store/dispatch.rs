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
use super::sql::{Sql, args};
use crate::access::{Access, Standing};
use crate::classify::{self, Kind};
use crate::principal::{Credential, CredentialFacts, choose_credential};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// An introduction, resolved against its gatekeeper, for one person: what
/// was read, never changed after (only [`resolve`] makes one, and it is
/// shared, never copied), which is what lets it keep the facts computed
/// from it.
#[derive(Debug)]
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
    /// The facts of the tools called through it so far ([`Facts::of`]).
    facts: FactsOf,
}

/// The facts of a resolution's tools, each computed once: a function of
/// what was resolved, and what a stage spent most of its own time outside
/// the store on (hashing the gatekeeper's instance, the grant and the
/// tool's entry).
#[derive(Debug, Default)]
struct FactsOf(Mutex<HashMap<String, Facts>>);

/// How many tools' facts one resolution keeps: a gadget calls a few tools
/// of a huge manifest, and one that calls more computes the rest each time.
const KEPT_FACTS: usize = 64;

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
    /// The person may not act in the chat (any more): not its owner nor a
    /// verified collaborator, or the chat is latched and they are not its
    /// owner, or there is no such chat (W2: the three are told alike).
    /// Asked on every resolution, so a collaborator removed while their
    /// turn runs is refused at its next call.
    NoStanding {
        /// The chat, as asked.
        chat: String,
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
///
/// The person's standing is asked first, by the one authorization rule
/// (`crate::access`, [`Access::may_act`]): every call of a turn resolves,
/// and so does every claim for its stager, so standing lost mid-turn (an
/// `unshare`, a failed re-verification, the latch) refuses the turn's next
/// call and holds what it staged. Every table it reads moves the policy
/// epoch when it changes, so a kept resolution never outlives it.
pub(crate) fn resolve(
    db: &dyn Sql,
    chat: &str,
    key: &str,
    person: &str,
) -> anyhow::Result<Result<Resolved, Unresolved>> {
    let no_standing = || {
        Ok(Err(Unresolved::NoStanding {
            chat: chat.to_owned(),
        }))
    };
    let Some((owner, latched)) = super::sharing::chat_state(db, chat)? else {
        return no_standing();
    };
    let collaborators: Vec<(String, Option<i64>, bool)> = db
        .rows(
            "SELECT \"user\", verified_at, may_decide FROM collaborators WHERE chat = ?1",
            args![chat],
        )?
        .iter()
        .map(|r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .collect::<anyhow::Result<_>>()?;
    // A workflow run's approver is no collaborator and may not act either:
    // for acting, everyone but the owner and collaborators is a stranger.
    let standing = if person == owner {
        Standing::Owner
    } else {
        match collaborators.iter().find(|(u, _, _)| u == person) {
            Some((_, verified, may_decide)) => Standing::Collaborator {
                verified: verified.is_some(),
                may_decide: *may_decide,
            },
            None => Standing::Stranger,
        }
    };
    if !Access::of(standing, latched).may_act() {
        return no_standing();
    }
    let intros = super::registry::introductions_in(db, chat)?;
    let Some(intro) = intros.iter().find(|i| i.key == key) else {
        return Ok(Err(Unresolved::UnknownKey {
            key: key.to_owned(),
            known: intros.into_iter().map(|i| i.key).collect(),
        }));
    };
    let Some(gatekeeper) = super::registry::gatekeeper_in(db, &intro.gatekeeper)? else {
        return Ok(Err(Unresolved::Removed {
            key: key.to_owned(),
        }));
    };
    let collaborators = collaborators.into_iter().map(|(u, _, _)| u).collect();
    let credential = credential_in(db, chat, &owner, person, &gatekeeper)?;
    Ok(Ok(Resolved {
        key: key.to_owned(),
        grant: intro.tools.clone(),
        gatekeeper,
        owner,
        latched,
        collaborators,
        credential,
        facts: FactsOf::default(),
    }))
}

/// What this process resolved, each beside the policy epoch it was read
/// under (schema 6): every change to a table resolution reads moves the
/// epoch in the same transaction, whichever process makes it, so a
/// resolution whose epoch is still current is exactly what resolving
/// again would give. Reusing it saves the seven-table trip a read or stage
/// made on every call.
///
/// Holds only successful resolutions; an unknown key is resolved again
/// each time (it is the error path). Bounded: when full, it starts over.
#[derive(Default)]
pub(crate) struct Resolutions {
    by_call: Mutex<HashMap<Call, (i64, Arc<Resolved>)>>,
}

/// What a resolution is of: chat, key and person.
type Call = (String, String, String);

/// How many resolutions a process keeps before it starts over.
const KEPT_RESOLUTIONS: usize = 4096;

impl Resolutions {
    /// What is kept for `call`, with the epoch it was kept under.
    fn kept(&self, call: &Call) -> Option<(Arc<Resolved>, i64)> {
        let kept = self.by_call.lock().unwrap_or_else(|e| e.into_inner());
        kept.get(call).map(|(at, r)| (r.clone(), *at))
    }

    /// What is kept for `call` if it was kept under `epoch`.
    pub(in crate::store) fn kept_at(&self, call: &Call, epoch: i64) -> Option<Arc<Resolved>> {
        self.kept(call)
            .filter(|(_, at)| *at == epoch)
            .map(|(r, _)| r)
    }

    /// What is kept for the call, with the epoch it was kept under, not
    /// checked against the epoch now: only for a stage, whose transaction
    /// checks it (see [`Store::resolution_kept`](super::Store::resolution_kept)).
    pub(crate) fn kept_unchecked(
        &self,
        chat: &str,
        key: &str,
        person: &str,
    ) -> Option<(Arc<Resolved>, i64)> {
        self.kept(&(chat.to_owned(), key.to_owned(), person.to_owned()))
    }

    pub(in crate::store) fn keep(&self, call: Call, epoch: i64, r: &Arc<Resolved>) {
        let mut kept = self.by_call.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() >= KEPT_RESOLUTIONS {
            kept.clear();
        }
        kept.insert(call, (epoch, r.clone()));
    }

    /// [`Resolutions::resolve`] in the caller's transaction on any engine.
    /// The epoch is read before what it covers: under READ COMMITTED a
    /// change committed between the two makes what is kept newer than its
    /// epoch, never older, and the next call, seeing the epoch moved,
    /// resolves again.
    pub(crate) fn resolve_on(
        &self,
        db: &dyn Sql,
        chat: &str,
        key: &str,
        person: &str,
    ) -> anyhow::Result<Result<Arc<Resolved>, Unresolved>> {
        let call = (chat.to_owned(), key.to_owned(), person.to_owned());
        let epoch: i64 = db
            .row("SELECT n FROM policy_epoch WHERE id = 1", args![])?
            .ok_or_else(|| anyhow::anyhow!("the database has no policy epoch"))?
            .get(0)?;
        if let Some(r) = self.kept_at(&call, epoch) {
            return Ok(Ok(r));
        }
        let resolved = resolve(db, chat, key, person)?.map(Arc::new);
        if let Ok(r) = &resolved {
            self.keep(call, epoch, r);
        }
        Ok(resolved)
    }
}

/// The credential `person`'s calls in `chat` run under at `g`: gathered
/// here, decided by [`choose_credential`].
pub(crate) fn credential_in(
    db: &dyn Sql,
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
        db.row(
            "SELECT account FROM observers WHERE chat = ?1 AND \"user\" = ?2 AND gatekeeper = ?3",
            args![chat, person, g.name],
        )?
        .map(|r| r.get::<Option<String>>(0))
        .transpose()?
        .flatten()
        .and_then(|a| a.split_once('/').map(|(_, l)| l.to_owned()))
    };
    let own = super::sharing::account_credential_in(db, person, &g.name, chosen.as_deref())?
        .map(|(a, secret)| (a.id(), secret));
    let operator_value = match &g.secret {
        Some(name) => super::registry::secret_in(db, name)?,
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
        let lock = || r.facts.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = lock().get(tool) {
            return Some(known.clone());
        }
        let facts = Facts::compute(r, tool)?;
        let mut kept = lock();
        if kept.len() < KEPT_FACTS {
            kept.insert(tool.to_owned(), facts.clone());
        }
        Some(facts)
    }

    fn compute(r: &Resolved, tool: &str) -> Option<Facts> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Introduction, Store, Trust};
    use std::collections::BTreeSet;

    /// A chat `c` of `ann` with key `K` naming gatekeeper `g` (which has an
    /// operator credential), shared with `bob`, who observes through his
    /// own account: every table resolution can read is in play.
    fn shared_chat() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db"), crate::seal::test_key()).unwrap();
        store.put_secret("op", "operator-credential").unwrap();
        store
            .put_gatekeeper(&GatekeeperRecord {
                name: "g".into(),
                digest: "0".repeat(64),
                trust: Trust::Byo,
                hosts: vec![],
                secret: Some("op".into()),
                credential_host: None,
                settings: vec![],
                manifest: Arc::default(),
                added_at: 0,
            })
            .unwrap();
        for user in ["ann", "bob"] {
            store.add_user(user).unwrap();
        }
        store.create_chat("c", "ann").unwrap();
        let intro = Introduction {
            chat: "c".into(),
            key: "K".into(),
            gatekeeper: "g".into(),
            tools: None,
        };
        store.introduce(&intro, "ann").unwrap();
        store
            .connect_account("bob", "g", "work", "bob-credential", true)
            .unwrap();
        store.share("c", "bob", "ann", false).unwrap().unwrap();
        // Bob opened the chat and passed re-verification (S2).
        let home = store.home().expect("the home");
        let conn = home.lock();
        conn.execute(
            "INSERT INTO observers (chat, user, gatekeeper, account, added_at)
             VALUES ('c', 'bob', 'g', 'bob/work', 0)",
            [],
        )
        .unwrap();
        conn.execute(
            "UPDATE collaborators SET verified_at = 1 WHERE chat = 'c' AND user = 'bob'",
            [],
        )
        .unwrap();
        drop(conn);
        (dir, store)
    }

    /// Every table resolution reads moves the policy epoch when it
    /// changes: else a kept resolution could outlive a revoked
    /// introduction, a lowered tier or a removed credential. The tables
    /// are found by SQLite's authorizer as resolution's statements are
    /// prepared, for the owner and for a collaborator, so a new read of a
    /// new table is caught here.
    #[test]
    fn every_table_resolution_reads_moves_the_epoch() {
        let (dir, _store) = shared_chat();
        let conn = rusqlite::Connection::open(dir.path().join("state.db")).unwrap();
        let read = Arc::new(Mutex::new(BTreeSet::new()));
        let seen = read.clone();
        conn.authorizer(Some(move |ctx: rusqlite::hooks::AuthContext<'_>| {
            if let rusqlite::hooks::AuthAction::Read { table_name, .. } = ctx.action {
                seen.lock().unwrap().insert(table_name.to_owned());
            }
            rusqlite::hooks::Authorization::Allow
        }));
        for person in ["ann", "bob"] {
            let r = resolve(&conn, "c", "K", person).unwrap().unwrap();
            assert_eq!(r.gatekeeper.name, "g");
        }
        conn.authorizer(
            None::<fn(rusqlite::hooks::AuthContext<'_>) -> rusqlite::hooks::Authorization>,
        );
        let read = read.lock().unwrap().clone();
        for t in [
            "introductions",
            "gatekeepers",
            "chats",
            "observers",
            "accounts",
            "secrets",
        ] {
            assert!(read.contains(t), "resolution read {read:?}, not {t}");
        }
        let triggers: BTreeSet<String> = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'trigger'")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        for t in &read {
            for op in ["insert", "update", "delete"] {
                let name = format!("policy_epoch_{t}_{op}");
                assert!(
                    triggers.contains(&name),
                    "resolution reads {t}, but no trigger {name} moves the policy epoch"
                );
            }
        }
    }

    /// A kept resolution is used only while the epoch stands: a change
    /// made through any connection is seen by the next resolution.
    #[test]
    fn a_kept_resolution_gives_way_to_a_change() {
        let (_dir, store) = shared_chat();
        let first = store.resolve("c", "K", "bob").unwrap().unwrap().0;
        assert_eq!(first.gatekeeper.trust, Trust::Byo);
        assert_eq!(first.credential.id(), "bob/work");
        store.set_trust("g", Trust::Vetted).unwrap();
        let second = store.resolve("c", "K", "bob").unwrap().unwrap().0;
        assert_eq!(second.gatekeeper.trust, Trust::Vetted);
        let owners = store.resolve("c", "K", "ann").unwrap().unwrap().0;
        assert_eq!(owners.collaborators, ["bob"]);
        // Removed mid-turn: bob's next call resolves to nothing (the kept
        // resolution gives way), and the owner's sees him gone.
        store.unshare("c", "bob").unwrap();
        assert_eq!(
            store.resolve("c", "K", "bob").unwrap().err(),
            Some(Unresolved::NoStanding { chat: "c".into() })
        );
        let third = store.resolve("c", "K", "ann").unwrap().unwrap().0;
        assert!(third.collaborators.is_empty(), "{:?}", third.collaborators);
        store
            .home()
            .expect("the home")
            .lock()
            .execute("DELETE FROM introductions WHERE chat = 'c'", [])
            .unwrap();
        assert!(store.resolve("c", "K", "ann").unwrap().is_err());
    }

    /// A plain read's observation in chat `c`, by `ann`.
    fn observation() -> crate::store::NewObservation {
        crate::store::NewObservation {
            chat: "c".into(),
            principal: crate::principal::Principal::person("ann"),
            gadget: None,
            gatekeeper: "g".into(),
            tool: "read".into(),
            classified_by: "server-annotation",
            trust: Trust::Byo,
            sources: crate::store::Sources::of(&[crate::store::Source {
                id: "g",
                restricted: false,
                title: "gatekeeper g",
            }]),
            account: None,
            action_ref: None,
            result_bytes: 0,
            audit: None,
        }
    }

    /// A revocation committed on another connection, as by another
    /// process, right after a read's observation is seen by the next
    /// resolve, though the resolution was kept a moment before.
    #[test]
    fn a_revocation_committed_elsewhere_is_seen_by_the_next_resolve() {
        let (dir, store) = shared_chat();
        assert!(store.resolve("c", "K", "ann").unwrap().is_ok());
        store.observe(&observation()).unwrap();
        assert!(store.resolve("c", "K", "ann").unwrap().is_ok());

        let elsewhere = rusqlite::Connection::open(dir.path().join("state.db")).unwrap();
        elsewhere
            .execute("DELETE FROM introductions WHERE chat = 'c'", [])
            .unwrap();
        assert!(
            store.resolve("c", "K", "ann").unwrap().is_err(),
            "the revocation is seen at once"
        );
    }
}

/// Resolution and the authorization rule's facts read the same on both
/// engines: one fixture written in the shared dialect, the same
/// answers for the owner, a collaborator observing through their own
/// account, and a stranger.
#[cfg(test)]
mod on_both_engines {
    use super::super::suite::{Backend, runtime, shared_chat};
    use super::*;
    use crate::access::Standing;

    fn credential(c: &Credential) -> String {
        match c {
            Credential::Account { id, secret } => format!("account {id} {}", secret.stored()),
            Credential::Operator { name, secret } => {
                format!("operator {name} {}", secret.stored())
            }
            Credential::Anonymous => "anonymous".into(),
            Credential::Refused(_) => "refused".into(),
        }
    }

    #[test]
    fn resolution_and_access_read_the_same_on_both() {
        runtime().block_on(async {
            for backend in Backend::both().await {
                let seen = backend
                    .run(|db| {
                        shared_chat(db)?;
                        let mut seen = Vec::new();
                        for person in ["ann", "bob"] {
                            let r = resolve(db, "c", "K", person)?
                                .map_err(|e| anyhow::anyhow!("{e:?}"))?;
                            let access = super::super::sharing::access(db, "c", person)?;
                            seen.push((
                                person,
                                r.gatekeeper.name.clone(),
                                r.grant.clone(),
                                r.owner.clone(),
                                r.collaborators.clone(),
                                credential(&r.credential),
                                access.standing(),
                            ));
                        }
                        let unknown = resolve(db, "c", "NOPE", "ann")?.err();
                        // A stranger resolves nothing, told as for a chat
                        // that does not exist; the rule agrees.
                        let stranger = (
                            resolve(db, "c", "K", "carl")?.err(),
                            super::super::sharing::access(db, "c", "carl")?.standing(),
                            resolve(db, "nope", "K", "ann")?.err(),
                        );
                        Ok((seen, unknown, stranger))
                    })
                    .await
                    .unwrap();
                let name = backend.name();
                let (seen, unknown, stranger) = seen;
                let grant = Some(vec!["send".to_owned()]);
                let bob = vec!["bob".to_owned()];
                assert_eq!(
                    seen,
                    vec![
                        (
                            "ann",
                            "g".into(),
                            grant.clone(),
                            "ann".into(),
                            bob.clone(),
                            "operator op operator-credential".into(),
                            Standing::Owner
                        ),
                        (
                            "bob",
                            "g".into(),
                            grant.clone(),
                            "ann".into(),
                            bob.clone(),
                            "account bob/work bob-credential".into(),
                            Standing::Collaborator {
                                verified: true,
                                may_decide: true
                            }
                        ),
                    ],
                    "{name}"
                );
                assert_eq!(
                    stranger,
                    (
                        Some(Unresolved::NoStanding { chat: "c".into() }),
                        Standing::Stranger,
                        Some(Unresolved::NoStanding {
                            chat: "nope".into()
                        }),
                    ),
                    "{name}"
                );
                assert_eq!(
                    unknown,
                    Some(Unresolved::UnknownKey {
                        key: "NOPE".into(),
                        known: vec!["K".into()]
                    }),
                    "{name}"
                );
            }
        });
    }
}
