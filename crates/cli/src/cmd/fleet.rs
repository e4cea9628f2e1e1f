//! `strata fleet`: simulated deployed agents driving a gateway (by default one started
//! here, with `strata serve`'s settings).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use strata_gateway::{run_fleet, FleetReport, FleetSettings, Server, TokensFile};
use strata_ledger::{LedgerData, Storage};

use crate::cmd::serve::GatewayArgs;

/// `strata fleet`.
#[derive(Args, Debug)]
pub struct FleetArgs {
    /// A running gateway (default: start one in this process on a free loopback port).
    /// Repeat it for several gateways (a run that spans machines): agents are spread over
    /// them, each sticking to one, and the steps are shared out.
    #[arg(long = "server", value_name = "URL")]
    servers: Vec<String>,
    /// Each --server's tokens.json, in the same order (required with --server).
    #[arg(long = "tokens", value_name = "FILE")]
    tokens: Vec<PathBuf>,
    /// The CA certificate (PEM) that signed an https:// gateway's certificate (none: the
    /// system's roots).
    #[arg(long, value_name = "FILE")]
    ca: Option<PathBuf>,
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
    crate::process::limit_malloc_arenas();
    let env = args
        .gateway
        .config
        .env
        .clone()
        .unwrap_or_else(|| "cartpole".into());
    let mut local = None;
    let targets: Vec<(String, TokensFile)> = if args.servers.is_empty() {
        if !args.tokens.is_empty() {
            anyhow::bail!("--tokens goes with --server (the in-process gateway makes its own)");
        }
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
        vec![(url, tokens)]
    } else {
        if args.tokens.len() != args.servers.len() {
            anyhow::bail!(
                "{} --server and {} --tokens: give each gateway's tokens.json, in the same order",
                args.servers.len(),
                args.tokens.len()
            );
        }
        let mut targets = Vec::new();
        for (url, path) in args.servers.iter().zip(&args.tokens) {
            let text =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            let tokens: TokensFile = serde_json::from_slice(&text)
                .with_context(|| format!("{} is not a tokens file", path.display()))?;
            targets.push((url.clone(), tokens));
        }
        targets
    };
    let n = targets.len();
    if args.agents < n {
        anyhow::bail!(
            "{} agents for {n} gateways: give at least one agent each",
            args.agents
        );
    }
    let fleets: Vec<FleetSettings> = targets
        .into_iter()
        .enumerate()
        .map(|(k, (server, tokens))| {
            // Agent i goes to gateway i % n; steps are shared out the same way.
            let share = |total: u64| total / n as u64 + u64::from((k as u64) < total % n as u64);
            let agents = share(args.agents as u64) as usize;
            let mut fleet = FleetSettings::new(&server, tokens, agents, &env);
            fleet.steps = share(args.steps);
            fleet.max_duration = Duration::from_secs_f64(args.seconds.max(0.0));
            fleet.latency_ticks = args.latency_ticks;
            // Each gateway's agents play their own envs.
            fleet.seed = args.gateway.config.seed.unwrap_or(1) + 1000 * k as u64;
            fleet.move_prob = args.move_prob;
            fleet.popup_prob = args.popup_prob;
            fleet.lost_report_prob = args.lost_report_prob;
            fleet.timeout_prob = args.timeout_prob;
            fleet.crash_prob = args.crash_prob;
            fleet.ca = args.ca.clone();
            fleet
        })
        .collect();
    let reports: Vec<FleetReport> = std::thread::scope(|s| {
        let runs: Vec<_> = fleets.iter().map(|f| s.spawn(|| run_fleet(f))).collect();
        runs.into_iter()
            .map(|r| r.join().expect("a fleet thread panicked"))
            .collect::<Result<_, _>>()
    })?;
    let mut report = FleetReport::default();
    for (f, r) in fleets.iter().zip(&reports) {
        if n > 1 {
            print!("{}: ", f.server);
            print_fleet(r);
        }
        report.merge(r);
    }
    print_fleet(&report);
    let mut generations = serde_json::Value::Null;
    if let Some((server, dir)) = local.take() {
        let status = server.gateway().status();
        server.stop().context("stopping the gateway")?;
        println!(
            "gateway: {} learner updates, stable version {}",
            status.updates, status.stable
        );
        generations = print_generations(&[dir.join("ledger")])?;
    } else if let Some(ledgers) = args
        .tokens
        .iter()
        .map(|t| served_ledger(Some(t)))
        .collect::<Option<Vec<_>>>()
    {
        // Gateways on this machine: each tokens file sits in its gateway's directory,
        // beside the ledger, which a reader may read while the gateway writes; several
        // read as one.
        generations = print_generations(&ledgers)?;
    } else {
        println!(
            "per generation: strata ledger summary <each gateway's directory> [<the learner's directory>], on a machine that holds them"
        );
    }
    if let Some(path) = &args.summary_json {
        let mut json = serde_json::json!({ "fleet": report, "generations": generations });
        if reports.len() > 1 {
            // Each gateway's fleet, in --server order.
            json["per_gateway"] = serde_json::to_value(&reports)?;
        }
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

/// Per generation (policy version) from the ledgers (read as one): samples, decisions,
/// invalidations and episode returns; printed in up to 20 groups of consecutive versions.
fn print_generations(ledgers: &[PathBuf]) -> Result<serde_json::Value> {
    let mut parts = Vec::new();
    for ledger in ledgers {
        let location = ledger.display().to_string();
        let data = LedgerData::read(&Storage::open(&location)?)?;
        parts.push((location, data));
    }
    let data = strata_ledger::union(parts)?;
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
