//! Deployment-local secrets: values the kernel derives things from, made
//! on first use and kept in the state database beside the ledger they are
//! used with (never a gatekeeper's credential; those are `secrets`).
//!
//! Owns the `deployment_secrets` table only. What a secret is for is its
//! user's business (`crate::idempotency` for `idempotency`).

use super::{Store, now_ms};
use rusqlite::{OptionalExtension as _, params};

impl Store {
    /// The deployment secret `name`: 32 random bytes, hex-encoded, made on
    /// first use. Two processes making it at once agree on one (the first
    /// insert wins; the other reads it).
    pub fn deployment_secret(&self, name: &str) -> anyhow::Result<String> {
        let conn = self.lock();
        let read = |conn: &rusqlite::Connection| -> rusqlite::Result<Option<String>> {
            conn.prepare_cached("SELECT value FROM deployment_secrets WHERE name = ?1")?
                .query_row([name], |r| r.get(0))
                .optional()
        };
        if let Some(v) = read(&conn)? {
            return Ok(v);
        }
        let fresh = crate::entropy::random_hex(32)?;
        conn.execute(
            "INSERT OR IGNORE INTO deployment_secrets (name, value, created_at) VALUES (?1, ?2, ?3)",
            params![name, fresh, now_ms()],
        )?;
        read(&conn)?.ok_or_else(|| anyhow::anyhow!("the deployment secret {name} vanished"))
    }
}
