//! The counters a run keeps across checkpoints: steps, versions, episodes, the solve, the
//! schedules' anchor, where the time went, and the fragments lost to faults.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// Counters and statistics that survive a checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Env steps taken.
    pub global_step: u64,
    /// Updates done.
    pub updates: u64,
    /// Current policy version (0 = initial weights).
    pub policy_version: u64,
    /// Episodes finished.
    pub episodes: u64,
    /// Returns of the most recent finished episodes (up to the solve window).
    pub recent_returns: VecDeque<f64>,
    /// (steps, seconds) when first solved.
    pub solved_at: Option<(u64, f64)>,
    /// Env steps the first solving policy had been trained on (see
    /// [`Summary::steps_to_solve_trained`]).
    #[serde(default)]
    pub solved_trained: Option<u64>,
    /// `(version, env steps consumed)` at each recent publish, oldest first: enough to
    /// look up the versions a batch under the lag bound can come from.
    #[serde(default)]
    pub published_at: VecDeque<(u64, u64)>,
    /// Training seconds before this process (resumes).
    pub wall_seconds: f64,
    /// Time breakdown so far.
    pub time: TimeBreakdown,
    /// Fragments lost to worker failures or restarts, each with its reason (the most
    /// recent [`Progress::INVALID_KEPT`]; `worker_faults` counts them all).
    pub invalid_fragments: Vec<InvalidFragment>,
    /// Worker failures survived over the whole run.
    #[serde(default)]
    pub worker_faults: u64,
    /// Where the learning-rate and clip schedules were re-anchored when a resume changed
    /// the budget: `(step, fraction remaining then)`; from there the fraction falls
    /// linearly to zero at the new budget (no jump).
    #[serde(default)]
    pub schedule_anchor: Option<(u64, f32)>,
    /// Episodes and trajectories in progress, for the ledger's ids.
    #[serde(default)]
    pub ledger_cursor: Option<crate::LedgerCursor>,
    /// The ledger's next sample id after the last update (a resumed run marks later ones
    /// abandoned).
    #[serde(default)]
    pub ledger_next_sample: Option<u64>,
}

impl Progress {
    /// How many invalid fragments a checkpoint keeps in detail: a run of days with
    /// sporadic faults must not grow its checkpoints without bound.
    pub const INVALID_KEPT: usize = 1000;

    /// The fraction of the schedule remaining at `step` of a `budget`-step run (1 at the
    /// start, 0 at the end): linear in steps, or from the anchor a resume set.
    pub fn schedule_remaining(&self, step: u64, budget: u64) -> f32 {
        match self.schedule_anchor {
            Some((from, fraction)) if budget > from => {
                fraction * (budget.saturating_sub(step)) as f32 / (budget - from) as f32
            }
            Some(_) => 0.0,
            None => 1.0 - step as f32 / budget as f32,
        }
    }

    /// Env steps consumed when `version` was published (none for the initial weights);
    /// the current count where that is no longer known (a resume from an older checkpoint).
    pub fn steps_at_publish(&self, version: u64) -> u64 {
        if version == 0 {
            return 0;
        }
        self.published_at
            .iter()
            .find(|(v, _)| *v == version)
            .map_or(self.global_step, |(_, steps)| *steps)
    }

    /// Notes that `version` was published now; keeps the versions a batch under a lag
    /// bound of `lag` can still come from.
    pub fn note_publish(&mut self, version: u64, lag: u64) {
        self.published_at.push_back((version, self.global_step));
        while self.published_at.len() as u64 > lag + 2 {
            self.published_at.pop_front();
        }
    }

    /// Records a fragment lost to a fault, keeping the detail of the most recent ones.
    pub fn record_fault(&mut self, lost: InvalidFragment) {
        self.worker_faults += 1;
        if self.invalid_fragments.len() >= Self::INVALID_KEPT {
            self.invalid_fragments.remove(0);
        }
        self.invalid_fragments.push(lost);
    }
}

/// Where the time went, in seconds: the learner's parts (waiting, rollout, learning,
/// publish, eval, other) add up to the run's wall clock; the workers' (startup, env,
/// frames, summaries, inference, copies, provenance) to their busy time, summed over
/// workers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeBreakdown {
    /// Workers stepping environments: the envs themselves (for Gymnasium envs, their
    /// processes, Python wrappers included).
    pub env_step: f64,
    /// Workers turning the env processes' observations (frames as bytes) into rows.
    #[serde(default)]
    pub frames: f64,
    /// Workers checking observations and rewards and summarising what each env observed
    /// (the ledger's hashes and summaries).
    #[serde(default)]
    pub summaries: f64,
    /// Workers choosing actions (policy and value inference while collecting).
    pub inference: f64,
    /// Workers copying observations into fragments and on to the next step, and adopting
    /// policy versions.
    #[serde(default)]
    pub copies: f64,
    /// Workers recording each step's outcome and provenance.
    #[serde(default)]
    pub provenance: f64,
    /// Workers starting: building their envs (starting env processes) and models.
    #[serde(default)]
    pub startup: f64,
    /// The learner taking fragments into the training batch (and their ledger rows).
    #[serde(default)]
    pub rollout: f64,
    /// PPO forward passes.
    pub forward: f64,
    /// PPO loss and backward passes.
    pub backward: f64,
    /// Optimiser steps.
    pub optimizer: f64,
    /// The learner waiting for fragments.
    pub buffer_wait: f64,
    /// Publishing policy versions.
    pub publish: f64,
    /// GAE, bootstrap values, off-policy correction and everything else in the loop.
    pub other: f64,
    /// Periodic evaluation of the current version.
    #[serde(default)]
    pub eval: f64,
}

impl TimeBreakdown {
    /// The learner's parts as shares of the run's `wall` seconds (what no part timed is
    /// "other"), then the workers' as shares of their time (`workers x wall`, the rest
    /// idle), in words: `learner: waiting 42%, ..., other 1%; workers: env 22%, ...`.
    pub fn describe(&self, wall: f64, workers: usize) -> String {
        let ((learner, wall), (worker, worker_time)) = self.accounts(wall, workers);
        let shares = |parts: &[(&str, f64)], total: f64| {
            parts
                .iter()
                .map(|(name, s)| format!("{name} {:.0}%", 100.0 * s / total))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "learner: {}; workers: {}",
            shares(&learner, wall),
            shares(&worker, worker_time)
        )
    }

    /// The two accounts [`TimeBreakdown::describe`] words: the learner's parts in seconds
    /// with the wall clock they add up to (what no part timed is "other"; a wall clock
    /// shorter than the timed parts is taken as their sum), and the workers' parts with
    /// their time (`workers x wall`, the rest "idle"; at least their busy time).
    #[allow(clippy::type_complexity)]
    pub fn accounts(
        &self,
        wall: f64,
        workers: usize,
    ) -> (
        (Vec<(&'static str, f64)>, f64),
        (Vec<(&'static str, f64)>, f64),
    ) {
        let learning = self.forward + self.backward + self.optimizer;
        let timed = self.buffer_wait + self.rollout + learning + self.publish + self.eval;
        let wall = wall.max(timed + self.other).max(1e-9);
        let learner = vec![
            ("waiting", self.buffer_wait),
            ("rollout", self.rollout),
            ("learning", learning),
            ("publish", self.publish),
            ("eval", self.eval),
            ("other", wall - timed),
        ];
        let busy = self.worker_parts().iter().map(|(_, s)| s).sum::<f64>();
        let worker_time = (workers.max(1) as f64 * wall).max(busy).max(1e-9);
        let mut worker = self.worker_parts().to_vec();
        worker.push(("idle", worker_time - busy));
        ((learner, wall), (worker, worker_time))
    }

    /// The workers' parts, named.
    fn worker_parts(&self) -> [(&'static str, f64); 7] {
        [
            ("startup", self.startup),
            ("env", self.env_step),
            ("frames", self.frames),
            ("summaries", self.summaries),
            ("inference", self.inference),
            ("copies", self.copies),
            ("provenance", self.provenance),
        ]
    }
}

/// A fragment that was not trained on, and why. Never silently dropped: it is recorded here
/// (and in the checkpoint).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InvalidFragment {
    /// Which worker.
    pub worker: usize,
    /// Which incarnation of it.
    #[serde(alias = "generation")]
    pub incarnation: u64,
    /// The worker's fragment number.
    pub fragment: u64,
    /// The policy version it was collecting with.
    pub policy_version: u64,
    /// Why it was lost.
    pub reason: String,
    /// Env steps trained on when it was lost.
    pub at_step: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_learners_parts_add_up_to_the_wall_clock_and_the_workers_to_their_time() {
        let t = TimeBreakdown {
            buffer_wait: 4.0,
            forward: 2.0,
            backward: 2.0,
            optimizer: 1.0,
            rollout: 0.5,
            env_step: 6.0,
            frames: 1.0,
            summaries: 1.0,
            inference: 4.0,
            startup: 2.0,
            ..TimeBreakdown::default()
        };
        // 10 s of wall: 0.5 s no part timed is "other"; two workers have 20 s, 14 busy.
        assert_eq!(
            t.describe(10.0, 2),
            "learner: waiting 40%, rollout 5%, learning 50%, publish 0%, eval 0%, other 5%; \
             workers: startup 10%, env 30%, frames 5%, summaries 5%, inference 20%, copies 0%, \
             provenance 0%, idle 30%"
        );
        // A wall clock shorter than its timed parts is taken as their sum: no share above
        // 100%, none negative.
        let line = t.describe(1.0, 1);
        assert!(
            line.contains("other 0%") && line.contains("idle 0%"),
            "{line}"
        );
    }
}
