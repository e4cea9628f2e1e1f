//! [`GymVecEnv`]: a vector of Gymnasium envs spread over worker processes.

use super::protocol::Command;
use std::time::{Duration, Instant};

use rand::{RngCore, SeedableRng};

use super::process::EnvProcess;
use super::region::Region;
use super::rows::RowSplit;
use super::{GymError, GymLayout, GymTarget};
use crate::vector::{check_actions, clip_action};
use crate::{
    derive_seed, EnvError, EnvRng, EnvSpec, EpisodeEnd, FaultPlan, SlotSnapshot, StepBatch,
    StepTiming, VecEnv, VecEnvSnapshot,
};

/// Spinning relies on x86's store order for what the worker (Python, no fences) writes
/// before its done number; elsewhere the two sides always sleep and wake.
#[cfg(target_arch = "x86_64")]
const SPIN_BUDGET: Duration = Duration::from_micros(50);
#[cfg(not(target_arch = "x86_64"))]
const SPIN_BUDGET: Duration = Duration::ZERO;

/// The spin budget for env processes when `busy` processes and threads (env processes,
/// the threads driving them, a learner) compete for this machine's cores: spinning only
/// when each has a core of its own, since a spinner sharing a core delays the very process
/// it waits for (measured: 2 processes and their driver on 2 cores step CartPole 35%
/// slower spinning than sleeping).
#[must_use]
pub fn spin_budget(busy: usize) -> Duration {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    if busy <= cores {
        SPIN_BUDGET
    } else {
        Duration::ZERO
    }
}

/// How a [`GymVecEnv`] runs its processes.
#[derive(Clone, Debug, PartialEq)]
pub struct GymOptions {
    /// Envs each process steps (the last may have fewer); 0: all in one process.
    pub envs_per_process: usize,
    /// How long a step or reset may take before the process is taken for hung and killed.
    pub step_timeout: Duration,
    /// How long starting a process and making its envs may take.
    pub start_timeout: Duration,
    /// A fault the first process injects inside Python (raise, NaN, crash, hang), for
    /// robustness tests; never for a replacement worker.
    pub fault: Option<FaultPlan>,
    /// How long either side spins for the other before sleeping on the socket (a null
    /// env's round trip is a few microseconds spinning, tens of microseconds through two
    /// wake-ups); zero never spins. `None`: [`spin_budget`] for this vector's processes
    /// and the one thread driving them.
    pub spin: Option<Duration>,
    /// Appends env 0's pictures to this file after every reset and step (the target must
    /// make its envs with `render_mode="rgb_array"`): read by [`FrameReader`](crate::FrameReader).
    pub record: Option<std::path::PathBuf>,
}

impl Default for GymOptions {
    fn default() -> Self {
        GymOptions {
            envs_per_process: 0,
            step_timeout: Duration::from_secs(30),
            start_timeout: Duration::from_secs(120),
            fault: None,
            spin: None,
            record: None,
        }
    }
}

/// One process and the envs it owns (`first .. first + k` of the vector).
struct Member {
    process: EnvProcess,
    first: usize,
    k: usize,
}

impl Member {
    fn region(&self) -> &Region {
        self.process
            .region
            .as_ref()
            .expect("a stepping process has a region")
    }

    fn region_mut(&mut self) -> &mut Region {
        self.process
            .region
            .as_mut()
            .expect("a stepping process has a region")
    }
}

/// `num_envs` Gymnasium envs in worker processes, with Strata's [`VecEnv`] semantics:
/// same-step autoreset keeping the final observation, per-env seeds derived from one run
/// seed, continuous actions clipped to the action space at the env boundary, NaN
/// observations or rewards refused. Envs are seeded by their index in the vector, so how
/// they are spread over processes does not change what they do.
///
/// Once a process fails (raises, dies, hangs), the vector is failed: every later call
/// returns that error until [`VecEnv::revive`] restarts the failed process alone (its
/// healthy siblings keep running) and a reset starts fresh episodes. Dropping it stops
/// every process.
pub struct GymVecEnv {
    spec: EnvSpec,
    members: Vec<Member>,
    /// How to start a member's process again: the target and its launch arguments.
    target: GymTarget,
    layout_json: String,
    start_timeout: Duration,
    spin: Duration,
    /// Env 0's pictures, when started to record.
    frames: Option<crate::FrameReader>,
    /// Members whose process failed and was stopped, to restart on revival.
    broken: Vec<usize>,
    num_envs: usize,
    obs_dim: usize,
    /// How a row crosses the region (images as bytes).
    split: RowSplit,
    act_dim: usize,
    elapsed: Vec<u32>,
    episode_return: Vec<f64>,
    /// The seed of the last reset (a snapshot's fresh-episode seeds derive from it).
    seed: u64,
    step_timeout: Duration,
    failed: Option<EnvError>,
}

impl GymVecEnv {
    /// Starts the processes for `num_envs` envs of `target`, each checking that its env
    /// still has `layout`; the envs are reset (seed 0) and ready to step.
    ///
    /// # Errors
    /// [`EnvError::Gym`] when a process cannot be started, its env cannot be made, or
    /// its layout differs from `layout`.
    pub fn start(
        name: &str,
        target: &GymTarget,
        layout: &GymLayout,
        num_envs: usize,
        options: &GymOptions,
    ) -> Result<Self, EnvError> {
        let spec = layout.spec(name);
        let (obs_dim, act_dim) = (spec.obs_dim(), spec.action_dim());
        let split = RowSplit::new(obs_dim, spec.image_ranges());
        let per = match options.envs_per_process {
            0 => num_envs.max(1),
            n => n,
        };
        let layout_json = serde_json::to_string(layout).expect("a layout serialises");
        let spin = options
            .spin
            .unwrap_or_else(|| spin_budget(num_envs.div_ceil(per) + 1));
        let mut envs = GymVecEnv {
            spec,
            members: Vec::new(),
            target: target.clone(),
            layout_json,
            start_timeout: options.start_timeout,
            spin,
            frames: options.record.as_deref().map(crate::FrameReader::new),
            broken: Vec::new(),
            num_envs,
            obs_dim,
            split,
            act_dim,
            elapsed: vec![0; num_envs],
            episode_return: vec![0.0; num_envs],
            seed: 0,
            step_timeout: options.step_timeout,
            failed: None,
        };
        let mut first = 0;
        while first < num_envs {
            let k = per.min(num_envs - first);
            let index = envs.members.len();
            let fault = options.fault.as_ref().filter(|_| index == 0);
            let process = envs
                .spawn_process(first, k, fault)
                .map_err(|e| envs.error(index, e))?;
            envs.members.push(Member { process, first, k });
            first += k;
        }
        // Started together, then waited on: the processes make their envs in parallel.
        let timeout = envs.start_timeout;
        for index in 0..envs.members.len() {
            let ready = envs.members[index].process.wait_ready(timeout);
            ready.map_err(|e| envs.error(index, e))?;
        }
        let mut obs = vec![0.0; num_envs * obs_dim];
        envs.reset(0, &mut obs)?;
        Ok(envs)
    }

    /// Starts (without waiting for it) a process stepping `k` envs from env `first`, with
    /// `fault` injected.
    fn spawn_process(
        &self,
        first: usize,
        k: usize,
        fault: Option<&FaultPlan>,
    ) -> Result<EnvProcess, GymError> {
        let widths = (self.split.float_width(), self.split.byte_width());
        let region =
            Region::create(k, widths, self.act_dim).map_err(|e| GymError::Region(e.to_string()))?;
        let mut extra = vec![
            "--envs".to_string(),
            k.to_string(),
            "--layout".to_string(),
            self.layout_json.clone(),
        ];
        if let Some(plan) = fault {
            extra.extend([
                "--fault".to_string(),
                serde_json::to_string(plan).expect("a fault plan serialises"),
            ]);
        }
        if let (Some(path), true) = (
            self.frames.as_ref().map(crate::FrameReader::path),
            first == 0,
        ) {
            extra.extend(["--record-file".to_string(), path.display().to_string()]);
        }
        let mut process =
            EnvProcess::start(&self.target.launch(extra), Some(region), self.start_timeout)?;
        process.set_spin(self.spin);
        Ok(process)
    }

    /// The vector's error for a failure of process `process`.
    fn error(&self, process: usize, error: GymError) -> EnvError {
        EnvError::Gym {
            env: self.spec.name.clone(),
            process,
            error,
        }
    }

    /// Process ids, in env order (for tests and operators).
    pub fn pids(&self) -> Vec<u32> {
        self.members.iter().map(|m| m.process.pid()).collect()
    }

    /// Sends `command` to every process, then waits for each answer: the processes work in
    /// parallel. A process that fails is stopped and the vector failed with its error; every
    /// other process that was sent the command is still waited for, so the healthy ones
    /// stand ready for a revival.
    fn round(&mut self, command: Command) -> Result<(), EnvError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let mut errors = Vec::new();
        let mut sent = self.members.len();
        for (index, m) in self.members.iter_mut().enumerate() {
            if let Err(e) = m.process.send(command) {
                errors.push((index, e));
                sent = index;
                break;
            }
        }
        for (index, m) in self.members.iter_mut().enumerate().take(sent) {
            if let Err(e) = m.process.wait(self.step_timeout) {
                errors.push((index, e));
            }
        }
        let mut first = None;
        for (index, error) in errors {
            let m = &mut self.members[index];
            m.process.ask_to_quit();
            m.process.finish();
            self.broken.push(index);
            first.get_or_insert((index, error));
        }
        match first {
            None => Ok(()),
            Some((process, error)) => {
                let error = self.error(process, error);
                self.failed = Some(error.clone());
                Err(error)
            }
        }
    }

    /// Asks every process to quit first, then waits for each: they close in parallel.
    fn stop_processes(&mut self) {
        for m in &mut self.members {
            m.process.ask_to_quit();
        }
        for m in &mut self.members {
            m.process.finish();
        }
    }

    fn non_finite(&mut self, index: usize, what: &'static str, value: f64) -> EnvError {
        let error = EnvError::NonFinite {
            env: self.spec.name.clone(),
            index,
            what,
            value,
            step: self.elapsed[index],
        };
        self.failed = Some(error.clone());
        error
    }

    /// Copies the processes' current observations into `obs` (all envs, row-major).
    fn read_obs(&self, obs: &mut [f32]) {
        let d = self.obs_dim;
        for m in &self.members {
            let (floats, bytes) = m.region().obs();
            self.split
                .join(floats, bytes, &mut obs[m.first * d..(m.first + m.k) * d]);
        }
    }

    /// Resets every env with the seed of its index under `seed`, keeping the clocks.
    fn reset_with(&mut self, seeds: impl Fn(usize) -> u64) -> Result<(), EnvError> {
        for m in &mut self.members {
            let first = m.first;
            for (j, s) in m.region_mut().seeds_mut().iter_mut().enumerate() {
                *s = seeds(first + j);
            }
        }
        self.round(Command::Reset)?;
        self.elapsed.fill(0);
        self.episode_return.fill(0.0);
        Ok(())
    }
}

impl VecEnv for GymVecEnv {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }

    fn num_envs(&self) -> usize {
        self.num_envs
    }

    fn reset(&mut self, seed: u64, obs: &mut [f32]) -> Result<(), EnvError> {
        self.seed = seed;
        self.reset_with(|i| derive_seed(seed, i as u64))?;
        self.read_obs(obs);
        Ok(())
    }

    fn step(&mut self, actions: &[f32], out: &mut StepBatch) -> Result<(), EnvError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        check_actions(&self.spec, self.num_envs, actions)?;
        let ad = self.act_dim;
        for m in &mut self.members {
            let src = &actions[m.first * ad..(m.first + m.k) * ad];
            let dst = m.region_mut().actions_mut();
            for (d, s) in dst.chunks_exact_mut(ad).zip(src.chunks_exact(ad)) {
                clip_action(&self.spec.action_space, s, d);
            }
        }
        self.round(Command::Step)?;
        out.episodes.clear();
        out.timing = StepTiming::default();
        let d = self.obs_dim;
        let (fw, bw) = (self.split.float_width(), self.split.byte_width());
        for mi in 0..self.members.len() {
            let (first, k) = (self.members[mi].first, self.members[mi].k);
            let region = self.members[mi].region();
            let view = region.step_view();
            let rows = first * d..(first + k) * d;
            let joined = Instant::now();
            self.split
                .join(view.obs, view.obs_pixels, &mut out.obs[rows.clone()]);
            let checked = Instant::now();
            out.timing.frames += (checked - joined).as_secs_f64();
            let mut bad = None;
            for j in 0..k {
                let i = first + j;
                let (reward, done) = (
                    view.rewards[j],
                    view.terminated[j] != 0 || view.truncated[j] != 0,
                );
                // What the step ended on: the final observation when the env was reset.
                if done {
                    self.split.join(
                        &view.final_obs[j * fw..(j + 1) * fw],
                        &view.final_pixels[j * bw..(j + 1) * bw],
                        &mut out.final_obs[i * d..(i + 1) * d],
                    );
                }
                let row = &out.obs[i * d..(i + 1) * d];
                let (seen, also): (&[f32], &[f32]) = if done {
                    (&out.final_obs[i * d..(i + 1) * d], row)
                } else {
                    (row, &[])
                };
                if let Some(v) = seen.iter().chain(also).find(|v| !v.is_finite()) {
                    bad = Some((i, "observation", f64::from(*v)));
                    break;
                }
                if !reward.is_finite() {
                    bad = Some((i, "reward", reward));
                    break;
                }
                if let Some(exec) = out.exec.as_mut() {
                    exec.start(i);
                    exec.observe(i, seen);
                    exec.finish(i);
                }
                out.rewards[i] = reward as f32;
                out.terminated[i] = view.terminated[j] != 0;
                out.truncated[i] = view.truncated[j] != 0;
                out.clock[i] = view.clock[j];
                self.elapsed[i] += 1;
                self.episode_return[i] += reward;
                if done {
                    // A game's lives are episodes to train on; the game is the one counted,
                    // with its raw score (before any reward clipping).
                    let (counted, episode_return, length) = match view.game_over[j] {
                        1 => (false, self.episode_return[i], self.elapsed[i]),
                        2 => (
                            true,
                            view.game_return[j],
                            u32::try_from(view.game_length[j]).unwrap_or(u32::MAX),
                        ),
                        _ => (true, self.episode_return[i], self.elapsed[i]),
                    };
                    out.episodes.push(EpisodeEnd {
                        env: i,
                        episode_return,
                        length,
                        terminated: out.terminated[i],
                        success: match view.success[j] {
                            1 => Some(false),
                            2 => Some(true),
                            _ => None,
                        },
                        counted,
                    });
                    self.elapsed[i] = 0;
                    self.episode_return[i] = 0.0;
                }
            }
            out.timing.summaries += checked.elapsed().as_secs_f64();
            if let Some((i, what, value)) = bad {
                return Err(self.non_finite(i, what, value));
            }
        }
        Ok(())
    }

    /// The counters and clocks, and a seed stream for the fresh episodes a restore starts:
    /// an env's state lives in its process and is not saved.
    fn snapshot(&self) -> VecEnvSnapshot {
        let mut clocks = vec![0; self.num_envs];
        for m in &self.members {
            clocks[m.first..m.first + m.k].copy_from_slice(m.region().step_view().clock);
        }
        VecEnvSnapshot {
            slots: (0..self.num_envs)
                .map(|i| SlotSnapshot {
                    state: Vec::new(),
                    rng: EnvRng::seed_from_u64(derive_seed(self.seed ^ clocks[i], i as u64)),
                    elapsed: self.elapsed[i],
                    episode_return: self.episode_return[i],
                    clock: clocks[i],
                    previous_action: Vec::new(),
                })
                .collect(),
            obs_rms: None,
            return_rms: None,
        }
    }

    /// Starts fresh episodes seeded from the snapshot, continuing the env clocks (see
    /// [`VecEnv::restores_exactly`]).
    fn restore(&mut self, snapshot: &VecEnvSnapshot) -> Result<(), EnvError> {
        if snapshot.slots.len() != self.num_envs {
            return Err(EnvError::BadState {
                env: self.spec.name.clone(),
                reason: format!(
                    "snapshot holds {} envs, this vector has {}",
                    snapshot.slots.len(),
                    self.num_envs
                ),
            });
        }
        for m in &mut self.members {
            let first = m.first;
            for (j, c) in m.region_mut().clock_mut().iter_mut().enumerate() {
                *c = snapshot.slots[first + j].clock;
            }
        }
        let seeds: Vec<u64> = snapshot
            .slots
            .iter()
            .map(|s| s.rng.clone().next_u64())
            .collect();
        self.reset_with(|i| seeds[i])
    }

    fn restores_exactly(&self) -> bool {
        false
    }

    fn record(&mut self) -> Result<(), EnvError> {
        match self.frames {
            Some(_) => Ok(()),
            None => Err(EnvError::NoPictures {
                env: self.spec.name.clone(),
                reason: "its processes were not started to record (GymOptions::record)".into(),
            }),
        }
    }

    fn take_frames(&mut self) -> Result<Vec<crate::Frame>, EnvError> {
        let Some(reader) = self.frames.as_mut() else {
            return Ok(Vec::new());
        };
        reader.read_new().map_err(|e| EnvError::NoPictures {
            env: self.spec.name.clone(),
            reason: format!("its recording cannot be read: {e}"),
        })
    }

    /// Restarts the processes that failed (their replacements carry no injected fault),
    /// keeping the healthy ones; a reset must follow.
    fn revive(&mut self) -> Result<bool, EnvError> {
        let broken = std::mem::take(&mut self.broken);
        for &index in &broken {
            let (first, k) = (self.members[index].first, self.members[index].k);
            let process = self
                .spawn_process(first, k, None)
                .map_err(|e| self.error(index, e))?;
            self.members[index].process = process;
        }
        for &index in &broken {
            let timeout = self.start_timeout;
            let ready = self.members[index].process.wait_ready(timeout);
            ready.map_err(|e| self.error(index, e))?;
        }
        self.failed = None;
        Ok(true)
    }

    fn reobserve(&mut self, env: usize, obs: &mut [f32]) {
        let d = self.obs_dim;
        let m = self
            .members
            .iter()
            .find(|m| (m.first..m.first + m.k).contains(&env))
            .expect("env index in range");
        let (floats, bytes) = m.region().obs();
        let j = env - m.first;
        let (fw, bw) = (self.split.float_width(), self.split.byte_width());
        debug_assert_eq!(obs.len(), d);
        self.split.join(
            &floats[j * fw..(j + 1) * fw],
            &bytes[j * bw..(j + 1) * bw],
            obs,
        );
    }
}

impl Drop for GymVecEnv {
    fn drop(&mut self) {
        self.stop_processes();
    }
}
