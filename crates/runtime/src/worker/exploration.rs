//! A worker's exploration noise: each env's gSDE matrix, drawn from its group's RNG, held
//! for a fragment or an episode or redrawn every `network.sde_sample_freq` steps, and
//! carried across a checkpoint. Every rule about when noise is drawn lives here (empty
//! without gSDE).

use strata_env::StepBatch;
use strata_nn::{standard_normals, SampleRng, SdeHold};

use crate::{RunConfig, RuntimeError};
use strata_config::sde_noise_len;

/// When matrices are drawn: what every step needs to know.
#[derive(Clone, Copy, Debug)]
pub(super) struct SdeSchedule {
    /// Standard normals in one env's matrix (0 without gSDE).
    len: usize,
    hold: SdeHold,
    /// Steps between redraws of every matrix (0: as `hold` says).
    every: usize,
}

impl SdeSchedule {
    /// The matrices after fragment step `t`: all drawn anew every `every` steps (as SB3
    /// draws them every `sde_sample_freq` steps of its rollout); held per episode, an env
    /// whose episode just ended gets a new one.
    pub(super) fn after_step(
        &self,
        t: usize,
        batch: &StepBatch,
        noise: &mut [f32],
        rng: &mut SampleRng,
    ) {
        if self.len == 0 {
            return;
        }
        if self.every > 0 && (t + 1).is_multiple_of(self.every) {
            standard_normals(noise, rng);
            return;
        }
        if self.hold != SdeHold::Episode {
            return;
        }
        for (i, row) in noise.chunks_exact_mut(self.len).enumerate() {
            if batch.terminated[i] || batch.truncated[i] {
                standard_normals(row, rng);
            }
        }
    }
}

/// A worker's matrices, a vector per env group.
pub(super) struct Exploration {
    schedule: SdeSchedule,
    /// Each group's matrices, an env's after another.
    pub(super) noise: Vec<Vec<f32>>,
    /// Whether the matrices hold draws (a fresh worker draws at its first fragment).
    drawn: bool,
}

impl Exploration {
    /// Undrawn matrices for `groups` groups of `envs_per_group` envs.
    ///
    /// # Errors
    /// As [`sde_noise_len`].
    pub(super) fn new(
        config: &RunConfig,
        groups: usize,
        envs_per_group: usize,
    ) -> Result<Self, RuntimeError> {
        let len = sde_noise_len(config)?;
        Ok(Exploration {
            schedule: SdeSchedule {
                len,
                hold: config.network.sde_hold,
                every: config.network.sde_sample_freq,
            },
            noise: vec![vec![0.0; envs_per_group * len]; groups],
            drawn: false,
        })
    }

    /// A resumed worker continues with the matrices it had (when their shape still fits).
    pub(super) fn resume(&mut self, saved: &[Vec<f32>]) {
        if saved
            .iter()
            .map(Vec::len)
            .eq(self.noise.iter().map(Vec::len))
        {
            self.noise.clone_from_slice(saved);
            self.drawn = self.schedule.len > 0;
        }
    }

    /// At a fragment's start: matrices held per fragment are drawn anew, and a fresh
    /// worker draws its first.
    pub(super) fn begin_fragment(&mut self, rngs: &mut [SampleRng]) {
        if !self.drawn || self.schedule.hold == SdeHold::Fragment {
            for (noise, rng) in self.noise.iter_mut().zip(rngs.iter_mut()) {
                standard_normals(noise, rng);
            }
            self.drawn = true;
        }
    }

    /// When matrices are redrawn during a fragment.
    pub(super) fn schedule(&self) -> SdeSchedule {
        self.schedule
    }
}
