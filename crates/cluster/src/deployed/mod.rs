//! Deployed agents beyond one machine: several gateways feed one learner over the run's
//! deployed stream.
//!
//! | what | where | |
//! | --- | --- | --- |
//! | segments of reported steps | stream `STRATA_<run>_DEPLOYED`, subject `strata.<run>.deployed.g<gateway>.segments` | work-queue retention, deduplicated by `g<gateway>.s<first sample id>` |
//! | invalidations | the same stream, subject `strata.<run>.deployed.g<gateway>.invalidations` | deduplicated by gateway and target |
//! | versions, config, serving pointer | as for a training run ([`crate`]) | |
//!
//! Each gateway ([`feed_run`], `strata serve --nats URL --gateway-id N`) keeps its own
//! ledger and numbers its samples and trajectories from `N << 40`
//! ([`strata_gateway::ids`]), so an id names one sample across the run. The learner
//! ([`run_deployed_learner`], `strata learner --from-gateways`) keeps its own ledger of
//! decisions and acknowledges a message only once the update that settled it is
//! checkpointed (see [`learner`] for the order of one update).

mod checkpoint;
mod feed;
mod learner;
mod message;
mod stream;

pub use feed::{feed_run, FeedCounters};
pub use learner::{run_deployed_learner, DeployedOptions, DeployedReport};

use crate::link::Link;
use crate::{ClusterError, Meeting};

/// Segments and invalidations in run `meeting.run`'s deployed stream that its learner has
/// not acknowledged yet.
///
/// # Errors
/// [`ClusterError`] when the server cannot be reached or the run has no deployed stream.
pub fn deployed_messages(meeting: &Meeting) -> Result<u64, ClusterError> {
    Link::connect(meeting)?.deployed_messages()
}
