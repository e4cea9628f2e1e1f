//! What a run keeps on the server for every process to read, written and read in one
//! place: the run config (key `config`), the newest policy version (key `latest`), and
//! each version's parameters (object `policy-v<v>`).

use strata_runtime::PublishedPolicy;

use crate::link::Link;
use crate::names::{policy_object, CONFIG_KEY, LATEST_KEY};
use crate::protocol::{self, Announcement};
use crate::{ClusterError, SharedConfig};

/// The run config and its hash as the learner stored them; `None` before a learner
/// started the run.
pub(crate) fn shared_config(link: &Link) -> Result<Option<SharedConfig>, ClusterError> {
    match link.get(CONFIG_KEY)? {
        Some((data, _)) => Ok(Some(protocol::from_bytes("run config", &data)?)),
        None => Ok(None),
    }
}

/// Stores the run config for the run's other processes (the learner, at its start).
pub(crate) fn store_config(link: &Link, shared: &SharedConfig) -> Result<(), ClusterError> {
    link.put(CONFIG_KEY, protocol::to_bytes(shared)).map(|_| ())
}

/// The learner's newest published version, if it published one.
pub(crate) fn latest_version(link: &Link) -> Result<Option<u64>, ClusterError> {
    match link.get(LATEST_KEY)? {
        Some((data, _)) => Ok(Some(
            protocol::from_bytes::<Announcement>("latest", &data)?.version,
        )),
        None => Ok(None),
    }
}

/// Version `v` from the object store, its checksum verified.
pub(crate) fn policy(link: &Link, v: u64) -> Result<PublishedPolicy, ClusterError> {
    protocol::policy_from_bytes(&link.get_object(&policy_object(v))?)
}

/// Publishes `policy`: the object first, then the `latest` key, then the announcement,
/// so whoever hears of a version can fetch it.
pub(crate) fn publish_policy(link: &Link, policy: &PublishedPolicy) -> Result<(), ClusterError> {
    let announcement = protocol::to_bytes(&Announcement {
        version: policy.version,
    });
    link.put_object(
        &policy_object(policy.version),
        &protocol::policy_to_bytes(policy),
    )?;
    link.put(LATEST_KEY, announcement.clone())?;
    link.publish(link.names.versions(), announcement)
}
