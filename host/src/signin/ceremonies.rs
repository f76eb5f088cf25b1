//! Sign-in ceremonies in flight: what a passkey or OpenID Connect sign-in
//! remembers between its start and its finish (a challenge, a PKCE
//! verifier and a nonce), held in this process's memory only.
//!
//! Owns: handing out a random ceremony id, finding a ceremony once (a
//! finish spends it, so an answer cannot be replayed), forgetting it after
//! its time, and refusing new ones past a cap. May not: check what a
//! ceremony proves (its owner in `crate::signin` does).
//!
//! Why memory and not the database: nothing here outlives a few minutes,
//! and a PKCE verifier is a secret that would otherwise have to be sealed
//! at rest. The cost, documented for operators: a ceremony finishes at the
//! server that started it (several hosts behind one name need sticky
//! routing for the sign-in paths, a few seconds each).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Ceremonies of one kind.
pub(crate) struct Ceremonies<T> {
    pending: Mutex<HashMap<String, (Instant, T)>>,
    ttl: Duration,
    cap: usize,
}

impl<T> Ceremonies<T> {
    /// Ceremonies that last `ttl`, at most `cap` at once.
    pub(crate) fn new(ttl: Duration, cap: usize) -> Ceremonies<T> {
        Ceremonies {
            pending: Mutex::new(HashMap::new()),
            ttl,
            cap: cap.max(1),
        }
    }

    /// Remember `value` under a new random id (256 bits), returned.
    pub(crate) fn begin(&self, value: T) -> anyhow::Result<String> {
        let id = crate::store::new_secret()?;
        let now = Instant::now();
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.retain(|_, (until, _)| *until > now);
        if pending.len() >= self.cap {
            anyhow::bail!(
                "too many sign-ins are in progress on this server; try again in a few minutes"
            );
        }
        pending.insert(id.clone(), (now + self.ttl, value));
        Ok(id)
    }

    /// The ceremony `id`, spent: `None` if it was never begun here, was
    /// already finished, or ran out of time.
    pub(crate) fn take(&self, id: &str) -> Option<T> {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let (until, value) = pending.remove(id)?;
        (until > Instant::now()).then_some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ceremony is found once, not after its time, and not past the cap.
    #[test]
    fn a_ceremony_is_spent_once_and_forgotten_after_its_time() {
        let c = Ceremonies::new(Duration::from_secs(60), 2);
        let a = c.begin(1).expect("begun");
        let b = c.begin(2).expect("begun");
        assert_ne!(a, b);
        assert!(c.begin(3).is_err(), "capped");
        assert_eq!(c.take(&a), Some(1));
        assert_eq!(c.take(&a), None, "spent");
        assert_eq!(c.take("nope"), None);
        assert!(c.begin(4).is_ok(), "room again");

        let short = Ceremonies::new(Duration::ZERO, 2);
        let s = short.begin(5).expect("begun");
        assert_eq!(short.take(&s), None, "expired");
        assert_eq!(c.take(&b), Some(2));
    }
}
