//! A fragment as one message: a JSON header (who made it, under which version, its
//! episodes, statistics and the worker's state after it), then its columns as raw
//! little-endian arrays in a fixed order. Columns are most of the bytes and are copied,
//! never parsed; the header is small.
//!
//! ```text
//! u32 header length | header JSON | obs: values (f32), image bytes (u8)
//! actions log_probs values rewards (f32) | terminated truncated (u8)
//! final_obs: values (f32), image bytes (u8) | next_obs (f32) | issued completed (i64)
//! clock (u64) obs_count (u32) obs_hash (u64) obs_min obs_max obs_mean (f32)
//! sampler_version (u64) | states (f32, `state_len` a row) starts (u8)
//! ```
//!
//! A recurrent policy's states travel with the steps they were stored before, as they do
//! through a worker's shared slots, so a learner trains on exactly what it would locally.

use serde::{Deserialize, Serialize};
use strata_env::{EpisodeEnd, NormalizerStats};
use strata_runtime::transport::{Fragment, ObsRows, WorkerState};

use crate::ClusterError;

/// Bumped whenever the layout changes; a learner refuses messages of another.
const FORMAT: u32 = 3;

/// Who made a fragment and what it is about.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Header {
    pub(crate) format: u32,
    /// The run's config hash: a fragment of another run is refused.
    pub(crate) config_hash: String,
    /// The learner session the assignment came from.
    pub(crate) session: u64,
    pub(crate) worker: usize,
    pub(crate) incarnation: u64,
    pub(crate) index: u64,
    pub(crate) version: u64,
    pub(crate) steps: usize,
    pub(crate) envs: usize,
    pub(crate) obs_dim: usize,
    pub(crate) action_dim: usize,
    /// Values of recurrent state a row (0 without a recurrent core).
    pub(crate) state_len: usize,
    pub(crate) episodes: Vec<EpisodeEnd>,
    pub(crate) stats_delta: NormalizerStats,
    pub(crate) end_state: Option<WorkerState>,
    #[serde(flatten)]
    pub(crate) time: strata_runtime::FillTime,
    pub(crate) recorded: bool,
}

/// Who sent a fragment: the identity its header carries besides the fragment itself.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Origin<'a> {
    pub(crate) config_hash: &'a str,
    pub(crate) session: u64,
    pub(crate) worker: usize,
    pub(crate) incarnation: u64,
}

/// The start of a framed message (a fragment, a policy version's object): the header's
/// JSON length as u32 little-endian, then the JSON, with room for `body` more bytes.
pub(crate) fn start_framed<T: Serialize>(header: &T, body: usize) -> Vec<u8> {
    let json = serde_json::to_vec(header).expect("a header serialises");
    let mut out = Vec::with_capacity(4 + json.len() + body);
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&json);
    out
}

/// A framed message's header JSON and the bytes after it.
///
/// # Errors
/// [`ClusterError::Wire`] naming `what` when the message is shorter than its header says.
pub(crate) fn split_framed<'a>(
    what: &str,
    message: &'a [u8],
) -> Result<(&'a [u8], &'a [u8]), ClusterError> {
    let len = message
        .get(..4)
        .map(|b| u32::from_le_bytes(b.try_into().expect("four bytes")) as usize)
        .ok_or_else(|| ClusterError::Wire(format!("{what} shorter than its header length")))?;
    let json = message.get(4..4 + len).ok_or_else(|| {
        ClusterError::Wire(format!(
            "{what}: a header of {len} bytes in {} bytes",
            message.len()
        ))
    })?;
    Ok((json, &message[4 + len..]))
}

pub(crate) fn put_f32(out: &mut Vec<u8>, values: &[f32]) {
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

fn put_u64(out: &mut Vec<u8>, values: impl Iterator<Item = u64>) {
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// The message for fragment `f`.
pub(crate) fn encode(
    f: &Fragment,
    origin: Origin<'_>,
    obs_dim: usize,
    action_dim: usize,
) -> Vec<u8> {
    let rows = f.steps * f.envs;
    let header = Header {
        format: FORMAT,
        config_hash: origin.config_hash.to_string(),
        session: origin.session,
        worker: origin.worker,
        incarnation: origin.incarnation,
        index: f.index,
        version: f.version,
        steps: f.steps,
        envs: f.envs,
        obs_dim,
        action_dim,
        state_len: f.states.len() / rows.max(1),
        episodes: f.episodes.clone(),
        stats_delta: f.stats_delta.clone(),
        end_state: f.end_state.clone(),
        time: f.time,
        recorded: f.provenance.recorded,
    };
    let state = header.state_len;
    let mut out = start_framed(&header, rows * (4 * (6 + 6 * obs_dim + state) + 43));
    let put_obs = |out: &mut Vec<u8>, obs: &ObsRows| {
        let (floats, bytes) = obs.parts();
        put_f32(out, floats);
        out.extend_from_slice(bytes);
    };
    put_obs(&mut out, &f.obs);
    for column in [&f.actions, &f.log_probs, &f.values, &f.rewards] {
        put_f32(&mut out, column);
    }
    out.extend(f.terminated.iter().map(|&b| u8::from(b)));
    out.extend(f.truncated.iter().map(|&b| u8::from(b)));
    put_obs(&mut out, &f.final_obs);
    put_f32(&mut out, &f.next_obs);
    let p = &f.provenance;
    put_u64(&mut out, p.issued_ns.iter().map(|&v| v as u64));
    put_u64(&mut out, p.completed_ns.iter().map(|&v| v as u64));
    put_u64(&mut out, p.clock.iter().copied());
    for v in &p.obs_count {
        out.extend_from_slice(&v.to_le_bytes());
    }
    put_u64(&mut out, p.obs_hash.iter().copied());
    put_f32(&mut out, &p.obs_min);
    put_f32(&mut out, &p.obs_max);
    put_f32(&mut out, &p.obs_mean);
    put_u64(&mut out, p.sampler_version.iter().copied());
    put_f32(&mut out, &f.states);
    out.extend(f.starts.iter().map(|&b| u8::from(b)));
    out
}

/// Reads a message's header (cheap: the columns are not touched).
pub(crate) fn header(message: &[u8]) -> Result<Header, ClusterError> {
    let (json, _) = split_framed("a fragment message", message)?;
    let header: Header = serde_json::from_slice(json)
        .map_err(|e| ClusterError::Wire(format!("unreadable header: {e}")))?;
    if header.format != FORMAT {
        return Err(ClusterError::Wire(format!(
            "format {} (this build reads format {FORMAT})",
            header.format
        )));
    }
    Ok(header)
}

/// Reads columns from a message's body, checking each length.
pub(crate) struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `body`.
    pub(crate) fn new(body: &'a [u8]) -> Self {
        Reader { data: body, at: 0 }
    }

    fn take(&mut self, what: &str, bytes: usize) -> Result<&[u8], ClusterError> {
        let chunk = self.data.get(self.at..self.at + bytes).ok_or_else(|| {
            ClusterError::Wire(format!(
                "column {what}: {bytes} bytes wanted at {}, the message has {}",
                self.at,
                self.data.len()
            ))
        })?;
        self.at += bytes;
        Ok(chunk)
    }

    pub(crate) fn f32s(&mut self, what: &str, out: &mut [f32]) -> Result<(), ClusterError> {
        let chunk = self.take(what, out.len() * 4)?;
        for (v, b) in out.iter_mut().zip(chunk.chunks_exact(4)) {
            *v = f32::from_le_bytes(b.try_into().expect("four bytes"));
        }
        Ok(())
    }

    fn u64s(
        &mut self,
        what: &str,
        n: usize,
    ) -> Result<impl Iterator<Item = u64> + '_, ClusterError> {
        let chunk = self.take(what, n * 8)?;
        Ok(chunk
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("eight bytes"))))
    }

    fn bytes(&mut self, what: &str, out: &mut [u8]) -> Result<(), ClusterError> {
        out.copy_from_slice(self.take(what, out.len())?);
        Ok(())
    }

    /// Observation rows: their float part, then their byte part.
    fn obs(&mut self, what: &str, out: &mut ObsRows) -> Result<(), ClusterError> {
        let (floats, bytes) = out.parts_mut();
        self.f32s(what, floats)?;
        self.bytes(what, bytes)
    }

    fn flags(&mut self, what: &str, out: &mut [bool]) -> Result<(), ClusterError> {
        let chunk = self.take(what, out.len())?;
        for (v, &b) in out.iter_mut().zip(chunk) {
            *v = b != 0;
        }
        Ok(())
    }
}

/// Writes message `message` (whose header is `header`) into slot fragment `f`, which
/// must have the header's shape.
///
/// # Errors
/// [`ClusterError::Wire`] naming the column or dimension that does not fit.
pub(crate) fn decode_into(
    message: &[u8],
    header: &Header,
    f: &mut Fragment,
) -> Result<(), ClusterError> {
    let (od, ad) = (header.obs_dim, header.action_dim);
    let rows = f.steps * f.envs;
    if (header.steps, header.envs) != (f.steps, f.envs)
        || f.obs.rows() != rows
        || f.obs.dim() != od
        || f.actions.len() != f.steps * f.envs * ad
    {
        return Err(ClusterError::Wire(format!(
            "a fragment of {} steps x {} envs (obs {od}, action {ad}); this run's are {} x {} (obs {}, action {})",
            header.steps,
            header.envs,
            f.steps,
            f.envs,
            f.obs.dim(),
            f.actions.len() / (f.steps * f.envs).max(1),
        )));
    }
    if f.states.len() != rows * header.state_len {
        return Err(ClusterError::Wire(format!(
            "a fragment with {} values of recurrent state a row; this run's policy has {}",
            header.state_len,
            f.states.len() / rows.max(1),
        )));
    }
    let (_, body) = split_framed("a fragment message", message)?;
    let mut r = Reader::new(body);
    r.obs("obs", &mut f.obs)?;
    r.f32s("actions", &mut f.actions)?;
    r.f32s("log_probs", &mut f.log_probs)?;
    r.f32s("values", &mut f.values)?;
    r.f32s("rewards", &mut f.rewards)?;
    r.flags("terminated", &mut f.terminated)?;
    r.flags("truncated", &mut f.truncated)?;
    r.obs("final_obs", &mut f.final_obs)?;
    r.f32s("next_obs", &mut f.next_obs)?;
    let p = &mut f.provenance;
    for (dst, v) in p.issued_ns.iter_mut().zip(r.u64s("issued", rows)?) {
        *dst = v as i64;
    }
    for (dst, v) in p.completed_ns.iter_mut().zip(r.u64s("completed", rows)?) {
        *dst = v as i64;
    }
    for (dst, v) in p.clock.iter_mut().zip(r.u64s("clock", rows)?) {
        *dst = v;
    }
    let counts = r.take("obs_count", rows * 4)?;
    for (dst, b) in p.obs_count.iter_mut().zip(counts.chunks_exact(4)) {
        *dst = u32::from_le_bytes(b.try_into().expect("four bytes"));
    }
    for (dst, v) in p.obs_hash.iter_mut().zip(r.u64s("obs_hash", rows)?) {
        *dst = v;
    }
    r.f32s("obs_min", &mut p.obs_min)?;
    r.f32s("obs_max", &mut p.obs_max)?;
    r.f32s("obs_mean", &mut p.obs_mean)?;
    for (dst, v) in p
        .sampler_version
        .iter_mut()
        .zip(r.u64s("sampler_version", rows)?)
    {
        *dst = v;
    }
    r.f32s("states", &mut f.states)?;
    r.flags("starts", &mut f.starts)?;
    if r.at != body.len() {
        return Err(ClusterError::Wire(format!(
            "{} bytes after the last column",
            body.len() - r.at
        )));
    }
    p.recorded = header.recorded;
    f.version = header.version;
    f.index = header.index;
    f.episodes.clone_from(&header.episodes);
    f.stats_delta = header.stats_delta.clone();
    f.end_state.clone_from(&header.end_state);
    f.time = header.time;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_runtime::transport::{ExperienceBuffer, SlotId};
    use strata_runtime::RowWidths;

    fn slot(buffer: &ExperienceBuffer) -> SlotId {
        buffer.owned_by(3).next().unwrap()
    }

    #[test]
    fn a_fragment_survives_its_message_and_a_damaged_one_is_named() {
        let (steps, envs, od, ad) = (5, 2, 3, 1);
        // A value and a 2-value picture a row: the picture travels as bytes; and two values
        // of recurrent state a row.
        let widths = RowWidths {
            byte_spans: std::iter::once(1..3).collect(),
            state: 2,
            ..RowWidths::vector(od, ad)
        };
        let a = ExperienceBuffer::for_worker(3, 1, steps, envs, widths.clone(), false);
        {
            let mut f = a.lock(slot(&a));
            let values: Vec<f32> = (0..steps * envs * od)
                .map(|i| {
                    if i % od == 0 {
                        i as f32 * 0.5
                    } else {
                        (i * 37 % 256) as f32
                    }
                })
                .collect();
            f.obs.write(0, &values);
            f.actions.fill(-1.25);
            f.rewards[3] = 7.0;
            f.terminated[4] = true;
            f.truncated[9] = true;
            f.final_obs.write(1, &[2.0, 3.0, 4.0]);
            f.next_obs[1] = -3.0;
            f.provenance.issued_ns[2] = 1_700_000_000_000_000_123;
            f.provenance.completed_ns[2] = 1_700_000_000_000_000_456;
            f.provenance.clock[7] = 99;
            f.provenance.obs_count[1] = 4;
            f.provenance.obs_hash[6] = u64::MAX - 1;
            f.provenance.obs_mean[8] = 0.125;
            f.provenance.sampler_version[0] = 41;
            f.provenance.recorded = true;
            for (i, s) in f.states.iter_mut().enumerate() {
                *s = i as f32 * -0.25;
            }
            f.starts[6] = true;
            f.version = 40;
            f.index = 12;
            f.time.env = 0.5;
        }
        let origin = Origin {
            config_hash: "cafe",
            session: 9,
            worker: 3,
            incarnation: 1,
        };
        let message = encode(&a.lock(slot(&a)), origin, od, ad);
        let h = header(&message).unwrap();
        assert_eq!(
            (h.session, h.worker, h.incarnation, h.index, h.version),
            (9, 3, 1, 12, 40)
        );
        // A header from before the finer timing (env and inference seconds only) still
        // reads, the new parts zero.
        let mut old = serde_json::to_value(&h).unwrap();
        for key in [
            "frames_seconds",
            "summaries_seconds",
            "copy_seconds",
            "provenance_seconds",
            "startup_seconds",
        ] {
            assert!(old.as_object_mut().unwrap().remove(key).is_some(), "{key}");
        }
        let read: Header = serde_json::from_value(old).unwrap();
        assert_eq!(
            (read.time.env, read.time.frames, read.time.startup),
            (0.5, 0.0, 0.0)
        );
        assert_eq!(h.state_len, 2);
        let b = ExperienceBuffer::for_worker(3, 1, steps, envs, widths.clone(), false);
        decode_into(&message, &h, &mut b.lock(slot(&b))).unwrap();
        let (x, y) = (a.lock(slot(&a)), b.lock(slot(&b)));
        assert_eq!(x.obs, y.obs);
        assert_eq!(
            (&x.actions, &x.rewards, &x.final_obs, &x.next_obs),
            (&y.actions, &y.rewards, &y.final_obs, &y.next_obs)
        );
        assert_eq!((&x.terminated, &x.truncated), (&y.terminated, &y.truncated));
        let (p, q) = (&x.provenance, &y.provenance);
        assert_eq!(
            (&p.issued_ns, &p.completed_ns, &p.clock),
            (&q.issued_ns, &q.completed_ns, &q.clock)
        );
        assert_eq!(
            (&p.obs_count, &p.obs_hash, &p.obs_mean),
            (&q.obs_count, &q.obs_hash, &q.obs_mean)
        );
        assert_eq!(
            (&p.sampler_version, p.recorded),
            (&q.sampler_version, q.recorded)
        );
        assert_eq!((&x.states, &x.starts), (&y.states, &y.starts));
        assert_eq!(y.states[19], -4.75);
        assert_eq!((y.version, y.index, y.time.env), (40, 12, 0.5));
        drop((x, y));
        // Cut short, it is refused naming the column; a wrong shape is named too.
        let cut = &message[..message.len() - 3];
        let err = decode_into(cut, &h, &mut b.lock(slot(&b)))
            .unwrap_err()
            .to_string();
        assert!(err.contains("starts"), "{err}");
        // A learner whose policy has no memory refuses states (and the other way round).
        let plain = RowWidths {
            state: 0,
            ..widths.clone()
        };
        let c = ExperienceBuffer::for_worker(3, 1, steps, envs, plain, false);
        let err = decode_into(&message, &h, &mut c.lock(slot(&c)))
            .unwrap_err()
            .to_string();
        assert!(err.contains("2 values of recurrent state"), "{err}");
        let other =
            ExperienceBuffer::for_worker(3, 1, steps + 1, envs, RowWidths::vector(od, ad), false);
        let err = decode_into(&message, &h, &mut other.lock(slot(&other)))
            .unwrap_err()
            .to_string();
        assert!(err.contains("5 steps x 2 envs"), "{err}");
        assert!(header(&message[..2]).is_err());
    }
}
