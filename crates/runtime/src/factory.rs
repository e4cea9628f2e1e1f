//! Building what a run config describes: its envs (wrappers included), a freshly
//! initialised model, the PPO learner, the initial normalisation statistics and the gSDE
//! matrix size. The trainer, the workers, central inference, checkpoints and the gateway
//! all build through here, so a config means the same thing everywhere.

use rand::SeedableRng;
use strata_algo::Ppo;
use strata_env::{
    derive_seed, make_vec_env_with_latency, InjectFault, NormalizeObservation, NormalizerStats,
    RunningMeanStd, ScaleReward, StepCost, VecEnv,
};
use strata_nn::{ActorCritic, Head, MlpActorCritic, SampleRng};

use crate::{RunConfig, RuntimeError};

/// Builds the vectorised env a config asks for (`num_envs` of them), wrappers included;
/// the configured fault only when `with_fault`.
///
/// # Errors
/// [`RuntimeError::Env`] for an unknown env.
pub fn build_envs(
    config: &RunConfig,
    num_envs: usize,
    with_fault: bool,
) -> Result<Box<dyn VecEnv>, RuntimeError> {
    let mut envs =
        make_vec_env_with_latency(&config.env.name, num_envs, config.env.action_latency_ticks)?;
    if config.env.step_cost_us > 0 {
        envs = Box::new(StepCost::new(envs, config.env.step_cost_us));
    }
    if let (true, Some(plan)) = (with_fault, &config.env.fault) {
        envs = Box::new(InjectFault::new(envs, plan.clone()));
    }
    if config.env.normalize_obs {
        envs = Box::new(NormalizeObservation::new(envs));
    }
    if config.env.normalize_reward {
        envs = Box::new(ScaleReward::new(envs, config.ppo.gamma));
    }
    Ok(envs)
}

/// Builds a freshly initialised model for a config.
///
/// # Errors
/// [`RuntimeError::Env`] for an unknown env.
pub fn build_model(config: &RunConfig) -> Result<Box<dyn ActorCritic>, RuntimeError> {
    let spec = strata_env::spec_for(&config.env.name)?;
    let head = head_for(&spec);
    let mut rng = SampleRng::seed_from_u64(derive_seed(config.train.seed, 1));
    Ok(Box::new(MlpActorCritic::new(
        spec.obs_dim(),
        head,
        &config.network,
        &mut rng,
    )))
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
/// [`RuntimeError::Env`] for an unknown env.
pub fn sde_noise_len(config: &RunConfig) -> Result<usize, RuntimeError> {
    let spec = strata_env::spec_for(&config.env.name)?;
    Ok(config
        .network
        .sde_noise_len(spec.obs_dim(), head_for(&spec)))
}

/// The PPO learner for a config: its shuffling seed from the run seed, and the env's action
/// bounds for the bounds loss of a Gaussian policy.
///
/// # Errors
/// [`RuntimeError::Env`] for an unknown env.
pub fn build_ppo(config: &RunConfig) -> Result<Ppo, RuntimeError> {
    let spec = strata_env::spec_for(&config.env.name)?;
    let ppo = Ppo::new(config.ppo.clone(), derive_seed(config.train.seed, 3));
    Ok(match spec.action_space {
        strata_env::Space::Box { low, high } => ppo.with_action_bounds(low, high),
        strata_env::Space::Discrete { .. } => ppo,
    })
}

/// The initial normalisation statistics for a config (mean 0, variance 1).
pub(crate) fn initial_normalizer(config: &RunConfig, obs_dim: usize) -> NormalizerStats {
    NormalizerStats {
        obs: config
            .env
            .normalize_obs
            .then(|| RunningMeanStd::new(obs_dim)),
        returns: config.env.normalize_reward.then(|| RunningMeanStd::new(1)),
    }
}
