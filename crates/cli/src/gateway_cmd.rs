//! `strata serve` (the gateway) and `strata fleet` (simulated deployed agents driving it).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use strata_gateway::{
    run_fleet, FleetReport, FleetSettings, GatewaySettings, ReleaseMode, Server, TokensFile,
};
use strata_ledger::{LedgerData, Storage};

use crate::config_args::{build_config, ConfigArgs};
use crate::nats_args::NatsArgs;

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
    fn settings(&self, dir: &Path, addr: SocketAddr) -> Result<GatewaySettings> {
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
        let mut run = if self.config.env.is_some() || self.config.config.is_some() {
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
            crate::config_args::apply_overrides(trained.clone(), &self.config)?
        };
        if run.env.normalize_obs {
            anyhow::bail!(
                "checkpoint {} normalises observations; the gateway serves policies on raw observations (train with --set env.normalize_obs=false to deploy through the gateway)",
                path.display()
            );
        }
        // Reward normalisation shaped only training; the gateway's learner sees raw rewards.
        run.env.normalize_reward = false;
        self.settings_on(run, dir, addr)
    }

    fn settings_on(
        &self,
        run: strata_runtime::RunConfig,
        dir: &Path,
        addr: SocketAddr,
    ) -> Result<GatewaySettings> {
        let mut s = GatewaySettings::new(&run.env.name, dir)?;
        s.run = run;
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
    /// Serve this trained policy, stable at once: a run's `best/` (the one to deploy), a
    /// `checkpoint/`, or a run directory (its newest checkpoint). Its env and network are
    /// the gateway's (`--env` may be left out; `--set` still applies).
    #[arg(long, value_name = "DIR", conflicts_with = "nats")]
    checkpoint: Option<PathBuf>,
}

/// Serves until Ctrl-C / SIGTERM.
pub fn serve(args: ServeArgs) -> Result<()> {
    limit_malloc_arenas();
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
        if settings.release == ReleaseMode::Auto {
            anyhow::bail!("with --nats the run's learner publishes the versions and operators choose the serving one: use --release canary (each new version becomes the candidate) or --release manual");
        }
        settings.run = run;
        settings.learner = false;
        settings.validate()?;
    }
    // The handler goes in before the gateway opens and binds: a signal that arrives while
    // it recovers its state or as soon as the port accepts must still end in a clean stop
    // with a final flush, not in death by the signal's default action.
    let (signal_tx, signal) = std::sync::mpsc::sync_channel::<()>(1);
    ctrlc::set_handler(move || {
        let _ = signal_tx.try_send(());
    })
    .context("cannot install the Ctrl-C / SIGTERM handler")?;
    if let Some((_, policy)) = &checkpoint {
        settings.serve_first = Some((
            policy.model.flat_params().to_vec(),
            "serve --checkpoint".to_string(),
        ));
    }
    let server = Server::start(settings).context("starting the gateway")?;
    release_freed_memory();
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
    println!(
        "strata gateway serving {} (API: {}/openapi.json; tokens: {}, the operator's under \"operators\", agents' under \"agents\")",
        server.url(),
        server.url(),
        args.dir.join("tokens.json").display()
    );
    loop {
        match signal.recv_timeout(Duration::from_millis(200)) {
            Ok(()) => {
                tracing::info!(component = "gateway", "stop requested by a signal");
                break;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) if server.is_running() => {}
            Err(_) => break,
        }
    }
    drop(follow_stop);
    if let Some(f) = follower {
        let _ = f.join();
    }
    server.stop().context("stopping the gateway")?;
    Ok(())
}

/// `strata fleet`.
#[derive(Args, Debug)]
pub struct FleetArgs {
    /// A running gateway (default: start one in this process on a free loopback port).
    #[arg(long)]
    server: Option<String>,
    /// The gateway's tokens.json (required with --server).
    #[arg(long)]
    tokens: Option<PathBuf>,
    /// Simulated agents.
    #[arg(long, default_value_t = 8)]
    agents: usize,
    /// Env steps in all.
    #[arg(long, default_value_t = 50_000)]
    steps: u64,
    /// Stop after this many seconds at most.
    #[arg(long, default_value_t = 600.0)]
    seconds: f64,
    /// Ticks before an action takes effect.
    #[arg(long, default_value_t = 1)]
    latency_ticks: u32,
    /// Chance per action that the target moves beyond the re-check threshold.
    #[arg(long, default_value_t = 0.002)]
    move_prob: f64,
    /// Chance per action of a popup (the episode is held for a person).
    #[arg(long, default_value_t = 0.001)]
    popup_prob: f64,
    /// Chance per report that its answer is lost (the agent retries).
    #[arg(long, default_value_t = 0.01)]
    lost_report_prob: f64,
    /// Chance per action that the agent times out on it.
    #[arg(long, default_value_t = 0.0005)]
    timeout_prob: f64,
    /// Chance per action that the agent crashes.
    #[arg(long, default_value_t = 0.0001)]
    crash_prob: f64,
    /// Directory of the in-process gateway (default: runs/fleet-<env>-<unix time>).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Write the fleet report and per-generation ledger metrics as JSON here.
    #[arg(long)]
    summary_json: Option<PathBuf>,
    #[command(flatten)]
    gateway: GatewayArgs,
}

/// Runs the fleet (and, by default, its gateway), then prints a per-generation summary.
pub fn fleet(args: FleetArgs) -> Result<()> {
    limit_malloc_arenas();
    let env = args
        .gateway
        .config
        .env
        .clone()
        .unwrap_or_else(|| "cartpole".into());
    let mut local = None;
    let (server, tokens) = match &args.server {
        Some(url) => {
            let path = args
                .tokens
                .as_ref()
                .context("--server needs --tokens <the gateway's tokens.json>")?;
            let text =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            let tokens: TokensFile = serde_json::from_slice(&text)
                .with_context(|| format!("{} is not a tokens file", path.display()))?;
            (url.clone(), tokens)
        }
        None => {
            let dir = args.dir.clone().unwrap_or_else(|| {
                let t = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                PathBuf::from(format!("runs/fleet-{env}-{t}"))
            });
            let mut settings = args
                .gateway
                .settings(&dir, SocketAddr::from(([127, 0, 0, 1], 0)))?;
            settings.agent_tokens = settings.agent_tokens.max(args.agents);
            let server = Server::start(settings).context("starting the in-process gateway")?;
            let url = server.url();
            let tokens = server.gateway().tokens().clone();
            println!("gateway {url} in {}", dir.display());
            local = Some((server, dir));
            (url, tokens)
        }
    };
    let mut fleet = FleetSettings::new(&server, tokens, args.agents, &env);
    fleet.steps = args.steps;
    fleet.max_duration = Duration::from_secs_f64(args.seconds.max(0.0));
    fleet.latency_ticks = args.latency_ticks;
    fleet.seed = args.gateway.config.seed.unwrap_or(1);
    fleet.move_prob = args.move_prob;
    fleet.popup_prob = args.popup_prob;
    fleet.lost_report_prob = args.lost_report_prob;
    fleet.timeout_prob = args.timeout_prob;
    fleet.crash_prob = args.crash_prob;
    let report = run_fleet(&fleet)?;
    print_fleet(&report);
    let mut generations = serde_json::Value::Null;
    if let Some((server, dir)) = local.take() {
        let status = server.gateway().status();
        server.stop().context("stopping the gateway")?;
        println!(
            "gateway: {} learner updates, stable version {}",
            status.updates, status.stable
        );
        generations = print_generations(&dir.join("ledger"))?;
    } else if let Some(ledger) = served_ledger(args.tokens.as_deref()) {
        // A gateway on this machine: its tokens file sits in its directory, beside the
        // ledger, which a reader may read while the gateway writes.
        generations = print_generations(&ledger)?;
    } else {
        println!(
            "per generation: strata ledger summary <the gateway's directory>/ledger, on its machine"
        );
    }
    if let Some(path) = &args.summary_json {
        let json = serde_json::json!({ "fleet": report, "generations": generations });
        std::fs::write(path, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The ledger of the gateway whose `tokens.json` is `tokens`, when it is on this machine.
fn served_ledger(tokens: Option<&Path>) -> Option<PathBuf> {
    let ledger = tokens?.parent()?.join("ledger");
    ledger.is_dir().then_some(ledger)
}

fn print_fleet(r: &FleetReport) {
    println!(
        "fleet: {} steps in {:.1} s ({:.0} steps/s), {} episodes; reports {} stored, {} duplicates answered; {} re-check aborts, {} human holds, {} timeouts, {} crashes, {} retries",
        r.steps,
        r.seconds,
        r.steps as f64 / r.seconds.max(1e-9),
        r.episodes,
        r.stored,
        r.duplicates,
        r.aborts,
        r.holds,
        r.timeouts,
        r.crashes,
        r.retries
    );
}

/// Per generation (policy version) from the ledger: samples, decisions, invalidations and
/// episode returns; printed in up to 20 groups of consecutive versions.
fn print_generations(ledger: &Path) -> Result<serde_json::Value> {
    let storage = Storage::open(&ledger.display().to_string())?;
    let data = LedgerData::read(&storage)?;
    let summary = strata_ledger::summary(&data);
    let metrics = strata_ledger::metrics(&data);
    #[derive(Default, Clone, serde::Serialize)]
    struct Row {
        samples: u64,
        trained: u64,
        down_weighted: u64,
        dropped: u64,
        invalidated: BTreeMap<String, u64>,
        episodes: u64,
        return_sum: f64,
        valid_episodes: u64,
        valid_return_sum: f64,
    }
    let mut rows: BTreeMap<u64, Row> = BTreeMap::new();
    for g in &summary {
        let r = rows.entry(g.generation).or_default();
        r.samples += g.samples;
        r.trained += g.trained;
        r.down_weighted += g.down_weighted;
        r.dropped += g.dropped;
        for (k, v) in &g.invalidated {
            *r.invalidated.entry(k.clone()).or_default() += v;
        }
    }
    for (v, all, valid) in &metrics.per_generation {
        let r = rows.entry(*v).or_default();
        r.episodes += all.episodes;
        r.return_sum += all.sum_return;
        r.valid_episodes += valid.episodes;
        r.valid_return_sum += valid.sum_return;
    }
    let versions: Vec<u64> = rows.keys().copied().collect();
    let groups = versions.len().clamp(1, 20);
    let per = versions.len().div_ceil(groups).max(1);
    println!(
        "{:>13} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}  invalidated",
        "generations", "samples", "trained", "dropped", "episodes", "return", "valid", "return"
    );
    let mean = |sum: f64, n: u64| {
        if n > 0 {
            format!("{:.1}", sum / n as f64)
        } else {
            "-".into()
        }
    };
    for chunk in versions.chunks(per) {
        let mut sum = Row::default();
        for v in chunk {
            let r = &rows[v];
            sum.samples += r.samples;
            sum.trained += r.trained + r.down_weighted;
            sum.dropped += r.dropped;
            sum.episodes += r.episodes;
            sum.return_sum += r.return_sum;
            sum.valid_episodes += r.valid_episodes;
            sum.valid_return_sum += r.valid_return_sum;
            for (k, n) in &r.invalidated {
                *sum.invalidated.entry(k.clone()).or_default() += n;
            }
        }
        let invalid: Vec<String> = sum
            .invalidated
            .iter()
            .map(|(k, v)| format!("{k}:{v}"))
            .collect();
        println!(
            "{:>13} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}  {}",
            format!("{}-{}", chunk[0], chunk[chunk.len() - 1]),
            sum.samples,
            sum.trained,
            sum.dropped,
            sum.episodes,
            mean(sum.return_sum, sum.episodes),
            sum.valid_episodes,
            mean(sum.valid_return_sum, sum.valid_episodes),
            if invalid.is_empty() {
                "-".into()
            } else {
                invalid.join(",")
            }
        );
    }
    println!(
        "(episodes by the generation of their last step; `valid`: with no invalidated sample)"
    );
    Ok(serde_json::to_value(&rows)?)
}

/// Hands the memory recovery freed (the journal's replay) back to the system, so that a
/// restarted gateway holds about what its live state takes.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap pages to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Tunes glibc's malloc for a process that runs for weeks. Arenas are capped at one per
/// core (its default is eight per core): a gateway's requests run on many threads, and
/// memory freed in one thread's arena is not reused by another's, so under a 16-agent
/// fleet the resident size kept climbing (460 MB after two minutes) where the live heap
/// was under 200 MB; capped, it levels near 250 MB. And blocks of 1 MiB or more are always
/// mapped on their own (glibc otherwise raises that threshold after freeing one, up to
/// 32 MiB): the journal's snapshot clones and compaction's buffers, tens of megabytes for
/// a moment, then go back to the system instead of fragmenting the heap.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let cores = std::thread::available_parallelism()
            .map_or(2, usize::from)
            .max(2);
        // SAFETY: mallopt only sets allocator parameters; called before the gateway's
        // threads start.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, i32::try_from(cores).unwrap_or(i32::MAX));
            libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
        }
    }
}
