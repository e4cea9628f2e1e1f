//! Memory that just works: turning a recurrent core on (`--set network.core=lstm`) on an
//! env without a preset needs no other setting. The sequence length is chosen by rule
//! (`ppo.sequence_length = 0`: whole fragments when a minibatch holds them, else the
//! longest of 8-32 steps dividing both), `config show` says so, and on a task whose answer
//! depends on a cue shown steps earlier the core learns what memory allows where the MLP
//! can only guess.

#[path = "support/optional.rs"]
mod optional;

use std::path::Path;
use std::process::{Command, Output};

fn strata(python: &str, dir: &Path, args: &[&str]) -> Output {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .arg("--set")
        .arg(format!("runtime.python_path={}", examples.display()))
        .current_dir(dir)
        .env("STRATA_PYTHON", python)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn a_core_on_the_parity_suites_envs_needs_no_other_setting() {
    // Its MuJoCo and classic-control envs (the Box2D ones need a package the tests' Python
    // does not pin).
    let Some(python) = optional::gym_python_with("gymnasium, mujoco") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for (env, extra) in [
        ("InvertedPendulum-v5", ""),
        ("InvertedPendulum-v5", "env.num_envs=8 ppo.n_steps=256"),
        ("InvertedDoublePendulum-v5", ""),
        ("Reacher-v5", ""),
        ("Swimmer-v5", "env.num_envs=4 ppo.n_steps=512"),
        ("Walker2d-v5", ""),
        ("CartPole-v0", ""),
    ] {
        let mut args = vec!["config", "show", "--env"];
        let gym = format!("gym:{env}");
        args.push(&gym);
        for set in ["network.core=lstm"]
            .into_iter()
            .chain(extra.split_whitespace())
        {
            args.extend(["--set", set]);
        }
        let o = strata(&python, dir.path(), &args);
        let out = text(&o);
        assert!(o.status.success(), "{args:?}:\n{out}");
        assert!(
            out.contains("# sequences: ") && out.contains("automatic"),
            "{args:?} says how its sequences were chosen:\n{out}"
        );
    }
    // And one of them trains so, a step budget of a few updates.
    let o = strata(
        &python,
        dir.path(),
        &[
            "train",
            "--env",
            "gym:InvertedPendulum-v5",
            "--set",
            "network.core=lstm",
            "--max-steps",
            "4096",
            "--set",
            "report.eval_episodes=0",
            "--run-dir",
            "ip",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
}

/// Greedy success rate of a run's final policy on the cue task, over 200 episodes.
fn success(python: &str, dir: &Path, run: &str) -> f64 {
    // The run's config holds runtime.python_path: eval takes no settings.
    let o = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["eval", "--checkpoint", run, "--episodes", "200"])
        .current_dir(dir)
        .env("STRATA_PYTHON", python)
        .output()
        .unwrap();
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    let rate = out
        .split("success ")
        .nth(1)
        .and_then(|s| s.split('%').next())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no success rate in:\n{out}"));
    rate / 100.0
}

#[test]
fn with_a_core_and_nothing_else_set_a_cue_is_remembered() {
    let Some(python) = optional::gym_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for (run, core) in [("lstm", "lstm"), ("mlp", "none")] {
        let core = format!("network.core={core}");
        let o = strata(
            &python,
            dir.path(),
            &[
                "train",
                "--env",
                "gym:my_pkg.cue:make_cue",
                "--set",
                &core,
                "--max-steps",
                "60000",
                "--set",
                "report.eval_episodes=0",
                "--run-dir",
                run,
            ],
        );
        assert!(o.status.success(), "{run}: {}", text(&o));
    }
    let (lstm, mlp) = (
        success(&python, dir.path(), "lstm"),
        success(&python, dir.path(), "mlp"),
    );
    assert!(lstm >= 0.95, "the core remembers the cue: {lstm}");
    assert!(mlp <= 0.7, "without memory the answer is a guess: {mlp}");
}
