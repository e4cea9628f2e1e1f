//! Every random stream a run draws, derived from the run seed and the stream's role.
//!
//! A stream's seed is the run seed passed through [`derive_seed`] once per part of its
//! role: a tag naming the role, then the role's own numbers (worker, incarnation, ...).
//! Two different roles, or one role with different numbers, get seeds that coincide only
//! by a 64-bit hash collision: no worker count or restart can make two streams share a
//! seed, as the fixed offsets they replace did (`1000 + worker` for a worker's envs met
//! `2000 + worker` for another's action sampling from 1,000 workers on).
//!
//! The three single streams a run had before (model initialisation, minibatch order,
//! evaluation) keep their seeds: they never collided.

use crate::vector::derive_seed;

/// A role a random stream plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stream {
    /// The model's initial weights.
    ModelInit,
    /// The PPO update's minibatch order.
    Minibatches,
    /// The evaluation episodes' seed (unless `report.eval_seed` sets one).
    Evaluation,
    /// The action sampling of an evaluation (within its evaluation seed).
    EvaluationActions,
    /// Worker `worker`'s envs in its `incarnation` (0 for the first; a replacement after
    /// a failure gets episodes of its own).
    WorkerEnvs { worker: u64, incarnation: u64 },
    /// Worker `worker`'s action sampling in its `incarnation`.
    WorkerActions { worker: u64, incarnation: u64 },
    /// The fresh episodes after worker `worker`'s `recovery`-th env-process failure that
    /// it mended in place (in its `incarnation`).
    EnvRecovery {
        worker: u64,
        incarnation: u64,
        recovery: u64,
    },
    /// A simulated fleet's agent `agent`: its env.
    AgentEnv { agent: u64 },
    /// A simulated fleet's agent `agent`: its choices (faults, retries, timing).
    AgentChoices { agent: u64 },
}

/// Role tags: arbitrary distinct constants, one per role with numbers of its own.
const WORKER_ENVS: u64 = 0x5747_454e_5653_0001;
const WORKER_ACTIONS: u64 = 0x5747_4143_5453_0002;
const ENV_RECOVERY: u64 = 0x4552_4543_4f56_0003;
const AGENT_ENV: u64 = 0x4147_454e_5645_0004;
const AGENT_CHOICES: u64 = 0x4147_4348_4f49_0005;
const EVALUATION_ACTIONS: u64 = 0x4556_4143_5453_0006;

impl Stream {
    /// This stream's seed in a run seeded `run_seed`.
    pub fn seed(self, run_seed: u64) -> u64 {
        let chain = |tag: u64, numbers: &[u64]| {
            numbers
                .iter()
                .fold(derive_seed(run_seed, tag), |s, &n| derive_seed(s, n))
        };
        match self {
            Stream::ModelInit => derive_seed(run_seed, 1),
            Stream::Minibatches => derive_seed(run_seed, 3),
            Stream::Evaluation => derive_seed(run_seed, 0x5eed_e7a1),
            Stream::EvaluationActions => chain(EVALUATION_ACTIONS, &[]),
            Stream::WorkerEnvs {
                worker,
                incarnation,
            } => chain(WORKER_ENVS, &[worker, incarnation]),
            Stream::WorkerActions {
                worker,
                incarnation,
            } => chain(WORKER_ACTIONS, &[worker, incarnation]),
            Stream::EnvRecovery {
                worker,
                incarnation,
                recovery,
            } => chain(ENV_RECOVERY, &[worker, incarnation, recovery]),
            Stream::AgentEnv { agent } => chain(AGENT_ENV, &[agent]),
            Stream::AgentChoices { agent } => chain(AGENT_CHOICES, &[agent]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn no_two_streams_of_a_large_run_share_a_seed() {
        // 1,024 workers (the most a config allows), three incarnations each, a few
        // recoveries, 2,048 fleet agents, and the run's single streams.
        for run_seed in [0, 1, 12_345] {
            let mut seen: HashMap<u64, Stream> = HashMap::new();
            let mut add = |s: Stream| {
                if let Some(other) = seen.insert(s.seed(run_seed), s) {
                    panic!("{s:?} and {other:?} share a seed (run seed {run_seed})");
                }
            };
            for s in [
                Stream::ModelInit,
                Stream::Minibatches,
                Stream::Evaluation,
                Stream::EvaluationActions,
            ] {
                add(s);
            }
            for worker in 0..1_024 {
                for incarnation in 0..3 {
                    add(Stream::WorkerEnvs {
                        worker,
                        incarnation,
                    });
                    add(Stream::WorkerActions {
                        worker,
                        incarnation,
                    });
                }
                for recovery in 1..3 {
                    add(Stream::EnvRecovery {
                        worker,
                        incarnation: 0,
                        recovery,
                    });
                }
            }
            for agent in 0..2_048 {
                add(Stream::AgentEnv { agent });
                add(Stream::AgentChoices { agent });
            }
        }
    }

    #[test]
    fn the_single_streams_keep_their_seeds() {
        assert_eq!(Stream::ModelInit.seed(7), derive_seed(7, 1));
        assert_eq!(Stream::Minibatches.seed(7), derive_seed(7, 3));
        assert_eq!(Stream::Evaluation.seed(7), derive_seed(7, 0x5eed_e7a1));
    }
}
