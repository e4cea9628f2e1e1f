//! The actor-critic model PPO trains on the CPU: separate policy and value MLPs, a
//! categorical or diagonal-Gaussian head, all parameters in one flat vector with one Adam.
//! Observations holding images first go through an encoder the two networks share (a CNN
//! per image), as SB3's and CleanRL's CNN policies do.

use crate::actor_critic::{ActorCritic, Evaluation, Memory, NamedTensor, SampleRng, Sequences};
use crate::adam::Adam;
use crate::cnn::ImageTooSmall;
use crate::distribution::{
    categorical_eval, categorical_mode, categorical_sample, gaussian_entropy, gaussian_eval,
    gaussian_sample, sde_eval, sde_sample, standard_normals,
};
use crate::encoder::{ImageInput, SharedEncoder};
use crate::mlp::{Mlp, MlpCache};
use crate::network::{Head, NetworkConfig};
use crate::recurrent_core::CoreSide;
use crate::NnError;

/// Batches at least this large run the policy and value networks on two threads (when the
/// calling rayon pool has two); smaller ones are not worth the hand-off.
const PARALLEL_MIN_BATCH: usize = 64;

/// The policy network with its per-batch scratch space.
struct PolicySide {
    mlp: Mlp,
    head: Head,
    cache: MlpCache,
    /// Gradient w.r.t. the network's outputs.
    d_out: Vec<f32>,
    /// Actions of the last evaluated minibatch.
    actions: Vec<f32>,
    d_log_std_scratch: Vec<f32>,
    /// Whether the Gaussian head explores with gSDE (its latent width is the last hidden
    /// layer's, read off the cache).
    sde: bool,
}

/// The value network with its per-batch scratch space.
struct ValueSide {
    mlp: Mlp,
    cache: MlpCache,
}

/// The policy's parameters: the network's, and the Gaussian head's log-stds (empty for a
/// categorical head).
#[derive(Clone, Copy)]
struct PolicyParams<'a> {
    net: &'a [f32],
    log_std: &'a [f32],
}

/// Where the policy's gradients go: its network's, the Gaussian head's log-stds', and
/// (with an encoder in front) its input's.
struct PolicyGrads<'a> {
    net: &'a mut [f32],
    log_std: &'a mut [f32],
    input: Option<&'a mut Vec<f32>>,
}

impl PolicySide {
    /// Forward pass, then log-probs and entropies of `actions` (and a Gaussian's means).
    fn evaluate(
        &mut self,
        PolicyParams {
            net: params,
            log_std,
        }: PolicyParams<'_>,
        obs: &[f32],
        actions: &[f32],
        log_probs: &mut Vec<f32>,
        entropy: &mut Vec<f32>,
        means: &mut Vec<f32>,
    ) {
        let batch = obs.len() / self.mlp.input_size();
        means.clear();
        self.mlp.forward(params, obs, batch, &mut self.cache);
        self.actions.clear();
        self.actions.extend_from_slice(actions);
        let k = self.head.outputs();
        log_probs.resize(batch, 0.0);
        entropy.resize(batch, 0.0);
        self.d_out.resize(batch * k, 0.0);
        let outputs = self.cache.last_output();
        match self.head {
            Head::Categorical { .. } => {
                for i in 0..batch {
                    let row = i * k..(i + 1) * k;
                    let (lp, h) = categorical_eval(
                        &outputs[row.clone()],
                        actions[i] as usize,
                        0.0,
                        0.0,
                        &mut self.d_out[row],
                    );
                    log_probs[i] = lp;
                    entropy[i] = h;
                }
            }
            Head::Gaussian { dim } if self.sde => {
                means.extend_from_slice(&outputs[..batch * k]);
                let latent = self.cache.hidden_output();
                let width = latent.len() / batch;
                self.d_log_std_scratch.resize(log_std.len(), 0.0);
                let mut variance = vec![0.0; dim];
                for i in 0..batch {
                    let row = i * k..(i + 1) * k;
                    (log_probs[i], entropy[i]) = sde_eval(
                        &outputs[row.clone()],
                        &latent[i * width..(i + 1) * width],
                        log_std,
                        &actions[i * dim..(i + 1) * dim],
                        0.0,
                        0.0,
                        &mut self.d_out[row],
                        &mut self.d_log_std_scratch,
                        &mut variance,
                    );
                }
            }
            Head::Gaussian { dim } => {
                means.extend_from_slice(&outputs[..batch * k]);
                let h = gaussian_entropy(log_std);
                self.d_log_std_scratch.resize(dim, 0.0);
                for i in 0..batch {
                    let row = i * k..(i + 1) * k;
                    log_probs[i] = gaussian_eval(
                        &outputs[row.clone()],
                        log_std,
                        &actions[i * dim..(i + 1) * dim],
                        0.0,
                        0.0,
                        &mut self.d_out[row],
                        &mut self.d_log_std_scratch,
                    );
                    entropy[i] = h;
                }
            }
        }
    }

    /// Back-propagates per-sample gradients w.r.t. log-prob and entropy of the last
    /// evaluated minibatch into `grads`.
    fn backward(
        &mut self,
        PolicyParams {
            net: params,
            log_std,
        }: PolicyParams<'_>,
        d_log_probs: &[f32],
        d_entropy: &[f32],
        d_means: &[f32],
        PolicyGrads {
            net: grads,
            log_std: log_std_grads,
            input: grad_input,
        }: PolicyGrads<'_>,
    ) {
        let batch = d_log_probs.len();
        let k = self.head.outputs();
        self.d_out.resize(batch * k, 0.0);
        let outputs = self.cache.last_output();
        match self.head {
            Head::Categorical { .. } => {
                for i in 0..batch {
                    let row = i * k..(i + 1) * k;
                    categorical_eval(
                        &outputs[row.clone()],
                        self.actions[i] as usize,
                        d_log_probs[i],
                        d_entropy[i],
                        &mut self.d_out[row],
                    );
                }
            }
            Head::Gaussian { dim } if self.sde => {
                let latent = self.cache.hidden_output();
                let width = latent.len() / batch;
                let mut variance = vec![0.0; dim];
                for i in 0..batch {
                    let row = i * k..(i + 1) * k;
                    sde_eval(
                        &outputs[row.clone()],
                        &latent[i * width..(i + 1) * width],
                        log_std,
                        &self.actions[i * dim..(i + 1) * dim],
                        d_log_probs[i],
                        d_entropy[i],
                        &mut self.d_out[row.clone()],
                        log_std_grads,
                        &mut variance,
                    );
                    add_mean_gradients(&mut self.d_out[row.clone()], d_means, row);
                }
            }
            Head::Gaussian { dim } => {
                for i in 0..batch {
                    let row = i * k..(i + 1) * k;
                    gaussian_eval(
                        &outputs[row.clone()],
                        log_std,
                        &self.actions[i * dim..(i + 1) * dim],
                        d_log_probs[i],
                        d_entropy[i],
                        &mut self.d_out[row.clone()],
                        log_std_grads,
                    );
                    add_mean_gradients(&mut self.d_out[row.clone()], d_means, row);
                }
            }
        }
        match grad_input {
            Some(g) => self
                .mlp
                .backward_with_input(params, &mut self.cache, &self.d_out, grads, g),
            None => self
                .mlp
                .backward(params, &mut self.cache, &self.d_out, grads),
        }
    }
}

/// Adds a loss term's gradient w.r.t. the means (`d_means`, empty when there is none) to
/// one row's output gradient.
fn add_mean_gradients(d_out: &mut [f32], d_means: &[f32], row: std::ops::Range<usize>) {
    if !d_means.is_empty() {
        for (d, dm) in d_out.iter_mut().zip(&d_means[row]) {
            *d += dm;
        }
    }
}

impl ValueSide {
    fn forward(&mut self, params: &[f32], obs: &[f32], values: &mut Vec<f32>) {
        let batch = obs.len() / self.mlp.input_size();
        let v = self.mlp.forward(params, obs, batch, &mut self.cache);
        values.clear();
        values.extend_from_slice(v);
    }

    fn backward(
        &mut self,
        params: &[f32],
        d_values: &[f32],
        grads: &mut [f32],
        grad_input: Option<&mut Vec<f32>>,
    ) {
        match grad_input {
            Some(g) => self
                .mlp
                .backward_with_input(params, &mut self.cache, d_values, grads, g),
            None => self.mlp.backward(params, &mut self.cache, d_values, grads),
        }
    }
}

/// Runs `a` and `b`, on two threads when `parallel`.
fn join(parallel: bool, a: impl FnOnce() + Send, b: impl FnOnce() + Send) {
    if parallel {
        rayon::join(a, b);
    } else {
        a();
        b();
    }
}

/// [`ActorCritic`] over two [`Mlp`]s on the CPU, after a shared image encoder when the
/// observations hold images. Large batches (training minibatches) run the policy and value
/// networks side by side on the calling rayon pool's threads; the result is the same bit
/// for bit either way.
pub struct MlpActorCritic {
    obs_dim: usize,
    front: Front,
    policy: PolicySide,
    value: ValueSide,
    head: Head,
    /// `[policy | value | log_std | encoder | core]`.
    params: Vec<f32>,
    grads: Vec<f32>,
    adam: Adam,
    log_std_len: usize,
    /// Gradients w.r.t. what the policy and value networks read, when an encoder or a
    /// core is in front of them.
    d_policy_in: Vec<f32>,
    d_value_in: Vec<f32>,
}

/// What runs before the policy and value networks: the image encoder and the recurrent
/// core, each optional, with the core's state scratch.
struct Front {
    encoder: Option<SharedEncoder>,
    core: Option<CoreSide>,
    /// The rows' states before a step (copied from the caller's [`Memory`], or zeros).
    state_in: Vec<f32>,
    /// Episode-start flags of independent rows (all set).
    all_start: Vec<bool>,
}

/// How the core steps through a batch.
enum CoreRun<'a> {
    /// Each row alone, from a zero state.
    Rows,
    /// One step per row, advancing the caller's states.
    Step(Memory<'a>),
    /// Whole sequences from their stored states.
    Sequences(Sequences<'a>),
}

impl Front {
    /// Runs `obs` through the encoder and the core; returns what the policy and the value
    /// networks read.
    fn forward<'a>(
        &'a mut self,
        (encoder_params, core_params): (&[f32], &[f32]),
        obs: &'a [f32],
        rows: usize,
        run: CoreRun<'_>,
    ) -> (&'a [f32], &'a [f32]) {
        let Front {
            encoder,
            core,
            state_in,
            all_start,
        } = self;
        let input: &'a [f32] = match encoder {
            Some(e) => e.forward(encoder_params, obs, rows),
            None => obs,
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
                MlpActorCritic::parallel(rows),
            ),
        }
    }

    /// Back-propagates the gradients w.r.t. what the networks read through the core and
    /// the encoder of the last forward pass.
    fn backward(
        &mut self,
        (encoder_params, core_params): (&[f32], &[f32]),
        (encoder_grads, core_grads): (&mut [f32], &mut [f32]),
        d_policy: &mut [f32],
        d_value: &[f32],
    ) {
        let parallel = MlpActorCritic::parallel(d_value.len());
        let d_input: &[f32] = match &mut self.core {
            Some(core) => core.backward(core_params, d_policy, d_value, core_grads, parallel),
            None => {
                // Both networks read the same features: their gradients add.
                for (p, v) in d_policy.iter_mut().zip(d_value) {
                    *p += v;
                }
                d_policy
            }
        };
        if let Some(encoder) = &mut self.encoder {
            encoder.backward(encoder_params, d_input, encoder_grads);
        }
    }

    fn is_empty(&self) -> bool {
        self.encoder.is_none() && self.core.is_none()
    }
}

/// Where each block of parameters ends: `[policy | value | log_std | encoder | core]`.
#[derive(Clone, Copy)]
struct Split {
    policy: usize,
    value: usize,
    log_std: usize,
    encoder: usize,
}

impl MlpActorCritic {
    /// A freshly initialised model.
    pub fn new(obs_dim: usize, head: Head, config: &NetworkConfig, rng: &mut SampleRng) -> Self {
        Self::build(obs_dim, None, head, config, rng)
    }

    /// A freshly initialised model on observation rows of `obs_dim` values holding
    /// `images`: each image gets the CNN `config.encoder` picks, shared by the policy and
    /// value networks, whose hidden layers follow it; the row's other values join the
    /// CNNs' features as they are. Without images (or with `encoder = "mlp"`) this is
    /// [`MlpActorCritic::new`].
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
        let encoder = SharedEncoder::new(obs_dim, images, |shape| {
            config.encoder.arch_for(shape).expect("checked above")
        })?;
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
        let (hidden_gain, policy_gain, value_gain) = if config.ortho_init {
            (2f32.sqrt(), 0.01, 1.0)
        } else {
            (1.0, 1.0, 1.0)
        };
        let mut params = policy.init_orthogonal(hidden_gain, policy_gain, rng);
        params.extend(value.init_orthogonal(hidden_gain, value_gain, rng));
        let sde_len = config.sde_noise_len(input, head);
        if let Head::Gaussian { dim } = head {
            let n = if sde_len > 0 { sde_len } else { dim };
            params.extend(std::iter::repeat_n(config.log_std_init as f32, n));
        }
        let log_std_len = params.len() - policy.num_params() - value.num_params();
        if let Some(encoder) = &encoder {
            params.extend(encoder.init_orthogonal(rng));
        }
        if let Some(core) = &core {
            params.extend(core.init(config.ortho_init, rng));
        }
        let n = params.len();
        MlpActorCritic {
            obs_dim,
            front: Front {
                encoder,
                core,
                state_in: Vec::new(),
                all_start: Vec::new(),
            },
            policy: PolicySide {
                mlp: policy,
                head,
                cache: MlpCache::default(),
                d_out: Vec::new(),
                actions: Vec::new(),
                d_log_std_scratch: Vec::new(),
                sde: sde_len > 0,
            },
            value: ValueSide {
                mlp: value,
                cache: MlpCache::default(),
            },
            head,
            params,
            grads: vec![0.0; n],
            adam: Adam::new(n, 1e-5),
            log_std_len,
            d_policy_in: Vec::new(),
            d_value_in: Vec::new(),
        }
    }

    fn split(&self) -> Split {
        let policy = self.policy.mlp.num_params();
        let value = policy + self.value.mlp.num_params();
        let log_std = value + self.log_std_len;
        let encoder = log_std
            + self
                .front
                .encoder
                .as_ref()
                .map_or(0, SharedEncoder::num_params);
        Split {
            policy,
            value,
            log_std,
            encoder,
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
        if self.policy.sde {
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

    fn parallel(batch: usize) -> bool {
        batch >= PARALLEL_MIN_BATCH && rayon::current_num_threads() > 1
    }

    /// Current log-stds (empty for a categorical head).
    pub fn log_std(&self) -> &[f32] {
        let s = self.split();
        &self.params[s.value..s.log_std]
    }
}

impl MlpActorCritic {
    /// The training forward pass, the core stepping as `run` says.
    fn evaluate_with(
        &mut self,
        obs: &[f32],
        actions: &[f32],
        run: CoreRun<'_>,
        out: &mut Evaluation,
    ) {
        let batch = self.batch_of(obs);
        let split = self.split();
        let (policy_params, rest) = self.params.split_at(split.policy);
        let (value_params, rest) = rest.split_at(split.value - split.policy);
        let (log_std, front_params) = rest.split_at(split.log_std - split.value);
        let (policy_input, value_input) = self.front.forward(
            front_params.split_at(split.encoder - split.log_std),
            obs,
            batch,
            run,
        );
        let (policy, value) = (&mut self.policy, &mut self.value);
        let Evaluation {
            log_probs,
            entropy,
            values,
            means,
        } = out;
        join(
            Self::parallel(batch),
            || {
                policy.evaluate(
                    PolicyParams {
                        net: policy_params,
                        log_std,
                    },
                    policy_input,
                    actions,
                    log_probs,
                    entropy,
                    means,
                )
            },
            || value.forward(value_params, value_input, values),
        );
    }
}

impl Split {
    /// The encoder's and the core's parameters.
    fn front_params(self, params: &[f32]) -> (&[f32], &[f32]) {
        params[self.log_std..].split_at(self.encoder - self.log_std)
    }
}

impl ActorCritic for MlpActorCritic {
    fn obs_dim(&self) -> usize {
        self.obs_dim
    }

    fn head(&self) -> Head {
        self.head
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
        let split = self.split();
        let (policy_input, value_input) = self.front.forward(
            split.front_params(&self.params),
            obs,
            batch,
            CoreRun::Step(memory),
        );
        self.policy.mlp.forward(
            &self.params[..split.policy],
            policy_input,
            batch,
            &mut self.policy.cache,
        );
        let out = self.policy.cache.last_output();
        let k = self.head.outputs();
        let log_std = &self.params[split.value..split.log_std];
        let sde_len = log_std.len();
        let (mut eps, mut variance) = (Vec::new(), Vec::new());
        if let (true, Head::Gaussian { dim }) = (self.policy.sde, self.head) {
            eps.resize(sde_len, 0.0);
            variance.resize(dim, 0.0);
        }
        // One forward pass for all parts; each part samples from its own RNG, so its
        // actions do not depend on what else was in the batch.
        let mut row = 0;
        for (&len, rng) in parts.iter().zip(rngs.iter_mut()) {
            for i in row..row + len {
                let dist = &out[i * k..(i + 1) * k];
                match self.head {
                    Head::Gaussian { dim } if self.policy.sde => {
                        let latent = self.policy.cache.hidden_output();
                        let width = latent.len() / batch;
                        let matrix = if sde_noise.is_empty() {
                            standard_normals(&mut eps, rng);
                            &eps[..]
                        } else {
                            &sde_noise[i * sde_len..(i + 1) * sde_len]
                        };
                        log_probs[i] = sde_sample(
                            dist,
                            &latent[i * width..(i + 1) * width],
                            log_std,
                            matrix,
                            &mut actions[i * dim..(i + 1) * dim],
                            &mut variance,
                        );
                    }
                    Head::Categorical { .. } => {
                        let (a, lp) = categorical_sample(dist, rng);
                        actions[i] = a as f32;
                        log_probs[i] = lp;
                    }
                    Head::Gaussian { dim } => {
                        log_probs[i] = gaussian_sample(
                            dist,
                            log_std,
                            rng,
                            &mut actions[i * dim..(i + 1) * dim],
                        );
                    }
                }
            }
            row += len;
        }
        let v = self.value.mlp.forward(
            &self.params[split.policy..split.value],
            value_input,
            batch,
            &mut self.value.cache,
        );
        values[..batch].copy_from_slice(v);
    }

    fn act_greedy(&mut self, obs: &[f32], memory: Memory<'_>, actions: &mut [f32]) {
        let batch = self.batch_of(obs);
        let split = self.split();
        let (input, _) = self.front.forward(
            split.front_params(&self.params),
            obs,
            batch,
            CoreRun::Step(memory),
        );
        let out = self.policy.mlp.forward(
            &self.params[..split.policy],
            input,
            batch,
            &mut self.policy.cache,
        );
        match self.head {
            Head::Categorical { n } => {
                for (i, row) in out.chunks_exact(n).enumerate() {
                    actions[i] = categorical_mode(row) as f32;
                }
            }
            Head::Gaussian { .. } => actions[..out.len()].copy_from_slice(out),
        }
    }

    fn values(&mut self, obs: &[f32], memory: Memory<'_>, out: &mut [f32]) {
        let batch = self.batch_of(obs);
        let split = self.split();
        let (_, input) = self.front.forward(
            split.front_params(&self.params),
            obs,
            batch,
            CoreRun::Step(memory),
        );
        let v = self.value.mlp.forward(
            &self.params[split.policy..split.value],
            input,
            batch,
            &mut self.value.cache,
        );
        out[..batch].copy_from_slice(v);
    }

    fn evaluate(&mut self, obs: &[f32], actions: &[f32], out: &mut Evaluation) {
        self.evaluate_with(obs, actions, CoreRun::Rows, out);
    }

    fn evaluate_sequences(
        &mut self,
        obs: &[f32],
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
        let split = self.split();
        let (policy_params, rest) = self.params.split_at(split.policy);
        let (value_params, rest) = rest.split_at(split.value - split.policy);
        let (log_std, front_params) = rest.split_at(split.log_std - split.value);
        let (policy_grads, rest) = self.grads.split_at_mut(split.policy);
        let (value_grads, rest) = rest.split_at_mut(split.value - split.policy);
        let (log_std_grads, front_grads) = rest.split_at_mut(split.log_std - split.value);
        let (policy, value) = (&mut self.policy, &mut self.value);
        let (d_policy, d_value) = if self.front.is_empty() {
            (None, None)
        } else {
            (Some(&mut self.d_policy_in), Some(&mut self.d_value_in))
        };
        join(
            Self::parallel(d_log_probs.len()),
            || {
                policy.backward(
                    PolicyParams {
                        net: policy_params,
                        log_std,
                    },
                    d_log_probs,
                    d_entropy,
                    d_means,
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
            let at = split.encoder - split.log_std;
            let (encoder_params, core_params) = front_params.split_at(at);
            self.front.backward(
                (encoder_params, core_params),
                front_grads.split_at_mut(at),
                &mut self.d_policy_in,
                &self.d_value_in,
            );
        }
    }

    fn zero_grad(&mut self) {
        self.grads.fill(0.0);
    }

    fn optimizer_step(&mut self, lr: f32, max_grad_norm: Option<f32>) -> f32 {
        let norm = self.grads.iter().map(|g| g * g).sum::<f32>().sqrt();
        if let Some(max) = max_grad_norm {
            if norm > max {
                let scale = max / (norm + 1e-6);
                self.grads.iter_mut().for_each(|g| *g *= scale);
            }
        }
        self.adam.step(&mut self.params, &self.grads, lr);
        self.grads.fill(0.0);
        norm
    }

    fn tensors(&self) -> Vec<NamedTensor> {
        let mut out = Vec::new();
        let split = self.split();
        for (prefix, mlp, params) in [
            ("policy", &self.policy.mlp, &self.params[..split.policy]),
            (
                "value",
                &self.value.mlp,
                &self.params[split.policy..split.value],
            ),
        ] {
            let mut off = 0;
            for (l, w) in mlp.sizes().windows(2).enumerate() {
                let (fan_in, fan_out) = (w[0], w[1]);
                out.push(NamedTensor {
                    name: format!("{prefix}.{l}.weight"),
                    shape: vec![fan_in, fan_out],
                    data: params[off..off + fan_in * fan_out].to_vec(),
                });
                off += fan_in * fan_out;
                out.push(NamedTensor {
                    name: format!("{prefix}.{l}.bias"),
                    shape: vec![fan_out],
                    data: params[off..off + fan_out].to_vec(),
                });
                off += fan_out;
            }
        }
        if split.value < split.log_std {
            out.push(NamedTensor {
                name: "policy.log_std".into(),
                shape: vec![split.log_std - split.value],
                data: self.params[split.value..split.log_std].to_vec(),
            });
        }
        if let Some(encoder) = &self.front.encoder {
            out.extend(encoder.tensors(&self.params[split.log_std..split.encoder]));
        }
        if let Some(core) = &self.front.core {
            out.extend(core.tensors(&self.params[split.encoder..]));
        }
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
#[path = "mlp_actor_critic_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "mlp_actor_critic_core_tests.rs"]
mod core_tests;
