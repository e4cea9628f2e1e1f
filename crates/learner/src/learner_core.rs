//! The learner's core, shared by every driver that trains (the runtime's trainer on
//! fragments, the gateway's learner on reported segments): correct a filled rollout for
//! policy lag, admit its sample groups under the rules (weights and decision records),
//! run the PPO update and hand back the parameters. Drivers only fill the rollout and say
//! where each group's rows lie.

use std::ops::Range;

use strata_algo::{IsWeightStats, Ppo, RolloutBuffer, UpdateStats};
use strata_ledger::{
    Admission, AdmissionRules, Bucket, DecisionKind, DecisionRecord, SampleFacts, VersionedRules,
};
use strata_nn::ActorCritic;

use crate::learner_pool::LearnerPool;
use crate::AdmissionCounts;
use crate::LearnerError;
use strata_config::{build_model, build_ppo};
use strata_config::{OffPolicy, RunConfig};

/// Rollout rows of one group: `count` runs of `width` rows, `stride` apart, from `first`.
/// A worker's fragment is one run per step (stride = all envs); a segment is one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowSpan {
    /// First row.
    pub first: usize,
    /// Rows per run.
    pub width: usize,
    /// Distance between the starts of consecutive runs.
    pub stride: usize,
    /// Runs.
    pub count: usize,
}

impl RowSpan {
    /// One run of `len` rows from `first`.
    pub fn contiguous(first: usize, len: usize) -> Self {
        RowSpan {
            first,
            width: len,
            stride: len,
            count: 1,
        }
    }

    /// The runs, in order.
    pub fn runs(self) -> impl Iterator<Item = Range<usize>> {
        (0..self.count).map(move |k| {
            let start = self.first + k * self.stride;
            start..start + self.width
        })
    }

    /// Rows held.
    pub fn len(self) -> usize {
        self.width * self.count
    }

    /// Whether it holds no row.
    pub fn is_empty(self) -> bool {
        self.len() == 0
    }
}

/// Samples produced by one policy version: the unit of admission (DESIGN.md: all steps
/// of a fragment, or of a reported segment, share one version).
#[derive(Clone, Debug)]
pub struct SampleGroup {
    /// Where its rows lie in the rollout.
    pub rows: RowSpan,
    /// The version that produced it.
    pub version: u64,
    /// Its ledger bucket.
    pub bucket: Bucket,
    /// Its ledger sample ids as inclusive runs `(first, last)`; empty when not ledgered
    /// (then no decision record is made).
    pub sample_runs: Vec<(u64, u64)>,
    /// Latest completion time of its steps (ns since the epoch; 0: unknown).
    pub completed_ns: i64,
}

/// What admission decided for a batch.
#[derive(Clone, Debug, Default)]
pub struct Admitted {
    /// Samples per decision, with the rules in force.
    pub counts: AdmissionCounts,
    /// One record per run of ledgered sample ids.
    pub decisions: Vec<DecisionRecord>,
    /// Sum over samples of their age in versions.
    pub age_versions_sum: f64,
    /// Sum over samples of their group's KL estimate.
    pub kl_sum: f64,
}

/// The policy-lag correction applied before GAE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Correction {
    /// On-policy: plain GAE.
    None,
    /// The run's `runtime.off_policy` setting.
    Configured,
    /// Decoupled PPO whatever the setting (the gateway's agents always lag).
    Decoupled,
}

/// The model, its optimiser and the thread pool the update runs in.
pub struct LearnerCore {
    model: Box<dyn ActorCritic>,
    ppo: Ppo,
    pool: LearnerPool,
    gamma: f32,
    lambda: f32,
    off_policy: OffPolicy,
    max_is_weight: f32,
    vtrace_rho_bar: f32,
    vtrace_c_bar: f32,
    /// Behaviour log-probs, kept when a correction replaces them, for the KL estimate.
    behaviour_log_probs: Vec<f32>,
    corrected: bool,
}

impl LearnerCore {
    /// Version-0 weights and a fresh optimiser for `config`; the update's threads are
    /// pinned from `pin_cpus[first_pin]` on when pins are given.
    ///
    /// # Errors
    /// [`LearnerError::Config`] naming the key, or [`LearnerError::Thread`] when the threads
    /// cannot start.
    pub fn new(config: &RunConfig, first_pin: usize) -> Result<Self, LearnerError> {
        let r = &config.runtime;
        Ok(LearnerCore {
            model: build_model(config)?,
            ppo: build_ppo(config)?,
            pool: LearnerPool::new(config.train.learner_threads, &r.pin_cpus, first_pin)?,
            gamma: config.ppo.gamma as f32,
            lambda: config.ppo.gae_lambda as f32,
            off_policy: r.off_policy,
            max_is_weight: r.max_is_weight as f32,
            vtrace_rho_bar: r.vtrace_rho_bar as f32,
            vtrace_c_bar: r.vtrace_c_bar as f32,
            behaviour_log_probs: Vec::new(),
            corrected: false,
        })
    }

    /// The model being trained.
    pub fn model(&self) -> &dyn ActorCritic {
        self.model.as_ref()
    }

    /// The model, to load weights or compute values.
    pub fn model_mut(&mut self) -> &mut dyn ActorCritic {
        self.model.as_mut()
    }

    /// The PPO optimiser (its RNG is saved in checkpoints).
    pub fn ppo(&self) -> &Ppo {
        &self.ppo
    }

    /// The PPO optimiser, to restore its RNG on resume.
    pub fn ppo_mut(&mut self) -> &mut Ppo {
        &mut self.ppo
    }

    /// The current parameters, flat.
    pub fn params(&self) -> &[f32] {
        self.model.flat_params()
    }

    /// Advantages and value targets for a filled rollout, first correcting for policy
    /// lag as asked (the proximal policy's log-probs replace the behaviour ones; the
    /// behaviour ones are kept for [`LearnerCore::admit`]'s KL estimate). Returns the
    /// importance ratios' statistics when a correction ran.
    pub fn prepare(
        &mut self,
        rollout: &mut RolloutBuffer,
        correction: Correction,
    ) -> Option<IsWeightStats> {
        let mode = match correction {
            Correction::None => None,
            Correction::Configured => Some(self.off_policy),
            Correction::Decoupled => Some(OffPolicy::Decoupled),
        };
        self.corrected = mode.is_some();
        if self.corrected {
            self.behaviour_log_probs.clone_from(&rollout.log_probs);
        }
        let (gamma, lambda, model) = (self.gamma, self.lambda, self.model.as_mut());
        match mode {
            None => {
                rollout.compute_advantages(gamma, lambda);
                None
            }
            Some(OffPolicy::Decoupled) => {
                let max_weight = self.max_is_weight;
                let stats = self
                    .pool
                    .install(|| rollout.make_proximal(model, max_weight));
                rollout.compute_advantages(gamma, lambda);
                Some(stats)
            }
            Some(OffPolicy::Vtrace) => {
                let (rho, c) = (self.vtrace_rho_bar, self.vtrace_c_bar);
                Some(
                    self.pool
                        .install(|| rollout.vtrace_targets(model, gamma, rho, c)),
                )
            }
        }
    }

    /// Applies `rules` to every group: sets the rollout's admission weights and returns
    /// the counts and a decision record per run of ledgered ids. `versioned` names the
    /// registered rules the records cite (none: the counts carry the rules' own hash).
    /// A group's KL is zero when it was produced by `learner_version` or no correction
    /// ran (its log-probs are then the current policy's).
    pub fn admit(
        &self,
        rollout: &mut RolloutBuffer,
        groups: &[SampleGroup],
        rules: &AdmissionRules,
        versioned: Option<&VersionedRules>,
        learner_version: u64,
        update: u64,
    ) -> Admitted {
        let mut out = Admitted {
            counts: AdmissionCounts {
                rules_hash: versioned.map_or_else(|| rules.hash(), |v| v.hash.clone()),
                rules_version: versioned.map(|v| v.version),
                ..AdmissionCounts::default()
            },
            ..Admitted::default()
        };
        let now = strata_ledger::now_ns();
        for group in groups {
            let samples = group.rows.len() as u64;
            let age_versions = learner_version.saturating_sub(group.version);
            let kl = if age_versions == 0 || !self.corrected {
                0.0
            } else {
                let (b, c) = (&self.behaviour_log_probs, &rollout.log_probs);
                kl_estimate(group.rows.runs().flatten().map(|i| (b[i], c[i])))
            };
            let age_seconds = if group.completed_ns > 0 {
                (now - group.completed_ns).max(0) as f64 * 1e-9
            } else {
                0.0
            };
            let facts = SampleFacts {
                age_versions,
                age_seconds,
                kl: Some(kl),
            };
            let a = admit(rules, facts);
            for run in group.rows.runs() {
                rollout.admission[run].fill(a.weight);
            }
            match a.decision {
                DecisionKind::Trained => out.counts.trained += samples,
                DecisionKind::DownWeighted => out.counts.down_weighted += samples,
                DecisionKind::Dropped => out.counts.dropped += samples,
            }
            out.age_versions_sum += age_versions as f64 * samples as f64;
            out.kl_sum += kl * samples as f64;
            let Some(v) = versioned else { continue };
            for &(first, last) in &group.sample_runs {
                out.decisions.push(DecisionRecord {
                    first_sample: first,
                    last_sample: last,
                    bucket: group.bucket.clone(),
                    policy_version: group.version,
                    learner_version,
                    update,
                    rules_version: v.version,
                    rules_hash: v.hash.clone(),
                    decision: a.decision,
                    weight: a.weight,
                    kl: Some(kl),
                    age_versions,
                    age_seconds,
                    decided_at_ns: now,
                });
            }
        }
        out
    }

    /// The PPO update on the prepared, admitted rollout, inside the learner's pool.
    /// `progress_remaining` (1 → 0) anneals the learning rate and clip range.
    pub fn train(&mut self, rollout: &RolloutBuffer, progress_remaining: f32) -> UpdateStats {
        let (ppo, model) = (&mut self.ppo, self.model.as_mut());
        self.pool
            .install(|| ppo.update(model, rollout, progress_remaining))
    }
}

/// KL(behaviour || current) estimated from log-prob pairs of the same actions
/// (`(r - 1) - ln r`, r = current / behaviour: unbiased and never negative).
pub fn kl_estimate(behaviour: impl Iterator<Item = (f32, f32)>) -> f64 {
    let (mut sum, mut n) = (0.0f64, 0usize);
    for (b, c) in behaviour {
        let log_ratio = f64::from(c - b);
        sum += log_ratio.exp_m1() - log_ratio;
        n += 1;
    }
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

/// The admission decision for a group; errors are reported, and the group trained on,
/// only if the rules cannot decide (which `decide` rules out for measured facts).
fn admit(rules: &AdmissionRules, facts: SampleFacts) -> Admission {
    rules.decide(facts).unwrap_or_else(|e| {
        tracing::error!(component = "learner", error = %e, "admission could not decide; training on the samples");
        Admission {
            decision: DecisionKind::Trained,
            weight: 1.0,
        }
    })
}

/// Consecutive runs `(first, last)` of ascending ids.
pub fn id_runs(ids: &[u64]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &id in ids {
        match out.last_mut() {
            Some((_, last)) if *last + 1 == id => *last = id,
            _ => out.push((id, id)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kl_estimate_is_zero_on_policy_and_positive_off_it() {
        assert_eq!(kl_estimate([(-0.5f32, -0.5f32); 4].into_iter()), 0.0);
        let kl = kl_estimate([(-0.7f32, -0.6f32), (-0.2, -0.4)].into_iter());
        assert!(kl > 0.0 && kl < 0.05, "{kl}");
    }

    #[test]
    fn id_runs_group_consecutive_ids() {
        assert_eq!(id_runs(&[3, 4, 5, 9, 11, 12]), [(3, 5), (9, 9), (11, 12)]);
        assert!(id_runs(&[]).is_empty());
    }

    #[test]
    fn row_spans_cover_strided_and_contiguous_rows() {
        let strided = RowSpan {
            first: 2,
            width: 2,
            stride: 6,
            count: 3,
        };
        let rows: Vec<usize> = strided.runs().flatten().collect();
        assert_eq!(rows, [2, 3, 8, 9, 14, 15]);
        assert_eq!(strided.len(), 6);
        let one: Vec<usize> = RowSpan::contiguous(5, 3).runs().flatten().collect();
        assert_eq!(one, [5, 6, 7]);
    }

    /// Admission below the drivers: weights land on exactly the group's rows, counts and
    /// records follow the rules, and a group of the learner's own version has KL 0.
    #[test]
    fn admission_weights_rows_and_records_each_run_of_ids() {
        let mut config = strata_config::preset("cartpole").unwrap();
        config.admission.rule = strata_ledger::RuleKind::Strict;
        let core = LearnerCore::new(&config, 0).unwrap();
        let mut rollout = RolloutBuffer::new(4, 2, 4, 1);
        let fresh = SampleGroup {
            rows: RowSpan {
                first: 0,
                width: 2,
                stride: 4,
                count: 2,
            },
            version: 5,
            bucket: Bucket::train(),
            sample_runs: vec![(10, 13)],
            completed_ns: 0,
        };
        let stale = SampleGroup {
            rows: RowSpan {
                first: 2,
                width: 2,
                stride: 4,
                count: 2,
            },
            version: 1,
            bucket: Bucket::train(),
            sample_runs: vec![(20, 21), (30, 31)],
            completed_ns: 0,
        };
        let registered = VersionedRules {
            version: 3,
            hash: config.admission.hash(),
            rules: config.admission.clone(),
        };
        let out = core.admit(
            &mut rollout,
            &[fresh, stale],
            &config.admission,
            Some(&registered),
            5,
            7,
        );
        assert_eq!(rollout.admission, [1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]);
        assert_eq!((out.counts.trained, out.counts.dropped), (4, 4));
        assert_eq!(out.counts.rules_version, Some(3));
        assert_eq!(out.decisions.len(), 3);
        assert!(out
            .decisions
            .iter()
            .all(|d| d.update == 7 && d.rules_version == 3));
        assert_eq!(out.decisions[0].kl, Some(0.0));
        assert_eq!(out.decisions[2].decision, DecisionKind::Dropped);
        assert_eq!(out.age_versions_sum, 16.0);
    }
}
