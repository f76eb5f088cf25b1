//! OpenID Connect sign-in (the openidconnect crate): the authorization
//! code flow with PKCE, a nonce and a state, against any provider found by
//! discovery from its issuer URL; the identity it proves becomes a person
//! only through a binding the operator made (`gatehouse user bind`).
//!
//! Owns: discovery (at start, again when it is older than
//! [`DISCOVERY_TTL`], so rotated signing keys are picked up), the
//! ceremonies (state, PKCE verifier and nonce stay in this process, spent
//! by their callback, see `ceremonies`), the checks of the ID token
//! (signature, issuer, audience, expiry, nonce: the crate's verifier), and
//! the lookup of the binding. The client secret is read from the kernel's
//! secret store at each exchange, never from the command line. May not:
//! speak HTTP to the browser (the web surface does), bind anyone (only the
//! operator's command does), or decide what the person sees
//! (`crate::access`).

use super::ceremonies::Ceremonies;
use super::oidc_http::{self, HttpError};
use crate::capability::Operator;
use crate::kernel::Kernel;
use crate::store::Redeemed;
use openidconnect::core::{CoreAuthenticationFlow, CoreClient, CoreProviderMetadata};
use openidconnect::{
    AuthorizationCode, ClientId, ClientSecret, CsrfToken, IssuerUrl, Nonce, PkceCodeChallenge,
    PkceCodeVerifier, RedirectUrl, Scope, TokenResponse as _,
};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a person has at the provider (signing in, consenting) before
/// the callback must arrive.
pub const CEREMONY_TTL: Duration = Duration::from_secs(10 * 60);
/// How long a discovery (endpoints and signing keys) is used before it is
/// fetched again.
pub const DISCOVERY_TTL: Duration = Duration::from_secs(5 * 60);
/// Ceremonies in flight at once.
const CEREMONIES: usize = 4096;

/// What the operator gave `serve`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OidcSettings {
    /// The issuer URL (`--oidc-issuer`): discovery starts there, and ID
    /// tokens must name it as their issuer.
    pub issuer: String,
    /// The client id registered at the provider (`--oidc-client-id`).
    pub client_id: String,
    /// The name of the stored secret holding the client secret
    /// (`--oidc-client-secret NAME`, stored with `gatehouse secret set
    /// NAME`); none for a public client (PKCE alone).
    pub secret_name: Option<String>,
}

/// Why an OpenID Connect sign-in did not sign anyone in.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OidcRefusal {
    /// No such sign-in in progress here (never begun in this browser,
    /// already finished, expired, or begun at another server).
    #[error(
        "this sign-in is not in progress here (already used, begun in another browser, or it took more than 10 minutes); start again"
    )]
    Ceremony,
    /// The state the provider sent back is not the one this sign-in sent.
    #[error("the provider's answer does not belong to this sign-in (wrong state); start again")]
    State,
    /// The provider said no, or sent no code.
    #[error("the provider did not sign you in: {0}")]
    Provider(String),
    /// The code exchange or the ID token's checks failed (signature,
    /// issuer, audience, expiry, nonce).
    #[error("the provider's answer was refused: {0}")]
    Token(String),
    /// A valid identity that no operator bound to a person here.
    #[error(
        "you signed in at {issuer} as subject {subject:?}, which is not bound to anyone here; ask the operator to run `gatehouse user bind NAME --oidc-subject {subject} --issuer {issuer}`"
    )]
    Unbound {
        /// The issuer, as its ID token named it.
        issuer: String,
        /// The identity's subject.
        subject: String,
    },
}

/// What the provider sent back to the callback.
#[derive(Clone, Debug, Default, serde::Deserialize)]
pub struct Callback {
    /// The state this sign-in sent, echoed.
    pub state: Option<String>,
    /// The authorization code, to exchange.
    pub code: Option<String>,
    /// The provider's error code, when it did not sign the person in.
    pub error: Option<String>,
    /// The provider's words for it.
    pub error_description: Option<String>,
}

/// A started sign-in: the ceremony id (the browser keeps it in a cookie)
/// and where to send the browser.
#[derive(Clone, Debug)]
pub struct Started {
    /// The ceremony id: goes into the browser's cookie.
    pub ceremony: String,
    /// The provider's authorization URL with this sign-in's state, nonce
    /// and PKCE challenge.
    pub url: String,
}

struct Pending {
    state: CsrfToken,
    verifier: PkceCodeVerifier,
    nonce: Nonce,
    redirect: RedirectUrl,
    metadata: CoreProviderMetadata,
}

/// OpenID Connect sign-in against one provider.
pub struct Oidc {
    kernel: Kernel,
    settings: OidcSettings,
    discovered: Mutex<(Instant, CoreProviderMetadata)>,
    pending: Ceremonies<Pending>,
}

async fn discover(issuer: &str) -> anyhow::Result<CoreProviderMetadata> {
    let url = IssuerUrl::new(issuer.to_owned())
        .map_err(|e| anyhow::anyhow!("--oidc-issuer {issuer:?} is not a URL: {e}"))?;
    CoreProviderMetadata::discover_async(url, &oidc_http::call)
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot discover the OpenID Connect provider at {issuer}: {}",
                chain(&e)
            )
        })
}

/// An error and its causes, as one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let s = c.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cause = c.source();
    }
    crate::prompt::one_line(&out)
}

impl Kernel {
    /// OpenID Connect sign-in with `settings`: the provider is discovered
    /// now, and a named client secret must be stored already. Refused, in
    /// one line, when either fails (a server never starts half-configured).
    pub async fn oidc(&self, settings: OidcSettings) -> anyhow::Result<Oidc> {
        if settings.client_id.trim().is_empty() {
            anyhow::bail!(
                "--oidc-client-id is empty: give the client id registered at the provider"
            );
        }
        if let Some(name) = &settings.secret_name {
            let name = name.clone();
            let stored = self.store().run(move |s| s.secret(&name)).await?;
            if stored.is_none() {
                anyhow::bail!(
                    "no stored secret named {:?} holds the OpenID Connect client secret; store it with `gatehouse secret set {}` (the value on stdin)",
                    settings.secret_name.as_deref().unwrap_or_default(),
                    settings.secret_name.as_deref().unwrap_or_default()
                );
            }
        }
        let metadata = discover(&settings.issuer).await?;
        Ok(Oidc {
            kernel: self.clone(),
            settings,
            discovered: Mutex::new((Instant::now(), metadata)),
            pending: Ceremonies::new(CEREMONY_TTL, CEREMONIES),
        })
    }
}

impl Operator<'_> {
    /// Bind `subject` at `issuer` to `user` (an operator's command).
    /// Returns whether the binding is new.
    pub fn bind_identity(
        &self,
        issuer: &str,
        subject: &str,
        user: &str,
        by: &str,
    ) -> anyhow::Result<bool> {
        let issuer = issuer.trim();
        if issuer.is_empty() || subject.is_empty() {
            anyhow::bail!(
                "give both --issuer URL and --oidc-subject SUB (as the refusal page names them)"
            );
        }
        if subject.chars().any(char::is_control) || issuer.chars().any(char::is_control) {
            anyhow::bail!(
                "an issuer or subject holds control characters; copy them from the refusal page as shown"
            );
        }
        self.kernel.store().bind_identity(issuer, subject, user, by)
    }

    /// Remove the binding of `subject` at `issuer`, if it names `user`.
    /// Returns whether there was one.
    pub fn unbind_identity(&self, issuer: &str, subject: &str, user: &str) -> anyhow::Result<bool> {
        match self.kernel.store().identity(issuer.trim(), subject)? {
            Some(u) if u == user => Ok(self
                .kernel
                .store()
                .unbind_identity(issuer.trim(), subject)?
                .is_some()),
            Some(u) => anyhow::bail!("subject {subject:?} at {issuer} is bound to {u}, not {user}"),
            None => Ok(false),
        }
    }

    /// Every identity binding.
    pub fn identity_bindings(&self) -> anyhow::Result<Vec<crate::store::IdentityBinding>> {
        self.kernel.store().identity_bindings()
    }
}

impl Oidc {
    /// The issuer people sign in at.
    pub fn issuer(&self) -> &str {
        &self.settings.issuer
    }

    /// The provider's metadata, discovered again when it is older than
    /// [`DISCOVERY_TTL`] (the last one serves if that fails).
    async fn metadata(&self) -> CoreProviderMetadata {
        let (at, current) = {
            let d = self.discovered.lock().unwrap_or_else(|p| p.into_inner());
            (d.0, d.1.clone())
        };
        if at.elapsed() < DISCOVERY_TTL {
            return current;
        }
        match discover(&self.settings.issuer).await {
            Ok(fresh) => {
                let mut d = self.discovered.lock().unwrap_or_else(|p| p.into_inner());
                *d = (Instant::now(), fresh.clone());
                fresh
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "OpenID Connect discovery failed; using the last one");
                current
            }
        }
    }

    async fn client_secret(&self) -> anyhow::Result<Option<ClientSecret>> {
        let Some(name) = self.settings.secret_name.clone() else {
            return Ok(None);
        };
        let lookup = name.clone();
        match self.kernel.store().run(move |s| s.secret(&lookup)).await? {
            Some(v) => Ok(Some(ClientSecret::new(v))),
            None => anyhow::bail!(
                "the stored secret {name:?} (the OpenID Connect client secret) is gone; store it again with `gatehouse secret set {name}`"
            ),
        }
    }

    /// Start a sign-in whose callback is `redirect` (this server's
    /// `/signin/oidc/callback` under the origin the person uses).
    pub async fn start(&self, redirect: &str) -> anyhow::Result<Started> {
        let redirect = RedirectUrl::new(redirect.to_owned())
            .map_err(|e| anyhow::anyhow!("the callback address {redirect:?} is not a URL: {e}"))?;
        let metadata = self.metadata().await;
        let client = CoreClient::from_provider_metadata(
            metadata.clone(),
            ClientId::new(self.settings.client_id.clone()),
            None,
        )
        .set_redirect_uri(redirect.clone());
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let (url, state, nonce) = client
            .authorize_url(
                CoreAuthenticationFlow::AuthorizationCode,
                CsrfToken::new_random,
                Nonce::new_random,
            )
            .add_scope(Scope::new("openid".into()))
            .set_pkce_challenge(challenge)
            .url();
        let ceremony = self.pending.begin(Pending {
            state,
            verifier,
            nonce,
            redirect,
            metadata,
        })?;
        Ok(Started {
            ceremony,
            url: url.to_string(),
        })
    }

    /// Finish the sign-in `ceremony` (from the browser's cookie) with what
    /// the provider sent back: the state must be the one sent, the code is
    /// exchanged with the PKCE verifier, the ID token is checked (with the
    /// nonce), and its issuer and subject must be bound to a person.
    pub async fn finish(
        &self,
        ceremony: &str,
        back: Callback,
        session_ttl_ms: i64,
    ) -> anyhow::Result<Result<Redeemed, OidcRefusal>> {
        // Spent before anything is checked: a callback is tried once.
        let Some(p) = self.pending.take(ceremony) else {
            return Ok(Err(OidcRefusal::Ceremony));
        };
        let sent = back.state.unwrap_or_default();
        let same = subtle::ConstantTimeEq::ct_eq(sent.as_bytes(), p.state.secret().as_bytes());
        if !bool::from(same) {
            return Ok(Err(OidcRefusal::State));
        }
        if let Some(error) = back.error {
            let said = match back.error_description {
                Some(d) => format!("{error} ({d})"),
                None => error,
            };
            return Ok(Err(OidcRefusal::Provider(crate::prompt::one_line(&said))));
        }
        let Some(code) = back.code.filter(|c| !c.is_empty()) else {
            return Ok(Err(OidcRefusal::Provider("no authorization code".into())));
        };
        let client = CoreClient::from_provider_metadata(
            p.metadata,
            ClientId::new(self.settings.client_id.clone()),
            self.client_secret().await?,
        )
        .set_redirect_uri(p.redirect);
        let request = match client.exchange_code(AuthorizationCode::new(code)) {
            Ok(r) => r,
            Err(e) => return Ok(Err(OidcRefusal::Token(chain(&e)))),
        };
        let tokens = match request
            .set_pkce_verifier(p.verifier)
            .request_async(&oidc_http::call)
            .await
        {
            Ok(t) => t,
            Err(e) => return Ok(Err(OidcRefusal::Token(token_error(&e)))),
        };
        let Some(id_token) = tokens.id_token() else {
            return Ok(Err(OidcRefusal::Token("no ID token was returned".into())));
        };
        let claims = match id_token.claims(&client.id_token_verifier(), &p.nonce) {
            Ok(c) => c,
            Err(e) => return Ok(Err(OidcRefusal::Token(chain(&e)))),
        };
        let issuer = claims.issuer().as_str().to_owned();
        let subject = claims.subject().as_str().to_owned();
        let (i, s) = (issuer.clone(), subject.clone());
        let opened = self
            .kernel
            .store()
            .run(move |st| match st.identity(&i, &s)? {
                Some(user) => Ok(Some(st.open_session(&user, session_ttl_ms)?)),
                None => Ok(None),
            })
            .await?;
        Ok(opened.ok_or(OidcRefusal::Unbound { issuer, subject }))
    }
}

/// A failed token exchange, as one line; the provider's own error text
/// when it sent one.
fn token_error(
    e: &openidconnect::RequestTokenError<
        HttpError,
        openidconnect::StandardErrorResponse<openidconnect::core::CoreErrorResponseType>,
    >,
) -> String {
    chain(e)
}
