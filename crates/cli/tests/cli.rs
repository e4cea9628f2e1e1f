//! The `strata` binary end to end: replaying envs, showing configs, training with a summary,
//! evaluating, and clear errors (non-zero exit, no panic) for a user's mistakes.

#[path = "support/strata.rs"]
mod support;

#[path = "support/optional.rs"]
mod optional;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::{fails_with, stderr, stdout, strata, train_cartpole};

fn fixture(name: &str) -> serde_json::Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/gymnasium")
        .join(format!("{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn env_rollout_replays_a_gymnasium_trajectory() {
    for name in ["cartpole", "mountaincar-continuous"] {
        let doc = fixture(name);
        let case = &doc["cases"][0];
        let tmp = tempfile::tempdir().unwrap();
        let actions = tmp.path().join("actions.json");
        std::fs::write(&actions, case["actions"].to_string()).unwrap();
        let o = strata(&[
            "env",
            "rollout",
            "--env",
            name,
            "--state",
            &case["start_state"].to_string(),
            "--actions",
            actions.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let lines: Vec<serde_json::Value> = stdout(&o)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let steps = case["steps"].as_array().unwrap();
        assert_eq!(lines.len(), steps.len());
        for (ours, theirs) in lines.iter().zip(steps) {
            for (a, b) in ours["obs"]
                .as_array()
                .unwrap()
                .iter()
                .zip(theirs["obs"].as_array().unwrap())
            {
                assert!((a.as_f64().unwrap() - b.as_f64().unwrap()).abs() < 1e-6);
            }
            assert!(
                (ours["reward"].as_f64().unwrap() - theirs["reward"].as_f64().unwrap()).abs()
                    < 1e-6
            );
            assert_eq!(ours["terminated"], theirs["terminated"]);
            assert_eq!(ours["truncated"], theirs["truncated"]);
        }
    }
}

#[test]
fn env_rollout_rejects_bad_input() {
    let tmp = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let p = tmp.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let ok_actions = file("ok", "0 1 0");
    fails_with(
        &[
            "env",
            "rollout",
            "--env",
            "pong",
            "--state",
            "[0]",
            "--actions",
            &ok_actions,
        ],
        "unknown environment `pong`",
    );
    fails_with(
        &[
            "env",
            "rollout",
            "--env",
            "cartpole",
            "--state",
            "[0, 0]",
            "--actions",
            &ok_actions,
        ],
        "expected 4 values",
    );
    fails_with(
        &[
            "env",
            "rollout",
            "--env",
            "cartpole",
            "--state",
            "zero",
            "--actions",
            &ok_actions,
        ],
        "--state",
    );
    fails_with(
        &[
            "env",
            "rollout",
            "--env",
            "cartpole",
            "--state",
            "[0,0,0,0]",
            "--actions",
            &file("bad", "0 2"),
        ],
        "action 1 = 2",
    );
    fails_with(
        &[
            "env",
            "rollout",
            "--env",
            "pendulum",
            "--state",
            "[0,0]",
            "--actions",
            &file("shape", "[[0.1, 0.2]]"),
        ],
        "action 0 has 2 values",
    );
    fails_with(
        &[
            "env",
            "rollout",
            "--env",
            "cartpole",
            "--state",
            "[0,0,0.01,1e200]",
            "--actions",
            &ok_actions,
        ],
        "non-finite",
    );
}

#[test]
fn config_show_applies_preset_file_and_overrides() {
    let o = strata(&[
        "config",
        "show",
        "--env",
        "pendulum",
        "--set",
        "ppo.n_epochs=3",
        "--seed",
        "9",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let shown: toml::Table = toml::from_str(&stdout(&o)).unwrap();
    assert_eq!(shown["env"]["name"].as_str(), Some("pendulum"));
    assert_eq!(shown["ppo"]["n_epochs"].as_integer(), Some(3));
    assert_eq!(
        shown["ppo"]["gamma"]
            .as_float()
            .map(|g| (g * 100.0).round()),
        Some(90.0)
    );
    assert_eq!(shown["train"]["seed"].as_integer(), Some(9));

    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("run.toml");
    std::fs::write(
        &cfg,
        "[env]\nname = \"acrobot\"\n[ppo]\nlearning_rate = 0.001\n",
    )
    .unwrap();
    let o = strata(&["config", "show", "--config", cfg.to_str().unwrap()]);
    // Says which preset lies underneath, as a comment that keeps the output a config file.
    assert!(
        stdout(&o).starts_with("# preset: the built-in `acrobot` preset (rl-zoo3's"),
        "{}",
        stdout(&o)
    );
    let shown: toml::Table = toml::from_str(&stdout(&o)).unwrap();
    assert_eq!(shown["env"]["name"].as_str(), Some("acrobot"));
    assert_eq!(
        shown["env"]["num_envs"].as_integer(),
        Some(16),
        "acrobot preset underneath"
    );
    assert_eq!(shown["ppo"]["learning_rate"].as_float(), Some(0.001));
    // A recurrent core is named in a comment, its keys in the config.
    let o = strata(&[
        "config",
        "show",
        "--env",
        "cartpole-novel",
        "--set",
        "network.core_layers=2",
    ]);
    let text = stdout(&o);
    assert!(
        text.contains(
            "# core: lstm of 64 units, 2 layers, one for the policy and one for the value network"
        ),
        "{text}"
    );
    let shown: toml::Table = toml::from_str(&text).unwrap();
    assert_eq!(shown["network"]["core"].as_str(), Some("lstm"));
    assert_eq!(shown["network"]["core_layers"].as_integer(), Some(2));
}

/// What `config show` prints reads back through `--config` as the same config: keys the
/// hash leaves out at their defaults are written (a core turned off stays off over a
/// preset with one), and a note spanning lines (an env that could not be described, with
/// the fix on its second line) stays a comment.
#[test]
fn a_shown_config_reads_back_as_itself() {
    let tmp = tempfile::tempdir().unwrap();
    let shown = |args: &[&str], python: Option<&Path>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_strata"));
        // The interpreter named is the one asked; no packages reach it from elsewhere.
        command
            .args(["config", "show"])
            .args(args)
            .env_remove("PYTHONPATH");
        if let Some(p) = python {
            command.env("STRATA_PYTHON", p);
        }
        let o = command.output().expect("the binary runs");
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
    };
    let read_back = |text: &str, python: Option<&Path>| {
        let file = tmp.path().join("shown.toml");
        std::fs::write(&file, text).unwrap();
        shown(&["--config", file.to_str().unwrap()], python)
    };
    let body = |text: &str| -> toml::Table { toml::from_str(text).unwrap() };

    let off = shown(
        &["--env", "cartpole-novel", "--set", "network.core=none"],
        None,
    );
    assert_eq!(body(&off)["network"]["core"].as_str(), Some("none"));
    assert_eq!(body(&read_back(&off, None)), body(&off));

    // A Python with neither numpy nor gymnasium: the note says so, over two lines.
    let venv = ["-m", "venv", "--help"];
    if !optional::available("python3", &venv, "STRATA_REQUIRE_GYM", "python3 -m venv") {
        return;
    }
    let bare = tmp.path().join("bare");
    let made = Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&bare)
        .status()
        .expect("python3 runs");
    assert!(made.success(), "python3 -m venv failed");
    let python = bare.join("bin/python");
    let atari = shown(
        &[
            "--env",
            "gym:ALE/Breakout-v5",
            "--set",
            "env.gym.wrappers=[]",
        ],
        Some(&python),
    );
    assert!(atari.contains("# encoder: not known"), "{atari}");
    let wrappers = |t: &toml::Table| t["env"]["gym"]["wrappers"].clone();
    assert_eq!(wrappers(&body(&atari)), toml::Value::Array(Vec::new()));
    assert_eq!(body(&read_back(&atari, Some(&python))), body(&atari));
}

#[test]
fn cluster_commands_refuse_a_bad_nats_timeout_before_connecting() {
    let dir = tempfile::tempdir().unwrap();
    let gateway_dir = dir.path().join("gw").display().to_string();
    let nats = ["--nats", "nats://127.0.0.1:9"];
    for command in [
        vec!["worker"],
        vec!["learner", "--env", "cartpole"],
        vec!["serve", "--dir", gateway_dir.as_str()],
    ] {
        for bad in [
            "--nats-timeout-secs=-1",
            "--nats-timeout-secs=0",
            "--nats-timeout-secs=NaN",
        ] {
            let mut args = command.clone();
            args.extend(nats);
            args.push(bad);
            fails_with(
                &args,
                "--nats-timeout-secs must be a positive number of seconds",
            );
        }
    }
}

#[test]
fn a_worker_process_refuses_settings_that_are_not_its_machines_before_connecting() {
    let worker = ["worker", "--nats", "nats://127.0.0.1:9", "--set"];
    let mut mode = worker.to_vec();
    mode.push("runtime.mode=\"async\"");
    fails_with(
        &mode,
        "`runtime.mode`: a worker process may set only this machine's keys",
    );
    let mut timeout = worker.to_vec();
    timeout.push("runtime.wait_timeout_secs=-1");
    fails_with(&timeout, "runtime.wait_timeout_secs");
}

#[test]
fn bad_configs_are_rejected_naming_the_key() {
    fails_with(
        &["train", "--env", "cartpole", "--workers", "0"],
        "runtime.workers",
    );
    fails_with(
        &["train", "--env", "cartpole", "--workers", "3"],
        "runtime.workers",
    );
    fails_with(
        &[
            "train",
            "--env",
            "cartpole",
            "--mode",
            "async",
            "--set",
            "admission.max_policy_lag=0",
        ],
        "admission.max_policy_lag",
    );
    fails_with(
        &["train", "--env", "cartpole", "--mode", "turbo"],
        "runtime.mode",
    );
    fails_with(&["train", "--env", "cartpole", "--pin-cpus", "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63,64,65,66,67,68,69,70,71,72,73,74,75,76,77,78,79,80,81,82,83,84,85,86,87,88,89,90,91,92,93,94,95,96,97,98,99,100,101,102,103,104,105,106,107,108,109,110,111,112,113,114,115,116,117,118,119,120,121,122,123,124,125,126,127,128,129,130,131,132,133,134,135,136,137,138,139,140,141,142,143,144,145,146,147,148,149,150,151,152,153,154,155,156,157,158,159,160,161,162,163,164,165,166,167,168,169,170,171,172,173,174,175,176,177,178,179,180,181,182,183,184,185,186,187,188,189,190,191,192,193,194,195,196,197,198,199,200,201,202,203,204,205,206,207,208,209,210,211,212,213,214,215,216,217,218,219,220,221,222,223,224,225,226,227,228,229,230,231,232,233,234,235,236,237,238,239,240,241,242,243,244,245,246,247,248,249,250,251,252,253,254,255,256"], "runtime.pin_cpus");
    fails_with(
        &["train", "--env", "cartpole", "--pin-cpus", "4096"],
        "runtime.pin_cpus",
    );
    fails_with(&["train", "--env", "pong"], "unknown env `pong`");
    fails_with(
        &[
            "train",
            "--env",
            "cartpole",
            "--metrics-addr",
            "nowhere:99999",
        ],
        "cannot listen on nowhere:99999",
    );
    // Output captured by the test: not a terminal.
    fails_with(
        &["train", "--env", "cartpole", "--monitor"],
        "stdout is not one",
    );
    fails_with(
        &["train", "--env", "cartpole", "--set", "ppo.learning_rat=1"],
        "learning_rat",
    );
    fails_with(
        &["train", "--env", "cartpole", "--set", "ppo.gamma=2"],
        "ppo.gamma",
    );
    fails_with(
        &["train", "--env", "cartpole", "--set", "env.num_envs=0"],
        "env.num_envs",
    );
    fails_with(
        &[
            "train",
            "--env",
            "cartpole",
            "--set",
            "ppo.batch_size=100000",
        ],
        "ppo.batch_size",
    );
    fails_with(
        &["train", "--env", "cartpole", "--set", "ppo.n_epochs=lots"],
        "n_epochs",
    );
    fails_with(
        &["train", "--env", "cartpole", "--set", "nonsense"],
        "KEY=VALUE",
    );
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("bad.toml");
    std::fs::write(&cfg, "[ppo]\nclip = 0.1\n").unwrap();
    fails_with(&["train", "--config", cfg.to_str().unwrap()], "clip");
    // A value of the wrong type names its key and the file it came from.
    std::fs::write(&cfg, "[ppo]\nn_epochs = \"x\"\n").unwrap();
    let out = strata(&["train", "--config", cfg.to_str().unwrap()]);
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(err.contains("`ppo.n_epochs`"), "{err}");
    assert!(err.contains("bad.toml"), "{err}");
    fails_with(
        &["train", "--config", "/nonexistent/run.toml"],
        "cannot read config file",
    );
}

#[test]
fn train_writes_summary_metrics_and_checkpoint_then_eval_and_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let summary_path = tmp.path().join("summary.json");
    let o = train_cartpole(
        &run,
        &[
            "--max-steps",
            "100000",
            "--stop-when-solved",
            "--deterministic",
            "--summary-json",
            summary_path.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary_path).unwrap()).unwrap();
    for key in [
        "env",
        "seed",
        "total_steps",
        "wall_seconds",
        "env_steps_per_sec",
        "final_mean_return",
        "solved",
        "steps_to_solve",
        "seconds_to_solve",
    ] {
        assert!(summary.get(key).is_some(), "summary lacks {key}: {summary}");
    }
    assert_eq!(summary["env"], "cartpole");
    assert_eq!(summary["solved"], true);
    let metrics = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let first: serde_json::Value = serde_json::from_str(metrics.lines().next().unwrap()).unwrap();
    for key in [
        "policy_loss",
        "value_loss",
        "entropy",
        "approx_kl",
        "clip_fraction",
        "explained_variance",
        "learning_rate",
        "policy_version",
    ] {
        assert!(first.get(key).is_some(), "metrics line lacks {key}");
    }
    assert!(run.join("config.toml").exists());

    let o = strata(&[
        "eval",
        "--checkpoint",
        run.to_str().unwrap(),
        "--episodes",
        "4",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let eval: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(eval["episodes"], 4);
    assert!(eval["mean_return"].as_f64().unwrap() > 300.0);

    // Resuming with a larger budget continues from the saved step.
    let more = tmp.path().join("more");
    let o = strata(&[
        "train",
        "--resume",
        run.to_str().unwrap(),
        "--max-steps",
        "110000",
        "--set",
        "train.stop_when_solved=false",
        "--quiet",
        "--run-dir",
        more.to_str().unwrap(),
        "--summary-json",
        summary_path.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let resumed: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary_path).unwrap()).unwrap();
    assert!(resumed["total_steps"].as_u64().unwrap() >= 110_000);
    fails_with(
        &[
            "train",
            "--resume",
            run.to_str().unwrap(),
            "--set",
            "ppo.gamma=0.5",
            "--quiet",
            "--run-dir",
            more.to_str().unwrap(),
        ],
        "--resume keeps what defines the policy being trained, and this changes ppo.*",
    );
}

#[test]
fn eval_and_resume_reject_missing_or_corrupt_checkpoints() {
    let tmp = tempfile::tempdir().unwrap();
    fails_with(
        &[
            "eval",
            "--checkpoint",
            tmp.path().join("none").to_str().unwrap(),
        ],
        "no checkpoint here",
    );
    let fake = tmp.path().join("fake");
    std::fs::create_dir_all(&fake).unwrap();
    std::fs::write(fake.join("meta.json"), "{}").unwrap();
    fails_with(
        &["eval", "--checkpoint", fake.to_str().unwrap()],
        "corrupt metadata",
    );
    fails_with(
        &["train", "--resume", fake.to_str().unwrap(), "--quiet"],
        "corrupt metadata",
    );
}

/// `strata train --env cartpole` into `run` with a budget it never reaches, once it has
/// trained a little (its metrics file has grown).
fn start_endless_training(run: &std::path::Path, extra: &[&str]) -> std::process::Child {
    let child = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args([
            "train",
            "--env",
            "cartpole",
            "--max-steps",
            "500000000",
            "--quiet",
        ])
        .args(["--run-dir", run.to_str().unwrap()])
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::fs::metadata(run.join("metrics.jsonl")).map_or(0, |m| m.len()) < 2000 {
        assert!(
            std::time::Instant::now() < deadline,
            "training did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child
}

#[test]
fn sigint_stops_training_with_exit_0_and_a_loadable_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let child = start_endless_training(
        &run,
        &["--workers", "2", "--mode", "async", "--log-level", "info"],
    );
    // One process per directory: a second one is refused, naming the first by its pid and
    // command, before it changes anything (the running trainer writes on meanwhile).
    let o = strata(&["train", "--resume", run.to_str().unwrap(), "--quiet"]);
    let err = stderr(&o);
    assert!(!o.status.success());
    assert!(
        err.contains(&format!("in use by pid {}", child.id())) && err.contains("strata train"),
        "{err}"
    );
    fails_with(
        &[
            "ledger",
            "invalidate",
            run.to_str().unwrap(),
            "--trajectory",
            "1",
            "--text",
            "x",
            "--author",
            "y",
        ],
        &format!("in use by pid {}", child.id()),
    );
    let interrupted = std::time::Instant::now();
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    // A hang detector, not a speed check (a stop takes well under a second when idle).
    assert!(
        interrupted.elapsed() < std::time::Duration::from_secs(60),
        "took {:?} to stop",
        interrupted.elapsed()
    );
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("stopping on request") && err.contains("seq="),
        "{err}"
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("stopped on request at ")
            && said.contains(" of 500,000,000 steps; resume with `strata train --resume "),
        "{said}"
    );
    let o = strata(&[
        "eval",
        "--checkpoint",
        run.to_str().unwrap(),
        "--episodes",
        "2",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn a_second_sigint_leaves_at_once_and_the_ledger_still_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    // Updates long enough (about half a second) that the first stop, which finishes the
    // update under way, is still going when the second signal lands.
    let slow = ["--set", "ppo.n_steps=2048", "--set", "ppo.n_epochs=50"];
    let mut child = start_endless_training(&run, &slow);
    let interrupt = |pid: u32| {
        let status = Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    // The second press comes once the first was taken (two signals sent together can
    // merge into one before the process sees either), as an impatient user's would.
    let lines = {
        let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in stderr.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        rx
    };
    interrupt(child.id());
    let mut err = String::new();
    loop {
        let line = lines
            .recv_timeout(std::time::Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("no stop message ({e}); stderr so far:\n{err}"));
        err.push_str(&line);
        err.push('\n');
        if line.contains("Ctrl-C again to leave at once") {
            break;
        }
    }
    interrupt(child.id());
    let status = child.wait().unwrap();
    while let Ok(line) = lines.recv_timeout(std::time::Duration::from_secs(5)) {
        err.push_str(&line);
        err.push('\n');
    }
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("second stop signal"), "{err}");
    // What was written stays readable: the ledger's files are whole or absent.
    let o = strata(&["ledger", "summary", run.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    use std::io::Read;
    let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["config", "show", "--env", "pendulum"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Read nothing and close our end, as `| head -0` would.
    drop(child.stdout.take());
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    child.wait().unwrap();
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_bench_suite_runs_by_name_or_by_its_old_flag_and_two_suites_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, args) in [
        ("named", vec!["bench", "ledger-reads"]),
        ("old-flag", vec!["bench", "--ledger-reads"]),
    ] {
        let json = tmp.path().join(format!("{name}.json"));
        let mut all = args.clone();
        all.extend(["--quick", "--ledger-rows", "20000", "--json"]);
        all.push(json.to_str().unwrap());
        let o = strata(&all);
        assert!(o.status.success(), "{all:?}: {}", stderr(&o));
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let reads = report["ledger_reads"]
            .as_array()
            .expect("the suite's figures");
        assert_eq!(reads.len(), 1, "{report:#}");
        // That suite alone: the others did not run.
        for other in ["ledger", "gateway", "gym", "cnn", "core", "cluster", "soak"] {
            assert!(report[other].is_null(), "{all:?} also ran {other}");
        }
    }
    fails_with(
        &["bench", "ledger", "--gym-only"],
        "choose one benchmark suite: asked for `--gym-only` and `ledger`",
    );
    fails_with(&["bench", "soak"], "`strata bench soak` needs --minutes");
    fails_with(
        &["bench", "soak", "--minutes", "0"],
        "positive number of minutes",
    );
    fails_with(&["bench", "no-such-suite"], "invalid value 'no-such-suite'");
    fails_with(
        &["bench", "gateway", "--agents", "4"],
        "--agents is the soak's",
    );
    fails_with(
        &["bench", "ledger-reads", "--ledger-rows", "2000"],
        "--ledger-rows: each size must be at least 10000 rows, got 2000",
    );
}
