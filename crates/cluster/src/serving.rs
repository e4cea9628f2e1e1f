//! Gateways of a run over NATS: the serving pointer in the run's key-value bucket (key
//! `current`, moved by compare-and-swap on its revision), and the thread that keeps a
//! gateway's versions and stable version in step with the learner's and the pointer.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use strata_gateway::{Gateway, RequestError, ServingPointer, SharedRelease};
use strata_runtime::RunConfig;

use crate::link::Link;
use crate::names::CURRENT_KEY;
use crate::protocol;
use crate::records;
use crate::{ClusterError, Meeting};

/// How often a gateway looks for new versions and a moved pointer.
const LOOK_EVERY: Duration = Duration::from_millis(250);

/// The serving pointer in NATS KV.
pub struct NatsRelease {
    link: Arc<Link>,
}

impl NatsRelease {
    /// The pointer of the run `link` is connected to.
    pub(crate) fn new(link: Arc<Link>) -> Self {
        NatsRelease { link }
    }
}

impl SharedRelease for NatsRelease {
    fn read(&self) -> Result<Option<(ServingPointer, u64)>, String> {
        match self.link.get(CURRENT_KEY).map_err(|e| e.to_string())? {
            None => Ok(None),
            Some((data, revision)) => protocol::from_bytes("serving pointer", &data)
                .map(|p| Some((p, revision)))
                .map_err(|e| e.to_string()),
        }
    }

    fn swap(&self, expected: Option<u64>, to: &ServingPointer) -> Result<Option<u64>, String> {
        let value = protocol::to_bytes(to);
        match expected {
            None => self.link.create(CURRENT_KEY, value),
            Some(revision) => self.link.swap(CURRENT_KEY, value, revision),
        }
        .map_err(|e| e.to_string())
    }
}

/// The run config the learner of `meeting.run` published (a gateway serves its model).
///
/// # Errors
/// [`ClusterError::Config`] when no learner has started the run.
pub fn run_config(meeting: &Meeting) -> Result<RunConfig, ClusterError> {
    let link = Link::connect(meeting)?;
    let shared = records::shared_config(&link)?.ok_or_else(|| {
        ClusterError::Config(format!(
            "run `{}` has no config at {}: start its learner first",
            meeting.run, meeting.url
        ))
    })?;
    Ok(RunConfig::from_saved_toml(&shared.config)?)
}

/// Joins `gateway` to run `meeting.run`: its stable version becomes the shared pointer's
/// (moved by its promotes and rollbacks with compare-and-swap), and a thread imports the
/// learner's versions as they are published and applies the pointer when another gateway
/// moves it, until `stop` closes (its sender dropped) or carries a message.
///
/// # Errors
/// [`ClusterError`] when NATS cannot be reached or the run has no version yet.
pub fn serve_run(
    meeting: &Meeting,
    gateway: Arc<Gateway>,
    stop: std::sync::mpsc::Receiver<()>,
) -> Result<JoinHandle<()>, ClusterError> {
    let link = Link::connect(meeting)?;
    // Every version published so far (an operator may promote or roll back to any), so
    // the pointer can be applied; later ones as they come.
    let newest = records::latest_version(&link)?.ok_or_else(|| {
        ClusterError::Config(format!(
            "run `{}` has published no version yet",
            meeting.run
        ))
    })?;
    for v in 0..=newest {
        import(&link, &gateway, v)?;
    }
    gateway
        .share_release(Arc::new(NatsRelease {
            link: Arc::clone(&link),
        }))
        .map_err(|e| ClusterError::Config(format!("cannot share the release: {e}")))?;
    let handle = std::thread::Builder::new()
        .name("strata-gateway-follower".into())
        .spawn(move || {
            let mut imported = newest;
            let release = NatsRelease { link: Arc::clone(&link) };
            loop {
                if let Err(e) = follow_once(&link, &gateway, &release, &mut imported) {
                    tracing::debug!(component = "gateway", error = %e, "following the run: retrying");
                }
                // The wait between looks is the stop channel itself.
                match stop.recv_timeout(LOOK_EVERY) {
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    _ => break,
                }
            }
        })
        .map_err(|e| ClusterError::Config(format!("cannot start a thread: {e}")))?;
    Ok(handle)
}

/// Imports version `v` from the object store into the gateway.
fn import(link: &Link, gateway: &Gateway, v: u64) -> Result<(), ClusterError> {
    let policy = records::policy(link, v)?;
    gateway
        .import_version(v, policy.params)
        .map_err(|e| ClusterError::Config(e.to_string()))
}

/// Imports versions newer than `imported` and applies a moved pointer.
fn follow_once(
    link: &Link,
    gateway: &Gateway,
    release: &NatsRelease,
    imported: &mut u64,
) -> Result<(), ClusterError> {
    if let Some(newest) = records::latest_version(link)? {
        while *imported < newest {
            match import(link, gateway, *imported + 1) {
                Ok(()) => *imported += 1,
                // A version the learner never uploaded (its publisher skips one that left
                // its memory first) must not stall the rest: go on from the newest. A
                // pointer naming a version passed over imports it on demand below.
                Err(e) if *imported + 1 < newest => {
                    import(link, gateway, newest).map_err(|_| e)?;
                    tracing::warn!(component = "gateway", skipped = ?(*imported + 1..newest), "versions missing from the store: imported the newest");
                    *imported = newest;
                }
                Err(e) => return Err(e),
            }
        }
    }
    if let Some((pointer, revision)) = release.read().map_err(ClusterError::Wire)? {
        match gateway.observe_pointer(pointer.clone(), revision) {
            Ok(()) => {}
            Err(RequestError::NotFound(_)) => {
                let policy = records::policy(link, pointer.version)?;
                gateway
                    .import_pointed_version(pointer.version, policy.params)
                    .map_err(|e| ClusterError::Config(e.to_string()))?;
                gateway
                    .observe_pointer(pointer, revision)
                    .map_err(|e| ClusterError::Config(e.to_string()))?;
            }
            Err(e) => return Err(ClusterError::Config(e.to_string())),
        }
    }
    Ok(())
}
