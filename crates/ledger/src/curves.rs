//! Per-generation curves: completed episodes in collection order, labelled with the policy
//! version that produced them, where each version took over, and how old trained samples
//! were. What a report plots, computed here so that every reader of a ledger plots the same.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::analysis::Index;
use crate::reader::LedgerData;

/// One completed episode.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EpisodePoint {
    /// Samples of the bucket up to and including the episode's last one: env steps
    /// collected when it ended.
    pub step: u64,
    /// Its return (raw when recorded, else the sum of stored rewards).
    pub episode_return: f64,
    /// Policy version of its last sample.
    pub generation: u64,
    /// Whether any of its samples is invalidated.
    pub invalidated: bool,
}

/// Where a newer policy version's samples begin.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionSwitch {
    /// Samples of the bucket before the version's first one.
    pub step: u64,
    /// The version.
    pub version: u64,
}

/// A bucket's episodes and version switches, in sample-id (collection) order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Curves {
    /// The bucket.
    pub bucket: String,
    /// Its samples.
    pub samples: u64,
    /// Completed episodes, by the step they ended.
    pub episodes: Vec<EpisodePoint>,
    /// Each version's first sample, when it is newer than every version before it.
    pub switches: Vec<VersionSwitch>,
}

impl Curves {
    /// Episodes grouped by generation, in order: one series per generation.
    pub fn by_generation(&self) -> BTreeMap<u64, Vec<&EpisodePoint>> {
        let mut out: BTreeMap<u64, Vec<&EpisodePoint>> = BTreeMap::new();
        for e in &self.episodes {
            out.entry(e.generation).or_default().push(e);
        }
        out
    }
}

#[derive(Default)]
struct OpenEpisode {
    sum_rewards: f64,
    invalidated: bool,
}

/// The curves of `bucket`. Samples are taken in sample-id order, which is the order the
/// learner (or gateway) stored them in; an episode belongs to the version of its last step.
pub fn curves(data: &LedgerData, bucket: &str) -> Curves {
    let index = Index::new(data);
    let mut rows: Vec<(u64, usize, usize)> = Vec::new();
    for (b, batch) in data.samples.iter().enumerate() {
        if batch.bucket == bucket {
            rows.extend((0..batch.len()).map(|i| (batch.sample_id[i], b, i)));
        }
    }
    rows.sort_unstable();
    let mut out = Curves {
        bucket: bucket.to_string(),
        samples: rows.len() as u64,
        ..Curves::default()
    };
    let mut open: HashMap<u64, OpenEpisode> = HashMap::new();
    let mut newest: Option<u64> = None;
    for (ordinal, &(id, b, i)) in rows.iter().enumerate() {
        let batch = &data.samples[b];
        let version = batch.policy_version[i];
        if newest.is_none_or(|n| version > n) {
            if newest.is_some() {
                out.switches.push(VersionSwitch {
                    step: ordinal as u64,
                    version,
                });
            }
            newest = Some(version);
        }
        let e = open.entry(batch.episode_id[i]).or_default();
        e.sum_rewards += f64::from(batch.reward[i]);
        e.invalidated |= index.invalidation(id, batch.trajectory_id[i]).is_some();
        if batch.terminated[i] || batch.truncated[i] {
            let e = open.remove(&batch.episode_id[i]).unwrap_or_default();
            out.episodes.push(EpisodePoint {
                step: ordinal as u64 + 1,
                episode_return: batch.episode_return[i].unwrap_or(e.sum_rewards),
                generation: version,
                invalidated: e.invalidated,
            });
        }
    }
    out
}

/// Samples per policy lag (learner version minus producing version, in versions) over the
/// admission decisions of `bucket`, ascending.
pub fn lag_histogram(data: &LedgerData, bucket: &str) -> Vec<(u64, u64)> {
    let mut out: BTreeMap<u64, u64> = BTreeMap::new();
    for d in data.decisions.iter().filter(|d| d.bucket == bucket) {
        *out.entry(d.age_versions).or_default() += d.last_sample - d.first_sample + 1;
    }
    out.into_iter().collect()
}
