//! TLS served directly (`serve --tls-cert FILE --tls-key FILE`): the
//! certificate chain and key read from PEM files into a rustls server
//! configuration (ring, TLS 1.2 and 1.3 as rustls allows, HTTP/1.1).
//!
//! Owns reading and checking the files, with a one-line refusal naming
//! the file and what was wrong. May not: accept connections (the accept
//! loop in `web` does, handshaking each in its own task so a slow client
//! never holds the loop). A renewed certificate is read when `serve`
//! starts again.

use super::exposure::TlsFiles;
use anyhow::Context as _;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;

/// The acceptor for `files`, or one line saying which file is wrong.
pub(crate) fn acceptor(files: &TlsFiles) -> anyhow::Result<tokio_rustls::TlsAcceptor> {
    let cert = files.cert.display();
    let key = files.key.display();
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .with_context(|| format!("cannot read the TLS certificate {cert}"))?
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("the TLS certificate {cert} is not valid PEM: {e}"))?;
    if chain.is_empty() {
        anyhow::bail!(
            "{cert} holds no PEM certificate (-----BEGIN CERTIFICATE-----); give --tls-cert the certificate and its chain"
        );
    }
    let private = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| {
        anyhow::anyhow!(
            "cannot read a private key from {key} ({e}); give --tls-key a PEM key (PKCS#8, PKCS#1 or SEC1)"
        )
    })?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .context("the TLS configuration")?
    .with_no_client_auth()
    .with_single_cert(chain, private)
    .map_err(|e| {
        anyhow::anyhow!("the TLS certificate {cert} and key {key} cannot be used together: {e}")
    })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}
