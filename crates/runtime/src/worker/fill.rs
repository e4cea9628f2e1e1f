//! Filling a fragment: stepping a worker's envs `ppo.n_steps` times with in-worker
//! inference or through the central inference thread (double-buffered), and recording
//! each step's outcome and provenance into the fragment's rows.

use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use strata_env::{StepBatch, VecEnv};
use strata_nn::{ActorCritic, SampleRng};

use super::exploration::SdeSchedule;
use super::memory::EnvMemory;
use super::{exit_requested, WorkerCommand, WorkerError};
use crate::buffer::{ExperienceBuffer, FillTime, Fragment};
use crate::inference::InferenceClient;
use crate::telemetry::{Activity, Heartbeat};
use strata_learner::MemoryPolicyStore;

/// What every step needs to know about its worker.
pub(super) struct StepContext<'a> {
    pub(super) buffer: &'a ExperienceBuffer,
    /// Envs of the worker.
    pub(super) m: usize,
    /// Envs per group.
    pub(super) gm: usize,
    pub(super) od: usize,
    /// Values in an observation summary.
    pub(super) sd: usize,
    pub(super) ad: usize,
    pub(super) heartbeat: &'a Heartbeat,
    pub(super) commands: &'a Receiver<WorkerCommand>,
    pub(super) id: usize,
    pub(super) store: &'a MemoryPolicyStore,
    pub(super) wall: WallClock,
    /// When gSDE matrices are redrawn.
    pub(super) sde: SdeSchedule,
}

/// Wall-clock nanoseconds from a monotonic clock: one reading of each at start.
#[derive(Clone, Copy)]
pub(super) struct WallClock {
    instant: Instant,
    epoch_ns: i64,
}

impl WallClock {
    pub(super) fn now() -> Self {
        WallClock {
            instant: Instant::now(),
            epoch_ns: strata_ledger::now_ns(),
        }
    }

    fn ns(&self, at: Instant) -> i64 {
        let since = at.saturating_duration_since(self.instant).as_nanos();
        self.epoch_ns + i64::try_from(since).unwrap_or(i64::MAX)
    }
}

/// Copies group `g`'s step-`t` outcome (rewards, flags, final observations, episodes) into
/// the fragment's rows `t * m + g * gm ..`.
fn record_step(
    ctx: &StepContext<'_>,
    f: &mut Fragment,
    (t, g): (usize, usize),
    (issued, completed): (Instant, Instant),
    batch: &StepBatch,
) {
    let (rows, od) = (t * ctx.m + g * ctx.gm..t * ctx.m + (g + 1) * ctx.gm, ctx.od);
    let p = &mut f.provenance;
    p.issued_ns[rows.clone()].fill(ctx.wall.ns(issued));
    p.completed_ns[rows.clone()].fill(ctx.wall.ns(completed));
    p.sampler_version[rows.clone()].fill(ctx.store.newest_sampling());
    if let Some(exec) = &batch.exec {
        p.clock[rows.clone()].copy_from_slice(&batch.clock);
        p.obs_count[rows.clone()].copy_from_slice(&exec.ticks);
        p.obs_hash[rows.clone()].copy_from_slice(&exec.hash);
        let dims = rows.start * ctx.sd..rows.end * ctx.sd;
        p.obs_min[dims.clone()].copy_from_slice(&exec.min);
        p.obs_max[dims.clone()].copy_from_slice(&exec.max);
        p.obs_mean[dims].copy_from_slice(&exec.mean);
    }
    f.rewards[rows.clone()].copy_from_slice(&batch.rewards);
    f.terminated[rows.clone()].copy_from_slice(&batch.terminated);
    f.truncated[rows.clone()].copy_from_slice(&batch.truncated);
    ctx.buffer
        .check_write("rewards", &f.rewards, rows.start, &batch.rewards);
    for i in 0..ctx.gm {
        if batch.truncated[i] && !batch.terminated[i] {
            f.final_obs
                .write(rows.start + i, &batch.final_obs[i * od..(i + 1) * od]);
        }
    }
    f.episodes
        .extend(batch.episodes.iter().map(|e| strata_env::EpisodeEnd {
            env: e.env + g * ctx.gm,
            ..*e
        }));
}

/// In-worker inference: act on all envs, step them, `steps` times. `Ok(false)` when an
/// exit was requested mid-fragment.
#[allow(clippy::too_many_arguments)]
pub(super) fn fill_local(
    ctx: &StepContext<'_>,
    f: &mut Fragment,
    model: &mut dyn ActorCritic,
    envs: &mut Box<dyn VecEnv>,
    batch: &mut StepBatch,
    obs: &mut [f32],
    (rng, sde_noise): (&mut SampleRng, &mut [f32]),
    memory: &mut EnvMemory,
    steps: usize,
    timing: &mut FillTime,
) -> Result<bool, WorkerError> {
    let (m, ad) = (ctx.m, ctx.ad);
    for t in 0..steps {
        ctx.heartbeat.beat(Activity::Collecting);
        if exit_requested(ctx.commands) {
            return Ok(false);
        }
        let (rows, arow) = (t * m..(t + 1) * m, t * m * ad..(t + 1) * m * ad);
        let t0 = Instant::now();
        f.obs.write(rows.start, obs);
        ctx.buffer.check_obs_write(&f.obs, rows.start, obs);
        let written = Instant::now();
        let lent = memory.record(f, t);
        model.act(
            obs,
            lent,
            rng,
            sde_noise,
            &mut f.actions[arow.clone()],
            &mut f.log_probs[rows.clone()],
            &mut f.values[rows],
        );
        let t1 = Instant::now();
        envs.step(&f.actions[arow], batch)?;
        memory.step_done(batch);
        ctx.sde.after_step(t, batch, sde_noise, rng);
        let t2 = Instant::now();
        record_step(ctx, f, (t, 0), (t1, t2), batch);
        let t3 = Instant::now();
        obs.copy_from_slice(&batch.obs);
        timing.copies += (written - t0 + t3.elapsed()).as_secs_f64();
        timing.inference += (t1 - written).as_secs_f64();
        timing.add_step((t2 - t1).as_secs_f64(), batch.timing);
        timing.provenance += (t3 - t2).as_secs_f64();
    }
    Ok(true)
}

/// Central inference with double buffering: while one group's request is answered, the
/// other group steps. `Ok(false)` when an exit was requested mid-fragment.
#[allow(clippy::too_many_arguments)]
pub(super) fn fill_central(
    ctx: &StepContext<'_>,
    f: &mut Fragment,
    client: &InferenceClient,
    envs: &mut [Box<dyn VecEnv>],
    batches: &mut [StepBatch],
    obs: &mut [Vec<f32>],
    (rngs, sde_noise): (&mut [SampleRng], &mut [Vec<f32>]),
    memory: &mut EnvMemory,
    steps: usize,
    version: u64,
    wait_timeout: Duration,
    timing: &mut FillTime,
) -> Result<bool, WorkerError> {
    let (m, gm, ad) = (ctx.m, ctx.gm, ctx.ad);
    let write_obs = |f: &mut Fragment, t: usize, g: usize, o: &[f32]| {
        let row = t * m + g * gm;
        f.obs.write(row, o);
        ctx.buffer.check_obs_write(&f.obs, row, o);
    };
    for g in 0..envs.len() {
        write_obs(f, 0, g, &obs[g]);
        let sent = memory.record_group(f, 0, (g * gm, gm));
        client
            .request(g, &obs[g], version, &rngs[g], &sde_noise[g], sent)
            .map_err(WorkerError::Inference)?;
    }
    for t in 0..steps {
        for g in 0..envs.len() {
            let t0 = Instant::now();
            let answered = client.wait(g, wait_timeout, ctx.heartbeat, || {
                exit_requested(ctx.commands)
            })?;
            if !answered {
                return Ok(false);
            }
            let row = t * m + g * gm;
            {
                let slot = client.slots.lock((ctx.id, g));
                f.actions[row * ad..(row + gm) * ad].copy_from_slice(&slot.actions);
                f.log_probs[row..row + gm].copy_from_slice(&slot.log_probs);
                f.values[row..row + gm].copy_from_slice(&slot.values);
                rngs[g] = slot.rng.clone();
                memory.answered(g * gm, &slot.state);
            }
            ctx.heartbeat.beat(Activity::Collecting);
            let t1 = Instant::now();
            envs[g].step(&f.actions[row * ad..(row + gm) * ad], &mut batches[g])?;
            memory.group_done(g * gm, &batches[g]);
            ctx.sde
                .after_step(t, &batches[g], &mut sde_noise[g], &mut rngs[g]);
            let t2 = Instant::now();
            record_step(ctx, f, (t, g), (t1, t2), &batches[g]);
            let t3 = Instant::now();
            obs[g].copy_from_slice(&batches[g].obs);
            if t + 1 < steps {
                write_obs(f, t + 1, g, &obs[g]);
            }
            let t4 = Instant::now();
            if t + 1 < steps {
                let sent = memory.record_group(f, t + 1, (g * gm, gm));
                client.request(g, &obs[g], version, &rngs[g], &sde_noise[g], sent)?;
            }
            timing.inference += (t1 - t0 + t4.elapsed()).as_secs_f64();
            timing.add_step((t2 - t1).as_secs_f64(), batches[g].timing);
            timing.provenance += (t3 - t2).as_secs_f64();
            timing.copies += (t4 - t3).as_secs_f64();
        }
    }
    Ok(true)
}
