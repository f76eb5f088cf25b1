//! Gadget storage as stored: one row per (chat, gadget, key), with the
//! value and the observation set it was written under.
//!
//! Owns the `gadget_storage` table and its statements, written once for
//! both engines. May not decide who reads a value or what a value's
//! observation set is (`crate::storage` holds that rule and is this
//! module's only caller): it keeps the set as the text it is given.

use super::sql::{Sql, args};
use super::{Store, now_ms};

/// A stored value and the observation set it was written under (JSON).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredValue {
    /// The gadget's text.
    pub value: String,
    /// The chat's observation set when the value was written, as
    /// `crate::storage` wrote it.
    pub observed: String,
}

/// A write that would take the gadget past its number of keys in the
/// chat: nothing was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StorageFull {
    /// The keys the gadget holds in the chat.
    pub held: i64,
}

/// One write of [`Store::storage_put`].
#[derive(Clone, Debug)]
pub struct StoragePut<'a> {
    /// The chat the value belongs to.
    pub chat: &'a str,
    /// The gadget that keeps it.
    pub gadget: &'a str,
    /// The key, checked by `crate::storage`.
    pub key: &'a str,
    /// The value, checked by `crate::storage`.
    pub value: &'a str,
    /// The observation set, as `crate::storage` wrote it.
    pub observed: &'a str,
    /// The principal's label, for the record.
    pub by: &'a str,
    /// A new key is refused once the gadget holds this many in the chat.
    pub max_keys: i64,
}

impl Store {
    /// The value of `gadget` in `chat` under `key`, if any.
    pub(crate) fn storage_get(
        &self,
        chat: &str,
        gadget: &str,
        key: &str,
    ) -> anyhow::Result<Option<StoredValue>> {
        self.with(|db| get_in(db, chat, gadget, key))
    }

    /// Every key of `gadget` in `chat`, in byte order, with the
    /// observation set its value was written under.
    pub(crate) fn storage_keys(
        &self,
        chat: &str,
        gadget: &str,
    ) -> anyhow::Result<Vec<(String, String)>> {
        self.with(|db| keys_in(db, chat, gadget))
    }

    /// Write `p.value` under `p.key`, replacing any value there; a new key
    /// past `p.max_keys` is refused and nothing is written. The count and
    /// the write are one transaction (the chat's row held first on
    /// PostgreSQL), so concurrent writers never pass the cap together.
    pub(crate) fn storage_put(
        &self,
        p: &StoragePut<'_>,
    ) -> anyhow::Result<Result<(), StorageFull>> {
        self.write(|db| put_in(db, p, now_ms()))
    }

    /// Remove `key` of `gadget` in `chat`; whether it was there.
    pub(crate) fn storage_delete(
        &self,
        chat: &str,
        gadget: &str,
        key: &str,
    ) -> anyhow::Result<bool> {
        self.write(|db| delete_in(db, chat, gadget, key))
    }
}

fn get_in(
    db: &dyn Sql,
    chat: &str,
    gadget: &str,
    key: &str,
) -> anyhow::Result<Option<StoredValue>> {
    db.row(
        "SELECT value, observed FROM gadget_storage
         WHERE chat = ?1 AND gadget = ?2 AND key = ?3",
        args![chat, gadget, key],
    )?
    .map(|r| {
        Ok(StoredValue {
            value: r.get(0)?,
            observed: r.get(1)?,
        })
    })
    .transpose()
}

fn keys_in(db: &dyn Sql, chat: &str, gadget: &str) -> anyhow::Result<Vec<(String, String)>> {
    let mut keys: Vec<(String, String)> = db
        .rows(
            "SELECT key, observed FROM gadget_storage WHERE chat = ?1 AND gadget = ?2",
            args![chat, gadget],
        )?
        .iter()
        .map(|r| Ok((r.get(0)?, r.get(1)?)))
        .collect::<anyhow::Result<_>>()?;
    // Byte order on both engines: a collation would order them differently
    // on each.
    keys.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    Ok(keys)
}

fn put_in(db: &dyn Sql, p: &StoragePut<'_>, now: i64) -> anyhow::Result<Result<(), StorageFull>> {
    super::sharing::lock_chat(db, p.chat)?;
    let exists = db
        .row(
            "SELECT 1 FROM gadget_storage WHERE chat = ?1 AND gadget = ?2 AND key = ?3",
            args![p.chat, p.gadget, p.key],
        )?
        .is_some();
    if !exists {
        let held: i64 = db
            .row(
                "SELECT COUNT(*) FROM gadget_storage WHERE chat = ?1 AND gadget = ?2",
                args![p.chat, p.gadget],
            )?
            .map(|r| r.get(0))
            .transpose()?
            .unwrap_or(0);
        if held >= p.max_keys {
            return Ok(Err(StorageFull { held }));
        }
    }
    db.exec(
        "INSERT INTO gadget_storage (chat, gadget, key, value, observed, written_by, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (chat, gadget, key) DO UPDATE SET
           value = excluded.value, observed = excluded.observed,
           written_by = excluded.written_by, updated_at = excluded.updated_at",
        args![p.chat, p.gadget, p.key, p.value, p.observed, p.by, now],
    )?;
    Ok(Ok(()))
}

fn delete_in(db: &dyn Sql, chat: &str, gadget: &str, key: &str) -> anyhow::Result<bool> {
    Ok(db.exec(
        "DELETE FROM gadget_storage WHERE chat = ?1 AND gadget = ?2 AND key = ?3",
        args![chat, gadget, key],
    )? > 0)
}

#[cfg(test)]
mod on_both_engines {
    use super::*;
    use crate::store::suite::{Backend, runtime};

    fn put<'a>(chat: &'a str, gadget: &'a str, key: &'a str, value: &'a str) -> StoragePut<'a> {
        StoragePut {
            chat,
            gadget,
            key,
            value,
            observed: "[]",
            by: "ana",
            max_keys: 2,
        }
    }

    /// Values are kept per chat and per gadget, replaced in place, listed
    /// in byte order and removed; a third key is refused and writes
    /// nothing, while replacing a held key still passes.
    #[test]
    fn values_are_kept_per_chat_and_gadget_and_the_key_cap_holds() {
        runtime().block_on(async {
            for b in Backend::both().await {
                let e = b.name();
                b.chats(&[("plans", "ana"), ("other", "ana")]).await;
                let out = b
                    .run(|db| {
                        let now = 1;
                        for (key, value) in [("b", "one"), ("a", "two"), ("b", "three")] {
                            let written = put_in(db, &put("plans", "notebook", key, value), now)?;
                            anyhow::ensure!(written.is_ok(), "{key} was refused");
                        }
                        let full = put_in(db, &put("plans", "notebook", "c", "x"), now)?;
                        let elsewhere = put_in(db, &put("other", "notebook", "c", "y"), now)?;
                        let other_gadget = put_in(db, &put("plans", "diary", "c", "z"), now)?;
                        Ok((
                            full,
                            elsewhere,
                            other_gadget,
                            get_in(db, "plans", "notebook", "b")?,
                            get_in(db, "plans", "diary", "b")?,
                            keys_in(db, "plans", "notebook")?,
                            delete_in(db, "plans", "notebook", "a")?,
                            delete_in(db, "plans", "notebook", "a")?,
                            keys_in(db, "plans", "notebook")?,
                        ))
                    })
                    .await
                    .expect("the writes");
                assert_eq!(out.0, Err(StorageFull { held: 2 }), "{e}");
                assert_eq!(out.1, Ok(()), "{e}: another chat has its own keys");
                assert_eq!(out.2, Ok(()), "{e}: another gadget has its own keys");
                assert_eq!(
                    out.3.map(|v| v.value).as_deref(),
                    Some("three"),
                    "{e}: replaced in place"
                );
                assert_eq!(out.4, None, "{e}: another gadget sees nothing");
                let listed: Vec<&str> = out.5.iter().map(|(k, _)| k.as_str()).collect();
                assert_eq!(listed, ["a", "b"], "{e}");
                assert!(out.6 && !out.7, "{e}: removed once");
                assert_eq!(out.8.len(), 1, "{e}");
            }
        });
    }
}
