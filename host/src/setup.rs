//! The operator's set-up of the deployment: installing gadgets, adding
//! and refreshing gatekeepers, their trust and secrets, people, the
//! sealing key and its rotation, and a turn run as a chat's owner.
//!
//! Owns these operations of the [`Operator`] handle. It may not decide a
//! chat's policy nor send anything: a gatekeeper is described here, never
//! called with a person's write.

use crate::capability::Operator;
use crate::classify;
use crate::kernel::{KeyShown, Rotated, check_name};
use crate::runtime::Role;
use crate::runtime::gadget::TurnReport;
use crate::seal::Key;
use crate::store::{GadgetRecord, GatekeeperRecord, Trust};
use anyhow::{Context as _, bail};
use std::sync::Arc;

impl Operator<'_> {
    /// Which key this deployment's secrets are sealed with, and where
    /// this process got it (never the key itself).
    pub fn sealing_key(&self) -> KeyShown {
        let key = self.kernel.store().key();
        KeyShown {
            id: key.id().to_owned(),
            origin: key.origin().to_string(),
        }
    }

    /// Seal every secret again with `new`, in one transaction, so that a
    /// key that may have leaked can be retired. Afterwards only `new` opens
    /// them; on a home, the home's own key file is removed if it held the
    /// old key. Refused while other processes use the home (they hold the
    /// old key); on a shared database the operator stops the other hosts
    /// first (a host left running has its next secret refused, opened or
    /// written: a value it sealed with the old key would open on no other
    /// host; `store::sealed::check_key_in`).
    pub async fn rotate_key(&self, new: Key) -> anyhow::Result<Rotated> {
        let old = self.kernel.store().key().clone();
        if new.id() == old.id() {
            bail!(
                "the new key is the key in use ({}); make another with `gatehouse key new > FILE`",
                old.id()
            );
        }
        if self.kernel.store().shared_url().is_none() {
            let others = self.kernel.others_alive();
            if !others.is_empty() {
                bail!(
                    "{} other gatehouse process(es) are using this home with the old key (serve, mcp serve, or a command still running); stop them, then rotate",
                    others.len()
                );
            }
        }
        let now = new.id().to_owned();
        let store = self.kernel.store().clone();
        let done = tokio::task::spawn_blocking(move || store.reseal(&new))
            .await
            .context("sealing the secrets again panicked")??;
        let removed = match old.origin() {
            crate::seal::Origin::Home(path) => {
                std::fs::remove_file(path).with_context(|| {
                    format!(
                        "the secrets are sealed with key {now} now, but the home's old key file {} could not be removed; remove it by hand",
                        path.display()
                    )
                })?;
                Some(path.display().to_string())
            }
            _ => None,
        };
        Ok(Rotated {
            sealed: done.changed,
            was: old.id().to_owned(),
            now,
            removed,
        })
    }

    /// Check the state database page by page (`gatehouse check`).
    pub async fn check_integrity(&self) -> anyhow::Result<()> {
        self.kernel.store().run(|s| s.check_integrity()).await
    }

    /// Install a gadget (SPEC X3): validated, compiled and cached before it
    /// is recorded; a refused file leaves nothing installed.
    pub fn install(
        &self,
        name: &str,
        bytes: &[u8],
        progress: &dyn Fn(&str),
    ) -> anyhow::Result<GadgetRecord> {
        check_name(name, "gadget")?;
        let digest = self.kernel.runtime().admit(bytes, Role::Gadget, progress)?;
        self.kernel.store().keep_component(&digest, bytes)?;
        self.kernel.store().put_gadget(name, &digest)?;
        self.kernel
            .store()
            .gadget(name)?
            .context("the gadget vanished right after install")
    }

    /// Add a gatekeeper instance: validated, then asked for its manifest.
    /// Credentials go to its only allowed host; see
    /// [`Operator::add_gatekeeper_with`] to name one of several.
    #[allow(clippy::too_many_arguments)]
    pub async fn add_gatekeeper(
        &self,
        name: &str,
        bytes: &[u8],
        trust: Trust,
        hosts: Vec<String>,
        secret: Option<String>,
        settings: Vec<(String, String)>,
        progress: &dyn Fn(&str),
    ) -> anyhow::Result<GatekeeperRecord> {
        self.add_gatekeeper_with(name, bytes, trust, hosts, None, secret, settings, progress)
            .await
    }

    /// Add a gatekeeper instance whose credentials go to `credential_host`,
    /// one of its allowed hosts (SPEC C4). With several allowed hosts and a
    /// secret, naming it is required: a credential is bound to one host.
    #[allow(clippy::too_many_arguments)]
    pub async fn add_gatekeeper_with(
        &self,
        name: &str,
        bytes: &[u8],
        trust: Trust,
        hosts: Vec<String>,
        credential_host: Option<String>,
        secret: Option<String>,
        settings: Vec<(String, String)>,
        progress: &dyn Fn(&str),
    ) -> anyhow::Result<GatekeeperRecord> {
        check_name(name, "gatekeeper")?;
        crate::idempotency::check_setting(&settings)?;
        for h in &hosts {
            check_host(h)?;
        }
        if let Some(c) = &credential_host
            && !hosts.iter().any(|h| h.eq_ignore_ascii_case(c))
        {
            bail!(
                "--credential-host {c:?} is not one of the allowed hosts ({}); name one of them",
                hosts.join(", ")
            );
        }
        if secret.is_some() && credential_host.is_none() {
            match hosts.len() {
                0 => bail!(
                    "--secret needs an --allow-host: a credential is sent only to the one host it is for"
                ),
                1 => {}
                _ => bail!(
                    "with several allowed hosts ({}), name the one the credential is for: --credential-host HOST (it is never sent to the others)",
                    hosts.join(", ")
                ),
            }
        }
        if let Some(s) = secret.clone() {
            let name = s.clone();
            let stored = self
                .kernel
                .store()
                .run(move |st| Ok(st.secret(&name)?.is_some()))
                .await?;
            if !stored {
                bail!(
                    "no secret named {s:?}; store it first with `gatehouse secret set {s}` (reads the value from stdin)"
                );
            }
        }
        let digest = self
            .kernel
            .runtime()
            .admit(bytes, Role::Gatekeeper, progress)?;
        let mut record = GatekeeperRecord {
            name: name.to_owned(),
            digest,
            trust,
            hosts,
            secret,
            credential_host,
            settings,
            manifest: Arc::default(),
            added_at: crate::store::now_ms(),
        };
        self.kernel.check_operator_grant(&record)?;
        record.manifest = Arc::new(self.kernel.describe(&record).await?);
        let (kept, bytes) = (record.clone(), bytes.to_vec());
        self.kernel
            .store()
            .run(move |s| {
                s.keep_component(&kept.digest, &bytes)?;
                s.put_gatekeeper(&kept)
            })
            .await?;
        Ok(record)
    }

    /// Describe a gatekeeper instance again (`gatekeeper refresh`) and
    /// store its new manifest; returns what changed, tool by tool. Pending
    /// actions of a changed tool are not sent as staged: the claim compares
    /// the tool's manifest entry recorded at staging (P7). Also returns the
    /// instance's trust tier, which says what a changed annotation means.
    pub async fn refresh_gatekeeper(
        &self,
        name: &str,
    ) -> anyhow::Result<(Trust, Vec<classify::ToolChange>)> {
        let Some(g) = self.kernel.gatekeeper_named(name).await? else {
            bail!("no gatekeeper named {name:?}; `gatehouse gatekeepers` lists them");
        };
        let manifest = self.kernel.describe(&g).await?;
        let changes = g.manifest.changes(&manifest);
        if !changes.is_empty() || *g.manifest != manifest {
            let mut record = (*g).clone();
            record.manifest = Arc::new(manifest);
            self.kernel
                .store()
                .run(move |s| s.put_gatekeeper(&record))
                .await?;
        }
        Ok((g.trust, changes))
    }

    /// Change a gatekeeper's trust tier (an operator's word, SPEC K3). It
    /// takes effect at the next use; pending actions staged under the old
    /// tier are revalidated before they are sent (P7).
    pub fn set_trust(&self, gatekeeper: &str, trust: Trust) -> anyhow::Result<()> {
        self.kernel.store().set_trust(gatekeeper, trust)
    }

    /// Store a secret for gatekeepers (operator credentials). Only the
    /// kernel ever reads it.
    pub fn put_secret(&self, name: &str, value: &str) -> anyhow::Result<()> {
        self.kernel.check_secret_name(name)?;
        // A pasted value is a static token, never taken for a stored OAuth
        // grant (`secret set NAME --oauth` makes those).
        self.kernel.refuse_pasted_grant(name, value)?;
        self.kernel.store().put_secret(name, value)
    }

    /// The people this deployment knows.
    pub fn users(&self) -> anyhow::Result<Vec<String>> {
        self.kernel.store().users()
    }

    /// Everyone's accounts (never their credentials).
    pub fn accounts(&self) -> anyhow::Result<Vec<crate::store::Account>> {
        self.kernel.store().accounts(None)
    }

    /// Run one turn of a gadget in a chat, as the chat's owner. The owner
    /// is never re-verified (SPEC S2 re-verifies collaborators), so the
    /// turn starts at once, as [`Person::run`] does for the owner.
    ///
    /// [`Person::run`]: crate::capability::Person::run
    pub async fn run(&self, gadget: &str, chat: &str, input: &str) -> anyhow::Result<TurnReport> {
        let c = chat.to_owned();
        let owner = self
            .kernel
            .store()
            .read_now(move |conn| Ok(crate::store::chat_in(conn, &c)?.map(|c| c.owner)))
            .await?
            .with_context(|| {
                format!("no chat named {chat:?}; create it with `gatehouse chat new {chat}`")
            })?;
        let turn =
            crate::kernel::Turn::new(gadget, chat, crate::principal::Principal::person(&owner));
        self.kernel.run_turn(turn, input).await
    }
}

fn check_host(h: &str) -> anyhow::Result<()> {
    let ok = !h.is_empty()
        && !h.contains('/')
        && !h.contains('@')
        && h.parse::<http::uri::Authority>().is_ok();
    if !ok {
        bail!(
            "--allow-host {h:?} must be a host or host:port, like 127.0.0.1:8080 or api.example.com"
        );
    }
    Ok(())
}
