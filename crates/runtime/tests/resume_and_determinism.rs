//! Determinism and exact resume: the same seed gives bit-identical runs, and a run stopped
//! at a checkpoint and resumed ends exactly where an uninterrupted run ends.

use std::path::Path;

use strata_runtime::{preset, run, RunConfig, RunDir, Trainer, UpdateRecord};

fn config(env: &str, total_steps: u64, checkpoint_every: u64) -> RunConfig {
    let mut c = preset(env).unwrap();
    c.train.seed = 7;
    c.train.total_steps = total_steps;
    c.train.deterministic = true;
    c.train.checkpoint_every = checkpoint_every;
    c
}

/// Runs to the end; returns the final weights and the update records.
fn run_to_end(trainer: &mut Trainer, dir: &Path) -> (Vec<f32>, Vec<UpdateRecord>) {
    let mut records = Vec::new();
    let mut run_dir = RunDir::create(dir, trainer).unwrap();
    run::train(trainer, &mut run_dir, &mut |r| records.push(r.clone())).unwrap();
    (trainer.model().flat_params().to_vec(), records)
}

/// The parts of a record that must match bit for bit (not the timings).
fn learning_fields(r: &UpdateRecord) -> String {
    format!(
        "{} {} {} {:?} {} {} {} {} {} {}",
        r.policy_version,
        r.global_step,
        r.episodes,
        r.mean_return,
        r.ppo.policy_loss,
        r.ppo.value_loss,
        r.ppo.entropy,
        r.ppo.approx_kl,
        r.ppo.clip_fraction,
        r.ppo.explained_variance
    )
}

#[test]
fn same_seed_gives_bit_identical_runs_and_another_seed_differs() {
    let tmp = tempfile::tempdir().unwrap();
    let (wa, ra) = run_to_end(
        &mut Trainer::new(config("cartpole", 8192, 0)).unwrap(),
        &tmp.path().join("a"),
    );
    let (wb, rb) = run_to_end(
        &mut Trainer::new(config("cartpole", 8192, 0)).unwrap(),
        &tmp.path().join("b"),
    );
    assert_eq!(wa, wb);
    let fa: Vec<_> = ra.iter().map(learning_fields).collect();
    let fb: Vec<_> = rb.iter().map(learning_fields).collect();
    assert_eq!(fa, fb);
    let mut other = config("cartpole", 8192, 0);
    other.train.seed = 8;
    let (wc, _) = run_to_end(&mut Trainer::new(other).unwrap(), &tmp.path().join("c"));
    assert_ne!(wa, wc);
}

#[test]
fn one_or_two_learner_threads_give_identical_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let mut one = config("pendulum", 8192, 0);
    one.train.learner_threads = 1;
    let mut two = one.clone();
    two.train.learner_threads = 2;
    let (w1, r1) = run_to_end(&mut Trainer::new(one).unwrap(), &tmp.path().join("one"));
    let (w2, r2) = run_to_end(&mut Trainer::new(two).unwrap(), &tmp.path().join("two"));
    assert_eq!(w1, w2);
    assert_eq!(
        r1.iter().map(learning_fields).collect::<Vec<_>>(),
        r2.iter().map(learning_fields).collect::<Vec<_>>()
    );
}

fn resume_matches_uninterrupted(env: &str, total: u64, every: u64) {
    resume_matches_uninterrupted_with(config(env, total, every));
}

fn resume_matches_uninterrupted_with(c: RunConfig) {
    let (env, total) = (c.env.name.clone(), c.train.total_steps);
    let tmp = tempfile::tempdir().unwrap();
    let full_dir = tmp.path().join("full");
    let (w_full, r_full) = run_to_end(&mut Trainer::new(c.clone()).unwrap(), &full_dir);
    let checkpoints: Vec<_> = std::fs::read_dir(full_dir.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(
        !checkpoints.is_empty(),
        "no intermediate checkpoint written"
    );
    // Resume from the earliest checkpoint, in a fresh run directory.
    let first = checkpoints
        .iter()
        .min_by_key(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .trim_start_matches("step-")
                .parse::<u64>()
                .unwrap()
        })
        .unwrap();
    let mut resumed = Trainer::resume(first, None).unwrap();
    let k = resumed.progress().global_step;
    assert!(k > 0 && k < total);
    let (w_resumed, r_resumed) = run_to_end(&mut resumed, &tmp.path().join("resumed"));
    assert_eq!(
        w_full, w_resumed,
        "{env}: final weights differ after resume at step {k}"
    );
    let tail: Vec<_> = r_full
        .iter()
        .filter(|r| r.global_step > k)
        .map(learning_fields)
        .collect();
    let again: Vec<_> = r_resumed.iter().map(learning_fields).collect();
    assert_eq!(tail, again);
    assert_eq!(resumed.summary().config_hash, c.config_hash());
}

#[test]
fn cartpole_resume_equals_uninterrupted_run() {
    resume_matches_uninterrupted("cartpole", 6144, 2560);
}

#[test]
fn normalised_env_resume_equals_uninterrupted_run() {
    // Acrobot's preset normalises observations and rewards: their statistics must resume too.
    resume_matches_uninterrupted("acrobot", 3 * 4096, 5000);
}

#[test]
fn continuous_env_resume_equals_uninterrupted_run() {
    resume_matches_uninterrupted("pendulum", 3 * 4096, 5000);
}

#[test]
fn gsde_resume_equals_uninterrupted_run_with_matrices_held_per_episode() {
    // Pendulum's episodes end inside fragments, so the matrices in use at a checkpoint
    // are ones drawn mid-fragment: they must be saved, not drawn anew on resume.
    let mut c = config("pendulum", 3 * 4096, 5000);
    c.network.sde = true;
    c.network.sde_hold = strata_nn::SdeHold::Episode;
    resume_matches_uninterrupted_with(c.clone());
    c.network.sde_hold = strata_nn::SdeHold::Fragment;
    resume_matches_uninterrupted_with(c.clone());
    // Drawn anew every 4 steps (SB3's sde_sample_freq), by workers and by central
    // inference: saved and restored exactly, and another run than with matrices held.
    let tmp = tempfile::tempdir().unwrap();
    let held = run_to_end(
        &mut Trainer::new(c.clone()).unwrap(),
        &tmp.path().join("held"),
    )
    .0;
    c.network.sde_sample_freq = 4;
    resume_matches_uninterrupted_with(c.clone());
    let every_4 = run_to_end(&mut Trainer::new(c.clone()).unwrap(), &tmp.path().join("4")).0;
    assert!(held != every_4, "the matrices were drawn anew");
    c.runtime.inference = strata_runtime::Inference::Central;
    resume_matches_uninterrupted_with(c.clone());
    c.network.sde = false;
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("network.sde_sample_freq"), "{err}");
}

#[test]
fn async_central_runs_resume_from_their_last_consumed_fragments() {
    // In async mode fragments in flight at a stop are abandoned; the resumed run continues
    // from the workers' states after the last consumed fragment, deterministically.
    let tmp = tempfile::tempdir().unwrap();
    let mut c = config("cartpole", 12 * 256, 4 * 256);
    c.runtime.workers = 2;
    c.runtime.mode = strata_runtime::Mode::Async;
    c.runtime.inference = strata_runtime::Inference::Central;
    run_to_end(
        &mut Trainer::new(c.clone()).unwrap(),
        &tmp.path().join("full"),
    );
    let checkpoint = tmp.path().join("full/checkpoints/step-2048");
    let mut a = Trainer::resume(&checkpoint, None).unwrap();
    assert_eq!(a.progress().global_step, 2048);
    let (wa, ra) = run_to_end(&mut a, &tmp.path().join("a"));
    let mut b = Trainer::resume(&checkpoint, None).unwrap();
    let (wb, rb) = run_to_end(&mut b, &tmp.path().join("b"));
    assert_eq!(wa, wb);
    assert_eq!(ra.len(), 4);
    assert_eq!(
        ra.iter().map(learning_fields).collect::<Vec<_>>(),
        rb.iter().map(learning_fields).collect::<Vec<_>>()
    );
}

#[test]
fn recurrent_resume_equals_uninterrupted_run_with_states_carried_mid_episode() {
    // CartPole's episodes run across fragments: at a checkpoint the envs are mid-episode
    // and their LSTM states must be saved with them, not zeroed on resume.
    resume_matches_uninterrupted("cartpole-novel", 12 * 256, 5 * 256);
    // Two workers, a GRU shared by both networks, sequences shorter than fragments.
    let mut c = config("cartpole-novel", 16 * 256, 6 * 256);
    c.runtime.workers = 2;
    c.network.core = strata_nn::Core::Gru;
    c.network.core_shared = true;
    c.ppo.sequence_length = 8;
    resume_matches_uninterrupted_with(c.clone());
    // Central inference: the states travel with each group's request and come back
    // advanced with its answer.
    c.runtime.inference = strata_runtime::Inference::Central;
    resume_matches_uninterrupted_with(c);
}

#[test]
fn async_recurrent_runs_correct_lagged_sequences_deterministically() {
    // Lagged fragments are re-evaluated as whole sequences by the current policy
    // (decoupled PPO); two resumes from one checkpoint end identical.
    let tmp = tempfile::tempdir().unwrap();
    let mut c = config("cartpole-novel", 12 * 256, 4 * 256);
    c.runtime.workers = 2;
    c.runtime.mode = strata_runtime::Mode::Async;
    let (_, full) = run_to_end(&mut Trainer::new(c).unwrap(), &tmp.path().join("full"));
    assert!(
        full.iter()
            .any(|r| r.is_weights.is_some_and(|w| w.mean != 1.0)),
        "some fragment lagged and was corrected"
    );
    let checkpoint = tmp.path().join("full/checkpoints/step-1024");
    let (wa, ra) = run_to_end(
        &mut Trainer::resume(&checkpoint, None).unwrap(),
        &tmp.path().join("a"),
    );
    let (wb, rb) = run_to_end(
        &mut Trainer::resume(&checkpoint, None).unwrap(),
        &tmp.path().join("b"),
    );
    assert_eq!(wa, wb);
    assert_eq!(
        ra.iter().map(learning_fields).collect::<Vec<_>>(),
        rb.iter().map(learning_fields).collect::<Vec<_>>()
    );
}
