//! What is installed and introduced: gadgets, gatekeepers, secrets, chats and
//! introductions. Plain records; the rules about them live in the kernel.

use super::sealed;
use super::sql::{Row, Sql, args};
use super::{Store, now_ms};
pub use crate::manifest::Trust;
use crate::seal::{Key, Place, Sealed};
use anyhow::{Context as _, bail};
use serde::Serialize;
use sha2::Digest as _;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Parsed manifests by the SHA-256 of their stored text. Content-addressed,
/// so one cache serves every store in the process; bounded, since a
/// process sees few distinct manifests.
fn manifest_cache() -> &'static Mutex<HashMap<String, Arc<crate::manifest::Manifest>>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<crate::manifest::Manifest>>>> =
        OnceLock::new();
    CACHE.get_or_init(Default::default)
}

const MANIFEST_CACHE_ENTRIES: usize = 256;

/// A gatekeeper's record, its manifest parsed only the first time this
/// process meets it.
pub(crate) fn gatekeeper_in(
    db: &dyn Sql,
    name: &str,
) -> anyhow::Result<Option<Arc<GatekeeperRecord>>> {
    let Some(r) = db.row(
        "SELECT name, digest, trust, hosts, secret, settings, manifest_digest, added_at,
           credential_host
         FROM gatekeepers WHERE name = ?1",
        args![name],
    )?
    else {
        return Ok(None);
    };
    let (name, digest, trust, hosts, settings): (String, String, String, String, String) =
        (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(5)?);
    let (secret, manifest_digest, added_at, credential_host): (
        Option<String>,
        Option<String>,
        i64,
        Option<String>,
    ) = (r.get(4)?, r.get(6)?, r.get(7)?, r.get(8)?);
    let cached = manifest_digest.as_ref().and_then(|d| {
        manifest_cache()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(d)
            .cloned()
    });
    let manifest = match cached {
        Some(m) => m,
        None => {
            let text: String = db
                .row(
                    "SELECT manifest FROM gatekeepers WHERE name = ?1",
                    args![name],
                )?
                .ok_or_else(|| anyhow::anyhow!("gatekeeper {name:?} was removed meanwhile"))?
                .get(0)?;
            let m: Arc<crate::manifest::Manifest> =
                Arc::new(serde_json::from_str(&text).with_context(|| {
                    format!("the stored manifest of gatekeeper {name:?} is unreadable")
                })?);
            if let Some(d) = manifest_digest {
                let mut cache = manifest_cache().lock().unwrap_or_else(|e| e.into_inner());
                if cache.len() >= MANIFEST_CACHE_ENTRIES {
                    cache.clear();
                }
                cache.insert(d, m.clone());
            }
            m
        }
    };
    let settings: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&settings).context("gatekeeper settings are not a JSON object")?;
    Ok(Some(Arc::new(GatekeeperRecord {
        trust: trust.parse()?,
        hosts: serde_json::from_str(&hosts).context("gatekeeper hosts are not a JSON list")?,
        settings: settings
            .into_iter()
            .map(|(k, v)| (k, v.as_str().unwrap_or_default().to_owned()))
            .collect(),
        manifest,
        name,
        digest,
        secret,
        credential_host,
        added_at,
    })))
}

/// The secret `name` as kept (sealed): opened only where it is used.
pub(crate) fn secret_in(db: &dyn Sql, name: &str) -> anyhow::Result<Option<Sealed>> {
    db.row("SELECT value FROM secrets WHERE name = ?1", args![name])?
        .map(|r| Ok(Sealed::kept(sealed::SECRETS, name, r.get(0)?)))
        .transpose()
}

pub(crate) fn introductions_in(db: &dyn Sql, chat: &str) -> anyhow::Result<Vec<Introduction>> {
    let rows = db.rows(
        "SELECT chat, key, gatekeeper, tools FROM introductions WHERE chat = ?1 ORDER BY key",
        args![chat],
    )?;
    let mut out = Vec::new();
    for r in rows {
        let (chat, key, gatekeeper, tools): (String, String, String, Option<String>) =
            (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
        let tools = tools
            .map(|t| serde_json::from_str(&t))
            .transpose()
            .context("an introduction's tool grant is not a JSON list")?;
        out.push(Introduction {
            chat,
            key,
            gatekeeper,
            tools,
        });
    }
    Ok(out)
}

/// The gadget installed as `name`.
pub(crate) fn gadget_in(db: &dyn Sql, name: &str) -> anyhow::Result<Option<GadgetRecord>> {
    db.row(
        "SELECT name, digest, installed_at FROM gadgets WHERE name = ?1",
        args![name],
    )?
    .as_ref()
    .map(gadget_from)
    .transpose()
}

/// What a gadget's turn starts from: the gadget `name`, and whether the
/// chat `chat` exists. One statement, because on a shared database each
/// statement is a round trip and this one runs before every turn. `None`
/// when no gadget has that name.
pub(crate) fn turn_start_in(
    db: &dyn Sql,
    gadget: &str,
    chat: &str,
) -> anyhow::Result<Option<(GadgetRecord, bool)>> {
    db.row(
        "SELECT name, digest, installed_at, (SELECT count(*) FROM chats WHERE name = ?2)
         FROM gadgets WHERE name = ?1",
        args![gadget, chat],
    )?
    .as_ref()
    .map(|r| Ok((gadget_from(r)?, r.get::<i64>(3)? > 0)))
    .transpose()
}

pub(crate) fn chat_in(db: &dyn Sql, name: &str) -> anyhow::Result<Option<Chat>> {
    db.row(
        "SELECT name, owner, latched, created_at FROM chats WHERE name = ?1",
        args![name],
    )?
    .as_ref()
    .map(chat_from)
    .transpose()
}

/// An installed gadget: a name bound to a component in the cache.
#[derive(Clone, Debug, Serialize)]
pub struct GadgetRecord {
    /// The name it was installed under (`install --name`), which `run` takes.
    pub name: String,
    /// The component's SHA-256; the cache holds it under this digest.
    pub digest: String,
    /// When it was (last) installed under this name, in ms since the epoch.
    pub installed_at: i64,
}

/// A gatekeeper instance: a component, the operator's settings for it,
/// and what it declared about itself when added (or last refreshed).
#[derive(Clone, Debug, Serialize)]
pub struct GatekeeperRecord {
    /// The instance's name, which introductions and tags (`NAME:tool`) use.
    pub name: String,
    /// The component's SHA-256.
    pub digest: String,
    /// The operator's tier for it (key one of auto-approval), read at each use.
    pub trust: Trust,
    /// The `host:port`s its outgoing HTTP may reach (SPEC C4).
    pub hosts: Vec<String>,
    /// The name of the operator's secret it is sent with when no person's
    /// account applies (the value stays in the kernel's secret store).
    pub secret: Option<String>,
    /// The allowed host credentials go to, when the operator named one
    /// (`--credential-host`); see [`GatekeeperRecord::credential_host`].
    pub credential_host: Option<String>,
    /// Operator settings handed to the component at each call (`--set`).
    pub settings: Vec<(String, String)>,
    /// Parsed once per distinct manifest and shared: a manifest may list
    /// thousands of tools, and every call consults it.
    pub manifest: Arc<crate::manifest::Manifest>,
    /// When it was added, in ms since the epoch.
    pub added_at: i64,
}

impl GatekeeperRecord {
    /// The one host a credential (the operator's secret or a person's
    /// account) is sent to (SPEC C4): the one the operator named, else the
    /// only allowed host. With several allowed hosts and none named, no
    /// host gets a credential (fail closed; `gatekeeper add` refuses a
    /// secret in that case).
    pub fn credential_host(&self) -> Option<&str> {
        match (&self.credential_host, self.hosts.as_slice()) {
            (Some(h), _) => Some(h.as_str()),
            (None, [only]) => Some(only.as_str()),
            _ => None,
        }
    }
}

/// A chat: the workspace services are introduced into, holding its ledger,
/// observations and collaborators.
#[derive(Clone, Debug, Serialize)]
pub struct Chat {
    /// The chat's name.
    pub name: String,
    /// The person who created it: sees, decides and shares it.
    pub owner: String,
    /// The restricted-data latch (SPEC O3): it read owner-only data, so it is
    /// locked down for good.
    pub latched: bool,
    /// When it was created, in ms since the epoch.
    pub created_at: i64,
}

/// A gatekeeper introduced into a chat under a key (SPEC C2), with the
/// tools granted through it (C3).
#[derive(Clone, Debug, Serialize)]
pub struct Introduction {
    /// The chat.
    pub chat: String,
    /// The key a gadget opens the service by (such as `ISSUES`).
    pub key: String,
    /// The gatekeeper instance the key names.
    pub gatekeeper: String,
    /// `None`: every tool of the gatekeeper.
    pub tools: Option<Vec<String>>,
}

fn gadget_from(r: &Row) -> anyhow::Result<GadgetRecord> {
    Ok(GadgetRecord {
        name: r.get(0)?,
        digest: r.get(1)?,
        installed_at: r.get(2)?,
    })
}

fn chat_from(r: &Row) -> anyhow::Result<Chat> {
    Ok(Chat {
        name: r.get(0)?,
        owner: r.get(1)?,
        latched: r.get(2)?,
        created_at: r.get(3)?,
    })
}

fn json<T: Serialize>(v: &T) -> anyhow::Result<String> {
    Ok(serde_json::to_string(v)?)
}

impl Store {
    /// Install (or reinstall) the component `digest` under `name`.
    pub fn put_gadget(&self, name: &str, digest: &str) -> anyhow::Result<()> {
        self.with(|db| put_gadget_in(db, name, digest, now_ms()))
    }

    pub fn gadget(&self, name: &str) -> anyhow::Result<Option<GadgetRecord>> {
        self.with(|db| gadget_in(db, name))
    }

    pub fn gadgets(&self) -> anyhow::Result<Vec<GadgetRecord>> {
        self.with(gadgets_in)
    }

    pub fn put_gatekeeper(&self, g: &GatekeeperRecord) -> anyhow::Result<()> {
        self.with(|db| put_gatekeeper_in(db, g))
    }

    pub fn gatekeeper(&self, name: &str) -> anyhow::Result<Option<Arc<GatekeeperRecord>>> {
        self.with(|db| gatekeeper_in(db, name))
    }

    pub fn gatekeepers(&self) -> anyhow::Result<Vec<Arc<GatekeeperRecord>>> {
        self.with(gatekeepers_in)
    }

    /// Change a gatekeeper's tier; it takes effect at the next call.
    pub fn set_trust(&self, name: &str, trust: Trust) -> anyhow::Result<()> {
        self.with(|db| set_trust_in(db, name, trust))
    }

    /// Keep the operator credential `name`, sealed.
    pub fn put_secret(&self, name: &str, value: &str) -> anyhow::Result<()> {
        self.write(|db| put_secret_in(db, &self.key, name, value))
    }

    /// The operator credential `name`, opened.
    pub fn secret(&self, name: &str) -> anyhow::Result<Option<String>> {
        self.with(|db| secret_in(db, name))?
            .map(|s| s.open(&self.key).map(|v| v.to_string()))
            .transpose()
    }

    pub fn create_chat(&self, name: &str, owner: &str) -> anyhow::Result<()> {
        self.with(|db| create_chat_in(db, name, owner, now_ms()))
    }

    pub fn chat(&self, name: &str) -> anyhow::Result<Option<Chat>> {
        self.with(|db| chat_in(db, name))
    }

    pub fn chats(&self) -> anyhow::Result<Vec<Chat>> {
        self.with(chats_in)
    }

    /// The chats a gadget has called a service from, per the ledger.
    pub fn chats_called_from(&self, gadget: &str) -> anyhow::Result<Vec<String>> {
        self.with(|db| chats_called_from_in(db, gadget))
    }

    pub fn introduce(&self, intro: &Introduction, by: &str) -> anyhow::Result<()> {
        self.with(|db| introduce_in(db, intro, by))
    }

    pub fn introductions(&self, chat: &str) -> anyhow::Result<Vec<Introduction>> {
        self.with(|db| introductions_in(db, chat))
    }
}

// The statements, written once for both engines (`store::sql`).

fn put_gadget_in(db: &dyn Sql, name: &str, digest: &str, now: i64) -> anyhow::Result<()> {
    db.exec(
        "INSERT INTO gadgets (name, digest, installed_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (name) DO UPDATE SET digest = excluded.digest, installed_at = excluded.installed_at",
        args![name, digest, now],
    )?;
    Ok(())
}

fn gadgets_in(db: &dyn Sql) -> anyhow::Result<Vec<GadgetRecord>> {
    db.rows(
        "SELECT name, digest, installed_at FROM gadgets ORDER BY name",
        args![],
    )?
    .iter()
    .map(gadget_from)
    .collect()
}

fn put_gatekeeper_in(db: &dyn Sql, g: &GatekeeperRecord) -> anyhow::Result<()> {
    let settings: serde_json::Map<String, serde_json::Value> = g
        .settings
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    let manifest = json(&*g.manifest)?;
    let manifest_digest = hex::encode(sha2::Sha256::digest(manifest.as_bytes()));
    db.exec(
        "INSERT INTO gatekeepers (name, digest, trust, hosts, secret, settings, manifest,
           manifest_digest, added_at, credential_host)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
         ON CONFLICT (name) DO UPDATE SET digest = excluded.digest, trust = excluded.trust,
           hosts = excluded.hosts, secret = excluded.secret, settings = excluded.settings,
           manifest = excluded.manifest, manifest_digest = excluded.manifest_digest,
           added_at = excluded.added_at, credential_host = excluded.credential_host",
        args![
            g.name,
            g.digest,
            g.trust.as_str(),
            json(&g.hosts)?,
            g.secret,
            json(&settings)?,
            manifest,
            manifest_digest,
            g.added_at,
            g.credential_host
        ],
    )?;
    Ok(())
}

/// Every gatekeeper, by name; one removed between the listing and its
/// read is left out.
fn gatekeepers_in(db: &dyn Sql) -> anyhow::Result<Vec<Arc<GatekeeperRecord>>> {
    let names = db.rows("SELECT name FROM gatekeepers ORDER BY name", args![])?;
    let mut out = Vec::with_capacity(names.len());
    for r in names {
        if let Some(g) = gatekeeper_in(db, &r.get::<String>(0)?)? {
            out.push(g);
        }
    }
    Ok(out)
}

fn set_trust_in(db: &dyn Sql, name: &str, trust: Trust) -> anyhow::Result<()> {
    let n = db.exec(
        "UPDATE gatekeepers SET trust = ?2 WHERE name = ?1",
        args![name, trust.as_str()],
    )?;
    if n == 0 {
        bail!("no gatekeeper named {name:?}; `gatehouse gatekeepers` lists them");
    }
    Ok(())
}

fn put_secret_in(db: &dyn Sql, key: &Key, name: &str, value: &str) -> anyhow::Result<()> {
    sealed::check_key_in(db, key)?;
    let sealed = key.seal_text(Place::new(sealed::SECRETS, name), value)?;
    db.exec(
        "INSERT INTO secrets (name, value) VALUES (?1, ?2)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        args![name, sealed],
    )?;
    Ok(())
}

/// A new chat; a name taken is refused in the same words on either
/// engine (the key's conflict inserts nothing, so no engine's constraint
/// message is matched).
fn create_chat_in(db: &dyn Sql, name: &str, owner: &str, now: i64) -> anyhow::Result<()> {
    let n = db.exec(
        "INSERT INTO chats (name, owner, created_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (name) DO NOTHING",
        args![name, owner, now],
    )?;
    if n == 0 {
        bail!("a chat named {name:?} already exists; pick another name");
    }
    Ok(())
}

fn chats_in(db: &dyn Sql) -> anyhow::Result<Vec<Chat>> {
    db.rows(
        "SELECT name, owner, latched, created_at FROM chats ORDER BY name",
        args![],
    )?
    .iter()
    .map(chat_from)
    .collect()
}

fn chats_called_from_in(db: &dyn Sql, gadget: &str) -> anyhow::Result<Vec<String>> {
    db.rows(
        "SELECT DISTINCT chat FROM ledger WHERE gadget = ?1 ORDER BY chat",
        args![gadget],
    )?
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// Introduce (or introduce again, replacing what the key named) a
/// gatekeeper into a chat under a key. Who may is the kernel's rule
/// (`crate::access`: the owner).
fn introduce_in(db: &dyn Sql, intro: &Introduction, by: &str) -> anyhow::Result<()> {
    let tools = intro.tools.as_ref().map(json).transpose()?;
    db.exec(
        "INSERT INTO introductions (chat, key, gatekeeper, tools, introduced_by)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (chat, key) DO UPDATE SET gatekeeper = excluded.gatekeeper,
           tools = excluded.tools, introduced_by = excluded.introduced_by",
        args![intro.chat, intro.key, intro.gatekeeper, tools, by],
    )?;
    Ok(())
}

/// What is installed and introduced, written once and run on both engines
/// (an SQLite file and a real PostgreSQL): names are kept once, a taken
/// chat name is refused in the same words, a key introduced again names
/// the newest gatekeeper, and no listing carries a secret's value.
/// Keep the bytes of the component `digest` in the shared database's
/// `components` (content-addressed: the same bytes again change nothing).
pub(super) fn keep_component_in(db: &dyn Sql, digest: &str, bytes: &[u8]) -> anyhow::Result<()> {
    db.exec(
        "INSERT INTO components (digest, bytes, added_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (digest) DO NOTHING",
        args![digest, bytes, now_ms()],
    )
    .map(drop)
}

/// The bytes of the component `digest` some host kept, if any.
pub(super) fn component_in(db: &dyn Sql, digest: &str) -> anyhow::Result<Option<Vec<u8>>> {
    db.row(
        "SELECT bytes FROM components WHERE digest = ?1",
        args![digest],
    )?
    .map(|r| r.get(0))
    .transpose()
}

#[cfg(test)]
mod on_both_engines {
    use super::*;
    use crate::access::{Need, Refusal};
    use crate::store::sharing::access;
    use crate::store::suite::{Backend, runtime};

    fn gatekeeper(name: &str, secret: Option<&str>) -> GatekeeperRecord {
        GatekeeperRecord {
            name: name.to_owned(),
            digest: "a".repeat(64),
            trust: Trust::Byo,
            hosts: vec!["api.example:443".to_owned()],
            secret: secret.map(str::to_owned),
            credential_host: None,
            settings: vec![("region".to_owned(), "eu".to_owned())],
            manifest: Arc::new(crate::store::suite::send_manifest()),
            added_at: 3,
        }
    }

    #[test]
    fn a_taken_chat_name_is_refused_in_the_same_one_line_on_both() {
        runtime().block_on(async {
            for b in Backend::both().await {
                let e = b.name();
                b.run(|db| create_chat_in(db, "c", "ann", 1))
                    .await
                    .expect("a new chat");
                let refused = b
                    .run(|db| create_chat_in(db, "c", "bob", 2))
                    .await
                    .expect_err("the name is taken")
                    .to_string();
                assert_eq!(
                    refused, "a chat named \"c\" already exists; pick another name",
                    "{e}"
                );
                let chats = b.run(chats_in).await.expect("chats");
                assert_eq!(chats.len(), 1, "{e}");
                assert_eq!(
                    (
                        chats[0].owner.as_str(),
                        chats[0].latched,
                        chats[0].created_at
                    ),
                    ("ann", false, 1),
                    "{e}: the first owner keeps it"
                );
                let c = b.run(|db| chat_in(db, "c")).await.expect("the chat");
                assert_eq!(c.map(|c| c.owner), Some("ann".to_owned()), "{e}");
                assert!(
                    b.run(|db| chat_in(db, "nowhere"))
                        .await
                        .expect("no chat")
                        .is_none(),
                    "{e}"
                );
            }
        });
    }

    #[test]
    fn gadgets_gatekeepers_and_secrets_are_replaced_by_name_and_no_listing_shows_a_value() {
        runtime().block_on(async {
            for b in Backend::both().await {
                let e = b.name();
                b.run(|db| {
                    put_gadget_in(db, "gd", &"1".repeat(64), 1)?;
                    put_gadget_in(db, "gd", &"2".repeat(64), 2)?;
                    put_gadget_in(db, "ab", &"3".repeat(64), 3)
                })
                .await
                .expect("installed");
                let gadgets = b.run(gadgets_in).await.expect("gadgets");
                let listed: Vec<_> = gadgets
                    .iter()
                    .map(|g| (g.name.as_str(), &g.digest[..1], g.installed_at))
                    .collect();
                assert_eq!(listed, [("ab", "3", 3), ("gd", "2", 2)], "{e}");
                let gd = b.run(|db| gadget_in(db, "gd")).await.expect("gd");
                assert_eq!(gd.map(|g| g.installed_at), Some(2), "{e}");

                b.run(|db| {
                    let key = crate::seal::test_key();
                    put_secret_in(db, &key, "op", "first-credential")?;
                    put_secret_in(db, &key, "op", "rotated-credential")?;
                    put_gatekeeper_in(db, &gatekeeper("g", Some("op")))?;
                    put_gatekeeper_in(db, &gatekeeper("h", None))?;
                    // Added again: the newest record replaces the first.
                    let mut again = gatekeeper("g", Some("op"));
                    again.hosts = vec!["mail.example:443".to_owned()];
                    put_gatekeeper_in(db, &again)
                })
                .await
                .expect("added");
                let secret = b.run(|db| secret_in(db, "op")).await.expect("secret");
                let opened = secret.map(|s| s.open(&crate::seal::test_key()).expect("opens"));
                assert_eq!(
                    opened.as_deref().map(String::as_str),
                    Some("rotated-credential"),
                    "{e}"
                );
                let g = b
                    .run(|db| gatekeeper_in(db, "g"))
                    .await
                    .expect("read")
                    .expect("g");
                assert_eq!(g.hosts, ["mail.example:443"], "{e}");
                assert_eq!(g.secret.as_deref(), Some("op"), "{e}");
                assert_eq!(g.settings, [("region".into(), "eu".into())], "{e}");
                assert_eq!(g.credential_host(), Some("mail.example:443"), "{e}");
                assert!(g.manifest.tool("send").is_some(), "{e}");

                b.run(|db| set_trust_in(db, "g", Trust::Vetted))
                    .await
                    .expect("trusted");
                let refused = b
                    .run(|db| set_trust_in(db, "nobody", Trust::Vetted))
                    .await
                    .expect_err("no such gatekeeper")
                    .to_string();
                assert_eq!(
                    refused, "no gatekeeper named \"nobody\"; `gatehouse gatekeepers` lists them",
                    "{e}"
                );
                let all = b.run(gatekeepers_in).await.expect("gatekeepers");
                let tiers: Vec<_> = all.iter().map(|g| (g.name.as_str(), g.trust)).collect();
                assert_eq!(tiers, [("g", Trust::Vetted), ("h", Trust::Byo)], "{e}");
                let shown = serde_json::to_string(&all).expect("json");
                assert!(
                    !shown.contains("first-credential") && !shown.contains("rotated-credential"),
                    "{e}: a listing names the secret, never its value: {shown}"
                );
            }
        });
    }

    #[test]
    fn a_key_introduced_again_names_the_newest_gatekeeper_and_only_the_owner_introduces() {
        runtime().block_on(async {
            for b in Backend::both().await {
                let e = b.name();
                b.run(|db| {
                    for user in ["ann", "bob"] {
                        db.exec(
                            "INSERT INTO users (name, created_at) VALUES (?1, 0)",
                            args![user],
                        )?;
                    }
                    put_gatekeeper_in(db, &gatekeeper("g", None))?;
                    put_gatekeeper_in(db, &gatekeeper("h", None))?;
                    create_chat_in(db, "c", "ann", 1)?;
                    create_chat_in(db, "d", "ann", 1)?;
                    db.exec(
                        "INSERT INTO collaborators (chat, \"user\", added_by, added_at, verified_at, may_decide)
                         VALUES ('c', 'bob', 'ann', 0, 1, 1)",
                        args![],
                    )
                })
                .await
                .expect("the fixture");
                let intro = |gatekeeper: &str, tools: Option<Vec<String>>| Introduction {
                    chat: "c".into(),
                    key: "K".into(),
                    gatekeeper: gatekeeper.into(),
                    tools,
                };
                let (first, second) = (intro("g", Some(vec!["send".into()])), intro("h", None));
                b.run(move |db| introduce_in(db, &first, "ann"))
                    .await
                    .expect("introduced");
                let kept = b.run(|db| introductions_in(db, "c")).await.expect("read");
                assert_eq!(kept.len(), 1, "{e}");
                assert_eq!(kept[0].tools, Some(vec!["send".to_owned()]), "{e}");
                b.run(move |db| introduce_in(db, &second, "ann"))
                    .await
                    .expect("introduced again");
                let kept = b.run(|db| introductions_in(db, "c")).await.expect("read");
                let kept: Vec<_> = kept
                    .iter()
                    .map(|i| (i.key.as_str(), i.gatekeeper.as_str(), i.tools.clone()))
                    .collect();
                assert_eq!(kept, [("K", "h", None)], "{e}: one key, the newest");
                assert!(
                    b.run(|db| introductions_in(db, "d"))
                        .await
                        .expect("read")
                        .is_empty(),
                    "{e}: another chat's keys are its own"
                );
                // Who may introduce is the one rule over what is stored: the
                // owner; a collaborator who decides is told it is the
                // owner's; a stranger, and anyone of a chat that does not
                // exist, is told there is no such chat.
                let may = |chat: &'static str, who: &'static str| {
                    let b = b.clone();
                    async move {
                        b.run(move |db| access(db, chat, who))
                            .await
                            .expect("access")
                            .require(Need::Manage, chat, who)
                    }
                };
                assert_eq!(may("c", "ann").await, Ok(()), "{e}");
                assert_eq!(
                    may("c", "bob").await,
                    Err(Refusal::OwnerOnly {
                        chat: "c".into(),
                        person: "bob".into()
                    }),
                    "{e}"
                );
                assert_eq!(
                    may("c", "mallory").await,
                    Err(Refusal::NoSuchChat("c".into())),
                    "{e}"
                );
                assert_eq!(
                    may("nowhere", "ann").await,
                    Err(Refusal::NoSuchChat("nowhere".into())),
                    "{e}"
                );
            }
        });
    }

    #[test]
    fn the_chats_a_gadget_called_from_are_listed_once_each() {
        runtime().block_on(async {
            for b in Backend::both().await {
                let e = b.name();
                b.run(|db| {
                    for (chat, gadget) in [("d", "gd"), ("c", "gd"), ("d", "gd"), ("e", "other")] {
                        db.exec(
                            "INSERT INTO ledger (chat, kind, caller, person, gadget, created_at)
                             VALUES (?1, 'observation', 'gadget', 'ann', ?2, 0)",
                            args![chat, gadget],
                        )?;
                    }
                    Ok(())
                })
                .await
                .expect("the ledger");
                let chats = b
                    .run(|db| chats_called_from_in(db, "gd"))
                    .await
                    .expect("chats");
                assert_eq!(chats, ["c", "d"], "{e}");
            }
        });
    }
}
