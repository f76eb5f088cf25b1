//! Served beyond loopback, safely: TLS from certificate files
//! (a certificate made here with rcgen, trusted by a rustls client), HSTS,
//! the one public name answered, forwarded headers believed only from the
//! trusted proxy, state changes only from the server's own origin, rate
//! limits on sign-in (429 with Retry-After), and `serve` refusing an
//! unsafe exposure in one line before it listens.

use crate::surfaces::web_api::{Answer, Api, PATIENCE, people_world, serve_with, with_json};
use gatehouse::store::Trust;
use gatehouse::web::{self, Exposure, PublicUrl, SigninRate, TlsFiles};
use gatehouse_e2e::{World, cli_command, stderr};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// Serve `w` with `exposure` (and `rate`) on an ephemeral port.
async fn serve_exposed(w: &World, exposure: Exposure, rate: SigninRate) -> web::Server {
    serve_with(
        w,
        web::Config {
            exposure,
            signin_rate: rate,
            ..web::Config::default()
        },
    )
    .await
}

/// A request from the loopback address `from` (127.0.0.0/8 is all this
/// machine's: a test can be a proxy and a stranger at once).
async fn from(
    from: &str,
    base: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<serde_json::Value>,
) -> Answer {
    let mut connector = HttpConnector::new();
    connector.set_local_address(Some(from.parse::<IpAddr>().expect("an address")));
    let http: HyperClient<HttpConnector, Full<Bytes>> =
        HyperClient::builder(TokioExecutor::new()).build(connector);
    let mut req = http::Request::builder()
        .method(method)
        .uri(format!("{base}{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let res = tokio::time::timeout(PATIENCE, http.request(with_json(req, body)))
        .await
        .expect("an answer in time")
        .expect("the request reaches the server");
    Answer::read(res).await
}

/// A GET of `path` from the loopback address `addr`, with these headers.
async fn get_from(addr: &str, base: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
    from(addr, base, "GET", path, headers, None).await
}

/// A sign-in attempt with `body` from the loopback address `addr`, with
/// these headers: what the rate limit and the proxy rules judge.
async fn sign_in_from(
    addr: &str,
    base: &str,
    headers: &[(&str, &str)],
    body: serde_json::Value,
) -> Answer {
    from(addr, base, "POST", "/api/session", headers, Some(body)).await
}

/// A certificate for the public name `inbox.example.test`, `localhost` and
/// 127.0.0.1, made here, written as PEM files; the DER to trust it by.
fn certificate(dir: &std::path::Path) -> (TlsFiles, Vec<u8>) {
    let made = rcgen::generate_simple_self_signed(vec![
        "inbox.example.test".into(),
        "localhost".into(),
        "127.0.0.1".into(),
    ])
    .expect("a self-signed certificate");
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    std::fs::write(&cert, made.cert.pem()).expect("the certificate is written");
    std::fs::write(&key, made.signing_key.serialize_pem()).expect("the key is written");
    (TlsFiles { cert, key }, made.cert.der().to_vec())
}

/// One HTTPS request to `port` on loopback, to the server named `name`
/// (TLS) with `Host: host`, trusting `root` only.
async fn https(
    port: u16,
    (name, host): (&str, &str),
    root: &[u8],
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> Answer {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from(root.to_vec()))
        .expect("the test certificate is a root");
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("a connection");
    let server_name = rustls::pki_types::ServerName::try_from(name.to_owned()).expect("a name");
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(server_name, tcp)
        .await
        .expect("the handshake succeeds with the certificate made here");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .expect("HTTP over TLS");
    tokio::spawn(conn);
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", host);
    let res = tokio::time::timeout(PATIENCE, sender.send_request(with_json(req, body)))
        .await
        .expect("an answer in time")
        .expect("an answer");
    Answer::read(res).await
}

#[tokio::test(flavor = "multi_thread")]
async fn web_serves_tls_from_certificate_files_with_hsts_and_strict_cookies() {
    let w = people_world(Trust::Byo).await;
    let dir = tempfile::tempdir().expect("a directory");
    let (files, root) = certificate(dir.path());
    let public = "inbox.example.test";

    // Under its public name (the port as a forwarder might map it).
    let server = serve_exposed(
        &w,
        Exposure {
            tls: Some(files.clone()),
            public_url: Some(PublicUrl::parse(&format!("https://{public}")).expect("a URL")),
            ..Exposure::default()
        },
        SigninRate::default(),
    )
    .await;
    let port = server.addr().port();
    assert_eq!(server.url(), format!("https://{public}"));
    let page = https(port, (public, public), &root, "GET", "/signin", None).await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert_eq!(
        page.headers["strict-transport-security"],
        "max-age=31536000"
    );
    assert!(page.text.contains("/assets/signin.js"));
    // Sign in over TLS: the session cookie is Secure, HttpOnly, Strict.
    let token = w.signin_token("alice");
    let a = https(
        port,
        (public, public),
        &root,
        "POST",
        "/api/session",
        Some(json!({ "token": token })),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text);
    let cookie = a.headers["set-cookie"].to_str().expect("text").to_owned();
    for part in ["HttpOnly", "Secure", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(part), "{cookie} lacks {part}");
    }
    assert_eq!(a.json()["user"], "alice");
    // A loopback name is not the public one.
    let local = format!("localhost:{port}");
    let a = https(port, ("localhost", &local), &root, "GET", "/signin", None).await;
    assert_eq!(a.status, 421, "{}", a.text);
    server.stop().await;

    // On loopback without a public URL: TLS, loopback names, and no HSTS
    // (it would pin every port of localhost).
    let server = serve_exposed(
        &w,
        Exposure {
            tls: Some(files),
            ..Exposure::default()
        },
        SigninRate::default(),
    )
    .await;
    let port = server.addr().port();
    assert_eq!(server.url(), format!("https://127.0.0.1:{port}"));
    let local = format!("127.0.0.1:{port}");
    let page = https(port, ("127.0.0.1", &local), &root, "GET", "/signin", None).await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(page.headers.get("strict-transport-security").is_none());

    // Plain HTTP to the TLS port gets no HTTP answer.
    let plain = tokio::time::timeout(
        PATIENCE,
        HyperClient::builder(TokioExecutor::new())
            .build_http::<Full<Bytes>>()
            .get(
                format!("http://127.0.0.1:{port}/signin")
                    .parse()
                    .expect("a URI"),
            ),
    )
    .await
    .expect("settled in time");
    assert!(
        plain.is_err(),
        "plain HTTP was answered: {:?}",
        plain.map(|r| r.status())
    );
    server.stop().await;

    // Files that are not a certificate and key are refused in one line.
    let bad = dir.path().join("not.pem");
    std::fs::write(&bad, "not a certificate").expect("written");
    let e = web::start(
        w.kernel.clone(),
        web::Config {
            port: 0,
            exposure: Exposure {
                tls: Some(TlsFiles {
                    cert: bad.clone(),
                    key: bad,
                }),
                ..Exposure::default()
            },
            ..web::Config::default()
        },
    )
    .await
    .err()
    .expect("refused");
    let e = format!("{e:#}");
    assert!(e.contains("not.pem") && !e.contains('\n'), "{e}");
}

#[tokio::test(flavor = "multi_thread")]
async fn web_believes_forwarded_headers_only_from_the_trusted_proxy() {
    let w = people_world(Trust::Byo).await;

    // Behind a proxy at 127.0.0.2, under the public name: the test is the
    // proxy (127.0.0.2) and a stranger (127.0.0.3) at once.
    let server = serve_exposed(
        &w,
        Exposure {
            trusted_proxy: Some(web::parse_proxy("127.0.0.2").expect("a proxy")),
            public_url: Some(PublicUrl::parse("https://inbox.example.test").expect("a URL")),
            ..Exposure::default()
        },
        SigninRate::default(),
    )
    .await;
    let base = format!("http://127.0.0.1:{}", server.addr().port());
    assert_eq!(server.url(), "https://inbox.example.test");
    let proxied = [
        ("host", "inbox.example.test"),
        ("x-forwarded-proto", "https"),
    ];

    // The public name is the one answered; loopback names are not.
    let a = get_from("127.0.0.2", &base, "/api/signin", &[]).await;
    assert_eq!(a.status, 421, "{}", a.text);
    assert!(a.error().contains("https://inbox.example.test"));
    let a = get_from("127.0.0.2", &base, "/api/signin", &proxied).await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(a.headers["strict-transport-security"], "max-age=31536000");
    // The proxy's X-Forwarded-Host is believed.
    let forwarded_host = [
        ("host", "127.0.0.1"),
        ("x-forwarded-host", "inbox.example.test"),
        ("x-forwarded-proto", "https"),
    ];
    let a = get_from("127.0.0.2", &base, "/api/signin", &forwarded_host).await;
    assert_eq!(a.status, 200, "the proxy's forwarded host: {}", a.text);
    // The proxy says a request came in clear text: sent to https.
    let clear = [
        ("host", "inbox.example.test"),
        ("x-forwarded-proto", "http"),
    ];
    let a = get_from("127.0.0.2", &base, "/signin?x=1", &clear).await;
    assert_eq!(a.status, 308, "{}", a.text);
    assert_eq!(
        a.headers["location"],
        "https://inbox.example.test/signin?x=1"
    );
    // A stranger who says the same things is not believed: its request came
    // in clear text, whatever it claims, and a change is refused.
    let a = get_from("127.0.0.3", &base, "/signin", &proxied).await;
    assert_eq!(a.status, 308, "a stranger's X-Forwarded-Proto: {}", a.text);
    let a = sign_in_from("127.0.0.3", &base, &proxied, json!({ "token": "x" })).await;
    assert_eq!(a.status, 421, "{}", a.text);
    let a = get_from("127.0.0.3", &base, "/api/signin", &forwarded_host).await;
    assert_eq!(a.status, 421, "a stranger's X-Forwarded-Host: {}", a.text);
    server.stop().await;

    // On loopback behind the same proxy: who the client is, for the rate
    // limit, comes from the proxy's X-Forwarded-For only.
    let server = serve_exposed(
        &w,
        Exposure {
            trusted_proxy: Some(web::parse_proxy("127.0.0.2").expect("a proxy")),
            ..Exposure::default()
        },
        SigninRate {
            burst: 2,
            every: Duration::from_secs(3600),
        },
    )
    .await;
    let base = format!("http://127.0.0.1:{}", server.addr().port());
    let host = format!("127.0.0.1:{}", server.addr().port());
    let wrong = json!({ "token": "no-such-token" });
    // A stranger's X-Forwarded-For does not change who it is: two tries,
    // then 429 for its own address whatever it claims.
    for i in 0..2 {
        let claimed = format!("203.0.113.{i}");
        let h = [
            ("host", host.as_str()),
            ("x-forwarded-for", claimed.as_str()),
        ];
        let a = sign_in_from("127.0.0.3", &base, &h, wrong.clone()).await;
        assert_eq!(a.status, 401, "{}", a.text);
    }
    let h = [("host", host.as_str()), ("x-forwarded-for", "203.0.113.99")];
    let a = sign_in_from("127.0.0.3", &base, &h, wrong.clone()).await;
    assert_eq!(a.status, 429, "{}", a.text);
    assert!(
        a.error().contains("127.0.0.3"),
        "keyed by the real address: {}",
        a.text
    );
    // From the proxy, the last forwarded address is the client: each has
    // its own budget.
    let client_a = [
        ("host", host.as_str()),
        ("x-forwarded-for", "6.6.6.6, 198.51.100.1"),
    ];
    for _ in 0..2 {
        let a = sign_in_from("127.0.0.2", &base, &client_a, wrong.clone()).await;
        assert_eq!(a.status, 401, "{}", a.text);
    }
    let a = sign_in_from("127.0.0.2", &base, &client_a, wrong.clone()).await;
    assert_eq!(a.status, 429, "{}", a.text);
    assert!(a.error().contains("198.51.100.1"), "{}", a.text);
    let client_b = [("host", host.as_str()), ("x-forwarded-for", "198.51.100.2")];
    let a = sign_in_from("127.0.0.2", &base, &client_b, wrong).await;
    assert_eq!(a.status, 401, "another client behind the proxy: {}", a.text);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn web_rate_limits_sign_in_with_429_and_retry_after_and_refuses_other_origins() {
    let w = people_world(Trust::Byo).await;
    let server = serve_exposed(
        &w,
        Exposure::default(),
        SigninRate {
            burst: 3,
            every: Duration::from_secs(600),
        },
    )
    .await;
    let api = Api::new(&server.url());

    // A state change from another site's page is refused whatever it
    // carries; the server's own origin is accepted.
    let token = w.signin_token("alice");
    let a = api
        .send(
            "POST",
            "/api/session",
            Some(json!({ "token": token })),
            &[("origin", "https://evil.example")],
        )
        .await;
    assert_eq!(a.status, 403, "{}", a.text);
    assert!(a.error().contains("another site"));
    let own = server.url();
    let a = api
        .send(
            "POST",
            "/api/session",
            Some(json!({ "token": token })),
            &[("origin", own.as_str())],
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.text);

    // Three sign-in attempts in all (one was refused before the limit),
    // then 429 with a Retry-After in seconds, on every sign-in endpoint.
    for _ in 0..2 {
        let a = api.post("/api/session", json!({ "token": "wrong" })).await;
        assert_eq!(a.status, 401, "{}", a.text);
    }
    for (method, path) in [
        ("POST", "/api/session"),
        ("POST", "/api/passkeys/signin/start"),
        ("GET", "/signin/oidc"),
    ] {
        let a = api
            .send(
                method,
                path,
                (method == "POST").then(|| json!({ "token": "wrong" })),
                &[],
            )
            .await;
        assert_eq!(a.status, 429, "{method} {path}: {}", a.text);
        let after: u64 = a.headers["retry-after"]
            .to_str()
            .expect("text")
            .parse()
            .expect("seconds");
        assert!((1..=600).contains(&after), "{after}");
        assert!(
            a.error().contains("too many sign-in attempts"),
            "{}",
            a.text
        );
    }
    // What is not a sign-in is not limited.
    assert_eq!(api.get("/api/signin").await.status, 200);
    assert_eq!(api.get("/signin").await.status, 200);
    server.stop().await;
}

#[test]
fn serve_refuses_an_unsafe_exposure_in_one_line() {
    let home = tempfile::tempdir().expect("a home");
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["--bind", "0.0.0.0"],
            &["clear text", "--tls-cert", "--trusted-proxy"],
        ),
        (
            &["--bind", "0.0.0.0", "--trusted-proxy", "10.0.0.1"],
            &["--public-url"],
        ),
        (
            &[
                "--bind",
                "0.0.0.0",
                "--trusted-proxy",
                "10.0.0.1",
                "--public-url",
                "http://inbox.example.com",
            ],
            &["clear text", "https://"],
        ),
        (
            &[
                "--bind",
                "0.0.0.0",
                "--trusted-proxy",
                "0.0.0.0/0",
                "--public-url",
                "https://inbox.example.com",
            ],
            &["every address"],
        ),
        (
            &["--public-url", "https://inbox.example.com/inbox"],
            &["root of its name"],
        ),
        (&["--bind", "not-an-address"], &["--bind"]),
    ];
    for (args, words) in cases {
        let mut all = vec!["serve", "--port", "0"];
        all.extend_from_slice(args);
        let o = cli_command(home.path(), &all).output().expect("serve runs");
        assert!(!o.status.success(), "{args:?} was served");
        let err = stderr(&o);
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        for w in *words {
            assert!(err.contains(w), "{args:?}: {err} lacks {w}");
        }
    }
}
