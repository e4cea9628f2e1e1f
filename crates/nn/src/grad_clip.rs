//! Gradient-norm clipping before the optimiser's step: over every parameter at once, or
//! over each network on its own.

use std::ops::Range;

/// How gradients are clipped before an optimiser step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradClip {
    /// The largest norm a clipped group's gradient keeps.
    pub max_norm: f32,
    /// Clip each network (the policy with its log-std, the value network, a shared
    /// encoder and core) on its own instead of all parameters together. With one global
    /// norm the value loss, whose gradient is thousands of times the policy's on
    /// unnormalised returns, sets the scale of the policy's step, and the step jumps when
    /// the value's gradient falls.
    pub per_network: bool,
}

/// Gradient norms before clipping: over every parameter, and over the policy (with its
/// log-std) and the value network on their own.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GradNorms {
    /// Over every parameter.
    pub global: f32,
    /// Over the policy network and its log-std.
    pub policy: f32,
    /// Over the value network.
    pub value: f32,
}

impl GradClip {
    /// One norm over every parameter (SB3's and PyTorch's `clip_grad_norm_`).
    pub fn global(max_norm: f32) -> Self {
        GradClip {
            max_norm,
            per_network: false,
        }
    }

    /// Clips `grads` in place; `groups` are the spans clipped on their own when
    /// [`GradClip::per_network`] is set (spans not listed join no group and are left
    /// as they are). Returns the global norm and each group's, before clipping.
    pub fn apply<const N: usize>(
        clip: Option<GradClip>,
        grads: &mut [f32],
        groups: &[&[Range<usize>]; N],
    ) -> (f32, [f32; N]) {
        let norm = squared_norm(grads).sqrt();
        let group_norms = groups.map(|group| {
            group
                .iter()
                .map(|r| squared_norm(&grads[r.clone()]))
                .sum::<f32>()
                .sqrt()
        });
        match clip {
            None => {}
            Some(c) if !c.per_network => scale_to(grads, norm, c.max_norm),
            Some(c) => {
                for (group, n) in groups.iter().zip(group_norms) {
                    for r in group.iter() {
                        scale_to(&mut grads[r.clone()], n, c.max_norm);
                    }
                }
            }
        }
        (norm, group_norms)
    }
}

fn squared_norm(g: &[f32]) -> f32 {
    g.iter().map(|x| x * x).sum()
}

/// Scales `g`, whose norm is `norm`, down to `max` if it is longer.
fn scale_to(g: &mut [f32], norm: f32, max: f32) {
    if norm > max {
        let scale = max / (norm + 1e-6);
        g.iter_mut().for_each(|x| *x *= scale);
    }
}

#[cfg(test)]
// A group of one span is what `&[0..2]` means here, not a range meant as a list.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    fn norm(g: &[f32]) -> f32 {
        squared_norm(g).sqrt()
    }

    #[test]
    fn global_clipping_scales_everything_by_one_factor() {
        let mut g = vec![30.0, 40.0, 0.3, 0.4];
        let (before, groups) =
            GradClip::apply(Some(GradClip::global(0.5)), &mut g, &[&[0..2], &[2..4]]);
        assert!((before - norm(&[30.0, 40.0, 0.3, 0.4])).abs() < 1e-4);
        assert!((groups[0] - 50.0).abs() < 1e-4 && (groups[1] - 0.5).abs() < 1e-4);
        assert!((norm(&g) - 0.5).abs() < 1e-4);
        // The small group shrank with the large one.
        assert!(norm(&g[2..]) < 0.01);
    }

    #[test]
    fn per_network_clipping_leaves_a_short_group_alone() {
        let mut g = vec![30.0, 40.0, 0.3, 0.4, 7.0];
        let clip = GradClip {
            max_norm: 0.5,
            per_network: true,
        };
        GradClip::apply(Some(clip), &mut g, &[&[0..2], &[2..4]]);
        assert!(
            (norm(&g[..2]) - 0.5).abs() < 1e-4,
            "the long group is clipped"
        );
        assert_eq!(&g[2..4], &[0.3, 0.4], "the short one keeps its gradient");
        assert_eq!(g[4], 7.0, "a span in no group is left as it is");
    }

    #[test]
    fn a_group_of_several_spans_is_clipped_by_their_joint_norm() {
        let mut g = vec![3.0, 0.0, 4.0];
        let clip = GradClip {
            max_norm: 1.0,
            per_network: true,
        };
        GradClip::apply(Some(clip), &mut g, &[&[0..1, 2..3]]);
        assert!((g[0] - 0.6).abs() < 1e-4 && (g[2] - 0.8).abs() < 1e-4);
    }

    #[test]
    fn no_clip_changes_nothing() {
        let mut g = vec![30.0, 40.0];
        let (before, _) = GradClip::apply(None, &mut g, &[]);
        assert_eq!(g, vec![30.0, 40.0]);
        assert!((before - 50.0).abs() < 1e-4);
    }
}
