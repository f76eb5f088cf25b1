//! Web Push devices and the record of what each device was told, as
//! stored.
//!
//! Owns the `push_subscriptions` and `push_notices` tables. A device's
//! endpoint and message keys are kept sealed with the operator's key
//! (`crate::seal`, place: this table and the device's id) and opened here
//! for the sender only; what a person's device list shows is the push
//! service's origin. May not decide who is told of what (`crate::notify`
//! does, through the one authorization rule), nor check an endpoint
//! (`crate::push` does before anything reaches this module).

use super::notices::Told;
use super::sealed;
use super::sql::{Sql, args};
use super::{Store, now_ms};
use crate::seal::{Key, Place};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

use sealed::PUSH_SUBSCRIPTIONS;

/// A device as its person sees it: never its endpoint or keys.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PushDevice {
    /// The device's id (32 hex digits), for removing it.
    pub id: String,
    /// Whose device it is.
    pub user: String,
    /// The push service's origin (`https://fcm.googleapis.com`): which
    /// browser's service holds the subscription.
    pub service: String,
    /// When it was subscribed, in ms since the epoch.
    pub created_at: i64,
    /// When the last push went to it.
    pub last_sent_at: Option<i64>,
}

/// What a push is sent with: the subscription as the browser gave it.
/// Kept sealed; opened only for the sender.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PushKeys {
    /// The push service's URL for this device (a capability: whoever
    /// holds it, and the VAPID key, may push to the device).
    pub endpoint: String,
    /// The device's P-256 public key, base64url (65 bytes uncompressed).
    pub p256dh: String,
    /// The device's authentication secret, base64url (16 bytes).
    pub auth: String,
}

impl std::fmt::Debug for PushKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PushKeys { .. }")
    }
}

/// A device as the sender needs it: opened, with its retry state.
#[derive(Clone, Debug)]
pub struct PushTarget {
    /// The device.
    pub device: PushDevice,
    /// Where and how to push to it.
    pub keys: PushKeys,
    /// Failed pushes in a row (429, 5xx, no answer) since the last one
    /// delivered.
    pub failures: i64,
    /// Not before this time (ms): the push service asked to wait, or the
    /// last attempt failed.
    pub retry_at: Option<i64>,
}

/// A new subscription, checked by `crate::push`.
pub struct NewPushDevice<'a> {
    /// The person subscribing.
    pub user: &'a str,
    /// The new device's id (random, 32 hex digits).
    pub id: &'a str,
    /// The push service's origin, shown in the device list.
    pub service: &'a str,
    /// The SHA-256 of the endpoint, hex: one device is held once.
    pub endpoint_digest: &'a str,
    /// The subscription itself, sealed before it is written.
    pub keys: &'a PushKeys,
}

/// What subscribing did.
#[derive(Debug)]
pub enum Subscribed {
    /// Kept (replacing the same endpoint's earlier subscription, whoever
    /// held it: a browser's subscription belongs to whoever subscribed it
    /// last).
    Added(PushDevice),
    /// The person already has this many devices, the most allowed.
    TooMany(usize),
    /// No such person.
    NoSuchPerson,
}

impl Told {
    /// The word `push_notices.kind` keeps for this kind.
    fn kind(self) -> &'static str {
        match self {
            Told::Actions => "action",
            Told::Requests => "request",
        }
    }
}

impl Store {
    /// Keep a new device for `new.user`, unless they already have `max`
    /// (a resubscription of the same endpoint replaces the old one and
    /// does not count twice).
    pub fn push_subscribe(
        &self,
        new: &NewPushDevice<'_>,
        max: usize,
    ) -> anyhow::Result<Subscribed> {
        self.write(|db| subscribe_in(db, &self.key, new, max, now_ms()))
    }

    /// `user`'s devices, oldest first.
    pub fn push_devices(&self, user: &str) -> anyhow::Result<Vec<PushDevice>> {
        self.with(|db| devices_in(db, Some(user)))
    }

    /// Remove `user`'s device `id` (and the record of what it was told).
    /// False: they have no such device.
    pub fn push_unsubscribe(&self, user: &str, id: &str) -> anyhow::Result<bool> {
        self.write(|db| remove_in(db, Some(user), id))
    }

    /// Remove device `id` whoever's it is: its push service said it is
    /// gone (404, 410).
    pub fn push_gone(&self, id: &str) -> anyhow::Result<bool> {
        self.write(|db| remove_in(db, None, id))
    }

    /// Every device, opened for the sender, by person.
    pub fn push_targets(&self) -> anyhow::Result<Vec<PushTarget>> {
        self.with(|db| targets_in(db, &self.key))
    }

    /// The `what` device `id` was already told of (and that still wait).
    /// The record of those that no longer wait is dropped first, so one
    /// that waits again later is told of again.
    pub fn push_told(&self, id: &str, what: Told) -> anyhow::Result<HashSet<i64>> {
        self.write(|db| told_in(db, id, what))
    }

    /// Claim the telling of `ids` to device `id`: the ones no other
    /// process claimed first are recorded and returned. Only the claimer
    /// pushes them.
    pub fn push_claim(&self, id: &str, what: Told, ids: &[i64]) -> anyhow::Result<Vec<i64>> {
        self.write(|db| claim_in(db, id, what, ids, now_ms()))
    }

    /// A claimed push was not delivered and will be tried again: forget
    /// the claim.
    pub fn push_release(&self, id: &str, what: Told, ids: &[i64]) -> anyhow::Result<()> {
        self.write(|db| release_in(db, id, what, ids))
    }

    /// A push was delivered to device `id` now: its failures are cleared.
    pub fn push_delivered(&self, id: &str) -> anyhow::Result<()> {
        self.with(|db| delivered_in(db, id, now_ms()))
    }

    /// A push to device `id` failed: `failures` in a row now (0: the
    /// batch was given up), and no attempt before `retry_at`.
    pub fn push_failed(&self, id: &str, failures: i64, retry_at: i64) -> anyhow::Result<()> {
        self.with(|db| failed_in(db, id, failures, retry_at))
    }
}

// The statements, written once for both engines (`store::sql`).

fn subscribe_in(
    db: &dyn Sql,
    key: &Key,
    new: &NewPushDevice<'_>,
    max: usize,
    now: i64,
) -> anyhow::Result<Subscribed> {
    let known = db
        .row("SELECT 1 FROM users WHERE name = ?1", args![new.user])?
        .is_some();
    if !known {
        return Ok(Subscribed::NoSuchPerson);
    }
    let held: i64 = db
        .row(
            "SELECT count(*) FROM push_subscriptions WHERE \"user\" = ?1 AND endpoint_digest <> ?2",
            args![new.user, new.endpoint_digest],
        )?
        .map(|r| r.get(0))
        .transpose()?
        .unwrap_or(0);
    if usize::try_from(held).unwrap_or(usize::MAX) >= max {
        return Ok(Subscribed::TooMany(max));
    }
    // The same endpoint subscribed again (the same browser, maybe now
    // signed in as someone else): the earlier one goes, with its record.
    if let Some(r) = db.row(
        "SELECT id FROM push_subscriptions WHERE endpoint_digest = ?1",
        args![new.endpoint_digest],
    )? {
        let old: String = r.get(0)?;
        remove_in(db, None, &old)?;
    }
    sealed::check_key_in(db, key)?;
    let plain = serde_json::to_string(new.keys)?;
    let secret = key.seal_text(Place::new(PUSH_SUBSCRIPTIONS, new.id), &plain)?;
    db.exec(
        "INSERT INTO push_subscriptions (id, \"user\", endpoint_digest, origin, secret, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        args![
            new.id,
            new.user,
            new.endpoint_digest,
            new.service,
            secret,
            now
        ],
    )?;
    Ok(Subscribed::Added(PushDevice {
        id: new.id.to_owned(),
        user: new.user.to_owned(),
        service: new.service.to_owned(),
        created_at: now,
        last_sent_at: None,
    }))
}

const DEVICE_COLUMNS: &str = "id, \"user\", origin, created_at, last_sent_at";

fn device(r: &super::sql::Row) -> anyhow::Result<PushDevice> {
    Ok(PushDevice {
        id: r.get(0)?,
        user: r.get(1)?,
        service: r.get(2)?,
        created_at: r.get(3)?,
        last_sent_at: r.get(4)?,
    })
}

fn devices_in(db: &dyn Sql, user: Option<&str>) -> anyhow::Result<Vec<PushDevice>> {
    let rows = match user {
        Some(u) => db.rows(
            &format!(
                "SELECT {DEVICE_COLUMNS} FROM push_subscriptions WHERE \"user\" = ?1 ORDER BY created_at, id"
            ),
            args![u],
        )?,
        None => db.rows(
            &format!(
                "SELECT {DEVICE_COLUMNS} FROM push_subscriptions ORDER BY \"user\", created_at, id"
            ),
            args![],
        )?,
    };
    rows.iter().map(device).collect()
}

fn remove_in(db: &dyn Sql, user: Option<&str>, id: &str) -> anyhow::Result<bool> {
    let mine = match user {
        Some(u) => db.row(
            "SELECT 1 FROM push_subscriptions WHERE id = ?1 AND \"user\" = ?2",
            args![id, u],
        )?,
        None => db.row("SELECT 1 FROM push_subscriptions WHERE id = ?1", args![id])?,
    };
    if mine.is_none() {
        return Ok(false);
    }
    db.exec(
        "DELETE FROM push_notices WHERE subscription = ?1",
        args![id],
    )?;
    db.exec("DELETE FROM push_subscriptions WHERE id = ?1", args![id])?;
    Ok(true)
}

fn targets_in(db: &dyn Sql, key: &Key) -> anyhow::Result<Vec<PushTarget>> {
    db.rows(
        &format!(
            "SELECT {DEVICE_COLUMNS}, secret, failures, retry_at FROM push_subscriptions
             ORDER BY \"user\", created_at, id"
        ),
        args![],
    )?
    .iter()
    .map(|r| {
        let device = device(r)?;
        let stored: String = r.get(5)?;
        let plain = key.open_text(Place::new(PUSH_SUBSCRIPTIONS, &device.id), &stored)?;
        let keys: PushKeys = serde_json::from_str(&plain).map_err(|_| {
            anyhow::anyhow!(
                "push device {} of {} is not readable; remove it (the person subscribes again from the inbox)",
                device.id,
                device.user
            )
        })?;
        Ok(PushTarget {
            device,
            keys,
            failures: r.get(6)?,
            retry_at: r.get(7)?,
        })
    })
    .collect()
}

fn told_in(db: &dyn Sql, id: &str, what: Told) -> anyhow::Result<HashSet<i64>> {
    let (_, _, waiting) = what.sql();
    let kind = what.kind();
    db.exec(
        &format!("DELETE FROM push_notices WHERE kind = ?1 AND item NOT IN ({waiting})"),
        args![kind],
    )?;
    db.rows(
        "SELECT item FROM push_notices WHERE subscription = ?1 AND kind = ?2",
        args![id, kind],
    )?
    .iter()
    .map(|r| r.get(0))
    .collect()
}

fn claim_in(db: &dyn Sql, id: &str, what: Told, ids: &[i64], now: i64) -> anyhow::Result<Vec<i64>> {
    let kind = what.kind();
    let mut claimed = Vec::new();
    for item in ids {
        // The key is (device, kind, item): a second claimer's insert does
        // nothing, on either engine; a device removed meanwhile is not
        // claimed for.
        let n = db.exec(
            "INSERT INTO push_notices (subscription, kind, item, sent_at)
             SELECT CAST(?1 AS TEXT), CAST(?2 AS TEXT), CAST(?3 AS BIGINT), CAST(?4 AS BIGINT)
             WHERE EXISTS (SELECT 1 FROM push_subscriptions WHERE id = ?1)
             ON CONFLICT DO NOTHING",
            args![id, kind, item, now],
        )?;
        if n == 1 {
            claimed.push(*item);
        }
    }
    Ok(claimed)
}

fn release_in(db: &dyn Sql, id: &str, what: Told, ids: &[i64]) -> anyhow::Result<()> {
    for item in ids {
        db.exec(
            "DELETE FROM push_notices WHERE subscription = ?1 AND kind = ?2 AND item = ?3",
            args![id, what.kind(), item],
        )?;
    }
    Ok(())
}

fn delivered_in(db: &dyn Sql, id: &str, now: i64) -> anyhow::Result<()> {
    db.exec(
        "UPDATE push_subscriptions SET last_sent_at = ?2, failures = 0, retry_at = NULL WHERE id = ?1",
        args![id, now],
    )?;
    Ok(())
}

fn failed_in(db: &dyn Sql, id: &str, failures: i64, retry_at: i64) -> anyhow::Result<()> {
    db.exec(
        "UPDATE push_subscriptions SET failures = ?2, retry_at = ?3 WHERE id = ?1",
        args![id, failures, retry_at],
    )?;
    Ok(())
}

#[cfg(test)]
mod on_both_engines {
    use super::*;
    use crate::store::suite::{Backend, runtime};

    fn keys(n: u8) -> PushKeys {
        PushKeys {
            endpoint: format!("https://push.example.com/send/{n}"),
            p256dh: "B".repeat(87),
            auth: "A".repeat(22),
        }
    }

    fn digest(n: u8) -> String {
        format!("{n:0>64}")
    }

    fn id(n: u8) -> String {
        format!("{n:0>32}")
    }

    /// A device is kept sealed and opened for the sender; a person holds
    /// at most `max`; the same endpoint subscribed again (by anyone)
    /// replaces the old one; each (device, item) is claimed by exactly one
    /// of several racing senders, and forgotten once the item no longer
    /// waits; a removed device takes its record with it, and only its
    /// person removes it.
    #[test]
    fn devices_are_sealed_capped_and_each_item_is_claimed_once_per_device() {
        runtime().block_on(async {
            for b in Backend::both().await {
                let e = b.name();
                let (first, second) = (b.pending().await, b.pending().await);
                b.run(|db| {
                    db.exec(
                        "INSERT INTO users (name, created_at) VALUES ('ana', 0), ('ben', 0)",
                        args![],
                    )
                })
                .await
                .expect("people");
                let key = crate::seal::test_key();
                let subscribe = |user: &'static str, n: u8, max: usize| {
                    let key = key.clone();
                    let b = b.clone();
                    async move {
                        b.run(move |db| {
                            let (i, d, k) = (id(n), digest(n), keys(n));
                            subscribe_in(
                                db,
                                &key,
                                &NewPushDevice {
                                    user,
                                    id: &i,
                                    service: "https://push.example.com",
                                    endpoint_digest: &d,
                                    keys: &k,
                                },
                                max,
                                5,
                            )
                        })
                        .await
                        .expect("subscribe")
                    }
                };
                assert!(
                    matches!(subscribe("ana", 1, 2).await, Subscribed::Added(_)),
                    "{e}"
                );
                assert!(
                    matches!(subscribe("ana", 2, 2).await, Subscribed::Added(_)),
                    "{e}"
                );
                assert!(
                    matches!(subscribe("ana", 3, 2).await, Subscribed::TooMany(2)),
                    "{e}: the cap"
                );
                assert!(
                    matches!(subscribe("nobody", 4, 2).await, Subscribed::NoSuchPerson),
                    "{e}"
                );
                // The endpoint of ana's second device, subscribed by ben:
                // it is ben's now, and ana has one device left.
                assert!(
                    matches!(subscribe("ben", 2, 2).await, Subscribed::Added(_)),
                    "{e}"
                );
                let all = b.run(|db| devices_in(db, None)).await.expect("devices");
                let owners: Vec<(String, String)> =
                    all.iter().map(|d| (d.user.clone(), d.id.clone())).collect();
                assert_eq!(
                    owners,
                    vec![("ana".into(), id(1)), ("ben".into(), id(2))],
                    "{e}"
                );
                // Sealed at rest, opened for the sender.
                let stored: String = b
                    .run(|db| {
                        db.row(
                            "SELECT secret FROM push_subscriptions WHERE id = ?1",
                            args![id(1)],
                        )?
                        .ok_or_else(|| anyhow::anyhow!("no row"))?
                        .get(0)
                    })
                    .await
                    .expect("stored");
                assert!(!stored.contains("push.example.com"), "{e}: {stored}");
                let targets = b
                    .run({
                        let key = key.clone();
                        move |db| targets_in(db, &key)
                    })
                    .await
                    .expect("targets");
                assert_eq!(targets[0].keys, keys(1), "{e}");
                assert_eq!(targets[1].keys, keys(2), "{e}");

                // Racing senders: each item claimed once for the device.
                let senders: Vec<_> = (0..6)
                    .map(|_| {
                        let b = b.clone();
                        tokio::spawn(async move {
                            b.run(move |db| {
                                claim_in(db, &id(1), Told::Actions, &[first, second], 7)
                            })
                            .await
                        })
                    })
                    .collect();
                let mut told = Vec::new();
                for s in senders {
                    told.extend(s.await.expect("joined").expect("claimed"));
                }
                told.sort_unstable();
                assert_eq!(told, vec![first, second], "{e}: each told once");
                // Another device of the same item is told apart.
                let other = b
                    .run(move |db| claim_in(db, &id(2), Told::Actions, &[first], 7))
                    .await
                    .expect("claimed");
                assert_eq!(other, vec![first], "{e}");
                // A request with the same number is another item.
                let request = b
                    .run(move |db| claim_in(db, &id(1), Told::Requests, &[first], 7))
                    .await
                    .expect("claimed");
                assert_eq!(request, vec![first], "{e}");
                b.run(move |db| release_in(db, &id(1), Told::Requests, &[first]))
                    .await
                    .expect("released");
                // Decided: forgotten.
                b.run(move |db| {
                    db.exec(
                        "UPDATE ledger SET state = 'rejected' WHERE id = ?1",
                        args![first],
                    )
                })
                .await
                .expect("decided");
                let left = b
                    .run(|db| told_in(db, &id(1), Told::Actions))
                    .await
                    .expect("told");
                assert_eq!(left, HashSet::from([second]), "{e}");

                // Failures are kept, and cleared on delivery.
                b.run(|db| failed_in(db, &id(1), 2, 100))
                    .await
                    .expect("failed");
                let t = b
                    .run({
                        let key = key.clone();
                        move |db| targets_in(db, &key)
                    })
                    .await
                    .expect("targets");
                assert_eq!((t[0].failures, t[0].retry_at), (2, Some(100)), "{e}");
                b.run(|db| delivered_in(db, &id(1), 101))
                    .await
                    .expect("delivered");
                let t = b
                    .run({
                        let key = key.clone();
                        move |db| targets_in(db, &key)
                    })
                    .await
                    .expect("targets");
                assert_eq!(
                    (t[0].failures, t[0].retry_at, t[0].device.last_sent_at),
                    (0, None, Some(101)),
                    "{e}"
                );

                // Only its person removes a device; its record goes too.
                assert!(
                    !b.run(|db| remove_in(db, Some("ben"), &id(1)))
                        .await
                        .expect("remove"),
                    "{e}: not ben's"
                );
                assert!(
                    b.run(|db| remove_in(db, Some("ana"), &id(1)))
                        .await
                        .expect("remove"),
                    "{e}"
                );
                let rows: i64 = b
                    .run(|db| {
                        db.row(
                            "SELECT count(*) FROM push_notices WHERE subscription = ?1",
                            args![id(1)],
                        )?
                        .ok_or_else(|| anyhow::anyhow!("no count"))?
                        .get(0)
                    })
                    .await
                    .expect("count");
                assert_eq!(rows, 0, "{e}");
                let late = b
                    .run(move |db| claim_in(db, &id(1), Told::Actions, &[second], 8))
                    .await
                    .expect("claimed");
                assert!(late.is_empty(), "{e}: no claim for a removed device");
                assert!(
                    b.run(|db| remove_in(db, None, &id(2))).await.expect("gone"),
                    "{e}"
                );
                assert!(
                    b.run(|db| devices_in(db, None))
                        .await
                        .expect("devices")
                        .is_empty(),
                    "{e}"
                );
            }
        });
    }
}
