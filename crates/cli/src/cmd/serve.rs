//! `strata serve`: the gateway deployed agents call, and the settings an in-process
//! fleet's gateway shares with it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use strata_gateway::{GatewaySettings, ReleaseMode, Server};

use crate::cmd::config_args::{build_config, ConfigArgs};
use crate::cmd::nats_args::NatsArgs;

/// Gateway settings shared by `serve` and an in-process `fleet` server.
#[derive(Args, Debug, Clone)]
pub struct GatewayArgs {
    #[command(flatten)]
    pub(crate) config: ConfigArgs,
    /// Seconds between publishing a version and new episodes sampling with it.
    #[arg(long, default_value_t = 1.0)]
    cooldown_secs: f64,
    /// Fraction of new episodes that get the canary candidate.
    #[arg(long, default_value_t = 0.0)]
    canary: f64,
    /// Where trained versions go: `auto` (stable after the cooldown), `canary` (candidate;
    /// an operator promotes) or `manual` (no learner).
    #[arg(long, default_value = "auto")]
    release: ReleaseMode,
    /// A re-check aborts when the target moved farther than this.
    #[arg(long, default_value_t = 0.05)]
    recheck_threshold: f32,
    /// End episodes idle this long (their agent is presumed gone).
    #[arg(long, default_value_t = 30.0)]
    episode_timeout_secs: f64,
    /// Requests per second per token.
    #[arg(long, default_value_t = 50_000.0)]
    rate_limit: f64,
    /// Agent tokens to create with a new tokens file.
    #[arg(long, default_value_t = 64)]
    agent_tokens: usize,
    /// HTTP worker threads.
    #[arg(long, default_value_t = 2)]
    http_threads: usize,
    /// Connections served at once; more are answered 503 (lowered to fit the open-files
    /// limit).
    #[arg(long, default_value_t = 512)]
    max_connections: usize,
    /// Close a connection that sends no complete request head for this long (idle
    /// keep-alive and half-sent heads alike).
    #[arg(long, default_value_t = 10.0)]
    header_timeout_secs: f64,
}

impl GatewayArgs {
    /// The gateway's settings: these arguments over the config they name, serving from
    /// `dir` at `addr`.
    pub(super) fn settings(&self, dir: &Path, addr: SocketAddr) -> Result<GatewaySettings> {
        self.settings_on(build_config(&self.config)?, dir, addr)
    }

    /// Settings to serve a checkpoint trained with `trained` (at `path`): its config with
    /// `--set` laid over, or the one `--env`/`--config` give if its env and network match.
    fn settings_for_checkpoint(
        &self,
        path: &Path,
        trained: &strata_runtime::RunConfig,
        dir: &Path,
        addr: SocketAddr,
    ) -> Result<GatewaySettings> {
        let run = if self.config.env.is_some() || self.config.config.is_some() {
            let run = build_config(&self.config)?;
            if run.env.name != trained.env.name {
                anyhow::bail!(
                    "checkpoint {} was trained on {}, not {} (leave out --env to serve the checkpoint's own)",
                    path.display(),
                    trained.env.name,
                    run.env.name
                );
            }
            if run.network != trained.network {
                let shape = |n: &strata_nn::NetworkConfig| {
                    format!(
                        "policy {:?}, value {:?}, {:?}",
                        n.policy_hidden, n.value_hidden, n.activation
                    )
                    .to_lowercase()
                };
                anyhow::bail!(
                    "checkpoint {} has network {}; the config given has {} (leave out --config/--set network.* to serve the checkpoint's own)",
                    path.display(),
                    shape(&trained.network),
                    shape(&run.network)
                );
            }
            run
        } else {
            crate::cmd::config_args::apply_overrides(trained.clone(), &self.config)?
        };
        if run.env.normalize_obs {
            anyhow::bail!(
                "checkpoint {} normalises observations; the gateway serves policies on raw observations (train with --set env.normalize_obs=false to deploy through the gateway)",
                path.display()
            );
        }
        self.settings_on(run, dir, addr)
    }

    fn settings_on(
        &self,
        run: strata_runtime::RunConfig,
        dir: &Path,
        addr: SocketAddr,
    ) -> Result<GatewaySettings> {
        let mut s = GatewaySettings::for_run(run, dir);
        s.addr = addr;
        s.cooldown_secs = self.cooldown_secs;
        s.canary_fraction = self.canary;
        s.release = self.release;
        s.recheck_threshold = self.recheck_threshold;
        s.episode_timeout = Duration::from_secs_f64(self.episode_timeout_secs.max(0.001));
        s.rate_limit = self.rate_limit;
        s.agent_tokens = self.agent_tokens;
        s.http_threads = self.http_threads;
        s.max_connections = self.max_connections;
        if !(self.header_timeout_secs.is_finite() && self.header_timeout_secs > 0.0) {
            anyhow::bail!(
                "--header-timeout-secs must be a positive number of seconds, got {}",
                self.header_timeout_secs
            );
        }
        s.header_read_timeout = Duration::from_secs_f64(self.header_timeout_secs);
        s.validate()?;
        Ok(s)
    }
}

/// `strata serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    gateway: GatewayArgs,
    /// State directory: tokens.json, journal, policies/, ledger/.
    #[arg(long, default_value = "runs/gateway")]
    dir: PathBuf,
    /// Listen address (port 0 picks a free one; the address is written to <dir>/address).
    #[arg(long, default_value = "127.0.0.1:7878")]
    addr: SocketAddr,
    /// With --nats: serve the versions of a learner running elsewhere (`strata learner`),
    /// the serving version shared with the run's other gateways.
    #[command(flatten)]
    nats: NatsArgs,
    /// With --nats: feed the run's learner (`strata learner --from-gateways`) as gateway N
    /// (1 or more, different for each gateway of the run): the segments this gateway's
    /// agents report and the invalidations it records go to the learner; its sample and
    /// trajectory ids are numbered from N << 40.
    #[arg(long, value_name = "N", requires = "nats")]
    gateway_id: Option<u16>,
    /// Serve HTTPS with this certificate chain (PEM, the gateway's certificate first; with
    /// --tls-key). SIGHUP reads both files again: renewed certificates need no restart.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// With HTTPS: also serve plain HTTP on this loopback address (agents and checks on
    /// this machine; its address goes to <dir>/plain-address).
    #[arg(long, value_name = "ADDR", requires = "tls_cert")]
    plain_addr: Option<SocketAddr>,
    /// Serve this trained policy, stable at once: a run's `best/` (the one to deploy), a
    /// `checkpoint/`, or a run directory (its newest checkpoint). Its env and network are
    /// the gateway's (`--env` may be left out; `--set` still applies).
    #[arg(long, value_name = "DIR", conflicts_with = "nats")]
    checkpoint: Option<PathBuf>,
}

/// Serves until Ctrl-C / SIGTERM.
pub fn serve(args: ServeArgs) -> Result<()> {
    crate::process::limit_malloc_arenas();
    let checkpoint = match &args.checkpoint {
        Some(path) => Some((
            path,
            strata_runtime::load_policy(path)
                .with_context(|| format!("cannot serve checkpoint {}", path.display()))?,
        )),
        None => None,
    };
    let mut settings = match &checkpoint {
        Some((path, policy)) => {
            args.gateway
                .settings_for_checkpoint(path, &policy.config, &args.dir, args.addr)?
        }
        None => args.gateway.settings(&args.dir, args.addr)?,
    };
    let meeting = args.nats.meeting()?;
    if let Some(m) = &meeting {
        // The learner's model and versions; this gateway trains on nothing itself.
        let run = strata_cluster::run_config(m).context("joining the run")?;
        if args
            .gateway
            .config
            .env
            .as_ref()
            .is_some_and(|e| *e != run.env.name)
        {
            anyhow::bail!(
                "run `{}` trains {}, not {:?}",
                m.run,
                run.env.name,
                args.gateway.config.env
            );
        }
        match args.gateway_id {
            // The learner moves the run's serving pointer to each new version; this
            // gateway follows it.
            Some(_) if settings.release == ReleaseMode::Auto => {
                settings.release = ReleaseMode::Manual
            }
            Some(_) => {}
            None if settings.release == ReleaseMode::Auto => {
                anyhow::bail!("with --nats the run's learner publishes the versions and operators choose the serving one: use --release canary (each new version becomes the candidate) or --release manual, or feed a learner that takes gateways' reports with --gateway-id N")
            }
            None => {}
        }
        settings.gateway_id = args.gateway_id.unwrap_or(0);
        settings.run = run;
        settings.learner = false;
        settings.validate()?;
    }
    settings.tls = args
        .tls_cert
        .clone()
        .zip(args.tls_key.clone())
        .map(|(cert, key)| strata_gateway::TlsFiles { cert, key });
    settings.plain_addr = args.plain_addr;
    settings.validate()?;
    if settings.tls.is_none() && !settings.addr.ip().is_loopback() {
        tracing::warn!(
            component = "gateway",
            addr = %settings.addr,
            "serving plain HTTP beyond this machine: agents' bearer tokens travel in the clear (serve HTTPS with --tls-cert and --tls-key)"
        );
    }
    // The handlers go in before the gateway opens and binds: a signal that arrives while
    // it recovers its state or as soon as the port accepts must still end in a clean stop
    // with a final flush, not in death by the signal's default action. SIGHUP reloads the
    // TLS certificate rather than stopping.
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .context("cannot install the Ctrl-C / SIGTERM / SIGHUP handlers")?;
    if let Some((_, policy)) = &checkpoint {
        settings.serve_first = Some((
            policy.model.flat_params().to_vec(),
            "serve --checkpoint".to_string(),
        ));
    }
    let server = Server::start(settings).context("starting the gateway")?;
    crate::process::release_freed_memory();
    if let Some((path, policy)) = &checkpoint {
        let status = server.gateway().status();
        let published = server
            .gateway()
            .counters
            .served_first_published
            .load(std::sync::atomic::Ordering::Relaxed);
        println!(
            "serving {} (its policy version {}) as version {}, stable{}",
            path.display(),
            policy.policy_version,
            status.stable,
            if published {
                " at once"
            } else {
                " already (the same parameters)"
            }
        );
    }
    // The follower stops when this sender is dropped (its channel closes).
    let (follow_stop, follow_stopped) = std::sync::mpsc::sync_channel::<()>(0);
    let follower = match &meeting {
        Some(m) => Some(
            strata_cluster::serve_run(m, std::sync::Arc::clone(server.gateway()), follow_stopped)
                .context("joining the run")?,
        ),
        None => None,
    };
    let feed_stop = strata_cluster::Stop::new();
    let feed = match (&meeting, args.gateway_id) {
        (Some(m), Some(id)) => {
            let fed = strata_cluster::feed_run(
                m,
                std::sync::Arc::clone(server.gateway()),
                feed_stop.clone(),
            )
            .context("feeding the run's learner")?;
            println!("gateway {id} of run `{}`: feeding its learner", m.run);
            Some(fed)
        }
        _ => None,
    };
    println!(
        "strata gateway serving {} (API: {}/openapi.json; tokens: {}, the operator's under \"operators\", agents' under \"agents\")",
        server.url(),
        server.url(),
        args.dir.join("tokens.json").display()
    );
    'serving: loop {
        for signal in signals.pending() {
            if signal == SIGHUP && args.tls_cert.is_none() {
                tracing::info!(
                    component = "gateway",
                    "SIGHUP: plain HTTP, no certificate to reload"
                );
                continue;
            }
            if signal == SIGHUP {
                match server.reload_tls() {
                    Ok(()) => tracing::info!(component = "gateway", "TLS certificate reloaded"),
                    Err(e) => {
                        tracing::error!(component = "gateway", error = %e, "TLS certificate not reloaded; the one in use stays")
                    }
                }
                continue;
            }
            tracing::info!(component = "gateway", "stop requested by a signal");
            break 'serving;
        }
        if !server.is_running() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(follow_stop);
    if let Some(f) = follower {
        let _ = f.join();
    }
    feed_stop.raise();
    if let Some((thread, counters)) = feed {
        let _ = thread.join();
        let n = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        let shed = n(&server.gateway().counters.segments_dropped);
        println!(
            "feed: {} segments sent, {} invalidations relayed; left out: {} invalidated before sending, {} refused by the stream, {shed} shed under load",
            n(&counters.segments),
            n(&counters.invalidations),
            n(&counters.invalidated),
            n(&counters.refused)
        );
    }
    server.stop().context("stopping the gateway")?;
    Ok(())
}
