//! Sign-in for the web inbox: one-time sign-in tokens and sessions.
//!
//! Only the SHA-256 digest of each secret is stored, so reading (or
//! copying) the database never lets anyone sign in. Secrets come from the
//! operating system's generator (`getrandom`), 256 bits each. Spending a
//! sign-in token and opening the session happen in one writing
//! transaction, and the token is spent by one conditional UPDATE whose
//! WHERE clause is the guarantee, so a link signs in exactly once even when
//! several processes (or hosts sharing one PostgreSQL database) race for
//! it. Who may see what is not decided here: `crate::web` asks
//! [`Store::may_see`].
//!
//! Every statement is written once over [`Sql`] for both engines.

use super::sql::{Sql, args};
use super::{Store, now_ms};
use sha2::{Digest as _, Sha256};

/// Expired sessions are kept this long, so that a person coming back gets
/// "your session expired" rather than "not signed in"; then they are purged.
const EXPIRED_KEPT_MS: i64 = 24 * 60 * 60 * 1000;

/// CSRF tokens a session keeps (one per page load that asked; the oldest go
/// first), so a few open tabs all work.
const CSRF_KEPT: i64 = 32;

/// A fresh secret: 32 bytes from the operating system, hex-encoded.
pub fn new_secret() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| anyhow::anyhow!("the system's random generator failed: {e}"))?;
    Ok(hex::encode(bytes))
}

/// The digest under which a secret is stored (hex SHA-256).
pub fn secret_digest(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Why a sign-in link did not sign anyone in.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SigninRefusal {
    /// No such token was issued (or it was mistyped).
    #[error(
        "this sign-in link is not known here (was it copied whole?); ask for a new one: `gatehouse token create NAME`"
    )]
    Unknown,
    /// The token was spent already: a sign-in link works once.
    #[error(
        "this sign-in link was already used (each link signs in once); ask for a new one: `gatehouse token create NAME`"
    )]
    Used,
    /// The token's time ran out before it was used.
    #[error("this sign-in link expired; ask for a new one: `gatehouse token create NAME`")]
    Expired,
}

/// A session opened by spending a sign-in token.
#[derive(Clone, Debug)]
pub struct Redeemed {
    /// The person signed in.
    pub user: String,
    /// The session secret: goes into the cookie, never into the database.
    pub session: String,
    /// When the session ends, in ms since the epoch.
    pub expires_at: i64,
}

/// What a presented session secret is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionLookup {
    /// A live session.
    Valid {
        /// The person signed in.
        user: String,
        /// When it ends, in ms since the epoch.
        expires_at: i64,
    },
    /// A session that ended: the person signs in again with a new link.
    Expired {
        /// The person it was for.
        user: String,
        /// When it ended, in ms since the epoch.
        expired_at: i64,
    },
    /// No session has this secret (never issued, or signed out).
    Unknown,
}

impl Store {
    /// Make a one-time sign-in token for a known person; returns the secret
    /// (shown once, stored only as a digest). An unknown person is refused.
    pub fn create_signin_token(&self, user: &str, ttl_ms: i64) -> anyhow::Result<String> {
        self.with(|db| create_signin_token_in(db, user, ttl_ms, now_ms()))
    }

    /// Spend a sign-in token and open a session lasting `session_ttl_ms`.
    pub fn redeem_signin_token(
        &self,
        token: &str,
        session_ttl_ms: i64,
    ) -> anyhow::Result<Result<Redeemed, SigninRefusal>> {
        self.write(|db| redeem_signin_token_in(db, token, session_ttl_ms, now_ms()))
    }

    /// Open a session for `user`, who proved who they are another way (a
    /// passkey, an identity bound by the operator): the kernel's
    /// `crate::signin` checked that proof, never this.
    pub fn open_session(&self, user: &str, session_ttl_ms: i64) -> anyhow::Result<Redeemed> {
        self.write(|db| open_session_in(db, user, session_ttl_ms, now_ms()))
    }

    /// Look up a presented session secret.
    pub fn session(&self, secret: &str) -> anyhow::Result<SessionLookup> {
        self.with(|db| session_in(db, secret, now_ms()))
    }

    /// End a session (sign out). Returns whether it existed. Its CSRF
    /// tokens go with it.
    pub fn end_session(&self, secret: &str) -> anyhow::Result<bool> {
        self.write(|db| end_session_in(db, secret))
    }

    /// A new CSRF token for the session with this secret: random, not
    /// derived from the session's secret, stored as a digest only. The
    /// session keeps its newest [`CSRF_KEPT`].
    pub fn mint_csrf(&self, session_secret: &str) -> anyhow::Result<String> {
        self.write(|db| mint_csrf_in(db, session_secret, now_ms()))
    }

    /// Whether `token` is a CSRF token of the session with this secret.
    pub fn csrf_ok(&self, session_secret: &str, token: &str) -> anyhow::Result<bool> {
        self.with(|db| csrf_ok_in(db, session_secret, token))
    }
}

// The statements, written once for both engines (`store::sql`).

fn create_signin_token_in(
    db: &dyn Sql,
    user: &str,
    ttl_ms: i64,
    now: i64,
) -> anyhow::Result<String> {
    let known = db
        .row("SELECT 1 FROM users WHERE name = ?1", args![user])?
        .is_some();
    if !known {
        anyhow::bail!(
            "no person named {user:?} is known to this deployment; sign-in links are made only for known people"
        );
    }
    let token = new_secret()?;
    db.exec(
        "INSERT INTO web_signin_tokens (digest, \"user\", created_at, expires_at)
         VALUES (?1, ?2, ?3, ?4)",
        args![secret_digest(&token), user, now, now.saturating_add(ttl_ms)],
    )?;
    Ok(token)
}

/// The token is spent by one conditional UPDATE: of any number of
/// redeemers at once, on either engine, exactly one sees it change a row
/// and opens a session; every other is told the link was used
/// (PostgreSQL re-checks `used_at IS NULL` on the row the winner just
/// changed).
fn redeem_signin_token_in(
    db: &dyn Sql,
    token: &str,
    session_ttl_ms: i64,
    now: i64,
) -> anyhow::Result<Result<Redeemed, SigninRefusal>> {
    let digest = secret_digest(token);
    let row: Option<(String, i64, Option<i64>)> = db
        .row(
            "SELECT \"user\", expires_at, used_at FROM web_signin_tokens WHERE digest = ?1",
            args![digest],
        )?
        .map(|r| Ok::<_, anyhow::Error>((r.get(0)?, r.get(1)?, r.get(2)?)))
        .transpose()?;
    let Some((user, expires_at, used_at)) = row else {
        return Ok(Err(SigninRefusal::Unknown));
    };
    if used_at.is_some() {
        return Ok(Err(SigninRefusal::Used));
    }
    if expires_at <= now {
        return Ok(Err(SigninRefusal::Expired));
    }
    let spent = db.exec(
        "UPDATE web_signin_tokens SET used_at = ?2 WHERE digest = ?1 AND used_at IS NULL",
        args![digest, now],
    )?;
    if spent != 1 {
        return Ok(Err(SigninRefusal::Used));
    }
    Ok(Ok(open_session_in(db, &user, session_ttl_ms, now)?))
}

/// Open a session for `user` (who signed in one way or another) lasting
/// `session_ttl_ms`; the secret goes to the person, its digest here.
fn open_session_in(
    db: &dyn Sql,
    user: &str,
    session_ttl_ms: i64,
    now: i64,
) -> anyhow::Result<Redeemed> {
    let session = new_secret()?;
    let session_expires = now.saturating_add(session_ttl_ms);
    db.exec(
        "INSERT INTO web_sessions (digest, \"user\", created_at, expires_at) VALUES (?1, ?2, ?3, ?4)",
        args![secret_digest(&session), user, now, session_expires],
    )?;
    // Tidy while the write lock is held anyway.
    let kept_since = now - EXPIRED_KEPT_MS;
    db.exec(
        "DELETE FROM web_sessions WHERE expires_at < ?1",
        args![kept_since],
    )?;
    db.exec(
        "DELETE FROM web_signin_tokens WHERE expires_at < ?1",
        args![kept_since],
    )?;
    Ok(Redeemed {
        user: user.to_owned(),
        session,
        expires_at: session_expires,
    })
}

/// A session is found by the digest of its secret, never the secret.
fn session_in(db: &dyn Sql, secret: &str, now: i64) -> anyhow::Result<SessionLookup> {
    let row: Option<(String, i64)> = db
        .row(
            "SELECT \"user\", expires_at FROM web_sessions WHERE digest = ?1",
            args![secret_digest(secret)],
        )?
        .map(|r| Ok::<_, anyhow::Error>((r.get(0)?, r.get(1)?)))
        .transpose()?;
    Ok(match row {
        None => SessionLookup::Unknown,
        Some((user, expires_at)) if expires_at <= now => SessionLookup::Expired {
            user,
            expired_at: expires_at,
        },
        Some((user, expires_at)) => SessionLookup::Valid { user, expires_at },
    })
}

fn end_session_in(db: &dyn Sql, secret: &str) -> anyhow::Result<bool> {
    let digest = secret_digest(secret);
    db.exec("DELETE FROM web_csrf WHERE session = ?1", args![digest])?;
    Ok(db.exec("DELETE FROM web_sessions WHERE digest = ?1", args![digest])? == 1)
}

/// The session keeps [`CSRF_KEPT`] tokens: the one just minted and the
/// newest others (by when they were minted; of tokens minted in the same
/// millisecond, by digest, as neither engine keeps an insertion order).
fn mint_csrf_in(db: &dyn Sql, session_secret: &str, now: i64) -> anyhow::Result<String> {
    let token = new_secret()?;
    let digest = secret_digest(&token);
    let session = secret_digest(session_secret);
    db.exec(
        "INSERT INTO web_csrf (digest, session, created_at) VALUES (?1, ?2, ?3)",
        args![digest, session, now],
    )?;
    db.exec(
        "DELETE FROM web_csrf WHERE session = ?1 AND digest <> ?2 AND digest NOT IN
           (SELECT digest FROM web_csrf WHERE session = ?1 AND digest <> ?2
            ORDER BY created_at DESC, digest DESC LIMIT ?3)",
        args![session, digest, CSRF_KEPT - 1],
    )?;
    Ok(token)
}

fn csrf_ok_in(db: &dyn Sql, session_secret: &str, token: &str) -> anyhow::Result<bool> {
    if token.is_empty() {
        return Ok(false);
    }
    Ok(db
        .row(
            "SELECT 1 FROM web_csrf WHERE digest = ?1 AND session = ?2",
            args![secret_digest(token), secret_digest(session_secret)],
        )?
        .is_some())
}

#[cfg(test)]
mod on_both_engines {
    use super::*;
    use crate::store::suite::{Backend, raced, runtime};
    use std::sync::{Arc, Barrier};

    const MINUTE: i64 = 60_000;

    async fn alice(b: &Backend) {
        b.run(|db| {
            db.exec(
                "INSERT INTO users (name, created_at) VALUES ('alice', 0)",
                args![],
            )
        })
        .await
        .expect("a person");
    }

    async fn token(b: &Backend, ttl: i64, now: i64) -> String {
        b.run(move |db| create_signin_token_in(db, "alice", ttl, now))
            .await
            .expect("a sign-in link")
    }

    async fn redeem(b: &Backend, t: &str, ttl: i64, now: i64) -> Result<Redeemed, SigninRefusal> {
        let t = t.to_owned();
        b.run(move |db| redeem_signin_token_in(db, &t, ttl, now))
            .await
            .expect("a redemption")
    }

    async fn lookup(b: &Backend, secret: &str, now: i64) -> SessionLookup {
        let secret = secret.to_owned();
        b.run(move |db| session_in(db, &secret, now))
            .await
            .expect("a lookup")
    }

    /// Many redeemers race with one sign-in link: exactly one opens a
    /// session, every other is told the link was used.
    #[test]
    fn a_link_is_redeemed_exactly_once_when_many_race() {
        runtime().block_on(async {
            for b in Backend::both().await {
                let e = b.name();
                alice(&b).await;
                let t = token(&b, MINUTE, 1_000).await;
                let gate = Arc::new(Barrier::new(16));
                let racers: Vec<_> = (0..16)
                    .map(|_| {
                        let (b, t, gate) = (b.clone(), t.clone(), gate.clone());
                        tokio::spawn(async move {
                            b.run(move |db| {
                                raced(db, &gate, |db| {
                                    redeem_signin_token_in(db, &t, MINUTE, 2_000)
                                })
                            })
                            .await
                            .expect("a redemption")
                        })
                    })
                    .collect();
                let mut opened = Vec::new();
                for r in racers {
                    match r.await.expect("joined") {
                        Ok(r) => opened.push(r),
                        Err(refusal) => assert_eq!(refusal, SigninRefusal::Used, "{e}"),
                    }
                }
                assert_eq!(opened.len(), 1, "{e}: sessions opened {}", opened.len());
                let sessions = b
                    .run(|db| db.row("SELECT count(*) FROM web_sessions", args![]))
                    .await
                    .expect("count")
                    .map(|r| r.get::<i64>(0))
                    .transpose()
                    .expect("a count");
                assert_eq!(sessions, Some(1), "{e}");
                assert_eq!(
                    (opened[0].user.as_str(), opened[0].expires_at),
                    ("alice", 2_000 + MINUTE),
                    "{e}"
                );
            }
        });
    }

    /// A session is found by the digest of its secret, never the secret
    /// (and the stored digest is no secret: presenting it finds nothing);
    /// an expired link or session is refused as expired, an ended one is
    /// unknown, and its CSRF tokens end with it.
    #[test]
    fn sessions_are_found_by_digest_and_expired_or_ended_ones_are_refused() {
        runtime().block_on(async {
            for b in Backend::both().await {
                let e = b.name();
                let stranger = b
                    .run(|db| create_signin_token_in(db, "alice", MINUTE, 0))
                    .await;
                assert!(stranger.is_err(), "{e}: links only for known people");
                alice(&b).await;
                let now = 1_000_000;
                let t = token(&b, MINUTE, now).await;
                let r = redeem(&b, &t, MINUTE, now + 1)
                    .await
                    .unwrap_or_else(|r| panic!("{e}: {r:?}"));
                assert_eq!(r.user, "alice", "{e}");
                assert_eq!(redeem(&b, &t, MINUTE, now + 2).await.err(), Some(SigninRefusal::Used), "{e}");
                assert_eq!(
                    redeem(&b, "nope", MINUTE, now + 2).await.err(),
                    Some(SigninRefusal::Unknown),
                    "{e}"
                );
                let late = token(&b, MINUTE, now).await;
                assert_eq!(
                    redeem(&b, &late, MINUTE, now + MINUTE).await.err(),
                    Some(SigninRefusal::Expired),
                    "{e}: a link expires"
                );

                assert_eq!(
                    lookup(&b, &r.session, now + 2).await,
                    SessionLookup::Valid {
                        user: "alice".into(),
                        expires_at: now + 1 + MINUTE
                    },
                    "{e}"
                );
                let stored: Vec<String> = b
                    .run(|db| {
                        db.rows(
                            "SELECT digest FROM web_sessions UNION ALL SELECT digest FROM web_signin_tokens",
                            args![],
                        )?
                        .iter()
                        .map(|r| r.get(0))
                        .collect()
                    })
                    .await
                    .expect("read");
                assert_eq!(stored.len(), 3, "{e}: a session and two links");
                assert!(
                    !stored.contains(&t) && !stored.contains(&late) && !stored.contains(&r.session),
                    "{e}: no secret is stored"
                );
                assert!(stored.contains(&secret_digest(&r.session)), "{e}");
                assert_eq!(
                    lookup(&b, &secret_digest(&r.session), now + 2).await,
                    SessionLookup::Unknown,
                    "{e}: the stored digest does not sign in"
                );
                assert_eq!(
                    lookup(&b, &r.session, now + 1 + MINUTE).await,
                    SessionLookup::Expired {
                        user: "alice".into(),
                        expired_at: now + 1 + MINUTE
                    },
                    "{e}: a session expires"
                );

                // CSRF tokens: of this session only, the newest kept.
                let mut minted = Vec::new();
                for i in 0..CSRF_KEPT + 3 {
                    let s = r.session.clone();
                    minted.push(
                        b.run(move |db| mint_csrf_in(db, &s, now + 10 + i / 2))
                            .await
                            .expect("minted"),
                    );
                }
                let ok = |session: String, token: String| {
                    let b = b.clone();
                    async move {
                        b.run(move |db| csrf_ok_in(db, &session, &token))
                            .await
                            .expect("checked")
                    }
                };
                let newest = minted.last().cloned().unwrap_or_default();
                assert!(ok(r.session.clone(), newest.clone()).await, "{e}");
                assert!(!ok(r.session.clone(), minted[0].clone()).await, "{e}: the oldest went");
                assert!(!ok(r.session.clone(), String::new()).await, "{e}");
                assert!(!ok(t.clone(), newest.clone()).await, "{e}: another session's");
                let kept = b
                    .run(|db| db.row("SELECT count(*) FROM web_csrf", args![]))
                    .await
                    .expect("count")
                    .map(|r| r.get::<i64>(0))
                    .transpose()
                    .expect("a count");
                assert_eq!(kept, Some(CSRF_KEPT), "{e}");

                let s = r.session.clone();
                assert!(b.run(move |db| end_session_in(db, &s)).await.expect("ended"), "{e}");
                let s = r.session.clone();
                assert!(!b.run(move |db| end_session_in(db, &s)).await.expect("ended"), "{e}");
                assert_eq!(lookup(&b, &r.session, now + 3).await, SessionLookup::Unknown, "{e}");
                assert!(!ok(r.session.clone(), newest).await, "{e}: its CSRF tokens went with it");

                // A redemption purges what expired more than a day before.
                let old = token(&b, MINUTE, now).await;
                let kept_since = now + MINUTE + EXPIRED_KEPT_MS;
                let fresh = token(&b, 3 * EXPIRED_KEPT_MS, now).await;
                let r = redeem(&b, &old, -MINUTE + 1, now + 1).await;
                let r = r.unwrap_or_else(|r| panic!("{e}: {r:?}"));
                assert!(matches!(lookup(&b, &r.session, now + 1).await, SessionLookup::Expired { .. }), "{e}");
                redeem(&b, &fresh, MINUTE, kept_since + 1)
                    .await
                    .unwrap_or_else(|r| panic!("{e}: {r:?}"));
                assert_eq!(lookup(&b, &r.session, kept_since + 1).await, SessionLookup::Unknown, "{e}: purged");
                assert_eq!(
                    redeem(&b, &t, MINUTE, kept_since + 2).await.err(),
                    Some(SigninRefusal::Unknown),
                    "{e}: the spent link was purged"
                );
            }
        });
    }
}
