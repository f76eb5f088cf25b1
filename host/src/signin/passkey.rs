//! Passkeys (WebAuthn, with webauthn-rs): a signed-in person adds one, and
//! later signs in with it, naming nobody (a discoverable credential: the
//! authenticator says whose it is, the kernel checks its signature).
//!
//! Owns the ceremonies (their challenges stay in this process, spent by
//! their finish, see `ceremonies`), the relying party they are bound to
//! (its id and origin: a credential made for another site, or an answer
//! made for another origin, is refused), and what the store keeps of a
//! passkey (its id, public key and counter: nothing that signs anyone in
//! by itself). May not: speak HTTP (the web surface does) or decide what
//! the person then sees (`crate::access`).

use super::ceremonies::Ceremonies;
use crate::capability::Person;
use crate::kernel::Kernel;
use crate::store::Redeemed;
/// A stored passkey, as the kernel hands it to surfaces.
pub use crate::store::StoredPasskey;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use std::time::Duration;
use webauthn_rs::prelude::{
    DiscoverableAuthentication, Passkey, PasskeyRegistration, PublicKeyCredential,
    RegisterPublicKeyCredential, Url, Uuid, Webauthn, WebauthnBuilder,
};

/// How long a person has between starting a passkey ceremony and
/// finishing it (the browser asks the authenticator meanwhile).
pub const CEREMONY_TTL: Duration = Duration::from_secs(5 * 60);
/// Ceremonies in flight at once, per kind.
const CEREMONIES: usize = 4096;

/// The site passkeys are made for: its id (a domain name, never an
/// address) and the one origin whose pages may use them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelyingParty {
    /// The RP id: the public name, or `localhost` on loopback.
    pub id: String,
    /// The origin, e.g. `https://gatehouse.example.com`.
    pub origin: Url,
}

/// Why a passkey did not register or sign anyone in. The wording is for
/// the person; nothing in it tells whether a credential exists elsewhere.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PasskeyRefusal {
    /// The ceremony is unknown here: never begun, already finished (an
    /// answer replayed), expired, or begun at another server.
    #[error(
        "this passkey sign-in is not in progress here (already used, or it took more than 5 minutes); start again"
    )]
    Ceremony,
    /// No passkey with this id and user handle is registered here.
    #[error(
        "this passkey is not registered here; sign in another way and add it, or ask the operator for a sign-in link"
    )]
    Unknown,
    /// The authenticator's answer failed a check (signature, challenge,
    /// origin, relying party, user verification, counter).
    #[error("the passkey's answer was refused ({0}); start again")]
    Refused(String),
    /// The passkey's counter was moved by another sign-in at the same
    /// moment (a cloned authenticator would do this).
    #[error(
        "this passkey was used for another sign-in at the same moment; start again (if this keeps happening, remove the passkey: it may have been copied)"
    )]
    Raced,
    /// What was sent is not a WebAuthn credential.
    #[error("what was sent is not a WebAuthn credential ({0})")]
    Malformed(String),
}

/// A started ceremony: its id (sent back with the answer) and the options
/// the page hands to `navigator.credentials` (JSON, binary as base64url).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Started {
    /// The ceremony id: sent back with the answer.
    pub ceremony: String,
    /// webauthn-rs's challenge, for `navigator.credentials`.
    pub options: serde_json::Value,
}

/// A registration in flight: whose, under which handle.
struct Registering {
    user: String,
    handle: Uuid,
    state: PasskeyRegistration,
}

/// Passkey sign-in for one relying party.
pub struct Passkeys {
    kernel: Kernel,
    rp: RelyingParty,
    webauthn: Webauthn,
    registering: Ceremonies<Registering>,
    signing_in: Ceremonies<DiscoverableAuthentication>,
}

/// How a credential id is kept and shown: base64url without padding.
pub fn credential_text(raw: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(raw)
}

impl Kernel {
    /// Passkeys for `rp`. Refused (one line) when the RP id is not a name
    /// that `rp.origin` carries.
    pub fn passkeys(&self, rp: RelyingParty) -> anyhow::Result<Passkeys> {
        let webauthn = WebauthnBuilder::new(&rp.id, &rp.origin)
            .map_err(|e| {
                anyhow::anyhow!(
                    "passkeys cannot be offered for {} (relying party {:?}): {e}",
                    rp.origin,
                    rp.id
                )
            })?
            .rp_name("Gatehouse")
            .build()
            .map_err(|e| anyhow::anyhow!("passkeys cannot be offered for {}: {e}", rp.origin))?;
        Ok(Passkeys {
            kernel: self.clone(),
            rp,
            webauthn,
            registering: Ceremonies::new(CEREMONY_TTL, CEREMONIES),
            signing_in: Ceremonies::new(CEREMONY_TTL, CEREMONIES),
        })
    }
}

impl Person<'_> {
    /// `user`'s passkeys (never their keys), oldest first.
    pub async fn passkeys_of(&self) -> anyhow::Result<Vec<StoredPasskey>> {
        let user = self.name;
        let user = user.to_owned();
        self.kernel.store().run(move |s| s.passkeys(&user)).await
    }

    /// Remove one of `user`'s passkeys; whether there was one.
    pub async fn remove_passkey(&self, credential: &str) -> anyhow::Result<bool> {
        let user = self.name;
        let (user, credential) = (user.to_owned(), credential.to_owned());
        self.kernel
            .store()
            .run(move |s| s.remove_passkey(&user, &credential))
            .await
    }
}

fn options<T: serde::Serialize>(challenge: &T) -> anyhow::Result<serde_json::Value> {
    Ok(serde_json::to_value(challenge)?)
}

impl Passkeys {
    /// The relying party these passkeys are for.
    pub fn relying_party(&self) -> &RelyingParty {
        &self.rp
    }

    /// Start adding a passkey for `user` (signed in already). Their
    /// existing passkeys are excluded, so one authenticator is not
    /// registered twice.
    pub async fn start_registration(&self, user: &str) -> anyhow::Result<Started> {
        let who = user.to_owned();
        let (handle, mine) = self
            .kernel
            .store()
            .run(move |s| Ok((s.passkey_handle(&who)?, s.passkeys(&who)?)))
            .await?;
        let handle = match handle {
            Some(h) => Uuid::parse_str(&h)
                .map_err(|e| anyhow::anyhow!("{user}'s stored passkey handle is damaged: {e}"))?,
            None => Uuid::new_v4(),
        };
        let exclude = mine
            .iter()
            .filter_map(|p| URL_SAFE_NO_PAD.decode(&p.credential).ok())
            .collect::<Vec<_>>();
        let (challenge, state) = self
            .webauthn
            .start_passkey_registration(handle, user, user, Some(exclude))
            .map_err(|e| anyhow::anyhow!("cannot start adding a passkey: {e}"))?;
        let ceremony = self.registering.begin(Registering {
            user: user.to_owned(),
            handle,
            state,
        })?;
        Ok(Started {
            ceremony,
            options: options(&challenge)?,
        })
    }

    /// Finish adding a passkey: `credential` is the browser's answer to
    /// [`Passkeys::start_registration`]'s options, for the same `user`.
    pub async fn finish_registration(
        &self,
        user: &str,
        ceremony: &str,
        credential: serde_json::Value,
        label: &str,
    ) -> anyhow::Result<Result<StoredPasskey, PasskeyRefusal>> {
        let label = crate::prompt::one_line(label.trim());
        let label: String = if label.is_empty() {
            "passkey".into()
        } else {
            label.chars().take(64).collect()
        };
        let answer: RegisterPublicKeyCredential = match serde_json::from_value(credential) {
            Ok(a) => a,
            Err(e) => return Ok(Err(PasskeyRefusal::Malformed(e.to_string()))),
        };
        let Some(r) = self.registering.take(ceremony) else {
            return Ok(Err(PasskeyRefusal::Ceremony));
        };
        // A ceremony begun for one person is never finished by another.
        if r.user != user {
            return Ok(Err(PasskeyRefusal::Ceremony));
        }
        let passkey: Passkey = match self.webauthn.finish_passkey_registration(&answer, &r.state) {
            Ok(p) => p,
            Err(e) => return Ok(Err(PasskeyRefusal::Refused(e.to_string()))),
        };
        let stored = StoredPasskey {
            credential: credential_text(passkey.cred_id()),
            user: r.user,
            handle: r.handle.hyphenated().to_string(),
            label,
            passkey: serde_json::to_string(&passkey)?,
            created_at: crate::store::now_ms(),
            used_at: None,
        };
        let kept = stored.clone();
        self.kernel
            .store()
            .run(move |s| s.add_passkey(&kept))
            .await?;
        Ok(Ok(stored))
    }

    /// Start a passkey sign-in: nobody is named; the authenticator offers
    /// the person's discoverable credential for this relying party.
    pub fn start_signin(&self) -> anyhow::Result<Started> {
        let (challenge, state) = self
            .webauthn
            .start_discoverable_authentication()
            .map_err(|e| anyhow::anyhow!("cannot start a passkey sign-in: {e}"))?;
        let ceremony = self.signing_in.begin(state)?;
        Ok(Started {
            ceremony,
            options: options(&challenge)?,
        })
    }

    /// Finish a passkey sign-in: check the answer against the ceremony's
    /// challenge, this relying party and origin, the stored public key and
    /// counter; move the counter; open a session for the passkey's person.
    pub async fn finish_signin(
        &self,
        ceremony: &str,
        credential: serde_json::Value,
        session_ttl_ms: i64,
    ) -> anyhow::Result<Result<Redeemed, PasskeyRefusal>> {
        let answer: PublicKeyCredential = match serde_json::from_value(credential) {
            Ok(a) => a,
            Err(e) => return Ok(Err(PasskeyRefusal::Malformed(e.to_string()))),
        };
        // Spent before anything is checked: an answer is tried once.
        let Some(state) = self.signing_in.take(ceremony) else {
            return Ok(Err(PasskeyRefusal::Ceremony));
        };
        let (handle, raw_id) = match self.webauthn.identify_discoverable_authentication(&answer) {
            Ok(found) => found,
            Err(e) => return Ok(Err(PasskeyRefusal::Refused(e.to_string()))),
        };
        let id = credential_text(raw_id);
        let handle = handle.hyphenated().to_string();
        let found = {
            let (id, handle) = (id.clone(), handle.clone());
            self.kernel
                .store()
                .run(move |s| s.passkey(&id, &handle))
                .await?
        };
        let Some(stored) = found else {
            return Ok(Err(PasskeyRefusal::Unknown));
        };
        let mut passkey: Passkey = serde_json::from_str(&stored.passkey).map_err(|e| {
            anyhow::anyhow!(
                "the stored passkey {} of {} is damaged: {e}",
                stored.label,
                stored.user
            )
        })?;
        let result = match self
            .webauthn
            .finish_discoverable_authentication_v2(&answer, state, &passkey)
        {
            Ok(r) => r,
            Err(e) => return Ok(Err(PasskeyRefusal::Refused(e.to_string()))),
        };
        passkey.update_credential(&result);
        let now = serde_json::to_string(&passkey)?;
        let (was, user) = (stored.passkey, stored.user);
        let opened = self
            .kernel
            .store()
            .run(move |s| {
                if !s.update_passkey(&id, &was, &now)? {
                    return Ok(None);
                }
                Ok(Some(s.open_session(&user, session_ttl_ms)?))
            })
            .await?;
        Ok(opened.ok_or(PasskeyRefusal::Raced))
    }
}
