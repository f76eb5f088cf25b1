//! Passkeys and OpenID Connect identity bindings: what lets a
//! person sign in by something other than a one-time link.
//!
//! Owns the rows only. It never checks a signature or a token (the
//! kernel's `crate::signin` does, with webauthn-rs and openidconnect) and
//! never decides what a person may see (`crate::access` does). Nothing
//! stored here signs anyone in by itself: a passkey row keeps a
//! credential's id, public key and signature counter; a binding names
//! whose identity at an issuer is which person.
//!
//! Every statement is written once over [`Sql`] for both engines.

use super::sql::{Sql, args};
use super::{Store, now_ms};
use anyhow::bail;

/// Passkeys one person may keep: enough for every device they own, few
/// enough that a lost session cannot fill the table.
pub const PASSKEYS_PER_PERSON: i64 = 20;

/// A stored passkey.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StoredPasskey {
    /// The credential's id, base64url: how the authenticator names it.
    pub credential: String,
    /// The person it signs in.
    pub user: String,
    /// The person's WebAuthn user handle.
    #[serde(skip)]
    pub handle: String,
    /// What the person called it ("laptop").
    pub label: String,
    /// webauthn-rs's record of it (public key, counter), as JSON.
    #[serde(skip)]
    pub passkey: String,
    /// When it was added, ms since the epoch.
    pub created_at: i64,
    /// When it last signed in, ms since the epoch.
    pub used_at: Option<i64>,
}

/// An operator's binding of an identity at an issuer to a person.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct IdentityBinding {
    /// The issuer's URL, exactly as its ID tokens name it.
    pub issuer: String,
    /// The identity's `sub` at that issuer.
    pub subject: String,
    /// The person it signs in as.
    pub user: String,
    /// Who made the binding.
    pub bound_by: String,
    /// When, ms since the epoch.
    pub created_at: i64,
}

impl Store {
    /// The WebAuthn user handle `user`'s passkeys carry, if they have one.
    pub fn passkey_handle(&self, user: &str) -> anyhow::Result<Option<String>> {
        self.with(|db| {
            db.row(
                "SELECT handle FROM web_passkeys WHERE \"user\" = ?1 ORDER BY created_at LIMIT 1",
                args![user],
            )?
            .map(|r| r.get(0))
            .transpose()
        })
    }

    /// Keep a new passkey of `user`. Refused for an unknown person, a
    /// credential already kept (for anyone), a handle that is not the
    /// person's own, or a person at [`PASSKEYS_PER_PERSON`].
    pub fn add_passkey(&self, p: &StoredPasskey) -> anyhow::Result<()> {
        self.write(|db| add_passkey_in(db, p, now_ms()))
    }

    /// The passkey with this credential id, if it carries this user handle.
    pub fn passkey(&self, credential: &str, handle: &str) -> anyhow::Result<Option<StoredPasskey>> {
        self.with(|db| {
            Ok(passkeys_where(
                db,
                "credential = ?1 AND handle = ?2",
                args![credential, handle],
            )?
            .pop())
        })
    }

    /// `user`'s passkeys, oldest first.
    pub fn passkeys(&self, user: &str) -> anyhow::Result<Vec<StoredPasskey>> {
        self.with(|db| passkeys_where(db, "\"user\" = ?1", args![user]))
    }

    /// Replace a passkey's record after a sign-in (its counter moved), only
    /// if it is still `was`: two sign-ins racing with one credential (a
    /// cloned authenticator) cannot both move it. Returns whether it did.
    pub fn update_passkey(&self, credential: &str, was: &str, new: &str) -> anyhow::Result<bool> {
        self.write(|db| {
            Ok(db.exec(
                "UPDATE web_passkeys SET passkey = ?3, used_at = ?4 WHERE credential = ?1 AND passkey = ?2",
                args![credential, was, new, now_ms()],
            )? == 1)
        })
    }

    /// Remove one of `user`'s passkeys. Returns whether there was one.
    pub fn remove_passkey(&self, user: &str, credential: &str) -> anyhow::Result<bool> {
        self.write(|db| {
            Ok(db.exec(
                "DELETE FROM web_passkeys WHERE \"user\" = ?1 AND credential = ?2",
                args![user, credential],
            )? == 1)
        })
    }

    /// Bind `subject` at `issuer` to `user`. Refused for an unknown person
    /// or a subject bound to someone else (unbind it first); binding it
    /// again to the same person changes nothing. Returns whether it was new.
    pub fn bind_identity(
        &self,
        issuer: &str,
        subject: &str,
        user: &str,
        by: &str,
    ) -> anyhow::Result<bool> {
        self.write(|db| bind_identity_in(db, issuer, subject, user, by, now_ms()))
    }

    /// Remove a binding; the person it named, if there was one.
    pub fn unbind_identity(&self, issuer: &str, subject: &str) -> anyhow::Result<Option<String>> {
        self.write(|db| {
            let was = identity_in(db, issuer, subject)?;
            db.exec(
                "DELETE FROM identity_bindings WHERE issuer = ?1 AND subject = ?2",
                args![issuer, subject],
            )?;
            Ok(was)
        })
    }

    /// The person `subject` at `issuer` is bound to.
    pub fn identity(&self, issuer: &str, subject: &str) -> anyhow::Result<Option<String>> {
        self.with(|db| identity_in(db, issuer, subject))
    }

    /// Every binding, by person, issuer and subject.
    pub fn identity_bindings(&self) -> anyhow::Result<Vec<IdentityBinding>> {
        self.with(|db| {
            db.rows(
                "SELECT issuer, subject, \"user\", bound_by, created_at FROM identity_bindings
                 ORDER BY \"user\", issuer, subject",
                args![],
            )?
            .iter()
            .map(|r| {
                Ok(IdentityBinding {
                    issuer: r.get(0)?,
                    subject: r.get(1)?,
                    user: r.get(2)?,
                    bound_by: r.get(3)?,
                    created_at: r.get(4)?,
                })
            })
            .collect()
        })
    }
}

fn known_person(db: &dyn Sql, user: &str) -> anyhow::Result<bool> {
    Ok(db
        .row("SELECT 1 FROM users WHERE name = ?1", args![user])?
        .is_some())
}

fn add_passkey_in(db: &dyn Sql, p: &StoredPasskey, now: i64) -> anyhow::Result<()> {
    if !known_person(db, &p.user)? {
        bail!(
            "no person named {:?} is known to this deployment; add them first: `gatehouse user add NAME`",
            p.user
        );
    }
    let theirs: Vec<String> = db
        .rows(
            "SELECT handle FROM web_passkeys WHERE \"user\" = ?1",
            args![p.user],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect::<anyhow::Result<_>>()?;
    if theirs.iter().any(|h| h != &p.handle) {
        bail!("this passkey was made for another user handle; start adding it again");
    }
    if i64::try_from(theirs.len()).unwrap_or(i64::MAX) >= PASSKEYS_PER_PERSON {
        bail!(
            "{} already has {PASSKEYS_PER_PERSON} passkeys; remove one first",
            p.user
        );
    }
    let elsewhere = db
        .row(
            "SELECT 1 FROM web_passkeys WHERE credential = ?1 OR (handle = ?2 AND \"user\" <> ?3)",
            args![p.credential, p.handle, p.user],
        )?
        .is_some();
    if elsewhere {
        bail!("this passkey is already registered here");
    }
    db.exec(
        "INSERT INTO web_passkeys (credential, \"user\", handle, label, passkey, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        args![p.credential, p.user, p.handle, p.label, p.passkey, now],
    )?;
    Ok(())
}

fn passkeys_where(
    db: &dyn Sql,
    condition: &str,
    values: &[&dyn super::sql::ToArg],
) -> anyhow::Result<Vec<StoredPasskey>> {
    db.rows(
        &format!(
            "SELECT credential, \"user\", handle, label, passkey, created_at, used_at
             FROM web_passkeys WHERE {condition} ORDER BY created_at, credential"
        ),
        values,
    )?
    .iter()
    .map(|r| {
        Ok(StoredPasskey {
            credential: r.get(0)?,
            user: r.get(1)?,
            handle: r.get(2)?,
            label: r.get(3)?,
            passkey: r.get(4)?,
            created_at: r.get(5)?,
            used_at: r.get(6)?,
        })
    })
    .collect()
}

fn identity_in(db: &dyn Sql, issuer: &str, subject: &str) -> anyhow::Result<Option<String>> {
    db.row(
        "SELECT \"user\" FROM identity_bindings WHERE issuer = ?1 AND subject = ?2",
        args![issuer, subject],
    )?
    .map(|r| r.get(0))
    .transpose()
}

fn bind_identity_in(
    db: &dyn Sql,
    issuer: &str,
    subject: &str,
    user: &str,
    by: &str,
    now: i64,
) -> anyhow::Result<bool> {
    if !known_person(db, user)? {
        bail!(
            "no person named {user:?} is known to this deployment; add them first: `gatehouse user add NAME`"
        );
    }
    match identity_in(db, issuer, subject)? {
        Some(u) if u == user => return Ok(false),
        Some(u) => bail!(
            "subject {subject:?} at {issuer} is bound to {u} already; unbind it first (`gatehouse user unbind {u} --oidc-subject SUB --issuer URL`)"
        ),
        None => {}
    }
    db.exec(
        "INSERT INTO identity_bindings (issuer, subject, \"user\", bound_by, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5)",
        args![issuer, subject, user, by, now],
    )?;
    Ok(true)
}

#[cfg(test)]
mod on_both_engines {
    use super::*;
    use crate::store::suite::{Backend, runtime};

    fn key(credential: &str, user: &str, handle: &str) -> StoredPasskey {
        StoredPasskey {
            credential: credential.into(),
            user: user.into(),
            handle: handle.into(),
            label: "laptop".into(),
            passkey: "{}".into(),
            created_at: 0,
            used_at: None,
        }
    }

    const ALICE: &str = "00000000-0000-4000-8000-00000000000a";
    const BOB: &str = "00000000-0000-4000-8000-00000000000b";

    /// A passkey is found only with its own user handle; one credential or
    /// one handle never serves two people; unknown people get none; a
    /// record moves only from what the updater read; bindings name one
    /// person per subject and issuer.
    #[test]
    fn passkeys_and_bindings_name_one_person_each() {
        runtime().block_on(async {
            for b in Backend::both().await {
                let e = b.name();
                let out = b
                    .run(|db| {
                        for who in ["alice", "bob"] {
                            db.exec(
                                "INSERT INTO users (name, created_at) VALUES (?1, 0)",
                                args![who],
                            )?;
                        }
                        let mut refused = Vec::new();
                        add_passkey_in(db, &key("c1", "alice", ALICE), 1)?;
                        for p in [
                            key("c1", "bob", BOB),
                            key("c2", "bob", ALICE),
                            key("c3", "alice", BOB),
                            key("c4", "carol", BOB),
                        ] {
                            refused.push(add_passkey_in(db, &p, 2).is_err());
                        }
                        add_passkey_in(db, &key("c5", "alice", ALICE), 3)?;
                        let found = passkeys_where(
                            db,
                            "credential = ?1 AND handle = ?2",
                            args!["c1", ALICE],
                        )?
                        .len();
                        let other_handle = passkeys_where(
                            db,
                            "credential = ?1 AND handle = ?2",
                            args!["c1", BOB],
                        )?
                        .len();
                        let moved = db.exec(
                            "UPDATE web_passkeys SET passkey = ?3, used_at = 9 WHERE credential = ?1 AND passkey = ?2",
                            args!["c1", "{}", "{\"n\":1}"],
                        )?;
                        let stale = db.exec(
                            "UPDATE web_passkeys SET passkey = ?3, used_at = 9 WHERE credential = ?1 AND passkey = ?2",
                            args!["c1", "{}", "{\"n\":2}"],
                        )?;
                        let new = bind_identity_in(db, "https://id.example", "s1", "alice", "op", 1)?;
                        let again = bind_identity_in(db, "https://id.example", "s1", "alice", "op", 2)?;
                        let taken = bind_identity_in(db, "https://id.example", "s1", "bob", "op", 3).is_err();
                        let other_issuer = bind_identity_in(db, "https://other.example", "s1", "bob", "op", 4)?;
                        let stranger = bind_identity_in(db, "https://id.example", "s9", "carol", "op", 5).is_err();
                        let who = identity_in(db, "https://id.example", "s1")?;
                        let nobody = identity_in(db, "https://id.example", "s2")?;
                        Ok((refused, found, other_handle, moved, stale, (new, again, taken, other_issuer, stranger), who, nobody))
                    })
                    .await
                    .expect("the statements run");
                let (refused, found, other_handle, moved, stale, binds, who, nobody) = out;
                assert_eq!(refused, vec![true, true, true, true], "{e}");
                assert_eq!((found, other_handle), (1, 0), "{e}");
                assert_eq!((moved, stale), (1, 0), "{e}: a record moves once from what was read");
                assert_eq!(binds, (true, false, true, true, true), "{e}");
                assert_eq!(who.as_deref(), Some("alice"), "{e}");
                assert_eq!(nobody, None, "{e}");
            }
        });
    }
}
