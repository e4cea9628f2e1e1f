//! What runs before the policy and value networks: the image encoder, then the recurrent
//! core, each optional (Sample Factory's encoder and core, before its decoders).

use super::parallel;
use crate::actor_critic::{Memory, Sequences};
use crate::branches::add_branch_gradient;
use crate::encoder::SharedEncoder;
use crate::obs_batch::ObsBatch;
use crate::recurrent_core::CoreSide;

/// The encoder and the core, with the core's state scratch.
pub(super) struct Front {
    pub(super) encoder: Option<SharedEncoder>,
    pub(super) core: Option<CoreSide>,
    /// Split rows made floats, for networks without an encoder.
    floats: Vec<f32>,
    /// The rows' states before a step (copied from the caller's [`Memory`], or zeros).
    state_in: Vec<f32>,
    /// Episode-start flags of independent rows (all set).
    all_start: Vec<bool>,
}

/// How the core steps through a batch.
pub(super) enum CoreRun<'a> {
    /// Each row alone, from a zero state.
    Rows,
    /// One step per row, advancing the caller's states.
    Step(Memory<'a>),
    /// Whole sequences from their stored states.
    Sequences(Sequences<'a>),
}

impl Front {
    /// `encoder` then `core`.
    pub(super) fn new(encoder: Option<SharedEncoder>, core: Option<CoreSide>) -> Self {
        Front {
            encoder,
            core,
            floats: Vec::new(),
            state_in: Vec::new(),
            all_start: Vec::new(),
        }
    }

    /// Runs `obs` through the encoder and the core; returns what the policy and the value
    /// networks read.
    pub(super) fn forward<'a>(
        &'a mut self,
        (encoder_params, core_params): (&[f32], &[f32]),
        obs: ObsBatch<'a>,
        rows: usize,
        run: CoreRun<'_>,
    ) -> (&'a [f32], &'a [f32]) {
        let Front {
            encoder,
            core,
            floats,
            state_in,
            all_start,
        } = self;
        let input: &'a [f32] = match encoder {
            Some(e) => e.forward(encoder_params, obs, rows),
            None => obs.floats(floats),
        };
        let Some(core) = core else {
            return (input, input);
        };
        let width = core.state_len();
        match run {
            CoreRun::Rows => {
                state_in.clear();
                state_in.resize(rows * width, 0.0);
                all_start.clear();
                all_start.resize(rows, true);
                core.forward(core_params, input, all_start, (state_in, None), 1, false)
            }
            CoreRun::Step(Memory { state, starts }) => {
                assert_eq!(
                    (state.len(), starts.len()),
                    (rows * width, rows),
                    "a recurrent model acts with each row's state and episode-start flag"
                );
                state_in.clear();
                state_in.extend_from_slice(state);
                core.forward(
                    core_params,
                    input,
                    starts,
                    (state_in, Some(state)),
                    1,
                    false,
                )
            }
            CoreRun::Sequences(seq) => core.forward(
                core_params,
                input,
                seq.starts,
                (seq.state0, None),
                seq.steps,
                parallel(rows),
            ),
        }
    }

    /// Back-propagates the gradients w.r.t. what the networks read through the core and
    /// the encoder of the last forward pass.
    pub(super) fn backward(
        &mut self,
        (encoder_params, core_params): (&[f32], &[f32]),
        (encoder_grads, core_grads): (&mut [f32], &mut [f32]),
        d_policy: &mut [f32],
        d_value: &[f32],
    ) {
        let d_input: &[f32] = match &mut self.core {
            Some(core) => {
                let parallel = parallel(d_value.len());
                core.backward(core_params, d_policy, d_value, core_grads, parallel)
            }
            None => {
                // Both networks read the same features.
                add_branch_gradient(d_policy, d_value);
                d_policy
            }
        };
        if let Some(encoder) = &mut self.encoder {
            encoder.backward(encoder_params, d_input, encoder_grads);
        }
    }

    /// Whether nothing runs before the networks.
    pub(super) fn is_empty(&self) -> bool {
        self.encoder.is_none() && self.core.is_none()
    }
}
