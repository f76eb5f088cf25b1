//! A service far away, on this machine: a certificate authority and a
//! certificate for `localhost` made here with rcgen (so HTTPS is tested
//! with a real handshake, trusted only where a test names the authority),
//! and a TCP relay that holds every chunk for a fixed delay in each
//! direction, so that a round trip costs what it would across a network.
//! TLS passes through the relay untouched, end to end.

use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// An authority and one certificate it signed for `localhost` and
/// 127.0.0.1, as PEM files in a temporary directory.
pub struct TestCa {
    _dir: tempfile::TempDir,
    /// The authority's certificate: what a client is told to trust.
    pub roots: PathBuf,
    /// The server's certificate.
    pub cert: PathBuf,
    /// The server's private key.
    pub key: PathBuf,
}

impl TestCa {
    pub fn new() -> TestCa {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let ca_key = rcgen::KeyPair::generate().expect("a key");
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "Gatehouse test authority");
        ca.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let ca_cert = ca.self_signed(&ca_key).expect("the authority signs itself");
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key = rcgen::KeyPair::generate().expect("a key");
        let leaf = rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
            .expect("params")
            .signed_by(&key, &issuer)
            .expect("the authority signs");
        let write = |name: &str, text: String| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).expect("a PEM file is written");
            p
        };
        TestCa {
            roots: write("roots.pem", ca_cert.pem()),
            cert: write("cert.pem", leaf.pem()),
            key: write("key.pem", key.serialize_pem()),
            _dir: dir,
        }
    }
}

impl Default for TestCa {
    fn default() -> TestCa {
        TestCa::new()
    }
}

/// A relay on an ephemeral 127.0.0.1 port to `upstream`, every byte held
/// `delay` in each direction (order kept, chunks not serialised behind
/// each other's delays: latency, not a bandwidth cap). Stops when dropped.
pub struct Delayed {
    /// The port to connect to instead of the upstream's.
    pub port: u16,
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Delayed {
    pub fn start(upstream: u16, delay: Duration) -> Delayed {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = accepted.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the relay's runtime");
            rt.block_on(async move {
                let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
                let port = listener.local_addr().expect("its address").port();
                ready_tx.send(port).expect("the starter waits");
                let accept = async {
                    loop {
                        let Ok((inbound, _)) = listener.accept().await else {
                            continue;
                        };
                        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        tokio::spawn(relay(inbound, upstream, delay));
                    }
                };
                tokio::select! {
                    _ = accept => {}
                    _ = stopped => {}
                }
            });
        });
        let port = ready_rx.recv().expect("the relay listens");
        Delayed {
            port,
            accepted,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Delayed {
    /// How many connections it has accepted so far.
    pub fn connections(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for Delayed {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn relay(inbound: TcpStream, upstream: u16, delay: Duration) {
    let Ok(outbound) = TcpStream::connect(("127.0.0.1", upstream)).await else {
        return;
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (in_read, in_write) = inbound.into_split();
    let (out_read, out_write) = outbound.into_split();
    tokio::join!(
        pipe(in_read, out_write, delay),
        pipe(out_read, in_write, delay)
    );
}

/// Copy `from` to `to`, each chunk written `delay` after it was read.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Duration,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let writer = async move {
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    let reader = async move {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let due = tokio::time::Instant::now() + delay;
                    if tx.send((due, buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
    };
    tokio::join!(reader, writer);
}
