//! Deployment-local secrets: values the kernel derives things from, made
//! on first use and kept in the state database beside the ledger they are
//! used with (never a gatekeeper's credential; those are `secrets`).
//!
//! Owns the `deployment_secrets` table only. What a secret is for is its
//! user's business (`crate::idempotency` for `idempotency`, `crate::grants`
//! for the certificate authority's key). Each value is kept sealed
//! (`crate::seal`) and opened here for the kernel.

use super::sealed;
use super::sql::{Sql, args};
use super::{Store, now_ms};
use crate::seal::{Key, Place};

impl Store {
    /// The deployment secret `name`: 32 random bytes, hex-encoded, made on
    /// first use. Two processes making it at once agree on one (the first
    /// insert wins; the other reads it).
    pub fn deployment_secret(&self, name: &str) -> anyhow::Result<String> {
        let fresh = crate::entropy::random_hex(32)?;
        self.keep_deployment_secret(name, &fresh)
    }

    /// The deployment secret `name`, `value` kept as it if there was none
    /// (an embedded home's certificate authority key, moved in from its
    /// file): the value kept, which is `value` unless another was first.
    pub fn keep_deployment_secret(&self, name: &str, value: &str) -> anyhow::Result<String> {
        // Read first, outside a writing transaction: every start reads the
        // idempotency secret, and only the first ever makes it.
        if let Some(v) = self.with(|db| read_in(db, &self.key, name))? {
            return Ok(v);
        }
        self.write(|db| deployment_secret_in(db, &self.key, name, value, now_ms()))
    }
}

/// The deployment secret `name`, `fresh` kept as it if there was none.
fn deployment_secret_in(
    db: &dyn Sql,
    key: &Key,
    name: &str,
    fresh: &str,
    now: i64,
) -> anyhow::Result<String> {
    let place = Place::new(sealed::DEPLOYMENT_SECRETS, name);
    let read = || read_in(db, key, name);
    if let Some(v) = read()? {
        return Ok(v);
    }
    super::sealed::check_key_in(db, key)?;
    db.exec(
        "INSERT INTO deployment_secrets (name, value, created_at) VALUES (?1, ?2, ?3)
         ON CONFLICT DO NOTHING",
        args![name, key.seal_text(place, fresh)?, now],
    )?;
    read()?.ok_or_else(|| anyhow::anyhow!("the deployment secret {name} vanished"))
}

/// The deployment secret `name`, opened, if it was made.
fn read_in(db: &dyn Sql, key: &Key, name: &str) -> anyhow::Result<Option<String>> {
    let place = Place::new(sealed::DEPLOYMENT_SECRETS, name);
    db.row(
        "SELECT value FROM deployment_secrets WHERE name = ?1",
        args![name],
    )?
    .map(|r| Ok(key.open_text(place, &r.get::<String>(0)?)?.to_string()))
    .transpose()
}

#[cfg(test)]
mod on_both_engines {
    use super::*;
    use crate::store::suite::{Backend, runtime};

    /// Hosts making the same secret at once agree on one value, and it is
    /// the first made: one deployment signs with one key.
    #[test]
    fn hosts_making_a_secret_at_once_agree_on_one() {
        runtime().block_on(async {
            for b in Backend::both().await {
                let e = b.name();
                let makers: Vec<_> = (0..8)
                    .map(|i| {
                        let b = b.clone();
                        tokio::spawn(async move {
                            // The schema keeps only secrets of 32 bytes or more, hex-encoded.
                            let fresh = format!("{i:0>64}");
                            b.run(move |db| {
                                deployment_secret_in(db, &crate::seal::test_key(), "key", &fresh, 1)
                            })
                            .await
                        })
                    })
                    .collect();
                let mut seen = std::collections::BTreeSet::new();
                for m in makers {
                    seen.insert(m.await.expect("joined").expect("made"));
                }
                assert_eq!(seen.len(), 1, "{e}: {seen:?}");
                let kept = b
                    .run(|db| {
                        deployment_secret_in(
                            db,
                            &crate::seal::test_key(),
                            "key",
                            &"f".repeat(64),
                            2,
                        )
                    })
                    .await
                    .expect("read");
                assert_eq!(Some(&kept), seen.iter().next(), "{e}: made once");
            }
        });
    }
}
