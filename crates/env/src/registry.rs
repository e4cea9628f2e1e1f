//! Built-in environments by name.

use crate::{
    Acrobot, ArmReach, CartPole, Env, EnvError, EnvSpec, Masked, MountainCarContinuous, Pendulum,
    UiForm, VecEnv, Vectorized,
};

/// Names accepted by [`make_env`] and [`make_vec_env`].
pub fn env_names() -> &'static [&'static str] {
    &[
        "cartpole",
        "pendulum",
        "acrobot",
        "mountaincar-continuous",
        "arm-reach",
        "arm-reach-moving",
        "ui-form",
        "cartpole-novel",
        "pendulum-novel",
    ]
}

fn unknown(name: &str) -> EnvError {
    EnvError::UnknownEnv {
        name: name.to_string(),
        known: env_names().join(", "),
    }
}

/// One environment instance.
///
/// # Errors
/// [`EnvError::UnknownEnv`] for a name not in [`env_names`].
pub fn make_env(name: &str) -> Result<Box<dyn Env>, EnvError> {
    Ok(match name {
        "cartpole" => Box::new(CartPole::default()),
        "pendulum" => Box::new(Pendulum::default()),
        "acrobot" => Box::new(Acrobot::default()),
        "mountaincar-continuous" => Box::new(MountainCarContinuous::default()),
        "arm-reach" => Box::new(ArmReach::new(false)),
        "arm-reach-moving" => Box::new(ArmReach::new(true)),
        "ui-form" => Box::new(UiForm::default()),
        "cartpole-novel" => Box::new(Masked::cartpole_no_vel()),
        "pendulum-novel" => Box::new(Masked::pendulum_no_vel()),
        _ => return Err(unknown(name)),
    })
}

/// `num_envs` instances of the named env, vectorised (no normalisation wrappers).
///
/// # Errors
/// [`EnvError::UnknownEnv`] for a name not in [`env_names`].
pub fn make_vec_env(name: &str, num_envs: usize) -> Result<Box<dyn VecEnv>, EnvError> {
    make_vec_env_with_latency(name, num_envs, 0)
}

/// As [`make_vec_env`], each action taking `latency_ticks` env ticks to take effect.
///
/// # Errors
/// [`EnvError::UnknownEnv`] for a name not in [`env_names`].
pub fn make_vec_env_with_latency(
    name: &str,
    num_envs: usize,
    latency_ticks: u32,
) -> Result<Box<dyn VecEnv>, EnvError> {
    fn vectorized<E: Env + Clone + 'static>(env: E, n: usize, k: u32) -> Box<dyn VecEnv> {
        Box::new(Vectorized::new(env, n).with_action_latency(k))
    }
    Ok(match name {
        "cartpole" => vectorized(CartPole::default(), num_envs, latency_ticks),
        "pendulum" => vectorized(Pendulum::default(), num_envs, latency_ticks),
        "acrobot" => vectorized(Acrobot::default(), num_envs, latency_ticks),
        "mountaincar-continuous" => {
            vectorized(MountainCarContinuous::default(), num_envs, latency_ticks)
        }
        "arm-reach" => vectorized(ArmReach::new(false), num_envs, latency_ticks),
        "arm-reach-moving" => vectorized(ArmReach::new(true), num_envs, latency_ticks),
        "ui-form" => vectorized(UiForm::default(), num_envs, latency_ticks),
        "cartpole-novel" => vectorized(Masked::cartpole_no_vel(), num_envs, latency_ticks),
        "pendulum-novel" => vectorized(Masked::pendulum_no_vel(), num_envs, latency_ticks),
        _ => return Err(unknown(name)),
    })
}

/// The spec of a named env.
///
/// # Errors
/// [`EnvError::UnknownEnv`] for a name not in [`env_names`].
pub fn spec_for(name: &str) -> Result<EnvSpec, EnvError> {
    make_env(name).map(|e| e.spec())
}
