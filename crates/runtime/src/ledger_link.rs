//! The learner's connection to the sample ledger: registers the run's admission rules,
//! binds every published version to them, and hands each update's rows and decisions to
//! the ledger's writer thread (the learner only copies columns).

use strata_ledger::{
    now_ns, DecisionRecord, Invalidation, Ledger, LedgerError, ReasonCode, SampleBatch, Target,
    VersionedRules, WriterStats,
};

use crate::buffer::Fragment;
use crate::provenance::{append_fragment, LedgerCursor};
use crate::records::Progress;
use crate::RunConfig;

/// An open ledger and where the run stands in it.
pub(crate) struct LedgerLink {
    ledger: Ledger,
    rules: VersionedRules,
    config_hash: String,
    bucket: strata_ledger::Bucket,
    /// Values in a sample's observation summary.
    summary_dim: usize,
    rows: SampleBatch,
    cursor: LedgerCursor,
}

impl LedgerLink {
    /// Registers the config's rules, binds the current version to them and, for a resumed
    /// run, marks samples written after its checkpoint as abandoned.
    pub(crate) fn attach(
        ledger: Ledger,
        config: &RunConfig,
        config_hash: &str,
        progress: &Progress,
        summary_dim: usize,
    ) -> Result<Self, LedgerError> {
        let rules = ledger.register_rules(&config.admission)?;
        if let Some(next) = progress.ledger_next_sample {
            let stored = ledger.next_sample_id();
            if stored > next {
                ledger.invalidate(Invalidation {
                    target: Target::Samples {
                        first: next,
                        last: stored - 1,
                    },
                    reason: ReasonCode::AbandonedByResume,
                    text: format!(
                        "written after the checkpoint at step {} that this run resumed from",
                        progress.global_step
                    ),
                    author: "learner".into(),
                    rules_version: rules.version,
                    at_ns: now_ns(),
                })?;
            }
        }
        let operation = if progress.updates == 0 {
            "publish"
        } else {
            "resume"
        };
        ledger.bind(
            progress.policy_version,
            config_hash,
            rules.version,
            operation,
            "learner",
        )?;
        let cursor = progress
            .ledger_cursor
            .clone()
            .filter(|c| c.episode.len() == config.env.num_envs)
            .unwrap_or_else(|| LedgerCursor::new(config.env.num_envs));
        let bucket = config.ledger.bucket.clone();
        Ok(LedgerLink {
            rows: SampleBatch::new(&bucket, config_hash, summary_dim),
            ledger,
            rules,
            config_hash: config_hash.to_string(),
            bucket,
            summary_dim,
            cursor,
        })
    }

    /// The registered rules in force.
    pub(crate) fn rules(&self) -> &VersionedRules {
        &self.rules
    }

    /// Adds a consumed fragment's rows; returns its first sample id.
    pub(crate) fn add_fragment(&mut self, f: &Fragment, worker: usize) -> u64 {
        let first = self.ledger.reserve_sample_ids((f.steps * f.envs) as u64);
        append_fragment(&mut self.rows, &mut self.cursor, f, worker, first);
        first
    }

    /// Envs `range` restarted on fresh envs: their episodes end unfinished.
    pub(crate) fn abandon(&mut self, range: std::ops::Range<usize>) {
        self.cursor.abandon(range);
    }

    /// Sends the update's rows and decisions and binds the newly published version.
    pub(crate) fn finish_update(
        &mut self,
        decisions: Vec<DecisionRecord>,
        published: u64,
    ) -> Result<(), LedgerError> {
        // A writer that cannot store what it holds stops the run: nothing is lost silently,
        // and its buffers do not grow without bound.
        if let Some(failure) = self.ledger.failure() {
            return Err(failure);
        }
        let rows = std::mem::replace(
            &mut self.rows,
            SampleBatch::new(&self.bucket, &self.config_hash, self.summary_dim),
        );
        self.ledger.append_samples(rows)?;
        self.ledger.append_decisions(decisions)?;
        self.ledger.bind(
            published,
            &self.config_hash,
            self.rules.version,
            "publish",
            "learner",
        )
    }

    /// Records where the run stands (for its next checkpoint).
    pub(crate) fn save_to(&self, progress: &mut Progress) {
        progress.ledger_cursor = Some(self.cursor.clone());
        progress.ledger_next_sample = Some(self.ledger.next_sample_id());
    }

    /// Writes everything buffered and waits until it is durable.
    pub(crate) fn flush(&self) -> Result<(), LedgerError> {
        self.ledger.flush()
    }

    /// What the writer did.
    pub(crate) fn stats(&self) -> WriterStats {
        self.ledger.stats()
    }

    /// The ledger's location.
    pub(crate) fn location(&self) -> &str {
        self.ledger.storage().location()
    }

    /// Flushes and stops the writer.
    pub(crate) fn close(self) -> Result<WriterStats, LedgerError> {
        self.ledger.close()
    }
}
