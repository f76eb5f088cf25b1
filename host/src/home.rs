//! The state directory: everything Gatehouse keeps lives under one folder.
//!
//! `$GATEHOUSE_HOME`, else `$XDG_DATA_HOME/gatehouse`, else
//! `~/.local/share/gatehouse`. Owns the layout only; what goes in the files
//! belongs to the modules that write them.

use anyhow::Context as _;
use std::path::{Path, PathBuf};

/// The state directory of one deployment: the database, the component
/// cache, the certificate authority and the liveness files of the kernel
/// processes sharing it. A value, not a handle: it opens nothing.
#[derive(Clone, Debug)]
pub struct Home {
    root: PathBuf,
}

impl Home {
    /// The home at `root`, as given (`--home`, or a test's temporary
    /// directory); nothing is created until [`Home::create`].
    pub fn at(root: impl Into<PathBuf>) -> Home {
        Home { root: root.into() }
    }

    /// The home named by the environment, or the per-user default.
    pub fn from_env() -> anyhow::Result<Home> {
        if let Some(h) = std::env::var_os("GATEHOUSE_HOME").filter(|h| !h.is_empty()) {
            return Ok(Home::at(h));
        }
        if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|h| !h.is_empty()) {
            return Ok(Home::at(PathBuf::from(x).join("gatehouse")));
        }
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .context("neither GATEHOUSE_HOME nor HOME is set; set GATEHOUSE_HOME to a directory for Gatehouse's state")?;
        Ok(Home::at(PathBuf::from(home).join(".local/share/gatehouse")))
    }

    /// Create the layout, owner-only: it holds secrets.
    pub fn create(&self) -> anyhow::Result<()> {
        for dir in [self.root.clone(), self.cache_dir(), self.run_dir()] {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create the state directory {}", dir.display()))?;
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let _ = std::fs::set_permissions(&self.root, std::fs::Permissions::from_mode(0o700));
        }
        Ok(())
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) fn database(&self) -> PathBuf {
        self.root.join("gatehouse.db")
    }

    /// A file that says this home has held a database: if the database is
    /// then missing, it was lost, and is not recreated empty.
    pub fn marker(&self) -> PathBuf {
        self.root.join("gatehouse.home")
    }

    /// Write [`Home::marker`] once the database exists.
    pub fn mark(&self) -> anyhow::Result<()> {
        let marker = self.marker();
        if marker.exists() {
            return Ok(());
        }
        std::fs::write(
            &marker,
            "This directory holds Gatehouse's state. gatehouse.db beside this file is its database:\nif it is missing, Gatehouse refuses to start rather than begin again empty; restore it\nfrom a backup, or move the whole directory aside to start afresh.\n",
        )
        .with_context(|| format!("cannot write {}", marker.display()))
    }

    /// Installed components and their compiled forms, by content digest.
    pub fn cache_dir(&self) -> PathBuf {
        self.root.join("components")
    }

    /// One lock file per live kernel process.
    pub fn run_dir(&self) -> PathBuf {
        self.root.join("run")
    }

    pub(crate) fn liveness(&self, owner: &str) -> PathBuf {
        self.run_dir().join(format!("{owner}.lock"))
    }
}
