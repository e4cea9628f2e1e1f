//! `strata train --env gym:...` as a real process tree: Ctrl-C (SIGINT to the terminal's
//! process group), SIGTERM and kill -9 of the trainer each leave no env process and no
//! shared-memory segment behind; the first two still end with a checkpoint and exit 0.

#[path = "support/optional.rs"]
mod optional;
#[path = "support/procs.rs"]
mod procs;

use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use optional::gym_python;
use procs::{alive, children_of, processes, wait_until};

/// One trainer at a time: the checks look at every process on the machine.
static SERIAL: Mutex<()> = Mutex::new(());

/// Processes that map one of trainer `trainer`'s env regions (anonymous memory files
/// named after it), anywhere on the machine.
fn region_holders(trainer: u32) -> Vec<u32> {
    let name = format!("memfd:strata-gym-{trainer} ");
    processes()
        .into_iter()
        .filter(|&(pid, _, _)| {
            std::fs::read_to_string(format!("/proc/{pid}/maps"))
                .is_ok_and(|maps| maps.contains(&name))
        })
        .map(|(pid, _, _)| pid)
        .collect()
}

/// A long gym:CartPole-v1 training in a process group of its own (as a shell starts a
/// foreground job), once its two env processes are up.
fn start_training(python: &str, run: &std::path::Path, extra: &[&str]) -> (Child, Vec<u32>) {
    use std::os::unix::process::CommandExt;
    let child = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args([
            "train",
            "--env",
            "gym:CartPole-v1",
            "--quiet",
            "--max-steps",
            "100000000",
        ])
        .args([
            "--set",
            "runtime.envs_per_process=4",
            "--set",
            "report.eval_episodes=0",
        ])
        .args(extra)
        .args(["--log-level", "info", "--run-dir", run.to_str().unwrap()])
        .env("STRATA_PYTHON", python)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = child.id();
    // The trainer and (once they have made their envs) its env processes map the regions.
    wait_until("the env processes", Duration::from_secs(60), || {
        children_of(pid).len() >= 2 && region_holders(pid).len() >= 3
    });
    let envs = children_of(pid);
    (child, envs)
}

fn signal(pid: i32, signal: i32) {
    // SAFETY: signalling a process (group) this test started.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
}

/// An orderly stop: exit 0, a checkpoint, every env process reaped, no region left.
fn stops_cleanly(sig: i32, to_group: bool) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(python) = gym_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    // Checkpoints every update: one exists once it has trained.
    let (child, envs) = start_training(&python, &run, &["--set", "train.checkpoint_every=256"]);
    wait_until("a first update", Duration::from_secs(60), || {
        run.join("checkpoints").exists()
    });
    let pid = child.id() as i32;
    signal(if to_group { -pid } else { pid }, sig);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {err}", out.status);
    assert!(err.contains("stopping on request"), "{err}");
    assert!(run.join("checkpoint/meta.json").exists());
    assert!(
        envs.iter().all(|&p| !alive(p)),
        "env processes left: {envs:?}"
    );
    let left = region_holders(pid as u32);
    assert!(left.is_empty(), "regions left: {left:?}");
}

#[test]
fn ctrl_c_stops_the_training_and_its_env_processes() {
    // A terminal's Ctrl-C reaches the whole foreground group; the env processes are in
    // groups of their own and are stopped by the trainer, in order.
    stops_cleanly(libc::SIGINT, true);
}

#[test]
fn sigterm_stops_the_training_and_its_env_processes() {
    stops_cleanly(libc::SIGTERM, false);
}

#[test]
fn kill_9_of_the_trainer_takes_its_env_processes_with_it() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(python) = gym_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (mut child, envs) = start_training(&python, &dir.path().join("run"), &[]);
    let pid = child.id();
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap();
    child.wait().unwrap();
    // The parent-death signal kills them; whoever inherits them reaps them (a zombie
    // counts as dead: it holds no memory).
    wait_until("the env processes to die", Duration::from_secs(10), || {
        envs.iter().all(|&p| !alive(p))
    });
    wait_until(
        "the regions to be unmapped",
        Duration::from_secs(10),
        || region_holders(pid).is_empty(),
    );
}

#[test]
fn kill_9_of_the_trainer_kills_an_env_process_stuck_in_its_env() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(python) = gym_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    // Worker 0's first process sleeps inside env.step from its 40th step and is not
    // reading its socket: only the parent-death signal can end it.
    let hang = [
        "--set",
        "env.fault={ kind = \"hang\", at_step = 40, hang_seconds = 600.0 }",
        "--set",
        "runtime.restart_after_secs=600",
    ];
    let (mut child, envs) = start_training(&python, &dir.path().join("run"), &hang);
    let stuck = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/wchan")).is_ok_and(|w| w.contains("nanosleep"))
    };
    wait_until("an env process to hang", Duration::from_secs(30), || {
        envs.iter().any(|&p| stuck(p))
    });
    child.kill().unwrap();
    child.wait().unwrap();
    wait_until(
        "the stuck env process to die",
        Duration::from_secs(10),
        || envs.iter().all(|&p| !alive(p)),
    );
}

#[test]
fn an_env_process_killed_from_outside_costs_a_restart_not_the_training() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(python) = gym_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let (child, envs) = start_training(&python, &run, &["--set", "train.checkpoint_every=256"]);
    // Mid-training (a process that dies while its worker is still starting costs that
    // worker's start instead): updates are being written.
    wait_until("training to run", Duration::from_secs(60), || {
        std::fs::metadata(run.join("metrics.jsonl")).is_ok_and(|m| m.len() > 0)
    });
    // As the OOM killer would: the trainer's next message to it finds it gone (no SIGPIPE
    // may take the trainer down with it).
    signal(envs[0] as i32, libc::SIGKILL);
    let pid = child.id();
    wait_until("a replacement env process", Duration::from_secs(60), || {
        children_of(pid).iter().any(|p| !envs.contains(p))
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(alive(pid), "the trainer survived");
    signal(pid as i32, libc::SIGTERM);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {err}", out.status);
    // Only the killed process is restarted; its worker and sibling processes go on.
    assert!(
        err.contains("an env process failed and was restarted alone"),
        "{err}"
    );
    assert!(!err.contains("restarting worker"), "{err}");
    assert!(
        err.contains("SIGKILL"),
        "the reason names the signal: {err}"
    );
}
