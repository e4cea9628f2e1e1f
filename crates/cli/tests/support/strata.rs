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

/// Every file below `dir` with its bytes, and every directory (as an empty entry): two
/// snapshots are equal when nothing was added, removed or changed.
pub fn tree(dir: &Path) -> std::collections::BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            let relative = path.strip_prefix(dir).unwrap().to_path_buf();
            if path.is_dir() {
                stack.push(path);
                out.insert(relative, None);
            } else {
                out.insert(relative, Some(std::fs::read(&path).unwrap()));
            }
        }
    }
    out
}

/// Asserts that `dir` holds exactly what `before` recorded, naming the first difference.
pub fn assert_unchanged(
    dir: &Path,
    before: &std::collections::BTreeMap<PathBuf, Option<Vec<u8>>>,
    what: &str,
) {
    let after = tree(dir);
    for (path, content) in before {
        match after.get(path) {
            None => panic!("{what}: {} was removed", path.display()),
            Some(c) if c != content => panic!("{what}: {} was changed", path.display()),
            Some(_) => {}
        }
    }
    if let Some(added) = after.keys().find(|p| !before.contains_key(*p)) {
        panic!("{what}: {} was added", added.display());
    }
}
