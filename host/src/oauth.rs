//! OAuth 2.1 accounts: a person's account at a gatekeeper's service
//! connected by the authorization code flow with PKCE, its tokens kept
//! sealed like any other account credential, and refreshed by the host
//! before they expire.
//!
//! Owns: discovery (RFC 9728 protected resource metadata, from the
//! well-known place or a 401's `resource_metadata`; RFC 8414 authorization
//! server metadata, falling back to OpenID Connect discovery), dynamic
//! client registration (RFC 7591, a public client), the code + PKCE
//! exchange with the RFC 8707 `resource` indicator, refresh (one at a time
//! per account, the rotated refresh token kept), and the stored grant (a
//! JSON document behind [`MARKER`], sealed in the `secrets` table as a
//! static token is). Every request goes through the project's own client
//! (`signin::oidc_http`: https, plain http only to loopback, a deadline).
//!
//! May not: choose whose credential a call uses (`crate::principal`), or
//! inject it (`runtime::gatekeeper`'s egress, to the credential host
//! only). No token is ever put in a log line, an error text or anything a
//! guest sees: errors name endpoints and the server's error code only.

use crate::capability::{Operator, Person};
use crate::kernel::Kernel;
use crate::principal::Credential;
use crate::signin::oidc_http;
use anyhow::{Context as _, bail};
use oauth2::basic::BasicClient;
use oauth2::{
    AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken, PkceCodeChallenge,
    PkceCodeVerifier, RedirectUrl, RefreshToken, RequestTokenError, Scope, TokenResponse as _,
    TokenUrl,
};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use url::Url;
use zeroize::Zeroizing;

/// What a stored OAuth grant starts with. A static token pasted by a
/// person never starts so (`Person::connect_account` refuses one that
/// does), so the two are never mistaken for each other.
pub const MARKER: &str = "gatehouse-oauth-grant/v1:";

/// An access token expiring within this margin is refreshed before use:
/// a call must not start with a token that dies on the way.
pub const REFRESH_MARGIN_S: i64 = 60;

/// How long a person has at the authorization server by default.
pub const FLOW_TTL: Duration = Duration::from_secs(10 * 60);

/// What an OAuth account keeps (sealed): everything a refresh needs, so
/// the host refreshes without asking discovery again.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Grant {
    /// The token injected as `Authorization: Bearer`.
    pub access_token: String,
    /// The token a refresh spends (the newest, when the server rotates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// When the access token was issued (unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issued_at: Option<i64>,
    /// When it expires (unix seconds); none when the server gave no
    /// lifetime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
    /// Where a refresh goes.
    pub token_endpoint: String,
    /// The client the grant was made to.
    pub client_id: String,
    /// Its secret, if the server issued one at registration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// The RFC 8707 resource the tokens are for.
    pub resource: String,
    /// The scopes granted (space-separated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// The authorization server.
    pub issuer: String,
}

// Never print a token or a client secret, not even in a debug log.
impl std::fmt::Debug for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Grant(issuer {}, resource {}, expires_at {:?})",
            self.issuer, self.resource, self.expires_at
        )
    }
}

impl Grant {
    /// The grant as stored (before sealing).
    pub fn to_stored(&self) -> anyhow::Result<Zeroizing<String>> {
        let json = Zeroizing::new(serde_json::to_string(self)?);
        Ok(Zeroizing::new(format!("{MARKER}{}", json.as_str())))
    }

    /// The grant in `stored`, if it is one (`None` for a static token).
    pub fn parse(stored: &str) -> Option<anyhow::Result<Grant>> {
        let json = stored.strip_prefix(MARKER)?;
        // serde's error may quote the input: not repeated.
        Some(
            serde_json::from_str(json)
                .map_err(|_| anyhow::anyhow!("the stored OAuth grant is damaged")),
        )
    }

    /// Whether the access token must be refreshed before a call at `now`
    /// (unix seconds): within [`REFRESH_MARGIN_S`] of its expiry, or of a
    /// quarter of its lifetime if that is shorter (a token that lives
    /// less than the margin would otherwise be refreshed at every call).
    pub fn needs_refresh(&self, now: i64) -> bool {
        let Some(at) = self.expires_at else {
            return false;
        };
        let margin = match self.issued_at {
            Some(issued) => REFRESH_MARGIN_S.min(at.saturating_sub(issued) / 4),
            None => REFRESH_MARGIN_S,
        };
        at.saturating_sub(now) <= margin
    }
}

/// Whether a stored credential is an OAuth grant (by its form alone).
pub fn is_grant(stored: &str) -> bool {
    stored.starts_with(MARKER)
}

fn now_s() -> i64 {
    crate::store::now_ms() / 1000
}

// ---- discovery ----------------------------------------------------------

/// Where RFC 9728 protected resource metadata of `resource` may be: with
/// the resource's path appended to the well-known name, then without.
pub fn resource_metadata_urls(resource: &Url) -> Vec<Url> {
    well_known(resource, "oauth-protected-resource", true)
}

/// Where the metadata of the authorization server `issuer` may be: RFC
/// 8414's place (path after the well-known name), then OpenID Connect
/// discovery's (path inserted the same way, then appended as OpenID
/// Connect Discovery 1.0 says).
pub fn server_metadata_urls(issuer: &Url) -> Vec<Url> {
    let mut urls = well_known(issuer, "oauth-authorization-server", false);
    urls.extend(well_known(issuer, "openid-configuration", false));
    let path = issuer.path().trim_end_matches('/');
    if !path.is_empty() {
        let mut appended = issuer.clone();
        appended.set_path(&format!("{path}/.well-known/openid-configuration"));
        appended.set_query(None);
        appended.set_fragment(None);
        urls.push(appended);
    }
    urls.dedup();
    urls
}

fn well_known(base: &Url, name: &str, bare_too: bool) -> Vec<Url> {
    let path = base.path().trim_end_matches('/');
    let mut out = Vec::new();
    let mut at = |p: String| {
        let mut u = base.clone();
        u.set_path(&p);
        u.set_query(None);
        u.set_fragment(None);
        if !out.contains(&u) {
            out.push(u);
        }
    };
    at(format!("/.well-known/{name}{path}"));
    if bare_too || path.is_empty() {
        at(format!("/.well-known/{name}"));
    }
    out
}

/// The `resource_metadata` URL a 401's `WWW-Authenticate: Bearer ...`
/// names, if any.
pub fn resource_metadata_from_challenge(header: &str) -> Option<String> {
    let at = header.to_ascii_lowercase().find("resource_metadata=")?;
    let rest = &header[at + "resource_metadata=".len()..];
    let value = match rest.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next()?,
        None => rest.split([',', ' ']).next()?,
    };
    (!value.is_empty()).then(|| value.to_owned())
}

/// What discovery found for one resource.
#[derive(Clone, Debug)]
pub struct Discovered {
    /// The resource tokens are asked for (the metadata's `resource`).
    pub resource: String,
    /// The authorization server (the metadata's first).
    pub issuer: String,
    /// Where the person is sent.
    pub authorization_endpoint: String,
    /// Where codes and refresh tokens are exchanged.
    pub token_endpoint: String,
    /// Where a client may register itself (RFC 7591), if anywhere.
    pub registration_endpoint: Option<String>,
    /// The scopes the resource says it knows.
    pub scopes_supported: Vec<String>,
}

async fn get_json(url: &Url) -> anyhow::Result<Option<serde_json::Value>> {
    let request = http::Request::builder()
        .method(http::Method::GET)
        .uri(url.as_str())
        .header(http::header::ACCEPT, "application/json")
        .body(Vec::new())?;
    let answer = oidc_http::call(request).await?;
    if answer.status() == http::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    if !answer.status().is_success() {
        bail!("{url} answered {}", answer.status());
    }
    let doc = serde_json::from_slice(answer.body())
        .map_err(|_| anyhow::anyhow!("{url} did not answer JSON"))?;
    Ok(Some(doc))
}

/// The `resource_metadata` a request to `resource` without a token is
/// challenged with, if it is.
async fn challenged(resource: &Url) -> anyhow::Result<Option<String>> {
    let request = http::Request::builder()
        .method(http::Method::POST)
        .uri(resource.as_str())
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json, text/event-stream")
        .body(br#"{"jsonrpc":"2.0","id":0,"method":"ping"}"#.to_vec())?;
    let answer = oidc_http::call(request).await?;
    if answer.status() != http::StatusCode::UNAUTHORIZED {
        return Ok(None);
    }
    Ok(answer
        .headers()
        .get_all(http::header::WWW_AUTHENTICATE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(resource_metadata_from_challenge))
}

fn text(doc: &serde_json::Value, field: &str) -> Option<String> {
    doc.get(field)?.as_str().map(str::to_owned)
}

/// Whether `claimed` (a metadata document's `resource`) covers `wanted`:
/// the same origin, and `wanted`'s path at or under `claimed`'s. A
/// document claiming another resource is not believed.
fn covers(claimed: &Url, wanted: &Url) -> bool {
    let path = claimed.path().trim_end_matches('/');
    claimed.origin() == wanted.origin()
        && (wanted.path().trim_end_matches('/') == path
            || wanted.path().starts_with(&format!("{path}/")))
}

/// Discover how to get tokens for `resource`.
pub async fn discover(resource: &Url) -> anyhow::Result<Discovered> {
    let mut prm = None;
    for url in resource_metadata_urls(resource) {
        if let Some(doc) = get_json(&url).await? {
            prm = Some(doc);
            break;
        }
    }
    if prm.is_none()
        && let Some(at) = challenged(resource).await?
    {
        let at = Url::parse(&at)
            .map_err(|_| anyhow::anyhow!("{resource} named resource metadata at a bad URL"))?;
        if at.origin() != resource.origin() {
            bail!("{resource} named resource metadata at another origin ({at}); refused");
        }
        prm = get_json(&at).await?;
    }
    let Some(prm) = prm else {
        bail!(
            "{resource} publishes no OAuth protected resource metadata (RFC 9728); it cannot be connected with --oauth"
        );
    };
    let claimed = text(&prm, "resource")
        .and_then(|r| Url::parse(&r).ok())
        .context("the protected resource metadata names no resource")?;
    if !covers(&claimed, resource) {
        bail!("the protected resource metadata is for {claimed}, not {resource}; refused");
    }
    let issuer = prm
        .get("authorization_servers")
        .and_then(|a| a.as_array())
        .and_then(|a| a.first())
        .and_then(|a| a.as_str())
        .context("the protected resource metadata names no authorization server")?
        .to_owned();
    let issuer_url =
        Url::parse(&issuer).map_err(|_| anyhow::anyhow!("bad authorization server {issuer:?}"))?;
    let mut asm = None;
    for url in server_metadata_urls(&issuer_url) {
        if let Some(doc) = get_json(&url).await? {
            asm = Some(doc);
            break;
        }
    }
    let asm =
        asm.with_context(|| format!("{issuer} publishes no authorization server metadata"))?;
    if text(&asm, "issuer").as_deref() != Some(issuer.as_str()) {
        bail!("the authorization server metadata at {issuer} names another issuer; refused");
    }
    let s256 = asm
        .get("code_challenge_methods_supported")
        .and_then(|m| m.as_array())
        .is_some_and(|m| m.iter().any(|m| m == "S256"));
    if !s256 {
        bail!("{issuer} does not support PKCE with S256; refused");
    }
    let authorization_endpoint = text(&asm, "authorization_endpoint")
        .with_context(|| format!("{issuer} names no authorization endpoint"))?;
    // The person's browser is sent there with the request's state and
    // challenge: never over plain http beyond this machine.
    let secure = Url::parse(&authorization_endpoint).is_ok_and(|u| {
        u.scheme() == "https"
            || (u.scheme() == "http" && u.host_str().is_some_and(crate::signin::is_loopback_name))
    });
    if !secure {
        bail!("{issuer}'s authorization endpoint is not an https URL; refused");
    }
    Ok(Discovered {
        resource: claimed.to_string(),
        issuer: issuer.clone(),
        authorization_endpoint,
        token_endpoint: text(&asm, "token_endpoint")
            .with_context(|| format!("{issuer} names no token endpoint"))?,
        registration_endpoint: text(&asm, "registration_endpoint"),
        scopes_supported: prm
            .get("scopes_supported")
            .and_then(|s| s.as_array())
            .map(|s| {
                s.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
    })
}

/// Register a public client (RFC 7591) redirecting to `redirect_uri`.
pub async fn register(
    endpoint: &str,
    redirect_uri: &str,
) -> anyhow::Result<(String, Option<String>)> {
    let loopback = Url::parse(redirect_uri)
        .ok()
        .and_then(|u| u.host_str().map(crate::signin::is_loopback_name))
        .unwrap_or(false);
    let mut body = serde_json::json!({
        "client_name": "Gatehouse",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    });
    if loopback {
        // OpenID Connect registration's word for a client on the person's
        // own machine (its loopback redirect may use any port).
        body["application_type"] = "native".into();
    }
    let request = http::Request::builder()
        .method(http::Method::POST)
        .uri(endpoint)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json")
        .body(body.to_string().into_bytes())?;
    let answer = oidc_http::call(request).await?;
    if !answer.status().is_success() {
        let error = serde_json::from_slice::<serde_json::Value>(answer.body())
            .ok()
            .and_then(|e| text(&e, "error"))
            .unwrap_or_default();
        bail!(
            "the client registration at {endpoint} was refused ({} {error}); give --client-id",
            answer.status()
        );
    }
    let doc: serde_json::Value = serde_json::from_slice(answer.body()).map_err(|_| {
        anyhow::anyhow!("the client registration at {endpoint} did not answer JSON")
    })?;
    let id = text(&doc, "client_id")
        .with_context(|| format!("the client registration at {endpoint} gave no client_id"))?;
    Ok((id, text(&doc, "client_secret")))
}

// ---- the flow -----------------------------------------------------------

/// An authorization in progress: what the callback needs. Kept in the
/// process that began it, never stored.
pub struct Pending {
    discovered: Discovered,
    client_id: String,
    client_secret: Option<String>,
    redirect_uri: String,
    scope: Option<String>,
    state: CsrfToken,
    verifier: PkceCodeVerifier,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pending({})", self.discovered.issuer)
    }
}

impl Pending {
    /// Whether `state` is this flow's (constant time).
    pub fn state_is(&self, state: &str) -> bool {
        use subtle::ConstantTimeEq as _;
        self.state
            .secret()
            .as_bytes()
            .ct_eq(state.as_bytes())
            .into()
    }

    /// The flow's state, to find it again when its callback arrives.
    pub fn state(&self) -> &str {
        self.state.secret()
    }
}

/// The resource URL of a gatekeeper: its `url` setting, else its
/// credential host. Its host must be the credential host: a token is
/// asked only for where the kernel will send it.
pub fn resource_of(g: &crate::store::GatekeeperRecord) -> anyhow::Result<Url> {
    let Some(host) = g.credential_host() else {
        bail!(
            "gatekeeper {:?} has no host a credential may go to; add it again with --credential-host HOST",
            g.name
        );
    };
    let url = match g.settings.iter().find(|(k, _)| k == "url") {
        Some((_, u)) => Url::parse(u)
            .map_err(|_| anyhow::anyhow!("gatekeeper {:?}'s url setting is not a URL", g.name))?,
        None => Url::parse(&format!("https://{host}/"))
            .map_err(|_| anyhow::anyhow!("{host:?} is not a host name"))?,
    };
    if url.host_str().is_none() {
        bail!("gatekeeper {:?}'s url names no host", g.name);
    }
    if !at_host(&url, host) {
        bail!(
            "gatekeeper {:?}'s url is at {}, but its credential goes only to {host}; refused",
            g.name,
            authority(&url)
        );
    }
    Ok(url)
}

/// `url`'s `host[:port]` as written.
fn authority(url: &Url) -> String {
    match (url.host_str(), url.port()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_owned(),
        (None, _) => String::new(),
    }
}

/// Whether `url` is at the allowed-host entry `host` (with or without its
/// scheme's default port).
fn at_host(url: &Url, host: &str) -> bool {
    let authority = authority(url);
    let default_port = url
        .port_or_known_default()
        .map(|p| format!("{authority}:{p}"));
    !authority.is_empty()
        && (authority.eq_ignore_ascii_case(host)
            || default_port.is_some_and(|d| d.eq_ignore_ascii_case(host)))
}

/// Refuse an operator's OAuth grant (stored as `stored`) for a gatekeeper
/// whose credential goes to `host`: a token is sent only to the service it
/// was issued for. A static secret passes.
fn check_grant_host(stored: &str, host: Option<&str>) -> anyhow::Result<()> {
    let Some(grant) = Grant::parse(stored) else {
        return Ok(());
    };
    let grant = grant?;
    let fits = Url::parse(&grant.resource)
        .ok()
        .zip(host)
        .is_some_and(|(url, host)| at_host(&url, host));
    if !fits {
        bail!(
            "that OAuth credential was issued for {}, but this gatekeeper's credential goes to {}; connect one for this service",
            grant.resource,
            host.unwrap_or("no host")
        );
    }
    Ok(())
}

/// Begin connecting an account at gatekeeper `g`: discover, register a
/// client unless `client_id` is given, and build the authorization URL
/// the person opens. The callback goes to `redirect_uri`.
pub async fn begin(
    g: &crate::store::GatekeeperRecord,
    redirect_uri: &str,
    client_id: Option<String>,
    scope: Option<String>,
) -> anyhow::Result<(Url, Pending)> {
    begin_at(resource_of(g)?, redirect_uri, client_id, scope).await
}

/// [`begin`] for the service at `resource` (an operator's credential,
/// connected before any gatekeeper names it).
pub async fn begin_at(
    resource: Url,
    redirect_uri: &str,
    client_id: Option<String>,
    scope: Option<String>,
) -> anyhow::Result<(Url, Pending)> {
    let discovered = discover(&resource).await?;
    let (client_id, client_secret) = match client_id {
        Some(id) => (id, None),
        None => match &discovered.registration_endpoint {
            Some(endpoint) => register(endpoint, redirect_uri).await?,
            None => bail!(
                "{} offers no dynamic client registration; register a client there (redirect URI {redirect_uri}) and give --client-id",
                discovered.issuer
            ),
        },
    };
    let scope = scope.or_else(|| {
        (!discovered.scopes_supported.is_empty()).then(|| discovered.scopes_supported.join(" "))
    });
    let client = BasicClient::new(ClientId::new(client_id.clone()))
        .set_auth_uri(AuthUrl::new(discovered.authorization_endpoint.clone())?)
        .set_redirect_uri(RedirectUrl::new(redirect_uri.to_owned())?);
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let mut request = client
        .authorize_url(CsrfToken::new_random)
        .set_pkce_challenge(challenge)
        .add_extra_param("resource", discovered.resource.clone());
    for s in scope.iter().flat_map(|s| s.split_whitespace()) {
        request = request.add_scope(Scope::new(s.to_owned()));
    }
    let (url, state) = request.url();
    Ok((
        url,
        Pending {
            discovered,
            client_id,
            client_secret,
            redirect_uri: redirect_uri.to_owned(),
            scope,
            state,
            verifier,
        },
    ))
}

/// The token endpoint's refusal or failure, in one line that quotes no
/// token (only the server's error code and description).
fn token_error<E: std::error::Error + 'static>(
    e: RequestTokenError<E, oauth2::basic::BasicErrorResponse>,
) -> anyhow::Error {
    match e {
        RequestTokenError::ServerResponse(r) => {
            let mut line = r.error().to_string();
            if let Some(d) = r.error_description() {
                line.push_str(": ");
                line.push_str(&crate::prompt::inline(d));
            }
            anyhow::anyhow!("the authorization server refused: {line}")
        }
        RequestTokenError::Request(e) => anyhow::anyhow!("{e}"),
        RequestTokenError::Parse(..) | RequestTokenError::Other(_) => {
            anyhow::anyhow!("the token endpoint's answer could not be read")
        }
    }
}

fn grant_from(
    answer: &oauth2::basic::BasicTokenResponse,
    previous_refresh: Option<&str>,
    base: Grant,
) -> anyhow::Result<Grant> {
    if *answer.token_type() != oauth2::basic::BasicTokenType::Bearer {
        bail!("the authorization server issued a token that is not a bearer token");
    }
    Ok(Grant {
        access_token: answer.access_token().secret().clone(),
        // A server that rotates sends a new one; one that does not keeps
        // the old valid.
        refresh_token: answer
            .refresh_token()
            .map(|r| r.secret().clone())
            .or_else(|| previous_refresh.map(str::to_owned)),
        issued_at: Some(now_s()),
        expires_at: answer
            .expires_in()
            .map(|d| now_s().saturating_add(i64::try_from(d.as_secs()).unwrap_or(i64::MAX))),
        scope: answer
            .scopes()
            .map(|s| s.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" "))
            .or(base.scope.clone()),
        ..base
    })
}

/// Finish a flow with the callback's `code` (its `state` checked by the
/// caller with [`Pending::state_is`]): exchange it with the verifier.
pub async fn finish(pending: Pending, code: &str) -> anyhow::Result<Grant> {
    let mut client = BasicClient::new(ClientId::new(pending.client_id.clone()))
        .set_token_uri(TokenUrl::new(pending.discovered.token_endpoint.clone())?)
        .set_redirect_uri(RedirectUrl::new(pending.redirect_uri.clone())?);
    if let Some(s) = &pending.client_secret {
        client = client.set_client_secret(ClientSecret::new(s.clone()));
    }
    let answer = client
        .exchange_code(AuthorizationCode::new(code.to_owned()))
        .set_pkce_verifier(pending.verifier)
        .add_extra_param("resource", pending.discovered.resource.clone())
        .request_async(&oidc_http::call)
        .await
        .map_err(token_error)?;
    grant_from(
        &answer,
        None,
        Grant {
            access_token: String::new(),
            refresh_token: None,
            issued_at: None,
            expires_at: None,
            token_endpoint: pending.discovered.token_endpoint,
            client_id: pending.client_id,
            client_secret: pending.client_secret,
            resource: pending.discovered.resource,
            scope: pending.scope,
            issuer: pending.discovered.issuer,
        },
    )
}

/// A new grant for `grant`, by its refresh token.
pub async fn refresh(grant: &Grant) -> anyhow::Result<Grant> {
    let Some(refresh) = &grant.refresh_token else {
        bail!("the authorization server issued no refresh token");
    };
    let mut client = BasicClient::new(ClientId::new(grant.client_id.clone()))
        .set_token_uri(TokenUrl::new(grant.token_endpoint.clone())?);
    if let Some(s) = &grant.client_secret {
        client = client.set_client_secret(ClientSecret::new(s.clone()));
    }
    let answer = client
        .exchange_refresh_token(&RefreshToken::new(refresh.clone()))
        .add_extra_param("resource", grant.resource.clone())
        .request_async(&oidc_http::call)
        .await
        .map_err(token_error)?;
    grant_from(&answer, Some(refresh), grant.clone())
}

// ---- the kernel's side --------------------------------------------------

/// One refresh at a time per account in this process.
fn account_lock(key: &str) -> Arc<tokio::sync::Mutex<()>> {
    static LOCKS: OnceLock<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> = OnceLock::new();
    let mut locks = LOCKS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    locks.entry(key.to_owned()).or_default().clone()
}

impl Kernel {
    /// The token to inject for `credential` at `gatekeeper`: a static
    /// one as stored, an OAuth account's access token refreshed first if
    /// it expires within [`REFRESH_MARGIN_S`]. `Ok(Err(line))` refuses the
    /// call (the account must be reconnected); nothing else is tried.
    pub(crate) async fn bearer(
        &self,
        gatekeeper: &str,
        credential: &Credential,
    ) -> anyhow::Result<Result<Option<String>, String>> {
        let Some(secret) = credential.secret() else {
            return Ok(Ok(None));
        };
        let opened = secret.open(self.store().key())?;
        if !is_grant(&opened) {
            return Ok(Ok(Some(opened.to_string())));
        }
        drop(opened);
        let id = match credential {
            Credential::Account { id, .. } => id,
            Credential::Operator { name, .. } => {
                return Ok(self.operator_token(name).await?.map(Some));
            }
            Credential::Anonymous | Credential::Refused(_) => return Ok(Ok(None)),
        };
        let Some((user, label)) = id.split_once('/') else {
            bail!("account {id:?} is not named user/label");
        };
        let reconnect = |why: &str| {
            format!(
                "the OAuth account {id} at {gatekeeper} {why}; reconnect it with `gatehouse account connect {user} {gatekeeper} --oauth --name {label}`"
            )
        };
        let lock = account_lock(&format!("{gatekeeper}\u{0}{id}"));
        let _one = lock.lock().await;
        // Read again under the lock: another call may have refreshed (and
        // rotated the refresh token) since this credential was chosen.
        let Some(grant) = self.stored_grant(user, gatekeeper, label).await? else {
            return Ok(Err(reconnect("is no longer connected")));
        };
        if !grant.needs_refresh(now_s()) {
            return Ok(Ok(Some(grant.access_token)));
        }
        if grant.refresh_token.is_none() {
            return Ok(Err(reconnect(
                "has expired and its server issued no refresh token",
            )));
        }
        match refresh(&grant).await {
            Ok(fresh) => {
                let stored = fresh.to_stored()?;
                let (u, g, l) = (user.to_owned(), gatekeeper.to_owned(), label.to_owned());
                self.store()
                    .run(move |s| s.connect_account(&u, &g, &l, &stored, false))
                    .await?;
                tracing::info!(account = %id, gatekeeper, "refreshed an OAuth account's access token");
                Ok(Ok(Some(fresh.access_token)))
            }
            Err(e) => {
                // Another process may have refreshed (rotating the token
                // this one used): its grant, if fresh, is the account's.
                if let Some(other) = self.stored_grant(user, gatekeeper, label).await?
                    && other.refresh_token != grant.refresh_token
                    && !other.needs_refresh(now_s())
                {
                    return Ok(Ok(Some(other.access_token)));
                }
                tracing::warn!(account = %id, gatekeeper, "an OAuth refresh failed: {e:#}");
                Ok(Err(reconnect(&format!("could not be refreshed ({e:#})"))))
            }
        }
    }

    /// The token of the operator's secret `name`: its value as stored, or,
    /// for an OAuth grant ([`Operator::connect_operator_oauth`]), its access
    /// token, refreshed first when it expires within the margin (one
    /// refresh at a time, the rotated refresh token kept). `Ok(Err(line))`:
    /// the grant cannot be refreshed and must be connected again.
    pub(crate) async fn operator_token(
        &self,
        name: &str,
    ) -> anyhow::Result<Result<String, String>> {
        let lock = account_lock(&format!("operator\u{0}{name}"));
        let _one = lock.lock().await;
        let lookup = name.to_owned();
        let Some(stored) = self.store().run(move |s| s.secret(&lookup)).await? else {
            return Ok(Err(format!(
                "no secret named {name:?}; store it with `gatehouse secret set {name}`"
            )));
        };
        let stored = Zeroizing::new(stored);
        let Some(grant) = Grant::parse(&stored) else {
            return Ok(Ok(stored.to_string()));
        };
        let grant = grant?;
        let reconnect = |why: &str| {
            format!(
                "the operator's OAuth credential {name} {why}; connect it again with `gatehouse secret set {name} --oauth --url {}`",
                grant.resource
            )
        };
        if !grant.needs_refresh(now_s()) {
            return Ok(Ok(grant.access_token));
        }
        if grant.refresh_token.is_none() {
            return Ok(Err(reconnect(
                "has expired and its server issued no refresh token",
            )));
        }
        match refresh(&grant).await {
            Ok(fresh) => {
                let stored = fresh.to_stored()?;
                let n = name.to_owned();
                self.store().run(move |s| s.put_secret(&n, &stored)).await?;
                tracing::info!(secret = %name, "refreshed an operator's OAuth access token");
                Ok(Ok(fresh.access_token))
            }
            Err(e) => {
                tracing::warn!(secret = %name, "an OAuth refresh failed: {e:#}");
                Ok(Err(reconnect(&format!("could not be refreshed ({e:#})"))))
            }
        }
    }

    /// Refuse gatekeeper `g` whose operator secret is an OAuth grant issued
    /// for another service than its credential host.
    pub(crate) fn check_operator_grant(
        &self,
        g: &crate::store::GatekeeperRecord,
    ) -> anyhow::Result<()> {
        let Some(name) = &g.secret else {
            return Ok(());
        };
        match self.store().secret(name)? {
            Some(stored) => check_grant_host(&Zeroizing::new(stored), g.credential_host()),
            None => Ok(()),
        }
    }

    /// Refuse a value pasted as the secret `name` that looks like a stored
    /// grant: only a finished OAuth flow stores one.
    pub(crate) fn refuse_pasted_grant(&self, name: &str, value: &str) -> anyhow::Result<()> {
        if is_grant(value) {
            bail!(
                "that value looks like a stored OAuth grant; connect one with `gatehouse secret set {name} --oauth --url URL`"
            );
        }
        Ok(())
    }

    /// The grant stored for `user`'s account `label` at `gatekeeper`, if
    /// it is still connected.
    async fn stored_grant(
        &self,
        user: &str,
        gatekeeper: &str,
        label: &str,
    ) -> anyhow::Result<Option<Grant>> {
        let (u, g, l) = (user.to_owned(), gatekeeper.to_owned(), label.to_owned());
        let stored = self
            .store()
            .run(move |s| s.account_credential(&u, &g, Some(&l)))
            .await?;
        let Some((_, stored)) = stored else {
            return Ok(None);
        };
        let stored = Zeroizing::new(stored);
        match Grant::parse(&stored) {
            Some(grant) => grant.map(Some),
            None => {
                bail!("the account {user}/{label} at {gatekeeper} is no longer an OAuth account")
            }
        }
    }

    /// The gatekeepers an account may be connected at by OAuth: those
    /// whose service a `url` setting names, with a credential host.
    pub fn oauth_connectable(&self) -> anyhow::Result<Vec<String>> {
        Ok(self
            .store()
            .gatekeepers()?
            .iter()
            .filter(|g| g.settings.iter().any(|(k, _)| k == "url") && resource_of(g).is_ok())
            .map(|g| g.name.clone())
            .collect())
    }
}

impl Person<'_> {
    /// Connect `user`'s account at `gatekeeper` from a finished flow.
    pub fn connect_oauth_account(
        &self,
        gatekeeper: &str,
        label: &str,
        grant: &Grant,
        make_default: bool,
    ) -> anyhow::Result<crate::store::Account> {
        let user = self.name;
        self.kernel.check_account_target(user, gatekeeper, label)?;
        self.kernel.store().connect_account(
            user,
            gatekeeper,
            label,
            &grant.to_stored()?,
            make_default,
        )
    }

    /// Begin an OAuth connection at `gatekeeper` for `user` (checked
    /// first, so no registration is made for nobody).
    pub async fn begin_oauth(
        &self,
        gatekeeper: &str,
        label: &str,
        redirect_uri: &str,
        client_id: Option<String>,
        scope: Option<String>,
    ) -> anyhow::Result<(Url, Pending)> {
        let user = self.name;
        self.kernel.check_account_target(user, gatekeeper, label)?;
        let Some(g) = self.kernel.gatekeeper_named(gatekeeper).await? else {
            bail!("no gatekeeper named {gatekeeper:?}; `gatehouse gatekeepers` lists them");
        };
        begin(&g, redirect_uri, client_id, scope).await
    }
}

impl Operator<'_> {
    /// Begin connecting an operator's OAuth credential for the service at
    /// `url` (an MCP endpoint, say): discovery from there, as for accounts.
    pub async fn begin_operator_oauth(
        &self,
        url: &str,
        redirect_uri: &str,
        client_id: Option<String>,
        scope: Option<String>,
    ) -> anyhow::Result<(Url, Pending)> {
        let resource = Url::parse(url).map_err(|_| {
            anyhow::anyhow!(
                "--url {url:?} is not a URL; give the service's address, e.g. https://host/mcp"
            )
        })?;
        begin_at(resource, redirect_uri, client_id, scope).await
    }

    /// Store a finished flow's grant as the operator's secret `name`,
    /// sealed like any secret, for `gatekeeper add --secret NAME`.
    pub fn connect_operator_oauth(&self, name: &str, grant: &Grant) -> anyhow::Result<()> {
        self.kernel.check_secret_name(name)?;
        self.kernel.store().put_secret(name, &grant.to_stored()?)
    }
}

// ---- the command line's loopback redirect --------------------------------

/// Wait on `listener` for the redirect of `pending`'s flow, until
/// `deadline`; answer the browser, and return the code. Requests with
/// another state (or to another path) are answered and ignored: only this
/// flow's redirect ends the wait.
pub async fn await_redirect(
    listener: tokio::net::TcpListener,
    pending: &Pending,
    deadline: Duration,
) -> anyhow::Result<String> {
    let wait = async {
        loop {
            let (mut stream, _) = listener.accept().await?;
            let Some(target) = read_request_target(&mut stream).await else {
                continue;
            };
            let query = match Url::parse(&format!("http://127.0.0.1{target}")) {
                Ok(u) if u.path() == "/callback" => u,
                _ => {
                    answer(&mut stream, "404 Not Found", "Not found.").await;
                    continue;
                }
            };
            let params: HashMap<String, String> = query.query_pairs().into_owned().collect();
            if !params.get("state").is_some_and(|s| pending.state_is(s)) {
                answer(
                    &mut stream,
                    "400 Bad Request",
                    "This answer does not belong to the connection in progress (wrong state).",
                )
                .await;
                continue;
            }
            if let Some(error) = params.get("error") {
                answer(
                    &mut stream,
                    "400 Bad Request",
                    "The account was not connected.",
                )
                .await;
                let description = params
                    .get("error_description")
                    .map(|d| format!(": {}", crate::prompt::inline(d)))
                    .unwrap_or_default();
                bail!(
                    "the authorization server did not authorize: {}{description}",
                    crate::prompt::inline(error)
                );
            }
            let Some(code) = params.get("code") else {
                answer(&mut stream, "400 Bad Request", "No code.").await;
                bail!("the authorization server sent no code");
            };
            answer(
                &mut stream,
                "200 OK",
                "Gatehouse received the authorization; you may close this window.",
            )
            .await;
            return Ok(code.clone());
        }
    };
    match tokio::time::timeout(deadline, wait).await {
        Ok(r) => r,
        Err(_) => bail!(
            "nobody came back from the authorization server within {} s; run the command again",
            deadline.as_secs()
        ),
    }
}

async fn read_request_target(stream: &mut tokio::net::TcpStream) -> Option<String> {
    use tokio::io::AsyncReadExt as _;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 2048];
    let read = async {
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 16 * 1024 {
            let n = stream.read(&mut chunk).await.ok()?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        Some(())
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .ok()??;
    let head = std::str::from_utf8(&buf).ok()?;
    let mut line = head.lines().next()?.split(' ');
    (line.next()? == "GET").then_some(())?;
    line.next().map(str::to_owned)
}

async fn answer(stream: &mut tokio::net::TcpStream, status: &str, body: &str) {
    use tokio::io::AsyncWriteExt as _;
    let page = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\ncache-control: no-store\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(page.as_bytes()).await;
    let _ = stream.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn resource_metadata_is_looked_for_with_the_path_then_without() {
        let got: Vec<String> = resource_metadata_urls(&u("https://api.example.com/v1/mcp?x=1"))
            .iter()
            .map(Url::to_string)
            .collect();
        assert_eq!(
            got,
            [
                "https://api.example.com/.well-known/oauth-protected-resource/v1/mcp",
                "https://api.example.com/.well-known/oauth-protected-resource",
            ]
        );
        let root = resource_metadata_urls(&u("http://127.0.0.1:8080/"));
        assert_eq!(
            root,
            [u(
                "http://127.0.0.1:8080/.well-known/oauth-protected-resource"
            )]
        );
    }

    #[test]
    fn server_metadata_tries_rfc8414_then_openid_configuration() {
        let got: Vec<String> = server_metadata_urls(&u("https://as.example.com"))
            .iter()
            .map(Url::to_string)
            .collect();
        assert_eq!(
            got,
            [
                "https://as.example.com/.well-known/oauth-authorization-server",
                "https://as.example.com/.well-known/openid-configuration",
            ]
        );
        let got: Vec<String> = server_metadata_urls(&u("https://as.example.com/tenant/a"))
            .iter()
            .map(Url::to_string)
            .collect();
        assert_eq!(
            got,
            [
                "https://as.example.com/.well-known/oauth-authorization-server/tenant/a",
                "https://as.example.com/.well-known/openid-configuration/tenant/a",
                "https://as.example.com/tenant/a/.well-known/openid-configuration",
            ]
        );
    }

    #[test]
    fn a_challenge_names_its_resource_metadata() {
        assert_eq!(
            resource_metadata_from_challenge(
                r#"Bearer error="invalid_token", resource_metadata="http://127.0.0.1:9/.well-known/oauth-protected-resource/mcp""#
            )
            .as_deref(),
            Some("http://127.0.0.1:9/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(
            resource_metadata_from_challenge("Bearer Resource_Metadata=https://x/y, scope=a")
                .as_deref(),
            Some("https://x/y")
        );
        assert_eq!(
            resource_metadata_from_challenge(r#"Bearer realm="x""#),
            None
        );
    }

    #[test]
    fn metadata_for_another_resource_is_not_believed() {
        assert!(covers(
            &u("https://a.example/mcp"),
            &u("https://a.example/mcp")
        ));
        assert!(covers(
            &u("https://a.example/mcp/"),
            &u("https://a.example/mcp")
        ));
        assert!(covers(
            &u("https://a.example/"),
            &u("https://a.example/mcp")
        ));
        assert!(!covers(
            &u("https://a.example/mcp"),
            &u("https://a.example/mcpx")
        ));
        assert!(!covers(
            &u("https://b.example/mcp"),
            &u("https://a.example/mcp")
        ));
        assert!(!covers(
            &u("http://a.example/mcp"),
            &u("https://a.example/mcp")
        ));
    }

    fn grant() -> Grant {
        Grant {
            access_token: "AT-secret".into(),
            refresh_token: Some("RT-secret".into()),
            issued_at: None,
            expires_at: Some(1_000),
            token_endpoint: "https://as/token".into(),
            client_id: "c".into(),
            client_secret: None,
            resource: "https://rs/mcp".into(),
            scope: Some("mcp".into()),
            issuer: "https://as".into(),
        }
    }

    #[test]
    fn a_grant_round_trips_behind_its_marker_and_a_static_token_is_not_one() {
        let g = grant();
        let stored = g.to_stored().unwrap();
        assert!(is_grant(&stored));
        assert_eq!(Grant::parse(&stored).unwrap().unwrap(), g);
        assert!(Grant::parse("ghp_statictoken").is_none());
        assert!(Grant::parse(r#"{"access_token":"x"}"#).is_none());
        let damaged = format!("{MARKER}{{\"access_token\": \"AT-secret\"");
        let e = Grant::parse(&damaged).unwrap().unwrap_err().to_string();
        assert!(!e.contains("AT-secret"), "{e}");
        let debug = format!("{g:?}");
        assert!(!debug.contains("secret"), "{debug}");
    }

    #[test]
    fn refresh_comes_a_minute_before_expiry() {
        let g = grant();
        assert!(!g.needs_refresh(1_000 - REFRESH_MARGIN_S - 1));
        assert!(g.needs_refresh(1_000 - REFRESH_MARGIN_S));
        assert!(g.needs_refresh(2_000));
        let forever = Grant {
            expires_at: None,
            ..grant()
        };
        assert!(!forever.needs_refresh(i64::MAX));
        // A ten-second token is refreshed in its last quarter, not always.
        let short = Grant {
            issued_at: Some(990),
            ..grant()
        };
        assert!(!short.needs_refresh(990));
        assert!(!short.needs_refresh(997));
        assert!(short.needs_refresh(998));
    }
}
