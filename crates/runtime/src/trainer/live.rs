//! The trainer's live view: a handle other threads read, refreshed after each update.

use super::*;

impl Trainer {
    /// A handle on the live view (for a metrics endpoint or a monitor on another thread).
    pub fn live_handle(&self) -> LiveHandle {
        LiveHandle {
            epoch: self.collector.wiring.epoch,
            learner: Arc::clone(&self.live),
            beats: Arc::clone(&self.collector.wiring.beats),
            store: Arc::clone(&self.collector.wiring.store),
            buffer: Arc::clone(&self.collector.wiring.buffer),
            workers: self.config.runtime.workers,
        }
    }

    /// Refreshes what the live view knows only from the learner: counters, rates, lag,
    /// restarts and the ledger's writer. A lock and a few copies: cheap per update.
    pub(crate) fn publish_live(&mut self, finished: bool) {
        let seconds = self.collector.wiring.epoch.elapsed().as_secs_f64();
        let p = &self.progress;
        let mean_return = self.mean_return();
        let ledger = self.ledger_stats().map(|l| LedgerView {
            rows_received: l.rows_received,
            rows_written: l.rows_written,
            rows_buffered: l.rows_buffered,
            files_written: l.files_written,
            bytes_written: l.bytes_written,
        });
        let mut view = self.live.lock();
        let rate = view.rate(seconds, p.global_step);
        view.restarts = self
            .collector
            .wiring
            .workers
            .iter()
            .map(|w| w.restarts)
            .collect();
        let s = &mut view.snapshot;
        s.env.clone_from(&self.config.env.name);
        s.mode = format!("{:?}", self.config.runtime.mode).to_lowercase();
        s.config_hash.clone_from(&self.config_hash);
        s.global_step = p.global_step;
        s.total_steps = self.config.train.total_steps;
        s.updates = p.updates;
        s.policy_version = p.policy_version;
        s.env_steps_per_sec = rate;
        s.mean_return = mean_return;
        s.lag = (
            self.collector.lags.iter().copied().min().unwrap_or(0),
            self.collector.lags.iter().sum::<u64>() as f64
                / self.collector.lags.len().max(1) as f64,
            self.collector.lags.iter().copied().max().unwrap_or(0),
        );
        s.max_policy_lag = self.collector.wiring.lag;
        s.invalid_fragments = p.worker_faults as usize;
        s.dropped_samples = self.dropped_samples;
        s.early_fragments = self.collector.early_fragments();
        s.ledger = ledger;
        s.finished = finished;
    }

    /// Records an evaluation in the live view.
    pub(crate) fn publish_eval(&self, version: u64, mean_return: f64) {
        let mut view = self.live.lock();
        view.snapshot.last_eval = Some((version, mean_return));
    }
}
