//! Moving a deployment into a shared PostgreSQL database, so that several
//! hosts can serve it: `gatehouse db migrate`, `gatehouse db copy --to
//! URL`, and `gatehouse db status`, which says where a database stands
//! before and after.
//!
//! Owns the order of a move: the home must be quiet (no other Gatehouse
//! process on it, since what they wrote after the snapshot would stay
//! behind), its interrupted claims recovered (the kernel did so on open),
//! the database brought to the newest schema, then one snapshot copied
//! with the files a home keeps beside its database. It may not write SQL
//! (`store::postgres` does) nor decide anything about the state it moves:
//! every id, state and observation set arrives as it was.

use crate::capability::Operator;
use crate::kernel::Kernel;
use crate::store::InFlight;
use crate::store::postgres::{self, Copied, DatabaseUrl, Files};
use anyhow::bail;

/// What `db migrate` did to a database: the schema it was at and is at.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Migrated {
    /// The database, its password hidden.
    pub database: String,
    /// The schema version it was at (0: none).
    pub before: i64,
    /// The schema version it is at now.
    pub now: i64,
    /// Secrets an older Gatehouse had kept unsealed, sealed now with the
    /// key given (a shared database keeps no secret in clear).
    pub sealed: usize,
}

/// Where a database stands: its schema, and the claims in flight with
/// whether each one's host is present.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Status {
    /// The database: a home's file, or a URL with its password hidden.
    pub database: String,
    /// The schema version it is at.
    pub schema: i64,
    /// The actions being sent right now, oldest first.
    pub in_flight: Vec<InFlight>,
}

/// The status of the PostgreSQL database at `url`; it must be at this
/// binary's schema. Reads only.
pub async fn database_status(url: &DatabaseUrl) -> anyhow::Result<Status> {
    let shared = postgres::Shared::open(url, 1).await?;
    let in_flight = shared
        .run(|db| crate::store::claims::in_flight(db, &postgres::present))
        .await?;
    Ok(Status {
        database: url.to_string(),
        schema: postgres::newest_version(),
        in_flight,
    })
}

/// Bring the PostgreSQL database at `url` to this binary's schema, then
/// seal with `key` what an older Gatehouse kept unsealed. Without a key, a
/// database that holds unsealed secrets is migrated and refused in one
/// line saying how to give one (its hosts could not open it anyway).
pub async fn migrate_database(
    url: &DatabaseUrl,
    key: Option<crate::seal::Key>,
) -> anyhow::Result<Migrated> {
    let mut client = postgres::connect(url).await?;
    let (before, now) = postgres::migrate(&mut client, url).await?;
    let shared = postgres::Shared::open(url, 1).await?;
    let sealed = match key {
        Some(key) => {
            let store = crate::store::Store::on_shared(shared, std::sync::Arc::new(key));
            let changed = tokio::task::spawn_blocking(move || store.seal_at_rest())
                .await
                .map_err(|_| anyhow::anyhow!("sealing the database's secrets panicked"))??
                .changed;
            if changed > 0 {
                // The unsealed values are dead row versions now: rewrite
                // the tables so that none is left in them.
                postgres::vacuum_sealed(&client, url).await?;
            }
            changed
        }
        None => {
            let unsealed = shared.run(crate::store::sealed::unsealed_in).await?;
            if unsealed > 0 {
                bail!(
                    "the database {url} is at schema {now}, and holds {unsealed} secret(s) an older Gatehouse kept unsealed; seal them with the key its hosts will hold: `gatehouse key new > FILE`, then run `gatehouse db migrate` again with GATEHOUSE_KEY_FILE=FILE"
                );
            }
            0
        }
    };
    Ok(Migrated {
        database: url.to_string(),
        before,
        now,
        sealed,
    })
}

impl Kernel {
    /// What the home keeps as files and a shared database keeps in tables:
    /// every installed component's bytes (checked against its digest). The
    /// certificate authority's key is a row of `deployment_secrets` on both
    /// (sealed), copied with the tables.
    fn files_to_move(&self) -> anyhow::Result<Files> {
        let mut digests: Vec<String> = self
            .store()
            .gadgets()?
            .into_iter()
            .map(|g| g.digest)
            .chain(self.store().gatekeepers()?.iter().map(|g| g.digest.clone()))
            .collect();
        digests.sort_unstable();
        digests.dedup();
        let components = digests
            .into_iter()
            .map(|d| {
                let bytes = self.runtime().component_bytes(&d)?;
                Ok((d, bytes))
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Files { components })
    }
}

impl Operator<'_> {
    /// The status of this home's database.
    pub async fn database_status(&self) -> anyhow::Result<Status> {
        let k = self.kernel.clone();
        let in_flight = self
            .kernel
            .store()
            .run(move |s| s.in_flight(&|db, owner| k.is_present(db, owner)))
            .await?;
        Ok(Status {
            database: self.kernel.state_location(),
            schema: self.kernel.state_schema().await?,
            in_flight,
        })
    }

    /// Copy this home's whole state into the empty PostgreSQL database at
    /// `url`, migrating it first. The home itself is left as it was.
    pub async fn copy_to_database(&self, url: &DatabaseUrl) -> anyhow::Result<Copied> {
        let others = self.kernel.others_alive();
        if !others.is_empty() {
            bail!(
                "{} other gatehouse process(es) are using this home (serve, mcp serve, or a command still running); stop them, then copy: what they write after the copy began would stay behind",
                others.len()
            );
        }
        let mut client = postgres::connect(url).await?;
        postgres::migrate(&mut client, url).await?;
        let files = self.kernel.blocking(|k| k.files_to_move()).await?;
        self.kernel.store().copy_to(&mut client, url, files).await
    }
}
