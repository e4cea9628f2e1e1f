//! `STRATA_KERNEL_PATH` through the real binary: `bench --kernel-paths` lists what the
//! CPU runs (whatever the variable says), a path the CPU lacks or an unknown name is
//! refused before any work with the reason, and a listed path trains.

use std::process::Command;

fn strata<A: AsRef<std::ffi::OsStr>>(path: &str, args: &[A]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .env("STRATA_KERNEL_PATH", path)
        .output()
        .unwrap()
}

#[test]
fn forced_kernel_paths_are_listed_refused_or_run() {
    let listed = strata("no-such-path", &["bench", "--kernel-paths"]);
    assert!(listed.status.success(), "{listed:?}");
    let paths: Vec<String> = String::from_utf8(listed.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(
        paths.first().map(String::as_str),
        Some("portable"),
        "{paths:?}"
    );

    let unknown = strata("sse9", &["config", "show", "--env", "cartpole"]);
    let said = String::from_utf8_lossy(&unknown.stderr);
    assert_eq!(unknown.status.code(), Some(2), "{said}");
    assert!(
        said.contains("STRATA_KERNEL_PATH=\"sse9\" names no kernel path"),
        "{said}"
    );
    assert!(
        said.contains(&paths.join(", ")),
        "names what this CPU supports: {said}"
    );

    // x86-64 lacks neon, aarch64 lacks avx2: either way one path is foreign here.
    let foreign = if paths.iter().any(|p| p == "neon") {
        "avx2"
    } else {
        "neon"
    };
    let lacking = strata(
        foreign,
        &["train", "--env", "cartpole", "--max-steps", "10"],
    );
    let said = String::from_utf8_lossy(&lacking.stderr);
    assert_eq!(lacking.status.code(), Some(2), "{said}");
    assert!(
        said.contains(&format!("kernel path `{foreign}` needs")),
        "{said}"
    );

    let dir = tempfile::tempdir().unwrap();
    for path in &paths {
        let run = dir.path().join(path);
        let args = [
            "train",
            "--env",
            "cartpole",
            "--max-steps",
            "2000",
            "--quiet",
            "--run-dir",
        ];
        let mut args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
        args.push(run.clone().into());
        let trained = strata(path, &args);
        assert!(trained.status.success(), "{path}: {trained:?}");
        assert!(run.join("checkpoint").is_dir(), "{path}: no checkpoint");
    }
}
