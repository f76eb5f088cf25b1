//! Sign-in people already use, in headless Chromium: a passkey
//! (Chromium's virtual authenticator over WebDriver) and OpenID Connect (a
//! real provider started by the tests, `gatehouse_e2e::oidc`), beside the
//! one-time link.

use crate::chromium::{Driver, Screen, browser};
use crate::surfaces::web_api::{Api, PATIENCE, people_world, stage_labels};
use crate::surfaces::web_browser::{screenshot, sign_in, text, wait_for};
use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, Locator};
use gatehouse::store::Trust;
use gatehouse::web;
use gatehouse_e2e::oidc::{Provider, ProviderConfig};
use gatehouse_e2e::{World, cli_command, stderr, stdout};
use serde_json::{Value, json};

/// A WebDriver extension command (the WebAuthn virtual authenticator's),
/// sent as is under the session.
#[derive(Debug)]
struct Extension {
    method: http::Method,
    path: String,
    body: Option<Value>,
}

impl WebDriverCompatibleCommand for Extension {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/{}",
            session_id.unwrap_or_default(),
            self.path
        ))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (
            self.method.clone(),
            self.body.as_ref().map(Value::to_string),
        )
    }
}

/// Give the browser a platform authenticator that keeps passkeys, verifies
/// its user, and answers by itself; its id.
async fn virtual_authenticator(c: &Client) -> String {
    let v = c
        .issue_cmd(Extension {
            method: http::Method::POST,
            path: "webauthn/authenticator".into(),
            body: Some(json!({
                "protocol": "ctap2",
                "transport": "internal",
                "hasResidentKey": true,
                "hasUserVerification": true,
                "isUserVerified": true,
                "automaticPresenceSimulation": true,
            })),
        })
        .await
        .expect("chromedriver adds a virtual authenticator");
    v.as_str().map(str::to_owned).expect("its id")
}

/// The credentials the virtual authenticator holds.
async fn credentials(c: &Client, authenticator: &str) -> Vec<Value> {
    let v = c
        .issue_cmd(Extension {
            method: http::Method::GET,
            path: format!("webauthn/authenticator/{authenticator}/credentials"),
            body: None,
        })
        .await
        .expect("the authenticator's credentials");
    v.as_array().cloned().unwrap_or_default()
}

/// Click the element `css` once it is there (where it is: the pages of
/// sign-in and of a provider are short).
pub(crate) async fn click(c: &Client, css: &str) {
    c.wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no {css}: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("{css} does not click: {e}"));
}

/// Type `text` into the element `css`.
pub(crate) async fn type_into(c: &Client, css: &str, text: &str) {
    c.find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no {css}: {e}"))
        .send_keys(text)
        .await
        .unwrap_or_else(|e| panic!("{css} takes no text: {e}"));
}

/// Run `script` (async: it ends by calling its last argument) in the page.
async fn run(c: &Client, script: &str) -> Value {
    c.execute_async(script, vec![])
        .await
        .unwrap_or_else(|e| panic!("the script runs: {e:?}"))
}

/// Serve on an ephemeral loopback port.
async fn serve(w: &World, oidc: Option<gatehouse::signin::oidc::OidcSettings>) -> web::Server {
    crate::surfaces::web_api::serve_with(
        w,
        web::Config {
            oidc,
            ..web::Config::default()
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn web_signin_by_passkey_in_chromium_and_replays_or_other_origins_are_refused() {
    let driver = Driver::start();
    let w = people_world(Trust::Byo).await;
    stage_labels(&w, "work", &["first"]).await;
    let server = serve(&w, None).await;
    let port = server.addr().port();
    // WebAuthn needs a name, not an address: the page is opened as
    // localhost, the relying party this server offers on loopback.
    let base = format!("http://localhost:{port}");
    let c = browser(&driver, Screen::Desktop).await;
    let authenticator = virtual_authenticator(&c).await;

    // At 127.0.0.1 the page says where passkeys work instead.
    c.goto(&format!("http://127.0.0.1:{port}/signin"))
        .await
        .expect("the page");
    wait_for(
        &c,
        "the passkey hint",
        "return !document.getElementById('passkey-hint').hidden",
    )
    .await;
    let hint = text(
        &c,
        "return document.getElementById('passkey-hint').textContent",
    )
    .await;
    assert!(hint.contains(&format!("localhost:{port}")), "{hint}");

    // Alice signs in by link, then adds a passkey on her account page.
    sign_in(&c, &w, &base, "alice").await;
    c.goto(&format!("{base}/account"))
        .await
        .expect("the account page");
    wait_for(
        &c,
        "the account page",
        "return document.getElementById('who').textContent.includes('alice')",
    )
    .await;
    c.find(Locator::Css("#passkey-label"))
        .await
        .expect("the label field")
        .clear()
        .await
        .expect("cleared");
    type_into(&c, "#passkey-label", "test laptop").await;
    click(&c, "#passkey-add").await;
    wait_for(
        &c,
        "the passkey listed",
        "return document.querySelectorAll('#passkeys li.passkey').length === 1",
    )
    .await;
    screenshot(&c, "passkey-added").await;
    let kept = w
        .kernel
        .person("alice")
        .passkeys_of()
        .await
        .expect("alice's passkeys");
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].label, "test laptop");
    let held = credentials(&c, &authenticator).await;
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(
        held[0]["isResidentCredential"], true,
        "a discoverable credential"
    );
    assert_eq!(
        held[0]["credentialId"]
            .as_str()
            .map(|s| s.trim_end_matches('=')),
        Some(kept[0].credential.as_str())
    );
    // What the store keeps signs nobody in: no private key.
    let private = held[0]["privateKey"]
        .as_str()
        .expect("the authenticator's key")
        .trim_end_matches('=')
        .to_owned();
    let row: String = rusqlite::Connection::open(w.home().join("gatehouse.db"))
        .expect("the database")
        .query_row("SELECT passkey FROM web_passkeys", [], |r| r.get(0))
        .expect("the stored passkey");
    assert!(row.contains("counter") && !row.contains(&private), "{row}");

    // The operator sees it by its label (and could remove it).
    let o = cli_command(w.home(), &["passkey", "list", "alice"])
        .output()
        .expect("runs");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("test laptop") && stdout(&o).contains(&kept[0].credential),
        "{}",
        stdout(&o)
    );
    let o = cli_command(w.home(), &["passkey", "remove", "alice", "no-such-id"])
        .output()
        .expect("runs");
    assert!(
        !o.status.success() && stderr(&o).contains("no passkey"),
        "{}",
        stderr(&o)
    );

    // Signed out, she signs in by passkey alone and sees her inbox. The
    // page's answer is kept to be replayed below.
    c.goto(&format!("{base}/")).await.expect("the inbox");
    wait_for(
        &c,
        "the inbox",
        "return !document.getElementById('signout').hidden",
    )
    .await;
    click(&c, "#signout").await;
    wait_for(
        &c,
        "the sign-in page",
        "return location.pathname === '/signin'",
    )
    .await;
    c.execute(
        "const real = window.fetch;
         window.fetch = (url, init) => {
           if (String(url).endsWith('/api/passkeys/signin/finish')) sessionStorage.setItem('answer', init.body);
           return real(url, init);
         };
         return true;",
        vec![],
    )
    .await
    .expect("the recorder is in place");
    click(&c, "#passkey-signin").await;
    wait_for(
        &c,
        "alice's inbox, signed in by passkey",
        "return document.getElementById('who').textContent === 'Signed in as alice' && document.querySelectorAll('li.action').length === 1",
    )
    .await;
    screenshot(&c, "passkey-signed-in").await;
    assert!(
        w.kernel
            .person("alice")
            .passkeys_of()
            .await
            .expect("passkeys")[0]
            .used_at
            .is_some(),
        "its use is recorded"
    );
    let answer = text(&c, "return sessionStorage.getItem('answer')").await;
    let answer: Value = serde_json::from_str(&answer).expect("the recorded answer");

    // The same answer again: its ceremony was spent.
    let replay = Api::new(&base);
    let a = replay
        .post("/api/passkeys/signin/finish", answer.clone())
        .await;
    assert_eq!(a.status, 401, "{}", a.text);
    assert!(a.error().contains("not in progress"), "{}", a.text);
    // The same answer for a fresh ceremony: its challenge is not this one's.
    let fresh = replay.post("/api/passkeys/signin/start", json!({})).await;
    assert_eq!(fresh.status, 200, "{}", fresh.text);
    let mut again = answer.clone();
    again["ceremony"] = fresh.json()["ceremony"].clone();
    let a = replay.post("/api/passkeys/signin/finish", again).await;
    assert_eq!(a.status, 401, "{}", a.text);
    assert!(a.error().contains("refused"), "{}", a.text);
    assert!(
        a.headers.get("set-cookie").is_none(),
        "no session for a replay"
    );

    // An answer made by this browser for another origin (a second server
    // of the same deployment, on another port): the challenge is that
    // server's own, so only the origin is wrong, and it is refused.
    let other = serve(&w, None).await;
    let other_base = format!("http://localhost:{}", other.addr().port());
    let elsewhere = Api::new(&other_base);
    let started = elsewhere
        .post("/api/passkeys/signin/start", json!({}))
        .await;
    assert_eq!(started.status, 200, "{}", started.text);
    let started = started.json();
    let script = format!(
        "const done = arguments[arguments.length - 1];
         const o = {};
         const b = (s) => {{ s = s.replace(/-/g, '+').replace(/_/g, '/'); while (s.length % 4) s += '='; return Uint8Array.from(atob(s), (x) => x.charCodeAt(0)).buffer; }};
         const e = (buf) => btoa(String.fromCharCode(...new Uint8Array(buf))).replace(/\\+/g, '-').replace(/\\//g, '_').replace(/=+$/, '');
         const pk = Object.assign({{}}, o.publicKey, {{ challenge: b(o.publicKey.challenge), allowCredentials: [] }});
         navigator.credentials.get({{ publicKey: pk }}).then((c) => done({{
           id: c.id, rawId: e(c.rawId), type: c.type,
           response: {{ authenticatorData: e(c.response.authenticatorData), clientDataJSON: e(c.response.clientDataJSON),
                       signature: e(c.response.signature), userHandle: e(c.response.userHandle) }},
           extensions: {{}}
         }}), (err) => done(String(err)));",
        started["options"]
    );
    let credential = run(&c, &script).await;
    assert!(
        credential.is_object(),
        "the authenticator answered: {credential}"
    );
    let a = elsewhere
        .post(
            "/api/passkeys/signin/finish",
            json!({ "ceremony": started["ceremony"], "credential": credential }),
        )
        .await;
    assert_eq!(a.status, 401, "{}", a.text);
    assert!(a.error().contains("refused"), "{}", a.text);
    other.stop().await;
    c.close().await.expect("the browser closes");
    server.stop().await;
}

/// Fill the provider's development login form as `subject` and consent.
pub(crate) async fn at_the_provider(c: &Client, issuer: &str, subject: &str) {
    wait_for(
        c,
        "the provider's login form",
        &format!(
            "return location.href.startsWith({:?}) && !!document.querySelector('input[name=login]')",
            issuer
        ),
    )
    .await;
    type_into(c, "input[name=login]", subject).await;
    type_into(c, "input[name=password]", "any password").await;
    click(c, "button[type=submit]").await;
    wait_for(
        c,
        "the provider's consent form",
        "return !!document.querySelector('input[name=prompt][value=consent]')",
    )
    .await;
    click(c, "button[type=submit]").await;
}

/// Whether the browser holds a session cookie for the page's site (the
/// cookie is HttpOnly: WebDriver sees it, the page's script cannot).
async fn has_session(c: &Client) -> bool {
    c.get_all_cookies()
        .await
        .expect("the browser's cookies")
        .iter()
        .any(|k| k.name() == "gatehouse_session" && !k.value().is_empty())
}

/// The refusal page's line, once the browser is on it.
async fn refusal(c: &Client) -> String {
    wait_for(
        c,
        "the refusal page",
        "return !!document.getElementById('refusal')",
    )
    .await;
    text(c, "return document.getElementById('refusal').textContent").await
}

#[tokio::test(flavor = "multi_thread")]
async fn web_signin_by_oidc_in_chromium_needs_an_operators_binding() {
    let driver = Driver::start();
    let w = people_world(Trust::Byo).await;
    stage_labels(&w, "work", &["first"]).await;
    let provider = Provider::start(ProviderConfig::one_client(
        "gatehouse",
        "client-secret-for-tests",
        "/signin/oidc/callback",
        &["alice-at-idp", "mallory-at-idp"],
    ));
    let issuer = provider.issuer.clone();
    // The client secret lives in the kernel's secret store, never on a
    // command line.
    let mut set = cli_command(w.home(), &["secret", "set", "oidc-client"]);
    set.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = set.spawn().expect("secret set runs");
    {
        use std::io::Write as _;
        let mut input = child.stdin.take().expect("its stdin");
        input
            .write_all(b"client-secret-for-tests")
            .expect("written");
    }
    let o = child.wait_with_output().expect("secret set ends");
    assert!(o.status.success(), "{}", stderr(&o));
    // The operator binds alice's identity at the provider to alice.
    let o = cli_command(
        w.home(),
        &[
            "user",
            "bind",
            "alice",
            "--oidc-subject",
            "alice-at-idp",
            "--issuer",
            &issuer,
        ],
    )
    .output()
    .expect("user bind runs");
    assert!(o.status.success(), "{}", stderr(&o));
    let o = cli_command(w.home(), &["user", "bindings"])
        .output()
        .expect("runs");
    assert!(stdout(&o).contains("alice-at-idp"), "{}", stdout(&o));
    // One subject, one person; only known people.
    for (who, words) in [
        ("bob", "bound to alice already"),
        ("carol", "no person named"),
    ] {
        let o = cli_command(
            w.home(),
            &[
                "user",
                "bind",
                who,
                "--oidc-subject",
                "alice-at-idp",
                "--issuer",
                &issuer,
            ],
        )
        .output()
        .expect("user bind runs");
        assert!(!o.status.success(), "{who} was bound");
        let err = stderr(&o);
        assert!(
            err.contains(words) && err.trim().lines().count() == 1,
            "{err}"
        );
    }

    let server = serve(
        &w,
        Some(gatehouse::signin::oidc::OidcSettings {
            issuer: issuer.clone(),
            client_id: "gatehouse".into(),
            secret_name: Some("oidc-client".into()),
        }),
    )
    .await;
    let base = server.url();

    // Alice: the button, the provider's form, consent, her inbox.
    let c = browser(&driver, Screen::Desktop).await;
    c.goto(&format!("{base}/signin"))
        .await
        .expect("the sign-in page");
    wait_for(
        &c,
        "the OIDC button",
        "return !document.getElementById('by-oidc').hidden",
    )
    .await;
    click(&c, "#oidc-signin").await;
    at_the_provider(&c, &issuer, "alice-at-idp").await;
    wait_for(
        &c,
        "alice's inbox, signed in by OpenID Connect",
        "return document.getElementById('who').textContent === 'Signed in as alice' && document.querySelectorAll('li.action').length === 1",
    )
    .await;
    screenshot(&c, "oidc-signed-in").await;
    assert!(has_session(&c).await, "the session cookie the callback set");
    c.close().await.expect("closed");

    // Mallory's identity is valid at the provider but bound to nobody:
    // refused, with the subject and issuer the operator needs.
    let c = browser(&driver, Screen::Desktop).await;
    c.goto(&format!("{base}/signin"))
        .await
        .expect("the sign-in page");
    click(&c, "#oidc-signin").await;
    at_the_provider(&c, &issuer, "mallory-at-idp").await;
    let why = refusal(&c).await;
    screenshot(&c, "oidc-unbound").await;
    assert!(
        why.contains("mallory-at-idp")
            && why.contains(&issuer)
            && why.contains("gatehouse user bind"),
        "{why}"
    );
    assert!(!has_session(&c).await, "no session for an unbound identity");
    c.close().await.expect("closed");

    // A tampered state or nonce: the sign-in is started by hand, its
    // ceremony cookie handed to the browser, and the provider sent the
    // authorization request with one value changed.
    for (param, words) in [("state", "wrong state"), ("nonce", "nonce")] {
        let started = Api::new(&base).get("/signin/oidc").await;
        assert_eq!(started.status, 303, "{}", started.text);
        let location = started.headers["location"]
            .to_str()
            .expect("text")
            .to_owned();
        let set = started.headers["set-cookie"]
            .to_str()
            .expect("text")
            .to_owned();
        assert!(
            set.contains("SameSite=Lax") && set.contains("HttpOnly") && set.contains("Secure"),
            "{set}"
        );
        let ceremony = set
            .split(';')
            .next()
            .and_then(|p| p.strip_prefix("gatehouse_oidc="))
            .expect("the ceremony cookie")
            .to_owned();
        let mut url = url::Url::parse(&location).expect("the provider's URL");
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| {
                let v = if k == param {
                    format!("{v}-tampered")
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        url.query_pairs_mut().clear().extend_pairs(pairs);
        let c = browser(&driver, Screen::Desktop).await;
        c.goto(&format!("{base}/signin"))
            .await
            .expect("the sign-in page");
        let mut cookie = fantoccini::cookies::Cookie::new("gatehouse_oidc", ceremony);
        cookie.set_path("/signin/oidc");
        cookie.set_http_only(true);
        cookie.set_secure(true);
        cookie.set_domain("127.0.0.1");
        c.add_cookie(cookie)
            .await
            .expect("the ceremony cookie is set");
        c.goto(url.as_str()).await.expect("the provider");
        at_the_provider(&c, &issuer, "alice-at-idp").await;
        let why = refusal(&c).await;
        assert!(why.contains(words), "{param}: {why}");
        assert!(!has_session(&c).await, "{param}: no session");
        c.close().await.expect("closed");
    }
    server.stop().await;
}
