//! PPO on sequences learns what a feed-forward policy cannot: a cue shown at an episode's
//! first step decides which action pays at its last.

use rand::{Rng, SeedableRng};
use strata_algo::{Ppo, PpoConfig, RolloutBuffer};
use strata_nn::{ActorCritic, ActorCriticNet, Core, Head, Memory, NetworkConfig, SampleRng};

const ENVS: usize = 16;
const STEPS: usize = 24;
/// Steps per episode: the cue, a blank, the decision.
const EPISODE: usize = 3;

/// The observation at `phase` of an episode with `cue`: the cue only at the first step,
/// and the phase.
fn observe(phase: usize, cue: f32, out: &mut [f32]) {
    out[0] = if phase == 0 { cue } else { 0.0 };
    out[1] = phase as f32 / EPISODE as f32;
}

/// Trains for `iterations` and returns the share of right decisions over the last five.
fn right_decisions(core: Core, iterations: usize) -> f32 {
    let mut rng = SampleRng::seed_from_u64(3);
    let network = NetworkConfig {
        policy_hidden: vec![16],
        value_hidden: vec![16],
        core,
        core_size: 16,
        ..NetworkConfig::default()
    };
    let mut model = ActorCriticNet::new(2, Head::Categorical { n: 2 }, &network, &mut rng);
    let config = PpoConfig {
        n_steps: STEPS,
        batch_size: 96,
        n_epochs: 4,
        learning_rate: 3e-3,
        // Sequences of 4 start inside episodes (which last 3): those need their stored
        // state to know the cue.
        sequence_length: 4,
        ..PpoConfig::default()
    };
    config.validate_sequences().unwrap();
    let mut ppo = Ppo::new(config, 1);
    let s = model.state_len();
    let mut rollout = RolloutBuffer::new(ENVS, STEPS, 2, 1).with_memory(s);
    let mut world = SampleRng::seed_from_u64(9);
    let mut cues: Vec<f32> = (0..ENVS)
        .map(|_| if world.random() { 1.0 } else { -1.0 })
        .collect();
    let mut phase = [0usize; ENVS];
    let mut state = vec![0.0; ENVS * s];
    let mut starts = vec![true; ENVS];
    let mut obs = vec![0.0; ENVS * 2];
    let (mut right, mut decided) = (0, 0);
    for iteration in 0..iterations {
        for t in 0..STEPS {
            let rows = t * ENVS..(t + 1) * ENVS;
            for e in 0..ENVS {
                observe(phase[e], cues[e], &mut obs[e * 2..e * 2 + 2]);
            }
            rollout.obs.write(rows.start, &obs);
            if s > 0 {
                rollout.states[rows.start * s..rows.end * s].copy_from_slice(&state);
                rollout.starts[rows.clone()].copy_from_slice(&starts);
            }
            model.act(
                &obs,
                Memory {
                    state: &mut state,
                    starts: &starts,
                },
                &mut rng,
                &[],
                &mut rollout.actions[rows.clone()],
                &mut rollout.log_probs[rows.clone()],
                &mut rollout.values[rows.clone()],
            );
            for e in 0..ENVS {
                let row = rows.start + e;
                let last = phase[e] == EPISODE - 1;
                let good = (rollout.actions[row] == 1.0) == (cues[e] > 0.0);
                rollout.rewards[row] = if last && good { 1.0 } else { 0.0 };
                rollout.terminated[row] = last;
                if last && iteration + 5 >= iterations {
                    decided += 1;
                    right += usize::from(good);
                }
                starts[e] = last;
                phase[e] = if last { 0 } else { phase[e] + 1 };
                if last {
                    cues[e] = if world.random() { 1.0 } else { -1.0 };
                }
            }
        }
        for e in 0..ENVS {
            observe(phase[e], cues[e], &mut obs[e * 2..e * 2 + 2]);
        }
        // The bootstrap steps a copy: the envs' states go on from where they are.
        let mut next = state.clone();
        model.values(
            &obs,
            Memory {
                state: &mut next,
                starts: &starts,
            },
            &mut rollout.last_values,
        );
        rollout.compute_advantages(0.99, 0.95);
        ppo.update(&mut model, &rollout, 1.0);
    }
    right as f32 / decided as f32
}

#[test]
fn an_lstm_learns_a_cue_a_feed_forward_policy_cannot_hold() {
    let lstm = right_decisions(Core::Lstm, 120);
    let gru = right_decisions(Core::Gru, 120);
    let mlp = right_decisions(Core::None, 120);
    eprintln!("right decisions: lstm {lstm}, gru {gru}, mlp {mlp}");
    assert!(lstm > 0.9, "lstm decides right {lstm}");
    assert!(gru > 0.9, "gru decides right {gru}");
    assert!(mlp < 0.7, "without memory it can only guess: {mlp}");
}

#[test]
fn a_sequence_length_that_cannot_tile_says_which_would() {
    // SB3's layout (2048 steps, minibatches of 64): whole fragments cannot fit a
    // minibatch, so the automatic length (0) is the longest of at most 32 that tiles both.
    let mut config = PpoConfig {
        n_steps: 2048,
        batch_size: 64,
        ..PpoConfig::default()
    };
    config.validate_sequences().unwrap();
    assert_eq!(config.sequence_steps(), 32);
    assert!(config
        .describe_sequences()
        .starts_with("32 steps, 2 a minibatch"));
    // A minibatch of whole fragments keeps them whole.
    config.batch_size = 4096;
    assert_eq!(config.sequence_steps(), 2048);
    // No length of 8-32 steps divides both: refused, naming what would.
    config.n_steps = 128;
    config.batch_size = 100;
    let err = config.validate_sequences().unwrap_err().to_string();
    assert!(
        err.contains("ppo.batch_size") && err.contains("e.g. 4"),
        "{err}"
    );
    // An explicit length that cannot tile is refused as it always was.
    config.n_steps = 2048;
    config.batch_size = 64;
    config.sequence_length = 48;
    let err = config.validate_sequences().unwrap_err().to_string();
    assert!(err.contains("ppo.sequence_length"), "{err}");
    config.sequence_length = 32;
    config.validate_sequences().unwrap();
    config.sequence_length = 16;
    config.batch_size = 40;
    let err = config.validate_sequences().unwrap_err().to_string();
    assert!(
        err.contains("ppo.sequence_length = 8 would divide both"),
        "{err}"
    );
}
