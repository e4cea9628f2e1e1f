//! Action latency and what was observed while an action executed.
//!
//! With latency `k`, an action takes `k` env ticks to take effect: the env keeps evolving
//! under the previous action for `k` ticks, then applies the new one for one tick. Every
//! tick's observation goes into the step's [`ExecSummary`], and the env clock advances per
//! tick, so issue/completion times and observation summaries describe real execution.

use std::ops::Range;

use crate::ImageSpan;

/// Per env, the observations seen between an action's issue and its completion,
/// summarised: per observation value outside images, and per channel of each image (its
/// pixels pooled), so a summary stays small however large the pictures are.
#[derive(Clone, Debug, PartialEq)]
pub struct ExecSummary {
    /// Observation width.
    pub obs_dim: usize,
    /// Summary width ([`crate::EnvSpec::summary_dim`]).
    pub dim: usize,
    /// Observations seen (env ticks) this step, per env.
    pub ticks: Vec<u32>,
    /// FNV-1a hash of those observations' bytes, in order, per env (an image's values as
    /// the bytes they are, other values as little-endian f32).
    pub hash: Vec<u64>,
    /// Per summary value minimum, `num_envs * dim`.
    pub min: Vec<f32>,
    /// Per summary value maximum.
    pub max: Vec<f32>,
    /// Per summary value mean.
    pub mean: Vec<f32>,
    segments: Vec<Segment>,
}

/// A run of an observation row and where its summary goes.
#[derive(Clone, Debug, PartialEq)]
enum Segment {
    /// Values summarised one by one, from summary index `at`.
    Values { obs: Range<usize>, at: usize },
    /// An image summarised per channel, from summary index `at`.
    Image {
        obs: Range<usize>,
        channels: usize,
        at: usize,
    },
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn fnv(h: u64, bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes
        .into_iter()
        .fold(h, |h, b| (h ^ u64::from(b)).wrapping_mul(FNV_PRIME))
}

impl ExecSummary {
    /// Zeroed summaries for `num_envs` envs of vector observations.
    pub fn new(num_envs: usize, obs_dim: usize) -> Self {
        Self::with_images(num_envs, obs_dim, &[])
    }

    /// Zeroed summaries for `num_envs` envs whose observation rows hold `images` (in
    /// order, apart, inside the row).
    pub fn with_images(num_envs: usize, obs_dim: usize, images: &[ImageSpan]) -> Self {
        let mut segments = Vec::new();
        let (mut row, mut at) = (0, 0);
        for image in images {
            if image.offset > row {
                segments.push(Segment::Values {
                    obs: row..image.offset,
                    at,
                });
                at += image.offset - row;
            }
            segments.push(Segment::Image {
                obs: image.offset..image.offset + image.len(),
                channels: image.channels,
                at,
            });
            at += image.channels;
            row = image.offset + image.len();
        }
        if row < obs_dim {
            segments.push(Segment::Values {
                obs: row..obs_dim,
                at,
            });
            at += obs_dim - row;
        }
        ExecSummary {
            obs_dim,
            dim: at,
            ticks: vec![0; num_envs],
            hash: vec![0; num_envs],
            min: vec![0.0; num_envs * at],
            max: vec![0.0; num_envs * at],
            mean: vec![0.0; num_envs * at],
            segments,
        }
    }

    /// Adds one observed tick of env `i` (the first tick of a step starts afresh).
    pub fn observe(&mut self, i: usize, obs: &[f32]) {
        let d = self.dim;
        let rows = i * d..(i + 1) * d;
        let first = self.ticks[i] == 0;
        let mut h = if first { FNV_OFFSET } else { self.hash[i] };
        let (min, max, sum) = (
            &mut self.min[rows.clone()],
            &mut self.max[rows.clone()],
            &mut self.mean[rows],
        );
        for segment in &self.segments {
            match segment {
                Segment::Values { obs: span, at } => {
                    let values = &obs[span.clone()];
                    h = fnv(h, values.iter().flat_map(|v| v.to_le_bytes()));
                    let out = *at..*at + values.len();
                    if first {
                        min[out.clone()].copy_from_slice(values);
                        max[out.clone()].copy_from_slice(values);
                        sum[out].copy_from_slice(values);
                    } else {
                        for (k, v) in out.zip(values) {
                            min[k] = min[k].min(*v);
                            max[k] = max[k].max(*v);
                            sum[k] += v;
                        }
                    }
                }
                Segment::Image {
                    obs: span,
                    channels,
                    at,
                } => {
                    let pixels = &obs[span.clone()];
                    // Image values are whole bytes (or 0/1): hashed as the bytes they are.
                    h = fnv(h, pixels.iter().map(|v| *v as u8));
                    let n = (pixels.len() / channels).max(1) as f32;
                    for c in 0..*channels {
                        let column = pixels.iter().skip(c).step_by(*channels);
                        let (lo, hi, total) = column.fold(
                            (f32::INFINITY, f32::NEG_INFINITY, 0.0f32),
                            |(lo, hi, total), v| (lo.min(*v), hi.max(*v), total + v),
                        );
                        let k = at + c;
                        if first {
                            (min[k], max[k], sum[k]) = (lo, hi, total / n);
                        } else {
                            min[k] = min[k].min(lo);
                            max[k] = max[k].max(hi);
                            sum[k] += total / n;
                        }
                    }
                }
            }
        }
        self.hash[i] = h;
        self.ticks[i] += 1;
    }

    /// Turns env `i`'s sums into means.
    pub fn finish(&mut self, i: usize) {
        let d = self.dim;
        let n = self.ticks[i].max(1) as f32;
        if n > 1.0 {
            for m in &mut self.mean[i * d..(i + 1) * d] {
                *m /= n;
            }
        }
    }

    /// Marks env `i` as not yet observed this step.
    pub fn start(&mut self, i: usize) {
        self.ticks[i] = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summarises_min_max_mean_and_hashes_in_order() {
        let mut s = ExecSummary::new(1, 2);
        s.start(0);
        s.observe(0, &[1.0, 4.0]);
        s.observe(0, &[3.0, 2.0]);
        s.finish(0);
        assert_eq!(
            (s.ticks[0], &s.min[..], &s.max[..]),
            (2, &[1.0, 2.0][..], &[3.0, 4.0][..])
        );
        assert_eq!(s.mean, vec![2.0, 3.0]);
        let forward = s.hash[0];
        s.start(0);
        s.observe(0, &[3.0, 2.0]);
        s.observe(0, &[1.0, 4.0]);
        assert_ne!(s.hash[0], forward, "order matters");
    }

    #[test]
    fn images_are_summarised_per_channel_and_hashed_as_bytes() {
        // [7 | a 2x2x2 image | -1]: 4 summary values.
        let image = ImageSpan {
            offset: 1,
            height: 2,
            width: 2,
            channels: 2,
        };
        let mut s = ExecSummary::with_images(2, 10, &[image]);
        assert_eq!(s.dim, 4);
        let row = [7.0, 0.0, 10.0, 4.0, 20.0, 8.0, 30.0, 255.0, 40.0, -1.0];
        s.start(1);
        s.observe(1, &row);
        let mut later = row;
        later[2] = 50.0;
        s.observe(1, &later);
        s.finish(1);
        assert_eq!(&s.min[4..], &[7.0, 0.0, 10.0, -1.0]);
        assert_eq!(&s.max[4..], &[7.0, 255.0, 50.0, -1.0]);
        // Channel 0: 66.75 then the same; channel 1: 25 then 35.
        assert_eq!(&s.mean[4..], &[7.0, 66.75, 30.0, -1.0]);
        // The image's bytes are hashed: a value that differs only below a byte does not
        // change the hash, one that differs as a byte does.
        let hash = |row: &[f32]| {
            let mut s = ExecSummary::with_images(1, 10, &[image]);
            s.start(0);
            s.observe(0, row);
            s.hash[0]
        };
        let mut near = row;
        near[3] = 4.25;
        assert_eq!(hash(&row), hash(&near));
        near[3] = 5.0;
        assert_ne!(hash(&row), hash(&near));
    }
}
