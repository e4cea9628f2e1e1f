//! `strata ledger` end to end on a training run's ledger: summaries, metrics, recompute,
//! manifests and invalidations; the files read by an independent reader; and a kill -9
//! while writing leaving only readable files.

#[path = "support/optional.rs"]
mod optional;
#[path = "support/strata.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::{fails_with, parquet_files, stderr, stdout, strata, train_cartpole};

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", stderr(o));
    serde_json::from_str(&stdout(o)).unwrap()
}

#[test]
fn ledger_commands_answer_about_a_training_run() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let r = run.to_str().unwrap();
    let o = train_cartpole(&run, &["--max-steps", "4096", "--mode", "async"]);
    assert!(o.status.success(), "{}", stderr(&o));

    let summary = json(&strata(&["ledger", "summary", r, "--json"]));
    let samples: u64 = summary
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["samples"].as_u64().unwrap())
        .sum();
    assert_eq!(samples, 4096);
    let table = stdout(&strata(&["ledger", "summary", r]));
    assert!(
        table.contains("down_weighted") && table.contains("total"),
        "{table}"
    );

    // An operator invalidates one trajectory: metrics move by exactly that episode set.
    let before = json(&strata(&["ledger", "metrics", r, "--json"]));
    assert_eq!(before["invalidated"]["episodes"], 0);
    let manifest = tmp.path().join("m.jsonl");
    let o = strata(&[
        "ledger",
        "manifest",
        r,
        "--format",
        "json",
        "--out",
        manifest.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: Vec<serde_json::Value> = std::fs::read_to_string(&manifest)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 4096);
    let ended = rows
        .iter()
        .find(|row| row["terminated"] == true)
        .expect("an episode ended");
    let trajectory = ended["trajectory_id"].as_u64().unwrap().to_string();
    let o = strata(&[
        "ledger",
        "invalidate",
        r,
        "--trajectory",
        &trajectory,
        "--reason",
        "human_interrupt",
        "--text",
        "cell door opened",
        "--author",
        "operator:ana",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // It says how many samples it marked: the trajectory's rows in the manifest.
    let marked = rows
        .iter()
        .filter(|row| row["trajectory_id"] == ended["trajectory_id"])
        .count();
    assert!(
        stdout(&o).contains(&format!("{marked} samples marked (human_interrupt)")),
        "{}",
        stdout(&o)
    );
    let after = json(&strata(&["ledger", "metrics", r, "--json"]));
    assert_eq!(after["all"], before["all"]);
    let (all, valid, invalid) = (&after["all"], &after["valid"], &after["invalidated"]);
    assert!(invalid["episodes"].as_u64().unwrap() >= 1);
    assert_eq!(
        all["episodes"].as_u64().unwrap(),
        valid["episodes"].as_u64().unwrap() + invalid["episodes"].as_u64().unwrap()
    );
    let sum = |v: &serde_json::Value| v["sum_return"].as_f64().unwrap();
    assert!((sum(all) - sum(valid) - sum(invalid)).abs() < 1e-9);
    let summary = stdout(&strata(&["ledger", "summary", r]));
    assert!(summary.contains("human_interrupt:"), "{summary}");

    // Recompute under other rules; the manifest in the other formats.
    let rules = tmp.path().join("rules.toml");
    std::fs::write(&rules, "rule = \"drop\"\nmax_age_versions = 0\n").unwrap();
    let re = json(&strata(&[
        "ledger",
        "recompute",
        r,
        "--rules",
        rules.to_str().unwrap(),
        "--json",
    ]));
    let dropped: u64 = re
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["recomputed"][2].as_u64().unwrap())
        .sum();
    // Which fragments were sampled a version behind depends on timing (under load a
    // worker can start a fragment after the learner's publish), so the manifest says how
    // many samples were older than the learner that trained on them.
    let lagged = rows
        .iter()
        .filter(|row| row["learner_version"].as_u64() > row["policy_version"].as_u64())
        .count() as u64;
    assert!(
        lagged >= 256,
        "async sampling ran ahead of the learner: {lagged}"
    );
    assert_eq!(dropped, lagged, "every lagged sample would be dropped");
    for format in ["csv", "parquet"] {
        let out = tmp.path().join(format!("m.{format}"));
        let o = strata(&[
            "ledger",
            "manifest",
            r,
            "--format",
            format,
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let rules_shown = stdout(&strata(&["ledger", "rules", r]));
    assert!(rules_shown.contains("rules version 1"), "{rules_shown}");

    // Bad input: clear errors, and nothing written to the ledger.
    let files = parquet_files(&run.join("ledger")).len();
    let stored = support::tree(&run.join("ledger"));
    for (target, id, needle) in [
        (
            "--trajectory",
            "99999999",
            "no trajectory 99999999 in the ledger",
        ),
        ("--samples", "4096..=5000", "not in the ledger"),
        ("--samples", "9..=3", "the first id is after the last"),
    ] {
        fails_with(
            &[
                "ledger",
                "invalidate",
                r,
                target,
                id,
                "--text",
                "never issued",
                "--author",
                "operator:ana",
            ],
            needle,
        );
        support::assert_unchanged(&run.join("ledger"), &stored, needle);
    }
    std::fs::write(&rules, "rule = \"drop\"\nmin_weight = 7.0\n").unwrap();
    fails_with(
        &["ledger", "recompute", r, "--rules", rules.to_str().unwrap()],
        "min_weight",
    );
    fails_with(
        &["ledger", "rules", r, "--version", "9"],
        "unknown admission-rules version 9",
    );
    fails_with(
        &[
            "ledger",
            "invalidate",
            r,
            "--samples",
            "999999",
            "--text",
            "x",
            "--author",
            "y",
        ],
        "not in the ledger",
    );
    fails_with(
        &[
            "ledger",
            "invalidate",
            r,
            "--trajectory",
            "1",
            "--reason",
            "bored",
            "--text",
            "x",
            "--author",
            "y",
        ],
        "unknown reason code",
    );
    // A directory holding no ledger anywhere is named as such; one holding runs reads
    // their ledgers (here, the one run's) as one.
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    fails_with(
        &["ledger", "summary", empty.to_str().unwrap()],
        "not a ledger",
    );
    let held = strata(&["ledger", "summary", tmp.path().to_str().unwrap()]);
    assert!(held.status.success(), "{}", stderr(&held));
    let direct = strata(&["ledger", "summary", r]);
    assert!(
        stdout(&direct).starts_with(&stdout(&held)),
        "{}",
        stdout(&held)
    );
    fails_with(
        &["ledger", "manifest", r, "--format", "xml", "--out", "x"],
        "unknown manifest format",
    );
    assert_eq!(parquet_files(&run.join("ledger")).len(), files);

    // A corrupt file is named.
    let victim = parquet_files(&run.join("ledger/samples")).pop().unwrap();
    std::fs::write(&victim, b"PAR1 not really").unwrap();
    fails_with(
        &["ledger", "summary", r],
        victim.file_name().unwrap().to_str().unwrap(),
    );
}

/// Runs `scripts/check_ledger.py` (pyarrow, and DuckDB when installed) on a ledger. Skipped
/// when pyarrow is missing, unless `STRATA_REQUIRE_PYARROW=1` (CI installs it).
fn independent_check(ledger: &Path, expect_samples: Option<u64>) {
    if !optional::python_module("pyarrow", "STRATA_REQUIRE_PYARROW") {
        return;
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/check_ledger.py");
    let mut cmd = Command::new("python3");
    cmd.arg(script).arg(ledger);
    if let Some(n) = expect_samples {
        cmd.args(["--expect-samples", &n.to_string()]);
    }
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "check_ledger.py: {}{}",
        stdout(&o),
        stderr(&o)
    );
}

#[test]
fn ledger_files_are_read_by_an_independent_reader() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let o = train_cartpole(&run, &["--max-steps", "4096", "--workers", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    independent_check(&run.join("ledger"), Some(4096));
}

#[test]
fn kill_9_while_writing_leaves_only_readable_files() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args([
            "train",
            "--env",
            "cartpole",
            "--max-steps",
            "500000000",
            "--quiet",
        ])
        .args(["--set", "ledger.flush_interval_secs=0.02"])
        .args(["--run-dir", run.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let log = run.join("ledger/wal/samples");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while parquet_files(&log).len() < 10 {
        assert!(
            std::time::Instant::now() < deadline,
            "no ledger files appeared"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    child.kill().unwrap(); // SIGKILL, mid-write
    child.wait().unwrap();
    // Every visible file is complete: the reader accepts all of them, log included.
    let r = run.to_str().unwrap();
    let before = json(&strata(&["ledger", "summary", r, "--json"]));
    // Compaction (the recovery step) moves the log into generation partitions, losing
    // nothing; then an independent reader checks the partitions.
    let o = strata(&["ledger", "compact", r]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(parquet_files(&run.join("ledger/wal")).is_empty());
    assert_eq!(json(&strata(&["ledger", "summary", r, "--json"])), before);
    independent_check(&run.join("ledger"), None);
}
