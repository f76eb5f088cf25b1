//! The drain flight (SPEC U2, U3): one automatic send at a time per
//! gatekeeper, across every process on a home and every host on a shared
//! database, held from an automatic claim at least until that send's
//! outcome is recorded. A drain holds one flight at a time.
//!
//! Why it exists beside the claim: the claim alone keeps each action to one
//! send, and a rule's claim refuses to pass an earlier action of its queue
//! still pending or being sent (`store::claims::waiting_before`). A drain
//! that meets such an action would then give up, and an action that
//! another process staged behind it would wait for some later drain. Under
//! the flight a drain waits its turn instead, so the drain that comes after
//! the send picks it up.
//!
//! Owns the two ways of holding the flight: a lock on a file in the home's
//! run directory, and a session-level advisory lock on a connection of its
//! own in a shared database. Either is released by the system when its
//! holder ends, however it ends (a closed file, a closed connection): a
//! killed drainer never holds a queue up. It may not claim or send: the
//! overseer does, under it.

use crate::store::postgres::{self, DatabaseUrl};
use anyhow::Context as _;
use std::path::Path;

/// A held flight; dropping it lets the next drain of its gatekeeper go.
pub(crate) enum Flight {
    /// The lock on the home's flight file of the gatekeeper.
    Home(#[allow(dead_code, reason = "held for its lock, released on drop")] std::fs::File),
    /// The connection holding the gatekeeper's advisory lock.
    Shared(
        #[allow(dead_code, reason = "held for its lock, released on drop")] tokio_postgres::Client,
    ),
}

/// Eight bytes naming `gatekeeper`'s flight, the same on every process
/// and host (a digest under this purpose's label, so that other users of
/// the run directory or of advisory locks are not met by chance).
fn key(gatekeeper: &str) -> [u8; 8] {
    use sha2::{Digest as _, Sha256};
    let digest = Sha256::digest(format!("gatehouse-drain\0{gatekeeper}"));
    let mut eight = [0u8; 8];
    eight.copy_from_slice(&digest[..8]);
    eight
}

/// Take `gatekeeper`'s flight on the home whose run directory is `run`,
/// waiting while another process holds it. The file is never removed: a
/// file removed while another process waited on it would let two hold the
/// flight. It is not a `.lock` file, so the sweep of dead processes' files
/// leaves it alone.
pub(crate) async fn on_home(run: &Path, gatekeeper: &str) -> anyhow::Result<Flight> {
    let path = run.join(format!("drain-{}.flight", hex::encode(key(gatekeeper))));
    tokio::task::spawn_blocking(move || -> anyhow::Result<Flight> {
        let file = std::fs::File::options()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .with_context(|| format!("cannot open the drain flight {}", path.display()))?;
        file.lock()
            .with_context(|| format!("cannot lock the drain flight {}", path.display()))?;
        Ok(Flight::Home(file))
    })
    .await
    .context("a drain flight task panicked")?
}

/// Take `gatekeeper`'s flight in the shared database at `url`, waiting
/// while another host (or process) holds it.
pub(crate) async fn on_database(url: &DatabaseUrl, gatekeeper: &str) -> anyhow::Result<Flight> {
    let holder = postgres::connect(url).await?;
    holder
        .execute(
            "SELECT pg_advisory_lock($1)",
            &[&i64::from_be_bytes(key(gatekeeper))],
        )
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot take the drain flight of {gatekeeper} in {url} ({})",
                postgres::reason(&e)
            )
        })?;
    Ok(Flight::Shared(holder))
}

/// The flight, on both engines: it excludes, it is released by its
/// holder's end, and under it several drainers send one queue's actions
/// once each, in id order, one at a time.
#[cfg(test)]
mod tests {
    use crate::store::claims::{applied, take, waiting_before};
    use crate::store::sql::args;
    use crate::store::suite::{Backend, runtime};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    #[test]
    fn a_second_taker_waits_until_the_first_lets_go() {
        runtime().block_on(async {
            for backend in Backend::both().await {
                let first = backend.flight("mail").await;
                let let_go = Arc::new(AtomicBool::new(false));
                let (b, seen) = (backend.clone(), let_go.clone());
                let second = tokio::spawn(async move {
                    let _flight = b.flight("mail").await;
                    seen.load(Ordering::SeqCst)
                });
                // Another gatekeeper's flight is its own.
                drop(backend.flight("calendar").await);
                // Give the second taker every chance to get in wrongly.
                tokio::time::sleep(Duration::from_millis(300)).await;
                let_go.store(true, Ordering::SeqCst);
                drop(first);
                assert!(
                    second.await.unwrap(),
                    "{}: the second taker got in while the first held the flight",
                    backend.name()
                );
            }
        });
    }

    #[test]
    fn drainers_under_the_flight_send_a_queue_once_each_in_order_one_at_a_time() {
        runtime().block_on(async {
            for backend in Backend::both().await {
                let chat = format!("queue-{}", crate::entropy::random_hex(6).unwrap());
                let mut ids = Vec::new();
                for _ in 0..8 {
                    ids.push(backend.pending_in(&chat).await);
                }
                // (id, sent at, answered at) of every send, by any drainer.
                let sends = Arc::new(Mutex::new(Vec::<(i64, Instant, Instant)>::new()));
                let drainers: Vec<_> = (0..3)
                    .map(|n| {
                        let (b, sends, chat) = (backend.clone(), sends.clone(), chat.clone());
                        tokio::spawn(async move {
                            let me = format!("drainer-{n}");
                            loop {
                                let flight = b.flight("mail").await;
                                let (chat, me2) = (chat.clone(), me.clone());
                                let claimed = b
                                    .run(move |db| {
                                        let Some(r) = db.row(
                                            "SELECT min(id) FROM ledger WHERE chat = ?1 AND state = 'pending'",
                                            args![chat],
                                        )?
                                        else {
                                            return Ok(None);
                                        };
                                        let Some(id) = r.get::<Option<i64>>(0)? else {
                                            return Ok(None);
                                        };
                                        let free = waiting_before(db, id)?.is_none();
                                        Ok((free && take(db, id, &me2, "rule", true, 1)?).then_some(id))
                                    })
                                    .await
                                    .unwrap();
                                let Some(id) = claimed else { return };
                                let sent = Instant::now();
                                tokio::time::sleep(Duration::from_millis(15)).await;
                                sends.lock().unwrap().push((id, sent, Instant::now()));
                                b.run(move |db| applied(db, id, 2)).await.unwrap();
                                drop(flight);
                            }
                        })
                    })
                    .collect();
                for d in drainers {
                    d.await.unwrap();
                }
                let sends = sends.lock().unwrap().clone();
                let sent: Vec<i64> = sends.iter().map(|s| s.0).collect();
                assert_eq!(sent, ids, "{}: once each, in id order", backend.name());
                for pair in sends.windows(2) {
                    assert!(
                        pair[1].1 >= pair[0].2,
                        "{}: action {} was sent before action {} was answered",
                        backend.name(),
                        pair[1].0,
                        pair[0].0
                    );
                }
            }
        });
    }
}
