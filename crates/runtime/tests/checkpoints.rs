//! Checkpoints: evaluation of a trained policy, and clear errors for missing or corrupt ones.

use std::fs;

use strata_runtime::{
    evaluate, evaluate_recorded, load_policy, preset, run, LearnerError, RunDir, Trainer,
};

fn trained_run(dir: &std::path::Path) {
    let mut c = preset("cartpole").unwrap();
    c.train.total_steps = 100_000;
    c.train.stop_when_solved = true;
    let mut t = Trainer::new(c).unwrap();
    let mut rd = RunDir::create(dir, &t).unwrap();
    run::train(&mut t, &mut rd, &mut |_| {}).unwrap();
}

#[test]
fn eval_scores_a_trained_checkpoint_and_names_bad_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let run_dir = tmp.path().join("run");
    trained_run(&run_dir);

    let mut policy = load_policy(&run_dir).unwrap();
    assert!(policy.policy_version > 0);
    let r = evaluate(&mut policy, 5, 99, true).unwrap();
    assert_eq!(r.returns.len(), 5);
    assert!(
        r.mean_return > 400.0,
        "greedy policy of a solved run: {}",
        r.mean_return
    );

    // Recorded: the same episodes, env 0's drawn one picture a step (CartPole's return is
    // its length), every picture 300x200.
    let gif = tmp.path().join("v.gif");
    let (recorded, video) = evaluate_recorded(&mut policy, 1, 99, true, &gif).unwrap();
    assert_eq!(recorded, evaluate(&mut policy, 1, 99, true).unwrap());
    assert_eq!(video.episodes, 1);
    assert_eq!(video.frames as f64, recorded.returns[0]);
    let mut options = gif::DecodeOptions::new();
    options.set_color_output(gif::ColorOutput::RGBA);
    let mut decoder = options.read_info(fs::File::open(&gif).unwrap()).unwrap();
    let mut frames = 0;
    while let Some(f) = decoder.read_next_frame().unwrap() {
        assert_eq!((f.width, f.height), (300, 200));
        frames += 1;
    }
    assert_eq!(frames, video.frames);
    assert!(!tmp.path().join("v.frames.tmp").exists());
    // An env that does not draw itself is refused by name, and leaves no file.
    policy.config.env.name = "arm-reach".into();
    let error = evaluate_recorded(&mut policy, 1, 1, true, &tmp.path().join("arm.gif"));
    let error = error.err().unwrap().to_string();
    assert!(error.contains("cannot be recorded"), "{error}");
    assert!(!tmp.path().join("arm.gif").exists());

    // Missing.
    let err = load_policy(&tmp.path().join("nope")).err().unwrap();
    assert!(matches!(err, LearnerError::Checkpoint { .. }), "{err}");

    // Corrupt weights: one flipped byte fails the checksum.
    let bad = tmp.path().join("bad");
    copy_dir(&run_dir.join("checkpoint"), &bad);
    let weights = bad.join("model.safetensors");
    let mut bytes = fs::read(&weights).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    fs::write(&weights, &bytes).unwrap();
    let err = load_policy(&bad).err().unwrap().to_string();
    assert!(
        err.contains("model.safetensors") && err.contains("checksum"),
        "{err}"
    );

    // Corrupt metadata.
    let bad_meta = tmp.path().join("bad_meta");
    copy_dir(&run_dir.join("checkpoint"), &bad_meta);
    fs::write(bad_meta.join("meta.json"), b"{ not json").unwrap();
    let err = load_policy(&bad_meta).err().unwrap().to_string();
    assert!(
        err.contains("meta.json") && err.contains("corrupt"),
        "{err}"
    );

    // Missing weights file.
    fs::remove_file(bad.join("model.safetensors")).unwrap();
    let err = load_policy(&bad).err().unwrap().to_string();
    assert!(err.contains("model.safetensors"), "{err}");
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

#[test]
fn the_best_evaluated_version_is_checkpointed_in_best() {
    let tmp = tempfile::tempdir().unwrap();
    let run_dir = tmp.path().join("run");
    let mut c = preset("cartpole").unwrap();
    c.train.total_steps = 20 * 256;
    c.report.eval_every = 512;
    c.report.eval_episodes = 3;
    let mut t = Trainer::new(c.clone()).unwrap();
    let mut rd = RunDir::create(&run_dir, &t).unwrap();
    run::train(&mut t, &mut rd, &mut |_| {}).unwrap();
    let evals: Vec<strata_runtime::EvalResult> = fs::read_to_string(run_dir.join("eval.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The first evaluation with the highest return among trained versions.
    let best = evals
        .iter()
        .filter(|e| e.policy_version > 0)
        .fold(None::<&strata_runtime::EvalResult>, |b, e| match b {
            Some(b) if b.mean_return >= e.mean_return => Some(b),
            _ => Some(e),
        })
        .unwrap();
    let saved: strata_runtime::EvalResult =
        serde_json::from_slice(&fs::read(run_dir.join("best/eval.json")).unwrap()).unwrap();
    assert_eq!(saved.policy_version, best.policy_version);
    assert_eq!(saved.mean_return, best.mean_return);
    let mut policy = load_policy(&run_dir.join("best")).unwrap();
    assert_eq!(policy.policy_version, best.policy_version);
    let again = evaluate(&mut policy, 3, c.report.eval_seed(c.train.seed), true).unwrap();
    assert_eq!(
        again.returns, best.returns,
        "the checkpoint is the version evaluated"
    );
    assert!(!run_dir.join("best.new").exists() && !run_dir.join("best.old").exists());
    assert_eq!(
        strata_runtime::find_version(&run_dir, best.policy_version).unwrap(),
        run_dir.join("best")
    );
}

/// Evaluations keep to `report.eval_max_share` of the run's time (the first and the last
/// always run), except in deterministic runs, whose evaluations follow the steps alone.
#[test]
fn evaluations_keep_to_their_share_of_the_run_outside_deterministic_runs() {
    let evaluated = |share: f64, deterministic: bool| -> Vec<u64> {
        let tmp = tempfile::tempdir().unwrap();
        let run_dir = tmp.path().join("run");
        let mut c = preset("cartpole").unwrap();
        c.train.total_steps = 20 * 256;
        c.train.deterministic = deterministic;
        // An evaluation after every update, each far longer than the update.
        c.report.eval_every = 256;
        c.report.eval_episodes = 10;
        c.report.eval_max_share = share;
        let mut t = Trainer::new(c).unwrap();
        let mut rd = RunDir::create(&run_dir, &t).unwrap();
        let summary = run::train(&mut t, &mut rd, &mut |_| {}).unwrap();
        assert!(summary.train_steps_per_sec > summary.env_steps_per_sec);
        fs::read_to_string(run_dir.join("eval.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<strata_runtime::EvalResult>(l).unwrap())
            .map(|e| e.policy_version)
            .collect()
    };
    let every: Vec<u64> = (0..=20).collect();
    assert_eq!(evaluated(1.0, false), every, "no limit: one per update");
    assert_eq!(
        evaluated(0.05, true),
        every,
        "deterministic: the steps alone"
    );
    let budgeted = evaluated(0.05, false);
    assert!(budgeted.len() < every.len(), "{budgeted:?}");
    assert_eq!(budgeted.first(), Some(&0), "the first always runs");
    assert_eq!(budgeted.last(), Some(&20), "the last always runs");
}
