//! The NATS flags every command that meets a run over NATS takes (`strata learner`,
//! `strata worker`, `strata serve --nats`), declared once.

use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args;
use strata_cluster::Meeting;

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
}

impl NatsArgs {
    /// Where to meet, if `--nats` was given.
    ///
    /// # Errors
    /// A timeout that is not a positive number of seconds.
    pub(crate) fn meeting(&self) -> Result<Option<Meeting>> {
        let timeout = nats_timeout(self.nats_timeout_secs)?;
        Ok(self.nats.as_ref().map(|url| Meeting {
            url: url.clone(),
            run: self.run.clone(),
            timeout,
        }))
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
