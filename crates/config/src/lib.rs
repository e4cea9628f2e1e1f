//! A Strata run's configuration, and what it builds: the run config (`config/`: its
//! sections, their validation a function per section), its identity (`identity.rs`: what
//! the config hash covers, and what a resume may change), the presets of the built-in and
//! Gymnasium envs (`presets.rs`, `gym_presets.rs`), the one layering of config sources
//! (`layers.rs`: preset, file, `--set`), and the factory that turns a config into envs, a
//! model and a PPO learner (`factory.rs`). Everything that reads a config (the trainer,
//! the gateway, the command line) starts here; nothing here runs anything.

mod config;
mod error;
mod factory;
mod gym_presets;
mod identity;
mod layers;
mod presets;

pub use config::{
    EnvConfig, GymSettings, Inference, LedgerSettings, Mode, OffPolicy, ReportSettings, RunConfig,
    RuntimeConfig, TrainConfig,
};
pub use error::ConfigError;
pub use factory::{
    build_envs, build_eval_envs, build_eval_envs_recording, build_model, build_ppo,
    describe_encoders, env_spec, image_inputs, initial_normalizer, resolve_env, sde_noise_len,
};
pub use gym_presets::{builtin_twin, gym_preset, gym_preset_origin, GYM_PRESETS};
pub use identity::Identity;
pub use layers::ConfigFile;
pub use presets::{preset, preset_origin, DEFAULT_ENV};
