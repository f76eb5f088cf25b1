//! Liveness (SPEC P3): how the processes and hosts that share one
//! deployment tell whether the owner of a claim still lives. A claim is
//! interrupted exactly when its owner is gone, so this is what decides
//! whether recovery may fail it (final) or must leave it.
//!
//! Owns the owner tokens and both signals. Every process holds an
//! exclusive lock on a file named by its token in its home's run
//! directory: on one home that is the signal claims rest on, and it also
//! tells which `serve` address files and half-made files are stale. A host
//! serving from a shared database holds, besides, a presence lock there
//! (`store::postgres::Presence`), the signal for its claims across
//! machines. The system releases either when its holder ends, however it
//! ends. It may not recover claims (the kernel and the store do, asking
//! [`Liveness::is_present`]).

use crate::entropy::random_hex;
use crate::home::Home;
use crate::store::postgres::{self, DatabaseUrl, Presence};
use crate::store::sql::Sql;
use anyhow::Context as _;
use std::fs::File;
use std::time::Duration;

/// This process's presence, held for its life under its owner token.
pub(crate) struct Liveness {
    owner: String,
    /// The lock on `run/<owner>.lock` in the home.
    #[allow(dead_code, reason = "held for its lock, released on drop")]
    file: File,
    /// The presence lock in the shared database, on a host serving from
    /// one: what its claims rest on.
    presence: Option<Presence>,
    home: Home,
}

/// A fresh owner token: the process id (for people reading `db status`)
/// and randomness (so a reused pid is never taken for a dead process's).
fn new_owner() -> anyhow::Result<String> {
    Ok(format!("{}-{}", std::process::id(), random_hex(8)?))
}

impl Liveness {
    /// Announce this process on `home`. The file appears under its real
    /// name only once locked (rename is atomic), so no other process can
    /// ever see it unlocked and take this live process for a dead one.
    pub(crate) fn on_home(home: &Home) -> anyhow::Result<Liveness> {
        let owner = new_owner()?;
        let staging = home.liveness(&owner).with_extension("lock.new");
        let cannot = || format!("cannot create a lock file in {}", home.run_dir().display());
        let file = File::create(&staging).with_context(cannot)?;
        file.lock()
            .context("cannot lock this process's liveness file")?;
        std::fs::rename(&staging, home.liveness(&owner)).with_context(cannot)?;
        Ok(Liveness {
            owner,
            file,
            presence: None,
            home: home.clone(),
        })
    }

    /// Announce this host on `home` and in the shared database at `url`.
    pub(crate) async fn on_database(home: &Home, url: &DatabaseUrl) -> anyhow::Result<Liveness> {
        let mut me = Liveness::on_home(home)?;
        me.presence = Some(Presence::hold(url, &me.owner).await?);
        Ok(me)
    }

    /// The owner token claims by this process carry.
    pub(crate) fn owner(&self) -> &str {
        &self.owner
    }

    /// Whether the process or host named `owner` lives, asked in the
    /// caller's transaction `db`: the one place that tells. An error (the
    /// database did not answer) is an error, never a guess that it is
    /// gone: failing a claim is final.
    pub(crate) fn is_present(&self, db: &dyn Sql, owner: &str) -> anyhow::Result<bool> {
        match &self.presence {
            _ if owner == self.owner => Ok(true),
            Some(_) => postgres::present(db, owner),
            None => Ok(self.is_alive(owner)),
        }
    }

    /// Whether the kernel process named `owner` still lives on this home
    /// (it holds the lock on its file). A dead owner's lock file is
    /// removed. For a claim, ask [`Liveness::is_present`]: on a shared
    /// database its owner may be a host on another machine.
    pub(crate) fn is_alive(&self, owner: &str) -> bool {
        if owner == self.owner {
            return true;
        }
        let path = self.home.liveness(owner);
        let Ok(f) = File::options().read(true).write(true).open(&path) else {
            return false;
        };
        match f.try_lock() {
            Ok(()) => {
                let _ = std::fs::remove_file(&path);
                false
            }
            Err(_) => true,
        }
    }

    /// The other kernel processes alive on this home (their lock files are
    /// held), by owner token.
    pub(crate) fn others_alive(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.home.run_dir()) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_str()?.strip_suffix(".lock")?.to_owned();
                (name != self.owner && self.is_alive(&name)).then_some(name)
            })
            .collect()
    }

    /// Remove the files of processes that are gone (their claims, if any,
    /// were recovered just before): lock files, the inbox addresses they
    /// recorded, and lock files left half-made by a process killed while it
    /// started (unlocked and older than a minute; a live process holds its
    /// half-made file locked, and for microseconds only).
    pub(crate) fn sweep(&self) {
        let Ok(entries) = std::fs::read_dir(self.home.run_dir()) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(name) = name.to_str() else {
                continue;
            };
            if let Some(owner) = name.strip_suffix(".lock") {
                self.is_alive(owner); // removes the file of a dead owner
            } else if let Some(owner) = name.strip_suffix(".url") {
                if !self.is_alive(owner) {
                    let _ = std::fs::remove_file(e.path());
                }
            } else if name.ends_with(".lock.new") {
                let old = e
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > Duration::from_secs(60));
                let path = e.path();
                if old
                    && let Ok(f) = File::options().read(true).write(true).open(&path)
                    && f.try_lock().is_ok()
                {
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
    }
}

impl Drop for Liveness {
    fn drop(&mut self) {
        // Releasing the lock is what matters; the file itself is tidied.
        let _ = std::fs::remove_file(self.home.liveness(&self.owner));
    }
}
