//! A write on its way to disk, acknowledged once it is durable.

use std::time::Duration;

use crate::LedgerError;

/// A write on its way to disk: [`Pending::wait`] returns once it is durable.
#[must_use = "a pending write is acknowledged only once `wait` returns"]
#[derive(Debug)]
pub struct Pending {
    answer: crossbeam_channel::Receiver<Result<(), LedgerError>>,
    timeout: Duration,
    what: &'static str,
}

impl Pending {
    /// A write whose result `answer` will carry, waited for at most `timeout`; `what` it
    /// is, for the error when none comes.
    pub(crate) fn new(
        answer: crossbeam_channel::Receiver<Result<(), LedgerError>>,
        timeout: Duration,
        what: &'static str,
    ) -> Self {
        Pending {
            answer,
            timeout,
            what,
        }
    }

    /// Waits until the write is durable.
    ///
    /// # Errors
    /// The storage failure that kept it off disk, or no answer within the writer's bound.
    pub fn wait(self) -> Result<(), LedgerError> {
        self.answer.recv_timeout(self.timeout).map_err(|e| {
            LedgerError::Writer(match e {
                crossbeam_channel::RecvTimeoutError::Timeout => {
                    format!("no answer to {} within {:?}", self.what, self.timeout)
                }
                crossbeam_channel::RecvTimeoutError::Disconnected => {
                    format!("the writer stopped before {} was durable", self.what)
                }
            })
        })?
    }
}
