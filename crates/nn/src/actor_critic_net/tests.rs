//! Gradient and sampling checks of the CPU actor-critic.

use super::*;
use crate::encoder::ImageInput;
use crate::obs_batch::ObsBatch;
use rand::{Rng, SeedableRng};

/// A loss over a minibatch the model acted on: sum_i wl_i logp_i + we_i H_i + wv_i V_i,
/// with random weights.
struct LossProbe {
    obs: Vec<f32>,
    actions: Vec<f32>,
    wl: Vec<f32>,
    we: Vec<f32>,
    wv: Vec<f32>,
}

impl LossProbe {
    /// Acts on `obs` (sampling the actions), draws the weights, and checks that evaluating
    /// gives back the log-probs and values of acting; then back-propagates the loss and
    /// returns the analytic gradient.
    fn new(model: &mut ActorCriticNet, obs: Vec<f32>, rng: &mut SampleRng) -> (Self, Vec<f32>) {
        let batch = obs.len() / model.obs_dim();
        let (mut actions, mut lp, mut v) = (
            vec![0.0; batch * model.head().action_dim()],
            vec![0.0; batch],
            vec![0.0; batch],
        );
        model.act(
            &obs,
            Memory::none(),
            rng,
            &[],
            &mut actions,
            &mut lp,
            &mut v,
        );
        let mut weights =
            || -> Vec<f32> { (0..batch).map(|_| rng.random_range(-1.0..1.0)).collect() };
        let (wl, we, wv) = (weights(), weights(), weights());
        let probe = LossProbe {
            obs,
            actions,
            wl,
            we,
            wv,
        };
        let mut e = Evaluation::default();
        model.evaluate((&probe.obs).into(), &probe.actions, &mut e);
        for i in 0..batch {
            assert!((e.log_probs[i] - lp[i]).abs() < 1e-4);
            assert!((e.values[i] - v[i]).abs() < 1e-5);
        }
        model.zero_grad();
        model.backward(&probe.wl, &probe.we, &probe.wv, &[]);
        let analytic = model.grads.clone();
        (probe, analytic)
    }

    fn loss(&self, model: &mut ActorCriticNet) -> f64 {
        let mut e = Evaluation::default();
        model.evaluate((&self.obs).into(), &self.actions, &mut e);
        (0..self.wl.len())
            .map(|i| {
                f64::from(
                    self.wl[i] * e.log_probs[i]
                        + self.we[i] * e.entropy[i]
                        + self.wv[i] * e.values[i],
                )
            })
            .sum()
    }

    /// The loss's central finite difference in parameter `i`.
    fn numeric(&self, model: &mut ActorCriticNet, i: usize) -> f64 {
        let orig = model.params[i];
        model.params[i] = orig + 1e-2;
        let up = self.loss(model);
        model.params[i] = orig - 1e-2;
        let down = self.loss(model);
        model.params[i] = orig;
        (up - down) / 2e-2
    }
}

/// Loss = sum_i wl_i logp_i + we_i H_i + wv_i V_i, checked against finite differences
/// of every parameter, through the whole model.
/// With gSDE the latent features are constants of the log-prob's variance (as SB3
/// has it), so the policy's hidden layers are not compared: their finite differences
/// include the path through the features, which the analytic gradient leaves out.
fn check_model_gradients(head: Head, sde: bool) {
    let mut rng = SampleRng::seed_from_u64(4);
    let config = NetworkConfig {
        policy_hidden: vec![6],
        value_hidden: vec![5],
        log_std_init: -0.4,
        sde,
        ..NetworkConfig::default()
    };
    let mut model = ActorCriticNet::new(3, head, &config, &mut rng);
    // Larger head gains than PPO's init, so every gradient is well above f32 noise.
    for p in model.params.iter_mut() {
        *p += rng.random_range(-0.3..0.3);
    }
    let obs: Vec<f32> = (0..5 * 3).map(|_| rng.random_range(-1.0..1.0)).collect();
    let (probe, analytic) = LossProbe::new(&mut model, obs, &mut rng);
    let policy_hidden = if sde { 3 * 6 + 6 } else { 0 };
    for (i, expected) in analytic.iter().enumerate().skip(policy_hidden) {
        let numeric = probe.numeric(&mut model, i);
        assert!(
            (numeric - f64::from(*expected)).abs() <= 3e-3 + 3e-2 * numeric.abs(),
            "param {i}: numeric {numeric} analytic {expected}"
        );
    }
}

#[test]
fn categorical_model_gradients_match_finite_differences() {
    check_model_gradients(Head::Categorical { n: 3 }, false);
}

#[test]
fn gaussian_model_gradients_match_finite_differences() {
    check_model_gradients(Head::Gaussian { dim: 2 }, false);
}

#[test]
fn sde_model_gradients_match_finite_differences() {
    check_model_gradients(Head::Gaussian { dim: 2 }, true);
}

#[test]
fn sde_noise_held_fixed_gives_actions_linear_in_the_features() {
    let mut rng = SampleRng::seed_from_u64(9);
    let config = NetworkConfig {
        policy_hidden: vec![4],
        sde: true,
        log_std_init: -1.0,
        ..NetworkConfig::default()
    };
    let head = Head::Gaussian { dim: 1 };
    let mut model = ActorCriticNet::new(2, head, &config, &mut rng);
    assert_eq!(config.sde_noise_len(2, head), 4);
    assert_eq!(model.log_std().len(), 4);
    // The same observation and exploration matrix give the same action; a fresh
    // matrix per call (empty noise) does not.
    let obs = [0.3_f32, -0.7];
    let noise = [0.5_f32, -1.0, 2.0, 0.1];
    let act = |m: &mut ActorCriticNet, noise: &[f32], rng: &mut SampleRng| {
        let (mut a, mut lp, mut v) = ([0.0], [0.0], [0.0]);
        m.act(&obs, Memory::none(), rng, noise, &mut a, &mut lp, &mut v);
        a[0]
    };
    let first = act(&mut model, &noise, &mut rng);
    assert_eq!(first, act(&mut model, &noise, &mut rng));
    assert_ne!(
        act(&mut model, &[], &mut rng),
        act(&mut model, &[], &mut rng)
    );
    let mut greedy = [0.0];
    model.act_greedy(&obs, Memory::none(), &mut greedy);
    assert!(
        (first - greedy[0]).abs() > 1e-6,
        "the noise moved the action"
    );
}

#[test]
fn tensors_round_trip_and_bad_shapes_are_named() {
    let mut rng = SampleRng::seed_from_u64(1);
    let config = NetworkConfig::default();
    let mut a = ActorCriticNet::new(3, Head::Gaussian { dim: 1 }, &config, &mut rng);
    a.grads.fill(0.1);
    a.optimizer_step(1e-3, Some(GradClip::global(0.5)));
    let mut b = ActorCriticNet::new(3, Head::Gaussian { dim: 1 }, &config, &mut rng);
    assert_ne!(a.flat_params(), b.flat_params());
    b.load_tensors(&a.tensors()).unwrap();
    assert_eq!(a.flat_params(), b.flat_params());
    assert_eq!(a.adam, b.adam);
    let mut bad = a.tensors();
    bad[0].shape = vec![4, 64];
    let err = b.load_tensors(&bad).unwrap_err();
    assert!(err.to_string().contains("policy.0.weight"), "{err}");
    let missing: Vec<_> = a
        .tensors()
        .into_iter()
        .filter(|t| t.name != "adam.v")
        .collect();
    assert_eq!(
        b.load_tensors(&missing).unwrap_err(),
        NnError::MissingTensor("adam.v".into())
    );
}

#[test]
fn split_acting_equals_acting_on_each_part_with_its_rng() {
    for sde in [false, true] {
        let mut rng = SampleRng::seed_from_u64(9);
        let head = Head::Gaussian { dim: 2 };
        let config = NetworkConfig {
            sde,
            ..NetworkConfig::default()
        };
        let mut m = ActorCriticNet::new(3, head, &config, &mut rng);
        let obs: Vec<f32> = (0..15).map(|i| (i as f32 * 0.37).sin()).collect();
        let per_row = config.sde_noise_len(3, head);
        let noise: Vec<f32> = (0..5 * per_row).map(|i| (i as f32 * 0.11).cos()).collect();
        let mut rngs = [SampleRng::seed_from_u64(1), SampleRng::seed_from_u64(2)];
        let (mut a, mut lp, mut v) = (vec![0.0; 10], vec![0.0; 5], vec![0.0; 5]);
        m.act_split(
            &obs,
            &[2, 3],
            Memory::none(),
            &mut rngs,
            &noise,
            &mut a,
            &mut lp,
            &mut v,
        );
        let (mut r1, mut r2) = (SampleRng::seed_from_u64(1), SampleRng::seed_from_u64(2));
        let (mut a1, mut lp1, mut v1) = (vec![0.0; 4], vec![0.0; 2], vec![0.0; 2]);
        let (n1, n2) = noise.split_at(2 * per_row);
        m.act(
            &obs[..6],
            Memory::none(),
            &mut r1,
            n1,
            &mut a1,
            &mut lp1,
            &mut v1,
        );
        let (mut a2, mut lp2, mut v2) = (vec![0.0; 6], vec![0.0; 3], vec![0.0; 3]);
        m.act(
            &obs[6..],
            Memory::none(),
            &mut r2,
            n2,
            &mut a2,
            &mut lp2,
            &mut v2,
        );
        assert_eq!(&a[..4], &a1[..], "sde {sde}");
        assert_eq!(&a[4..], &a2[..], "sde {sde}");
        assert_eq!(&lp[..2], &lp1[..], "sde {sde}");
        assert_eq!(&v[2..], &v2[..], "sde {sde}");
        assert_eq!(rngs[0], r1, "each RNG advanced by its own part only");
    }
}

#[test]
fn ppo_initialisation_gives_near_uniform_policy() {
    let mut rng = SampleRng::seed_from_u64(2);
    let mut m = ActorCriticNet::new(
        4,
        Head::Categorical { n: 2 },
        &NetworkConfig::default(),
        &mut rng,
    );
    let obs = [0.5_f32, -0.2, 0.1, 0.3];
    let mut e = Evaluation::default();
    m.evaluate(ObsBatch::Floats(&obs), &[1.0], &mut e);
    // A 0.01-gain head makes the logits tiny: entropy close to ln 2.
    assert!((e.entropy[0] - 2f32.ln()).abs() < 1e-3);
}

/// A row of `[2 values | 6x5x2 byte image | 1 value | 5x5x1 image in [0, 1]]`.
pub(super) fn mixed_images() -> (usize, Vec<ImageInput>) {
    use crate::conv::ImageShape;
    use crate::encoder::PixelScale;
    let shape = |height, width, channels| ImageShape {
        height,
        width,
        channels,
    };
    let images = vec![
        ImageInput {
            offset: 2,
            shape: shape(6, 5, 2),
            scale: PixelScale::Byte,
        },
        ImageInput {
            offset: 63,
            shape: shape(5, 5, 1),
            scale: PixelScale::Unit,
        },
    ];
    (88, images)
}

pub(super) fn mixed_rows(
    rng: &mut SampleRng,
    images: &[ImageInput],
    obs_dim: usize,
    batch: usize,
) -> Vec<f32> {
    let mut obs: Vec<f32> = (0..batch * obs_dim)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    for row in obs.chunks_exact_mut(obs_dim) {
        for image in images {
            for v in &mut row[image.offset..image.offset + image.shape.len()] {
                *v = match image.scale {
                    crate::encoder::PixelScale::Byte => f32::from(rng.random_range(0u8..=255)),
                    crate::encoder::PixelScale::Unit => rng.random_range(0.0..1.0),
                };
            }
        }
    }
    obs
}

#[test]
fn image_model_gradients_match_finite_differences() {
    let (obs_dim, images) = mixed_images();
    let mut rng = SampleRng::seed_from_u64(6);
    let config = NetworkConfig {
        policy_hidden: vec![],
        value_hidden: vec![7],
        ..NetworkConfig::default()
    };
    let head = Head::Categorical { n: 3 };
    let mut model = ActorCriticNet::with_images(obs_dim, &images, head, &config, &mut rng).unwrap();
    assert_eq!(model.obs_dim(), obs_dim);
    assert_eq!(
        model.encoders(),
        ["minatar_cnn on 6x5x2", "minatar_cnn on 5x5x1"]
    );
    for p in model.params.iter_mut() {
        *p += rng.random_range(-0.05..0.05);
    }
    let obs = mixed_rows(&mut rng, &images, obs_dim, 3);
    let (probe, analytic) = LossProbe::new(&mut model, obs, &mut rng);
    let encoder_start = model.spans.encoder.start;
    // Every head parameter, and a spread of the encoders' (a probe whose interval crosses
    // a ReLU kink disagrees; a few may).
    let probes: Vec<usize> = (0..encoder_start)
        .chain((encoder_start..analytic.len()).step_by(7))
        .collect();
    let (mut agree, mut encoder_agree) = (0, 0);
    for &i in &probes {
        let numeric = probe.numeric(&mut model, i);
        if (numeric - f64::from(analytic[i])).abs() <= 3e-3 + 3e-2 * numeric.abs() {
            agree += 1;
            encoder_agree += usize::from(i >= encoder_start && analytic[i].abs() > 1e-3);
        }
    }
    assert!(
        agree * 100 >= probes.len() * 97,
        "{agree} of {} probes agree",
        probes.len()
    );
    assert!(
        encoder_agree > 500,
        "only {encoder_agree} non-zero encoder gradients checked"
    );
}

#[test]
fn byte_images_are_scaled_and_image_models_round_trip() {
    use crate::encoder::PixelScale;
    let (obs_dim, images) = mixed_images();
    let config = NetworkConfig::default();
    let head = Head::Gaussian { dim: 2 };
    let mut rng = SampleRng::seed_from_u64(3);
    let mut bytes = ActorCriticNet::with_images(obs_dim, &images, head, &config, &mut rng).unwrap();
    // The same model reading the byte image as values already divided by 255.
    let unit: Vec<ImageInput> = images
        .iter()
        .map(|i| ImageInput {
            scale: PixelScale::Unit,
            ..*i
        })
        .collect();
    let mut scaled = ActorCriticNet::with_images(obs_dim, &unit, head, &config, &mut rng).unwrap();
    scaled.load_tensors(&bytes.tensors()).unwrap();
    let obs = mixed_rows(&mut rng, &images, obs_dim, 4);
    let mut divided = obs.clone();
    for row in divided.chunks_exact_mut(obs_dim) {
        for v in &mut row[2..62] {
            *v /= 255.0;
        }
    }
    let (mut a, mut b) = (vec![0.0; 8], vec![0.0; 8]);
    bytes.act_greedy(&obs, Memory::none(), &mut a);
    scaled.act_greedy(&divided, Memory::none(), &mut b);
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() < 1e-5, "{a:?} vs {b:?}");
    }
    // Checkpoint names, and a model of another encoder refuses them by name.
    let names: Vec<String> = bytes.tensors().into_iter().map(|t| t.name).collect();
    assert!(
        names.contains(&"encoder.1.fc.weight".to_string()),
        "{names:?}"
    );
    let nature = NetworkConfig {
        encoder: crate::network::Encoder::Mlp,
        ..NetworkConfig::default()
    };
    let mut flat = ActorCriticNet::with_images(obs_dim, &images, head, &nature, &mut rng).unwrap();
    assert!(flat.encoders().is_empty());
    let err = flat.load_tensors(&bytes.tensors()).unwrap_err();
    assert!(err.to_string().contains("policy.0.weight"), "{err}");
}

#[test]
fn an_image_too_small_for_its_encoder_is_refused_by_name() {
    let (obs_dim, images) = mixed_images();
    let config = NetworkConfig {
        encoder: crate::network::Encoder::NatureCnn,
        ..NetworkConfig::default()
    };
    let mut rng = SampleRng::seed_from_u64(3);
    let err = ActorCriticNet::with_images(
        obs_dim,
        &images,
        Head::Categorical { n: 2 },
        &config,
        &mut rng,
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("6x5"), "{err}");
}

#[test]
fn the_encoder_follows_ortho_init_as_sb3_does() {
    let (obs_dim, images) = mixed_images();
    let head = Head::Categorical { n: 3 };
    let build = |ortho_init| {
        let config = NetworkConfig {
            encoder: crate::network::Encoder::MinatarCnn,
            ortho_init,
            ..NetworkConfig::default()
        };
        let mut rng = SampleRng::seed_from_u64(11);
        ActorCriticNet::with_images(obs_dim, &images, head, &config, &mut rng).unwrap()
    };
    let (orthogonal, uniform) = (build(true), build(false));
    let slots = |model: &ActorCriticNet| -> Vec<(String, Vec<f32>)> {
        let params = model.flat_params();
        (model.layout().slots().iter())
            .filter(|s| s.name.starts_with("encoder.0."))
            .map(|s| (s.name.clone(), params[s.range.clone()].to_vec()))
            .collect()
    };
    for ((name, ortho), (_, torch)) in slots(&orthogonal).iter().zip(&slots(&uniform)) {
        if name.ends_with(".bias") {
            // Orthogonal init zeroes biases; PyTorch's default draws them.
            assert!(ortho.iter().all(|b| *b == 0.0), "{name}");
            assert!(
                torch.iter().filter(|b| **b != 0.0).count() > torch.len() / 2,
                "{name}"
            );
        }
    }
    // PyTorch's bound: 1 / sqrt(fan_in), weights and biases alike.
    let conv0 = uniform
        .layout()
        .slots()
        .iter()
        .find(|s| s.name == "encoder.0.conv0.weight")
        .unwrap();
    let bound = 1.0 / (conv0.shape[1] as f32).sqrt();
    let weights = &uniform.flat_params()[conv0.range.clone()];
    assert!(weights.iter().all(|w| w.abs() <= bound));
    assert!(weights.iter().any(|w| w.abs() > 0.8 * bound));
}

#[test]
fn per_network_clipping_keeps_the_policy_step_apart_from_the_value_gradient() {
    // A value gradient ten thousand times the policy's, as on unnormalised returns.
    let step = |per_network: bool| {
        let mut rng = SampleRng::seed_from_u64(4);
        let config = NetworkConfig::default();
        let mut model = ActorCriticNet::new(3, Head::Gaussian { dim: 1 }, &config, &mut rng);
        let before = model.flat_params().to_vec();
        let spans = model.spans.clone();
        model.grads[spans.policy.clone()].fill(1e-3);
        model.grads[spans.log_std.clone()].fill(1e-3);
        model.grads[spans.value.clone()].fill(10.0);
        let clip = GradClip {
            max_norm: 0.5,
            per_network,
        };
        let norm = model.optimizer_step(1e-3, Some(clip)).global;
        let after = model.flat_params().to_vec();
        let moved = |r: Range<usize>| -> f32 {
            let n = r.len() as f32;
            r.map(|i| (after[i] - before[i]).abs()).sum::<f32>() / n
        };
        (norm, moved(spans.policy.clone()))
    };
    let (global_norm, global_move) = step(false);
    let (per_norm, per_move) = step(true);
    assert_eq!(
        global_norm, per_norm,
        "the norm reported is the global one either way"
    );
    // Globally clipped, the policy's gradient shrinks with the value's to below Adam's
    // epsilon, and its step with it; per network it keeps a full step of about lr.
    assert!(per_move > 5.0 * global_move, "{per_move} vs {global_move}");
    assert!((per_move - 1e-3).abs() < 2e-4, "{per_move}");
}

#[test]
fn per_network_clip_groups_cover_every_parameter_once_with_each_core_on_its_side() {
    for shared in [false, true] {
        let mut rng = SampleRng::seed_from_u64(5);
        let config = NetworkConfig {
            core: crate::network::Core::Lstm,
            core_size: 8,
            core_shared: shared,
            ..NetworkConfig::default()
        };
        let model = ActorCriticNet::new(3, Head::Gaussian { dim: 1 }, &config, &mut rng);
        let s = &model.spans;
        let mut owner = vec![None; model.params.len()];
        for (g, group) in s.clip_groups.iter().enumerate() {
            for i in group.iter().flat_map(|r| r.clone()) {
                assert_eq!(owner[i], None, "parameter {i} in two groups");
                owner[i] = Some(g);
            }
        }
        assert!(
            owner.iter().all(Option::is_some),
            "every parameter in a group"
        );
        let core_groups: Vec<_> = s.core.clone().map(|i| owner[i].unwrap()).collect();
        if shared {
            assert!(
                core_groups.iter().all(|&g| g == 3),
                "a shared core is its own group"
            );
        } else {
            // The actor's stack comes first, then the critic's: policy side, value side.
            let half = core_groups.len() / 2;
            assert!(core_groups[..half].iter().all(|&g| g == 0));
            assert!(core_groups[half..].iter().all(|&g| g == 1));
        }
    }
}
