//! One run's learner and rollout workers as separate processes over a real NATS JetStream
//! server: a distributed run is the one-process run bit for bit; Pendulum solves with two
//! worker processes, every fragment in the ledger once though re-publishes were injected;
//! a worker and then the learner killed with SIGKILL, and the server itself restarted,
//! cost nothing acknowledged and train nothing twice (counted by fragment id); Ctrl-C
//! leaves no process.

#[path = "support/nats.rs"]
mod nats;
#[path = "support/optional.rs"]
mod optional;
#[path = "support/procs.rs"]
mod procs;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use nats::{gateway, operator, scenario, Nats, Strata};
use procs::{alive, children_of, wait_until};
use strata_ledger::{LedgerData, Storage};

fn learner(nats: &Nats, run: &str, dir: &Path, extra: &[&str]) -> Strata {
    let url = nats.url();
    let mut args = vec!["learner", "--nats", &url, "--run", run, "--quiet"];
    args.extend(["--run-dir", dir.to_str().unwrap()]);
    args.extend_from_slice(extra);
    Strata::start(&args, &dir.with_extension("log"))
}

fn worker(nats: &Nats, run: &str, log: &Path, extra: &[&str]) -> Strata {
    let url = nats.url();
    let mut args = vec!["worker", "--nats", &url, "--run", run];
    args.extend_from_slice(extra);
    Strata::start(&args, log)
}

/// Valid (not invalidated) samples per (worker, fragment).
fn fragments_in_ledger(run_dir: &Path) -> BTreeMap<(u64, u64), usize> {
    let storage = Storage::open(&run_dir.join("ledger").display().to_string()).unwrap();
    let data = LedgerData::read(&storage).unwrap();
    let invalid: Vec<(u64, u64)> = data
        .invalidations
        .iter()
        .filter_map(|i| match i.target {
            strata_ledger::Target::Samples { first, last } => Some((first, last)),
            _ => None,
        })
        .collect();
    let mut out = BTreeMap::new();
    for b in &data.samples {
        for i in 0..b.len() {
            let id = b.sample_id[i];
            if invalid.iter().any(|&(f, l)| (f..=l).contains(&id)) {
                continue;
            }
            *out.entry((b.worker[i].unwrap(), b.fragment[i].unwrap()))
                .or_insert(0) += 1;
        }
    }
    out
}

/// Every fragment number below `updates` of every worker, each with `rows` samples,
/// once: nothing lost, nothing trained twice.
fn assert_each_fragment_once(run_dir: &Path, workers: u64, updates: u64, rows: usize) {
    let found = fragments_in_ledger(run_dir);
    for w in 0..workers {
        for f in 0..updates {
            assert_eq!(
                found.get(&(w, f)),
                Some(&rows),
                "worker {w} fragment {f}: {found:?}"
            );
        }
    }
    assert_eq!(
        found.len() as u64,
        workers * updates,
        "no fragment beyond the run's: {found:?}"
    );
}

fn summary(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn a_distributed_run_is_the_one_process_run_bit_for_bit() {
    let Some((_serial, tmp, nats)) = scenario() else {
        return;
    };
    let _w0 = worker(&nats, "same", &tmp.path().join("w0.log"), &[]);
    let _w1 = worker(&nats, "same", &tmp.path().join("w1.log"), &[]);
    // Three times under one run name, with other seeds: a later run takes nothing of an
    // earlier one's (versions, fragments, assignments). The third policy has an LSTM: its
    // states travel with the fragments.
    for (env, seed) in [
        ("cartpole", "3"),
        ("cartpole", "4"),
        ("cartpole-novel", "5"),
    ] {
        let common = [
            "--env",
            env,
            "--workers",
            "2",
            "--max-steps",
            "12000",
            "--deterministic",
            "--seed",
            seed,
        ];
        let local = tmp.path().join(format!("local-{seed}"));
        let status = Command::new(env!("CARGO_BIN_EXE_strata"))
            .args(["train", "--quiet", "--run-dir", local.to_str().unwrap()])
            .args(common)
            .status()
            .unwrap();
        assert!(status.success());
        let run = tmp.path().join(format!("remote-{seed}"));
        let mut l = learner(&nats, "same", &run, &common);
        let (status, _) = l.finish(Duration::from_secs(120));
        assert!(status.success(), "{}", l.log());
        assert_eq!(
            std::fs::read(local.join("checkpoint/model.safetensors")).unwrap(),
            std::fs::read(run.join("checkpoint/model.safetensors")).unwrap(),
            "seed {seed}: the same weights"
        );
        assert_each_fragment_once(&run, 2, 12032 / 256, 32 * 4);
    }
}

#[test]
fn pendulum_solves_with_two_worker_processes_and_reposts_are_dropped() {
    let Some((_serial, tmp, nats)) = scenario() else {
        return;
    };
    let run = tmp.path().join("run");
    let summary_path = tmp.path().join("summary.json");
    let mut l = learner(
        &nats,
        "pendulum",
        &run,
        &[
            "--env",
            "pendulum",
            "--workers",
            "2",
            "--max-steps",
            "200000",
            "--stop-when-solved",
            "--summary-json",
            summary_path.to_str().unwrap(),
        ],
    );
    // Worker 0's process publishes every third fragment twice more: under its own
    // message id (the stream drops it) and under a new one (the learner drops it).
    let mut w0 = worker(
        &nats,
        "pendulum",
        &tmp.path().join("w0.log"),
        &["--inject-republish-every", "3"],
    );
    let mut w1 = worker(&nats, "pendulum", &tmp.path().join("w1.log"), &[]);
    // A gateway joins the run while it trains.
    wait_for_step(&run, 4096);
    let gateway_dir = tmp.path().join("gateway");
    let (_g, url) = gateway(&nats, "pendulum", &gateway_dir, &[]);
    let op = operator(&gateway_dir, &url);
    let (status, _) = l.finish(Duration::from_secs(150));
    assert!(status.success(), "{}", l.log());
    let s = summary(&summary_path);
    assert_eq!(s["solved"], true, "{s}");
    // The learner has exited: its last version reached NATS before it did, so the gateway
    // gets it (nothing publishes any more; a version still in the learner's publisher at
    // exit would never come).
    let last = s["policy_version"].as_u64().unwrap();
    wait_until(
        "the gateway to import the run's last version",
        Duration::from_secs(20),
        || {
            op.get::<serde_json::Value>("/v1/status")
                .is_ok_and(|st| st["latest"] == last)
        },
    );
    let updates = s["total_steps"].as_u64().unwrap() / 4096;
    assert_each_fragment_once(&run, 2, updates, 1024 * 2);
    for w in [&mut w0, &mut w1] {
        w.signal(libc::SIGINT);
    }
    let (status, _) = w0.finish(Duration::from_secs(30));
    assert!(status.success(), "{}", w0.log());
    let log = w0.log();
    let line = log
        .lines()
        .find(|l| l.contains("worker stopped"))
        .unwrap_or_default();
    assert!(
        !line.contains("(0 duplicates)"),
        "the stream dropped the same-id copies: {line}"
    );
    assert!(w1.finish(Duration::from_secs(30)).0.success());
}

/// The newest periodic checkpoint's step (0 before the first).
fn newest_checkpoint(run: &Path) -> u64 {
    std::fs::read_dir(run.join("checkpoints"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("step-")?.parse().ok())
        .max()
        .unwrap_or(0)
}

fn wait_for_step(run: &Path, step: u64) {
    wait_until(
        &format!("a checkpoint past step {step}"),
        Duration::from_secs(120),
        || newest_checkpoint(run) > step,
    );
}

#[test]
fn killing_a_worker_then_the_learner_loses_nothing_and_trains_nothing_twice() {
    let Some((_serial, tmp, nats)) = scenario() else {
        return;
    };
    let run = tmp.path().join("run");
    let summary_path = tmp.path().join("summary.json");
    let budget = "200000";
    let mut first = learner(
        &nats,
        "faults",
        &run,
        &[
            "--env",
            "cartpole",
            "--workers",
            "2",
            "--max-steps",
            budget,
            "--set",
            "runtime.restart_after_secs=2",
            "--set",
            "report.eval_episodes=0",
        ],
    );
    let mut a = worker(&nats, "faults", &tmp.path().join("a.log"), &[]);
    let _b = worker(&nats, "faults", &tmp.path().join("b.log"), &[]);
    wait_for_step(&run, 5_000);
    // A standby process; then worker A dies: after two silent seconds its worker is
    // restarted as a new incarnation, which the standby takes.
    let standby = worker(&nats, "faults", &tmp.path().join("standby.log"), &[]);
    std::thread::sleep(Duration::from_millis(500));
    a.kill9();
    wait_until("the standby to take over", Duration::from_secs(60), || {
        standby.log().contains("claimed")
    });
    let after = newest_checkpoint(&run);
    wait_for_step(&run, after + 5_000);
    assert!(first.log().contains("restarting worker"), "{}", first.log());
    // Then the learner dies; a new one resumes from its newest checkpoint.
    first.kill9();
    let mut second = Strata::start(
        &[
            "learner",
            "--nats",
            &nats.url(),
            "--run",
            "faults",
            "--quiet",
            "--resume",
            run.to_str().unwrap(),
            "--summary-json",
            summary_path.to_str().unwrap(),
        ],
        &tmp.path().join("second.log"),
    );
    let (status, _) = second.finish(Duration::from_secs(150));
    assert!(status.success(), "{}", second.log());
    let s = summary(&summary_path);
    let total = s["total_steps"].as_u64().unwrap();
    assert!(total >= 200_000, "{s}");
    assert_each_fragment_once(&run, 2, total / 256, 32 * 4);
}

#[test]
fn a_nats_server_restart_loses_nothing_acknowledged() {
    let Some((_serial, tmp, mut nats)) = scenario() else {
        return;
    };
    let run = tmp.path().join("run");
    let summary_path = tmp.path().join("summary.json");
    let mut l = learner(
        &nats,
        "restart",
        &run,
        &[
            "--env",
            "cartpole",
            "--workers",
            "2",
            "--max-steps",
            "120000",
            "--set",
            "report.eval_episodes=0",
            "--summary-json",
            summary_path.to_str().unwrap(),
        ],
    );
    let _w0 = worker(&nats, "restart", &tmp.path().join("w0.log"), &[]);
    let _w1 = worker(&nats, "restart", &tmp.path().join("w1.log"), &[]);
    wait_for_step(&run, 10_000);
    // SIGKILL the server mid-run and start it again on its store: everything it
    // acknowledged (fragments, versions, assignments) is there; the clients reconnect.
    nats.kill9();
    std::thread::sleep(Duration::from_millis(800));
    nats.launch();
    let (status, _) = l.finish(Duration::from_secs(150));
    assert!(status.success(), "{}", l.log());
    let total = summary(&summary_path)["total_steps"].as_u64().unwrap();
    assert_each_fragment_once(&run, 2, total / 256, 32 * 4);
}

#[test]
fn ctrl_c_stops_the_learner_and_its_workers_and_leaves_no_process() {
    let Some((_serial, tmp, nats)) = scenario() else {
        return;
    };
    let run = tmp.path().join("run");
    // With gymnasium at hand, the workers' envs are processes of their own too.
    let env = if optional::gym_python().is_some() {
        "gym:CartPole-v1"
    } else {
        "cartpole"
    };
    let mut l = learner(
        &nats,
        "ctrlc",
        &run,
        &[
            "--env",
            env,
            "--workers",
            "2",
            "--max-steps",
            "100000000",
            "--set",
            "report.eval_episodes=0",
        ],
    );
    let mut workers: Vec<Strata> = (0..2)
        .map(|i| worker(&nats, "ctrlc", &tmp.path().join(format!("w{i}.log")), &[]))
        .collect();
    wait_for_step(&run, 2_000);
    let mut pids: Vec<u32> = workers.iter().flat_map(|w| children_of(w.pid())).collect();
    pids.extend(workers.iter().map(Strata::pid));
    pids.push(l.pid());
    if env.starts_with("gym:") {
        assert!(
            pids.len() >= 5,
            "each worker runs its envs in a process: {pids:?}"
        );
    }
    // Ctrl-C in each terminal: SIGINT to each process group.
    for p in workers.iter().chain([&l]) {
        // SAFETY: signalling a process group this test started.
        unsafe { libc::kill(-(p.pid() as i32), libc::SIGINT) };
    }
    let (status, out) = l.finish(Duration::from_secs(60));
    assert!(status.success(), "{}", l.log());
    assert!(
        run.join("checkpoint/meta.json").exists(),
        "the stop was checkpointed"
    );
    // How to go on is the learner's command, not `strata train`'s.
    assert!(
        out.contains(&format!(
            "resume with `strata learner --nats {} --run ctrlc --resume",
            nats.url()
        )),
        "{out}"
    );
    for w in &mut workers {
        let (status, _) = w.finish(Duration::from_secs(60));
        assert!(status.success(), "{}", w.log());
    }
    wait_until("every process to be gone", Duration::from_secs(10), || {
        !pids.iter().any(|&p| alive(p))
    });
}

#[test]
fn of_two_gateways_racing_to_promote_exactly_one_wins() {
    let Some((_serial, tmp, nats)) = scenario() else {
        return;
    };
    let mut l = learner(
        &nats,
        "release",
        &tmp.path().join("run"),
        &[
            "--env",
            "cartpole",
            "--max-steps",
            "4096",
            "--set",
            "report.eval_episodes=0",
        ],
    );
    let _w = worker(&nats, "release", &tmp.path().join("w.log"), &[]);
    assert!(l.finish(Duration::from_secs(60)).0.success(), "{}", l.log());
    let (dir1, dir2) = (tmp.path().join("g1"), tmp.path().join("g2"));
    let (_g1, url1) = gateway(&nats, "release", &dir1, &[]);
    let (_g2, url2) = gateway(&nats, "release", &dir2, &[]);
    let (op1, op2) = (operator(&dir1, &url1), operator(&dir2, &url2));
    // Each has imported the run's 17 versions (0 to 16) once it has joined.
    for op in [&op1, &op2] {
        wait_until(
            "the gateways to import the versions",
            Duration::from_secs(30),
            || {
                op.get::<serde_json::Value>("/v1/status")
                    .is_ok_and(|s| s["latest"] == 16)
            },
        );
    }
    // Both start from the same view (no pointer yet) and promote different versions at once.
    let barrier = std::sync::Barrier::new(2);
    let promote = |op: &strata_gateway::Client, version: u64| {
        barrier.wait();
        op.post::<_, serde_json::Value>(
            "/v1/operator/promote",
            &serde_json::json!({"version": version, "force": true}),
        )
    };
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| promote(&op1, 5));
        let b = s.spawn(|| promote(&op2, 9));
        (a.join().unwrap(), b.join().unwrap())
    });
    let (winner, loser) = match (&a, &b) {
        (Ok(_), Err(e)) => (5, e),
        (Err(e), Ok(_)) => (9, e),
        _ => panic!("exactly one promote must win: {a:?} / {b:?}"),
    };
    assert_eq!(loser.status(), Some(409), "{loser}");
    assert!(
        loser.to_string().contains("moved by another operator"),
        "{loser}"
    );
    // Both gateways converge on the winner.
    for op in [&op1, &op2] {
        wait_until(
            "the gateways to serve the winner",
            Duration::from_secs(10),
            || {
                op.get::<serde_json::Value>("/v1/status")
                    .is_ok_and(|s| s["stable"] == winner)
            },
        );
    }
    // Having seen it, the other gateway's operator may move it on: a rollback wins now.
    let other = if winner == 5 { &op2 } else { &op1 };
    other
        .post::<_, serde_json::Value>("/v1/operator/rollback", &serde_json::json!({"version": 2}))
        .unwrap();
    for op in [&op1, &op2] {
        wait_until("the rollback everywhere", Duration::from_secs(10), || {
            op.get::<serde_json::Value>("/v1/status")
                .is_ok_and(|s| s["stable"] == 2)
        });
    }
}
