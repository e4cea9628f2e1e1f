//! What a gateway puts on the run's deployed stream, as bytes: a segment of reported
//! steps (a JSON header, then its columns as little-endian arrays), or an invalidation
//! (JSON).
//!
//! ```text
//! u32 header length | header JSON | obs (f32, obs_dim a row) actions (f32, action_dim a
//! row) log_probs values rewards (f32) | states (f32, state_len a row)
//! ```

use std::ops::Range;

use serde::{Deserialize, Serialize};
use strata_algo::StepColumns;
use strata_gateway::Segment;
use strata_ledger::{Bucket, Target};

use crate::wire::{put_f32, split_framed, start_framed, Reader};
use crate::ClusterError;

/// Bumped whenever the layout changes; a learner refuses messages of another.
const FORMAT: u32 = 1;

/// A segment's header: who cut it and what it is.
#[derive(Debug, Serialize, Deserialize)]
struct SegmentHeader {
    format: u32,
    /// The run's config hash: a segment of another run is refused.
    config_hash: String,
    gateway: u16,
    trajectory: u64,
    version: u64,
    bucket: String,
    obs_dim: usize,
    action_dim: usize,
    state_len: usize,
    sample_ids: Vec<u64>,
    completed_at_ns: i64,
    terminated: bool,
    bootstrap: f32,
}

/// An invalidation a gateway recorded, relayed to the learner.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Relayed {
    pub(crate) gateway: u16,
    pub(crate) target: Target,
}

/// A segment as it arrives: its gateway and the segment.
pub(crate) struct Arrived {
    pub(crate) gateway: u16,
    pub(crate) segment: Segment,
}

/// The message for `segment`, cut by gateway `gateway` under config `config_hash`.
pub(crate) fn encode_segment(segment: &Segment, gateway: u16, config_hash: &str) -> Vec<u8> {
    let steps = segment.steps();
    let n = segment.len();
    let state_len = segment.states().len().checked_div(n).unwrap_or(0);
    let obs_dim = steps.obs.dim();
    let header = SegmentHeader {
        format: FORMAT,
        config_hash: config_hash.to_string(),
        gateway,
        trajectory: segment.trajectory,
        version: segment.version,
        bucket: segment.bucket.to_string(),
        obs_dim,
        action_dim: steps.actions.len().checked_div(n).unwrap_or(0),
        state_len,
        sample_ids: segment.sample_ids.clone(),
        completed_at_ns: segment.completed_at_ns,
        terminated: segment.terminated,
        bootstrap: segment.bootstrap,
    };
    let floats = n * obs_dim + steps.actions.len() + 3 * n + segment.states().len();
    let mut out = start_framed(&header, floats * 4);
    let mut obs = Vec::with_capacity(n * obs_dim);
    steps.obs.extend_into(0..n, &mut obs);
    put_f32(&mut out, &obs);
    put_f32(&mut out, steps.actions);
    put_f32(&mut out, steps.log_probs);
    put_f32(&mut out, steps.values);
    put_f32(&mut out, steps.rewards);
    put_f32(&mut out, segment.states());
    out
}

/// The message for an invalidation.
pub(crate) fn encode_invalidation(relayed: &Relayed) -> Vec<u8> {
    serde_json::to_vec(relayed).expect("an invalidation serialises")
}

/// Reads a segment of run `config_hash` whose observations keep `byte_spans` as bytes.
///
/// # Errors
/// [`ClusterError::Wire`] for a message of another format or run, or one whose columns do
/// not fit its header.
pub(crate) fn decode_segment(
    message: &[u8],
    config_hash: &str,
    byte_spans: &[Range<usize>],
) -> Result<Arrived, ClusterError> {
    let (json, body) = split_framed("segment", message)?;
    let h: SegmentHeader = serde_json::from_slice(json)
        .map_err(|e| ClusterError::Wire(format!("segment header: {e}")))?;
    if h.format != FORMAT {
        return Err(ClusterError::Wire(format!(
            "segment format {} (this build reads {FORMAT})",
            h.format
        )));
    }
    if h.config_hash != config_hash {
        return Err(ClusterError::Wire(format!(
            "a segment of config {} in a run of config {config_hash} (a gateway serving another run's config?)",
            h.config_hash
        )));
    }
    let bucket = Bucket::new(&h.bucket).map_err(|e| ClusterError::Wire(format!("bucket: {e}")))?;
    let n = h.sample_ids.len();
    let mut reader = Reader::new(body);
    let mut column = |what: &str, len: usize| {
        let mut v = vec![0.0f32; len];
        reader.f32s(what, &mut v).map(|()| v)
    };
    let obs = column("obs", n * h.obs_dim)?;
    let actions = column("actions", n * h.action_dim)?;
    let log_probs = column("log_probs", n)?;
    let values = column("values", n)?;
    let rewards = column("rewards", n)?;
    let states = column("states", n * h.state_len)?;
    let mut segment = Segment::new(
        h.trajectory,
        h.version,
        &bucket,
        (h.obs_dim, h.action_dim),
        byte_spans,
    );
    for t in 0..n {
        segment.push(
            h.sample_ids[t],
            &obs[t * h.obs_dim..(t + 1) * h.obs_dim],
            &actions[t * h.action_dim..(t + 1) * h.action_dim],
            log_probs[t],
            values[t],
            rewards[t],
            &states[t * h.state_len..(t + 1) * h.state_len],
            0,
        );
    }
    segment.completed_at_ns = h.completed_at_ns;
    segment.terminated = h.terminated;
    segment.bootstrap = h.bootstrap;
    Ok(Arrived {
        gateway: h.gateway,
        segment,
    })
}

/// Reads an invalidation.
///
/// # Errors
/// [`ClusterError::Wire`] when it is not one.
pub(crate) fn decode_invalidation(message: &[u8]) -> Result<Relayed, ClusterError> {
    serde_json::from_slice(message).map_err(|e| ClusterError::Wire(format!("invalidation: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_reads_back_as_it_was_cut() {
        let mut s = Segment::new(7, 3, &Bucket::canary(), (2, 1), &[]);
        for i in 0..4u64 {
            let x = i as f32;
            s.push(
                100 + i,
                &[x, -x],
                &[x * 2.0],
                -0.5,
                0.25,
                1.0,
                &[x, x, x],
                9,
            );
        }
        s.terminated = false;
        s.bootstrap = 1.5;
        s.completed_at_ns = 12345;
        let bytes = encode_segment(&s, 4, "abc");
        let back = decode_segment(&bytes, "abc", &[]).unwrap();
        assert_eq!(back.gateway, 4);
        let b = back.segment;
        assert_eq!(
            (b.trajectory, b.version, b.bucket.clone()),
            (7, 3, Bucket::canary())
        );
        assert_eq!(b.sample_ids, s.sample_ids);
        assert_eq!(b.states(), s.states());
        assert_eq!(
            (b.bootstrap, b.terminated, b.completed_at_ns),
            (1.5, false, 12345)
        );
        let (x, y) = (s.steps(), b.steps());
        assert_eq!(
            (x.actions, x.log_probs, x.values, x.rewards),
            (y.actions, y.log_probs, y.values, y.rewards)
        );
        let (mut ox, mut oy) = (Vec::new(), Vec::new());
        x.obs.extend_into(0..4, &mut ox);
        y.obs.extend_into(0..4, &mut oy);
        assert_eq!(ox, oy);
        let err = decode_segment(&bytes, "other", &[])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("config abc"), "{err}");
        assert!(
            decode_segment(&bytes[..bytes.len() - 4], "abc", &[]).is_err(),
            "short"
        );
    }

    #[test]
    fn an_invalidation_reads_back() {
        let r = Relayed {
            gateway: 2,
            target: Target::Trajectory { id: 5 },
        };
        assert_eq!(decode_invalidation(&encode_invalidation(&r)).unwrap(), r);
    }
}
