//! MCP sessions the host holds between a gatekeeper's reads.
//!
//! Every gated call runs in a fresh gatekeeper instance, so a remote MCP
//! server would see `initialize` and `notifications/initialized` before
//! every `tools/call`: two round trips more than a client that keeps its
//! session. The host keeps the session instead: [`Egress`] sees the
//! `Mcp-Session-Id` and `MCP-Protocol-Version` a gatekeeper's requests
//! carry, the kernel keeps them after a read that succeeded, and hands them
//! to the next fresh instance of the same read path as the setting
//! [`SETTING`], which the `mcp` gatekeeper resumes instead of starting
//! over.
//!
//! Owns: which held session may be handed to which call. A session is
//! kept per gatekeeper instance, component, chat, introduction and
//! credential, so that nothing one chat or account set up on a server is
//! ever used for another; only reads hand one over (an action's send sets
//! up its own, as it opens its own connection), and one that was idle
//! longer than [`IDLE`] is dropped rather than tried. May not: talk to a
//! server, or decide what a call is (the kernel's classify does).
//!
//! [`Egress`]: super::gatekeeper

use sha2::Digest as _;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The setting a held session is handed to a gatekeeper under: the
/// protocol version, a space, the session id. An operator's setting of
/// the same name is never passed on (`crate::kernel::settings_for`).
pub const SETTING: &str = "held-mcp-session";

/// How long a held session may sit unused. Servers expire idle sessions on
/// their own clocks; one the server has forgotten costs a 404 and a new
/// `initialize`, so it is dropped well before the usual half hour.
pub const IDLE: Duration = Duration::from_secs(5 * 60);

/// The most sessions held for one key: as many as reads ran at once
/// recently, within reason.
const PER_KEY: usize = 4;

/// An MCP session a gatekeeper's requests carried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldSession {
    /// `Mcp-Session-Id`: visible ASCII, as the protocol requires.
    pub id: String,
    /// `MCP-Protocol-Version`, as negotiated at `initialize`.
    pub protocol: String,
}

impl HeldSession {
    /// The session named by a request's headers, if both are there and
    /// well formed (visible ASCII, at most 256 bytes each).
    pub fn from_headers(headers: &http::HeaderMap) -> Option<HeldSession> {
        let get = |name: &str| -> Option<String> {
            let v = headers.get(name)?.to_str().ok()?;
            let fine =
                !v.is_empty() && v.len() <= 256 && v.bytes().all(|b| (0x21..=0x7e).contains(&b));
            fine.then(|| v.to_owned())
        };
        Some(HeldSession {
            id: get("mcp-session-id")?,
            protocol: get("mcp-protocol-version")?,
        })
    }

    /// The value of [`SETTING`].
    pub fn setting(&self) -> String {
        format!("{} {}", self.protocol, self.id)
    }
}

/// Who a held session belongs to. Built only by [`SessionKey::of`], from
/// everything that must match for a session to be handed on.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SessionKey(String);

impl SessionKey {
    /// The key of reads through the gatekeeper instance `gatekeeper` (its
    /// component `digest`), introduced into `chat` under `key`, made with
    /// the credential named `account` whose value is `credential`.
    pub fn of(
        gatekeeper: &str,
        digest: &str,
        chat: &str,
        key: &str,
        account: &str,
        credential: Option<&str>,
    ) -> SessionKey {
        // The credential's value too: an account connected again with
        // another identity is another account to the server.
        let value = credential
            .map(|c| hex::encode(sha2::Sha256::digest(c.as_bytes())))
            .unwrap_or_default();
        let mut h = sha2::Sha256::new();
        for part in [gatekeeper, digest, chat, key, account, &value] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        SessionKey(hex::encode(h.finalize()))
    }
}

/// The sessions held now.
#[derive(Default)]
pub struct Sessions {
    held: Mutex<HashMap<SessionKey, Vec<(HeldSession, Instant)>>>,
}

impl Sessions {
    /// A held session for `key`, taken out (so two reads at once never
    /// share one), the most recently used first; `None` if none is fresh.
    pub fn take(&self, key: &SessionKey) -> Option<HeldSession> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let list = held.get_mut(key)?;
        list.retain(|(_, at)| at.elapsed() < IDLE);
        let taken = list.pop().map(|(s, _)| s);
        if list.is_empty() {
            held.remove(key);
        }
        taken
    }

    /// Hold `session` for `key` after a read that used it succeeded.
    pub fn keep(&self, key: SessionKey, session: HeldSession) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let list = held.entry(key).or_default();
        list.retain(|(s, at)| *s != session && at.elapsed() < IDLE);
        if list.len() >= PER_KEY {
            list.remove(0);
        }
        list.push((session, Instant::now()));
    }

    /// How many sessions are held now (all keys).
    pub fn len(&self) -> usize {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.values().map(Vec::len).sum()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(id: &str) -> HeldSession {
        HeldSession {
            id: id.into(),
            protocol: "2025-11-25".into(),
        }
    }

    #[test]
    fn a_session_is_handed_only_to_the_same_chat_introduction_and_credential() {
        let s = Sessions::default();
        let k = |chat: &str, key: &str, account: &str, cred: Option<&str>| {
            SessionKey::of("mcp", "d1", chat, key, account, cred)
        };
        s.keep(k("c1", "svc", "alice/work", Some("t1")), session("a"));
        assert_eq!(s.take(&k("c2", "svc", "alice/work", Some("t1"))), None);
        assert_eq!(s.take(&k("c1", "other", "alice/work", Some("t1"))), None);
        assert_eq!(s.take(&k("c1", "svc", "bob/work", Some("t1"))), None);
        assert_eq!(s.take(&k("c1", "svc", "alice/work", Some("t2"))), None);
        assert_eq!(
            s.take(&k("c1", "svc", "alice/work", Some("t1"))),
            Some(session("a"))
        );
        // Taken out: a second read at the same time opens its own.
        assert_eq!(s.take(&k("c1", "svc", "alice/work", Some("t1"))), None);
        assert!(s.is_empty());
    }

    #[test]
    fn keys_do_not_run_together() {
        // Parts are length-prefixed, so moving a boundary changes the key.
        assert_ne!(
            SessionKey::of("a", "b", "cd", "e", "f", None),
            SessionKey::of("a", "bc", "d", "e", "f", None)
        );
    }

    #[test]
    fn only_well_formed_headers_make_a_session() {
        let mut h = http::HeaderMap::new();
        h.insert("mcp-session-id", "abc".parse().expect("header"));
        assert_eq!(HeldSession::from_headers(&h), None);
        h.insert(
            "mcp-protocol-version",
            "2025-11-25".parse().expect("header"),
        );
        assert_eq!(HeldSession::from_headers(&h), Some(session("abc")));
        h.insert("mcp-session-id", "has space".parse().expect("header"));
        assert_eq!(HeldSession::from_headers(&h), None);
        assert_eq!(session("abc").setting(), "2025-11-25 abc");
    }

    #[test]
    fn at_most_a_few_are_held_per_key() {
        let s = Sessions::default();
        let key = SessionKey::of("mcp", "d", "c", "k", "none", None);
        for i in 0..10 {
            s.keep(key.clone(), session(&i.to_string()));
        }
        assert_eq!(s.len(), PER_KEY);
        assert_eq!(s.take(&key), Some(session("9")));
    }
}
