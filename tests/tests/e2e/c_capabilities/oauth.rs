//! OAuth 2.1 accounts: `gatehouse account connect USER GATEKEEPER --oauth`
//! against a real authorization server (the tests' `oidc-provider`, with
//! dynamic client registration, resource indicators, refresh tokens and
//! introspection) in front of a real MCP server that requires its tokens
//! (the official Python SDK's auth support, tests/mcp/server.py --oauth),
//! reached through the `mcp` gatekeeper by the real `script` gadget.

use gatehouse::store::Trust;
use gatehouse_e2e::oauth::{
    OAuthMcpServer, Person, SUBJECT, authorization_server, grants, introspect, request,
    revoke_grants, server_log,
};
use gatehouse_e2e::oidc::Provider;
use gatehouse_e2e::{World, call, cli_command, guest, stderr, stdout, wait_until};
use serde_json::{Value, json};
use std::io::{BufRead as _, BufReader};
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The installation's own credential at the MCP server: it describes the
/// server's tools at install; a person's reads must never go out under it.
const OPERATOR: &str = "operator-tok-77c1";
/// Access tokens live this long (seconds), so one expires mid-test.
const TTL: u64 = 10;

struct OAuthWorld {
    w: World,
    server: OAuthMcpServer,
    issuer: Provider,
}

async fn oauth_world() -> OAuthWorld {
    let issuer = authorization_server(TTL);
    let server = OAuthMcpServer::start(&issuer.issuer, OPERATOR);
    let w = World::new();
    w.install("script");
    w.front(
        "svc",
        "mcp",
        Trust::Byo,
        vec![server.host()],
        Some(("mcp-operator", OPERATOR)),
        vec![("url".into(), server.url())],
    )
    .await
    .expect("the mcp gatekeeper is added");
    w.kernel.operator().add_user("alice").unwrap();
    w.chat_with("work", "alice", &[("svc", "SVC")]);
    OAuthWorld { w, server, issuer }
}

/// Run `account connect alice svc --oauth` as a person would: read the
/// URL it prints, first knock on its redirect with a wrong state (refused,
/// and the command keeps waiting), then sign in and consent at the
/// provider. Returns the command's stdout and stderr.
fn connect(ow: &OAuthWorld) -> (String, String) {
    sign_in(
        ow.w.home(),
        &[
            "account",
            "connect",
            "alice",
            "svc",
            "--oauth",
            "--timeout",
            "2m",
        ],
        &ow.issuer.issuer,
        &ow.server.url(),
    )
}

/// Run a command that begins an OAuth flow (`args`), and be the person:
/// read the URL it prints, knock on its redirect with a wrong state first
/// (refused, the command keeps waiting), then sign in and consent at
/// `issuer`. The URL must name `resource`. The command's stdout and
/// stderr.
fn sign_in(
    home: &std::path::Path,
    args: &[&str],
    issuer: &str,
    resource: &str,
) -> (String, String) {
    let mut child = cli_command(home, args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the gatehouse binary runs");
    let mut err = BufReader::new(child.stderr.take().expect("its stderr"));
    let mut said = String::new();
    let url = loop {
        let mut line = String::new();
        let n = err.read_line(&mut line).expect("its stderr is read");
        assert!(n > 0, "the command ended without a URL: {said}");
        said.push_str(&line);
        if let Some(u) = line.trim().strip_prefix("open this URL in a browser: ") {
            break u.to_owned();
        }
    };
    let redirect = query_param(&url, "redirect_uri").expect("the URL names its redirect");
    assert!(
        redirect.starts_with("http://127.0.0.1:"),
        "a loopback redirect: {redirect}"
    );
    assert!(
        query_param(&url, "resource").is_some_and(|r| r == resource),
        "the resource indicator names the MCP server: {url}"
    );
    assert_eq!(
        query_param(&url, "code_challenge_method").as_deref(),
        Some("S256")
    );

    // Someone else's answer (a wrong state) is refused.
    let (status, _, body) = request(
        "GET",
        &format!("{redirect}?code=forged&state=not-the-flows"),
        &[],
        None,
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("wrong state"), "{body}");

    let (landed, status, body) = Person::default().authorize(&url, issuer, SUBJECT);
    assert!(landed.starts_with(&redirect), "{landed}");
    assert_eq!(status, 200, "{body}");
    let rest = {
        use std::io::Read as _;
        let mut rest = String::new();
        err.read_to_string(&mut rest).expect("the rest of stderr");
        rest
    };
    said.push_str(&rest);
    let out = child.wait_with_output().expect("the command ends");
    assert!(out.status.success(), "{said}");
    (stdout(&out), said)
}

fn query_param(url: &str, name: &str) -> Option<String> {
    let query = url.split_once('?')?.1;
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == name).then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).expect("hex");
                out.push(u8::from_str_radix(hex, 16).expect("a percent escape"));
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).expect("UTF-8")
}

async fn read(w: &World) -> Value {
    w.script("work", json!([call("SVC", "get_item", json!({"id": 7}))]))
        .await
}

/// A gated read of item 7 that must succeed; the person's token it went
/// out under (the last one the service saw).
async fn read_item(ow: &OAuthWorld) -> String {
    let answer = read(&ow.w).await;
    assert_eq!(
        answer[0]["done"]["content"][0]["text"], "item 7",
        "{answer}"
    );
    person_tokens(&ow.server)
        .last()
        .cloned()
        .expect("the read carried the person's token")
}

/// The tokens a person's calls carried (the operator's excluded).
fn person_tokens(server: &OAuthMcpServer) -> Vec<String> {
    server
        .tokens()
        .into_iter()
        .filter(|t| t != OPERATOR)
        .collect()
}

/// No file of the home (the SQLite database, its journal) holds any of
/// `tokens`.
fn assert_home_never_holds(w: &World, tokens: &[String]) {
    let mut files = vec![w.home().to_path_buf()];
    let mut seen = 0;
    while let Some(p) = files.pop() {
        if p.is_dir() {
            for e in std::fs::read_dir(&p).expect("the home is readable") {
                files.push(e.expect("an entry").path());
            }
            continue;
        }
        let Ok(bytes) = std::fs::read(&p) else {
            continue;
        };
        seen += 1;
        for t in tokens {
            assert!(
                !bytes.windows(t.len()).any(|w| w == t.as_bytes()),
                "{} holds a token in clear",
                p.display()
            );
        }
    }
    assert!(seen > 0, "the home has files");
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_oauth_account_is_discovered_registered_connected_and_refreshed() {
    let ow = oauth_world().await;
    let issuer = ow.issuer.issuer.clone();
    let (out, err) = connect(&ow);
    assert!(
        out.contains("connected account alice/alice at svc by OAuth"),
        "{out}{err}"
    );
    // The client was registered dynamically and the code exchanged.
    assert_eq!(grants(&issuer, "authorization_code", true), 1);

    // (a) A gated read goes out under alice's OAuth access token.
    let first = read_item(&ow).await;
    assert_eq!(introspect(&issuer, &first)["active"], true);
    assert_eq!(introspect(&issuer, &first)["sub"], SUBJECT);

    // (b) The token expires mid-run; the next read refreshes first.
    let refreshed_before = grants(&issuer, "refresh_token", true);
    assert!(
        wait_until(Duration::from_secs(TTL * 6), || {
            introspect(&issuer, &first)["active"] == false
        }),
        "the first access token expires"
    );
    // Its answer is kept: no token may show in what the gadget got.
    let answer = read(&ow.w).await;
    assert_eq!(
        answer[0]["done"]["content"][0]["text"], "item 7",
        "{answer}"
    );
    assert!(
        grants(&issuer, "refresh_token", true) > refreshed_before,
        "the host refreshed: {}",
        server_log(&issuer)
    );
    let tokens = person_tokens(&ow.server);
    let last = tokens.last().expect("a token").clone();
    assert_ne!(last, first, "the read carried the new token");
    assert_eq!(introspect(&issuer, &last)["active"], true);
    // Every call carried an active token: none went out expired.
    assert_eq!(ow.server.calls().len(), 2);

    // The tokens are nowhere a guest, a person or the disk sees them.
    let mut secrets: Vec<String> = tokens.clone();
    let refresh_tokens: Vec<String> = server_log(&issuer)["refresh_tokens"]
        .as_array()
        .expect("refresh tokens")
        .iter()
        .map(|t| t.as_str().expect("a token").to_owned())
        .collect();
    assert!(refresh_tokens.len() >= 2, "issued and rotated");
    secrets.extend(refresh_tokens);
    let listed = ow.w.cli(&["account", "list"]);
    let shown = format!("{out}{err}{answer}{}{}", stdout(&listed), stderr(&listed));
    assert!(shown.contains("alice/alice"), "{shown}");
    for t in &secrets {
        assert!(!shown.contains(t.as_str()), "a token was shown");
    }
    assert_home_never_holds(&ow.w, &secrets);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revoked_grant_refuses_the_call_with_a_reconnect_line() {
    let ow = oauth_world().await;
    let issuer = ow.issuer.issuer.clone();
    connect(&ow);
    let token = read_item(&ow).await;
    let exp = introspect(&issuer, &token)["exp"]
        .as_u64()
        .expect("the token's expiry");

    // The person's grant is ended at the server; once the access token's
    // time is up, the host must refresh, and the refresh is refused.
    revoke_grants(&issuer);
    assert_eq!(introspect(&issuer, &token)["active"], false);
    assert!(
        wait_until(Duration::from_secs(TTL * 6), || now_s() > exp),
        "the access token's lifetime ends"
    );
    let sent = ow.server.tokens().len();
    let refused_before = grants(&issuer, "refresh_token", false);
    let answer = read(&ow.w).await;
    let message = answer[0]["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("refused: {answer}"));
    assert!(
        message.contains("reconnect it with `gatehouse account connect alice svc --oauth"),
        "{message}"
    );
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(!message.contains(&token), "{message}");
    assert_eq!(
        grants(&issuer, "refresh_token", false),
        refused_before + 1,
        "{}",
        server_log(&issuer)
    );
    // Nothing went out: neither the stale token nor the operator's.
    assert_eq!(ow.server.tokens().len(), sent);
    assert_eq!(ow.server.calls().len(), 1);
}

/// The value of cookie `name` among an answer's `set-cookie` headers.
fn set_cookie(headers: &[(String, String)], name: &str) -> Option<String> {
    headers.iter().find_map(|(k, v)| {
        let (pair, _) = v.split_once(';').unwrap_or((v.as_str(), ""));
        let (n, value) = pair.split_once('=')?;
        (k == "set-cookie" && n.trim() == name).then(|| value.trim().to_owned())
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_signed_in_person_connects_an_oauth_account_from_the_web_inbox() {
    let ow = oauth_world().await;
    let issuer = ow.issuer.issuer.clone();
    let web = crate::surfaces::web_api::serve(&ow.w).await;
    let base = web.url();
    let token = ow.w.signin_token("alice");
    let base2 = base.clone();
    let (session, started, flow) = tokio::task::spawn_blocking(move || {
        let (status, headers, body) = request(
            "POST",
            &format!("{base2}/api/session"),
            &[("content-type", "application/json")],
            Some(&json!({ "token": token }).to_string()),
        );
        assert_eq!(status, 200, "{body}");
        let session = set_cookie(&headers, "gatehouse_session").expect("a session cookie");
        let csrf = serde_json::from_str::<Value>(&body).expect("JSON")["csrf"]
            .as_str()
            .expect("a CSRF token")
            .to_owned();
        let cookie = format!("gatehouse_session={session}");
        let (status, _, body) = request(
            "GET",
            &format!("{base2}/api/accounts"),
            &[("cookie", &cookie)],
            None,
        );
        assert_eq!(status, 200, "{body}");
        let listed: Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(listed["connectable"], json!(["svc"]), "{listed}");
        assert_eq!(listed["accounts"], json!([]), "{listed}");
        let connect = json!({ "gatekeeper": "svc", "label": "web" }).to_string();
        // Without the CSRF token, nothing begins.
        let (status, _, body) = request(
            "POST",
            &format!("{base2}/api/accounts/oauth"),
            &[("cookie", &cookie), ("content-type", "application/json")],
            Some(&connect),
        );
        assert_eq!(status, 403, "{body}");
        let (status, headers, body) = request(
            "POST",
            &format!("{base2}/api/accounts/oauth"),
            &[
                ("cookie", &cookie),
                ("x-csrf-token", &csrf),
                ("content-type", "application/json"),
            ],
            Some(&connect),
        );
        assert_eq!(status, 200, "{body}");
        let started = serde_json::from_str::<Value>(&body).expect("JSON")["url"]
            .as_str()
            .expect("the authorization URL")
            .to_owned();
        let flow = set_cookie(&headers, "gatehouse_oauth").expect("the flow's cookie");
        (session, started, flow)
    })
    .await
    .expect("the sign-in and the start");
    assert_eq!(
        query_param(&started, "redirect_uri").as_deref(),
        Some(format!("{base}/oauth/callback").as_str())
    );

    let base2 = base.clone();
    let issuer2 = issuer.clone();
    let (landed, status, body) = tokio::task::spawn_blocking(move || {
        // (e) An answer with a wrong state is refused, and spends nothing.
        let (status, _, body) = request(
            "GET",
            &format!("{base2}/oauth/callback?state=not-the-flows&code=forged"),
            &[(
                "cookie",
                &format!("gatehouse_oauth={flow}; gatehouse_session={session}"),
            )],
            None,
        );
        assert_eq!(status, 400, "{body}");
        assert!(body.contains("wrong state"), "{body}");
        // The person signs in and consents; the server sends the browser
        // back to the inbox's callback, with the flow's cookie.
        Person::default()
            .with_cookie("gatehouse_oauth", &flow)
            .authorize(&started, &issuer2, SUBJECT)
    })
    .await
    .expect("the person at the provider");
    assert!(
        landed.starts_with(&format!("{base}/oauth/callback?")),
        "{landed}"
    );
    assert_eq!(status, 303, "{body}");

    // The account is the person's, and a read goes out under it.
    let accounts = ow.w.kernel.person("alice").accounts().expect("accounts");
    assert!(
        accounts
            .iter()
            .any(|a| a.gatekeeper == "svc" && a.label == "web"),
        "{accounts:?}"
    );
    let token = read_item(&ow).await;
    assert_eq!(introspect(&issuer, &token)["active"], true);

    // The same answer again finds no flow: it was spent.
    let again = tokio::task::spawn_blocking(move || request("GET", &landed, &[], None).0)
        .await
        .expect("the replay");
    assert_eq!(again, 400);
    web.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn web_browser_connects_an_oauth_account_with_the_connect_button() {
    use crate::chromium::{Driver, Screen, browser};
    use crate::surfaces::web_browser::{screenshot, sign_in, wait_for};
    use crate::surfaces::web_signin::{at_the_provider, click, type_into};
    let driver = Driver::start();
    let ow = oauth_world().await;
    let issuer = ow.issuer.issuer.clone();
    let web = crate::surfaces::web_api::serve(&ow.w).await;
    let base = web.url();
    let c = browser(&driver, Screen::Desktop).await;
    sign_in(&c, &ow.w, &base, "alice").await;
    c.goto(&format!("{base}/account"))
        .await
        .expect("the account page");
    wait_for(
        &c,
        "the Connect button for svc, and no account yet",
        "return !!document.querySelector('form.oauth-connect[data-gatekeeper=svc] button') && !document.getElementById('accounts-empty').hidden",
    )
    .await;
    type_into(
        &c,
        "form.oauth-connect[data-gatekeeper=svc] input",
        "browser",
    )
    .await;
    click(&c, "form.oauth-connect[data-gatekeeper=svc] button").await;

    // At the provider: the development login form, then consent.
    at_the_provider(&c, &issuer, SUBJECT).await;

    // Back on the account page, connected.
    wait_for(
        &c,
        "the account listed on the account page",
        "return location.pathname === '/account' && document.getElementById('accounts').textContent.includes('browser at svc')",
    )
    .await;
    screenshot(&c, "oauth-account-connected").await;
    let token = read_item(&ow).await;
    assert_eq!(introspect(&issuer, &token)["active"], true);
    let page = c.source().await.expect("the page's source");
    assert!(!page.contains(&token), "the page never holds a token");
    c.close().await.expect("the browser closes");
    web.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operator_signs_in_once_to_add_a_server_that_takes_only_oauth() {
    let issuer = authorization_server(TTL);
    // No static token at all: every request needs a token from the issuer.
    let server = OAuthMcpServer::start(&issuer.issuer, "");
    let w = World::new();
    w.install("script");
    let gk = guest("mcp");
    let gk = gk.to_str().expect("a UTF-8 path");
    let url = server.url();
    let host = server.host();
    let add = |name: &str, secret: &str| {
        w.cli(&[
            "gatekeeper",
            "add",
            gk,
            "--name",
            name,
            "--allow-host",
            &host,
            "--secret",
            secret,
            "--set",
            &format!("url={url}"),
        ])
    };

    // A static token it never issued: the server refuses the listing.
    let mut set = cli_command(w.home(), &["secret", "set", "stale"]);
    let typed = set
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the cli runs");
    {
        use std::io::Write as _;
        let mut stdin = typed.stdin.as_ref().expect("its stdin");
        stdin.write_all(b"not-a-token").expect("written");
    }
    assert!(typed.wait_with_output().expect("it ends").status.success());
    let refused = add("svc", "stale");
    assert!(!refused.status.success());
    assert!(stderr(&refused).contains("401"), "{}", stderr(&refused));

    // The operator signs in once; the grant lists the tools.
    let (out, err) = sign_in(
        w.home(),
        &[
            "secret",
            "set",
            "op",
            "--oauth",
            "--url",
            &url,
            "--timeout",
            "2m",
        ],
        &issuer.issuer,
        &url,
    );
    assert!(
        out.contains("stored secret op: an OAuth credential for"),
        "{out}{err}"
    );
    let added = add("svc", "op");
    assert!(added.status.success(), "{}", stderr(&added));
    assert!(
        stdout(&added).contains("added gatekeeper svc"),
        "{}",
        stdout(&added)
    );

    // The owner's read goes out under it, refreshed when it expires.
    w.chat_with("work", "alice", &[("svc", "SVC")]);
    let answer = read(&w).await;
    assert_eq!(
        answer[0]["done"]["content"][0]["text"], "item 7",
        "{answer}"
    );
    let first = server.tokens().last().cloned().expect("a token arrived");
    assert!(
        wait_until(Duration::from_secs(TTL * 6), || {
            introspect(&issuer.issuer, &first)["active"] == false
        }),
        "the first access token expires"
    );
    let answer = read(&w).await;
    assert_eq!(
        answer[0]["done"]["content"][0]["text"], "item 7",
        "{answer}"
    );
    assert_eq!(grants(&issuer.issuer, "refresh_token", true), 1);
    let tokens = server.tokens();
    assert_ne!(tokens.last(), Some(&first), "the new token went out");
    assert_home_never_holds(&w, &tokens);

    // A grant is sent only to the service it was issued for.
    let other = w.cli(&[
        "gatekeeper",
        "add",
        gk,
        "--name",
        "elsewhere",
        "--allow-host",
        "127.0.0.1:9",
        "--secret",
        "op",
        "--set",
        "url=http://127.0.0.1:9/mcp",
    ]);
    assert!(!other.status.success());
    assert!(
        stderr(&other).contains("was issued for"),
        "{}",
        stderr(&other)
    );
    // And a pasted value is never taken for a grant.
    let mut set = cli_command(w.home(), &["secret", "set", "forged"]);
    let typed = set
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the cli runs");
    {
        use std::io::Write as _;
        let mut stdin = typed.stdin.as_ref().expect("its stdin");
        stdin
            .write_all(b"gatehouse-oauth-grant/v1:{}")
            .expect("written");
    }
    let o = typed.wait_with_output().expect("it ends");
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("looks like a stored OAuth grant"),
        "{}",
        stderr(&o)
    );
}
