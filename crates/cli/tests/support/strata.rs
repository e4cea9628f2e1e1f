//! Running the `strata` binary from a test, and the files it leaves.

// Each test binary that includes this file uses its own subset.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs `strata args` to completion.
pub fn strata(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .output()
        .expect("the binary runs")
}

/// Trains CartPole quietly into `run_dir`, with `extra` arguments.
pub fn train_cartpole(run_dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "train",
        "--env",
        "cartpole",
        "--quiet",
        "--run-dir",
        run_dir.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    strata(&args)
}

/// Its stdout as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Its stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every Parquet file below `dir`, sorted.
pub fn parquet_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "parquet") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Fails with `needle` in stderr, a non-zero exit, and no panic.
pub fn fails_with(args: &[&str], needle: &str) {
    let o = strata(args);
    let err = stderr(&o);
    assert!(!o.status.success(), "{args:?} succeeded");
    assert!(
        err.contains(needle),
        "{args:?}: stderr lacks `{needle}`:\n{err}"
    );
    assert!(!err.contains("panicked"), "{args:?} panicked:\n{err}");
}
