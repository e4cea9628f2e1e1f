//! The small messages between the learner and worker processes (JSON), and a published
//! policy version's object.

use serde::{Deserialize, Serialize};
use strata_env::NormalizerStats;
use strata_runtime::PublishedPolicy;

use crate::{wire, ClusterError};

/// What the learner asks of logical worker `w` (key `assign.w<w>`): which incarnation to
/// run, from which fragment, from which state, starting with which policy version.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Assignment {
    /// The learner's session (a new one at every learner start).
    pub(crate) session: u64,
    /// The incarnation (0 first; +1 per restart within a session).
    pub(crate) incarnation: u64,
    /// The first fragment number to produce.
    pub(crate) first_fragment: u64,
    /// The object holding the state to start from (a resumed run), or fresh envs.
    pub(crate) start_state: Option<String>,
    /// The learner's newest version when it assigned: the worker's policies start there.
    pub(crate) version: u64,
}

/// A worker process's claim on a logical worker (key `claim.w<w>`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Claim {
    pub(crate) session: u64,
    pub(crate) incarnation: u64,
    /// `host:pid` of the process.
    pub(crate) process: String,
}

/// A worker's pulse, four times a second: which incarnation, doing what.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Beat {
    pub(crate) session: u64,
    pub(crate) incarnation: u64,
    /// An `Activity` as its byte.
    pub(crate) activity: u8,
}

/// A worker that stopped on an error (its env failed, say).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Failure {
    pub(crate) session: u64,
    pub(crate) incarnation: u64,
    pub(crate) error: String,
}

/// A newly published version.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub(crate) struct Announcement {
    pub(crate) version: u64,
}

/// JSON of a message.
pub(crate) fn to_bytes<T: Serialize>(value: &T) -> bytes::Bytes {
    bytes::Bytes::from(serde_json::to_vec(value).expect("protocol messages serialise"))
}

/// A message from JSON.
pub(crate) fn from_bytes<T: for<'de> Deserialize<'de>>(
    what: &str,
    data: &[u8],
) -> Result<T, ClusterError> {
    serde_json::from_slice(data).map_err(|e| ClusterError::Wire(format!("unreadable {what}: {e}")))
}

/// The header of a published version's object (its parameters follow as raw f32).
#[derive(Serialize, Deserialize)]
struct PolicyHeader {
    version: u64,
    normalizer: NormalizerStats,
    /// The learner's checksum, as hex: the worker recomputes and compares it.
    checksum: String,
    params: usize,
}

/// A version as an object: JSON header length, header, parameters (f32 little-endian).
pub(crate) fn policy_to_bytes(p: &PublishedPolicy) -> Vec<u8> {
    let header = PolicyHeader {
        version: p.version,
        normalizer: p.normalizer.clone(),
        checksum: format!("{:032x}", p.checksum),
        params: p.params.len(),
    };
    let mut out = wire::start_framed(&header, 4 * p.params.len());
    wire::put_f32(&mut out, &p.params);
    out
}

/// A version back from its object, its checksum verified.
pub(crate) fn policy_from_bytes(data: &[u8]) -> Result<PublishedPolicy, ClusterError> {
    let bad = |why: String| ClusterError::Wire(format!("policy object: {why}"));
    let (json, raw) = wire::split_framed("a policy object", data)?;
    let header: PolicyHeader = serde_json::from_slice(json).map_err(|e| bad(e.to_string()))?;
    if raw.len() != header.params * 4 {
        return Err(bad(format!(
            "{} parameter bytes, the header says {}",
            raw.len(),
            header.params * 4
        )));
    }
    let mut params = vec![0.0; header.params];
    wire::Reader::new(raw).f32s("params", &mut params)?;
    let policy = PublishedPolicy::new(header.version, params, header.normalizer);
    if format!("{:032x}", policy.checksum) != header.checksum {
        return Err(bad(format!(
            "version {} does not match its checksum",
            header.version
        )));
    }
    Ok(policy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_survives_its_object_and_corruption_is_caught() {
        let p = PublishedPolicy::new(7, vec![0.5, -1.25, 3.0], NormalizerStats::default());
        let mut bytes = policy_to_bytes(&p);
        let back = policy_from_bytes(&bytes).unwrap();
        assert_eq!(
            (back.version, back.params.clone(), back.checksum),
            (7, p.params.clone(), p.checksum)
        );
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
        let err = policy_from_bytes(&bytes).unwrap_err().to_string();
        assert!(err.contains("checksum"), "{err}");
        let err = policy_from_bytes(&bytes[..6]).unwrap_err().to_string();
        assert!(err.contains("a policy object: a header of"), "{err}");
    }
}
