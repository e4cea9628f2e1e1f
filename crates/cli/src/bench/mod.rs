//! `strata bench [SUITE]`: throughput of env stepping, network passes, whole training
//! runs and the parts around them, with where the time goes. A suite a file: `training`,
//! `core`, `ledger`, `ledger-reads`, `gateway`, `gym`, `cnn`, `cluster`, `soak`; with none,
//! the default set. Figures are compared as ratios to reference numbers measured on the
//! same 2-core machine (see docs/benchmarks.md), never asserted in tests.

mod cluster;
mod cnn;
mod core;
mod deployed;
mod gateway;
mod gym;
mod ledger;
mod ledger_reads;
mod pixels;
mod procs;
mod python_program;
mod soak;
mod training;

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use serde::Serialize;
use strata_runtime::Summary;

/// A benchmark suite.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Suite {
    /// Env stepping, network passes, CartPole training throughput, seconds to solve
    /// CartPole and Pendulum, the runtime's modes.
    Training,
    /// Recurrent cores: CartPole's preset with no core, an LSTM of 64 and of 256, a GRU of
    /// 64 (env steps per second).
    Core,
    /// The ledger: ingest rows/s, training with the ledger on vs off.
    Ledger,
    /// Ledger reads: ledgers of `--ledger-rows` rows generated, a trainer's page and
    /// report check (p50, p99), the whole-ledger analyses timed on each.
    LedgerReads,
    /// The gateway: act round trip at a fixed rate, durable report ingest.
    Gateway,
    /// Gymnasium env processes: IPC overhead, throughput against Gymnasium's
    /// Sync/AsyncVectorEnv. Needs Python with gymnasium (`STRATA_PYTHON`).
    Gym,
    /// Convolutional encoders (NatureCNN, the MinAtar encoder) on uint8 batches, 1 and 2
    /// threads, against PyTorch's when `STRATA_PYTHON` has torch.
    Cnn,
    /// Pixel presets (Atari Breakout, MinAtar Breakout and SpaceInvaders): one update's
    /// learning alone and one rollout's collection alone, the ceilings they imply in turns
    /// and overlapped, the preset's run and async at lag 1 against them. Needs Python with
    /// Gymnasium, ale-py and MinAtar (`STRATA_PYTHON`).
    Pixels,
    /// Learner and worker processes over NATS JetStream against one process. Needs
    /// nats-server (`STRATA_NATS_SERVER`, or on the PATH).
    Cluster,
    /// A gateway under a simulated fleet and a training run, each its own process,
    /// together for `--minutes`, their memory, open files, threads and disk sampled
    /// (`soak.csv`, `soak.svg`); then the gateway's stop and restart, timed.
    Soak,
    /// The deployed loop spanning machines, on this one, for `--minutes` (default 10):
    /// one gateway alone for half, then three gateways feeding one learner over NATS for
    /// half; memory of every process, reports per second per gateway and in all, the
    /// learner's lag (p50, p99), and their ratio. Needs nats-server.
    Deployed,
}

/// `strata bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// The suite to run; without one: training, core, ledger, gateway, then gym and
    /// cluster where their tools are found.
    #[arg(value_enum)]
    suite: Option<Suite>,
    /// Shorter runs (fewer steps and seeds), for a quick look.
    #[arg(long)]
    quick: bool,
    /// Print the kernel paths this CPU can run (each a value of `STRATA_KERNEL_PATH`),
    /// slowest first, one a line, and run nothing.
    #[arg(long)]
    kernel_paths: bool,
    /// Also write the figures as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Skip the runtime comparison (sync vs async, in-worker vs central inference).
    #[arg(long)]
    skip_runtime: bool,
    /// Ledger sizes for the `ledger-reads` suite, in rows.
    #[arg(long, value_delimiter = ',', default_value = "100000,1000000,10000000")]
    ledger_rows: Vec<u64>,
    /// Acts per second the gateway suite asks for.
    #[arg(long, default_value_t = 10_000.0)]
    gateway_rate: f64,
    /// How long the soak (or the deployed suite) runs, in minutes.
    #[arg(long)]
    minutes: Option<f64>,
    /// Where the soak's processes keep their directories (new or empty; default
    /// `runs/soak-<time>`).
    #[arg(long = "dir", alias = "soak-dir", value_name = "DIR")]
    soak_dir: Option<PathBuf>,
    /// Agents of the soak's fleet (default 16).
    #[arg(long = "agents", alias = "soak-agents")]
    soak_agents: Option<usize>,
    /// Old spellings of the suites, kept for a release: `--ledger-only` is `ledger`, and so
    /// on; `--soak MINUTES` is `soak --minutes MINUTES`.
    #[command(flatten)]
    old: OldSuiteFlags,
}

/// The flags that chose a suite before suites were named (hidden; each is an alias).
#[derive(Args, Debug, Default)]
struct OldSuiteFlags {
    #[arg(long, hide = true)]
    ledger_only: bool,
    #[arg(long, hide = true)]
    ledger_reads: bool,
    #[arg(long, hide = true)]
    gateway_only: bool,
    #[arg(long, hide = true)]
    gym_only: bool,
    #[arg(long, hide = true)]
    cnn_only: bool,
    #[arg(long, hide = true)]
    core_only: bool,
    #[arg(long, hide = true)]
    cluster_only: bool,
    #[arg(long, hide = true, value_name = "MINUTES")]
    soak: Option<f64>,
}

impl BenchArgs {
    /// Whether this is `strata bench --kernel-paths` (a listing, no benchmark).
    pub(crate) fn lists_kernel_paths(&self) -> bool {
        self.kernel_paths
    }

    /// The suite asked for, by name or by an old flag; `None`: the default set.
    ///
    /// # Errors
    /// Two suites asked for at once.
    fn chosen(&self) -> Result<Option<Suite>> {
        let old = &self.old;
        let flags = [
            (old.ledger_only, Suite::Ledger, "--ledger-only"),
            (old.ledger_reads, Suite::LedgerReads, "--ledger-reads"),
            (old.gateway_only, Suite::Gateway, "--gateway-only"),
            (old.gym_only, Suite::Gym, "--gym-only"),
            (old.cnn_only, Suite::Cnn, "--cnn-only"),
            (old.core_only, Suite::Core, "--core-only"),
            (old.cluster_only, Suite::Cluster, "--cluster-only"),
            (old.soak.is_some(), Suite::Soak, "--soak"),
        ];
        let mut chosen: Vec<(Suite, String)> = flags
            .iter()
            .filter(|(on, ..)| *on)
            .map(|&(_, suite, flag)| (suite, flag.to_string()))
            .collect();
        if let Some(suite) = self.suite {
            let name = suite.to_possible_value().expect("a named suite");
            chosen.push((suite, name.get_name().to_string()));
        }
        let soak_only = [
            (self.minutes.is_some(), "--minutes"),
            (self.soak_dir.is_some(), "--dir"),
            (self.soak_agents.is_some(), "--agents"),
        ];
        let is_soak = chosen
            .first()
            .is_some_and(|(s, _)| matches!(s, Suite::Soak | Suite::Deployed));
        if let (false, Some((_, flag))) = (is_soak, soak_only.iter().find(|(on, _)| *on)) {
            bail!(
                "{flag} is the soak's (and the deployed suite's): `strata bench soak {flag} ...`"
            );
        }
        match chosen.as_slice() {
            [] => Ok(None),
            [(suite, _)] => Ok(Some(*suite)),
            // The same suite twice (`gym --gym-only`) is one choice.
            [(a, _), rest @ ..] if rest.iter().all(|(b, _)| b == a) => Ok(Some(*a)),
            many => bail!(
                "choose one benchmark suite: asked for {}",
                many.iter()
                    .map(|(_, name)| format!("`{name}`"))
                    .collect::<Vec<_>>()
                    .join(" and ")
            ),
        }
    }
}

/// Every suite's figures, as `--json` writes them (a suite that did not run: null).
#[derive(Serialize, Default)]
struct Report {
    /// The CPU the figures were measured on (`/proc/cpuinfo`'s model name).
    cpu: String,
    /// The kernel path every product ran (`STRATA_KERNEL_PATH`, or the fastest here).
    kernel_path: String,
    env_step_cartpole64_steps_per_sec: f64,
    env_step_vs_envpool: f64,
    minibatch512_forward_ms: f64,
    minibatch512_backward_ms: f64,
    minibatch512_adam_ms: f64,
    minibatch512_two_threads_ms: f64,
    single_obs_inference_us: f64,
    zoo_cartpole_one_learner_thread_steps_per_sec: f64,
    zoo_cartpole_20_epochs_steps_per_sec: f64,
    zoo_cartpole_vs_sb3: f64,
    cartpole_4_epochs_steps_per_sec: f64,
    cartpole_seconds_to_solve: Vec<Option<f64>>,
    cartpole_median_seconds_to_solve: Option<f64>,
    pendulum_seconds_to_solve: Vec<Option<f64>>,
    pendulum_median_seconds_to_solve: Option<f64>,
    time_breakdown_cartpole_4_epochs: Option<Summary>,
    runtime: Vec<training::RuntimeRow>,
    ledger: Option<ledger::LedgerReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ledger_reads: Option<Vec<ledger_reads::ReadFigures>>,
    gateway: Option<gateway::GatewayReport>,
    gym: Option<gym::GymReport>,
    cluster: Option<cluster::ClusterReport>,
    cnn: Option<cnn::CnnReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pixels: Option<pixels::PixelsReport>,
    core: Option<core::CoreReport>,
    soak: Option<soak::SoakReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deployed: Option<deployed::DeployedReport>,
}

/// Runs the suite asked for (or the default set), prints its figures and writes them as
/// JSON when asked.
///
/// # Errors
/// A bad choice of suite or arguments, or a suite that fails.
pub fn run(args: BenchArgs) -> Result<()> {
    if args.kernel_paths {
        for path in strata_nn::KernelPath::all_supported() {
            println!("{path}");
        }
        return Ok(());
    }
    let path = strata_nn::select_kernel_path()?;
    let mut r = Report {
        cpu: cpu_model(),
        kernel_path: path.name().to_string(),
        ..Report::default()
    };
    println!(
        "machine: {}, {} cores; kernel path: {path} (of {}; {} chooses)",
        r.cpu,
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        strata_nn::KernelPath::supported_names(),
        strata_nn::KERNEL_PATH_VAR,
    );
    let quick = args.quick;
    let gateway_seconds = if quick { 3.0 } else { 10.0 };
    match args.chosen()? {
        Some(Suite::Soak) => {
            let minutes = match (args.minutes, args.old.soak) {
                (Some(m), _) | (None, Some(m)) => m,
                (None, None) => bail!("`strata bench soak` needs --minutes MINUTES"),
            };
            if !(minutes.is_finite() && minutes > 0.0) {
                bail!("the soak takes a positive number of minutes, got {minutes}");
            }
            let dir = args.soak_dir.clone().unwrap_or_else(|| {
                PathBuf::from(format!(
                    "runs/soak-{}",
                    strata_runtime::utc_stamp(std::time::SystemTime::now())
                ))
            });
            let soak = soak::run(&soak::SoakOptions {
                minutes,
                dir: dir.clone(),
                agents: args.soak_agents.unwrap_or(16),
            })?;
            soak::print(&soak);
            println!("  samples: {0}/soak.csv, plot: {0}/soak.svg", dir.display());
            r.soak = Some(soak);
        }
        Some(Suite::Deployed) => {
            let minutes = args.minutes.unwrap_or(10.0);
            if !(minutes.is_finite() && minutes > 0.0) {
                bail!("`strata bench deployed` takes a positive number of minutes, got {minutes}");
            }
            let dir = args.soak_dir.clone().unwrap_or_else(|| {
                PathBuf::from(format!(
                    "runs/bench-deployed-{}",
                    strata_runtime::utc_stamp(std::time::SystemTime::now())
                ))
            });
            let report = deployed::run(minutes, &dir, args.soak_agents.unwrap_or(16))?;
            deployed::print(&report);
            r.deployed = Some(report);
        }
        Some(Suite::LedgerReads) => {
            ledger_reads::print_header();
            let calls = if quick { 50 } else { 200 };
            r.ledger_reads = Some(ledger_reads::run(&args.ledger_rows, calls)?);
        }
        Some(Suite::Ledger) => r.ledger = Some(ledger::run(quick)?),
        Some(Suite::Gateway) => r.gateway = Some(gateway(args.gateway_rate, gateway_seconds)?),
        Some(Suite::Gym) => r.gym = Some(gym::run(quick)?),
        Some(Suite::Cnn) => r.cnn = Some(cnn::run(quick)?),
        Some(Suite::Pixels) => r.pixels = Some(pixels::run(quick)?),
        Some(Suite::Core) => r.core = Some(core::run(quick)?),
        Some(Suite::Cluster) => r.cluster = Some(cluster::run(quick)?),
        Some(Suite::Training) => training::run(quick, args.skip_runtime, &mut r)?,
        None => {
            training::run(quick, true, &mut r)?;
            r.core = Some(core::run(quick)?);
            r.ledger = Some(ledger::run(quick)?);
            r.gateway = Some(gateway(args.gateway_rate, gateway_seconds)?);
            if !args.skip_runtime {
                r.runtime = training::runtime_section(quick)?;
            }
            // Gymnasium envs need Python with gymnasium; without it the section says why.
            match gym::run(quick) {
                Ok(g) => r.gym = Some(g),
                Err(e) => println!("gym env processes: skipped ({e:#})"),
            }
            // The cluster needs a nats-server; without one the section says why.
            match cluster::run(quick) {
                Ok(c) => r.cluster = Some(c),
                Err(e) => println!("cluster: skipped ({e:#})"),
            }
        }
    }
    write_report(&r, args.json.as_deref())
}

fn gateway(rate: f64, seconds: f64) -> Result<gateway::GatewayReport> {
    let g = gateway::run(rate, seconds)?;
    println!(
        "gateway on loopback: {:.0} acts/s asked, {:.0} answered ({} not sent or failed); act round trip p50 {:.3} ms, p99 {:.3} ms (target <= 1 ms), max {:.1} ms",
        g.target_acts_per_sec, g.acts_per_sec, g.acts_skipped, g.act_p50_ms, g.act_p99_ms, g.act_max_ms
    );
    println!(
        "gateway reports (durable before answered): {:.0}/s, round trip p50 {:.2} ms, p99 {:.2} ms",
        g.reports_per_sec, g.report_p50_ms, g.report_p99_ms
    );
    Ok(g)
}

fn write_report(r: &Report, json: Option<&std::path::Path>) -> Result<()> {
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_string_pretty(r)? + "\n")?;
    }
    Ok(())
}

/// The CPU's model name as Linux reports it, or what is known without it.
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name") || l.starts_with("Model"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, name)| name.trim().to_string())
        })
        .unwrap_or_else(|| format!("an {} CPU", std::env::consts::ARCH))
}
