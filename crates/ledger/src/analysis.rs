//! Questions asked of a ledger: per-generation summary, metrics with and without
//! invalidated samples, and what other admission rules would have done with the same data.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::bucket::Bucket;
use crate::reader::LedgerData;
use crate::record::{DecisionKind, DecisionRecord, ReasonCode, Target};
use crate::rules::{AdmissionRules, SampleFacts};
use crate::LedgerError;

/// Finds, for a sample id, its decision and its invalidation, in `O(log n)` a lookup: the
/// decisions and the invalidated sample ranges are flattened once into disjoint runs of
/// ids (a ledger written for weeks holds millions of decisions; a scan back through every
/// earlier one made a summary cost samples x decisions).
pub(crate) struct Index<'a> {
    decisions: Vec<&'a DecisionRecord>,
    /// Disjoint runs `(first, last, decision)`, sorted, indexing `decisions`.
    decided: Vec<Run>,
    reasons: Vec<ReasonCode>,
    /// Disjoint runs `(first, last, invalidation)`, sorted, indexing `reasons`.
    invalid: Vec<Run>,
    trajectories: std::borrow::Cow<'a, HashMap<u64, ReasonCode>>,
}

/// Each invalidated trajectory's reason: the first invalidation of it, in file order.
pub(crate) fn trajectory_reasons<'a>(
    invalidations: impl IntoIterator<Item = &'a crate::record::Invalidation>,
) -> HashMap<u64, ReasonCode> {
    let mut out = HashMap::new();
    for inv in invalidations {
        if let Target::Trajectory { id } = inv.target {
            out.entry(id).or_insert(inv.reason);
        }
    }
    out
}

/// Ids `first..=last`, all answered by entry `which`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    first: u64,
    last: u64,
    which: usize,
}

/// Flattens possibly overlapping ranges into disjoint runs, each id answered by the range
/// covering it that `wins` (a total order: the greatest wins). `O(n log n)`.
fn flatten<K: Ord + Copy>(ranges: &[(u64, u64)], key: impl Fn(usize) -> K) -> Vec<Run> {
    use std::collections::BinaryHeap;
    let mut order: Vec<usize> = (0..ranges.len()).collect();
    order.sort_by_key(|&i| ranges[i].0);
    let mut active: BinaryHeap<(K, usize)> = BinaryHeap::new();
    let mut out: Vec<Run> = Vec::new();
    let mut next = 0;
    let mut at = 0u64;
    loop {
        if active.is_empty() {
            match order.get(next) {
                Some(&i) => at = at.max(ranges[i].0),
                None => break,
            }
        }
        while let Some(&i) = order.get(next).filter(|&&i| ranges[i].0 <= at) {
            active.push((key(i), i));
            next += 1;
        }
        while active.peek().is_some_and(|&(_, i)| ranges[i].1 < at) {
            active.pop();
        }
        let Some(&(_, top)) = active.peek() else {
            continue;
        };
        // The winner holds until it ends or a range starts that may outrank it.
        let mut last = ranges[top].1;
        if let Some(&i) = order.get(next) {
            last = last.min(ranges[i].0 - 1);
        }
        match out.last_mut() {
            Some(run) if run.which == top && run.last.checked_add(1) == Some(at) => run.last = last,
            _ => out.push(Run {
                first: at,
                last,
                which: top,
            }),
        }
        match last.checked_add(1) {
            Some(after) => at = after,
            None => break,
        }
    }
    out
}

/// The run holding `id`, if any.
fn find(runs: &[Run], id: u64) -> Option<usize> {
    let end = runs.partition_point(|r| r.first <= id);
    end.checked_sub(1)
        .map(|i| runs[i])
        .filter(|r| r.last >= id)
        .map(|r| r.which)
}

impl<'a> Index<'a> {
    pub(crate) fn new(data: &'a LedgerData) -> Self {
        let ranges = data
            .invalidations
            .iter()
            .filter_map(|inv| match inv.target {
                Target::Samples { first, last } => Some((first, last, inv.reason)),
                Target::Trajectory { .. } => None,
            });
        Self::from_parts(
            data.decisions.iter().collect(),
            ranges.collect(),
            std::borrow::Cow::Owned(trajectory_reasons(&data.invalidations)),
        )
    }

    /// An index of `decisions` (in file order), invalidated sample `ranges` (in file
    /// order) and invalidated trajectories: a reader that knows which of them can matter
    /// passes those alone.
    pub(crate) fn from_parts(
        decisions: Vec<&'a DecisionRecord>,
        ranges: Vec<(u64, u64, ReasonCode)>,
        trajectories: std::borrow::Cow<'a, HashMap<u64, ReasonCode>>,
    ) -> Self {
        let spans: Vec<(u64, u64)> = decisions
            .iter()
            .map(|d| (d.first_sample, d.last_sample))
            .collect();
        // Of the decisions covering a sample, the one starting last wins, and of those the
        // latest in file order (a later decision about the same samples).
        let decided = flatten(&spans, |i| (spans[i].0, i));
        let reasons: Vec<ReasonCode> = ranges.iter().map(|r| r.2).collect();
        let ranges: Vec<(u64, u64)> = ranges.iter().map(|r| (r.0, r.1)).collect();
        // Of the invalidations covering a sample, the one starting first names the
        // reason, and of those the earliest in file order.
        let invalid = flatten(&ranges, |i| std::cmp::Reverse((ranges[i].0, i)));
        Index {
            decisions,
            decided,
            reasons,
            invalid,
            trajectories,
        }
    }

    pub(crate) fn decision(&self, id: u64) -> Option<&'a DecisionRecord> {
        find(&self.decided, id).map(|i| self.decisions[i])
    }

    pub(crate) fn invalidation(&self, id: u64, trajectory: u64) -> Option<ReasonCode> {
        if let Some(r) = self.trajectories.get(&trajectory) {
            return Some(*r);
        }
        find(&self.invalid, id).map(|i| self.reasons[i])
    }
}

/// One generation's counts.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct GenerationSummary {
    /// Bucket.
    pub bucket: Bucket,
    /// Policy version that produced the samples.
    pub generation: u64,
    /// Samples stored.
    pub samples: u64,
    /// Trained on with full weight.
    pub trained: u64,
    /// Trained on with weight below one.
    pub down_weighted: u64,
    /// Dropped by admission.
    pub dropped: u64,
    /// Not (yet) consumed by a learner.
    pub undecided: u64,
    /// Invalidated, by reason code.
    pub invalidated: BTreeMap<String, u64>,
    /// Completed while a newer policy was already sampling.
    pub newer_policy_sampling: u64,
    /// Admission-rules versions used for these samples.
    pub rules_versions: Vec<u64>,
}

/// Per bucket and generation, in order.
pub fn summary(data: &LedgerData) -> Vec<GenerationSummary> {
    let index = Index::new(data);
    let mut out: BTreeMap<(Bucket, u64), GenerationSummary> = BTreeMap::new();
    for b in &data.samples {
        for i in 0..b.len() {
            let generation = b.policy_version[i];
            let s = out
                .entry((b.bucket.clone(), generation))
                .or_insert_with(|| GenerationSummary {
                    bucket: b.bucket.clone(),
                    generation,
                    ..GenerationSummary::default()
                });
            s.samples += 1;
            let id = b.sample_id[i];
            match index.decision(id) {
                Some(d) => {
                    match d.decision {
                        DecisionKind::Trained => s.trained += 1,
                        DecisionKind::DownWeighted => s.down_weighted += 1,
                        DecisionKind::Dropped => s.dropped += 1,
                    }
                    if !s.rules_versions.contains(&d.rules_version) {
                        s.rules_versions.push(d.rules_version);
                    }
                }
                None => s.undecided += 1,
            }
            if let Some(r) = index.invalidation(id, b.trajectory_id[i]) {
                *s.invalidated.entry(r.as_str().to_string()).or_default() += 1;
            }
            if b.sampler_version[i] > generation {
                s.newer_policy_sampling += 1;
            }
        }
    }
    out.into_values().collect()
}

/// Episode metrics on one side of the invalidation line.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SideMetrics {
    /// Completed episodes.
    pub episodes: u64,
    /// Sum of their returns.
    pub sum_return: f64,
    /// Mean return.
    pub mean_return: Option<f64>,
    /// Episodes that report success or failure.
    pub with_outcome: u64,
    /// Of those, successes.
    pub successes: u64,
    /// `successes / with_outcome`.
    pub success_rate: Option<f64>,
}

impl SideMetrics {
    fn add(&mut self, episode_return: f64, success: Option<bool>) {
        self.episodes += 1;
        self.sum_return += episode_return;
        if let Some(s) = success {
            self.with_outcome += 1;
            self.successes += u64::from(s);
        }
    }

    fn finish(&mut self) {
        self.mean_return = (self.episodes > 0).then(|| self.sum_return / self.episodes as f64);
        self.success_rate =
            (self.with_outcome > 0).then(|| self.successes as f64 / self.with_outcome as f64);
    }
}

/// Episode metrics with and without invalidated samples.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct MetricsReport {
    /// Every completed episode.
    pub all: SideMetrics,
    /// Episodes with no invalidated sample.
    pub valid: SideMetrics,
    /// Episodes with at least one invalidated sample (`all` minus `valid`).
    pub invalidated: SideMetrics,
    /// `all.mean_return - valid.mean_return`.
    pub mean_return_difference: Option<f64>,
    /// `all.success_rate - valid.success_rate`.
    pub success_rate_difference: Option<f64>,
    /// Per generation (of the episode's last sample): `(generation, all, valid)`.
    pub per_generation: Vec<(u64, SideMetrics, SideMetrics)>,
}

#[derive(Default)]
struct Episode {
    sum_rewards: f64,
    episode_return: Option<f64>,
    success: Option<bool>,
    ended: bool,
    invalid: bool,
    generation: u64,
    last_step: u32,
}

/// Mean return and success rate over completed episodes, with and without the ones that
/// contain an invalidated sample. An episode's return is the raw return recorded on its
/// last step, or else the sum of its stored rewards.
pub fn metrics(data: &LedgerData) -> MetricsReport {
    let index = Index::new(data);
    let mut episodes: HashMap<(Bucket, u64), Episode> = HashMap::new();
    for b in &data.samples {
        for i in 0..b.len() {
            let e = episodes
                .entry((b.bucket.clone(), b.episode_id[i]))
                .or_default();
            e.sum_rewards += f64::from(b.reward[i]);
            e.invalid |= index
                .invalidation(b.sample_id[i], b.trajectory_id[i])
                .is_some();
            if b.step[i] >= e.last_step {
                e.last_step = b.step[i];
                e.generation = b.policy_version[i];
            }
            if b.terminated[i] || b.truncated[i] {
                e.ended = true;
                e.episode_return = b.episode_return[i];
                e.success = b.success[i];
            }
        }
    }
    let mut report = MetricsReport::default();
    let mut per: BTreeMap<u64, (SideMetrics, SideMetrics)> = BTreeMap::new();
    for e in episodes.values().filter(|e| e.ended) {
        let ret = e.episode_return.unwrap_or(e.sum_rewards);
        let g = per.entry(e.generation).or_default();
        report.all.add(ret, e.success);
        g.0.add(ret, e.success);
        if e.invalid {
            report.invalidated.add(ret, e.success);
        } else {
            report.valid.add(ret, e.success);
            g.1.add(ret, e.success);
        }
    }
    report.all.finish();
    report.valid.finish();
    report.invalidated.finish();
    report.mean_return_difference = report
        .all
        .mean_return
        .zip(report.valid.mean_return)
        .map(|(a, v)| a - v);
    report.success_rate_difference = report
        .all
        .success_rate
        .zip(report.valid.success_rate)
        .map(|(a, v)| a - v);
    report.per_generation = per
        .into_iter()
        .map(|(g, (mut a, mut v))| {
            a.finish();
            v.finish();
            (g, a, v)
        })
        .collect();
    report
}

/// What other rules would have done with one generation's consumed samples.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Recomputed {
    /// Bucket.
    pub bucket: Bucket,
    /// Producing policy version.
    pub generation: u64,
    /// Samples with a recorded decision.
    pub samples: u64,
    /// As recorded: trained, down-weighted, dropped.
    pub recorded: [u64; 3],
    /// Under the new rules: trained, down-weighted, dropped.
    pub recomputed: [u64; 3],
    /// Sum of weights as recorded.
    pub recorded_weight: f64,
    /// Sum of weights under the new rules.
    pub recomputed_weight: f64,
    /// Samples whose decision changes.
    pub changed: u64,
}

fn slot(kind: DecisionKind) -> usize {
    match kind {
        DecisionKind::Trained => 0,
        DecisionKind::DownWeighted => 1,
        DecisionKind::Dropped => 2,
    }
}

/// Recomputes every recorded decision under `rules`, from the facts stored with it.
///
/// # Errors
/// [`LedgerError::InvalidRules`] when the rules fail validation or need a fact (KL) the
/// ledger did not record.
pub fn recompute(
    data: &LedgerData,
    rules: &AdmissionRules,
) -> Result<Vec<Recomputed>, LedgerError> {
    rules.validate()?;
    let mut out: BTreeMap<(Bucket, u64), Recomputed> = BTreeMap::new();
    for d in &data.decisions {
        let new = rules
            .decide(SampleFacts {
                age_versions: d.age_versions,
                age_seconds: d.age_seconds,
                kl: d.kl,
            })
            .map_err(|e| {
                LedgerError::InvalidRules(format!(
                    "{e} (samples {}..={})",
                    d.first_sample, d.last_sample
                ))
            })?;
        let n = d.last_sample - d.first_sample + 1;
        let r = out
            .entry((d.bucket.clone(), d.policy_version))
            .or_insert_with(|| Recomputed {
                bucket: d.bucket.clone(),
                generation: d.policy_version,
                ..Recomputed::default()
            });
        r.samples += n;
        r.recorded[slot(d.decision)] += n;
        r.recomputed[slot(new.decision)] += n;
        r.recorded_weight += f64::from(d.weight) * n as f64;
        r.recomputed_weight += f64::from(new.weight) * n as f64;
        if new.decision != d.decision || new.weight != d.weight {
            r.changed += n;
        }
    }
    Ok(out.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain reference: the covering range that wins, found by a scan.
    fn covering<K: Ord>(ranges: &[(u64, u64)], id: u64, key: impl Fn(usize) -> K) -> Option<usize> {
        (0..ranges.len())
            .filter(|&i| ranges[i].0 <= id && id <= ranges[i].1)
            .max_by_key(|&i| key(i))
    }

    #[test]
    fn flattened_runs_answer_as_a_scan_of_every_range() {
        // A small generator (xorshift) keeps the cases reproducible without a dependency.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut draw = |below: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % below
        };
        for _case in 0..2_000 {
            let n = draw(24) as usize;
            let ranges: Vec<(u64, u64)> = (0..n)
                .map(|_| {
                    let first = draw(60);
                    (first, first + draw(12))
                })
                .collect();
            let last_starting = |i: usize| (ranges[i].0, i);
            let first_starting = |i: usize| std::cmp::Reverse((ranges[i].0, i));
            let latest = flatten(&ranges, last_starting);
            let earliest = flatten(&ranges, first_starting);
            for w in latest.windows(2).chain(earliest.windows(2)) {
                assert!(w[0].last < w[1].first, "runs overlap: {w:?} of {ranges:?}");
            }
            for id in 0..80 {
                assert_eq!(
                    find(&latest, id),
                    covering(&ranges, id, last_starting),
                    "{ranges:?} at {id}"
                );
                assert_eq!(
                    find(&earliest, id),
                    covering(&ranges, id, first_starting),
                    "{ranges:?} at {id}"
                );
            }
        }
    }

    #[test]
    fn runs_reach_the_last_id() {
        let ranges = [(u64::MAX - 2, u64::MAX), (u64::MAX, u64::MAX)];
        let runs = flatten(&ranges, |i| i);
        assert_eq!(find(&runs, u64::MAX), Some(1));
        assert_eq!(find(&runs, u64::MAX - 1), Some(0));
        assert_eq!(find(&runs, 0), None);
    }
}
