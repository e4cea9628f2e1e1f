//! A gateway's side of the deployed loop across machines: the segments it cuts and the
//! invalidations it records, published on the run's deployed stream for the learner.
//!
//! A segment is published once the gateway cuts it (at the episode's end or every
//! `ppo.n_steps` steps); the gateway's own ledger has every step of it already. The feed
//! queue is bounded: when NATS is slower than the agents, segments are shed (counted in
//! `segments_dropped`), never half-sent. Invalidations are relayed before any segment
//! waiting behind them, in the order they were recorded, and an operator's invalidation is
//! answered only once the stream has stored it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use crossbeam_channel::{Receiver, RecvTimeoutError};
use strata_gateway::{Gateway, Segment};

use crate::deployed::message::{encode_invalidation, encode_segment, Relayed};
use crate::link::{retrying, Link};
use crate::names::{invalidation_id, segment_id};
use crate::records;
use crate::stop::Stop;
use crate::{ClusterError, Meeting};

/// How far back a starting feed relays the invalidations its gateway recorded again.
const REPLAY: Duration = Duration::from_secs(24 * 3600);
/// The most invalidations a starting feed relays again.
const REPLAY_MOST: usize = 1 << 15;

/// What a gateway's feed has done, for its status line and the soak's figures.
#[derive(Debug, Default)]
pub struct FeedCounters {
    /// Segments stored in the stream.
    pub segments: AtomicU64,
    /// Segments left out because their trajectory was invalidated before they were sent.
    pub invalidated: AtomicU64,
    /// Invalidations stored in the stream.
    pub invalidations: AtomicU64,
    /// Segments the stream refused for good (larger than the server takes, or the stream
    /// full while the learner is behind): shed, their steps in the gateway's ledger.
    pub refused: AtomicU64,
}

/// Joins `gateway` (whose `gateway_id` names it among the run's gateways) to the learner
/// of run `meeting.run`: a thread publishes its segments and relays its invalidations
/// until `stop` is raised. Start it after [`crate::serve_run`].
///
/// # Errors
/// [`ClusterError::Config`] for gateway id 0 or a run whose learner does not take
/// gateways' reports; [`ClusterError`] when NATS cannot be reached.
pub fn feed_run(
    meeting: &Meeting,
    gateway: Arc<Gateway>,
    stop: Stop,
) -> Result<(JoinHandle<()>, Arc<FeedCounters>), ClusterError> {
    let id = gateway.settings().gateway_id;
    if id == 0 {
        return Err(ClusterError::Config(
            "a gateway that feeds a run's learner needs --gateway-id N (1 or more, different for each gateway of the run)".into(),
        ));
    }
    let link = Link::connect_until(meeting, &stop)?;
    if !link.has_deployed_streams()? {
        return Err(ClusterError::Config(format!(
            "run `{}`'s learner does not take gateways' reports: start it with `strata learner --from-gateways`",
            meeting.run
        )));
    }
    let config_hash = records::shared_config(&link)?
        .ok_or_else(|| ClusterError::Config(format!("run `{}` has no config", meeting.run)))?
        .config_hash;
    let (tx, rx) = crossbeam_channel::bounded(gateway.settings().learner_queue);
    gateway.feed_learner_elsewhere(tx);
    // A gateway killed before it relayed an invalidation it had recorded loses none: the
    // recent ones are relayed again (the stream and the learner take a repeat as the same
    // invalidation).
    let since = strata_ledger::now_ns() - REPLAY.as_nanos() as i64;
    let recorded = strata_ledger::LedgerData::read_invalidations(gateway.ledger().storage())
        .map_err(|e| ClusterError::Config(format!("reading the gateway's invalidations: {e}")))?;
    let recent: Vec<_> = recorded.iter().filter(|i| i.at_ns >= since).collect();
    // At most half the relay queue, the newest: room stays for what operators do now.
    let keep = recent.len().min(REPLAY_MOST);
    for inv in &recent[recent.len() - keep..] {
        gateway.relay().queue(inv.target);
    }
    let counters = Arc::new(FeedCounters::default());
    let feed = Feed {
        link,
        gateway,
        id,
        config_hash,
        stop,
        counters: Arc::clone(&counters),
    };
    let handle = std::thread::Builder::new()
        .name("strata-gateway-feed".into())
        .spawn(move || feed.run(&rx))
        .map_err(|e| ClusterError::Config(format!("cannot start a thread: {e}")))?;
    Ok((handle, counters))
}

struct Feed {
    link: Arc<Link>,
    gateway: Arc<Gateway>,
    id: u16,
    config_hash: String,
    stop: Stop,
    counters: Arc<FeedCounters>,
}

impl Feed {
    fn run(&self, rx: &Receiver<Box<Segment>>) {
        while !self.stop.is_raised() {
            if !self.relay_invalidations() {
                break;
            }
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(segment) => {
                    if !self.publish_segment(&segment) {
                        break;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        let left = rx.len();
        if left > 0 {
            tracing::info!(
                component = "gateway",
                left,
                "stopping: segments not yet sent stay untrained (their steps are in this gateway's ledger)"
            );
        }
    }

    /// Relays every invalidation queued so far, in order; `false` when stopped first.
    fn relay_invalidations(&self) -> bool {
        let queued = self.gateway.relay().take();
        let mut left = queued.into_iter();
        while let Some((number, target)) = left.next() {
            let relayed = Relayed {
                gateway: self.id,
                target,
            };
            let subject = self.link.names.deployed_invalidations(self.id);
            let id = invalidation_id(self.id, &target);
            let payload = Bytes::from(encode_invalidation(&relayed));
            let sent = retrying(
                "relaying an invalidation to the learner",
                || {
                    self.link
                        .publish_deployed(subject.clone(), &id, payload.clone())
                },
                &self.stop,
            );
            if sent.is_none() {
                let mut back = vec![(number, target)];
                back.extend(left);
                self.gateway.relay().put_back(back);
                return false;
            }
            self.counters.invalidations.fetch_add(1, Ordering::Relaxed);
            self.gateway.relay().mark_relayed(number);
        }
        true
    }

    /// Publishes one segment, retrying while NATS does not answer and relaying
    /// invalidations between tries; a segment the stream refuses for good is shed
    /// (counted). `false` when stopped first.
    fn publish_segment(&self, segment: &Segment) -> bool {
        if self.gateway.holds_invalidated(segment) {
            self.counters.invalidated.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        let Some(&first) = segment.sample_ids.first() else {
            return true;
        };
        let subject = self.link.names.deployed_segments(self.id);
        let id = segment_id(self.id, first);
        let payload = Bytes::from(encode_segment(segment, self.id, &self.config_hash));
        let mut wait = Duration::from_millis(50);
        let mut next_report = std::time::Instant::now();
        loop {
            match self
                .link
                .publish_deployed(subject.clone(), &id, payload.clone())
            {
                Ok(_) => {
                    self.counters.segments.fetch_add(1, Ordering::Relaxed);
                    return true;
                }
                Err(ClusterError::Stopped) => return false,
                Err(e) if refused_for_good(&e) => {
                    self.counters.refused.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(component = "gateway", segment = %id, bytes = payload.len(), error = %e, "the stream refused a segment: shed (its steps stay in this gateway's ledger, untrained)");
                    return true;
                }
                Err(e) => {
                    if std::time::Instant::now() >= next_report {
                        tracing::warn!(component = "gateway", error = %e, "sending a segment to the learner: retrying");
                        next_report = std::time::Instant::now() + Duration::from_secs(5);
                    }
                    // Invalidations never wait behind a segment.
                    if !self.relay_invalidations() || self.stop.pause(wait) {
                        return false;
                    }
                    wait = (wait * 2).min(Duration::from_secs(1));
                }
            }
        }
    }
}

/// Whether the server refused a publish in a way a retry cannot change soon: a message
/// larger than it takes, or a stream at its bound (the learner behind).
fn refused_for_good(e: &ClusterError) -> bool {
    let text = e.to_string().to_lowercase();
    matches!(e, ClusterError::Nats { .. })
        && [
            "maximum payload",
            "maximum bytes",
            "maximum messages",
            "message size",
            "insufficient resources",
        ]
        .iter()
        .any(|m| text.contains(m))
}
