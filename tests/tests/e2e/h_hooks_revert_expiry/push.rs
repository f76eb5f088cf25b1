//! Web Push beside the webhook. A person subscribes a device through the
//! API (session and CSRF); `serve` pushes it, batched, a count and chat
//! names only, encrypted for the device and signed with the deployment's
//! VAPID key; a push service that says the device is gone removes it, and
//! one that is busy is tried again later.
//!
//! The push service is a stand-in on loopback speaking TLS with a test
//! authority (a private destination, which the operator allows here
//! explicitly). It does what a push service and a browser do with a
//! push: it checks the VAPID token against the key the API served, and
//! opens the message with the device's own key (RFC 8291), with its own
//! code (p256, hkdf, aes-gcm), not the host's.

use crate::surfaces::web_api::{Answer, Api, MARKUP_SINKS, PATIENCE, people_world, stage_labels};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
use gatehouse::notify::Destinations;
use gatehouse::push::{Outcome, Push, PushSent, Settings};
use gatehouse::store::{PushKeys, Trust};
use gatehouse_e2e::wait_until;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SUBJECT: &str = "mailto:ops@example.com";

/// One push as the stand-in received it.
#[derive(Clone, Debug)]
struct Received {
    at: Instant,
    path: String,
    headers: http::HeaderMap,
    body: Vec<u8>,
}

/// A status to answer, with a `Retry-After`.
type Scripted = (u16, Option<&'static str>);
/// What the stand-in answers, path by path, in order.
type Script = Arc<Mutex<HashMap<String, VecDeque<Scripted>>>>;

/// A push service on loopback, over TLS: keeps every request, and answers
/// each path with its scripted statuses (then 201).
struct StandIn {
    port: u16,
    roots: rustls::RootCertStore,
    got: Arc<Mutex<Vec<Received>>>,
    script: Script,
}

impl StandIn {
    async fn start() -> StandIn {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let ca = gatehouse_pg_cluster::Authority::new("push stand-in CA").unwrap();
        let (cert, key) = ca.server(&["127.0.0.1"]).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca.pem.as_bytes()).unwrap())
            .unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
            PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
        )
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let got = Arc::new(Mutex::new(Vec::new()));
        let script: Script = Arc::default();
        let (log, answers) = (got.clone(), script.clone());
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, log, answers) = (acceptor.clone(), log.clone(), answers.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(
                        move |req: http::Request<hyper::body::Incoming>| {
                            let (log, answers) = (log.clone(), answers.clone());
                            async move {
                                use http_body_util::BodyExt as _;
                                let (parts, body) = req.into_parts();
                                let body = body.collect().await?.to_bytes().to_vec();
                                let path = parts.uri.path().to_owned();
                                log.lock().unwrap().push(Received {
                                    at: Instant::now(),
                                    path: path.clone(),
                                    headers: parts.headers,
                                    body,
                                });
                                let (status, retry_after) = answers
                                    .lock()
                                    .unwrap()
                                    .get_mut(&path)
                                    .and_then(VecDeque::pop_front)
                                    .unwrap_or((201, None));
                                let mut res = http::Response::builder().status(status);
                                if let Some(r) = retry_after {
                                    res = res.header("retry-after", r);
                                }
                                Ok::<_, hyper::Error>(
                                    res.body(http_body_util::Full::new(hyper::body::Bytes::new()))
                                        .unwrap(),
                                )
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        StandIn {
            port,
            roots,
            got,
            script,
        }
    }

    fn endpoint(&self, device: &str) -> String {
        format!("https://127.0.0.1:{}/push/{device}", self.port)
    }

    fn origin(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    fn answer(&self, device: &str, answers: &[Scripted]) {
        self.script
            .lock()
            .unwrap()
            .insert(format!("/push/{device}"), answers.iter().copied().collect());
    }

    fn got(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    fn to(&self, device: &str) -> Vec<Received> {
        let path = format!("/push/{device}");
        self.got().into_iter().filter(|r| r.path == path).collect()
    }
}

/// A browser's side of a subscription: its key pair and secret, made
/// from `name` (deterministic, like everything in a test).
struct Device {
    name: String,
    secret: p256::SecretKey,
    auth: [u8; 16],
}

impl Device {
    fn new(name: &str) -> Device {
        let seed = Sha256::digest(format!("device key {name}"));
        let auth: [u8; 16] = Sha256::digest(format!("device auth {name}"))[..16]
            .try_into()
            .unwrap();
        Device {
            name: name.to_owned(),
            secret: p256::SecretKey::from_slice(&seed).unwrap(),
            auth,
        }
    }

    fn p256dh(&self) -> String {
        use p256::elliptic_curve::sec1::ToEncodedPoint as _;
        B64URL.encode(self.secret.public_key().to_encoded_point(false).as_bytes())
    }

    /// `PushSubscription.toJSON()` for this device at `service`.
    fn subscription(&self, service: &StandIn) -> Value {
        json!({
            "endpoint": service.endpoint(&self.name),
            "expirationTime": null,
            "keys": { "p256dh": self.p256dh(), "auth": B64URL.encode(self.auth) },
        })
    }

    fn keys(&self, service: &StandIn) -> PushKeys {
        PushKeys {
            endpoint: service.endpoint(&self.name),
            p256dh: self.p256dh(),
            auth: B64URL.encode(self.auth),
        }
    }

    /// Open an `aes128gcm` push message (RFC 8291, RFC 8188) as the
    /// browser does: one record, padded with a 2 then zeros.
    fn open(&self, body: &[u8]) -> Vec<u8> {
        use aes_gcm::aead::{Aead as _, KeyInit as _};
        use p256::elliptic_curve::sec1::ToEncodedPoint as _;
        let salt = &body[..16];
        let rs = u32::from_be_bytes(body[16..20].try_into().unwrap()) as usize;
        let idlen = usize::from(body[20]);
        let sender = &body[21..21 + idlen];
        let sealed = &body[21 + idlen..];
        assert!(sealed.len() <= rs, "one record");
        let sender_key = p256::PublicKey::from_sec1_bytes(sender).expect("the sender's key");
        let shared =
            p256::ecdh::diffie_hellman(self.secret.to_nonzero_scalar(), sender_key.as_affine());
        let mut info = b"WebPush: info\0".to_vec();
        info.extend_from_slice(self.secret.public_key().to_encoded_point(false).as_bytes());
        info.extend_from_slice(sender);
        let mut ikm = [0u8; 32];
        hkdf::Hkdf::<Sha256>::new(Some(&self.auth), shared.raw_secret_bytes().as_slice())
            .expand(&info, &mut ikm)
            .unwrap();
        let prk = hkdf::Hkdf::<Sha256>::new(Some(salt), &ikm);
        let (mut cek, mut nonce) = ([0u8; 16], [0u8; 12]);
        prk.expand(b"Content-Encoding: aes128gcm\0", &mut cek)
            .unwrap();
        prk.expand(b"Content-Encoding: nonce\0", &mut nonce)
            .unwrap();
        let plain = aes_gcm::Aes128Gcm::new(&cek.into())
            .decrypt(&nonce.into(), sealed)
            .expect("the message opens with the device's key");
        let end = plain.iter().rposition(|b| *b != 0).expect("a delimiter");
        assert_eq!(plain[end], 2, "the last record's delimiter");
        plain[..end].to_vec()
    }
}

/// Check a push's VAPID authorization as a push service does: the key is
/// the one the API served, the ES256 signature verifies with it, `aud` is
/// the service's origin, `exp` within 24 hours, `sub` the contact.
fn check_vapid(r: &Received, served_key: &str, origin: &str) {
    use p256::ecdsa::signature::Verifier as _;
    let auth = r.headers["authorization"].to_str().unwrap();
    let rest = auth.strip_prefix("vapid t=").expect("the vapid scheme");
    let (token, k) = rest.split_once(", k=").expect("t and k");
    assert_eq!(k, served_key, "the key the page subscribed with");
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3);
    let key = p256::ecdsa::VerifyingKey::from_sec1_bytes(&B64URL.decode(served_key).unwrap())
        .expect("a P-256 key");
    let sig = p256::ecdsa::Signature::from_slice(&B64URL.decode(parts[2]).unwrap()).unwrap();
    key.verify(format!("{}.{}", parts[0], parts[1]).as_bytes(), &sig)
        .expect("the token is signed with the served key");
    let header: Value = serde_json::from_slice(&B64URL.decode(parts[0]).unwrap()).unwrap();
    assert_eq!(header["alg"], "ES256");
    let claims: Value = serde_json::from_slice(&B64URL.decode(parts[1]).unwrap()).unwrap();
    assert_eq!(claims["aud"], origin);
    assert_eq!(claims["sub"], SUBJECT);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let exp = claims["exp"].as_u64().expect("exp");
    assert!(exp > now && exp <= now + 24 * 3600, "exp {exp}, now {now}");
    assert_eq!(r.headers["content-encoding"], "aes128gcm");
    assert!(r.headers.contains_key("ttl"));
}

async fn serve_with_push(
    w: &gatehouse_e2e::World,
    service: &StandIn,
    allowed: Destinations,
) -> gatehouse::web::Server {
    crate::surfaces::web_api::serve_with(
        w,
        gatehouse::web::Config {
            notify_every: Duration::from_secs(1),
            notify_destinations: allowed,
            tick: Duration::from_millis(100),
            push: Some(Settings::new(SUBJECT).trusting(service.roots.clone())),
            ..gatehouse::web::Config::default()
        },
    )
    .await
}

/// Where the API takes a device's subscription.
const SUBSCRIPTIONS: &str = "/api/push/subscriptions";

/// `api`'s person subscribes a device, as the page does with the
/// browser's `PushSubscription`; the server's answer.
async fn subscribe(api: &Api, subscription: Value) -> Answer {
    api.post(SUBSCRIPTIONS, subscription).await
}

/// `api`'s person removes the device `id`; the server's answer.
async fn unsubscribe(api: &Api, id: &str) -> Answer {
    api.send("DELETE", &format!("{SUBSCRIPTIONS}/{id}"), None, &[])
        .await
}

/// The devices `api`'s person sees listed as theirs.
async fn devices(api: &Api) -> Value {
    api.get("/api/push").await.json()["devices"].clone()
}

/// One push pass of `serve`'s loop, sending only to `allowed`
/// destinations, with no batching delay: what it sent, device by device.
async fn pass(w: &gatehouse_e2e::World, push: &Push, allowed: Destinations) -> Vec<PushSent> {
    w.kernel
        .push_pass(push, Duration::ZERO, allowed)
        .await
        .expect("a push pass")
}

/// Subscribing goes through the API like every change: a session and its
/// CSRF token. The endpoint is checked like a notification URL: https
/// only, and a private address only where the operator allows it (refused
/// in one line naming the setting); the keys must be a P-256 point and a
/// 16-byte secret. A person holds at most ten devices, lists and removes
/// only their own; a server without `--vapid-subject` has push off.
#[tokio::test(flavor = "multi_thread")]
async fn push_subscriptions_need_a_session_csrf_and_an_allowed_destination() {
    let w = people_world(Trust::Byo).await;
    let service = StandIn::start().await;
    let device = Device::new("phone");

    let server = serve_with_push(&w, &service, Destinations::PublicOnly).await;
    assert_eq!(Api::new(&server.url()).get("/api/push").await.status, 401);
    let alice = Api::signed_in(&w, &server.url(), "alice").await;
    let status = alice.get("/api/push").await.json();
    assert_eq!(status["enabled"], true);
    assert_eq!(status["limit"], 10);
    assert_eq!(status["devices"], json!([]));
    let key = B64URL
        .decode(status["key"].as_str().expect("the VAPID key"))
        .unwrap();
    assert_eq!((key.len(), key[0]), (65, 4), "an uncompressed P-256 point");

    let mut no_csrf = Api::signed_in(&w, &server.url(), "alice").await;
    no_csrf.csrf = None;
    let a = subscribe(&no_csrf, device.subscription(&service)).await;
    assert_eq!(a.status, 403, "{}", a.text);
    // Loopback is private: refused without the operator's allowance.
    let a = subscribe(&alice, device.subscription(&service)).await;
    assert_eq!(a.status, 400, "{}", a.text);
    let e = a.error();
    assert!(
        e.contains("GATEHOUSE_NOTIFY_ALLOW_PRIVATE=1") && e.contains("the push endpoint"),
        "{e}"
    );
    for endpoint in [
        "https://10.1.2.3/push",
        "https://169.254.169.254/x",
        "https://[fd00::1]/x",
    ] {
        let mut s = device.subscription(&service);
        s["endpoint"] = json!(endpoint);
        let a = subscribe(&alice, s).await;
        assert_eq!(a.status, 400, "{endpoint}: {}", a.text);
        assert!(a.error().contains("GATEHOUSE_NOTIFY_ALLOW_PRIVATE=1"));
    }
    assert_eq!(devices(&alice).await, json!([]));
    server.stop().await;

    let server = serve_with_push(&w, &service, Destinations::AlsoPrivate).await;
    let alice = Api::signed_in(&w, &server.url(), "alice").await;
    let bob = Api::signed_in(&w, &server.url(), "bob").await;
    // Still https only, and keys that are keys.
    let mut plain = device.subscription(&service);
    plain["endpoint"] = json!(format!("http://127.0.0.1:{}/push/phone", service.port));
    let mut bad_key = device.subscription(&service);
    bad_key["keys"]["p256dh"] = json!("AAAA");
    let mut bad_auth = device.subscription(&service);
    bad_auth["keys"]["auth"] = json!(B64URL.encode([1u8; 15]));
    for (s, why) in [
        (plain, "https://"),
        (bad_key, "p256dh"),
        (bad_auth, "16 bytes"),
    ] {
        let a = subscribe(&alice, s).await;
        assert_eq!(a.status, 400, "{why}: {}", a.text);
        assert!(a.error().contains(why), "{why}: {}", a.text);
    }
    let mut extra = device.subscription(&service);
    extra["extra"] = json!(1);
    let a = subscribe(&alice, extra).await;
    assert_eq!(a.status, 422, "{}", a.text);

    let a = subscribe(&alice, device.subscription(&service)).await;
    assert_eq!(a.status, 201, "{}", a.text);
    let phone = a.json();
    assert_eq!(phone["service"], service.origin());
    assert!(
        !a.text.contains("/push/phone") && !a.text.contains(&device.p256dh()),
        "the endpoint and keys are never shown: {}",
        a.text
    );
    let id = phone["id"].as_str().unwrap().to_owned();
    assert_eq!(devices(&alice).await[0]["id"], id.as_str());
    assert_eq!(devices(&bob).await, json!([]));
    let a = unsubscribe(&bob, &id).await;
    assert_eq!(a.status, 404, "not bob's: {}", a.text);
    // Ten devices at most; the same endpoint again replaces, not adds.
    for n in 1..10 {
        let other = Device::new(&format!("tablet-{n}"));
        let a = subscribe(&alice, other.subscription(&service)).await;
        assert_eq!(a.status, 201, "{n}: {}", a.text);
    }
    let a = subscribe(&alice, Device::new("one-too-many").subscription(&service)).await;
    assert_eq!(a.status, 409, "{}", a.text);
    assert!(a.error().contains("remove one first"));
    let a = subscribe(&alice, device.subscription(&service)).await;
    assert_eq!(a.status, 201, "the same endpoint again: {}", a.text);
    let listed = devices(&alice).await;
    let listed = listed.as_array().expect("a list of devices");
    assert_eq!(listed.len(), 10);
    let newest = listed[9]["id"].as_str().unwrap().to_owned();
    assert!(!listed.iter().any(|d| d["id"] == id.as_str()));
    let a = unsubscribe(&alice, &newest).await;
    assert_eq!(a.status, 204, "{}", a.text);
    assert_eq!(devices(&alice).await.as_array().map(Vec::len), Some(9));
    server.stop().await;

    // Without the operator's contact, push is off.
    let server = crate::surfaces::web_api::serve(&w).await;
    let alice = Api::signed_in(&w, &server.url(), "alice").await;
    let status = alice.get("/api/push").await.json();
    assert_eq!(
        (status["enabled"].clone(), status["key"].clone()),
        (json!(false), Value::Null)
    );
    let a = subscribe(&alice, Device::new("x").subscription(&service)).await;
    assert_eq!(a.status, 409, "{}", a.text);
    assert!(a.error().contains("--vapid-subject"));
    server.stop().await;
    assert!(service.got().is_empty(), "nothing was pushed");
}

/// What a push carries: the count of what waits for the person and the
/// names of the chats, encrypted for the device, under a VAPID token the
/// served key verifies; never argument text. A person is pushed only
/// about chats they may see: bob, a collaborator of `work` who was never
/// re-verified (so may not see it), hears only of his own chat.
#[tokio::test(flavor = "multi_thread")]
async fn a_push_says_a_count_and_chat_names_and_never_argument_text() {
    let w = people_world(Trust::Byo).await;
    w.chat_with("bobs", "bob", &[("issues", "ISSUES")]);
    assert!(w.kernel.person("alice").share("work", "bob", true).unwrap());
    let service = StandIn::start().await;
    let server = serve_with_push(&w, &service, Destinations::AlsoPrivate).await;
    let (phone, laptop) = (Device::new("alice-phone"), Device::new("bob-laptop"));
    let alice = Api::signed_in(&w, &server.url(), "alice").await;
    let bob = Api::signed_in(&w, &server.url(), "bob").await;
    let key = alice.get("/api/push").await.json()["key"]
        .as_str()
        .unwrap()
        .to_owned();
    for (api, device) in [(&alice, &phone), (&bob, &laptop)] {
        let a = subscribe(api, device.subscription(&service)).await;
        assert_eq!(a.status, 201, "{}", a.text);
    }

    const PLANTED: &str = "argument-marker-9c41";
    let labels: Vec<String> = (0..3).map(|i| format!("{PLANTED}-{i}")).collect();
    let refs: Vec<&str> = labels.iter().map(String::as_str).collect();
    stage_labels(&w, "work", &refs).await;
    assert!(
        wait_until(PATIENCE, || !service.to("alice-phone").is_empty()),
        "alice's phone is pushed"
    );
    let first = service.to("alice-phone");
    assert_eq!(first.len(), 1, "one push for the batch");
    check_vapid(&first[0], &key, &service.origin());
    let message: Value = serde_json::from_slice(&phone.open(&first[0].body)).unwrap();
    assert_eq!(
        message["body"], "3 actions wait for you in work",
        "{message}"
    );
    assert_eq!(message["actions"], 3);
    assert_eq!(message["chats"], json!(["work"]));

    stage_labels(&w, "bobs", &[&format!("{PLANTED}-bob")]).await;
    assert!(
        wait_until(PATIENCE, || !service.to("bob-laptop").is_empty()),
        "bob's laptop is pushed"
    );
    let to_bob = service.to("bob-laptop");
    check_vapid(&to_bob[0], &key, &service.origin());
    let message: Value = serde_json::from_slice(&laptop.open(&to_bob[0].body)).unwrap();
    assert_eq!(
        message["body"], "1 action waits for you in bobs",
        "{message}"
    );
    assert_eq!(message["chats"], json!(["bobs"]));
    server.stop().await;

    // Every push, opened: no argument text anywhere, and nothing of work
    // ever reached bob.
    for r in service.got() {
        let device = if r.path.ends_with("alice-phone") {
            &phone
        } else {
            &laptop
        };
        let text = String::from_utf8(device.open(&r.body)).unwrap();
        assert!(!text.contains(PLANTED), "argument text in a push: {text}");
        assert!(!String::from_utf8_lossy(&r.body).contains(PLANTED));
        if device.name == "bob-laptop" {
            assert!(!text.contains("work"), "bob may not see work: {text}");
        }
    }
}

/// A push service that says a device is gone (410) has it removed; one
/// that is busy (429, Retry-After) is tried again, not sooner than it
/// asked; a destination the operator does not allow (checked again at
/// the send) is sent nothing and tried again later.
#[tokio::test(flavor = "multi_thread")]
async fn a_gone_device_is_removed_and_a_busy_service_is_tried_again() {
    let w = people_world(Trust::Byo).await;
    let service = StandIn::start().await;
    let push = Push::enable(
        &w.kernel,
        &Settings::new(SUBJECT).trusting(service.roots.clone()),
    )
    .await
    .unwrap();
    let (gone, busy) = (Device::new("gone"), Device::new("busy"));
    for d in [&gone, &busy] {
        w.kernel
            .person("alice")
            .push_subscribe(d.keys(&service), Destinations::AlsoPrivate)
            .await
            .unwrap()
            .unwrap();
    }
    service.answer("gone", &[(410, None)]);
    service.answer("busy", &[(429, Some("1"))]);
    stage_labels(&w, "work", &["one"]).await;

    // Subscribed while private addresses were allowed, but this pass does
    // not allow them: nothing goes out, and it is tried again later.
    let sent = pass(&w, &push, Destinations::PublicOnly).await;
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(
        sent.iter()
            .all(|s| matches!(s.outcome, Outcome::Retry { status: None, .. })),
        "{sent:?}"
    );
    assert!(service.got().is_empty());

    // Where allowed: the gone device is removed, the busy one waits.
    let mut outcomes: HashMap<String, Outcome> = HashMap::new();
    let start = Instant::now();
    while outcomes.len() < 2 && start.elapsed() < PATIENCE {
        for s in pass(&w, &push, Destinations::AlsoPrivate).await {
            outcomes.insert(s.device.clone(), s.outcome);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let devices = w.kernel.person("alice").push_devices().await.unwrap();
    assert_eq!(devices.len(), 1, "{devices:?}");
    let busy_id = devices[0].id.clone();
    let gone_id = outcomes.keys().find(|k| **k != busy_id).cloned().unwrap();
    assert_eq!(outcomes[&gone_id], Outcome::Gone { status: 410 });
    assert!(
        matches!(
            outcomes[&busy_id],
            Outcome::Retry {
                status: Some(429),
                ..
            }
        ),
        "{outcomes:?}"
    );
    let refused_at = service.to("busy")[0].at;

    // The busy one is tried again, not before its Retry-After, and then
    // delivered.
    let mut delivered = false;
    let start = Instant::now();
    while !delivered && start.elapsed() < PATIENCE {
        delivered = pass(&w, &push, Destinations::AlsoPrivate)
            .await
            .iter()
            .any(|s| s.device == busy_id && s.outcome == Outcome::Delivered { status: 201 });
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(delivered, "the busy service took it in the end");
    let to_busy = service.to("busy");
    assert_eq!(to_busy.len(), 2, "tried twice");
    assert!(
        to_busy[1].at >= refused_at + Duration::from_secs(1),
        "not before Retry-After: {:?}",
        to_busy[1].at - refused_at
    );
    assert_eq!(
        service.to("gone").len(),
        1,
        "a gone device is not pushed again"
    );
    let message: Value = serde_json::from_slice(&busy.open(&to_busy[1].body)).unwrap();
    assert_eq!(message["body"], "1 action waits for you in work");
    // Told once: nothing more is pushed for the same action.
    let again = pass(&w, &push, Destinations::AlsoPrivate).await;
    assert!(again.is_empty(), "{again:?}");
}

/// The page's part: the service worker is served from the origin's root
/// (its scope is the whole inbox, no `Service-Worker-Allowed` needed) as
/// JavaScript under the page's policy; push.js, like app.js, builds the
/// page with text only, asks the browser's permission only from its
/// click handler, and sends the subscription only to this origin.
#[tokio::test(flavor = "multi_thread")]
async fn the_page_asks_permission_only_on_a_click_and_serves_its_worker_at_the_root() {
    let w = gatehouse_e2e::World::new();
    let server = crate::surfaces::web_api::serve(&w).await;
    let api = Api::new(&server.url());
    let html = api.get("/").await.text;
    assert!(html.contains("<span id=\"push\" hidden></span>"), "{html}");
    let mut scripts = Vec::new();
    for path in ["/sw.js", "/assets/push.js"] {
        let a = api.get(path).await;
        assert_eq!(a.status, 200, "{path}");
        assert!(
            a.headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/javascript"),
            "{path}"
        );
        assert_eq!(
            a.headers["content-security-policy"],
            gatehouse::web::CONTENT_SECURITY_POLICY
        );
        // Nor does either name another origin.
        for forbidden in MARKUP_SINKS.into_iter().chain(["http:", "https:"]) {
            assert!(!a.text.contains(forbidden), "{path} uses {forbidden}");
        }
        scripts.push(a.text);
    }
    let (worker, page) = (&scripts[0], &scripts[1]);
    // The worker shows the push as text and opens only this origin's inbox.
    assert!(worker.contains("showNotification(") && worker.contains("openWindow(inbox)"));
    assert!(
        !worker.contains("fetch(") && !worker.contains("\"fetch\""),
        "no fetch handler, no requests"
    );
    // The permission is asked in `enable`, which only a click calls.
    assert_eq!(page.matches("requestPermission(").count(), 1);
    let asked = page.find("requestPermission(").unwrap();
    let enable = page.find("async function enable()").unwrap();
    assert!(asked > enable, "asked inside enable()");
    assert_eq!(page.matches("enable();").count(), 1);
    let call = page.find("enable();").unwrap();
    let handler = page[..call].rfind("addEventListener(").unwrap();
    assert!(
        page[handler..call].starts_with("addEventListener(\"click\""),
        "enable() is called from a click handler only"
    );
    assert!(page.contains("navigator.serviceWorker.register(\"/sw.js\", { scope: \"/\" })"));
    assert!(page.contains("api(\"POST\", \"/api/push/subscriptions\""));
    server.stop().await;
}
