//! What a newcomer meets before a `gym:` env runs: a Python without numpy or gymnasium,
//! a factory module Python cannot find, `runtime.python_path` given as one plain path.
//! Each problem is said once, with the interpreter and the fix.

#[path = "support/optional.rs"]
mod optional;

use std::path::Path;
use std::process::{Command, Output};

use optional::gym_python;

fn train(python: &str, dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["train", "--quiet", "--max-steps", "2048"])
        .args(["--set", "report.eval_episodes=0"])
        .args(args)
        .arg("--run-dir")
        .arg(dir.join("run"))
        .current_dir(dir)
        .env("STRATA_PYTHON", python)
        .output()
        .unwrap()
}

#[test]
fn a_python_without_the_packages_is_said_once_with_the_fix() {
    // Only where a Python with gymnasium exists: the advice must be true on this machine.
    let Some(_) = gym_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let venv = dir.path().join("bare");
    let made = Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .unwrap();
    assert!(made.success());
    let bare = venv.join("bin/python");
    let out = train(
        bare.to_str().unwrap(),
        dir.path(),
        &["--env", "gym:CartPole-v1"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.matches("no numpy and no gymnasium").count(),
        1,
        "said once: {stderr}"
    );
    assert!(stderr.contains(bare.to_str().unwrap()), "{stderr}");
    assert!(stderr.contains("STRATA_PYTHON"), "{stderr}");
    assert!(!stderr.contains("ModuleNotFoundError"), "{stderr}");
    assert!(!stderr.contains("caused by"), "{stderr}");
    assert!(
        !dir.path().join("run").exists(),
        "a failed start leaves no run"
    );
}

#[test]
fn a_factory_module_is_found_through_python_path_given_as_one_path() {
    let Some(python) = gym_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let envs = dir.path().join("my_envs");
    std::fs::create_dir_all(envs.join("my_pkg")).unwrap();
    std::fs::write(envs.join("my_pkg/__init__.py"), "").unwrap();
    std::fs::write(
        envs.join("my_pkg/envs.py"),
        "import gymnasium as gym\n\ndef make_env(**kwargs):\n    return gym.make('CartPole-v1', **kwargs)\n",
    )
    .unwrap();
    let target = ["--env", "gym:my_pkg.envs:make_env"];
    // Without the path: the module is named, and where to put its directory.
    let out = train(&python, dir.path(), &target);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.matches("runtime.python_path").count(), 1, "{stderr}");
    assert!(stderr.contains("`my_pkg.envs`"), "{stderr}");
    // With it, as one plain path relative to where strata runs.
    let with_path = [&target[..], &["--set", "runtime.python_path=my_envs"]].concat();
    let out = train(&python, dir.path(), &with_path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let config = std::fs::read_to_string(dir.path().join("run/config.toml")).unwrap();
    assert!(config.contains("python_path = [\"my_envs\"]"), "{config}");
}
