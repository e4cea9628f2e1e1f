//! A simulated fleet of deployed agents driving a gateway over real HTTP: built-in envs with
//! action latency, targets that move while an action executes, UI popups, lost reports
//! that are retried, timeouts and agent crashes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::Serialize;
use strata_env::{make_vec_env_with_latency, StepBatch, Stream, VecEnv};

use crate::api::*;
use crate::client::{Client, ClientError};
use crate::TokensFile;

/// How the fleet behaves.
#[derive(Clone, Debug)]
pub struct FleetSettings {
    /// Gateway base URL.
    pub server: String,
    /// Tokens (agents use the agent tokens in name order; the simulated person at the cell
    /// confirms held episodes with the operator token).
    pub tokens: TokensFile,
    /// Agents (threads), each with its own env.
    pub agents: usize,
    /// Built-in env.
    pub env: String,
    /// Ticks before an action takes effect.
    pub latency_ticks: u32,
    /// Stop after this many env steps in all.
    pub steps: u64,
    /// Or after this long.
    pub max_duration: Duration,
    /// Seed.
    pub seed: u64,
    /// Chance per action that the simulated target moves beyond the re-check threshold
    /// meanwhile (envs without a view of their own; `arm-reach-moving` moves its target
    /// itself).
    pub move_prob: f64,
    /// Chance per action that a simulated popup appears (envs without a view of their
    /// own; `ui-form` opens its popups itself).
    pub popup_prob: f64,
    /// Chance per report that the answer is lost (the agent retries).
    pub lost_report_prob: f64,
    /// Chance per action that the agent times out on it.
    pub timeout_prob: f64,
    /// Chance per action that the agent crashes (abandons its episode).
    pub crash_prob: f64,
    /// How long the person at the cell takes to confirm a held episode.
    pub confirm_delay: Duration,
    /// The CA certificate (PEM) an `https://` server's certificate is checked against
    /// (none: the system's roots).
    pub ca: Option<std::path::PathBuf>,
}

impl FleetSettings {
    /// Defaults for `agents` agents on `env` against `server`.
    pub fn new(server: &str, tokens: TokensFile, agents: usize, env: &str) -> Self {
        FleetSettings {
            server: server.to_string(),
            tokens,
            agents,
            env: env.to_string(),
            latency_ticks: 1,
            steps: 50_000,
            max_duration: Duration::from_secs(600),
            seed: 1,
            move_prob: 0.002,
            popup_prob: 0.001,
            lost_report_prob: 0.01,
            timeout_prob: 0.0005,
            crash_prob: 0.0001,
            confirm_delay: Duration::from_millis(20),
            ca: None,
        }
    }
}

/// What the fleet did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FleetReport {
    /// Env steps executed.
    pub steps: u64,
    /// Episodes completed (terminal or time limit).
    pub episodes: u64,
    /// Reports stored.
    pub stored: u64,
    /// Retried reports answered as duplicates.
    pub duplicates: u64,
    /// Re-checks that aborted.
    pub aborts: u64,
    /// Re-checks that held the episode for a human.
    pub holds: u64,
    /// Timed-out actions.
    pub timeouts: u64,
    /// Agent crashes.
    pub crashes: u64,
    /// Requests retried after a transport error, 429 or 503.
    pub retries: u64,
    /// Seconds.
    pub seconds: f64,
    /// Per policy version: (episodes, mean return) of episodes completed with it.
    pub returns_by_version: BTreeMap<u64, (u64, f64)>,
}

impl FleetReport {
    /// Adds `other` (another fleet's, run at the same time against another gateway):
    /// counts add, the time is the longer, returns per version are pooled.
    pub fn merge(&mut self, other: &FleetReport) {
        self.steps += other.steps;
        self.episodes += other.episodes;
        self.stored += other.stored;
        self.duplicates += other.duplicates;
        self.aborts += other.aborts;
        self.holds += other.holds;
        self.timeouts += other.timeouts;
        self.crashes += other.crashes;
        self.retries += other.retries;
        self.seconds = self.seconds.max(other.seconds);
        for (&version, &(n, mean)) in &other.returns_by_version {
            let e = self.returns_by_version.entry(version).or_insert((0, 0.0));
            let total = e.0 + n;
            if total > 0 {
                e.1 = (e.1 * e.0 as f64 + mean * n as f64) / total as f64;
            }
            e.0 = total;
        }
    }
}

#[derive(Default)]
struct Shared {
    steps: AtomicU64,
    report: Mutex<FleetReport>,
}

/// Why the fleet stopped early.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// More agents than agent tokens.
    #[error("{asked} agents asked for but the tokens file holds {held} agent tokens")]
    TooFewTokens {
        /// Agents asked for.
        asked: usize,
        /// Agent tokens held.
        held: usize,
    },
    /// The env is unknown or failed.
    #[error(transparent)]
    Env(#[from] strata_env::EnvError),
    /// A call to the gateway failed in a way retries cannot fix.
    #[error("{what}: {source}")]
    Call {
        /// The call.
        what: &'static str,
        /// The gateway's answer or the transport's failure.
        source: ClientError,
    },
    /// The gateway answered something the simulation cannot go on from.
    #[error("{0}")]
    Unexpected(String),
    /// One agent failed.
    #[error("agent {index}: {source}")]
    Agent {
        /// Which agent.
        index: usize,
        /// What went wrong.
        source: Box<FleetError>,
    },
}

impl FleetError {
    fn call(what: &'static str, source: ClientError) -> Self {
        FleetError::Call { what, source }
    }
}

/// Runs the fleet until its step budget or time is spent.
///
/// # Errors
/// An agent failed in a way retries cannot fix (a 4xx other than expected ones).
pub fn run_fleet(settings: &FleetSettings) -> Result<FleetReport, FleetError> {
    let agents = settings.tokens.agent_tokens();
    if agents.len() < settings.agents {
        return Err(FleetError::TooFewTokens {
            asked: settings.agents,
            held: agents.len(),
        });
    }
    strata_env::spec_for(&settings.env)?;
    let shared = Arc::new(Shared::default());
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let failure: Mutex<Option<FleetError>> = Mutex::new(None);
    std::thread::scope(|s| {
        for (i, (_, token)) in agents.iter().take(settings.agents).enumerate() {
            let (shared, stop, failure) = (shared.clone(), stop.clone(), &failure);
            let token = token.clone();
            std::thread::Builder::new()
                .name(format!("fleet-agent-{i}"))
                .spawn_scoped(s, move || {
                    let mut agent = match SimAgent::new(settings, i, &token) {
                        Ok(a) => a,
                        Err(e) => {
                            *failure.lock() = Some(e);
                            stop.store(true, Ordering::Relaxed);
                            return;
                        }
                    };
                    if let Err(e) = agent.run(&shared, &stop, started) {
                        *failure.lock() = Some(FleetError::Agent {
                            index: i,
                            source: Box::new(e),
                        });
                        stop.store(true, Ordering::Relaxed);
                    }
                })
                .expect("spawn fleet agent");
        }
    });
    if let Some(e) = failure.into_inner() {
        return Err(e);
    }
    let mut report = shared.report.lock().clone();
    report.steps = shared.steps.load(Ordering::Relaxed);
    report.seconds = started.elapsed().as_secs_f64();
    for (n, sum) in report.returns_by_version.values_mut() {
        *sum /= *n as f64;
    }
    Ok(report)
}

struct SimAgent<'a> {
    settings: &'a FleetSettings,
    name: String,
    client: Client,
    operator: Client,
    env: Box<dyn VecEnv>,
    batch: StepBatch,
    obs: Vec<f32>,
    rng: Xoshiro256PlusPlus,
    local: FleetReport,
    returns: BTreeMap<u64, (u64, f64)>,
    reward_sum: f64,
}

enum Step {
    Continue,
    EpisodeOver,
}

impl<'a> SimAgent<'a> {
    fn new(settings: &'a FleetSettings, index: usize, token: &str) -> Result<Self, FleetError> {
        let mut env = make_vec_env_with_latency(&settings.env, 1, settings.latency_ticks)?;
        let spec = env.spec().clone();
        let batch = StepBatch::new(&spec, 1).with_exec(&spec);
        let mut obs = vec![0.0; spec.obs_dim()];
        env.reset(
            Stream::AgentEnv {
                agent: index as u64,
            }
            .seed(settings.seed),
            &mut obs,
        )?;
        let client = match &settings.ca {
            Some(ca) => Client::with_ca(&settings.server, token, ca)
                .map_err(|e| FleetError::call("trust the CA", e))?,
            None => Client::new(&settings.server, token),
        };
        Ok(SimAgent {
            settings,
            // Keys of one fleet run are its own: a second run against the same gateway
            // (same tokens) must not be answered with the first run's episodes.
            name: format!("agent-{index}-{}", run_nonce()),
            operator: client.with_token(settings.tokens.operator()),
            client,
            env,
            batch,
            obs,
            rng: Xoshiro256PlusPlus::seed_from_u64(
                Stream::AgentChoices {
                    agent: index as u64,
                }
                .seed(settings.seed),
            ),
            local: FleetReport::default(),
            returns: BTreeMap::new(),
            reward_sum: 0.0,
        })
    }

    /// Calls until an answer that is not worth retrying (bounded: ~60 s of retries covers a
    /// gateway restart).
    fn retry<T>(
        &mut self,
        mut call: impl FnMut(&Client) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        let mut wait = Duration::from_millis(5);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match call(&self.client) {
                Err(e) if e.retryable() && Instant::now() < deadline => {
                    self.local.retries += 1;
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(Duration::from_millis(500));
                }
                other => return other,
            }
        }
    }

    fn run(
        &mut self,
        shared: &Shared,
        stop: &AtomicBool,
        started: Instant,
    ) -> Result<(), FleetError> {
        let mut episode_index = 0u64;
        let result = 'outer: loop {
            let key = format!("{}-episode-{episode_index}", self.name);
            episode_index += 1;
            let info: EpisodeInfo = match self.retry(|c| {
                c.post(
                    "/v1/episodes",
                    &serde_json::json!({ "idempotency_key": key }),
                )
            }) {
                Ok(i) => i,
                Err(e) => break Err(FleetError::call("start episode", e)),
            };
            self.reward_sum = 0.0;
            let mut step = 0u64;
            loop {
                if stop.load(Ordering::Relaxed)
                    || shared.steps.load(Ordering::Relaxed) >= self.settings.steps
                    || started.elapsed() >= self.settings.max_duration
                {
                    stop.store(true, Ordering::Relaxed);
                    let id = info.episode_id;
                    let _ = self.retry(|c| {
                        c.post::<_, EpisodeInfo>(&format!("/v1/episodes/{id}/end"), &())
                    });
                    break 'outer Ok(());
                }
                match self.step(&info, step, shared) {
                    Ok(Step::Continue) => step += 1,
                    Ok(Step::EpisodeOver) => break,
                    Err(e) => break 'outer Err(e),
                }
            }
        };
        let mut report = shared.report.lock();
        let l = &self.local;
        report.episodes += l.episodes;
        report.stored += l.stored;
        report.duplicates += l.duplicates;
        report.aborts += l.aborts;
        report.holds += l.holds;
        report.timeouts += l.timeouts;
        report.crashes += l.crashes;
        report.retries += l.retries;
        // Summed here; `run_fleet` turns the sums into means once every agent is done.
        for (v, (n, sum)) in &self.returns {
            let e = report.returns_by_version.entry(*v).or_insert((0, 0.0));
            e.0 += n;
            e.1 += sum;
        }
        result
    }

    fn step(&mut self, info: &EpisodeInfo, step: u64, shared: &Shared) -> Result<Step, FleetError> {
        let id = info.episode_id;
        let key = format!("{}-e{id}-s{step}", self.name);
        // The view the action is chosen on: the env's own (a target, the UI's top-level
        // elements) where it has one, else a simulated target and form.
        let observed = self.env.context(0, false);
        let simulated = observed.target.is_none() && observed.ui_top_level.is_none();
        let (target, ui) = if simulated {
            (Some(vec![0.3f32, -0.2]), Some(vec!["form".to_string()]))
        } else {
            (observed.target, observed.ui_top_level)
        };
        let act = serde_json::json!({
            "observation": self.obs,
            "env_seq": step,
            "idempotency_key": key,
            "context": { "target": target, "ui_top_level": ui },
        });
        let answer: ActResponse =
            match self.retry(|c| c.post(&format!("/v1/episodes/{id}/act"), &act)) {
                Ok(a) => a,
                // The episode was ended (timed out) or held meanwhile: start another.
                Err(ClientError::Status { status: 409, .. }) => return Ok(Step::EpisodeOver),
                Err(e) => return Err(FleetError::call("act", e)),
            };
        let a = answer.action_id;
        // What the agent sees just before executing: the env's current view, or the
        // simulated one disturbed with the configured chances.
        let (now_target, now_ui) = if simulated {
            let mut t = target.clone();
            if let Some(t) = t
                .as_mut()
                .filter(|_| self.rng.random::<f64>() < self.settings.move_prob)
            {
                t[0] += 0.5;
            }
            let mut u = ui.clone();
            if let Some(u) = u
                .as_mut()
                .filter(|_| self.rng.random::<f64>() < self.settings.popup_prob)
            {
                u.push("popup".into());
            }
            (t, u)
        } else {
            let now = self.env.context(0, true);
            (now.target, now.ui_top_level)
        };
        let check = serde_json::json!({ "target": now_target, "ui_top_level": now_ui });
        let verdict: RecheckResponse = self
            .retry(|c| c.post(&format!("/v1/actions/{a}/recheck"), &check))
            .map_err(|e| FleetError::call("recheck", e))?;
        match verdict.verdict {
            Verdict::Proceed => {}
            Verdict::Abort => {
                self.local.aborts += 1;
                // Not executed; look again before the next action.
                self.env.reobserve(0, &mut self.obs);
                return Ok(Step::Continue);
            }
            Verdict::NeedsHuman => {
                self.local.holds += 1;
                // The person at the cell looks, closes the popup and confirms.
                std::thread::sleep(self.settings.confirm_delay);
                let op = self.operator.clone();
                let path = format!("/v1/operator/episodes/{id}/confirm");
                self.retry(|_| op.post::<_, EpisodeInfo>(&path, &()))
                    .map_err(|e| FleetError::call("confirm", e))?;
                self.env.reobserve(0, &mut self.obs);
                return Ok(Step::Continue);
            }
        }
        if self.rng.random::<f64>() < self.settings.crash_prob {
            // The agent dies: its episode is left for the gateway to time out.
            self.local.crashes += 1;
            let seed = self.rng.random();
            self.env.reset(seed, &mut self.obs)?;
            return Ok(Step::EpisodeOver);
        }
        self.env.step(&answer.action, &mut self.batch)?;
        shared.steps.fetch_add(1, Ordering::Relaxed);
        let b = &self.batch;
        let (terminated, truncated) = (b.terminated[0], b.truncated[0]);
        let ended = terminated || truncated;
        let after = if ended {
            b.final_obs.clone()
        } else {
            b.obs.clone()
        };
        let (reward, clock, next_obs) = (b.rewards[0], b.clock[0], b.obs.clone());
        let exec = b.exec.clone().expect("exec summary requested");
        self.reward_sum += f64::from(reward);
        if self.rng.random::<f64>() < self.settings.timeout_prob {
            self.local.timeouts += 1;
            let r: ReportResponse = self
                .retry(|c| {
                    c.post(
                        &format!("/v1/actions/{a}/report"),
                        &serde_json::json!({ "outcome": "timeout" }),
                    )
                })
                .map_err(|e| FleetError::call("report timeout", e))?;
            if r.replay.as_deref() == Some("allowed") {
                // A read-only or idempotent action: the world is as after it; report it.
                let _ = self.retry(|c| {
                    c.post::<_, ActResponse>(
                        &format!("/v1/actions/{a}/replay"),
                        &serde_json::json!({}),
                    )
                });
            } else {
                self.obs.copy_from_slice(&next_obs);
                return Ok(if ended {
                    Step::EpisodeOver
                } else {
                    Step::Continue
                });
            }
        }
        let report = ReportRequest {
            outcome: Outcome::Executed,
            completed_at_ns: Some(strata_ledger::now_ns()),
            env_seq: Some(clock),
            observation_after: Some(Observation::Values(after)),
            during_execution: Some(ExecObservations {
                count: exec.ticks[0],
                hash: exec.hash[0],
                min: exec.min,
                max: exec.max,
                mean: exec.mean,
            }),
            reward: Some(reward),
            terminated,
            truncated,
            episode_return: ended.then_some(self.reward_sum),
            success: None,
        };
        let path = format!("/v1/actions/{a}/report");
        if self.rng.random::<f64>() < self.settings.lost_report_prob {
            // Sent, but the answer never arrives: the agent retries below.
            let _ = self.client.post::<_, ReportResponse>(&path, &report);
        }
        let r: ReportResponse = self
            .retry(|c| c.post(&path, &report))
            .map_err(|e| FleetError::call("report", e))?;
        match r.status {
            ReportStatus::Stored => self.local.stored += 1,
            ReportStatus::Duplicate => self.local.duplicates += 1,
            other => {
                return Err(FleetError::Unexpected(format!(
                    "report of action {a} answered {other:?}"
                )))
            }
        }
        self.obs.copy_from_slice(&next_obs);
        if ended {
            self.local.episodes += 1;
            let e = self
                .returns
                .entry(answer.policy_version)
                .or_insert((0, 0.0));
            e.0 += 1;
            e.1 += self.reward_sum;
            let _ =
                self.retry(|c| c.post::<_, EpisodeInfo>(&format!("/v1/episodes/{id}/end"), &()));
            return Ok(Step::EpisodeOver);
        }
        Ok(Step::Continue)
    }
}

/// A number naming an agent apart from the agents of any other fleet run: the time it
/// was made, in nanoseconds, in hexadecimal.
fn run_nonce() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{now:x}")
}
