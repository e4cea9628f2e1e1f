//! The run config's sections: the environment, run control, workers and scheduling, the
//! ledger and reporting, each a documented struct with its defaults. PPO, the network and
//! admission rules are their own crates' (`strata_algo`, `strata_nn`, `strata_ledger`).

use serde::{Deserialize, Serialize};

/// Which environment, how many, and its wrappers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnvConfig {
    /// A built-in env (`cartpole`, `pendulum`, `acrobot`, `mountaincar-continuous`,
    /// `arm-reach`, `arm-reach-moving`, `ui-form`) or a Gymnasium env run in Python worker
    /// processes: `gym:HalfCheetah-v5`, `gym:module:Env-v0`, `gym:module:make_env`.
    pub name: String,
    /// Envs stepped together.
    pub num_envs: usize,
    /// Normalise observations by running mean/variance (clip +-10).
    pub normalize_obs: bool,
    /// Scale rewards by the running std of the discounted return (clip +-10).
    pub normalize_reward: bool,
    /// Extra compute per env step, in microseconds (models an expensive simulator; 0: off).
    pub step_cost_us: u64,
    /// Inject one fault (NaN, panic or hang) into worker `fault_worker`'s envs (testing).
    pub fault: Option<strata_env::FaultPlan>,
    /// Which worker's envs get `fault`.
    pub fault_worker: usize,
    /// Env ticks an action takes to take effect (the env keeps evolving under the previous
    /// action meanwhile); 0: actions apply at once.
    pub action_latency_ticks: u32,
    /// A Gymnasium env's keyword arguments and recorded layout (`gym:` envs only; left
    /// out of built-in envs' configs, and so of their hashes).
    #[serde(skip_serializing_if = "GymSettings::is_unset")]
    pub gym: GymSettings,
}

/// What a `gym:` env is made with, and what it was found to look like.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GymSettings {
    /// Keyword arguments for `gym.make` (or the factory), e.g.
    /// `{ forward_reward_weight = 2.0 }`.
    pub kwargs: toml::Table,
    /// Named wrapper stacks applied in the env processes, in order: `["atari"]` is
    /// CleanRL's `ppo_atari` preprocessing (the Atari presets set it; the env is made with
    /// `frameskip = 1`). Part of the config hash.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub wrappers: Vec<String>,
    /// How its observation is flattened and its action space, filled in when a run
    /// starts (part of the config hash). A saved config's layout must match the env's: a
    /// run is not resumed or evaluated on an env whose spaces changed.
    pub layout: Option<strata_env::gym::GymLayout>,
}

impl GymSettings {
    /// No keyword arguments and no layout (every built-in env).
    pub fn is_unset(&self) -> bool {
        self.kwargs.is_empty() && self.wrappers.is_empty() && self.layout.is_none()
    }
}

impl Default for EnvConfig {
    fn default() -> Self {
        EnvConfig {
            name: "cartpole".into(),
            num_envs: 8,
            normalize_obs: false,
            normalize_reward: false,
            step_cost_us: 0,
            fault: None,
            fault_worker: 0,
            action_latency_ticks: 0,
            gym: GymSettings::default(),
        }
    }
}

impl EnvConfig {
    /// The Gymnasium target of a `gym:` env name, if it is one.
    pub fn gym_target(&self) -> Option<&str> {
        strata_env::gym::gym_target(&self.name)
    }
}

/// Run control: seed, budget, stopping, checkpoints.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainConfig {
    /// Seeds everything: env start states, initial weights, action sampling, shuffling.
    pub seed: u64,
    /// Environment steps (all envs together) in the run; also the annealing horizon.
    pub total_steps: u64,
    /// Bit-identical results for a seed. The single-learner loop is always deterministic;
    /// the flag pins worker/env assignment and consumption order where there are several.
    pub deterministic: bool,
    /// Stop as soon as the solve criterion is met.
    pub stop_when_solved: bool,
    /// Finished episodes averaged for the solve criterion and the reported mean return.
    pub solve_window: usize,
    /// Write a checkpoint every this many env steps (0: only at the end).
    pub checkpoint_every: u64,
    /// Keep only the newest this many of those periodic checkpoints (0: all).
    pub keep_checkpoints: usize,
    /// Threads the learner uses: with 2, the policy and value networks of each minibatch
    /// are computed side by side. 0: automatic (2 in sync mode, where workers idle while
    /// the learner trains; in async mode the cores the workers leave free, at least 1).
    /// Results are identical for any value.
    pub learner_threads: usize,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            seed: 1,
            total_steps: 100_000,
            deterministic: false,
            stop_when_solved: false,
            solve_window: 20,
            checkpoint_every: 0,
            keep_checkpoints: 0,
            learner_threads: 0,
        }
    }
}

/// How collection and learning are scheduled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Every fragment of a training batch comes from the learner's current version:
    /// workers wait while the learner trains (classic PPO).
    Sync,
    /// Collection never stops: workers collect with the newest version they have while the
    /// learner trains, at most `admission.max_policy_lag` versions behind (they wait beyond
    /// that; nothing is dropped), one version behind unless `admission.pacing = "bound"`.
    /// Decoupled PPO corrects for the lag.
    Async,
}

/// Where actions are computed during collection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Inference {
    /// Each worker runs its own copy of the policy.
    Worker,
    /// One inference thread batches requests across workers; each worker's envs form two
    /// groups so one steps while the other waits for actions.
    Central,
}

/// How samples from older policy versions are corrected (async mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OffPolicy {
    /// Decoupled PPO: clip against the current (proximal) policy, weight each sample by
    /// `pi_prox / pi_behaviour` (truncated at `max_is_weight`); GAE on current values.
    Decoupled,
    /// V-trace targets and advantages with truncated ratios (`vtrace_rho_bar`,
    /// `vtrace_c_bar`); the PPO ratio is taken against the current policy.
    Vtrace,
}

/// Workers, scheduling and operations.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeConfig {
    /// Rollout worker threads; `env.num_envs` is split evenly among them (worker `w` owns
    /// envs `w * per_worker ..`).
    pub workers: usize,
    /// `sync` or `async`.
    pub mode: Mode,
    /// Where actions are computed: `worker` (in each worker) or `central`.
    pub inference: Inference,
    /// Off-policy correction for lagged samples: `decoupled` or `vtrace`.
    pub off_policy: OffPolicy,
    /// Decoupled PPO: truncation of the weight `pi_prox / pi_behaviour`.
    pub max_is_weight: f64,
    /// V-trace: truncation of the ratio in the TD error.
    pub vtrace_rho_bar: f64,
    /// V-trace: truncation of the ratio in the trace.
    pub vtrace_c_bar: f64,
    /// Seconds a blocking wait lasts before it is logged (and retried).
    pub wait_timeout_secs: f64,
    /// Read back every buffer write and check slot ownership (slow; for debugging).
    pub debug_buffer: bool,
    /// The watchdog reports a component silent for this many seconds.
    pub silent_after_secs: f64,
    /// The learner restarts a worker silent for this many seconds while it waits on it;
    /// the fragment in progress is recorded invalid.
    pub restart_after_secs: f64,
    /// A crash loop stops the run: this many failures of one worker in a row, without a
    /// fragment finished between them, end it with the worker's error (a sporadic fault
    /// between finished fragments never counts toward it).
    pub max_consecutive_failures: u32,
    /// Faults one worker may have within `fault_window_secs` (restarts of the worker or
    /// of one of its env processes) before the run stops: a budget that a long run with
    /// sporadic simulator errors never spends, and a sustained fault rate does.
    pub max_faults_per_window: u32,
    /// The window of `max_faults_per_window`, in seconds.
    pub fault_window_secs: f64,
    /// A lifetime cap on one worker's restarts (unset: none; the window and the crash-loop
    /// rule above bound faults instead). Kept for configs written before them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_worker_restarts: Option<u32>,
    /// Pin threads to these CPUs (empty: no pinning): worker `w` to `pin_cpus[w % len]`,
    /// learner thread `i` to `pin_cpus[(workers + i) % len]`.
    pub pin_cpus: Vec<usize>,
    /// The Python interpreter `gym:` envs' processes run (unset: `$STRATA_PYTHON`, else
    /// `python3`).
    pub python: Option<std::path::PathBuf>,
    /// Directories put first on those processes' `sys.path` (where a factory's module is):
    /// one path or a list of them.
    #[serde(deserialize_with = "one_or_many_paths")]
    pub python_path: Vec<std::path::PathBuf>,
    /// Envs each Python process steps (0: each worker's envs spread over one process per
    /// core the workers share). Envs are seeded by index, so results do not depend on it.
    pub envs_per_process: usize,
}

/// A list of paths, or one path as a plain string (`python_path = "examples"`).
fn one_or_many_paths<'de, D>(deserializer: D) -> Result<Vec<std::path::PathBuf>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged, expecting = "a path or a list of paths")]
    enum OneOrMany {
        One(std::path::PathBuf),
        Many(Vec<std::path::PathBuf>),
    }
    Ok(match OneOrMany::deserialize(deserializer)? {
        OneOrMany::One(path) => vec![path],
        OneOrMany::Many(paths) => paths,
    })
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            workers: 1,
            mode: Mode::Sync,
            inference: Inference::Worker,
            off_policy: OffPolicy::Decoupled,
            max_is_weight: 2.0,
            vtrace_rho_bar: 1.0,
            vtrace_c_bar: 1.0,
            wait_timeout_secs: 10.0,
            debug_buffer: false,
            silent_after_secs: 10.0,
            restart_after_secs: 30.0,
            max_consecutive_failures: 5,
            max_faults_per_window: 100,
            fault_window_secs: 600.0,
            max_worker_restarts: None,
            pin_cpus: Vec::new(),
            python: None,
            python_path: Vec::new(),
            envs_per_process: 0,
        }
    }
}

/// Where the sample ledger goes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LedgerSettings {
    /// Record every sample's provenance and every admission decision.
    pub enabled: bool,
    /// A directory or object-store URL; unset: `ledger/` in the run directory (runs without
    /// a run directory then keep no ledger).
    pub location: Option<String>,
    /// Bucket the run's samples go to (checked when the config is read).
    pub bucket: strata_ledger::Bucket,
    /// Flush to a file when this many rows are buffered.
    pub flush_rows: usize,
    /// ... or when the oldest buffered row is this many seconds old (bounds what a crash
    /// can lose).
    pub flush_interval_secs: f64,
}

impl Default for LedgerSettings {
    fn default() -> Self {
        LedgerSettings {
            enabled: true,
            location: None,
            bucket: strata_ledger::Bucket::train(),
            flush_rows: 64 * 1024,
            flush_interval_secs: 1.0,
        }
    }
}

/// What a run reports while it trains: periodic evaluation and TensorBoard scalars.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReportSettings {
    /// Evaluate the current policy version this often, in env steps (0: twenty times per
    /// run, and always at the start and the end). Results go to `eval.jsonl`.
    pub eval_every: u64,
    /// Episodes per evaluation (0: no periodic evaluation).
    pub eval_episodes: usize,
    /// The most of a run's time evaluations may take: one falls due only while evaluating
    /// so far has taken at most this share of the time spent training (the first and the
    /// last always run). 1: no limit. Wall-clock based, so deterministic runs
    /// (`train.deterministic`) keep to the step schedule alone.
    pub eval_max_share: f64,
    /// Seed of the evaluation episodes: the same episodes for every version, so versions
    /// are compared on equal terms (unset: derived from `train.seed`).
    pub eval_seed: Option<u64>,
    /// Write TensorBoard scalars to `tb/` in the run directory.
    pub tensorboard: bool,
}

impl Default for ReportSettings {
    fn default() -> Self {
        ReportSettings {
            eval_every: 0,
            eval_episodes: 10,
            eval_max_share: 0.1,
            eval_seed: None,
            tensorboard: true,
        }
    }
}

impl ReportSettings {
    /// Env steps between evaluations for a run of `total_steps`.
    pub fn eval_interval(&self, total_steps: u64) -> u64 {
        if self.eval_every > 0 {
            self.eval_every
        } else {
            (total_steps / 20).max(1)
        }
    }

    /// Seed of the evaluation episodes for a run seeded `run_seed`.
    pub fn eval_seed(&self, run_seed: u64) -> u64 {
        // A stream of its own: never the seed of any training env.
        self.eval_seed
            .unwrap_or_else(|| strata_env::Stream::Evaluation.seed(run_seed))
    }
}
