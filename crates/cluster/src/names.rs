//! Every NATS name a run uses, derived from its run name in one place.

use crate::ClusterError;

/// A run's streams, subjects, buckets and keys.
#[derive(Clone, Debug)]
pub(crate) struct Names {
    run: String,
}

impl Names {
    /// The names of run `run` (letters, digits, `-` and `_`: it becomes a subject token
    /// and part of stream and bucket names).
    pub(crate) fn new(run: &str) -> Result<Self, ClusterError> {
        let ok = !run.is_empty()
            && run.len() <= 64
            && run
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !ok {
            return Err(ClusterError::Config(format!(
                "run name {run:?}: use 1-64 letters, digits, `-` or `_`"
            )));
        }
        Ok(Names { run: run.into() })
    }

    /// The stream holding every fragment not yet acknowledged by the learner.
    pub(crate) fn stream(&self) -> String {
        format!("STRATA_{}_FRAGMENTS", self.run)
    }

    /// Where worker `w`'s fragments are published.
    pub(crate) fn fragments(&self, w: usize) -> String {
        format!("strata.{}.fragments.w{w}", self.run)
    }

    /// Every worker's fragment subject.
    pub(crate) fn all_fragments(&self) -> String {
        format!("strata.{}.fragments.>", self.run)
    }

    /// The learner's durable consumer of worker `w`'s fragments.
    pub(crate) fn consumer(&self, w: usize) -> String {
        format!("learner-w{w}")
    }

    /// Worker `w`'s heartbeats (core NATS: nothing to keep).
    pub(crate) fn beats(&self, w: usize) -> String {
        format!("strata.{}.beats.w{w}", self.run)
    }

    /// Worker `w`'s failure reports (core NATS).
    pub(crate) fn failures(&self, w: usize) -> String {
        format!("strata.{}.failures.w{w}", self.run)
    }

    /// Announcements of newly published policy versions (core NATS).
    pub(crate) fn versions(&self) -> String {
        format!("strata.{}.versions", self.run)
    }

    /// A nudge that a logical worker was assigned (core NATS): idle worker processes wake
    /// on it instead of waiting out their next look at the assignments.
    pub(crate) fn assigned(&self) -> String {
        format!("strata.{}.assigned", self.run)
    }

    /// The stream of the segments of reported steps the run's gateways hand its learner.
    pub(crate) fn deployed_stream(&self) -> String {
        format!("STRATA_{}_DEPLOYED", self.run)
    }

    /// The stream of the invalidations the run's gateways relay to its learner.
    pub(crate) fn invalidation_stream(&self) -> String {
        format!("STRATA_{}_INVALIDATIONS", self.run)
    }

    /// Where gateway `g` publishes the segments it cuts.
    pub(crate) fn deployed_segments(&self, g: u16) -> String {
        format!("strata.{}.deployed.g{g}.segments", self.run)
    }

    /// Where gateway `g` relays the invalidations it records.
    pub(crate) fn deployed_invalidations(&self, g: u16) -> String {
        format!("strata.{}.deployed.g{g}.invalidations", self.run)
    }

    /// Every gateway's segments.
    pub(crate) fn all_deployed_segments(&self) -> String {
        format!("strata.{}.deployed.*.segments", self.run)
    }

    /// Every gateway's invalidations.
    pub(crate) fn all_deployed_invalidations(&self) -> String {
        format!("strata.{}.deployed.*.invalidations", self.run)
    }

    /// The run's key-value bucket: config, newest version, assignments, claims, the
    /// serving pointer.
    pub(crate) fn bucket(&self) -> String {
        format!("strata_{}", self.run)
    }

    /// The object store holding every published version and workers' start states.
    pub(crate) fn objects(&self) -> String {
        format!("strata_{}_objects", self.run)
    }
}

/// The run config (TOML) workers read.
pub(crate) const CONFIG_KEY: &str = "config";
/// The learner's newest published version.
pub(crate) const LATEST_KEY: &str = "latest";

/// What gateways serve: version and rules version, moved by compare-and-swap.
pub(crate) const CURRENT_KEY: &str = "current";

/// The assignment of logical worker `w`.
pub(crate) fn assignment_key(w: usize) -> String {
    format!("assign.w{w}")
}

/// The claim a worker process holds on logical worker `w`.
pub(crate) fn claim_key(w: usize) -> String {
    format!("claim.w{w}")
}

/// Policy version `v` in the object store.
pub(crate) fn policy_object(v: u64) -> String {
    format!("policy-v{v}")
}

/// The state a worker starts from (a resumed run's), in the object store.
pub(crate) fn state_object(session: u64, w: usize, incarnation: u64) -> String {
    format!("state-s{session}-w{w}-i{incarnation}")
}

/// The learner's durable consumer of the deployed stream's segments.
pub(crate) const SEGMENTS_CONSUMER: &str = "deployed-segments";
/// The learner's durable consumer of the deployed stream's invalidations: drained apart
/// from segments before every update, however many segments wait.
pub(crate) const INVALIDATIONS_CONSUMER: &str = "deployed-invalidations";

/// A segment's message id: its gateway and first sample id (unique across the run).
pub(crate) fn segment_id(gateway: u16, first_sample: u64) -> String {
    format!("g{gateway}.s{first_sample}")
}

/// An invalidation's message id: its gateway and target (invalidating the same target
/// twice within the deduplication window is stored once; it means the same).
pub(crate) fn invalidation_id(gateway: u16, target: &strata_ledger::Target) -> String {
    match target {
        strata_ledger::Target::Trajectory { id } => format!("g{gateway}.t{id}"),
        strata_ledger::Target::Samples { first, last } => format!("g{gateway}.s{first}-{last}"),
    }
}

/// A fragment's message id, for the stream's deduplication: unique per learner session,
/// worker, incarnation and fragment number.
pub(crate) fn fragment_id(session: u64, w: usize, incarnation: u64, index: u64) -> String {
    format!("s{session}.w{w}.i{incarnation}.f{index}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_names_become_subject_tokens_or_are_refused() {
        let n = Names::new("cheetah-3").unwrap();
        assert_eq!(n.fragments(2), "strata.cheetah-3.fragments.w2");
        assert_eq!(n.stream(), "STRATA_cheetah-3_FRAGMENTS");
        for bad in ["", "a.b", "a b", "a>", &"x".repeat(65)] {
            assert!(Names::new(bad).is_err(), "{bad:?}");
        }
        assert_eq!(fragment_id(7, 1, 0, 42), "s7.w1.i0.f42");
        assert_eq!(
            n.deployed_segments(3),
            "strata.cheetah-3.deployed.g3.segments"
        );
        assert_eq!(
            n.all_deployed_invalidations(),
            "strata.cheetah-3.deployed.*.invalidations"
        );
        assert_eq!(segment_id(3, 9), "g3.s9");
        assert_eq!(
            invalidation_id(2, &strata_ledger::Target::Samples { first: 4, last: 6 }),
            "g2.s4-6"
        );
    }
}
