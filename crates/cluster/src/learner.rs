//! The learner's side: [`RemoteWorkers`], a [`WorkerLauncher`] whose workers are worker
//! processes reached over NATS, and the thread that publishes every policy version.
//!
//! Behind each logical worker the learner runs a proxy thread that looks to the trainer
//! exactly like a local rollout worker: it assigns the worker (key `assign.w<w>`), fills
//! the slots the trainer hands it with that worker's fragments from the stream (in order;
//! duplicates and superseded incarnations are set aside), beats its heartbeat with what the
//! worker process reports, and reports the process's failures or silence as the worker's
//! failure, so the trainer restarts it as a new incarnation as it would a thread. A
//! fragment is acknowledged to the stream only once the update that trained on it is in a
//! checkpoint ([`WorkerLauncher::durable`]), so a learner that dies loses nothing: its
//! successor resumes from the checkpoint and is handed again everything not acknowledged.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::PullConsumer;
use parking_lot::Mutex;
use std::sync::mpsc::RecvTimeoutError;
use strata_runtime::transport::{
    Activity, MemoryPolicyStore, WorkerError, WorkerEvent, WorkerLauncher, WorkerSetup,
};
use strata_runtime::StoreError;

use crate::link::{retrying, Link, Unacked};
use crate::names::{assignment_key, claim_key, state_object};
use crate::protocol::{self, Assignment, Beat, Failure};
use crate::records;
use crate::stop::Stop;
use crate::wire;
use crate::ClusterError;

/// How long a proxy waits for a fragment per fetch (its loop's beat: the worker's pulse
/// and failures are read between fetches).
const FETCH_WAIT: Duration = Duration::from_millis(100);
/// How long one wait for a free slot lasts before it is logged and renewed.
const SLOT_WAIT: Duration = Duration::from_secs(5);

/// One logical worker's lane in the stream: its consumer, and fragments taken from it
/// that wait to be acknowledged (a fragment number each).
struct Lane {
    consumer: PullConsumer,
    /// Fragment numbers and their messages, held (payload let go) until a checkpoint
    /// covers them.
    pending: Vec<(u64, Unacked)>,
}

/// What the learner took from the stream: fragments trained on (or queued for it) and
/// their bytes.
#[derive(Debug, Default)]
pub struct Traffic {
    /// Fragments delivered to the trainer.
    pub fragments: AtomicU64,
    /// Their messages' bytes.
    pub bytes: AtomicU64,
}

/// What every proxy of a learner session shares.
struct Session {
    link: Arc<Link>,
    /// A new number at every learner start: a worker knows its assignment is current.
    id: u64,
    config_hash: String,
    /// A process silent this long is taken for dead.
    silent_after: Duration,
    /// Fragments numbered below this are in a checkpoint.
    durable: AtomicU64,
    lanes: Mutex<HashMap<usize, Arc<Mutex<Lane>>>>,
    /// The thread uploading the trainer's versions: started with the first proxy,
    /// joined by [`WorkerLauncher::finish`] once its last version is out (it says so on
    /// the channel).
    publisher: Mutex<Option<(JoinHandle<()>, std::sync::mpsc::Receiver<()>)>>,
    traffic: Arc<Traffic>,
}

/// Workers as worker processes elsewhere, reached over NATS JetStream.
pub struct RemoteWorkers {
    session: Arc<Session>,
}

impl RemoteWorkers {
    /// The workers of a run of config hash `config_hash`, reached through `link`;
    /// `silent_after` is how long a worker process may be silent before it is taken for
    /// dead.
    pub(crate) fn new(link: Arc<Link>, config_hash: &str, silent_after: Duration) -> Self {
        RemoteWorkers {
            session: Arc::new(Session {
                link,
                id: session_id(),
                config_hash: config_hash.to_string(),
                silent_after,
                durable: AtomicU64::new(0),
                lanes: Mutex::new(HashMap::new()),
                publisher: Mutex::new(None),
                traffic: Arc::default(),
            }),
        }
    }

    /// This learner session's number.
    pub fn session(&self) -> u64 {
        self.session.id
    }

    /// What the proxies took from the stream so far.
    pub fn traffic(&self) -> Arc<Traffic> {
        Arc::clone(&self.session.traffic)
    }
}

impl WorkerLauncher for RemoteWorkers {
    fn launch(&self, setup: WorkerSetup) -> std::io::Result<JoinHandle<()>> {
        let session = Arc::clone(&self.session);
        {
            let mut publisher = session.publisher.lock();
            if publisher.is_none() {
                let (s, store) = (Arc::clone(&session), Arc::clone(&setup.store));
                let (done_tx, done) = std::sync::mpsc::sync_channel(1);
                let handle = std::thread::Builder::new()
                    .name("strata-policy-publisher".into())
                    .spawn(move || {
                        publish_versions(&s, &store);
                        let _ = done_tx.send(());
                    })?;
                *publisher = Some((handle, done));
            }
        }
        std::thread::Builder::new()
            .name(format!("strata-proxy-{}", setup.id))
            .spawn(move || {
                let (w, incarnation, events) = (setup.id, setup.incarnation, setup.events.clone());
                if let Err(e) = proxy(&session, setup) {
                    tracing::error!(component = %format!("proxy-{w}"), error = %e, "the worker's proxy stopped");
                    let error = WorkerError::Remote(e.to_string());
                    let _ = events.try_send(WorkerEvent::Failed { worker: w, incarnation, error, holding: None });
                }
            })
    }

    fn durable(&self, updates: u64) {
        self.session.durable.fetch_max(updates, Ordering::Relaxed);
    }

    /// Waits for the publisher to upload the run's last version (the store is closed
    /// now), so the gateways joined to the run get it, and joins it.
    fn finish(&self) {
        let Some((handle, done)) = self.session.publisher.lock().take() else {
            return;
        };
        // Its own wait for the last version is bounded by FINAL_PUBLISH_WAIT.
        let wait = FINAL_PUBLISH_WAIT + Duration::from_secs(1);
        if matches!(
            done.recv_timeout(wait),
            Ok(()) | Err(RecvTimeoutError::Disconnected)
        ) {
            let _ = handle.join();
        } else {
            tracing::error!(component = "cluster", waited = ?FINAL_PUBLISH_WAIT, "the policy publisher did not finish; the last version may not have reached NATS");
        }
    }
}

/// How long the end of a run waits for its last version to reach NATS.
const FINAL_PUBLISH_WAIT: Duration = Duration::from_secs(30);

/// A learner session's number: the start time and process, never the same twice for a run
/// (kept under 2^52 so it reads back exactly from JSON).
fn session_id() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    xxhash_rust::xxh3::xxh3_64(
        &[
            nanos.to_le_bytes(),
            u64::from(std::process::id()).to_le_bytes(),
        ]
        .concat(),
    ) >> 12
}

/// Uploads every version the trainer publishes ([`records::publish_policy`]) until the
/// store closes, then the last one if it is not out yet (the gateways serve it). A version
/// that left the trainer's memory before it could be uploaded is skipped; workers that
/// follow versions go on from the next one.
fn publish_versions(s: &Session, store: &MemoryPolicyStore) {
    let mut next = store.latest().version;
    // Raised when the store closes (the run is over): a version still failing to upload
    // then is given up for the last one.
    let closed = Stop::new();
    loop {
        let policy = match store.wait_for(next, true, Duration::from_secs(1)) {
            Ok(p) => p,
            Err(StoreError::Timeout { .. }) => continue,
            Err(StoreError::Missing(_)) => {
                next = store.latest().version;
                continue;
            }
            Err(_) => break, // closed: the run is over
        };
        let done = retrying(
            "publishing a policy version",
            || {
                if store.is_closed() {
                    closed.raise();
                }
                records::publish_policy(&s.link, &policy)
            },
            &closed,
        );
        if done.is_none() {
            break;
        }
        next = policy.version + 1;
    }
    let last = store.latest();
    if last.version >= next {
        let deadline = Instant::now() + FINAL_PUBLISH_WAIT;
        let out_of_time = Stop::new();
        let done = retrying(
            "publishing the run's last policy version",
            || {
                if Instant::now() >= deadline {
                    out_of_time.raise();
                }
                records::publish_policy(&s.link, &last)
            },
            &out_of_time,
        );
        if done.is_some() {
            tracing::info!(
                component = "cluster",
                version = last.version,
                "published the run's last version"
            );
        }
    }
}

/// One incarnation of logical worker `w`, run by a worker process somewhere, until the
/// trainer asks it to exit: a thread beside it waits for that `Exit` and raises the
/// proxy's stop, which cuts short whatever the proxy waits on (a NATS call, a fetch, a
/// pause between retries); the slot queue, closed by the same request, wakes a wait for
/// a slot.
fn proxy(s: &Arc<Session>, mut setup: WorkerSetup) -> Result<(), ClusterError> {
    let stop = Stop::new();
    let w = setup.id;
    // The command queue is the watcher's (the setup keeps a closed one in its place).
    let commands = std::mem::replace(&mut setup.commands, std::sync::mpsc::sync_channel(0).1);
    std::thread::scope(|scope| {
        let stop = &stop;
        let watcher = std::thread::Builder::new()
            .name(format!("strata-proxy-exit-{w}"))
            .spawn_scoped(scope, move || {
                // Ends with the incarnation: the trainer sends `Exit` to every worker it
                // restarts or stops, and drops the queue with its host.
                let _ = commands.recv();
                stop.raise();
            })
            .map_err(|e| ClusterError::Config(format!("cannot start a thread: {e}")))?;
        let outcome = stand_in(s, setup, stop);
        drop(watcher);
        outcome
    })
}

/// What [`proxy`] does until `stop`.
fn stand_in(s: &Arc<Session>, setup: WorkerSetup, stop: &Stop) -> Result<(), ClusterError> {
    let WorkerSetup {
        id: w,
        buffer,
        store,
        free_slots,
        events,
        start,
        incarnation,
        heartbeat,
        holding,
        first_fragment,
        ..
    } = setup;
    let link = &s.link;
    // The trainer hears of a failure as of a thread's, and restarts the worker.
    let fail = |error: String, holding: Option<strata_runtime::transport::SlotId>| {
        let error = WorkerError::Remote(error);
        let _ = events.try_send(WorkerEvent::Failed {
            worker: w,
            incarnation,
            error,
            holding,
        });
    };
    heartbeat.beat(Activity::AwaitingProcess);
    // The assignment: the state to start from goes into the object store first.
    let mut next = start.as_ref().map_or(first_fragment, |st| st.fragments);
    let start_state = match &start {
        Some(state) => {
            let name = state_object(s.id, w, incarnation);
            let json = serde_json::to_vec(state).expect("a worker state serialises");
            retrying(
                "storing a worker's start state",
                || link.put_object(&name, &json),
                stop,
            )
            .ok_or(ClusterError::Stopped)?;
            Some(name)
        }
        None => None,
    };
    let assignment = Assignment {
        session: s.id,
        incarnation,
        first_fragment: next,
        start_state,
        version: store.latest().version,
    };
    let assigned = retrying(
        "assigning a worker",
        || {
            // A claim of an earlier incarnation is void: any process may take this one
            // (cleared first, so a claim made on the new assignment stays).
            link.delete(&claim_key(w))?;
            link.put(&assignment_key(w), protocol::to_bytes(&assignment))
        },
        stop,
    )
    .ok_or(ClusterError::Stopped)?;
    // Best effort: an idle process that misses it finds the assignment at its next look.
    let _ = link.publish(link.names.assigned(), bytes::Bytes::new());
    // When this incarnation ends (the run is over or stopped), its process lets go; a
    // replacement incarnation's newer assignment stays.
    let withdraw = || {
        let _ = link.delete_if(&assignment_key(w), assigned);
    };
    let lane = {
        let mut lanes = s.lanes.lock();
        match lanes.get(&w) {
            Some(lane) => Arc::clone(lane),
            None => {
                let consumer = retrying("creating a consumer", || link.fresh_consumer(w), stop)
                    .ok_or(ClusterError::Stopped)?;
                let lane = Arc::new(Mutex::new(Lane {
                    consumer,
                    pending: Vec::new(),
                }));
                lanes.insert(w, Arc::clone(&lane));
                lane
            }
        }
    };
    let mut beats = link.subscribe(link.names.beats(w))?;
    let mut failures = link.subscribe(link.names.failures(w))?;
    let mut heard: Option<Instant> = None;
    tracing::info!(component = %format!("proxy-{w}"), session = s.id, incarnation, first_fragment = next, "waiting for a worker process");
    loop {
        if stop.is_raised() {
            withdraw();
            return Ok(());
        }
        while let Some(data) = link.next(&mut beats, Duration::ZERO, stop) {
            if let Ok(beat) = protocol::from_bytes::<Beat>("beat", &data) {
                if (beat.session, beat.incarnation) == (s.id, incarnation) {
                    heard = Some(Instant::now());
                    heartbeat.beat(Activity::from_u8(beat.activity));
                }
            }
        }
        while let Some(data) = link.next(&mut failures, Duration::ZERO, stop) {
            if let Ok(f) = protocol::from_bytes::<Failure>("failure", &data) {
                if (f.session, f.incarnation) == (s.id, incarnation) {
                    fail(f.error, None);
                    return Ok(());
                }
            }
        }
        match heard {
            None => heartbeat.beat(Activity::AwaitingProcess),
            Some(at) if at.elapsed() > s.silent_after => {
                fail(
                    format!(
                        "silent for {:.1?} (its process died or lost NATS)",
                        at.elapsed()
                    ),
                    None,
                );
                return Ok(());
            }
            Some(_) => {}
        }
        let mut lane = lane.lock();
        acknowledge_durable(s, &mut lane);
        let Some(delivery) = (match link.fetch(&lane.consumer, FETCH_WAIT, stop) {
            Ok(d) => d,
            Err(ClusterError::Stopped) => continue,
            Err(e) => {
                // The server may be restarting: the fragments wait in the stream.
                tracing::debug!(component = %format!("proxy-{w}"), error = %e, "fetch failed");
                stop.pause(FETCH_WAIT);
                None
            }
        }) else {
            continue;
        };
        let header = match wire::header(&delivery.payload) {
            Ok(h) if h.config_hash == s.config_hash && h.worker == w => h,
            Ok(h) => {
                tracing::warn!(component = %format!("proxy-{w}"), config_hash = %h.config_hash, worker = h.worker, "a fragment of another run or worker; dropped");
                let _ = link.ack(&delivery);
                continue;
            }
            Err(e) => {
                tracing::warn!(component = %format!("proxy-{w}"), error = %e, "an unreadable fragment; dropped");
                let _ = link.ack(&delivery);
                continue;
            }
        };
        let ours = (header.session, header.incarnation) == (s.id, incarnation);
        if !ours || header.index != next {
            // A re-publish, a superseded incarnation's or an earlier session's fragment: not
            // trained on; acknowledged once its number is durable either way.
            tracing::debug!(component = %format!("proxy-{w}"), index = header.index, session = header.session, incarnation = header.incarnation, "a fragment set aside");
            lane.pending.push((header.index, delivery.unacked()));
            acknowledge_durable(s, &mut lane);
            continue;
        }
        // A free slot, handed back by the trainer (its request to exit closes the queue).
        let slot = loop {
            match free_slots.recv_timeout(SLOT_WAIT) {
                Ok(slot) => break slot,
                Err(RecvTimeoutError::Timeout) => {
                    tracing::debug!(component = %format!("proxy-{w}"), "still waiting for a free slot");
                }
                Err(RecvTimeoutError::Disconnected) => {
                    withdraw();
                    return Ok(());
                }
            }
        };
        holding.set(Some(slot));
        let written = {
            let mut f = buffer.lock(slot);
            wire::decode_into(&delivery.payload, &header, &mut f)
        };
        holding.set(None);
        if let Err(e) = written {
            fail(format!("fragment {}: {e}", header.index), Some(slot));
            return Ok(());
        }
        buffer.mark_ready(slot);
        s.traffic.fragments.fetch_add(1, Ordering::Relaxed);
        s.traffic
            .bytes
            .fetch_add(delivery.payload.len() as u64, Ordering::Relaxed);
        lane.pending.push((header.index, delivery.unacked()));
        next += 1;
        let ready = WorkerEvent::FragmentReady {
            slot,
            index: header.index,
            incarnation,
        };
        if events.send(ready).is_err() {
            return Ok(());
        }
    }
}

/// Acknowledges the lane's fragments whose numbers are in a checkpoint.
fn acknowledge_durable(s: &Session, lane: &mut Lane) {
    let durable = s.durable.load(Ordering::Relaxed);
    lane.pending.retain(|(index, delivery)| {
        if *index >= durable {
            return true;
        }
        // Not acknowledged (the server is away): kept, and tried again next time.
        s.link.ack_later(delivery).is_err()
    });
}
