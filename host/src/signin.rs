//! Sign-in for surfaces that authenticate people (the web inbox): one-time
//! sign-in tokens for known people, passkeys (`passkey`), OpenID Connect
//! identities an operator bound to people (`oidc`), and the sessions they
//! open.
//!
//! Owns the kernel's side only: tokens and session secrets are stored as
//! digests (`store::sessions`), ceremonies in flight stay in this process
//! (`ceremonies`); cookies, CSRF headers, redirects and HTTP statuses are
//! the surface's. A session names a person; what that person may then see
//! or decide is `crate::access`'s, never the session's.

mod ceremonies;
pub mod oidc;
pub(crate) mod oidc_http;
pub mod passkey;

/// Whether `host` (as a URL carries it: a name, an address, an IPv6
/// address in brackets) is this machine.
pub fn is_loopback_name(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

use crate::capability::Operator;
use crate::kernel::Kernel;
use crate::store::{Redeemed, SessionLookup, SigninRefusal};

impl Kernel {
    /// Spend a sign-in token and open a session lasting `session_ttl_ms`.
    pub async fn redeem_signin_token(
        &self,
        token: &str,
        session_ttl_ms: i64,
    ) -> anyhow::Result<Result<Redeemed, SigninRefusal>> {
        let token = token.to_owned();
        self.store()
            .run(move |s| s.redeem_signin_token(&token, session_ttl_ms))
            .await
    }

    /// Look up a presented session secret.
    pub async fn session(&self, secret: &str) -> anyhow::Result<SessionLookup> {
        let secret = secret.to_owned();
        self.store().run(move |s| s.session(&secret)).await
    }

    /// Look up a presented session secret and, for a request that changes
    /// state, whether `csrf` is one of that session's CSRF tokens: one trip.
    pub async fn session_with_csrf(
        &self,
        secret: &str,
        csrf: Option<String>,
    ) -> anyhow::Result<(SessionLookup, bool)> {
        let secret = secret.to_owned();
        self.store()
            .run(move |s| {
                let lookup = s.session(&secret)?;
                let ok = match &csrf {
                    Some(token) => s.csrf_ok(&secret, token)?,
                    None => true,
                };
                Ok((lookup, ok))
            })
            .await
    }

    /// A fresh CSRF token for a session: a random secret of its own, never
    /// derived from the session's; only its digest is kept.
    pub async fn mint_csrf(&self, secret: &str) -> anyhow::Result<String> {
        let secret = secret.to_owned();
        self.store().run(move |s| s.mint_csrf(&secret)).await
    }

    /// End a session (sign out). Returns whether it existed.
    pub async fn end_session(&self, secret: &str) -> anyhow::Result<bool> {
        let secret = secret.to_owned();
        self.store().run(move |s| s.end_session(&secret)).await
    }
}

impl Operator<'_> {
    /// A one-time sign-in token for a known person, valid for `ttl_ms`.
    /// Shown once; only its digest is kept.
    pub fn create_signin_token(&self, person: &str, ttl_ms: i64) -> anyhow::Result<String> {
        self.kernel.store().create_signin_token(person, ttl_ms)
    }
}
