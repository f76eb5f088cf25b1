//! Sign-in for the web inbox: one-time sign-in tokens and sessions.
//!
//! Only the SHA-256 digest of each secret is stored, so reading (or
//! copying) the database never lets anyone sign in. Secrets come from the
//! operating system's generator (`getrandom`), 256 bits each. Spending a
//! sign-in token and opening the session happen in one IMMEDIATE
//! transaction, so a link signs in exactly once even when two processes race
//! for it. Who may see what is not decided here: `crate::web` asks
//! [`Store::may_see`].

use super::{Store, now_ms};
use rusqlite::{OptionalExtension as _, TransactionBehavior, params};
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
        let conn = self.lock();
        let known: bool = conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM users WHERE name = ?1)",
            [user],
            |r| r.get(0),
        )?;
        if !known {
            anyhow::bail!(
                "no person named {user:?} is known to this deployment; sign-in links are made only for known people"
            );
        }
        let token = new_secret()?;
        let now = now_ms();
        conn.execute(
            "INSERT INTO web_signin_tokens (digest, user, created_at, expires_at)
             VALUES (?1, ?2, ?3, ?4)",
            params![secret_digest(&token), user, now, now.saturating_add(ttl_ms)],
        )?;
        Ok(token)
    }

    /// Spend a sign-in token and open a session lasting `session_ttl_ms`.
    pub fn redeem_signin_token(
        &self,
        token: &str,
        session_ttl_ms: i64,
    ) -> anyhow::Result<Result<Redeemed, SigninRefusal>> {
        let digest = secret_digest(token);
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let row: Option<(String, i64, Option<i64>)> = tx
            .query_row(
                "SELECT user, expires_at, used_at FROM web_signin_tokens WHERE digest = ?1",
                [&digest],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?;
        let now = now_ms();
        let Some((user, expires_at, used_at)) = row else {
            return Ok(Err(SigninRefusal::Unknown));
        };
        if used_at.is_some() {
            return Ok(Err(SigninRefusal::Used));
        }
        if expires_at <= now {
            return Ok(Err(SigninRefusal::Expired));
        }
        tx.execute(
            "UPDATE web_signin_tokens SET used_at = ?2 WHERE digest = ?1 AND used_at IS NULL",
            params![digest, now],
        )?;
        let session = new_secret()?;
        let session_expires = now.saturating_add(session_ttl_ms);
        tx.execute(
            "INSERT INTO web_sessions (digest, user, created_at, expires_at) VALUES (?1, ?2, ?3, ?4)",
            params![secret_digest(&session), user, now, session_expires],
        )?;
        // Tidy while the write lock is held anyway.
        tx.execute(
            "DELETE FROM web_sessions WHERE expires_at < ?1",
            [now - EXPIRED_KEPT_MS],
        )?;
        tx.execute(
            "DELETE FROM web_signin_tokens WHERE expires_at < ?1",
            [now - EXPIRED_KEPT_MS],
        )?;
        tx.commit()?;
        Ok(Ok(Redeemed {
            user,
            session,
            expires_at: session_expires,
        }))
    }

    /// Look up a presented session secret.
    pub fn session(&self, secret: &str) -> anyhow::Result<SessionLookup> {
        let row: Option<(String, i64)> = self
            .lock()
            .query_row(
                "SELECT user, expires_at FROM web_sessions WHERE digest = ?1",
                [secret_digest(secret)],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        Ok(match row {
            None => SessionLookup::Unknown,
            Some((user, expires_at)) if expires_at <= now_ms() => SessionLookup::Expired {
                user,
                expired_at: expires_at,
            },
            Some((user, expires_at)) => SessionLookup::Valid { user, expires_at },
        })
    }

    /// End a session (sign out). Returns whether it existed. Its CSRF
    /// tokens go with it.
    pub fn end_session(&self, secret: &str) -> anyhow::Result<bool> {
        let digest = secret_digest(secret);
        let conn = self.lock();
        conn.execute("DELETE FROM web_csrf WHERE session = ?1", [&digest])?;
        Ok(conn.execute("DELETE FROM web_sessions WHERE digest = ?1", [&digest])? == 1)
    }

    /// A new CSRF token for the session with this secret: random, not
    /// derived from the session's secret, stored as a digest only. The
    /// session keeps its newest [`CSRF_KEPT`].
    pub fn mint_csrf(&self, session_secret: &str) -> anyhow::Result<String> {
        let token = new_secret()?;
        let session = secret_digest(session_secret);
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute(
            "INSERT INTO web_csrf (digest, session, created_at) VALUES (?1, ?2, ?3)",
            params![secret_digest(&token), session, now_ms()],
        )?;
        tx.execute(
            "DELETE FROM web_csrf WHERE session = ?1 AND digest NOT IN
               (SELECT digest FROM web_csrf WHERE session = ?1
                ORDER BY created_at DESC, rowid DESC LIMIT ?2)",
            params![session, CSRF_KEPT],
        )?;
        tx.commit()?;
        Ok(token)
    }

    /// Whether `token` is a CSRF token of the session with this secret.
    pub fn csrf_ok(&self, session_secret: &str, token: &str) -> anyhow::Result<bool> {
        if token.is_empty() {
            return Ok(false);
        }
        Ok(self.lock().query_row(
            "SELECT EXISTS (SELECT 1 FROM web_csrf WHERE digest = ?1 AND session = ?2)",
            params![secret_digest(token), secret_digest(session_secret)],
            |r| r.get(0),
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("temp dir");
        let s = Store::open(&dir.path().join("g.db")).expect("store");
        (dir, s)
    }

    #[test]
    fn a_link_signs_in_once_and_only_digests_are_stored() {
        let (_d, s) = store();
        assert!(s.create_signin_token("alice", 60_000).is_err());
        s.add_user("alice").unwrap();
        let t = s.create_signin_token("alice", 60_000).unwrap();
        let r = s.redeem_signin_token(&t, 60_000).unwrap().unwrap();
        assert_eq!(r.user, "alice");
        assert_eq!(
            s.redeem_signin_token(&t, 60_000).unwrap().unwrap_err(),
            SigninRefusal::Used
        );
        assert_eq!(
            s.redeem_signin_token("nope", 60_000).unwrap().unwrap_err(),
            SigninRefusal::Unknown
        );
        assert!(matches!(
            s.session(&r.session).unwrap(),
            SessionLookup::Valid { ref user, .. } if user == "alice"
        ));
        let stored: Vec<String> = {
            let c = s.lock();
            let mut st = c
                .prepare("SELECT digest FROM web_sessions UNION ALL SELECT digest FROM web_signin_tokens")
                .unwrap();
            st.query_map([], |r| r.get(0))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        };
        assert_eq!(stored.len(), 2);
        assert!(!stored.contains(&t) && !stored.contains(&r.session));
        assert!(s.end_session(&r.session).unwrap());
        assert_eq!(s.session(&r.session).unwrap(), SessionLookup::Unknown);
    }

    #[test]
    fn expired_links_and_sessions_are_told_apart() {
        let (_d, s) = store();
        s.add_user("alice").unwrap();
        let t = s.create_signin_token("alice", -1).unwrap();
        assert_eq!(
            s.redeem_signin_token(&t, 60_000).unwrap().unwrap_err(),
            SigninRefusal::Expired
        );
        let t = s.create_signin_token("alice", 60_000).unwrap();
        let r = s.redeem_signin_token(&t, -1).unwrap().unwrap();
        assert!(matches!(
            s.session(&r.session).unwrap(),
            SessionLookup::Expired { .. }
        ));
    }
}
