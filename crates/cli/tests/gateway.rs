//! `strata serve` as a real process: kill -9 under load, restart, and account for every
//! acknowledged report; `strata fleet` against it.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde_json::json;
use strata_gateway::{ActResponse, Client, EpisodeInfo, ReportResponse, ReportStatus, TokensFile};
use strata_ledger::{LedgerData, Storage};

/// `strata serve` of CartPole on a free loopback port, its state in `dir`.
fn serve_command(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_strata"));
    command
        .args([
            "serve",
            "--env",
            "cartpole",
            "--addr",
            "127.0.0.1:0",
            "--cooldown-secs",
            "0",
            "--dir",
        ])
        .arg(dir);
    command
}

/// Starts `strata serve` on a free port and waits for its address (the caller reaps it).
#[allow(clippy::zombie_processes)] // returned to the caller, which waits on it
fn serve(dir: &Path) -> (Child, String) {
    serve_with(dir, &[])
}

/// [`serve`] with more arguments.
#[allow(clippy::zombie_processes)] // returned to the caller, which waits on it
fn serve_with(dir: &Path, extra: &[&str]) -> (Child, String) {
    let address = dir.join("address");
    let _ = std::fs::remove_file(&address);
    let mut child = serve_command(dir)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("serve.log")).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(text) = std::fs::read_to_string(&address) {
            if text.ends_with('\n') {
                return (child, text.trim().to_string());
            }
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "strata serve did not start: {}",
                std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The tokens a served gateway wrote into its directory.
fn tokens_of(dir: &Path) -> TokensFile {
    serde_json::from_slice(&std::fs::read(dir.join("tokens.json")).unwrap()).unwrap()
}

/// Waits for `child` to exit, at most `limit`.
fn exit_within(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the process did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn sigterm(child: &Child) {
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
}

/// Retries a call through restarts, with the current address.
fn retry<T>(
    url: &RwLock<String>,
    token: &str,
    call: impl Fn(&Client) -> Result<T, strata_gateway::ClientError>,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let client = Client::new(&url.read().unwrap(), token);
        match call(&client) {
            Ok(v) => return v,
            Err(e) if e.retryable() && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("gave up: {e}"),
        }
    }
}

/// Waits until the clients have had `n` acknowledgements (at most two minutes: a load
/// that stalls fails the test).
fn wait_for_acks<T>(acked: &Mutex<Vec<T>>, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while acked.lock().unwrap().len() < n {
        assert!(
            Instant::now() < deadline,
            "load stalled at {}",
            acked.lock().unwrap().len()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn kill_9_under_load_loses_no_acknowledged_report_and_stores_no_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, first_url) = serve(dir.path());
    let tokens = tokens_of(dir.path());
    let url = Arc::new(RwLock::new(first_url));
    let stop = Arc::new(AtomicBool::new(false));
    let acked: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
    let clients: Vec<_> = tokens
        .agent_tokens()
        .into_iter()
        .take(6)
        .map(|(name, token)| {
            let (url, stop, acked) = (url.clone(), stop.clone(), acked.clone());
            std::thread::spawn(move || {
                let mut episode: Option<u64> = None;
                let mut step = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let e = *episode.get_or_insert_with(|| {
                        let info: EpisodeInfo = retry(&url, &token, |c| c.post("/v1/episodes", &json!({})));
                        info.episode_id
                    });
                    let key = format!("{name}-{step}");
                    let act = json!({"observation": [0.0, 0.1, 0.0, -0.1], "env_seq": step, "idempotency_key": key});
                    let a: ActResponse = retry(&url, &token, |c| c.post(&format!("/v1/episodes/{e}/act"), &act));
                    let done = step % 40 == 39;
                    let report = json!({"observation_after": [0.0, 0.1, 0.0, -0.1], "reward": 1.0, "env_seq": step + 1, "terminated": done});
                    let r: ReportResponse = retry(&url, &token, |c| c.post(&format!("/v1/actions/{}/report", a.action_id), &report));
                    assert!(matches!(r.status, ReportStatus::Stored | ReportStatus::Duplicate), "{r:?}");
                    acked.lock().unwrap().push((format!("{name}/{key}"), r.sample_id.unwrap()));
                    step += 1;
                    if done {
                        episode = None;
                    }
                }
            })
        })
        .collect();
    let wait_for = |n: usize| wait_for_acks(&acked, n);
    for round in 1..=2 {
        wait_for(round * 400);
        child.kill().unwrap(); // SIGKILL under load
        child.wait().unwrap();
        let (next, next_url) = serve(dir.path());
        child = next;
        *url.write().unwrap() = next_url;
    }
    wait_for(1200);
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    sigterm(&child);
    exit_within(&mut child, Duration::from_secs(30));
    let data =
        LedgerData::read(&Storage::open(&dir.path().join("ledger").display().to_string()).unwrap())
            .unwrap();
    let mut stored: HashMap<String, Vec<u64>> = HashMap::new();
    for b in &data.samples {
        for i in 0..b.len() {
            stored
                .entry(b.idempotency_key[i].clone().unwrap())
                .or_default()
                .push(b.sample_id[i]);
        }
    }
    let acked = acked.lock().unwrap();
    let lost: Vec<_> = acked
        .iter()
        .filter(|(k, id)| stored.get(k).is_none_or(|ids| !ids.contains(id)))
        .collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged reports missing: {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    let twice: Vec<_> = stored.iter().filter(|(_, ids)| ids.len() > 1).collect();
    assert!(twice.is_empty(), "stored more than once: {twice:?}");
    assert!(acked.len() >= 1200);
}

/// What a client was told was done: a stored report, or an invalidation.
#[derive(Clone, Debug, PartialEq)]
enum Acked {
    Report { key: String, sample: u64 },
    Trajectory(u64),
    Samples(u64),
}

/// A few milliseconds to a third of a second, different each call: where a kill lands.
fn random_pause() -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    Duration::from_millis(u64::from(nanos % 300))
}

#[test]
fn kill_9_loses_no_acknowledged_invalidation_among_records_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, first_url) = serve_with(dir.path(), &["--release", "manual"]);
    let tokens = tokens_of(dir.path());
    let operator = tokens.operator().to_string();
    let trainer = tokens.trainers.values().next().unwrap().clone();
    // Two versions an agent's own model acts with: every episode is pinned to the second
    // (the candidate, for all of them); a record of the first on one invalidates its
    // trajectory.
    let external = |name: &str| {
        json!({"external": {
            "artifact": {"uri": format!("file:///models/{name}"), "sha256": "0".repeat(64), "size": 1},
            "config_hash": format!("hash-{name}"), "trainer": "kill-test",
        }})
    };
    let admin = Client::new(&first_url, &operator);
    for name in ["a", "b"] {
        admin
            .post::<_, serde_json::Value>("/v1/operator/publish", &external(name))
            .unwrap();
    }
    admin
        .post::<_, serde_json::Value>("/v1/operator/canary", &json!({"fraction": 1.0}))
        .unwrap();
    let url = Arc::new(RwLock::new(first_url));
    let stop = Arc::new(AtomicBool::new(false));
    let acked: Arc<Mutex<Vec<Acked>>> = Arc::default();
    let mut clients: Vec<_> = tokens
        .agent_tokens()
        .into_iter()
        .take(4)
        .map(|(name, token)| {
            let (url, stop, acked) = (url.clone(), stop.clone(), acked.clone());
            std::thread::spawn(move || {
                let mut episode: Option<u64> = None;
                let (mut step, mut in_episode) = (0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    let e = *episode.get_or_insert_with(|| {
                        let info: EpisodeInfo = retry(&url, &token, |c| c.post("/v1/episodes", &json!({})));
                        assert_eq!(info.policy_version, 2, "pinned to the candidate");
                        info.episode_id
                    });
                    let key = format!("{name}-{step}");
                    // Every fifth step acts with the other version: a version switch.
                    let switch = in_episode % 5 == 4;
                    let (version, hash) = if switch { (1, "hash-a") } else { (2, "hash-b") };
                    let record = json!({
                        "observation": [0.0, 0.1, 0.0, -0.1], "action": 1, "policy_version": version,
                        "config_hash": hash, "log_prob": -0.7, "env_seq": 2 * in_episode,
                        "idempotency_key": key,
                    });
                    let r: strata_gateway::RecordResponse =
                        retry(&url, &token, |c| c.post(&format!("/v1/episodes/{e}/record"), &record));
                    if let Some(why) = &r.invalidated {
                        assert!(switch, "{why}");
                        acked.lock().unwrap().push(Acked::Trajectory(r.trajectory_id));
                    }
                    let done = in_episode == 13;
                    let report = json!({"observation_after": [0.0, 0.1, 0.0, -0.1], "reward": 1.0, "env_seq": 2 * in_episode + 1, "terminated": done});
                    let answer: ReportResponse = retry(&url, &token, |c| c.post(&format!("/v1/actions/{}/report", r.action_id), &report));
                    assert!(matches!(answer.status, ReportStatus::Stored | ReportStatus::Duplicate), "{answer:?}");
                    acked.lock().unwrap().push(Acked::Report { key: format!("{name}/{key}"), sample: answer.sample_id.unwrap() });
                    step += 1;
                    in_episode += 1;
                    if done {
                        (episode, in_episode) = (None, 0);
                    }
                }
            })
        })
        .collect();
    // An operator invalidates single samples already acknowledged, as fast as it can.
    clients.push({
        let (url, stop, acked) = (url.clone(), stop.clone(), acked.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let last = acked.lock().unwrap().iter().rev().find_map(|a| match a {
                    Acked::Report { sample, .. } => Some(*sample),
                    _ => None,
                });
                let Some(sample) = last else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let body = json!({"first_sample": sample, "text": "kill test: operator"});
                let _: serde_json::Value = retry(&url, &operator, |c| {
                    c.post("/v1/operator/invalidate", &body)
                });
                acked.lock().unwrap().push(Acked::Samples(sample));
                std::thread::sleep(Duration::from_millis(15));
            }
        })
    });
    let wait_for = |n: usize| wait_for_acks(&acked, n);
    for round in 1..=3 {
        wait_for(round * 250);
        std::thread::sleep(random_pause());
        child.kill().unwrap(); // SIGKILL at a random point under load
        child.wait().unwrap();
        let (next, next_url) = serve_with(dir.path(), &["--release", "manual"]);
        child = next;
        *url.write().unwrap() = next_url;
    }
    wait_for(1000);
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    let invalid_trajectories: std::collections::HashSet<u64> = acked
        .iter()
        .filter_map(|a| match a {
            Acked::Trajectory(t) => Some(*t),
            _ => None,
        })
        .collect();
    let invalid_samples: std::collections::HashSet<u64> = acked
        .iter()
        .filter_map(|a| match a {
            Acked::Samples(s) => Some(*s),
            _ => None,
        })
        .collect();
    // A trainer reading every page now is offered none of what was invalidated.
    let reader = Client::new(&url.read().unwrap(), &trainer);
    let mut cursor = 0;
    loop {
        let page: serde_json::Value = reader
            .get(&format!("/v1/trainer/admitted?cursor={cursor}&limit=10000"))
            .unwrap();
        for s in page["samples"].as_array().unwrap() {
            let (id, t) = (
                s["sample_id"].as_u64().unwrap(),
                s["trajectory_id"].as_u64().unwrap(),
            );
            assert!(
                !invalid_trajectories.contains(&t),
                "sample {id} of invalidated trajectory {t} offered"
            );
            assert!(
                !invalid_samples.contains(&id),
                "invalidated sample {id} offered"
            );
        }
        cursor = page["next_cursor"].as_u64().unwrap();
        if !page["more"].as_bool().unwrap() {
            break;
        }
    }
    sigterm(&child);
    exit_within(&mut child, Duration::from_secs(30));
    let data =
        LedgerData::read(&Storage::open(&dir.path().join("ledger").display().to_string()).unwrap())
            .unwrap();
    let mut stored: HashMap<String, Vec<u64>> = HashMap::new();
    for b in &data.samples {
        for i in 0..b.len() {
            stored
                .entry(b.idempotency_key[i].clone().unwrap())
                .or_default()
                .push(b.sample_id[i]);
        }
    }
    let present = |a: &Acked| match a {
        Acked::Report { key, sample } => stored.get(key).is_some_and(|ids| ids == &[*sample]),
        Acked::Trajectory(t) => data
            .invalidations
            .iter()
            .any(|i| i.target == strata_ledger::Target::Trajectory { id: *t }),
        Acked::Samples(s) => data.invalidations.iter().any(|i| {
            i.target
                == strata_ledger::Target::Samples {
                    first: *s,
                    last: *s,
                }
        }),
    };
    let missing: Vec<&Acked> = acked.iter().filter(|a| !present(a)).collect();
    let count = |f: fn(&Acked) -> bool| acked.iter().filter(|a| f(a)).count();
    let (reports, switches, operator) = (
        count(|a| matches!(a, Acked::Report { .. })),
        count(|a| matches!(a, Acked::Trajectory(_))),
        count(|a| matches!(a, Acked::Samples(_))),
    );
    eprintln!("acknowledged over 3 kills: {reports} reports, {switches} version-switch and {operator} operator invalidations");
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged writes missing or stored twice after kill -9: {:?}",
        missing.len(),
        acked.len(),
        &missing[..missing.len().min(5)]
    );
    assert!(
        switches >= 20 && operator >= 20,
        "{switches} switches, {operator} operator invalidations"
    );
}

#[test]
fn sigterm_as_soon_as_the_port_accepts_stops_cleanly_every_time() {
    // Restarts on the same directory (so each start recovers the last one's state), with
    // SIGTERM within milliseconds of the address appearing: the handler must already be
    // in place, so every round ends by its own exit with status 0, not by the signal.
    let dir = tempfile::tempdir().unwrap();
    for round in 0..20 {
        let (mut child, url) = serve(dir.path());
        if round % 4 == 3 {
            let tokens = tokens_of(dir.path());
            let status =
                Client::new(&url, tokens.operator()).get::<serde_json::Value>("/v1/status");
            assert!(status.is_ok(), "{status:?}");
        }
        sigterm(&child);
        let status = exit_within(&mut child, Duration::from_secs(30));
        let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default();
        assert_eq!(status.code(), Some(0), "round {round}: {status:?}\n{log}");
    }
}

#[test]
fn a_duplicate_answer_is_durable_before_it_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, url) = serve(dir.path());
    let tokens = tokens_of(dir.path());
    let client = Client::new(&url, &tokens.agent_tokens()[0].1);
    let e: EpisodeInfo = client.post("/v1/episodes", &json!({})).unwrap();
    let act = json!({"observation": [0.0, 0.1, 0.0, -0.1], "env_seq": 0, "idempotency_key": "k"});
    let a: ActResponse = client
        .post(&format!("/v1/episodes/{}/act", e.episode_id), &act)
        .unwrap();
    let report = json!({"observation_after": [0.0, 0.1, 0.0, -0.1], "reward": 1.0, "env_seq": 1});
    let path = format!("/v1/actions/{}/report", a.action_id);
    let first: ReportResponse = client.post(&path, &report).unwrap();
    assert_eq!(first.status, ReportStatus::Stored);
    for _ in 0..3 {
        let again: ReportResponse = client.post(&path, &report).unwrap();
        assert_eq!(again.status, ReportStatus::Duplicate);
        assert_eq!(again.sample_id, first.sample_id);
    }
    // No pause: killed the moment the last answer arrived.
    child.kill().unwrap();
    child.wait().unwrap();
    let data =
        LedgerData::read(&Storage::open(&dir.path().join("ledger").display().to_string()).unwrap())
            .unwrap();
    assert_eq!(data.duplicates.len(), 3, "{:?}", data.duplicates);
    assert!(data
        .duplicates
        .iter()
        .all(|d| Some(d.original_sample) == first.sample_id));
    let stored: usize = data.samples.iter().map(|b| b.len()).sum();
    assert_eq!(stored, 1, "the sample itself is stored once");
}

#[test]
fn fleet_runs_against_a_served_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, url) = serve(dir.path());
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args([
            "fleet", "--agents", "4", "--steps", "2000", "--server", &url, "--tokens",
        ])
        .arg(dir.path().join("tokens.json"))
        .output()
        .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("fleet: 2"), "{stdout}");
    // The per-generation table, from the served gateway's ledger beside its tokens file.
    assert!(stdout.contains("generation"), "{stdout}");
    // The gateway's directory reports too: its curves per generation come from the ledger
    // (rows only in the append log after the kill included); the training files it never
    // writes are not reported missing.
    let report = Command::new(env!("CARGO_BIN_EXE_strata"))
        .arg("report")
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&report.stderr);
    assert!(report.status.success(), "{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
    let html = std::fs::read_to_string(dir.path().join("report/report.html")).unwrap();
    assert!(html.contains("a gateway&#39;s directory"));
    // Nothing of the evaluations a gateway does not have.
    assert!(
        !html.contains("x: evaluation"),
        "no evaluation crosses named"
    );
    assert!(
        !html.contains("Evaluations (pinned"),
        "no evaluations section"
    );
    assert!(
        html.contains("\"generation\":0"),
        "a series for generation 0"
    );
    let bad = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["fleet", "--server", &url])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--tokens"));
}

#[test]
fn serve_refuses_bad_connection_limits_naming_them() {
    for (flag, value, needle) in [
        ("--max-connections", "0", "max_connections"),
        ("--header-timeout-secs", "0", "--header-timeout-secs"),
        ("--header-timeout-secs", "nan", "--header-timeout-secs"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_strata"))
            .args(["serve", "--addr", "127.0.0.1:0", flag, value, "--dir"])
            .arg(dir.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag} {value} was accepted");
        assert!(stderr.contains(needle), "{flag} {value}: {stderr}");
        assert!(
            !dir.path().join("tokens.json").exists(),
            "nothing is created for a refused start"
        );
    }
}

#[test]
fn a_second_serve_on_a_held_directory_is_refused_naming_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let (mut first, _url) = serve(dir.path());
    let journal = std::fs::read(dir.path().join("journal.jsonl")).unwrap();
    let out = serve_command(dir.path()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a second gateway served the same directory"
    );
    assert!(
        stderr.contains(&format!("in use by pid {}", first.id())) && stderr.contains("serve"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(dir.path().join("journal.jsonl")).unwrap(),
        journal,
        "the refused gateway wrote to the journal"
    );
    sigterm(&first);
    assert!(exit_within(&mut first, Duration::from_secs(30)).success());
    // The kernel released the lock with the first process: the directory serves again.
    let (mut again, _url) = serve(dir.path());
    sigterm(&again);
    assert!(exit_within(&mut again, Duration::from_secs(30)).success());
}

/// Drives a gateway whose learner is far slower than its agents (a large network trained
/// for many epochs on every 8 reported steps) while an operator invalidates trajectories
/// and rolls back: the learner's queue overflows and sheds segments, and still every
/// request, the operator's included, is answered, each within a bound far below the
/// client's timeout.
#[test]
fn past_its_learners_capacity_every_request_is_answered_within_its_bound() {
    const BOUND: Duration = Duration::from_secs(5);
    let dir = tempfile::tempdir().unwrap();
    let (mut child, url) = serve_with(
        dir.path(),
        &[
            "--set",
            "ppo.n_steps=1",
            "--set",
            "ppo.batch_size=8",
            "--set",
            "ppo.n_epochs=200",
            "--set",
            "network.policy_hidden=[256,256]",
            "--set",
            "network.value_hidden=[256,256]",
        ],
    );
    let tokens = tokens_of(dir.path());
    let stop = Arc::new(AtomicBool::new(false));
    let slowest = Arc::new(Mutex::new((Duration::ZERO, String::new())));
    let trajectories: Arc<Mutex<Vec<u64>>> = Arc::default();
    let timed = {
        let slowest = slowest.clone();
        move |what: String, call: &dyn Fn() -> Result<(), strata_gateway::ClientError>| {
            let t0 = Instant::now();
            if let Err(e) = call() {
                panic!("{what}: {e}");
            }
            let took = t0.elapsed();
            let mut s = slowest.lock().unwrap();
            if took > s.0 {
                *s = (took, what);
            }
        }
    };
    let mut threads: Vec<_> = tokens
        .agent_tokens()
        .into_iter()
        .take(6)
        .map(|(name, token)| {
            let (stop, timed, trajectories) = (stop.clone(), timed.clone(), trajectories.clone());
            let client = Client::new(&url, &token);
            std::thread::spawn(move || {
                let mut step = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let info = std::cell::Cell::new(None);
                    timed("start".into(), &|| {
                        info.set(Some(client.post::<_, EpisodeInfo>("/v1/episodes", &json!({}))?));
                        Ok(())
                    });
                    let info = info.take().unwrap();
                    trajectories.lock().unwrap().push(info.trajectory_id);
                    for t in 0..20u64 {
                        let act = json!({"observation": [0.0, 0.1, 0.0, -0.1], "env_seq": t, "idempotency_key": format!("{name}-{step}")});
                        let action = std::cell::Cell::new(0);
                        timed(format!("act {step}"), &|| {
                            let a: ActResponse = client.post(&format!("/v1/episodes/{}/act", info.episode_id), &act)?;
                            action.set(a.action_id);
                            Ok(())
                        });
                        let report = json!({"observation_after": [0.0, 0.1, 0.0, -0.1], "reward": 1.0, "env_seq": t + 1, "terminated": t == 19});
                        timed(format!("report {step}"), &|| {
                            let _: ReportResponse = client.post(&format!("/v1/actions/{}/report", action.get()), &report)?;
                            Ok(())
                        });
                        step += 1;
                    }
                }
            })
        })
        .collect();
    {
        let (stop, timed, trajectories) = (stop.clone(), timed.clone(), trajectories.clone());
        let operator = Client::new(&url, tokens.operator());
        threads.push(std::thread::spawn(move || {
            let mut round = 0;
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                let Some(&t) = trajectories.lock().unwrap().last() else {
                    continue;
                };
                timed(format!("invalidate {t}"), &|| {
                    let _: serde_json::Value = operator.post(
                        "/v1/operator/invalidate",
                        &json!({"trajectory": t, "text": "overload test"}),
                    )?;
                    Ok(())
                });
                round += 1;
                if round % 10 == 0 {
                    timed("rollback".into(), &|| {
                        let _: serde_json::Value =
                            operator.post("/v1/operator/rollback", &json!({"version": 0}))?;
                        Ok(())
                    });
                }
            }
        }));
    }
    std::thread::sleep(Duration::from_secs(25));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("every request was answered");
    }
    let metrics = Client::new(&url, tokens.operator())
        .get_text("/metrics")
        .unwrap();
    let dropped: f64 = metrics
        .lines()
        .find(|l| !l.starts_with('#') && l.contains("learner_segments_dropped"))
        .and_then(|l| l.split_whitespace().last()?.parse().ok())
        .expect("the metric is exported");
    assert!(
        dropped > 0.0,
        "the learner kept up; the test drove nothing past it"
    );
    let (took, what) = slowest.lock().unwrap().clone();
    assert!(took < BOUND, "{what} took {took:?}");
    sigterm(&child);
    assert!(exit_within(&mut child, Duration::from_secs(30)).success());
}

/// `strata serve --checkpoint RUN/best` serves the trained policy at once (no publish, no
/// promote, no cooldown to wait out), once: a restart with the same flag keeps it.
#[test]
fn serve_checkpoint_serves_a_trained_policy_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let trained = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args([
            "train",
            "--env",
            "cartpole",
            "--max-steps",
            "4096",
            "--run-dir",
        ])
        .arg(&run)
        .output()
        .unwrap();
    assert!(trained.status.success(), "{trained:?}");
    let best = run.join("best");
    assert!(best.join("meta.json").exists());
    let gateway = dir.path().join("gw");
    let serve_best = |extra: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_strata"));
        command
            .args([
                "serve",
                "--addr",
                "127.0.0.1:0",
                "--cooldown-secs",
                "600",
                "--checkpoint",
            ])
            .arg(&best)
            .arg("--dir")
            .arg(&gateway)
            .args(extra);
        command
    };
    for (round, said) in [(1, "stable at once"), (2, "stable already")] {
        let address = gateway.join("address");
        let _ = std::fs::remove_file(&address);
        let mut child = serve_best(&[])
            .stdout(std::fs::File::create(dir.path().join("serve.out")).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let url = loop {
            match std::fs::read_to_string(&address) {
                Ok(t) if t.ends_with('\n') => break t.trim().to_string(),
                _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                _ => panic!("serve did not start"),
            }
        };
        let tokens = tokens_of(&gateway);
        let (_, agent) = tokens.agent_tokens().into_iter().next().unwrap();
        // Despite a ten-minute cooldown, a new episode runs the checkpoint's version now.
        let info: EpisodeInfo = Client::new(&url, &agent)
            .post("/v1/episodes", &json!({}))
            .unwrap();
        assert_eq!(info.policy_version, 1, "round {round}");
        sigterm(&child);
        assert!(exit_within(&mut child, Duration::from_secs(30)).success());
        let out = std::fs::read_to_string(dir.path().join("serve.out")).unwrap();
        assert!(out.contains(said), "round {round}: {out}");
        assert!(out.contains("operator's under \"operators\""), "{out}");
    }
    // Another env than the checkpoint's is refused, naming both.
    let refused = serve_best(&["--env", "pendulum"]).output().unwrap();
    assert!(!refused.status.success());
    let text = String::from_utf8_lossy(&refused.stderr);
    assert!(text.contains("trained on cartpole, not pendulum"), "{text}");
}

#[test]
fn a_fleet_trains_a_recurrent_policy_through_the_gateway() {
    // CartPole without velocities, its LSTM preset on raw observations: every episode
    // keeps its state in the gateway, the learner trains on sequences of its segments.
    let dir = tempfile::tempdir().unwrap();
    let gateway = dir.path().join("gw");
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args([
            "fleet",
            "--env",
            "cartpole-novel",
            "--set",
            "env.normalize_obs=false",
            "--agents",
            "4",
            "--steps",
            "3000",
            "--dir",
        ])
        .arg(&gateway)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = std::fs::read_to_string(gateway.join("learner.jsonl")).unwrap();
    let updates: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(updates.len() >= 3, "{log}");
    for u in &updates {
        assert!(u["trained"].as_u64().unwrap() > 0, "{u}");
        assert!(u["value_loss"].as_f64().unwrap() > 0.0, "{u}");
        // The update's step, measured as the single-machine runs measure it.
        assert!(u["approx_kl_last_epoch"].as_f64().unwrap() >= 0.0, "{u}");
        let clipped = u["clip_fraction"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&clipped), "{u}");
    }
    assert!(stdout.contains("generation"), "{stdout}");
}
