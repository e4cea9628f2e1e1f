//! One update: collect a fragment per worker, bootstrap the values a rollout needs, let
//! the learner core correct, admit and train, publish the next version.

use super::*;

impl Trainer {
    /// Consumes one fragment from every worker into the rollout.
    pub(super) fn collect(&mut self) -> Result<(), RuntimeError> {
        let mut books = Books {
            progress: &mut self.progress,
            ledger: &mut self.ledger,
        };
        self.collector
            .collect(&mut self.rollout, &mut self.normalizer, &mut books)
    }

    /// Bootstrap values: V(final observation) of truncated steps and V(next observation)
    /// after the rollout, from the learner's model.
    pub(super) fn bootstrap_values(&mut self) {
        let (n, od) = (self.config.env.num_envs, self.rollout.obs_dim);
        let m = n / self.config.runtime.workers;
        let c = &self.collector;
        if !c.final_rows.is_empty() {
            self.scratch_values.resize(c.final_rows.len(), 0.0);
            // A recurrent policy values a final observation with the state the env had
            // after its last step (a copy: the rollout keeps its states).
            self.scratch_state.clone_from(&c.final_states);
            self.scratch_starts.clear();
            self.scratch_starts.resize(
                if c.final_states.is_empty() {
                    0
                } else {
                    c.final_rows.len()
                },
                false,
            );
            let memory = Memory {
                state: &mut self.scratch_state,
                starts: &self.scratch_starts,
            };
            self.core
                .model_mut()
                .values(&c.final_obs, memory, &mut self.scratch_values);
            for (k, &row) in self.collector.final_rows.iter().enumerate() {
                self.rollout.final_values[row] = self.scratch_values[k];
            }
        }
        self.scratch_obs.clear();
        self.scratch_state.clear();
        self.scratch_starts.clear();
        for w in 0..self.config.runtime.workers {
            let state = self.collector.worker_states[w]
                .as_ref()
                .expect("set when the fragment was consumed");
            self.scratch_obs.extend_from_slice(&state.obs[..m * od]);
            self.scratch_state.extend_from_slice(&state.memory);
            self.scratch_starts.extend_from_slice(&state.starts);
        }
        let memory = Memory {
            state: &mut self.scratch_state,
            starts: &self.scratch_starts,
        };
        self.core
            .model_mut()
            .values(&self.scratch_obs, memory, &mut self.rollout.last_values);
        self.scratch_obs.clear();
    }

    /// One iteration: consume a fragment per worker, bootstrap, (correct for lag), GAE,
    /// PPO update, publish version v+1. Returns the record for the metrics file.
    ///
    /// # Errors
    /// A worker's failure (env NaN, panic) with the worker named.
    pub fn iterate(&mut self) -> Result<UpdateRecord, RuntimeError> {
        let started = Instant::now();
        let progress_remaining = self
            .progress
            .schedule_remaining(self.progress.global_step, self.config.train.total_steps);
        self.collect()?;
        let t0 = Instant::now();
        self.bootstrap_values();
        let lagged = self.collector.lags.iter().any(|l| *l > 0);
        let correction = if lagged {
            Correction::Configured
        } else {
            Correction::None
        };
        let is_weights = self.core.prepare(&mut self.rollout, correction);
        let versioned = self.ledger.as_ref().map(LedgerLink::rules);
        let admitted = self.core.admit(
            &mut self.rollout,
            &self.collector.fragments,
            &self.config.admission,
            versioned,
            self.progress.policy_version,
            self.progress.updates + 1,
        );
        let stats = self.core.train(&self.rollout, progress_remaining.max(0.0));
        let t1 = Instant::now();
        let next = self.progress.policy_version + 1;
        self.collector.wiring.store.publish(PublishedPolicy::new(
            next,
            self.core.params().to_vec(),
            self.normalizer.clone(),
        ))?;
        if let Some(link) = self.ledger.as_mut() {
            link.finish_update(admitted.decisions, next)?;
            link.save_to(&mut self.progress);
        }
        let publish = t1.elapsed().as_secs_f64();
        let learn = (t1 - t0).as_secs_f64();
        let p = &mut self.progress;
        p.time.forward += stats.forward_seconds;
        p.time.backward += stats.backward_seconds;
        p.time.optimizer += stats.optimizer_seconds;
        p.time.publish += publish;
        p.time.other +=
            learn - stats.forward_seconds - stats.backward_seconds - stats.optimizer_seconds;
        p.wall_seconds += started.elapsed().as_secs_f64();
        p.updates += 1;
        p.policy_version = next;
        let mean_return = self.mean_return();
        let p = &mut self.progress;
        let lags = &self.collector.lags;
        if p.solved_at.is_none()
            && p.recent_returns.len() >= self.config.train.solve_window
            && mean_return.is_some_and(|m| m >= self.threshold)
        {
            p.solved_at = Some((p.global_step, p.wall_seconds));
            // The newest collecting version: the learner's version before this update
            // minus the batch's smallest lag.
            let collected_by = (next - 1).saturating_sub(lags.iter().copied().min().unwrap_or(0));
            p.solved_trained = Some(p.steps_at_publish(collected_by));
        }
        p.note_publish(next, self.collector.wiring.lag);
        self.dropped_samples += admitted.counts.dropped;
        self.publish_live(false);
        let p = &self.progress;
        let lengths = &self.collector.episode_lengths;
        let lags = &self.collector.lags;
        Ok(UpdateRecord {
            update: p.updates,
            policy_version: p.policy_version,
            global_step: p.global_step,
            wall_seconds: p.wall_seconds,
            env_steps_per_sec: p.global_step as f64 / p.wall_seconds.max(1e-9),
            episodes: p.episodes,
            mean_return,
            mean_episode_length: (!lengths.is_empty())
                .then(|| lengths.iter().map(|l| f64::from(*l)).sum::<f64>() / lengths.len() as f64),
            policy_lag_min: lags.iter().copied().min().unwrap_or(0),
            policy_lag_avg: lags.iter().sum::<u64>() as f64 / lags.len().max(1) as f64,
            policy_lag_max: lags.iter().copied().max().unwrap_or(0),
            is_weights,
            invalid_fragments: p.worker_faults as usize,
            worker_faults: p.worker_faults,
            admission: admitted.counts,
            time: p.time,
            ppo: stats,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::*;

    #[test]
    fn rollouts_store_the_unclipped_sampled_actions() {
        let mut config = crate::preset("pendulum").unwrap();
        config.network.log_std_init = 1.5; // std ~4.5, far beyond the +-2 torque bound
        config.ppo.n_steps = 64;
        let mut trainer = Trainer::new(config).unwrap();
        trainer.collect().unwrap();
        let beyond = trainer
            .rollout
            .actions
            .iter()
            .filter(|a| a.abs() > 2.0)
            .count();
        assert!(beyond > 50, "only {beyond} stored actions exceed the bound");
        // Rewards stayed within what a clipped torque allows (cost <= pi^2 + 0.1*64 + 0.001*4).
        assert!(trainer.rollout.rewards.iter().all(|r| *r >= -16.3));
    }

    #[test]
    fn truncated_steps_get_the_value_of_their_final_observation() {
        let mut config = crate::preset("pendulum").unwrap();
        config.env.num_envs = 2;
        config.ppo.n_steps = 200; // exactly one episode: the last step is truncated
        config.ppo.batch_size = 64;
        let mut trainer = Trainer::new(config).unwrap();
        trainer.collect().unwrap();
        trainer.bootstrap_values();
        let r = &trainer.rollout;
        let last = 199 * 2;
        assert!(r.truncated[last] && r.truncated[last + 1]);
        assert!(r.final_values[last] != 0.0 && r.final_values[last + 1] != 0.0);
        assert!(r.truncated.iter().filter(|t| **t).count() == 2);
    }
}
