//! A worker process: claims logical workers of a run, runs Strata's rollout worker for
//! each (the same code a training in one process runs as a thread), and publishes its
//! fragments to the stream with message ids the stream deduplicates.
//!
//! The run's config comes from the learner (key `config`), so `strata worker` needs only
//! the server and the run's name; only this machine's keys ([`MACHINE_KEYS`]: its Python,
//! CPUs, env processes) may be set here. A process runs `threads` workers at a time and
//! takes whichever logical worker has an assignment and no live claim; a process started
//! when every worker is taken waits, ready to take over one whose process dies.

use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use strata_runtime::transport::{
    HostSpec, HostedWorker, MemoryPolicyStore, WorkerEvent, WorkerState,
};
use strata_runtime::{RunConfig, StoreError};

use crate::link::{retrying, Link};
use crate::names::{assignment_key, claim_key, fragment_id};
use crate::protocol::{self, Announcement, Assignment, Beat, Claim, Failure};
use crate::records;
use crate::stop::Stop;
use crate::wire::{self, Origin};
use crate::ClusterError;

/// How often a worker's pulse is published.
const BEAT_EVERY: Duration = Duration::from_millis(250);
/// How often the assignment and the newest version are looked at.
const LOOK_EVERY: Duration = Duration::from_millis(500);

/// The keys a worker process may set for its own machine: its Python, how its envs are
/// spread over processes, the CPUs it pins to, buffer checks and how long it waits. The
/// rest (the mode, the number of workers, corrections) is the run's, as the learner holds it.
pub const MACHINE_KEYS: &[&str] = &[
    "runtime.python",
    "runtime.python_path",
    "runtime.envs_per_process",
    "runtime.pin_cpus",
    "runtime.debug_buffer",
    "runtime.wait_timeout_secs",
];

/// What `strata worker` was asked.
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    /// Where the run meets: server, run name, call timeout, TLS and credentials.
    pub meeting: crate::Meeting,
    /// Workers this process runs at once.
    pub threads: usize,
    /// `KEY=VALUE` settings for this machine, of [`MACHINE_KEYS`].
    pub sets: Vec<String>,
    /// Fault injection for tests: every this many fragments (0: never), publish the
    /// fragment twice more, once under its own message id (the stream must drop it) and
    /// once under another (the learner must drop it).
    pub republish_every: u64,
}

/// What a worker process did, when it stops.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerReport {
    /// Fragment messages the stream stored.
    pub fragments: u64,
    /// Publishes the stream answered as duplicates of a message it had.
    pub duplicates: u64,
    /// Assignments run.
    pub assignments: u64,
}

/// Runs until `stop` is raised: claims, runs and hands back logical workers. The raise
/// reaches every wait at once: NATS calls in flight end, and each hosted worker is asked
/// to exit (abandoning its fragment in progress, which its next incarnation collects
/// again).
///
/// # Errors
/// [`ClusterError`] when a setting is not this machine's or not valid, or NATS cannot be
/// reached at start.
pub fn run_worker_process(
    options: &WorkerOptions,
    stop: &Stop,
) -> Result<WorkerReport, ClusterError> {
    // Refused before anything starts (the run's own config is checked again on each claim).
    with_machine_settings(RunConfig::default(), &options.sets)?;
    let link = Link::connect_until(&options.meeting, stop)?;
    let process = format!(
        "{}:{}",
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "localhost".into()),
        std::process::id()
    );
    let report = parking_lot::Mutex::new(WorkerReport::default());
    std::thread::scope(|scope| {
        for t in 0..options.threads.max(1) {
            let (link, report, process, stop) = (&link, &report, &process, stop);
            std::thread::Builder::new()
                .name(format!("strata-worker-lane-{t}"))
                .spawn_scoped(scope, move || {
                    lane(link, options, process, t, stop, report);
                })
                .expect("a worker lane thread starts");
        }
    });
    Ok(report.into_inner())
}

/// `config` with this machine's settings `sets` (`KEY=VALUE`, each of [`MACHINE_KEYS`]),
/// validated.
fn with_machine_settings(
    mut config: RunConfig,
    sets: &[String],
) -> Result<RunConfig, ClusterError> {
    for set in sets {
        let Some((key, value)) = set.split_once('=') else {
            return Err(ClusterError::Config(format!(
                "--set expects KEY=VALUE, got `{set}`"
            )));
        };
        let key = key.trim();
        if !MACHINE_KEYS.contains(&key) {
            return Err(ClusterError::Config(format!(
                "`{key}`: a worker process may set only this machine's keys ({}); the rest of the config is the learner's",
                MACHINE_KEYS.join(", ")
            )));
        }
        config.set(key, value.trim())?;
    }
    config.validate()?;
    Ok(config)
}

/// The run's config from the learner, with this machine's settings, and the run's config
/// hash.
fn run_config(link: &Link, sets: &[String]) -> Result<Option<(RunConfig, String)>, ClusterError> {
    let Some(shared) = records::shared_config(link)? else {
        return Ok(None);
    };
    let config = with_machine_settings(RunConfig::from_saved_toml(&shared.config)?, sets)?;
    Ok(Some((config, shared.config_hash)))
}

/// A logical worker this process has claimed, with the run's config.
struct Claimed {
    config: RunConfig,
    config_hash: String,
    worker: usize,
    assignment: Assignment,
}

/// One lane: claim a logical worker, run it until its assignment ends, again.
fn lane(
    link: &Link,
    options: &WorkerOptions,
    process: &str,
    lane: usize,
    stop: &Stop,
    report: &parking_lot::Mutex<WorkerReport>,
) {
    let mut next_report = Instant::now();
    // Woken when the learner assigns a worker, so an idle lane claims it at once.
    let mut assigned = link.subscribe(link.names.assigned()).ok();
    while !stop.is_raised() {
        let outcome = claim(link, options, process, lane).and_then(|claimed| match claimed {
            Some(claimed) => {
                report.lock().assignments += 1;
                let ran = run_assignment(link, &claimed, stop, report, options.republish_every);
                // However it ended, the claim goes (a reassigned worker's is gone already).
                release(link, &claimed, process);
                ran
            }
            None => {
                match assigned.as_mut() {
                    Some(nudges) => {
                        let _ = link.next(nudges, LOOK_EVERY, stop);
                    }
                    None => {
                        stop.pause(LOOK_EVERY);
                    }
                }
                Ok(())
            }
        });
        if let Err(e) = outcome {
            if stop.is_raised() {
                break;
            }
            if Instant::now() >= next_report {
                tracing::warn!(component = "worker-process", lane, error = %e, "retrying");
                next_report = Instant::now() + Duration::from_secs(5);
            }
            stop.pause(LOOK_EVERY);
        }
    }
}

/// A logical worker with an assignment and no live claim, now claimed by this process.
fn claim(
    link: &Link,
    options: &WorkerOptions,
    process: &str,
    lane: usize,
) -> Result<Option<Claimed>, ClusterError> {
    let Some((config, config_hash)) = run_config(link, &options.sets)? else {
        return Ok(None);
    };
    let workers = config.runtime.workers;
    for k in 0..workers {
        let w = (lane + k) % workers;
        let Some((data, _)) = link.get(&assignment_key(w))? else {
            continue;
        };
        let assignment: Assignment = protocol::from_bytes("assignment", &data)?;
        let claim = Claim {
            session: assignment.session,
            incarnation: assignment.incarnation,
            process: process.to_string(),
        };
        if link
            .create(&claim_key(w), protocol::to_bytes(&claim))?
            .is_some()
        {
            tracing::info!(
                component = "worker-process",
                worker = w,
                session = assignment.session,
                incarnation = assignment.incarnation,
                "claimed"
            );
            return Ok(Some(Claimed {
                config,
                config_hash,
                worker: w,
                assignment,
            }));
        }
    }
    Ok(None)
}

/// Runs a claimed logical worker as its assignment says until the assignment changes,
/// the worker fails (reported to the learner) or `stop` is raised.
fn run_assignment(
    link: &Link,
    claimed: &Claimed,
    stop: &Stop,
    report: &parking_lot::Mutex<WorkerReport>,
    republish_every: u64,
) -> Result<(), ClusterError> {
    let Claimed {
        config,
        config_hash,
        worker: w,
        assignment,
    } = claimed;
    let w = *w;
    let spec = strata_runtime::env_spec(config)?;
    let (od, ad) = (spec.obs_dim(), spec.action_dim());
    let exact = config.exact_versions();
    let start: Option<WorkerState> = match &assignment.start_state {
        Some(name) => Some(protocol::from_bytes(
            "start state",
            &link.get_object(name)?,
        )?),
        None => None,
    };
    // The learner publishes the version it assigned from right after assigning: wait
    // for it (within a call's timeout, or until stopped).
    let initial = {
        let deadline = Instant::now() + link.timeout;
        loop {
            match records::policy(link, assignment.version) {
                Ok(p) => break p,
                Err(_) if Instant::now() < deadline => {
                    if stop.pause(Duration::from_millis(50)) {
                        return Err(ClusterError::Stopped);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    };
    // The logical worker as the runtime hosts one: store, buffer, queues and thread.
    let hosted = HostedWorker::start(HostSpec {
        id: w,
        config,
        initial,
        start,
        incarnation: assignment.incarnation,
        first_fragment: assignment.first_fragment,
    })?;
    let store = hosted.store();
    // This assignment's own stop: raised when it ends, or with the process's stop, which
    // also asks the hosted worker to exit (its end wakes the loop below).
    let ending = stop.child();
    let exit = hosted.exit_handle();
    let _exit_on_stop = ending.on_raise(move || exit.request());
    let origin = Origin {
        config_hash,
        session: assignment.session,
        worker: w,
        incarnation: assignment.incarnation,
    };
    let current =
        |a: &Assignment| (a.session, a.incarnation) == (assignment.session, assignment.incarnation);
    let result = std::thread::scope(|scope| {
        // Versions arrive on their own thread, so a worker waiting for one starts as soon as
        // the learner announces it.
        let follower = std::thread::Builder::new()
            .name(format!("strata-follower-{w}"))
            .spawn_scoped(scope, || follow(link, store, exact, &ending))
            .map_err(|e| ClusterError::Config(format!("cannot start a thread: {e}")))?;
        let (mut next_beat, mut next_look) = (Instant::now(), Instant::now());
        let outcome = 'assignment: loop {
            if ending.is_raised() {
                break Ok(());
            }
            let now = Instant::now();
            if now >= next_beat {
                let beat = Beat {
                    session: assignment.session,
                    incarnation: assignment.incarnation,
                    activity: hosted.heartbeat().silence().1 as u8,
                };
                let _ = link.publish(link.names.beats(w), protocol::to_bytes(&beat));
                next_beat = now + BEAT_EVERY;
            }
            if now >= next_look {
                next_look = now + LOOK_EVERY;
                match link.get(&assignment_key(w)) {
                    Ok(Some((data, _))) => {
                        if !protocol::from_bytes::<Assignment>("assignment", &data)
                            .is_ok_and(|a| current(&a))
                        {
                            tracing::info!(
                                component = "worker-process",
                                worker = w,
                                "assignment changed; letting go"
                            );
                            break Ok(());
                        }
                    }
                    Ok(None) => break Ok(()),
                    Err(_) => {} // the server is away: keep going, fragments wait in the slots
                }
            }
            // Until the next beat or look, unless the worker has something (or ends).
            let due = next_beat.min(next_look);
            match hosted.next_event(due.saturating_duration_since(Instant::now())) {
                Ok(WorkerEvent::FragmentReady { slot, index, .. }) => {
                    let payload = bytes::Bytes::from({
                        let f = hosted.buffer().lock(slot);
                        wire::encode(&f, origin, od, ad)
                    });
                    let id = fragment_id(assignment.session, w, assignment.incarnation, index);
                    let mut copies = vec![id.clone()];
                    if republish_every > 0 && (index + 1) % republish_every == 0 {
                        // Injected: a retried publish (the same id, which the stream drops) and
                        // one under a new id (which the learner must drop itself).
                        copies.extend([id.clone(), format!("{id}.again")]);
                    }
                    for copy in copies {
                        let Some(duplicate) = publish(link, w, &copy, &payload, &ending) else {
                            break 'assignment Ok(());
                        };
                        let mut r = report.lock();
                        r.fragments += u64::from(!duplicate);
                        r.duplicates += u64::from(duplicate);
                    }
                    hosted.hand_back(slot);
                }
                // A fragment lost to an env process counts at the learner as a failure of
                // this incarnation: it records the fragment invalid and reassigns.
                Ok(WorkerEvent::Failed { error, .. } | WorkerEvent::Lost { error, .. }) => {
                    let failure = Failure {
                        session: assignment.session,
                        incarnation: assignment.incarnation,
                        error: format!("{error} (in worker process {})", std::process::id()),
                    };
                    tracing::error!(component = "worker-process", worker = w, error = %failure.error, "worker failed");
                    let _ = link.publish(link.names.failures(w), protocol::to_bytes(&failure));
                    break Ok(());
                }
                Ok(WorkerEvent::Abandoned { .. }) => break Ok(()),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break Ok(()),
            }
        };
        // Ends the follower (and the worker, if it still runs).
        ending.raise();
        let _ = follower.join();
        outcome
    });
    hosted.stop();
    result
}

/// Lets go of a claim if it is still this process's.
fn release(link: &Link, claimed: &Claimed, process: &str) {
    let key = claim_key(claimed.worker);
    if let Ok(Some((data, _))) = link.get(&key) {
        let ours = protocol::from_bytes::<Claim>("claim", &data).is_ok_and(|c| {
            c.process == process
                && (c.session, c.incarnation)
                    == (claimed.assignment.session, claimed.assignment.incarnation)
        });
        if ours {
            let _ = link.delete(&key);
        }
    }
}

/// Publishes one fragment message, retrying while the server is away (the worker waits
/// for its slot meanwhile: back-pressure); whether the stream had it already, or `None`
/// when stopped first.
fn publish(link: &Link, w: usize, id: &str, payload: &bytes::Bytes, stop: &Stop) -> Option<bool> {
    retrying(
        &format!("publishing fragment {id}"),
        || link.publish_fragment(w, id, payload.clone()),
        stop,
    )
}

/// Keeps the worker's store up to the learner's newest version until `ending` is raised:
/// on each announcement, and from the `latest` key in case one was missed.
fn follow(
    link: &Link,
    store: &MemoryPolicyStore,
    exact: bool,
    ending: &Stop,
) -> Result<(), ClusterError> {
    let mut versions = link.subscribe(link.names.versions())?;
    let mut next_look = Instant::now();
    while !ending.is_raised() {
        let mut newest = link
            .next(
                &mut versions,
                next_look.saturating_duration_since(Instant::now()),
                ending,
            )
            .and_then(|data| protocol::from_bytes::<Announcement>("announcement", &data).ok())
            .map(|a| a.version);
        if Instant::now() >= next_look {
            next_look = Instant::now() + LOOK_EVERY;
            if let Ok(Some(latest)) = records::latest_version(link) {
                newest = newest.max(Some(latest));
            }
        }
        if let Some(v) = newest {
            if let Err(e) = follow_versions(link, store, v, exact) {
                tracing::debug!(component = "worker-process", error = %e, "versions not fetched yet");
            }
        }
    }
    Ok(())
}

/// Brings the local store up to version `newest`, fetching each missing version in order.
/// A version the learner never uploaded (it skips one that left its memory first) is
/// passed over to the newest unless the worker must use exact versions, which keeps the
/// learner from getting that far ahead.
fn follow_versions(
    link: &Link,
    store: &MemoryPolicyStore,
    newest: u64,
    exact: bool,
) -> Result<(), ClusterError> {
    let mut have = store.latest().version;
    while have < newest {
        let policy = match records::policy(link, have + 1) {
            Ok(p) => p,
            Err(e) if exact || have + 1 == newest => return Err(e),
            Err(e) => {
                let p = records::policy(link, newest).map_err(|_| e)?;
                tracing::warn!(component = "worker-process", skipped = ?(have + 1..newest), "versions missing from the store: going on from the newest");
                match store.publish_past_gap(p) {
                    Ok(()) | Err(StoreError::OutOfOrder { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
                have = store.latest().version;
                continue;
            }
        };
        match store.publish(policy) {
            Ok(()) | Err(StoreError::OutOfOrder { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        have = store.latest().version;
    }
    Ok(())
}
