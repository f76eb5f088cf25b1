//! What is installed and introduced: gadgets, gatekeepers, secrets, chats and
//! introductions. Plain records; the rules about them live in the kernel.

use super::sql::{Sql, args};
use super::{Store, now_ms};
pub use crate::manifest::Trust;
use anyhow::{Context as _, bail};
use rusqlite::{OptionalExtension as _, params};
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

pub(crate) fn secret_in(db: &dyn Sql, name: &str) -> anyhow::Result<Option<String>> {
    db.row("SELECT value FROM secrets WHERE name = ?1", args![name])?
        .map(|r| r.get(0))
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

/// The gadget installed as `name`, on a connection the caller holds.
pub(crate) fn gadget_in(
    conn: &rusqlite::Connection,
    name: &str,
) -> rusqlite::Result<Option<GadgetRecord>> {
    conn.prepare_cached("SELECT name, digest, installed_at FROM gadgets WHERE name = ?1")?
        .query_row([name], gadget_from_row)
        .optional()
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

fn gadget_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<GadgetRecord> {
    Ok(GadgetRecord {
        name: r.get(0)?,
        digest: r.get(1)?,
        installed_at: r.get(2)?,
    })
}

fn chat_from(r: &super::sql::Row) -> anyhow::Result<Chat> {
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
    pub fn put_gadget(&self, name: &str, digest: &str) -> anyhow::Result<()> {
        self.lock().execute(
            "INSERT INTO gadgets (name, digest, installed_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (name) DO UPDATE SET digest = excluded.digest, installed_at = excluded.installed_at",
            params![name, digest, now_ms()],
        )?;
        Ok(())
    }

    pub fn gadget(&self, name: &str) -> anyhow::Result<Option<GadgetRecord>> {
        Ok(gadget_in(&self.lock(), name)?)
    }

    pub fn gadgets(&self) -> anyhow::Result<Vec<GadgetRecord>> {
        let conn = self.lock();
        let mut st =
            conn.prepare_cached("SELECT name, digest, installed_at FROM gadgets ORDER BY name")?;
        let rows = st.query_map([], gadget_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn put_gatekeeper(&self, g: &GatekeeperRecord) -> anyhow::Result<()> {
        let settings: serde_json::Map<String, serde_json::Value> = g
            .settings
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect();
        let manifest = json(&*g.manifest)?;
        let manifest_digest = hex::encode(sha2::Sha256::digest(manifest.as_bytes()));
        self.lock().execute(
            "INSERT INTO gatekeepers (name, digest, trust, hosts, secret, settings, manifest,
               manifest_digest, added_at, credential_host)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
             ON CONFLICT (name) DO UPDATE SET digest = excluded.digest, trust = excluded.trust,
               hosts = excluded.hosts, secret = excluded.secret, settings = excluded.settings,
               manifest = excluded.manifest, manifest_digest = excluded.manifest_digest,
               added_at = excluded.added_at, credential_host = excluded.credential_host",
            params![
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

    pub fn gatekeeper(&self, name: &str) -> anyhow::Result<Option<Arc<GatekeeperRecord>>> {
        gatekeeper_in(&self.lock(), name)
    }

    pub fn gatekeepers(&self) -> anyhow::Result<Vec<Arc<GatekeeperRecord>>> {
        let names: Vec<String> = {
            let conn = self.lock();
            let mut st = conn.prepare_cached("SELECT name FROM gatekeepers ORDER BY name")?;
            st.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?
        };
        names
            .iter()
            .filter_map(|n| self.gatekeeper(n).transpose())
            .collect()
    }

    /// Change a gatekeeper's tier; it takes effect at the next call.
    pub fn set_trust(&self, name: &str, trust: Trust) -> anyhow::Result<()> {
        let n = self.lock().execute(
            "UPDATE gatekeepers SET trust = ?2 WHERE name = ?1",
            params![name, trust.as_str()],
        )?;
        if n == 0 {
            bail!("no gatekeeper named {name:?}; `gatehouse gatekeepers` lists them");
        }
        Ok(())
    }

    pub fn put_secret(&self, name: &str, value: &str) -> anyhow::Result<()> {
        self.lock().execute(
            "INSERT INTO secrets (name, value) VALUES (?1, ?2)
             ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            params![name, value],
        )?;
        Ok(())
    }

    pub fn secret(&self, name: &str) -> anyhow::Result<Option<String>> {
        secret_in(&self.lock(), name)
    }

    pub fn create_chat(&self, name: &str, owner: &str) -> anyhow::Result<()> {
        let res = self.lock().execute(
            "INSERT INTO chats (name, owner, created_at) VALUES (?1, ?2, ?3)",
            params![name, owner, now_ms()],
        );
        match res {
            Ok(_) => Ok(()),
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::ConstraintViolation =>
            {
                bail!("a chat named {name:?} already exists; pick another name")
            }
            Err(e) => Err(e.into()),
        }
    }

    pub fn chat(&self, name: &str) -> anyhow::Result<Option<Chat>> {
        chat_in(&self.lock(), name)
    }

    pub fn chats(&self) -> anyhow::Result<Vec<Chat>> {
        self.lock()
            .rows(
                "SELECT name, owner, latched, created_at FROM chats ORDER BY name",
                args![],
            )?
            .iter()
            .map(chat_from)
            .collect()
    }

    /// The chats a gadget has called a service from, per the ledger.
    pub fn chats_called_from(&self, gadget: &str) -> anyhow::Result<Vec<String>> {
        let conn = self.lock();
        let mut st = conn
            .prepare_cached("SELECT DISTINCT chat FROM ledger WHERE gadget = ?1 ORDER BY chat")?;
        let rows = st.query_map([gadget], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn introduce(&self, intro: &Introduction, by: &str) -> anyhow::Result<()> {
        let tools = intro.tools.as_ref().map(json).transpose()?;
        self.lock().execute(
            "INSERT INTO introductions (chat, key, gatekeeper, tools, introduced_by)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (chat, key) DO UPDATE SET gatekeeper = excluded.gatekeeper,
               tools = excluded.tools, introduced_by = excluded.introduced_by",
            params![intro.chat, intro.key, intro.gatekeeper, tools, by],
        )?;
        Ok(())
    }

    pub fn introductions(&self, chat: &str) -> anyhow::Result<Vec<Introduction>> {
        introductions_in(&self.lock(), chat)
    }
}
