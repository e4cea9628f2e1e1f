//! HTTPS for [`crate::Client`]: rustls (ring) under ureq, trusting the system's roots or a
//! CA the caller names (a gateway with a private certificate authority).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use ureq::ReadWrite;

/// Hands ureq TLS connections made with one client config.
pub(crate) struct RustlsConnector(Arc<rustls::ClientConfig>);

impl RustlsConnector {
    /// Trusting the CA certificates in `ca` (PEM), or the system's roots without one.
    ///
    /// # Errors
    /// A CA file that cannot be read or holds no certificate (in words).
    pub(crate) fn new(ca: Option<&Path>) -> Result<Self, String> {
        let mut roots = rustls::RootCertStore::empty();
        match ca {
            Some(path) => {
                let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                    .and_then(|it| it.collect::<Result<_, _>>())
                    .map_err(|e| format!("CA certificate {}: {e}", path.display()))?;
                if certs.is_empty() {
                    return Err(format!(
                        "CA certificate {}: no certificate in it",
                        path.display()
                    ));
                }
                for c in certs {
                    roots
                        .add(c)
                        .map_err(|e| format!("CA certificate {}: {e}", path.display()))?;
                }
            }
            None => {
                for c in rustls_native_certs::load_native_certs().certs {
                    let _ = roots.add(c);
                }
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(RustlsConnector(Arc::new(config)))
    }
}

impl ureq::TlsConnector for RustlsConnector {
    fn connect(
        &self,
        dns_name: &str,
        mut io: Box<dyn ReadWrite>,
    ) -> Result<Box<dyn ReadWrite>, ureq::Error> {
        let name = dns_name.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(name.to_string())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let mut session = rustls::ClientConnection::new(Arc::clone(&self.0), name)
            .map_err(std::io::Error::other)?;
        session.complete_io(&mut io)?;
        Ok(Box::new(TlsStream(rustls::StreamOwned::new(session, io))))
    }
}

/// A TLS connection ureq reads and writes.
struct TlsStream(rustls::StreamOwned<rustls::ClientConnection, Box<dyn ReadWrite>>);

impl std::fmt::Debug for TlsStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsStream")
    }
}

impl ReadWrite for TlsStream {
    fn socket(&self) -> Option<&TcpStream> {
        self.0.get_ref().socket()
    }
}

impl Read for TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}
