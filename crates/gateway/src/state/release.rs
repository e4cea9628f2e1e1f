//! The release state: stable and candidate versions, canary fraction, cooldown, the
//! versions waiting out their cooldown, and which versions are kept.

use std::collections::{BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use crate::api::Channel;

/// A version waiting out the cooldown.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PendingRelease {
    /// The version.
    pub version: u64,
    /// Which channel it joins.
    pub channel: Channel,
    /// Wall-clock ns from which new episodes get it.
    pub ready_at_ns: i64,
}

/// Which versions new episodes get.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Release {
    /// Version for stable episodes.
    pub stable: u64,
    /// Candidate for canary episodes.
    pub candidate: Option<u64>,
    /// Fraction of new episodes that get the candidate.
    pub canary_fraction: f64,
    /// Seconds between publishing and sampling.
    pub cooldown_secs: f64,
    /// Published versions waiting out the cooldown, oldest first.
    pub pending: VecDeque<PendingRelease>,
    /// The newest version number handed out.
    pub latest: u64,
    /// Which stored versions the retention rule keeps.
    #[serde(default)]
    pub retention: Retention,
}

/// The versions the retention rule must keep that it has not decided on yet. Versions up
/// to `decided_upto` are decided: those still stored are kept for good (samples or an
/// operator refer to them), the rest were removed. So what is remembered here covers only
/// the versions since the last sweep, however long the gateway runs.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Retention {
    /// Versions up to this one are decided.
    pub decided_upto: u64,
    /// Undecided versions an episode was pinned to (its samples refer to them).
    pub sampled: BTreeSet<u64>,
    /// Undecided versions an operator published, promoted or rolled back to.
    pub pinned: BTreeSet<u64>,
}

impl Retention {
    /// An episode was pinned to `version`.
    pub fn note_sampled(&mut self, version: u64) {
        if version > self.decided_upto {
            self.sampled.insert(version);
        }
    }

    /// An operator acted on `version`.
    pub fn pin(&mut self, version: u64) {
        if version > self.decided_upto {
            self.pinned.insert(version);
        }
    }

    /// Versions up to `version` are decided: forget what was noted for them.
    pub fn decide_upto(&mut self, version: u64) {
        self.decided_upto = self.decided_upto.max(version);
        self.sampled = self.sampled.split_off(&(self.decided_upto + 1));
        self.pinned = self.pinned.split_off(&(self.decided_upto + 1));
    }
}

impl Release {
    /// Whether the retention rule keeps `version`: the release state names it (stable,
    /// candidate, waiting out its cooldown), an episode was pinned to it, or an operator
    /// acted on it.
    pub fn keeps(&self, version: u64) -> bool {
        self.stable == version
            || self.candidate == Some(version)
            || self.pending.iter().any(|p| p.version == version)
            || self.retention.sampled.contains(&version)
            || self.retention.pinned.contains(&version)
    }

    /// Applies every pending version whose cooldown has passed.
    pub fn refresh(&mut self, now_ns: i64) {
        while let Some(p) = self.pending.front() {
            if p.ready_at_ns > now_ns {
                break;
            }
            let p = self.pending.pop_front().expect("front exists");
            match p.channel {
                Channel::Stable => self.stable = p.version,
                Channel::Canary => self.candidate = Some(p.version),
            }
        }
    }

    /// Makes `version` stable, at once (dropping any stable version still waiting out its
    /// cooldown) or after the cooldown; a candidate that is `version` stops being one.
    pub fn promote(&mut self, version: u64, at_once: bool, now_ns: i64) {
        if self.candidate == Some(version) {
            self.candidate = None;
        }
        if at_once {
            self.pending.retain(|p| p.channel != Channel::Stable);
            self.stable = version;
        } else {
            self.publish(version, Channel::Stable, now_ns);
        }
    }

    /// Applies a stable version chosen elsewhere (another gateway's promote or rollback),
    /// which is seen again on every look until it is stable: queued once, not each time.
    pub fn follow(&mut self, version: u64, at_once: bool, now_ns: i64) {
        // Waiting as the canary candidate is not waiting to be stable.
        let queued = self.stable == version
            || self
                .pending
                .iter()
                .any(|p| p.version == version && p.channel == Channel::Stable);
        if at_once || !queued {
            self.promote(version, at_once, now_ns);
        } else if self.candidate == Some(version) {
            self.candidate = None;
        }
    }

    /// Queues `version` for `channel` after the cooldown.
    pub fn publish(&mut self, version: u64, channel: Channel, now_ns: i64) {
        let ready_at_ns = now_ns + (self.cooldown_secs * 1e9) as i64;
        self.pending.push_back(PendingRelease {
            version,
            channel,
            ready_at_ns,
        });
        self.refresh(now_ns);
    }
}
