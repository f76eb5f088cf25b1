//! The store's secrets at rest: which columns hold a secret in
//! a recoverable form, and the passes over all of them.
//!
//! Owns the list of sealed columns ([`COLUMNS`]) and the three passes over
//! them: sealing what an older Gatehouse left unsealed and checking that
//! every value was sealed with this host's key (on open and after a
//! migration), and sealing everything again under a new key (`gatehouse
//! key rotate`), each in one transaction. It may not seal or open a value
//! itself (`crate::seal` does) nor read a key from anywhere.
//!
//! What is not here, and why: a webhook's URL token, a share link, a web
//! session and a sign-in token are kept as SHA-256 digests only (they
//! are checked, never sent on), so there is nothing to recover from them.

use super::Store;
use super::sql::{Hold, Sql, args};
use crate::seal::{self, Key, Place};
use anyhow::bail;

/// The table of operator credentials and people's account tokens.
pub(crate) const SECRETS: &str = "secrets";
/// The table of the deployment's own secrets (the idempotency key, the
/// certificate authority's key).
pub(crate) const DEPLOYMENT_SECRETS: &str = "deployment_secrets";
/// The table of hooks, whose webhooks keep the key deliveries are signed
/// with.
pub(crate) const HOOKS: &str = "hooks";
/// The table of devices push notices go to (sealed column `secret`).
pub(crate) const PUSH_SUBSCRIPTIONS: &str = "push_subscriptions";

/// A column holding sealed values: its table, and the statements that
/// read every value (row key as text, value) and replace one value only
/// if it is still what was read.
struct Column {
    table: &'static str,
    read: &'static str,
    replace: &'static str,
}

/// Every column that keeps a secret in a recoverable form.
const COLUMNS: &[Column] = &[
    Column {
        table: SECRETS,
        read: "SELECT name, value FROM secrets ORDER BY name",
        replace: "UPDATE secrets SET value = ?2 WHERE name = ?1 AND value = ?3",
    },
    Column {
        table: DEPLOYMENT_SECRETS,
        read: "SELECT name, value FROM deployment_secrets ORDER BY name",
        replace: "UPDATE deployment_secrets SET value = ?2 WHERE name = ?1 AND value = ?3",
    },
    Column {
        table: PUSH_SUBSCRIPTIONS,
        read: "SELECT id, secret FROM push_subscriptions ORDER BY id",
        replace: "UPDATE push_subscriptions SET secret = ?2 WHERE id = ?1 AND secret = ?3",
    },
    Column {
        table: HOOKS,
        read: "SELECT CAST(id AS TEXT), secret FROM hooks WHERE secret IS NOT NULL ORDER BY id",
        replace: "UPDATE hooks SET secret = ?2 WHERE CAST(id AS TEXT) = ?1 AND secret = ?3",
    },
];

/// What a pass found and did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Sealing {
    /// Values kept sealed (after the pass).
    pub sealed: usize,
    /// Values the pass sealed (an older Gatehouse had kept them unsealed),
    /// or sealed again (rotation).
    pub changed: usize,
}

/// Every sealed column's values, with their places.
fn every_value(db: &dyn Sql) -> anyhow::Result<Vec<(&'static Column, String, String)>> {
    let mut out = Vec::new();
    for column in COLUMNS {
        for r in db.rows(column.read, args![])? {
            out.push((column, r.get::<String>(0)?, r.get::<String>(1)?));
        }
    }
    Ok(out)
}

fn replace(db: &dyn Sql, column: &Column, row: &str, now: &str, was: &str) -> anyhow::Result<()> {
    let n = db.exec(column.replace, args![row, now, was])?;
    if n != 1 {
        bail!(
            "the secret {row} in {} changed while it was being sealed; retry",
            column.table
        );
    }
    Ok(())
}

/// Refuse to seal a new value with `key` when the deployment's values are
/// sealed with another (a rotation since this host started: its value
/// would open on no other host). Asked in the writer's transaction before
/// it seals. The idempotency secret, made at every start and sealed again
/// by every rotation, stands for them all. On PostgreSQL its row is held
/// (`FOR SHARE`) until the writer's transaction ends; a rotation holds it
/// `FOR UPDATE` before it reads anything, so of the two, the one that
/// comes second sees what the first committed: the writer is refused, or
/// the rotation seals the new value again too.
pub(crate) fn check_key_in(db: &dyn Sql, key: &Key) -> anyhow::Result<()> {
    let held = db.row_held(
        "SELECT value FROM deployment_secrets WHERE name = 'idempotency'",
        args![],
        Hold::Share,
    )?;
    if let Some(r) = held {
        let value: String = r.get(0)?;
        if let Some(kid) = seal::sealed_with(&value).filter(|kid| *kid != key.id()) {
            return Err(key.wrong_key(kid));
        }
    }
    Ok(())
}

/// How many values are kept unsealed (no key needed to tell).
pub(crate) fn unsealed_in(db: &dyn Sql) -> anyhow::Result<usize> {
    Ok(every_value(db)?
        .iter()
        .filter(|(_, _, v)| !seal::is_sealed(v))
        .count())
}

/// Whether every value is sealed with `key` (`Ok(false)`: some are not
/// sealed yet); a value sealed with another key is refused with the line
/// that names both keys.
fn check_in(db: &dyn Sql, key: &Key) -> anyhow::Result<bool> {
    let mut all_sealed = true;
    for (_, _, value) in every_value(db)? {
        match seal::sealed_with(&value) {
            Some(kid) if kid != key.id() => return Err(key.wrong_key(kid)),
            Some(_) => {}
            None => all_sealed = false,
        }
    }
    Ok(all_sealed)
}

/// Seal every value kept unsealed, in the caller's writing transaction;
/// a value sealed with another key stops the pass before anything is
/// written.
fn seal_in(db: &dyn Sql, key: &Key) -> anyhow::Result<Sealing> {
    let values = every_value(db)?;
    let mut done = Sealing::default();
    for (column, row, value) in &values {
        match seal::sealed_with(value) {
            Some(kid) if kid != key.id() => return Err(key.wrong_key(kid)),
            Some(_) => {}
            None => {
                let now = key.seal_text(Place::new(column.table, row), value)?;
                replace(db, column, row, &now, value)?;
                done.changed += 1;
            }
        }
        done.sealed += 1;
    }
    Ok(done)
}

/// Open every value with `old` and seal it with `new`, in the caller's
/// writing transaction: all or nothing.
fn reseal_in(db: &dyn Sql, old: &Key, new: &Key) -> anyhow::Result<Sealing> {
    // Held before anything is read: see [`check_key_in`].
    db.hold(
        "SELECT 1 FROM deployment_secrets WHERE name = 'idempotency'",
        args![],
    )?;
    let mut done = Sealing::default();
    for (column, row, value) in every_value(db)? {
        let place = Place::new(column.table, &row);
        let plain = old.open(place, &value)?;
        let now = new.seal(place, &plain)?;
        replace(db, column, &row, &now, &value)?;
        done.sealed += 1;
        done.changed += 1;
    }
    Ok(done)
}

impl Store {
    /// The key this store's secrets are sealed with.
    pub(crate) fn key(&self) -> &std::sync::Arc<Key> {
        &self.key
    }

    /// Check that every secret is sealed with this store's key, and seal
    /// those an older Gatehouse kept unsealed (in one writing transaction,
    /// taken only when there is something to seal). A value sealed with
    /// another key is refused in one line naming both keys.
    ///
    /// On the embedded file the pass runs with `secure_delete` on, and the
    /// log is checkpointed and truncated after it, so the plaintext it
    /// replaced is overwritten in the file rather than left in free pages
    /// or an old log frame. (A shared database's dead row versions are
    /// PostgreSQL's to reclaim: `gatehouse db migrate` vacuums the tables.)
    pub(crate) fn seal_at_rest(&self) -> anyhow::Result<Sealing> {
        if self.with(|db| check_in(db, &self.key))? {
            return Ok(Sealing::default());
        }
        self.write_erasing(|db| seal_in(db, &self.key), |d| d.changed > 0)
    }

    /// Whether any secret is kept unsealed (checking, as
    /// [`Store::seal_at_rest`] does, that the sealed ones are this key's).
    pub(crate) fn has_unsealed(&self) -> anyhow::Result<bool> {
        Ok(!self.with(|db| check_in(db, &self.key))?)
    }

    /// Seal every secret again with `new`, in one transaction: rotation.
    /// Every value must open with this store's key first.
    pub(crate) fn reseal(&self, new: &Key) -> anyhow::Result<Sealing> {
        self.write(|db| reseal_in(db, &self.key, new))
    }
}

#[cfg(test)]
mod on_both_engines {
    use super::*;
    use crate::store::suite::{Backend, runtime};

    /// Plaintext an older Gatehouse kept is sealed; a second pass finds
    /// nothing to do; another key is refused; rotation re-seals all of it
    /// and the old key is then refused.
    #[test]
    fn plaintext_is_sealed_once_and_rotation_moves_every_value() {
        runtime().block_on(async {
            for b in Backend::both().await {
                let e = b.name();
                b.run(|db| {
                    db.exec(
                        "INSERT INTO secrets (name, value) VALUES ('op', 'plain-operator-token')",
                        args![],
                    )?;
                    db.exec(
                        "INSERT INTO deployment_secrets (name, value, created_at) VALUES ('idempotency', ?1, 0)",
                        args!["a".repeat(64)],
                    )
                })
                .await
                .expect("an older store's rows");
                let key = crate::seal::test_key();
                let done = b
                    .run({
                        let key = key.clone();
                        move |db| seal_in(db, &key)
                    })
                    .await
                    .expect("sealed");
                assert_eq!((done.sealed, done.changed), (2, 2), "{e}");
                let again = b
                    .run({
                        let key = key.clone();
                        move |db| seal_in(db, &key)
                    })
                    .await
                    .expect("sealed");
                assert_eq!((again.sealed, again.changed), (2, 0), "{e}");
                let kept = b
                    .run(|db| {
                        db.row("SELECT value FROM secrets WHERE name = 'op'", args![])?
                            .ok_or_else(|| anyhow::anyhow!("no row"))?
                            .get::<String>(0)
                    })
                    .await
                    .expect("read");
                assert!(!kept.contains("plain-operator-token"), "{e}: {kept}");
                let opened = key
                    .open_text(Place::new(SECRETS, "op"), &kept)
                    .expect("opens");
                assert_eq!(opened.as_str(), "plain-operator-token", "{e}");

                let other = std::sync::Arc::new(Key::generate().expect("a key"));
                let refused = b
                    .run({
                        let other = other.clone();
                        move |db| check_in(db, &other)
                    })
                    .await
                    .expect_err("another key");
                assert!(refused.to_string().contains(key.id()), "{e}: {refused}");

                let rotated = b
                    .run({
                        let (key, other) = (key.clone(), other.clone());
                        move |db| reseal_in(db, &key, &other)
                    })
                    .await
                    .expect("rotated");
                assert_eq!(rotated.changed, 2, "{e}");
                assert!(
                    b.run({
                        let other = other.clone();
                        move |db| check_in(db, &other)
                    })
                    .await
                    .expect("checked"),
                    "{e}"
                );
                let old = b
                    .run({
                        let key = key.clone();
                        move |db| check_in(db, &key)
                    })
                    .await
                    .expect_err("the old key");
                assert!(old.to_string().contains(other.id()), "{e}: {old}");
                // A host still holding the old key may not seal anything
                // new with it: its value would open on no other host.
                let write = b
                    .run({
                        let key = key.clone();
                        move |db| check_key_in(db, &key)
                    })
                    .await
                    .expect_err("a new value under the old key");
                assert!(write.to_string().contains(other.id()), "{e}: {write}");
            }
        });
    }
}
