//! The NATS flags every command that meets a run over NATS takes (`strata learner`,
//! `strata worker`, `strata serve --nats`), declared once.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use strata_cluster::{Meeting, NatsAccess, NatsCredentials};

/// The environment variable a NATS password is read from (a password on the command line
/// is visible to every user of the machine).
pub(crate) const PASSWORD_VAR: &str = "STRATA_NATS_PASSWORD";

/// Where the processes of a run meet.
#[derive(Args, Debug, Clone)]
pub(crate) struct NatsArgs {
    /// The NATS server, with JetStream on (`nats-server -js`), e.g. nats://127.0.0.1:4222.
    #[arg(long, value_name = "URL")]
    pub(crate) nats: Option<String>,
    /// The run's name on the server: its learner, workers and gateways meet under it.
    #[arg(long, default_value = "default")]
    run: String,
    /// Seconds one NATS call may take before it is retried or reported.
    #[arg(long, default_value_t = 10.0)]
    nats_timeout_secs: f64,
    /// Use TLS to the NATS server, its certificate checked against the system's roots
    /// (implied by --nats-ca, --nats-cert or a tls:// URL).
    #[arg(long, requires = "nats")]
    nats_tls: bool,
    /// PEM file of the CA that signed the NATS server's certificate (TLS).
    #[arg(long, value_name = "FILE", requires = "nats")]
    nats_ca: Option<PathBuf>,
    /// Client certificate (PEM) for a NATS server that requires one (with --nats-key).
    #[arg(long, value_name = "FILE", requires_all = ["nats_key", "nats"])]
    nats_cert: Option<PathBuf>,
    /// The client certificate's key (PEM).
    #[arg(long, value_name = "FILE", requires = "nats_cert")]
    nats_key: Option<PathBuf>,
    /// NATS credentials file (a user JWT and its nkey seed, as `nsc` writes it).
    #[arg(long, value_name = "FILE", requires = "nats", conflicts_with_all = ["nats_nkey", "nats_user"])]
    nats_creds: Option<PathBuf>,
    /// File holding the nkey seed (`SU...`) this process authenticates with.
    #[arg(
        long,
        value_name = "FILE",
        requires = "nats",
        conflicts_with = "nats_user"
    )]
    nats_nkey: Option<PathBuf>,
    /// NATS user; its password from the environment variable STRATA_NATS_PASSWORD, or
    /// from --nats-password-file.
    #[arg(long, requires = "nats")]
    nats_user: Option<String>,
    /// File holding the NATS user's password.
    #[arg(long, value_name = "FILE", requires = "nats_user")]
    nats_password_file: Option<PathBuf>,
}

impl NatsArgs {
    /// Where to meet, if `--nats` was given.
    ///
    /// # Errors
    /// A timeout that is not a positive number of seconds.
    pub(crate) fn meeting(&self) -> Result<Option<Meeting>> {
        let timeout = nats_timeout(self.nats_timeout_secs)?;
        let Some(url) = &self.nats else {
            return Ok(None);
        };
        if url
            .split_once("://")
            .map_or(url.as_str(), |(_, rest)| rest)
            .split('/')
            .next()
            .is_some_and(|host| host.contains('@'))
        {
            bail!("--nats: put no user or password in the URL (it would be shown in errors and logs): use --nats-user with {PASSWORD_VAR} or --nats-password-file, --nats-creds or --nats-nkey");
        }
        Ok(Some(Meeting {
            url: url.clone(),
            run: self.run.clone(),
            timeout,
            access: self.access()?,
        }))
    }

    /// TLS and credentials, secrets read from their files or the environment.
    fn access(&self) -> Result<NatsAccess> {
        let secret = |path: &PathBuf, what: &str| -> Result<String> {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the {what} file {}", path.display()))?;
            let text = text.trim().to_string();
            if text.is_empty() {
                bail!("the {what} file {} is empty", path.display());
            }
            Ok(text)
        };
        let credentials = if let Some(path) = &self.nats_creds {
            Some(NatsCredentials::File(path.clone()))
        } else if let Some(path) = &self.nats_nkey {
            Some(NatsCredentials::Nkey(secret(path, "nkey seed")?))
        } else if let Some(user) = &self.nats_user {
            let password = match &self.nats_password_file {
                Some(path) => secret(path, "NATS password")?,
                None => std::env::var(PASSWORD_VAR).map_err(|_| {
                    anyhow::anyhow!(
                        "--nats-user {user} needs a password: set {PASSWORD_VAR} or pass --nats-password-file FILE"
                    )
                })?,
            };
            Some(NatsCredentials::UserPassword {
                user: user.clone(),
                password,
            })
        } else {
            None
        };
        Ok(NatsAccess {
            require_tls: self.nats_tls,
            ca: self.nats_ca.clone(),
            client_cert: self.nats_cert.clone().zip(self.nats_key.clone()),
            credentials,
        })
    }

    /// Where to meet, for a `command` that cannot run without NATS.
    ///
    /// # Errors
    /// No `--nats`, or a bad timeout.
    pub(crate) fn required(&self, command: &str) -> Result<Meeting> {
        match self.meeting()? {
            Some(meeting) => Ok(meeting),
            None => bail!("{command} needs --nats URL (a NATS server with JetStream on)"),
        }
    }
}

/// `--nats-timeout-secs` as a duration, refused unless a positive number of seconds.
fn nats_timeout(secs: f64) -> Result<Duration> {
    if !(secs.is_finite() && secs > 0.0) {
        bail!("--nats-timeout-secs must be a positive number of seconds, got {secs}");
    }
    Ok(Duration::from_secs_f64(secs))
}
