//! HTTPS: the gateway's certificate and key, read from PEM files at start and again when
//! asked (`strata serve` asks on SIGHUP), so a renewed certificate is served without a
//! restart. A reload that fails (a missing or malformed file, a key that does not match)
//! keeps the certificate in use and says why.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::error::GatewayError;

/// Where the certificate chain and its key are (PEM files).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, the gateway's own certificate first.
    pub cert: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// The acceptor new connections get: the certificate loaded last.
pub(crate) struct TlsSource {
    files: TlsFiles,
    acceptor: RwLock<TlsAcceptor>,
}

impl TlsSource {
    /// Loads `files`.
    ///
    /// # Errors
    /// [`GatewayError::Config`] naming the file that cannot be read or used.
    pub(crate) fn load(files: TlsFiles) -> Result<Self, GatewayError> {
        let acceptor = acceptor(&files)?;
        Ok(TlsSource {
            files,
            acceptor: RwLock::new(acceptor),
        })
    }

    /// The acceptor for a new connection.
    pub(crate) fn acceptor(&self) -> TlsAcceptor {
        self.acceptor.read().clone()
    }

    /// Reads the files again; connections from now on get the new certificate. On
    /// failure the one in use stays.
    ///
    /// # Errors
    /// [`GatewayError::Config`] naming the file that cannot be read or used.
    pub(crate) fn reload(&self) -> Result<(), GatewayError> {
        let fresh = acceptor(&self.files)?;
        *self.acceptor.write() = fresh;
        Ok(())
    }
}

fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, GatewayError> {
    let bad =
        |path: &Path, why: String| GatewayError::Config(format!("TLS: {}: {why}", path.display()));
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| bad(&files.cert, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| bad(&files.cert, e.to_string()))?;
    if certs.is_empty() {
        return Err(bad(
            &files.cert,
            "no certificate in it (expected PEM)".into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| bad(&files.key, format!("no usable private key: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| GatewayError::Config(format!("TLS: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            bad(
                &files.key,
                format!("does not go with {}: {e}", files.cert.display()),
            )
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
