//! Checkpoints: evaluation of a trained policy, and clear errors for missing or corrupt ones.

use std::fs;

use strata_runtime::{evaluate, load_policy, preset, run, RunDir, RuntimeError, Trainer};

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

    // Missing.
    let err = load_policy(&tmp.path().join("nope")).err().unwrap();
    assert!(matches!(err, RuntimeError::Checkpoint { .. }), "{err}");

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
