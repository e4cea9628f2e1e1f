//! A saved model stays loadable and means the same policy: for every kind of model
//! (categorical, Gaussian, gSDE, recurrent cores, CNN encoders), a fixed-seed model after
//! one training step must name, shape and fill its tensors exactly as the fixture recorded,
//! and act (sampled and greedy) and value exactly as it did. The fixture was written by the
//! code before the model was restructured into encoder, core and heads; a checkpoint of that
//! code therefore loads into today's model and predicts the same actions.
//!
//! The fingerprints are of the values' bits, so they hold for one kernel path: x86-64's
//! fused multiply-add paths (avx2, avx512, avx512-bf16, amx) give the same bits on these
//! small models and share `model_compat.json`; the portable path, without FMA, has its own
//! (`model_compat.portable.json`, the same on x86-64 and aarch64), and so has aarch64's
//! NEON path (`model_compat.neon.json`, recorded under QEMU with its host's cache sizes,
//! which size `gemm`'s blocks: an ARM CPU with other caches may need it recorded again).
//!
//! `STRATA_WRITE_FIXTURES=1 cargo test -p strata-nn --test model_compat` rewrites the
//! current path's (only when a change of layout or numbers is meant;
//! `STRATA_KERNEL_PATH=portable` for the portable one).

use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use strata_nn::{
    ActorCritic, ActorCriticNet, Core, Encoder, Evaluation, Head, ImageInput, ImageShape, Memory,
    NetworkConfig, PixelScale, SampleRng,
};

/// The fixture of the current kernel path.
fn fixture() -> &'static str {
    match strata_nn::kernel_path() {
        strata_nn::KernelPath::Portable => concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/model_compat.portable.json"
        ),
        strata_nn::KernelPath::Neon => concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/model_compat.neon.json"
        ),
        _ => concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/model_compat.json"
        ),
    }
}
const ROWS: usize = 6;

/// One kind of model: its name, observation width, images, head and network settings.
struct Kind {
    name: &'static str,
    obs_dim: usize,
    images: Vec<ImageInput>,
    head: Head,
    config: NetworkConfig,
}

fn kinds() -> Vec<Kind> {
    let small = NetworkConfig {
        policy_hidden: vec![8, 8],
        value_hidden: vec![8],
        log_std_init: -0.3,
        ..NetworkConfig::default()
    };
    let image = ImageInput {
        offset: 2,
        shape: ImageShape {
            height: 6,
            width: 5,
            channels: 2,
        },
        scale: PixelScale::Unit,
    };
    let cnn = NetworkConfig {
        encoder: Encoder::MinatarCnn,
        ..small.clone()
    };
    vec![
        Kind {
            name: "categorical",
            obs_dim: 4,
            images: vec![],
            head: Head::Categorical { n: 3 },
            config: small.clone(),
        },
        Kind {
            name: "gaussian",
            obs_dim: 3,
            images: vec![],
            head: Head::Gaussian { dim: 2 },
            config: small.clone(),
        },
        Kind {
            name: "gsde",
            obs_dim: 3,
            images: vec![],
            head: Head::Gaussian { dim: 2 },
            config: NetworkConfig {
                sde: true,
                ..small.clone()
            },
        },
        Kind {
            name: "lstm",
            obs_dim: 4,
            images: vec![],
            head: Head::Categorical { n: 2 },
            config: NetworkConfig {
                core: Core::Lstm,
                core_size: 5,
                ..small.clone()
            },
        },
        Kind {
            name: "gru-shared-2-layers",
            obs_dim: 3,
            images: vec![],
            head: Head::Gaussian { dim: 1 },
            config: NetworkConfig {
                core: Core::Gru,
                core_size: 4,
                core_layers: 2,
                core_shared: true,
                ..small.clone()
            },
        },
        Kind {
            name: "cnn",
            obs_dim: 2 + image.shape.len() + 1,
            images: vec![image],
            head: Head::Categorical { n: 4 },
            config: cnn.clone(),
        },
        Kind {
            name: "cnn-lstm-gaussian",
            obs_dim: 2 + image.shape.len() + 1,
            images: vec![image],
            head: Head::Gaussian { dim: 2 },
            config: NetworkConfig {
                core: Core::Lstm,
                core_size: 3,
                ..cnn
            },
        },
    ]
}

/// FNV-1a over the values' bits: equal only when every value is bit-identical.
fn fingerprint(values: &[f32]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for v in values {
        for b in v.to_bits().to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

/// The model of `kind` from a fixed seed after one training step, and what it records.
fn record(kind: &Kind) -> Value {
    let mut rng = SampleRng::seed_from_u64(7);
    let mut model = ActorCriticNet::with_images(
        kind.obs_dim,
        &kind.images,
        kind.head,
        &kind.config,
        &mut rng,
    )
    .unwrap();
    let obs: Vec<f32> = (0..ROWS * kind.obs_dim)
        .map(|_| rng.random_range(0.0..1.0))
        .collect();
    let (state_len, action_dim) = (model.state_len(), kind.head.action_dim());
    let fresh_memory = |state: &mut Vec<f32>| state.resize(ROWS * state_len, 0.0);
    let mut state = Vec::new();
    fresh_memory(&mut state);
    let starts = vec![state_len > 0; if state_len > 0 { ROWS } else { 0 }];

    // Act once, train once on what was sampled, act again.
    let mut actions = vec![0.0; ROWS * action_dim];
    let (mut log_probs, mut values) = (vec![0.0; ROWS], vec![0.0; ROWS]);
    let noise = vec![0.0; 0];
    model.act(
        &obs,
        Memory {
            state: &mut state,
            starts: &starts,
        },
        &mut rng,
        &noise,
        &mut actions,
        &mut log_probs,
        &mut values,
    );
    let mut eval = Evaluation::default();
    model.evaluate((&obs).into(), &actions, &mut eval);
    let d: Vec<f32> = (0..ROWS).map(|i| 0.1 * (i as f32 - 2.5)).collect();
    let d_means = vec![0.0; eval.means.len()];
    model.backward(&d, &d, &d, &d_means);
    model.optimizer_step(3e-3, Some(strata_nn::GradClip::global(0.5)));

    fresh_memory(&mut state);
    let mut sampled = vec![0.0; ROWS * action_dim];
    model.act(
        &obs,
        Memory {
            state: &mut state,
            starts: &starts,
        },
        &mut rng,
        &noise,
        &mut sampled,
        &mut log_probs,
        &mut values,
    );
    fresh_memory(&mut state);
    let mut greedy = vec![0.0; ROWS * action_dim];
    model.act_greedy(
        &obs,
        Memory {
            state: &mut state,
            starts: &starts,
        },
        &mut greedy,
    );
    let tensors: Vec<Value> = model
        .tensors()
        .iter()
        .map(|t| json!({"name": t.name, "shape": t.shape, "data": fingerprint(&t.data)}))
        .collect();
    json!({
        "tensors": tensors,
        "evaluation": {
            "log_probs": fingerprint(&eval.log_probs),
            "entropy": fingerprint(&eval.entropy),
            "values": fingerprint(&eval.values),
            "means": fingerprint(&eval.means),
        },
        "sampled": fingerprint(&sampled),
        "log_probs": fingerprint(&log_probs),
        "values": fingerprint(&values),
        "greedy": fingerprint(&greedy),
        "params": fingerprint(model.flat_params()),
    })
}

#[test]
fn every_kind_of_model_names_fills_and_acts_as_the_fixture_recorded() {
    let now: serde_json::Map<String, Value> = kinds()
        .iter()
        .map(|k| (k.name.to_string(), record(k)))
        .collect();
    let now = Value::Object(now);
    if std::env::var_os("STRATA_WRITE_FIXTURES").is_some() {
        std::fs::write(
            fixture(),
            serde_json::to_string_pretty(&now).unwrap() + "\n",
        )
        .unwrap();
        return;
    }
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(fixture()).unwrap()).unwrap();
    for kind in kinds() {
        assert_eq!(
            now[kind.name], saved[kind.name],
            "model `{}` no longer names, fills or acts as the fixture recorded",
            kind.name
        );
    }
}

#[test]
fn tensors_saved_by_one_model_load_into_a_fresh_one_and_act_the_same() {
    for kind in kinds() {
        let build = |seed| {
            let mut rng = SampleRng::seed_from_u64(seed);
            ActorCriticNet::with_images(
                kind.obs_dim,
                &kind.images,
                kind.head,
                &kind.config,
                &mut rng,
            )
            .unwrap()
        };
        let (mut saved, mut fresh) = (build(1), build(2));
        assert_ne!(saved.flat_params(), fresh.flat_params(), "{}", kind.name);
        fresh.load_tensors(&saved.tensors()).unwrap();
        assert_eq!(saved.flat_params(), fresh.flat_params(), "{}", kind.name);
        let mut rng = SampleRng::seed_from_u64(3);
        let obs: Vec<f32> = (0..ROWS * kind.obs_dim)
            .map(|_| rng.random_range(0.0..1.0))
            .collect();
        let act = |model: &mut ActorCriticNet| {
            let mut state = vec![0.0; ROWS * model.state_len()];
            let mut out = vec![0.0; ROWS * kind.head.action_dim()];
            let starts = vec![true; if state.is_empty() { 0 } else { ROWS }];
            model.act_greedy(
                &obs,
                Memory {
                    state: &mut state,
                    starts: &starts,
                },
                &mut out,
            );
            out
        };
        assert_eq!(act(&mut saved), act(&mut fresh), "{}", kind.name);
    }
}
