//! Run directories never mix, and a command that fails changes nothing: each refusal is
//! checked against a snapshot of every byte of the directory it names.

#[path = "support/strata.rs"]
mod support;

use std::path::Path;

use support::{assert_unchanged, fails_with, stderr, stdout, strata, train_cartpole, tree};

/// The `global_step` and `learning_rate` of every line of a run's metrics file.
fn metrics(run: &Path) -> Vec<(u64, f64)> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["global_step"].as_u64().unwrap(),
                v["learning_rate"].as_f64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_directory_holding_a_run_is_refused_or_moved_aside_never_mixed() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let r = run.to_str().unwrap();
    let o = train_cartpole(&run, &["--max-steps", "8192"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let first = tree(&run);

    // A second run into it is refused, naming what it holds and the choices.
    let o = train_cartpole(&run, &["--max-steps", "8192"]);
    let err = stderr(&o);
    assert!(!o.status.success());
    for needle in [
        "already holds a run",
        "cartpole seed 1",
        "trained to step 8192",
        &format!("--resume {r}"),
        "--overwrite",
        "nothing was changed",
    ] {
        assert!(err.contains(needle), "lacks `{needle}`: {err}");
    }
    assert_unchanged(&run, &first, "a second run into a run directory");

    // A directory with other files in it is no place for a run either.
    let other = tmp.path().join("notes");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("todo.txt"), "buy milk").unwrap();
    let notes = tree(&other);
    let o = train_cartpole(&other, &["--max-steps", "2048"]);
    assert!(stderr(&o).contains("holds no run"), "{}", stderr(&o));
    assert_unchanged(&other, &notes, "a run into a directory of other files");

    // --overwrite moves the old run aside, whole, and starts afresh.
    let o = train_cartpole(&run, &["--max-steps", "4096", "--overwrite"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let aside: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("run.replaced-")
        })
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert!(
        stderr(&o).contains(&aside[0].display().to_string()),
        "{}",
        stderr(&o)
    );
    assert_unchanged(&aside[0], &first, "the run moved aside");
    let steps = metrics(&run);
    assert_eq!(steps.first().unwrap().0, 256, "a fresh run: {steps:?}");
    assert_eq!(steps.last().unwrap().0, 4096);
    assert_eq!(steps.len(), 16, "only the fresh run's updates: {steps:?}");
    let evals = std::fs::read_to_string(run.join("eval.jsonl")).unwrap();
    assert!(
        evals.lines().all(|l| !l.contains("\"global_step\":8192")),
        "the fresh run's evaluations hold the old run's: {evals}"
    );
}

#[test]
fn the_readme_resume_of_a_solved_run_trains_on_and_a_finished_one_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("cp3");
    let r = run.to_str().unwrap();
    let o = train_cartpole(&run, &["--stop-when-solved"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("finished: solved at step"),
        "{}",
        stdout(&o)
    );
    let solved_at = metrics(&run).last().unwrap().0;
    assert!(solved_at < 80_000, "solved at {solved_at}");

    let o = strata(&["train", "--resume", r, "--max-steps", "80000", "--quiet"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("solve stop is lifted"), "{err}");
    assert!(err.contains("from 100,000 to 80,000 steps"), "{err}");
    assert!(
        err.contains("budget: 80,000 steps, rounded up to 80,128 (whole updates of 256 steps)"),
        "{err}"
    );
    assert!(
        stdout(&o).contains("finished: trained its budget of 80,000 steps"),
        "{}",
        stdout(&o)
    );
    let lines = metrics(&run);
    assert!(lines.last().unwrap().0 >= 80_000, "{:?}", lines.last());
    // Steps only go forward, and the learning rate goes on down from where it was: the
    // new budget re-anchors the schedule rather than making it jump.
    assert!(lines.windows(2).all(|w| w[0].0 < w[1].0), "steps went back");
    let at = lines.iter().position(|(s, _)| *s > solved_at).unwrap();
    let (before, after) = (lines[at - 1].1, lines[at].1);
    assert!(
        after <= before && after > 0.9 * before,
        "learning rate {before} -> {after} across the resume"
    );
    assert!(lines.windows(2).all(|w| w[1].1 <= w[0].1 + 1e-12));

    // Its budget is spent: resuming it again is refused, and changes nothing; so is a
    // resume that would move aside the very run it continues.
    let done = tree(&run);
    fails_with(
        &["train", "--resume", r, "--overwrite", "--quiet"],
        "resume continues its run in place",
    );
    assert_unchanged(&run, &done, "--overwrite with --resume into the run itself");
    fails_with(
        &["train", "--resume", r, "--quiet"],
        "has trained its budget",
    );
    assert_unchanged(&run, &done, "resuming a finished run");
}

#[test]
fn a_command_that_fails_after_claiming_its_directory_leaves_it_as_it_was() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let o = train_cartpole(&run, &["--max-steps", "4096"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let before = tree(&run);

    // Another process holds the run's ledger: the resume has claimed the run directory and
    // written its config when the ledger refuses it; all of that is put back.
    let held = strata_dirlock::DirLock::acquire(&run.join("ledger"), "ledger").unwrap();
    let o = strata(&[
        "train",
        "--resume",
        run.to_str().unwrap(),
        "--max-steps",
        "8192",
        "--quiet",
    ]);
    let err = stderr(&o);
    assert!(!o.status.success());
    assert!(
        err.contains(&format!("in use by pid {}", std::process::id())),
        "{err}"
    );
    assert_unchanged(&run, &before, "a resume refused by the ledger");
    drop(held);

    // A new run whose worker fails at once (a crash loop of one): the directory it
    // created is gone again.
    let fresh = tmp.path().join("fresh");
    let config = tmp.path().join("faulty.toml");
    std::fs::write(
        &config,
        "[env]\nname = \"cartpole\"\n[env.fault]\nkind = \"panic\"\nat_step = 3\n\
         [runtime]\nmax_consecutive_failures = 1\n",
    )
    .unwrap();
    let o = strata(&[
        "train",
        "--config",
        config.to_str().unwrap(),
        "--quiet",
        "--run-dir",
        fresh.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("a crash loop"), "{}", stderr(&o));
    assert!(!fresh.exists(), "the failed run left {}", fresh.display());

    // The same failure with --overwrite: the run it moved aside is moved back.
    let o = strata(&[
        "train",
        "--config",
        config.to_str().unwrap(),
        "--quiet",
        "--overwrite",
        "--run-dir",
        run.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert_unchanged(&run, &before, "a failed --overwrite");
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".replaced-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// The hash a `config.toml` opens with, and the hash of the config it holds (as
/// `strata config show` computes it).
fn header_and_body_hashes(run: &Path) -> (String, String) {
    let text = std::fs::read_to_string(run.join("config.toml")).unwrap();
    let header = text
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("# config hash "))
        .unwrap()
        .to_string();
    let o = strata(&[
        "config",
        "show",
        "--config",
        run.join("config.toml").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let body = stdout(&o)
        .lines()
        .find_map(|l| l.strip_prefix("# config hash ").map(str::to_string))
        .unwrap();
    (header, body)
}

#[test]
fn a_resume_with_a_new_budget_goes_on_under_a_new_hash_bound_at_its_first_version() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("r");
    let r = run.to_str().unwrap();
    let o = train_cartpole(&run, &["--seed", "1", "--max-steps", "20000"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (first, body) = header_and_body_hashes(&run);
    assert_eq!(first, body, "a fresh run's header is its body's hash");

    let o = strata(&["train", "--resume", r, "--max-steps", "40000", "--quiet"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    let (second, body) = header_and_body_hashes(&run);
    assert_eq!(second, body, "the header always matches the body");
    assert_ne!(second, first, "a new budget is a new identity");
    assert!(
        err.contains(&format!("config hash {second} (was {first})")),
        "{err}"
    );
    // A fresh run of the same config has the same identity.
    let o = strata(&[
        "config",
        "show",
        "--env",
        "cartpole",
        "--seed",
        "1",
        "--max-steps",
        "40000",
    ]);
    assert!(
        stdout(&o).contains(&format!("# config hash {second}\n")),
        "{}",
        stdout(&o)
    );

    // The ledger binds the version the resume started at to the new hash, and every
    // sample says which of the two configs produced it.
    let storage = strata_ledger::Storage::open(&run.join("ledger").display().to_string()).unwrap();
    let data = strata_ledger::LedgerData::read(&storage).unwrap();
    let resumed = data
        .generations
        .iter()
        .find(|g| g.config_hash == second)
        .expect("the new hash is bound");
    assert_eq!(resumed.operation, "resume");
    let start = resumed.policy_version;
    assert!(start > 0);
    assert!(data
        .generations
        .iter()
        .filter(|g| g.policy_version < start)
        .all(|g| g.config_hash == first));
    let mut by_hash = std::collections::HashMap::<&str, (u64, u64)>::new();
    for b in &data.samples {
        for &v in &b.policy_version {
            let (lo, hi) = by_hash
                .entry(b.config_hash.as_str())
                .or_insert((u64::MAX, 0));
            (*lo, *hi) = ((*lo).min(v), (*hi).max(v));
        }
    }
    let (old_lo, old_hi) = by_hash[first.as_str()];
    let (new_lo, _) = by_hash[second.as_str()];
    assert_eq!(old_lo, 0);
    assert!(
        old_hi <= start && new_lo >= start,
        "{by_hash:?} with the new hash from {start}"
    );
}
