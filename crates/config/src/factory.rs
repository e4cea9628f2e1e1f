//! Building what a run config describes: its envs (wrappers included), a freshly
//! initialised model, the PPO learner, the initial normalisation statistics and the gSDE
//! matrix size. The trainer, the workers, central inference, checkpoints and the gateway
//! all build through here, so a config means the same thing everywhere. A `gym:` env is
//! described by Python once ([`resolve_env`]) and runs in worker processes
//! ([`strata_env::gym`]).

use std::time::Duration;

use rand::SeedableRng;
use strata_algo::Ppo;
use strata_env::gym::{
    default_python, describe, spin_budget, GymLayout, GymOptions, GymTarget, GymVecEnv, ImageScale,
};
use strata_env::{
    make_vec_env_with_latency, EnvSpec, InjectFault, NormalizeObservation, NormalizerStats,
    RunningMeanStd, ScaleReward, StepCost, Stream, VecEnv,
};
use strata_nn::{
    ActorCritic, ActorCriticNet, ConvPrecision, Head, ImageInput, ImageShape, PixelScale, SampleRng,
};

use crate::{ConfigError, RunConfig};

/// How long describing a `gym:` env may take (starting Python, importing the simulator,
/// making one env).
const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(120);

/// The Gymnasium target a `gym:` config runs, with its interpreter.
fn gym_target(config: &RunConfig, id: &str) -> GymTarget {
    let kwargs = serde_json::to_value(&config.env.gym.kwargs)
        .ok()
        .and_then(|v| v.as_object().cloned())
        .unwrap_or_default();
    GymTarget {
        id: id.to_string(),
        kwargs,
        python: config.runtime.python.clone().unwrap_or_else(default_python),
        python_path: config.runtime.python_path.clone(),
        wrappers: config.env.gym.wrappers.clone(),
    }
}

/// Asks Python what a `gym:` config's env looks like (cached per process).
fn describe_gym(config: &RunConfig, id: &str) -> Result<GymLayout, ConfigError> {
    describe(&gym_target(config, id), DESCRIBE_TIMEOUT).map_err(|source| ConfigError::GymEnv {
        env: config.env.name.clone(),
        source,
    })
}

/// A `gym:` config's layout: the recorded one, else Python's description of the env.
fn gym_layout(config: &RunConfig, id: &str) -> Result<GymLayout, ConfigError> {
    match &config.env.gym.layout {
        Some(layout) => Ok(layout.clone()),
        None => describe_gym(config, id),
    }
}

/// Fills in a `gym:` env's layout (`env.gym.layout`) from the env itself, or checks that
/// a recorded one still matches it; built-in envs are left as they are.
///
/// # Errors
/// [`ConfigError::GymEnv`] when Python cannot make the env, [`ConfigError::Config`]
/// when the env's layout differs from the recorded one.
pub fn resolve_env(config: &mut RunConfig) -> Result<(), ConfigError> {
    let Some(id) = config.env.gym_target().map(str::to_string) else {
        if config.network.conv_precision == ConvPrecision::F32 {
            return Ok(());
        }
        let images = !strata_env::spec_for(&config.env.name)?
            .image_ranges()
            .is_empty();
        return check_conv_precision(config, images);
    };
    let found = describe_gym(config, &id)?;
    match &config.env.gym.layout {
        Some(recorded) if *recorded != found => Err(ConfigError::Config(format!(
            "env `{}` no longer has the recorded layout: the config says {recorded:?}, the env \
             is {found:?} (its package changed?); start a new run",
            config.env.name
        ))),
        _ => {
            let images = !found.images.is_empty();
            config.env.gym.layout = Some(found);
            if images && config.env.normalize_obs && !config.network.encoder.is_flat() {
                return Err(ConfigError::Config(format!(
                    "env.normalize_obs: env `{}` observes images, which its CNN scales \
                     itself (bytes by 1/255); normalising them too would feed it \
                     standardised values it reads as pixels. Set env.normalize_obs = false \
                     (or network.encoder = \"mlp\" to feed the raw values to an MLP)",
                    config.env.name
                )));
            }
            check_conv_precision(config, images)
        }
    }
}

/// Refuses bfloat16 convolutions for a model that has none: they would change nothing,
/// and the config would say otherwise.
fn check_conv_precision(config: &RunConfig, images: bool) -> Result<(), ConfigError> {
    if config.network.conv_precision == ConvPrecision::F32
        || (images && !config.network.encoder.is_flat())
    {
        return Ok(());
    }
    Err(ConfigError::Config(format!(
        "network.conv_precision = \"{}\": the model of env `{}` has no convolutions ({}); \
         leave it out",
        config.network.conv_precision.name(),
        config.env.name,
        if images {
            "network.encoder = \"mlp\" feeds its images to an MLP"
        } else {
            "it observes no images"
        }
    )))
}

/// The spec of a config's env: a built-in's, or a `gym:` env's from its recorded layout
/// (else from Python).
///
/// # Errors
/// [`ConfigError::Env`] for an unknown built-in env, [`ConfigError::GymEnv`] when Python
/// cannot describe a `gym:` env.
pub fn env_spec(config: &RunConfig) -> Result<EnvSpec, ConfigError> {
    match config.env.gym_target() {
        None => Ok(strata_env::spec_for(&config.env.name)?),
        Some(id) => Ok(gym_layout(config, id)?.spec(&config.env.name)),
    }
}

/// The bare vectorised env (no wrappers): built-in, or `gym:` envs in worker processes
/// (`fault` injected inside Python).
fn build_base_envs(
    config: &RunConfig,
    num_envs: usize,
    fault: Option<&strata_env::FaultPlan>,
) -> Result<Box<dyn VecEnv>, ConfigError> {
    build_base_envs_recording(config, num_envs, fault, None)
}

/// As [`build_base_envs`]; a `gym:` env made with `render_mode="rgb_array"` and its first
/// process appending env 0's pictures to `record` when given.
fn build_base_envs_recording(
    config: &RunConfig,
    num_envs: usize,
    fault: Option<&strata_env::FaultPlan>,
    record: Option<&std::path::Path>,
) -> Result<Box<dyn VecEnv>, ConfigError> {
    let Some(id) = config.env.gym_target() else {
        let mut envs =
            make_vec_env_with_latency(&config.env.name, num_envs, config.env.action_latency_ticks)?;
        if let Some(plan) = fault {
            envs = Box::new(InjectFault::new(envs, plan.clone()));
        }
        return Ok(envs);
    };
    let layout = gym_layout(config, id)?;
    let per = envs_per_process(config, num_envs);
    // Every worker's processes (one vector per env group), the workers and the learner
    // compete for the cores.
    let workers = config.runtime.workers.max(1);
    let vectors = workers * config.groups_per_worker().max(1);
    let busy = vectors * num_envs.div_ceil(per.max(1)) + workers + 1;
    let options = GymOptions {
        envs_per_process: per,
        spin: Some(spin_budget(busy)),
        step_timeout: Duration::from_secs_f64(config.runtime.restart_after_secs),
        fault: fault.cloned(),
        record: record.map(std::path::Path::to_path_buf),
        ..GymOptions::default()
    };
    let mut target = gym_target(config, id);
    if record.is_some() {
        target
            .kwargs
            .insert("render_mode".into(), "rgb_array".into());
    }
    let envs = GymVecEnv::start(&config.env.name, &target, &layout, num_envs, &options)?;
    Ok(Box::new(envs))
}

/// Envs per Python process for a vector of `num_envs`: the configured number, or by
/// default an even split over the cores each worker has (at least one env a process).
fn envs_per_process(config: &RunConfig, num_envs: usize) -> usize {
    if config.runtime.envs_per_process > 0 {
        return config.runtime.envs_per_process;
    }
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let processes = (cores / config.runtime.workers.max(1)).clamp(1, num_envs.max(1));
    num_envs.div_ceil(processes)
}

/// Builds the vectorised env a config asks for (`num_envs` of them), wrappers included;
/// the configured fault only when `with_fault`.
///
/// # Errors
/// [`ConfigError::Env`] for an unknown env or a `gym:` env whose processes cannot start.
pub fn build_envs(
    config: &RunConfig,
    num_envs: usize,
    with_fault: bool,
) -> Result<Box<dyn VecEnv>, ConfigError> {
    let fault = config.env.fault.as_ref().filter(|_| with_fault);
    let mut envs = build_base_envs(config, num_envs, fault)?;
    if config.env.step_cost_us > 0 {
        envs = Box::new(StepCost::new(envs, config.env.step_cost_us));
    }
    if config.env.normalize_obs {
        envs = Box::new(NormalizeObservation::new(envs));
    }
    if config.env.normalize_reward {
        envs = Box::new(ScaleReward::new(envs, config.ppo.gamma));
    }
    Ok(envs)
}

/// The envs an evaluation runs: the bare env, with observations normalised by the frozen
/// statistics `normalizer` when the config normalises (rewards stay raw).
///
/// # Errors
/// As [`build_envs`]; [`ConfigError::Config`] when normalisation statistics are missing.
pub fn build_eval_envs(
    config: &RunConfig,
    num_envs: usize,
    normalizer: &NormalizerStats,
) -> Result<Box<dyn VecEnv>, ConfigError> {
    build_eval_envs_recording(config, num_envs, normalizer, None)
}

/// As [`build_eval_envs`], keeping env 0's pictures ([`VecEnv::take_frames`]) when
/// `record` names the file a `gym:` env's process writes them to.
///
/// # Errors
/// As [`build_eval_envs`]; [`strata_env::EnvError::NoPictures`] for an env that does not
/// draw itself.
pub fn build_eval_envs_recording(
    config: &RunConfig,
    num_envs: usize,
    normalizer: &NormalizerStats,
    record: Option<&std::path::Path>,
) -> Result<Box<dyn VecEnv>, ConfigError> {
    let mut envs = build_base_envs_recording(config, num_envs, None, record)?;
    if record.is_some() {
        envs.record()?;
    }
    if config.env.normalize_obs {
        let rms = normalizer.obs.clone().ok_or_else(|| {
            ConfigError::Config("checkpoint lacks observation-normalisation statistics".into())
        })?;
        envs = Box::new(NormalizeObservation::frozen(envs, rms)?);
    }
    Ok(envs)
}

/// Builds a freshly initialised model for a config: with a CNN per image when the
/// observations hold images (`network.encoder`).
///
/// # Errors
/// [`ConfigError::Env`] for an unknown env, [`ConfigError::Config`] for an image too
/// small for the configured encoder.
pub fn build_model(config: &RunConfig) -> Result<Box<dyn ActorCritic>, ConfigError> {
    Ok(Box::new(build_mlp_model(config)?))
}

fn build_mlp_model(config: &RunConfig) -> Result<ActorCriticNet, ConfigError> {
    let spec = env_spec(config)?;
    let head = head_for(&spec);
    let mut rng = SampleRng::seed_from_u64(Stream::ModelInit.seed(config.train.seed));
    ActorCriticNet::with_images(
        spec.obs_dim(),
        &image_inputs(config),
        head,
        &config.network,
        &mut rng,
    )
    .map_err(|e| ConfigError::Config(format!("network.encoder: {e}")))
}

/// The images in a config's observations, where the model finds them (none for built-in
/// envs, and none before a `gym:` env's layout is resolved).
pub fn image_inputs(config: &RunConfig) -> Vec<ImageInput> {
    let Some(layout) = &config.env.gym.layout else {
        return Vec::new();
    };
    layout
        .images
        .iter()
        .map(|image| ImageInput {
            offset: image.offset,
            shape: ImageShape {
                height: image.height,
                width: image.width,
                channels: image.channels,
            },
            scale: match image.scale {
                ImageScale::Byte => PixelScale::Byte,
                ImageScale::Unit => PixelScale::Unit,
            },
        })
        .collect()
}

/// What encodes a config's images, for people (`nature_cnn on 84x84x4`, one per image);
/// empty when the observations have no images or `network.encoder` is `mlp`.
///
/// # Errors
/// As [`build_model`].
pub fn describe_encoders(config: &RunConfig) -> Result<Vec<String>, ConfigError> {
    if image_inputs(config).is_empty() {
        return Ok(Vec::new());
    }
    Ok(build_mlp_model(config)?.encoders())
}

/// The action head for an env's action space.
fn head_for(spec: &strata_env::EnvSpec) -> Head {
    match spec.action_space {
        strata_env::Space::Discrete { n } => Head::Categorical { n },
        strata_env::Space::Box { ref low, .. } => Head::Gaussian { dim: low.len() },
    }
}

/// Standard normals in one env's gSDE exploration matrix under a config (0 without gSDE).
///
/// # Errors
/// [`ConfigError::Env`] for an unknown env.
pub fn sde_noise_len(config: &RunConfig) -> Result<usize, ConfigError> {
    if !config.network.sde {
        return Ok(0);
    }
    // The model knows what its policy network reads (the encoder's features, with images).
    Ok(build_mlp_model(config)?.sde_noise_len())
}

/// The PPO learner for a config: its shuffling seed from the run seed, and the env's action
/// bounds for the bounds loss of a Gaussian policy.
///
/// # Errors
/// [`ConfigError::Env`] for an unknown env.
pub fn build_ppo(config: &RunConfig) -> Result<Ppo, ConfigError> {
    let spec = env_spec(config)?;
    let ppo = Ppo::new(
        config.ppo.clone(),
        Stream::Minibatches.seed(config.train.seed),
    );
    Ok(match spec.action_space {
        strata_env::Space::Box { low, high } => ppo.with_action_bounds(low, high),
        strata_env::Space::Discrete { .. } => ppo,
    })
}

/// The initial normalisation statistics for a config (mean 0, variance 1).
pub fn initial_normalizer(config: &RunConfig, obs_dim: usize) -> NormalizerStats {
    NormalizerStats {
        obs: config
            .env
            .normalize_obs
            .then(|| RunningMeanStd::new(obs_dim)),
        returns: config.env.normalize_reward.then(|| RunningMeanStd::new(1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_convolutions_without_images_are_refused_by_name() {
        let mut config = crate::preset("cartpole").unwrap();
        resolve_env(&mut config).unwrap();
        config.network.conv_precision = ConvPrecision::Bf16;
        let error = resolve_env(&mut config).unwrap_err().to_string();
        assert!(
            error.contains("network.conv_precision") && error.contains("no images"),
            "{error}"
        );
    }
}
