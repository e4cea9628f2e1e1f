//! How a process proves itself to the NATS server and checks the server's identity: TLS
//! (the CA that signed the server's certificate, a client certificate for a server that
//! asks for one) and credentials (a `.creds` file, an nkey seed, or a user and password).
//!
//! Secrets come from files or the environment, never from the command line (which other
//! users of the machine can read), and are never printed: `Debug` names the kind of
//! credential and the files, not their contents.

use std::path::PathBuf;

use async_nats::ConnectOptions;

use crate::ClusterError;

/// TLS and credentials for the NATS connections of one process.
#[derive(Clone, Debug, Default)]
pub struct NatsAccess {
    /// Insist on TLS even without a CA or client certificate (the server's certificate is
    /// then checked against the system's roots). A `tls://` URL insists too.
    pub require_tls: bool,
    /// PEM file of the CA that signed the server's certificate (implies TLS).
    pub ca: Option<PathBuf>,
    /// Client certificate and its key, PEM files (implies TLS).
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// How this process authenticates, if the server asks.
    pub credentials: Option<NatsCredentials>,
}

/// A credential for the NATS server.
#[derive(Clone)]
pub enum NatsCredentials {
    /// A credentials file (a user JWT and its nkey seed), as `nsc` writes it.
    File(PathBuf),
    /// An nkey seed (`SU...`), read from a file.
    Nkey(String),
    /// A user and password.
    UserPassword {
        /// The user.
        user: String,
        /// The password.
        password: String,
    },
}

impl std::fmt::Debug for NatsCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NatsCredentials::File(path) => f.debug_tuple("File").field(path).finish(),
            NatsCredentials::Nkey(_) => f.write_str("Nkey(<secret>)"),
            NatsCredentials::UserPassword { user, .. } => f
                .debug_struct("UserPassword")
                .field("user", user)
                .field("password", &"<secret>")
                .finish(),
        }
    }
}

impl NatsAccess {
    /// Whether connections to `url` use TLS.
    pub fn uses_tls(&self, url: &str) -> bool {
        self.require_tls
            || self.ca.is_some()
            || self.client_cert.is_some()
            || url.starts_with("tls://")
    }

    /// `options` with this access's TLS settings and credentials.
    ///
    /// # Errors
    /// [`ClusterError::Config`] naming a file that cannot be read.
    pub(crate) async fn apply(
        &self,
        url: &str,
        mut options: ConnectOptions,
    ) -> Result<ConnectOptions, ClusterError> {
        let readable = |path: &PathBuf, what: &str| {
            std::fs::metadata(path)
                .map(|_| ())
                .map_err(|e| ClusterError::Config(format!("NATS {what} {}: {e}", path.display())))
        };
        if self.uses_tls(url) {
            options = options.require_tls(true);
        }
        if let Some(ca) = &self.ca {
            readable(ca, "CA certificate")?;
            options = options.add_root_certificates(ca.clone());
        }
        if let Some((cert, key)) = &self.client_cert {
            readable(cert, "client certificate")?;
            readable(key, "client key")?;
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
        match &self.credentials {
            None => {}
            Some(NatsCredentials::File(path)) => {
                options = options.credentials_file(path).await.map_err(|e| {
                    ClusterError::Config(format!("NATS credentials file {}: {e}", path.display()))
                })?;
            }
            Some(NatsCredentials::Nkey(seed)) => options = options.nkey(seed.clone()),
            Some(NatsCredentials::UserPassword { user, password }) => {
                options = options.user_and_password(user.clone(), password.clone());
            }
        }
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_show_in_debug_output() {
        let access = NatsAccess {
            credentials: Some(NatsCredentials::UserPassword {
                user: "learner".into(),
                password: "hunter2-very-secret".into(),
            }),
            ..NatsAccess::default()
        };
        let shown = format!("{access:?}");
        assert!(
            shown.contains("learner") && !shown.contains("hunter2"),
            "{shown}"
        );
        let nkey = format!("{:?}", NatsCredentials::Nkey("SUAEXAMPLESEED".into()));
        assert!(!nkey.contains("SUAE"), "{nkey}");
        assert!(access.uses_tls("tls://h:4222") && !access.uses_tls("nats://h:4222"));
    }
}
