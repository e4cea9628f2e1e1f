//! Presets for Gymnasium envs (`gym:ID`). The classic-control ids take the built-in twin's
//! preset, so `gym:CartPole-v1` and `cartpole` train alike; the MuJoCo tasks start from
//! rl-zoo3's PPO hyperparameters (its v4 entries: the v5 bodies and rewards are the same);
//! MinAtar's games (`MinAtar/Breakout-v1`, ...) take pgx's MinAtar PPO at a CPU's scale on
//! the MinAtar agent's encoder, the Atari games CleanRL's `ppo_atari`; an id without a
//! preset gets SB3's PPO defaults with each network's gradient clipped on its own.

use strata_algo::PpoConfig;
use strata_ledger::AdmissionRules;
use strata_nn::{Activation, ConvPrecision, Encoder, NetworkConfig};

use crate::config::{
    EnvConfig, LedgerSettings, ReportSettings, RunConfig, RuntimeConfig, TrainConfig,
};

/// `module:Env-v0` registers its envs by importing `module`: the preset is the env's.
fn env_id(id: &str) -> &str {
    id.rsplit(':').next().unwrap_or(id)
}

/// The built-in env a Gymnasium id reproduces, whose preset it takes.
pub fn builtin_twin(id: &str) -> Option<&'static str> {
    match env_id(id) {
        "CartPole-v1" => Some("cartpole"),
        "Pendulum-v1" => Some("pendulum"),
        "Acrobot-v1" => Some("acrobot"),
        "MountainCarContinuous-v0" => Some("mountaincar-continuous"),
        _ => None,
    }
}

/// The Gymnasium ids with a preset of their own (besides the built-in envs' twins).
pub const GYM_PRESETS: &[&str] = &[
    "HalfCheetah-v5",
    "Hopper-v5",
    "Pusher-v5",
    "gymnasium_robotics:FetchReachDense-v4",
    "MinAtar/Breakout-v1",
    "MinAtar/SpaceInvaders-v1",
    "MinAtar/Asterix-v1",
    "MinAtar/Freeway-v1",
    "ALE/Breakout-v5",
    "ALE/Pong-v5",
];

/// Whether `id` is one of the Arcade Learning Environment's games (`ALE/Breakout-v5`, any
/// game of its v5 namespace).
fn is_ale(id: &str) -> bool {
    env_id(id).starts_with("ALE/")
}

/// Whether `id` is one of MinAtar's games (any version: `MinAtar/Seaquest-v0` too).
fn is_minatar(id: &str) -> bool {
    env_id(id).starts_with("MinAtar/")
}

/// The preset of `gym:ID` without a built-in twin (`name` is the whole env name).
pub fn gym_preset(name: &str, id: &str) -> RunConfig {
    let mut config = match env_id(id) {
        _ if is_minatar(id) => minatar(),
        _ if is_ale(id) => atari(),
        "HalfCheetah-v5" => mujoco(half_cheetah()),
        "Hopper-v5" => mujoco(hopper()),
        "Pusher-v5" => mujoco(MujocoPreset::defaults()),
        "FetchReachDense-v4" => fetch_reach(),
        _ => generic(),
    };
    config.env.name = name.to_string();
    config
}

/// What the preset of `gym:ID` without a built-in twin starts from, for `strata config
/// show` (kept beside [`gym_preset`]'s match; a test checks they agree).
pub fn gym_preset_origin(id: &str) -> String {
    match env_id(id) {
        _ if is_minatar(id) => "MinAtar: pgx's MinAtar PPO at a CPU's scale (256 envs x 128 \
                               steps, 3 epochs of 32 minibatches of 1,024, learning rate 3e-4, \
                               clip 0.2) on the MinAtar agent's encoder with 64-64 tanh heads"
            .into(),
        _ if is_ale(id) => "Atari: CleanRL's ppo_atari (its wrappers in the env processes: \
                            no-op reset, frame skip 4 with max-pool, an episode per life, \
                            FIRE at reset, rewards clipped, 84x84 grey, 4 frames; 8 envs x \
                            128 steps, 4 epochs of 4 minibatches, learning rate 2.5e-4 \
                            annealed, clip 0.1) on NatureCNN; returns are raw game scores"
            .into(),
        "HalfCheetah-v5" | "Hopper-v5" => {
            format!(
                "rl-zoo3's tuned PPO for {} (its v4 entry: the same body and reward)",
                env_id(id).trim_end_matches("-v5")
            )
        }
        "Pusher-v5" => {
            "rl-zoo3's mujoco-defaults: SB3's PPO with observations and rewards normalised".into()
        }
        "FetchReachDense-v4" => "Strata's preset for the Fetch reach task".into(),
        _ => format!(
            "generic (no preset for {id}): SB3's PPO defaults, 1 env x 2048 steps as SB3 \
             lays them out, each network's gradient clipped on its own \
             (ppo.clip_grad_per_network, so a large value loss does not shrink the \
             policy's step); 8 envs x 256 steps a process each is faster on many cores \
             and learned as well on most tasks, not all (docs/parity.md)"
        ),
    }
}

/// An rl-zoo3 MuJoCo entry: one env, VecNormalize (observations and rewards), 1M steps.
struct MujocoPreset {
    ppo: PpoConfig,
    network: NetworkConfig,
}

impl MujocoPreset {
    /// rl-zoo3's `mujoco-defaults` (the tasks it has not tuned): SB3's PPO as it is.
    fn defaults() -> Self {
        MujocoPreset {
            ppo: PpoConfig::default(),
            network: NetworkConfig::default(),
        }
    }
}

/// The zoo's tuned MuJoCo policies: ReLU 256-256 networks without orthogonal init,
/// log-std -2.
fn zoo_network() -> NetworkConfig {
    NetworkConfig {
        policy_hidden: vec![256, 256],
        value_hidden: vec![256, 256],
        activation: Activation::Relu,
        log_std_init: -2.0,
        ortho_init: false,
        ..NetworkConfig::default()
    }
}

/// rl-zoo3 HalfCheetah-v4.
fn half_cheetah() -> MujocoPreset {
    MujocoPreset {
        ppo: PpoConfig {
            n_steps: 512,
            batch_size: 64,
            n_epochs: 20,
            gamma: 0.98,
            gae_lambda: 0.92,
            learning_rate: 2.0633e-5,
            ent_coef: 0.000401762,
            clip_range: 0.1,
            max_grad_norm: Some(0.8),
            vf_coef: 0.58096,
            ..PpoConfig::default()
        },
        network: zoo_network(),
    }
}

/// rl-zoo3 Hopper-v4.
fn hopper() -> MujocoPreset {
    MujocoPreset {
        ppo: PpoConfig {
            n_steps: 512,
            batch_size: 32,
            n_epochs: 5,
            gamma: 0.999,
            gae_lambda: 0.99,
            learning_rate: 9.80828e-5,
            ent_coef: 0.00229519,
            clip_range: 0.2,
            max_grad_norm: Some(0.7),
            vf_coef: 0.835671,
            ..PpoConfig::default()
        },
        network: zoo_network(),
    }
}

fn mujoco(preset: MujocoPreset) -> RunConfig {
    assemble(
        EnvConfig {
            num_envs: 1,
            normalize_obs: true,
            normalize_reward: true,
            ..EnvConfig::default()
        },
        1_000_000,
        preset.ppo,
        preset.network,
    )
}

/// FetchReachDense-v4 (Gymnasium-Robotics; rl-zoo3 tunes only off-policy methods for
/// Fetch): the continuous-control settings of the arm-reach preset on 8 envs, with
/// normalised observations and rewards and a horizon fit for 50-step episodes.
fn fetch_reach() -> RunConfig {
    assemble(
        EnvConfig {
            num_envs: 8,
            normalize_obs: true,
            normalize_reward: true,
            ..EnvConfig::default()
        },
        500_000,
        PpoConfig {
            n_steps: 128,
            batch_size: 256,
            n_epochs: 10,
            gamma: 0.95,
            gae_lambda: 0.95,
            learning_rate: 1e-3,
            anneal_lr: true,
            ..PpoConfig::default()
        },
        NetworkConfig::default(),
    )
}

/// CleanRL's `ppo_atari` hyperparameters: 8 envs x 128 steps, 4 epochs of 4 minibatches,
/// learning rate 2.5e-4 annealed to 0, clip 0.1, value loss clipped, entropy 0.01,
/// gradient norm 0.5.
fn cleanrl_atari_ppo() -> PpoConfig {
    PpoConfig {
        n_steps: 128,
        batch_size: 256,
        n_epochs: 4,
        gamma: 0.99,
        gae_lambda: 0.95,
        learning_rate: 2.5e-4,
        anneal_lr: true,
        clip_range: 0.1,
        clip_range_vf: Some(0.1),
        ent_coef: 0.01,
        vf_coef: 0.5,
        max_grad_norm: Some(0.5),
        ..PpoConfig::default()
    }
}

/// MinAtar's games: pgx's MinAtar PPO (itself PureJaxRL's) at a CPU's scale. 256 envs x
/// 128 steps an update where pgx has 4,096, 3 epochs of 32 minibatches of 1,024,
/// learning rate 3e-4 held, clip 0.2 on the policy and the value, entropy 0.01, gradient
/// norm 0.5; the MinAtar reference agent's encoder (one 16-filter 3x3 convolution, 128
/// features) with 64-64 tanh layers before each head, as pgx's agent has them. CleanRL's
/// Atari recipe (8 envs, 16 minibatches of 256 an update), which these presets had
/// before, stops Breakout at the reactive plateau (5-7: the paddle waits where the ball
/// usually lands), as it stops SB3 at the same settings; this recipe leaves it (14-24
/// greedy at 5M over three seeds, measured with one rollout worker) and runs 3-4x faster on a CPU (docs/parity.md). 5M
/// steps: where published PPO curves on MinAtar have separated from random play on
/// every game.
fn minatar() -> RunConfig {
    pixel_workers(assemble(
        EnvConfig {
            num_envs: 256,
            ..EnvConfig::default()
        },
        5_000_000,
        PpoConfig {
            n_steps: 128,
            batch_size: 1024,
            n_epochs: 3,
            gamma: 0.99,
            gae_lambda: 0.95,
            learning_rate: 3e-4,
            anneal_lr: false,
            clip_range: 0.2,
            clip_range_vf: Some(0.2),
            ent_coef: 0.01,
            vf_coef: 0.5,
            max_grad_norm: Some(0.5),
            ..PpoConfig::default()
        },
        NetworkConfig {
            encoder: Encoder::MinatarCnn,
            policy_hidden: vec![64, 64],
            value_hidden: vec![64, 64],
            activation: Activation::Tanh,
            ..NetworkConfig::default()
        },
    ))
}

/// The pixel presets' two rollout workers, each with half the envs: while one worker's
/// model picks its envs' actions, the other's envs step, where one worker alternates the
/// two and leaves a core idle through each. In sync mode every sample still comes from
/// the version being trained, as with one worker. Measured on 2 cores: Breakout 386 ->
/// 463-491 steps/s, MinAtar Breakout 16.9-17.1k -> 18.6-19.1k (whole commands).
fn pixel_workers(mut config: RunConfig) -> RunConfig {
    config.runtime.workers = 2;
    config
}

/// The Atari games: CleanRL's `ppo_atari` (its hyperparameters above) on NatureCNN with the heads straight on its 512 features, for 10M steps. The
/// env is made with `frameskip = 1` (the wrapper skips frames, max-pooling the last two)
/// and keeps v5's sticky actions (a repeat probability of 0.25), which CleanRL's v4
/// `NoFrameskip` ids leave out; `--set env.gym.kwargs.repeat_action_probability=0`
/// matches them. NatureCNN's convolutions take bfloat16 operands with float32 sums
/// (`network.conv_precision = "bf16"`): NatureCNN's passes in 0.72x float32's time where
/// the CPU has AVX-512 BF16, the same curves to 300k steps over two seeds each
/// (docs/environments.md).
fn atari() -> RunConfig {
    let mut config = assemble(
        EnvConfig {
            num_envs: 8,
            ..EnvConfig::default()
        },
        10_000_000,
        cleanrl_atari_ppo(),
        NetworkConfig {
            encoder: Encoder::NatureCnn,
            conv_precision: ConvPrecision::Bf16,
            policy_hidden: Vec::new(),
            value_hidden: Vec::new(),
            ..NetworkConfig::default()
        },
    );
    config.env.gym.kwargs.insert("frameskip".into(), 1.into());
    // The wrapper reads ALE's grey screen itself; an RGB observation built at every
    // emulated frame would be thrown away (6-8% of a Breakout command, the same frames).
    config
        .env
        .gym
        .kwargs
        .insert("obs_type".into(), "grayscale".into());
    config.env.gym.wrappers = vec!["atari".into()];
    pixel_workers(config)
}

/// Any other id: SB3's PPO defaults in SB3's layout, one env x 2048 steps, on the env's
/// own rewards, with each network's gradient clipped to the norm on its own. The learning-
/// parity suite (docs/parity.md) chose all three: 8 envs x 256 steps per update learn as
/// well on five of its tasks but not on Swimmer, where only fragments of 1024 steps or
/// more do; under SB3's one global clip the value loss's gradient on unscaled returns
/// sets the policy's step, which made InvertedDoublePendulum runs fall from near the
/// ceiling, SB3's as often as Strata's; and scaling the rewards instead (rl-zoo3's
/// VecNormalize) keeps those falls away too but halves Ant-v5's return at 300k steps,
/// SB3's as much as Strata's, where clipping per network is at par on all thirteen of
/// the suite's tasks.
fn generic() -> RunConfig {
    assemble(
        EnvConfig {
            num_envs: 1,
            ..EnvConfig::default()
        },
        1_000_000,
        PpoConfig {
            n_steps: 2048,
            clip_grad_per_network: true,
            ..PpoConfig::default()
        },
        NetworkConfig::default(),
    )
}

fn assemble(env: EnvConfig, total_steps: u64, ppo: PpoConfig, network: NetworkConfig) -> RunConfig {
    RunConfig {
        env,
        ppo,
        network,
        train: TrainConfig {
            total_steps,
            ..TrainConfig::default()
        },
        runtime: RuntimeConfig::default(),
        admission: AdmissionRules::default(),
        ledger: LedgerSettings::default(),
        report: ReportSettings::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gym_twins_of_builtin_envs_train_with_the_builtin_preset() {
        let gym = crate::preset("gym:CartPole-v1").unwrap();
        let mut builtin = crate::preset("cartpole").unwrap();
        builtin.env.name = "gym:CartPole-v1".into();
        assert_eq!(gym, builtin);
        assert_eq!(builtin_twin("gymnasium:Pendulum-v1"), Some("pendulum"));
    }

    #[test]
    fn every_gym_preset_is_valid_and_keeps_its_name() {
        for id in [
            "HalfCheetah-v5",
            "Hopper-v5",
            "Pusher-v5",
            "gymnasium_robotics:FetchReachDense-v4",
            "MinAtar/Breakout-v1",
            "ALE/Breakout-v5",
            "my_pkg.envs:make_env",
        ] {
            let name = format!("gym:{id}");
            let c = gym_preset(&name, id);
            c.validate().unwrap();
            assert_eq!(c.env.name, name);
        }
        let cheetah = gym_preset("gym:HalfCheetah-v5", "HalfCheetah-v5");
        assert_eq!(cheetah.network.policy_hidden, vec![256, 256]);
        assert_eq!((cheetah.ppo.n_steps, cheetah.ppo.n_epochs), (512, 20));
        assert!(cheetah.env.normalize_obs && cheetah.env.normalize_reward);
        let fetch = gym_preset(
            "gym:gymnasium_robotics:FetchReachDense-v4",
            "gymnasium_robotics:FetchReachDense-v4",
        );
        assert_eq!(fetch.env.num_envs, 8);
        let breakout = gym_preset("gym:MinAtar/Breakout-v1", "MinAtar/Breakout-v1");
        assert_eq!(breakout.network.encoder, Encoder::MinatarCnn);
        assert_eq!(breakout.network.policy_hidden, [64, 64]);
        assert_eq!(breakout.env.num_envs, 256);
        assert_eq!((breakout.ppo.batch_size, breakout.ppo.n_epochs), (1024, 3));
        assert!(!breakout.ppo.anneal_lr);
        assert_eq!(
            gym_preset("gym:MinAtar/Seaquest-v0", "MinAtar/Seaquest-v0"),
            RunConfig {
                env: EnvConfig {
                    name: "gym:MinAtar/Seaquest-v0".into(),
                    ..breakout.env.clone()
                },
                ..breakout
            }
        );
        let atari = gym_preset("gym:ALE/Pong-v5", "ALE/Pong-v5");
        assert_eq!(atari.env.gym.wrappers, ["atari"]);
        assert_eq!(atari.env.gym.kwargs["frameskip"].as_integer(), Some(1));
        assert_eq!(atari.env.gym.kwargs["obs_type"].as_str(), Some("grayscale"));
        assert_eq!(atari.network.encoder, Encoder::NatureCnn);
        assert_eq!(atari.network.conv_precision, ConvPrecision::Bf16);
        assert_eq!(minatar().network.conv_precision, ConvPrecision::F32);
        assert_eq!(atari.ppo, cleanrl_atari_ppo());
        assert_eq!(atari.env.num_envs, 8);
        assert!(atari.network.policy_hidden.is_empty());
        let mut wrong = atari.clone();
        wrong.env.gym.wrappers.push("atary".into());
        let error = wrong.validate().unwrap_err().to_string();
        assert!(
            error.contains("env.gym.wrappers") && error.contains("atari"),
            "{error}"
        );
    }

    #[test]
    fn the_generic_preset_is_sb3s_ppo_with_each_network_clipped_on_its_own() {
        let generic = gym_preset("gym:Swimmer-v5", "Swimmer-v5");
        generic.validate().unwrap();
        assert_eq!((generic.env.num_envs, generic.ppo.n_steps), (1, 2048));
        assert!(generic.ppo.clip_grad_per_network);
        assert_eq!(generic.ppo.max_grad_norm, Some(0.5));
        // The env's own rewards, as SB3's defaults: scaling them halves Ant-v5's return.
        assert!(!generic.env.normalize_reward && !generic.env.normalize_obs);
        let sb3 = PpoConfig {
            n_steps: 2048,
            ..PpoConfig::default()
        };
        assert_eq!(
            PpoConfig {
                clip_grad_per_network: false,
                ..generic.ppo
            },
            sb3
        );
    }

    #[test]
    fn the_origin_says_generic_exactly_where_the_generic_preset_applies() {
        for id in GYM_PRESETS {
            assert!(!gym_preset_origin(id).starts_with("generic"), "{id}");
            let mut own = gym_preset(&format!("gym:{id}"), id);
            own.env.name = generic().env.name;
            assert_ne!(own, generic(), "{id}");
        }
        let origin = gym_preset_origin("Swimmer-v5");
        assert!(
            origin.starts_with("generic (no preset for Swimmer-v5)"),
            "{origin}"
        );
    }
}
