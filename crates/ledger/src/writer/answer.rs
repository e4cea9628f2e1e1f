//! Where the writer answers a durable append: a channel its caller blocks on, or a
//! callback an async caller gave (it wakes a task instead of parking a thread).

use crossbeam_channel::Sender;

use crate::LedgerError;

/// The outcome of a durable request, once it is known.
pub(crate) type Outcome = Result<(), LedgerError>;

/// How a durable append is answered.
pub(crate) enum Answer {
    /// A caller blocked on the channel's other end.
    Channel(Sender<Outcome>),
    /// Called once, on the writer's thread: it must only hand the outcome on.
    Callback(Box<dyn FnOnce(Outcome) + Send>),
}

impl Answer {
    /// Hands `outcome` to whoever waits (a caller that gave up is not an error).
    pub(crate) fn give(self, outcome: Outcome) {
        match self {
            Answer::Channel(tx) => {
                let _ = tx.send(outcome);
            }
            Answer::Callback(call) => call(outcome),
        }
    }
}

impl From<Sender<Outcome>> for Answer {
    fn from(tx: Sender<Outcome>) -> Self {
        Answer::Channel(tx)
    }
}
