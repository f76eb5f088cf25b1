//! A host's presence in the shared database, the liveness a claim rests
//! on across machines. It may not read or change any claim: recovery asks
//! [`present`] in its own transaction and decides there.

use super::adapter::postgres_text;
use super::{DatabaseUrl, connect, reason};
use crate::store::sql::{Sql, args};
use anyhow::bail;
use tokio_postgres::Client;

/// A host's presence in the shared database: the liveness signal a claim
/// rests on across machines (SPEC P3). A claim names its host's owner
/// token, as on one machine; there a lock file held for the process's life
/// says the owner lives, and here a session-level advisory lock held on a
/// connection of its own does. When the host dies, however it dies, its
/// connection closes and PostgreSQL releases the lock: the release by a
/// dead connection is the signal, with no clock and no lease to tune. A
/// host that is merely slow keeps its connection, so its claims are never
/// touched.
pub struct Presence {
    owner: String,
    /// The connection holding the lock; dropping it ends the presence.
    _holder: Client,
}

/// The advisory-lock key of `owner`: the first eight bytes of a SHA-256
/// of the token under this purpose's label (other users of advisory locks
/// in the same database are not disturbed by chance).
fn presence_key(owner: &str) -> i64 {
    use sha2::{Digest as _, Sha256};
    let digest = Sha256::digest(format!("gatehouse-presence\0{owner}"));
    let mut eight = [0u8; 8];
    eight.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(eight)
}

/// Whether some session holds the presence lock of the host `?1`/`?2`
/// names (a bigint advisory key is kept as two 32-bit halves).
const PRESENT: &str =
    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND classid::text::bigint = ?1 AND objid::text::bigint = ?2 AND objsubid = 1)";

/// The two halves of `owner`'s presence key, as `pg_locks` shows them.
fn key_halves(owner: &str) -> (i64, i64) {
    let key = presence_key(owner);
    (i64::from((key >> 32) as u32), i64::from(key as u32))
}

/// [`Presence::is_alive`] in a store transaction: whether the host named
/// `owner` is present.
pub(crate) fn present(db: &dyn Sql, owner: &str) -> anyhow::Result<bool> {
    let (high, low) = key_halves(owner);
    db.row(PRESENT, args![high, low])?
        .map_or(Ok(false), |r| r.get(0))
}

impl Presence {
    /// Announce `owner` in the database at `url` for as long as the value
    /// lives.
    pub async fn hold(url: &DatabaseUrl, owner: &str) -> anyhow::Result<Presence> {
        let holder = connect(url).await?;
        let taken: bool = holder
            .query_one("SELECT pg_try_advisory_lock($1)", &[&presence_key(owner)])
            .await
            .map_err(|e| anyhow::anyhow!("cannot announce this host in {url} ({})", reason(&e)))?
            .get(0);
        if !taken {
            bail!("another live host already uses the owner token {owner}; start again");
        }
        Ok(Presence {
            owner: owner.to_owned(),
            _holder: holder,
        })
    }

    /// The owner token this presence announces.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Whether the host named `owner` is present: some session holds its
    /// lock. Reads `pg_locks` only, so it may be asked on any connection,
    /// the holder's own included, and never takes the lock itself.
    pub async fn is_alive(
        client: &impl tokio_postgres::GenericClient,
        owner: &str,
    ) -> anyhow::Result<bool> {
        let (high, low) = key_halves(owner);
        let row = client
            .query_one(&postgres_text(PRESENT), &[&high, &low])
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot tell whether host {owner} is present ({})",
                    reason(&e)
                )
            })?;
        Ok(row.get(0))
    }

    /// The advisory-lock key of `owner` (for tests and operators, who may
    /// look it up in `pg_locks`).
    pub fn key(owner: &str) -> i64 {
        presence_key(owner)
    }
}
