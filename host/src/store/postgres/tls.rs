//! TLS to PostgreSQL, so that a database beyond this machine is reached
//! only as the server it claims to be: the driver's TLS seam
//! (`tokio_postgres::tls::MakeTlsConnect`) over rustls, checking the
//! server's certificate as libpq's `sslmode` says, and the one-line words
//! for a certificate refused.
//!
//! Owns the client configuration for each mode and the certificate
//! checks; it may not read the URL (`store::postgres::url` hands it the mode and
//! the authority) nor connect (`store::postgres` does, every connection
//! through its one `connect` path).
//!
//! The checks, as libpq makes them: `verify-full` checks the chain to the
//! authority and that the certificate is for the host connected to;
//! `verify-ca` the chain only; `require` encrypts, and checks the chain
//! when `sslrootcert` names an authority; `prefer` encrypts when the
//! server offers it, checking nothing. A server's handshake signature is
//! checked in every mode (a mode that checks no certificate still talks
//! to the holder of the key it was shown).

use super::url::{RootCert, TlsMode};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::Socket;

/// The driver's TLS connector for one database URL: cheap to clone (the
/// pool keeps one per connection it makes).
#[derive(Clone)]
pub(crate) struct Tls {
    config: Arc<rustls::ClientConfig>,
    /// Whether a host name that is no valid TLS name may be replaced
    /// (nothing checks the name in this mode).
    checks_name: bool,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl Tls {
    /// The connector for `mode`, checking certificates against `root`.
    pub(crate) fn new(mode: TlsMode, root: &RootCert) -> anyhow::Result<Tls> {
        let provider = provider();
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| anyhow::anyhow!("cannot set up TLS for the database ({e})"))?;
        let check = match (mode, root) {
            (TlsMode::Disable | TlsMode::Prefer, _) | (TlsMode::Require, RootCert::Unset) => {
                Check::Nothing
            }
            (TlsMode::Require | TlsMode::VerifyCa, _) => Check::Chain,
            (TlsMode::VerifyFull, _) => Check::ChainAndName,
        };
        let verifier: Arc<dyn ServerCertVerifier> = match check {
            Check::Nothing => Arc::new(Unchecked(provider.clone())),
            Check::Chain | Check::ChainAndName => {
                let webpki = WebPkiServerVerifier::builder_with_provider(
                    Arc::new(roots(root)?),
                    provider.clone(),
                )
                .build()
                .map_err(|e| anyhow::anyhow!("cannot set up TLS for the database ({e})"))?;
                Arc::new(Checked {
                    webpki,
                    name: check == Check::ChainAndName,
                })
            }
        };
        let config = builder
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(Tls {
            config: Arc::new(config),
            checks_name: check == Check::ChainAndName,
        })
    }
}

/// What a mode checks of the server's certificate.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Check {
    Nothing,
    Chain,
    ChainAndName,
}

/// The authorities named by `root`: a PEM file's, or Mozilla's.
fn roots(root: &RootCert) -> anyhow::Result<rustls::RootCertStore> {
    let mut store = rustls::RootCertStore::empty();
    match root {
        RootCert::Unset | RootCert::System => {
            store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        }
        RootCert::File(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| {
                    anyhow::anyhow!(
                        "cannot read the database's certificate authority sslrootcert={} ({e}); give the PEM file of the authority that signed the server's certificate",
                        path.display()
                    )
                })?;
            let (added, _) = store.add_parsable_certificates(certs);
            if added == 0 {
                anyhow::bail!(
                    "the file sslrootcert={} holds no certificate; give the PEM file of the authority that signed the database server's certificate",
                    path.display()
                );
            }
        }
    }
    Ok(store)
}

/// Checks the chain, and the name when `name`.
#[derive(Debug)]
struct Checked {
    webpki: Arc<WebPkiServerVerifier>,
    name: bool,
}

impl ServerCertVerifier for Checked {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .webpki
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            // The chain is checked before the name: a name mismatch means
            // the chain held, which is all verify-ca asks.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// Checks no certificate (`prefer`, and `require` without an authority),
/// only the handshake's signatures.
#[derive(Debug)]
struct Unchecked(Arc<CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

impl tokio_postgres::tls::MakeTlsConnect<Socket> for Tls {
    type Stream = TlsStream;
    type TlsConnect = Connect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> io::Result<Connect> {
        let name = match ServerName::try_from(domain.to_owned()) {
            Ok(name) => name,
            // Nothing checks the name in this mode: any will do.
            Err(_) if !self.checks_name => ServerName::IpAddress(
                std::net::IpAddr::from(std::net::Ipv4Addr::UNSPECIFIED).into(),
            ),
            Err(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("the host name {domain:?} cannot be checked against a certificate"),
                ));
            }
        };
        Ok(Connect {
            connector: tokio_rustls::TlsConnector::from(self.config.clone()),
            name,
        })
    }
}

/// One connection's handshake, about to start.
pub(crate) struct Connect {
    connector: tokio_rustls::TlsConnector,
    name: ServerName<'static>,
}

impl tokio_postgres::tls::TlsConnect<Socket> for Connect {
    type Stream = TlsStream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TlsStream>> + Send>>;

    fn connect(self, stream: Socket) -> Self::Future {
        Box::pin(async move {
            self.connector
                .connect(self.name, stream)
                .await
                .map(|s| TlsStream(Box::new(s)))
        })
    }
}

/// An encrypted connection to the server.
pub(crate) struct TlsStream(Box<tokio_rustls::client::TlsStream<Socket>>);

impl AsyncRead for TlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

impl tokio_postgres::tls::TlsStream for TlsStream {
    /// No channel binding: SCRAM then authenticates without it (the
    /// driver's default `channel_binding=prefer` allows that), which
    /// spares computing the certificate's hash as its signature names.
    fn channel_binding(&self) -> tokio_postgres::tls::ChannelBinding {
        tokio_postgres::tls::ChannelBinding::none()
    }
}

/// A connection error that is TLS's, worded as one line saying what was
/// wrong with the server's certificate and what to do; `None` for any
/// other error.
pub(crate) fn refusal(e: &tokio_postgres::Error, root: &RootCert, host: &str) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    let authority = match root {
        RootCert::File(p) => format!("the authority in sslrootcert={}", p.display()),
        RootCert::Unset | RootCert::System => "the public authorities (Mozilla's)".to_owned(),
    };
    while let Some(err) = source {
        let tls = err.downcast_ref::<rustls::Error>().or_else(|| {
            err.downcast_ref::<io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(tls) = tls {
            return Some(match tls {
                rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. },
                ) => format!(
                    "the database server's certificate is not for the host {host} (sslmode=verify-full); connect with the host name its certificate names, or have its certificate made for {host}"
                ),
                rustls::Error::InvalidCertificate(
                    CertificateError::Expired | CertificateError::ExpiredContext { .. },
                ) => "the database server's certificate has expired; have it renewed".to_owned(),
                rustls::Error::InvalidCertificate(c) => format!(
                    "the database server's certificate was refused: it is not signed by {authority} ({c:?}); give sslrootcert the authority that signed the server's certificate"
                ),
                other => format!(
                    "the TLS handshake with the database failed ({other}); check the URL's sslmode and sslrootcert"
                ),
            });
        }
        source = err.source();
    }
    let text = e.to_string();
    text.contains("server does not support TLS").then(|| {
        "the database server does not offer TLS, and the URL requires it (sslmode); turn on ssl at the server, or use sslmode=prefer on a network you trust".to_owned()
    })
}
