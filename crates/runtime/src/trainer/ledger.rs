//! The trainer's ledger: attaching one, where and how it writes, flushing it before a
//! checkpoint and closing it.

use super::*;

impl Trainer {
    /// Records every sample, decision and published version in `ledger` from now on.
    ///
    /// # Errors
    /// [`RuntimeError::Ledger`] when the rules cannot be registered or bound.
    pub fn attach_ledger(&mut self, ledger: strata_ledger::Ledger) -> Result<(), RuntimeError> {
        // A sample's observation summary: a value per observation value, one per image
        // channel.
        let summary_dim = strata_config::env_spec(&self.config)?.summary_dim();
        let link = LedgerLink::attach(
            ledger,
            &self.config,
            &self.config_hash,
            &self.progress,
            summary_dim,
        )?;
        link.save_to(&mut self.progress);
        self.ledger = Some(link);
        Ok(())
    }

    /// Whether a ledger is attached, and where.
    pub fn ledger_location(&self) -> Option<&str> {
        self.ledger.as_ref().map(LedgerLink::location)
    }

    /// What the ledger's writer did so far.
    pub fn ledger_stats(&self) -> Option<strata_ledger::WriterStats> {
        self.ledger.as_ref().map(LedgerLink::stats)
    }

    /// Makes everything sent to the ledger durable (before a checkpoint).
    ///
    /// # Errors
    /// [`RuntimeError::Ledger`] when the storage fails.
    pub fn flush_ledger(&self) -> Result<(), RuntimeError> {
        match &self.ledger {
            Some(l) => l.flush().map_err(RuntimeError::from),
            None => Ok(()),
        }
    }

    /// Flushes and closes the ledger; returns what it wrote.
    ///
    /// # Errors
    /// [`RuntimeError::Ledger`] when the final flush fails.
    pub fn close_ledger(&mut self) -> Result<Option<strata_ledger::WriterStats>, RuntimeError> {
        match self.ledger.take() {
            Some(l) => l.close().map(Some).map_err(RuntimeError::from),
            None => Ok(None),
        }
    }

    /// Tells the workers' launcher that everything consumed so far is in a checkpoint
    /// (called right after one is written).
    pub fn mark_durable(&self) {
        self.collector
            .wiring
            .launcher
            .durable(self.progress.updates);
    }
}
