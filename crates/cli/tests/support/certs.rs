//! A certificate authority and certificates it signs, written as PEM files, for the tests
//! of HTTPS and of NATS over TLS.

// Each test binary that includes this file uses its own subset.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};

/// A CA: its certificate file, and what signs with it.
pub struct Authority {
    /// The CA certificate (PEM), what clients trust.
    pub cert: PathBuf,
    params: rcgen::Certificate,
    key: KeyPair,
}

impl Authority {
    /// A new CA, its certificate written to `dir/<name>-ca.pem`.
    pub fn new(dir: &Path, name: &str) -> Authority {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("{name} test CA"));
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let path = dir.join(format!("{name}-ca.pem"));
        std::fs::write(&path, cert.pem()).unwrap();
        Authority {
            cert: path,
            params: cert,
            key,
        }
    }

    /// A server certificate for `127.0.0.1` and `localhost`, signed by this CA: (cert,
    /// key) files `dir/<name>.pem` and `dir/<name>-key.pem`.
    pub fn server(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let params =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.params, &self.key).unwrap();
        let (cert_path, key_path) = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}-key.pem")),
        );
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        (cert_path, key_path)
    }
}
