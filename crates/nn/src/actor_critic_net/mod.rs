//! The actor-critic model PPO trains on the CPU, composed as Sample Factory composes its
//! models: an optional encoder (a CNN per image) and an optional recurrent core in front
//! ([`front`]), then the policy network ending in its head and the value network
//! ([`sides`]); all parameters in one flat vector laid out by one [`ParamBlocks`], with
//! one Adam.

mod front;
mod sides;

use std::ops::Range;

use crate::actor_critic::{ActorCritic, Evaluation, Memory, NamedTensor, SampleRng, Sequences};
use crate::adam::Adam;
use crate::branches::join;
use crate::cnn::ImageTooSmall;
use crate::encoder::{ImageInput, SharedEncoder};
use crate::grad_clip::{GradClip, GradNorms};
use crate::head::{Head, PolicyHead};
use crate::mlp::Mlp;
use crate::network::NetworkConfig;
use crate::obs_batch::ObsBatch;
use crate::params::{cut, cut_mut, ParamBlocks};
use crate::recurrent_core::CoreSide;
use crate::NnError;
use front::{CoreRun, Front};
use sides::{PolicyGrads, PolicyParams, PolicySide, ValueSide};

/// Batches at least this large run the policy and value networks on two threads (when the
/// calling rayon pool has two); smaller ones are not worth the hand-off.
const PARALLEL_MIN_BATCH: usize = 64;

/// Whether a batch of `rows` runs its two branches side by side.
fn parallel(rows: usize) -> bool {
    rows >= PARALLEL_MIN_BATCH && rayon::current_num_threads() > 1
}

/// [`ActorCritic`] on the CPU: encoder → core → policy and value networks. Large batches
/// (training minibatches) run the policy and value networks side by side on the calling
/// rayon pool's threads; the result is the same bit for bit either way.
pub struct ActorCriticNet {
    obs_dim: usize,
    front: Front,
    policy: PolicySide,
    value: ValueSide,
    /// Names, shapes and places of every tensor: `policy.*`, `value.*`,
    /// `policy.log_std`, `encoder.*`, `core.*`.
    layout: ParamBlocks,
    spans: Spans,
    params: Vec<f32>,
    grads: Vec<f32>,
    adam: Adam,
    /// Gradients w.r.t. what the policy and value networks read, when an encoder or a
    /// core is in front of them.
    d_policy_in: Vec<f32>,
    d_value_in: Vec<f32>,
}

/// Where each part's parameters lie, in parameter order (absent parts empty).
#[derive(Clone, Debug)]
struct Spans {
    policy: Range<usize>,
    value: Range<usize>,
    log_std: Range<usize>,
    encoder: Range<usize>,
    core: Range<usize>,
    /// What [`GradClip::per_network`] clips together: the policy's side (its network,
    /// log-std and, when not shared, its core), the value's, and the shared encoder and
    /// shared core each on its own.
    clip_groups: [Vec<Range<usize>>; 4],
}

impl Spans {
    fn all(&self) -> [Range<usize>; 5] {
        [
            self.policy.clone(),
            self.value.clone(),
            self.log_std.clone(),
            self.encoder.clone(),
            self.core.clone(),
        ]
    }
}

/// The groups [`Spans::clip_groups`] describes, from the parts' spans (policy, value,
/// log-std, encoder, core) and, when actor and critic have their own cores, where each
/// lies within the core's span.
fn clip_groups(
    [policy, value, log_std, encoder, core]: [&Range<usize>; 5],
    own_cores: Option<[Range<usize>; 2]>,
) -> [Vec<Range<usize>>; 4] {
    let shift = |r: &Range<usize>| core.start + r.start..core.start + r.end;
    match own_cores {
        Some([actor, critic]) => [
            vec![policy.clone(), log_std.clone(), shift(&actor)],
            vec![value.clone(), shift(&critic)],
            vec![encoder.clone()],
            Vec::new(),
        ],
        None => [
            vec![policy.clone(), log_std.clone()],
            vec![value.clone()],
            vec![encoder.clone()],
            vec![core.clone()],
        ],
    }
}

impl ActorCriticNet {
    /// A freshly initialised model.
    pub fn new(obs_dim: usize, head: Head, config: &NetworkConfig, rng: &mut SampleRng) -> Self {
        Self::build(obs_dim, None, head, config, rng)
    }

    /// A freshly initialised model on observation rows of `obs_dim` values holding
    /// `images`: each image gets the CNN `config.encoder` picks, shared by the policy and
    /// value networks, whose hidden layers follow it; the row's other values join the
    /// CNNs' features as they are. Without images (or with `encoder = "mlp"`) this is
    /// [`ActorCriticNet::new`].
    ///
    /// # Errors
    /// [`ImageTooSmall`] when an image is too small for its CNN.
    pub fn with_images(
        obs_dim: usize,
        images: &[ImageInput],
        head: Head,
        config: &NetworkConfig,
        rng: &mut SampleRng,
    ) -> Result<Self, ImageTooSmall> {
        let mut archs = images.iter().map(|i| config.encoder.arch_for(i.shape));
        if images.is_empty() || archs.any(|a| a.is_none()) {
            return Ok(Self::new(obs_dim, head, config, rng));
        }
        let encoder = SharedEncoder::new(
            obs_dim,
            images,
            |shape| config.encoder.arch_for(shape).expect("checked above"),
            config.conv_precision,
        )?;
        Ok(Self::build(obs_dim, Some(encoder), head, config, rng))
    }

    fn build(
        obs_dim: usize,
        encoder: Option<SharedEncoder>,
        head: Head,
        config: &NetworkConfig,
        rng: &mut SampleRng,
    ) -> Self {
        let features = encoder.as_ref().map_or(obs_dim, SharedEncoder::features);
        let core = CoreSide::new(config, features);
        let input = core.as_ref().map_or(features, CoreSide::output);
        let sizes = |hidden: &[usize], out: usize| {
            let mut s = vec![input];
            s.extend_from_slice(hidden);
            s.push(out);
            s
        };
        let policy = Mlp::new(
            &sizes(&config.policy_hidden, head.outputs()),
            config.activation,
        );
        let value = Mlp::new(&sizes(&config.value_hidden, 1), config.activation);
        let head = PolicyHead::new(head, config.sde);
        let log_std_len = head
            .kind()
            .log_std_len(head.sde(), config.latent_width(input));

        let mut layout = ParamBlocks::new();
        let policy_span = layout.push_blocks("policy", policy.layout());
        let value_span = layout.push_blocks("value", value.layout());
        let log_std_span = match log_std_len {
            0 => layout.len()..layout.len(),
            n => layout.push("policy.log_std", &[n]),
        };
        let mut optional = |prefix: &str, blocks: Option<&ParamBlocks>| match blocks {
            Some(b) => layout.push_blocks(prefix, b),
            None => layout.len()..layout.len(),
        };
        let encoder_span = optional("encoder", encoder.as_ref().map(SharedEncoder::layout));
        let core_span = optional("core", core.as_ref().map(CoreSide::layout));

        // Initialised in parameter order, each part from the one RNG.
        let (hidden_gain, policy_gain, value_gain) = if config.ortho_init {
            (2f32.sqrt(), 0.01, 1.0)
        } else {
            (1.0, 1.0, 1.0)
        };
        let mut params = policy.init_orthogonal(hidden_gain, policy_gain, rng);
        params.extend(value.init_orthogonal(hidden_gain, value_gain, rng));
        params.extend(std::iter::repeat_n(config.log_std_init as f32, log_std_len));
        if let Some(encoder) = &encoder {
            params.extend(encoder.init(config.ortho_init, rng));
        }
        if let Some(core) = &core {
            params.extend(core.init(config.ortho_init, rng));
        }
        assert_eq!(params.len(), layout.len(), "every parameter initialised");
        let n = params.len();
        let clip_groups = clip_groups(
            [
                &policy_span,
                &value_span,
                &log_std_span,
                &encoder_span,
                &core_span,
            ],
            core.as_ref().and_then(CoreSide::own_spans),
        );
        ActorCriticNet {
            obs_dim,
            front: Front::new(encoder, core),
            policy: PolicySide::new(policy, head),
            value: ValueSide::new(value),
            layout,
            spans: Spans {
                clip_groups,
                policy: policy_span,
                value: value_span,
                log_std: log_std_span,
                encoder: encoder_span,
                core: core_span,
            },
            params,
            grads: vec![0.0; n],
            adam: Adam::new(n, 1e-5),
            d_policy_in: Vec::new(),
            d_value_in: Vec::new(),
        }
    }

    fn batch_of(&self, obs: &[f32]) -> usize {
        assert!(
            obs.len().is_multiple_of(self.obs_dim),
            "observation batch length"
        );
        obs.len() / self.obs_dim
    }

    /// Standard normals in one row's gSDE exploration matrix (0 without gSDE).
    pub fn sde_noise_len(&self) -> usize {
        if self.policy.head.sde() {
            self.log_std().len()
        } else {
            0
        }
    }

    /// What encodes each image, for people (`nature_cnn on 84x84x4`); empty without an
    /// encoder.
    pub fn encoders(&self) -> Vec<String> {
        self.front
            .encoder
            .as_ref()
            .map_or_else(Vec::new, SharedEncoder::describe)
    }

    /// The recurrent core for people (`lstm 64x1 (policy), lstm 64x1 (value)`), or `None`.
    pub fn core(&self) -> Option<String> {
        self.front.core.as_ref().map(CoreSide::describe)
    }

    /// Current log-stds (empty for a categorical head).
    pub fn log_std(&self) -> &[f32] {
        &self.params[self.spans.log_std.clone()]
    }

    /// Where every tensor lies in [`ActorCritic::flat_params`], and its name.
    pub fn layout(&self) -> &ParamBlocks {
        &self.layout
    }

    /// The training forward pass, the core stepping as `run` says.
    fn evaluate_with(
        &mut self,
        obs: ObsBatch<'_>,
        actions: &[f32],
        run: CoreRun<'_>,
        out: &mut Evaluation,
    ) {
        let batch = obs.rows(self.obs_dim);
        let [policy_params, value_params, log_std, encoder_params, core_params] =
            cut(&self.params, self.spans.all());
        let (policy_input, value_input) =
            self.front
                .forward((encoder_params, core_params), obs, batch, run);
        let (policy, value) = (&mut self.policy, &mut self.value);
        let Evaluation {
            log_probs,
            entropy,
            values,
            means,
        } = out;
        let policy_params = PolicyParams {
            net: policy_params,
            log_std,
        };
        join(
            parallel(batch),
            || {
                policy.evaluate(
                    policy_params,
                    policy_input,
                    actions,
                    (log_probs, entropy, means),
                )
            },
            || {
                let v = value.forward(value_params, value_input);
                values.clear();
                values.extend_from_slice(v);
            },
        );
    }
}

impl ActorCritic for ActorCriticNet {
    fn obs_dim(&self) -> usize {
        self.obs_dim
    }

    fn head(&self) -> Head {
        self.policy.head.kind()
    }

    fn state_len(&self) -> usize {
        self.front.core.as_ref().map_or(0, CoreSide::state_len)
    }

    fn act(
        &mut self,
        obs: &[f32],
        memory: Memory<'_>,
        rng: &mut SampleRng,
        sde_noise: &[f32],
        actions: &mut [f32],
        log_probs: &mut [f32],
        values: &mut [f32],
    ) {
        let batch = self.batch_of(obs);
        self.act_split(
            obs,
            &[batch],
            memory,
            std::slice::from_mut(rng),
            sde_noise,
            actions,
            log_probs,
            values,
        );
    }

    fn act_split(
        &mut self,
        obs: &[f32],
        parts: &[usize],
        memory: Memory<'_>,
        rngs: &mut [SampleRng],
        sde_noise: &[f32],
        actions: &mut [f32],
        log_probs: &mut [f32],
        values: &mut [f32],
    ) {
        let batch = self.batch_of(obs);
        assert_eq!(
            parts.iter().sum::<usize>(),
            batch,
            "parts must cover the batch"
        );
        assert_eq!(parts.len(), rngs.len(), "one RNG per part");
        let [policy_params, value_params, log_std, encoder_params, core_params] =
            cut(&self.params, self.spans.all());
        let (policy_input, value_input) = self.front.forward(
            (encoder_params, core_params),
            ObsBatch::Floats(obs),
            batch,
            CoreRun::Step(memory),
        );
        // One forward pass for all parts; each part samples from its own RNG.
        self.policy.sample(
            PolicyParams {
                net: policy_params,
                log_std,
            },
            policy_input,
            (parts, rngs),
            sde_noise,
            (actions, log_probs),
        );
        let v = self.value.forward(value_params, value_input);
        values[..batch].copy_from_slice(v);
    }

    fn act_greedy(&mut self, obs: &[f32], memory: Memory<'_>, actions: &mut [f32]) {
        let batch = self.batch_of(obs);
        let [policy_params, _, _, encoder_params, core_params] =
            cut(&self.params, self.spans.all());
        let (input, _) = self.front.forward(
            (encoder_params, core_params),
            ObsBatch::Floats(obs),
            batch,
            CoreRun::Step(memory),
        );
        self.policy.greedy(policy_params, input, actions);
    }

    fn values(&mut self, obs: &[f32], memory: Memory<'_>, out: &mut [f32]) {
        let batch = self.batch_of(obs);
        let [_, value_params, _, encoder_params, core_params] = cut(&self.params, self.spans.all());
        let (_, input) = self.front.forward(
            (encoder_params, core_params),
            ObsBatch::Floats(obs),
            batch,
            CoreRun::Step(memory),
        );
        let v = self.value.forward(value_params, input);
        out[..batch].copy_from_slice(v);
    }

    fn evaluate(&mut self, obs: ObsBatch<'_>, actions: &[f32], out: &mut Evaluation) {
        self.evaluate_with(obs, actions, CoreRun::Rows, out);
    }

    fn evaluate_sequences(
        &mut self,
        obs: ObsBatch<'_>,
        actions: &[f32],
        sequences: Sequences<'_>,
        out: &mut Evaluation,
    ) {
        self.evaluate_with(obs, actions, CoreRun::Sequences(sequences), out);
    }

    fn backward(
        &mut self,
        d_log_probs: &[f32],
        d_entropy: &[f32],
        d_values: &[f32],
        d_means: &[f32],
    ) {
        let spans = self.spans.all();
        let [policy_params, value_params, log_std, encoder_params, core_params] =
            cut(&self.params, spans.clone());
        let [policy_grads, value_grads, log_std_grads, encoder_grads, core_grads] =
            cut_mut(&mut self.grads, spans);
        let (policy, value) = (&mut self.policy, &mut self.value);
        let (d_policy, d_value) = if self.front.is_empty() {
            (None, None)
        } else {
            (Some(&mut self.d_policy_in), Some(&mut self.d_value_in))
        };
        join(
            parallel(d_log_probs.len()),
            || {
                policy.backward(
                    PolicyParams {
                        net: policy_params,
                        log_std,
                    },
                    (d_log_probs, d_entropy, d_means),
                    PolicyGrads {
                        net: policy_grads,
                        log_std: log_std_grads,
                        input: d_policy,
                    },
                )
            },
            || value.backward(value_params, d_values, value_grads, d_value),
        );
        if !self.front.is_empty() {
            self.front.backward(
                (encoder_params, core_params),
                (encoder_grads, core_grads),
                &mut self.d_policy_in,
                &self.d_value_in,
            );
        }
    }

    fn zero_grad(&mut self) {
        self.grads.fill(0.0);
    }

    fn optimizer_step(&mut self, lr: f32, clip: Option<GradClip>) -> GradNorms {
        let [a, b, c, d] = &self.spans.clip_groups;
        // The shared encoder's and core's norms are needed only to clip them apart; a CNN
        // encoder is most of an image model's parameters, so a global clip skips them.
        let (global, policy, value) = if clip.is_some_and(|c| c.per_network) {
            let (global, [p, v, _, _]) = GradClip::apply(clip, &mut self.grads, &[a, b, c, d]);
            (global, p, v)
        } else {
            let (global, [p, v]) = GradClip::apply(clip, &mut self.grads, &[a, b]);
            (global, p, v)
        };
        self.adam.step(&mut self.params, &self.grads, lr);
        self.grads.fill(0.0);
        GradNorms {
            global,
            policy,
            value,
        }
    }

    fn tensors(&self) -> Vec<NamedTensor> {
        let mut out = self.layout.tensors(&self.params);
        let n = self.params.len();
        out.push(NamedTensor {
            name: "adam.m".into(),
            shape: vec![n],
            data: self.adam.m.clone(),
        });
        out.push(NamedTensor {
            name: "adam.v".into(),
            shape: vec![n],
            data: self.adam.v.clone(),
        });
        out.push(NamedTensor {
            name: "adam.t".into(),
            shape: vec![1],
            data: vec![self.adam.t as f32],
        });
        out
    }

    fn load_tensors(&mut self, tensors: &[NamedTensor]) -> Result<(), NnError> {
        let expected = self.tensors();
        let mut flat = Vec::with_capacity(self.params.len());
        let mut adam = self.adam.clone();
        for want in &expected {
            let got = tensors
                .iter()
                .find(|t| t.name == want.name)
                .ok_or_else(|| NnError::MissingTensor(want.name.clone()))?;
            if got.shape != want.shape || got.data.len() != want.data.len() {
                return Err(NnError::ShapeMismatch {
                    name: want.name.clone(),
                    expected: want.shape.clone(),
                    found: got.shape.clone(),
                });
            }
            if let Some(i) = got.data.iter().position(|v| !v.is_finite()) {
                return Err(NnError::NonFinite {
                    name: want.name.clone(),
                    index: i,
                });
            }
            match want.name.as_str() {
                "adam.m" => adam.m.clone_from(&got.data),
                "adam.v" => adam.v.clone_from(&got.data),
                "adam.t" => adam.t = got.data[0] as u64,
                _ => flat.extend_from_slice(&got.data),
            }
        }
        self.params = flat;
        self.adam = adam;
        self.grads.fill(0.0);
        Ok(())
    }

    fn flat_params(&self) -> &[f32] {
        &self.params
    }

    fn set_flat_params(&mut self, params: &[f32]) -> Result<(), NnError> {
        if params.len() != self.params.len() {
            return Err(NnError::ParamCount {
                expected: self.params.len(),
                found: params.len(),
            });
        }
        if let Some(index) = params.iter().position(|v| !v.is_finite()) {
            return Err(NnError::NonFinite {
                name: "flat parameters".into(),
                index,
            });
        }
        self.params.copy_from_slice(params);
        Ok(())
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod core_tests;

#[cfg(test)]
mod split_rows_tests;
