//! The idempotency key: one stable name for every send of one action
//! (SPEC P6).
//!
//! The kernel attaches it to every send of an action
//! (`invocation.idempotency-key`); a gatekeeper whose service honours such
//! keys passes it on (the `issues` gatekeeper as an `Idempotency-Key`
//! header) and declares so per tool (`honours-idempotency-key`). A service
//! that honours it applies a repeated request at most once, which is what
//! lets recovery re-send a claim a dead process had begun instead of
//! failing it: exactly once, where the service allows it.
//!
//! The key is `HMAC-SHA256(deployment secret, action id, staging time,
//! argument digest)`, hex. The secret (`deployment_secrets.idempotency`)
//! is made on first use and kept in the state database with the ledger, so
//! the key is the same on every re-send by any process of this
//! deployment, and no other deployment's action ever shares it. The staging
//! time and the argument digest make it different even if a database
//! restored from an old backup hands out an id again. The key names; it
//! grants nothing: a service learns no secret from it.
//!
//! Whether an interrupted send may be re-sent under its key is not the
//! guest's word alone (SPEC P9): a gatekeeper that declares
//! `honours-idempotency-key` is believed only where an operator vouched for
//! it (key one, `vetted`) *and* stated, for this instance, that its service
//! honours keys ([`SETTING`] `=` `honoured`). That verdict is
//! [`crate::classify::resend_believed`]'s; this module owns the key's
//! derivation and the operator's statement, and decides nothing else. The
//! send path (`crate::overseer`) and recovery (`crate::store`) use them.

use hmac::{Hmac, Mac as _};
use sha2::Sha256;

/// The deployment secret's name in the state database.
pub const SECRET: &str = "idempotency";

/// The operator setting (`gatekeeper add ... --set idempotency-key=VALUE`)
/// that states whether the instance's service honours idempotency keys.
/// The same setting is handed to the gatekeeper, so a bundled one declares
/// and sends keys exactly when the operator stated it.
pub const SETTING: &str = "idempotency-key";

/// What [`SETTING`] may say: the service honours keys (either spelling),
/// or it does not. Anything else is refused when the instance is added,
/// so a typo never reads as either.
const HONOURED: [&str; 2] = ["honoured", "honored"];
const IGNORED: &str = "ignored";

/// Whether the operator stated, in `settings`, that the instance's service
/// honours idempotency keys. Absent means no: the safe reading (P3).
pub fn operator_says_honoured(settings: &[(String, String)]) -> bool {
    settings
        .iter()
        .any(|(k, v)| k == SETTING && HONOURED.contains(&v.as_str()))
}

/// Refuse a value of [`SETTING`] that says neither yes nor no, in one line.
pub fn check_setting(settings: &[(String, String)]) -> anyhow::Result<()> {
    for (k, v) in settings {
        if k == SETTING && !HONOURED.contains(&v.as_str()) && v != IGNORED {
            anyhow::bail!(
                "--set {SETTING}={v:?} is not understood: say {SETTING}=honoured when the service applies a request repeated under one Idempotency-Key at most once, or {SETTING}=ignored (the default) when it does not"
            );
        }
    }
    Ok(())
}

/// The idempotency key of every send of the action `id`, staged at
/// `created_at` with arguments of digest `args_digest`, under this
/// deployment's `secret`. Plain values rather than the store's action:
/// this module sits below the store, which reads the operator's statement
/// here when it recovers an interrupted send.
pub fn key(secret: &str, id: i64, created_at: i64, args_digest: &str) -> String {
    // HMAC takes a key of any length; this cannot fail.
    let mut mac = <Hmac<Sha256>>::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of every length"));
    mac.update(format!("gatehouse idempotency v1\n{id}\n{created_at}\n{args_digest}").as_bytes());
    hex::encode(mac.finalize().into_bytes())
}
