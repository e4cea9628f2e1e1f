//! Deployed agents beyond one machine, over a real NATS JetStream server: three gateways
//! (`strata serve --nats --gateway-id N`) feed one learner (`strata learner
//! --from-gateways`) while a simulated fleet reports through all three. The return
//! improves over the learner's versions; every acknowledged report is in the union of the
//! gateways' ledgers once and trained at most once; a gateway, the learner and the NATS
//! server SIGKILLed and restarted change neither; admission rules set through one
//! gateway hold for the learner, and a rollback through another moves the learner to that
//! version and its rules; an invalidation recorded by gateway 2 of a trajectory
//! gateway 1 issued is honoured by the learner; an agent that brings an episode to
//! another gateway is told where it belongs; `strata ledger` reads the four ledgers as
//! one.

#[path = "support/nats.rs"]
mod nats;
#[path = "support/optional.rs"]
mod optional;
#[path = "support/procs.rs"]
mod procs;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use nats::{free_port, gateway, operator, scenario, Nats, Strata};
use procs::wait_until;
use strata_gateway::{ids, run_fleet, FleetReport, FleetSettings, TokensFile};
use strata_ledger::{DecisionKind, LedgerData, Storage};

const RUN: &str = "deployed";

fn ledger(dir: &Path) -> LedgerData {
    let storage = Storage::open(&dir.join("ledger").display().to_string()).unwrap();
    LedgerData::read(&storage).unwrap()
}

fn learner(nats: &Nats, dir: &Path) -> Strata {
    let url = nats.url();
    Strata::start(
        &[
            "learner",
            "--nats",
            &url,
            "--run",
            RUN,
            "--from-gateways",
            "--env",
            "cartpole",
            "--run-dir",
            dir.to_str().unwrap(),
        ],
        &dir.with_extension(format!("log{}", free_port())),
    )
}

/// Gateway `id` of the run, in `dir`, on `port`.
fn start_gateway(nats: &Nats, dir: &Path, id: u16, port: u16) -> (Strata, String) {
    let id = id.to_string();
    let addr = format!("127.0.0.1:{port}");
    gateway(
        nats,
        RUN,
        dir,
        &["--gateway-id", &id, "--release", "auto", "--addr", &addr],
    )
}

/// Runs `steps` env steps of `agents` agents through each gateway at once.
fn fleets(
    gateways: &[(std::path::PathBuf, String)],
    agents: usize,
    steps: u64,
    seed: u64,
) -> Vec<FleetReport> {
    std::thread::scope(|s| {
        let runs: Vec<_> = gateways
            .iter()
            .enumerate()
            .map(|(k, (dir, url))| {
                s.spawn(move || {
                    let tokens: TokensFile =
                        serde_json::from_slice(&std::fs::read(dir.join("tokens.json")).unwrap())
                            .unwrap();
                    let mut f = FleetSettings::new(url, tokens, agents, "cartpole");
                    f.steps = steps;
                    f.seed = seed * 10 + k as u64;
                    f.max_duration = Duration::from_secs(45);
                    run_fleet(&f).unwrap()
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    })
}

/// `strata fleet` with `agents` agents spread over `gateways`: its report (from
/// `--summary-json`), after checking it printed a line per gateway and the table per
/// generation across them.
fn cli_fleet(
    gateways: &[(std::path::PathBuf, String)],
    agents: usize,
    steps: u64,
    summary: &Path,
) -> FleetReport {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_strata"));
    command.args([
        "fleet",
        "--env",
        "cartpole",
        "--agents",
        &agents.to_string(),
    ]);
    command
        .args(["--steps", &steps.to_string(), "--summary-json"])
        .arg(summary);
    for (dir, url) in gateways {
        command
            .args(["--server", url, "--tokens"])
            .arg(dir.join("tokens.json"));
    }
    let out = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (_, url) in gateways {
        assert!(stdout.contains(&format!("{url}: fleet:")), "{stdout}");
    }
    assert!(stdout.contains("generations"), "{stdout}");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(summary).unwrap()).unwrap();
    let fleet = &json["fleet"];
    let mut report = FleetReport {
        steps: fleet["steps"].as_u64().unwrap(),
        stored: fleet["stored"].as_u64().unwrap(),
        ..FleetReport::default()
    };
    assert!(report.steps >= steps, "{fleet}");
    for (v, pair) in fleet["returns_by_version"].as_object().unwrap() {
        report.returns_by_version.insert(
            v.parse().unwrap(),
            (pair[0].as_u64().unwrap(), pair[1].as_f64().unwrap()),
        );
    }
    report
}

fn updates(dir: &Path) -> u64 {
    std::fs::read_to_string(dir.join("learner.jsonl"))
        .map(|t| t.lines().count() as u64)
        .unwrap_or(0)
}

#[test]
fn three_gateways_feed_one_learner_through_kills_and_invalidations() {
    let Some((_serial, tmp, mut nats)) = scenario() else {
        return;
    };
    let learner_dir = tmp.path().join("learner");
    let mut l = learner(&nats, &learner_dir);
    wait_until(
        "the learner's first version",
        Duration::from_secs(60),
        || {
            strata_cluster::deployed_messages(&strata_cluster::Meeting {
                url: nats.url(),
                run: RUN.into(),
                timeout: Duration::from_secs(2),
                access: Default::default(),
            })
            .is_ok()
        },
    );
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let dirs: Vec<_> = (1..=3).map(|g| tmp.path().join(format!("g{g}"))).collect();
    let mut procs = Vec::new();
    let mut served = Vec::new();
    for (k, dir) in dirs.iter().enumerate() {
        let (p, url) = start_gateway(&nats, dir, k as u16 + 1, ports[k]);
        procs.push(p);
        served.push((dir.clone(), url));
    }

    // Gateway 2 invalidates a trajectory gateway 1 will issue: the learner trains none of
    // it.
    let foreign = ids::id_base(1) + 2;
    operator(&dirs[1], &served[1].1)
        .post::<_, serde_json::Value>(
            "/v1/operator/invalidate",
            &serde_json::json!({"trajectory": foreign, "text": "sensor fault at site 1"}),
        )
        .unwrap();

    // The first phase through `strata fleet` over the three gateways.
    let first = [cli_fleet(&served, 6, 6_000, &tmp.path().join("fleet.json"))];
    wait_until("the learner to train", Duration::from_secs(60), || {
        updates(&learner_dir) >= 3
    });

    // An agent that brings gateway 1's episode to gateway 2 is told where it belongs
    // (episode ids are numbered per gateway too), never given gateway 2's own.
    let tokens2: TokensFile =
        serde_json::from_slice(&std::fs::read(dirs[1].join("tokens.json")).unwrap()).unwrap();
    let agent2 = strata_gateway::Client::new(&served[1].1, &tokens2.agent_tokens()[0].1);
    let moved = agent2
        .get::<serde_json::Value>(&format!("/v1/episodes/{}", ids::id_base(1) + 1))
        .unwrap_err();
    assert_eq!(moved.status(), Some(404), "{moved}");
    assert!(moved.to_string().contains("gateway 1 issued it"), "{moved}");

    // SIGKILL the learner and gateway 2, and the NATS server; all come back (the server on
    // its store, synced at every write) and the others reconnect.
    l.kill9();
    procs[1].kill9();
    nats.kill9();
    nats.launch();
    let (p, url) = start_gateway(&nats, &dirs[1], 2, ports[1]);
    procs[1] = p;
    served[1].1 = url;
    let mut l = learner(&nats, &learner_dir);
    let before = updates(&learner_dir);
    // Admission rules set through gateway 1 hold for the whole run: the learner's next
    // decisions are made under them.
    let decay = serde_json::json!({"rule": "decay", "kl_scale": 0.05, "min_weight": 0.01});
    let decay_hash = serde_json::from_value::<strata_ledger::AdmissionRules>(decay.clone())
        .unwrap()
        .hash();
    let op1 = operator(&dirs[0], &served[0].1);
    wait_until("the rules to be accepted", Duration::from_secs(30), || {
        op1.post::<_, serde_json::Value>("/v1/operator/rules", &decay)
            .is_ok()
    });
    // Agents report while the learner trains: later episodes get later versions.
    let second = fleets(&served, 1, 40_000, 2);
    wait_until(
        "the resumed learner to train",
        Duration::from_secs(60),
        || updates(&learner_dir) >= before + 3,
    );
    // A rollback through gateway 3 moves the run's pointer over the learner's own moves,
    // and the learner goes on from that version.
    let op3 = operator(&dirs[2], &served[2].1);
    wait_until(
        "the rollback to be accepted",
        Duration::from_secs(30),
        || {
            op3.post::<_, serde_json::Value>(
                "/v1/operator/rollback",
                &serde_json::json!({"version": 0, "force": true}),
            )
            .is_ok()
        },
    );
    wait_until(
        "the learner to follow the rollback",
        Duration::from_secs(30),
        || l.log().contains("rolled the run back"),
    );
    // The rollback restored version 0's rules too (every gateway keeps version 0: its
    // first episodes sampled it): the learner changed rules twice.
    wait_until(
        "the learner to take version 0's rules back",
        Duration::from_secs(30),
        || l.log().matches("admission rules changed").count() >= 2,
    );
    l.signal(libc::SIGTERM);
    let (status, out) = l.finish(Duration::from_secs(60));
    assert!(status.success(), "{}", l.log());
    let report: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    for p in &procs {
        p.signal(libc::SIGTERM);
    }
    for p in &mut procs {
        assert!(p.finish(Duration::from_secs(60)).0.success(), "{}", p.log());
    }

    // Every acknowledged report, once, in the union of the gateways' ledgers.
    let stored: u64 = first.iter().chain(&second).map(|r| r.stored).sum();
    let mut seen = HashSet::new();
    let mut trajectory_of = HashMap::new();
    for (k, dir) in dirs.iter().enumerate() {
        for b in &ledger(dir).samples {
            for i in 0..b.len() {
                let id = b.sample_id[i];
                assert_eq!(
                    ids::gateway_of(id),
                    k as u64 + 1,
                    "sample {id} in gateway {}'s ledger",
                    k + 1
                );
                assert!(seen.insert(id), "sample {id} twice");
                trajectory_of.insert(id, b.trajectory_id[i]);
            }
        }
    }
    assert!(
        seen.len() as u64 >= stored,
        "{} samples for {stored} acknowledged reports",
        seen.len()
    );

    // Trained at most once; none of the invalidated trajectory.
    let decisions = ledger(&learner_dir).decisions;
    let mut trained = HashSet::new();
    let mut by_gateway = BTreeMap::new();
    for d in &decisions {
        for id in d.first_sample..=d.last_sample {
            assert!(
                seen.contains(&id),
                "a decision on sample {id}, which no gateway holds"
            );
            assert_ne!(
                trajectory_of[&id], foreign,
                "sample {id} of the invalidated trajectory decided"
            );
            if d.decision != DecisionKind::Dropped {
                assert!(trained.insert(id), "sample {id} trained twice");
            }
            *by_gateway.entry(ids::gateway_of(id)).or_insert(0u64) += 1;
        }
    }
    assert_eq!(
        by_gateway.len(),
        3,
        "the learner trained on every gateway's samples: {by_gateway:?}"
    );
    assert!(
        decisions.iter().any(|d| d.rules_hash == decay_hash),
        "no decision under the rules set through gateway 1"
    );
    assert!(
        trajectory_of.values().any(|&t| t == foreign),
        "gateway 1 issued trajectory {foreign}"
    );
    assert!(
        report["segments_invalidated"].as_u64().unwrap() >= 1,
        "{report}"
    );

    // One audit over the four ledgers: `strata ledger` reads them as one.
    let strata = |args: &[&std::ffi::OsStr]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_strata"))
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout).unwrap()
    };
    let mut args: Vec<&std::ffi::OsStr> = ["ledger", "summary", "--json"]
        .iter()
        .map(std::ffi::OsStr::new)
        .collect();
    args.extend(dirs.iter().map(|d| d.as_os_str()));
    args.push(learner_dir.as_os_str());
    let rows = strata(&args);
    let column = |name: &str| rows.iter().map(|r| r[name].as_u64().unwrap()).sum::<u64>();
    assert_eq!(column("samples"), seen.len() as u64);
    assert_eq!(
        column("trained") + column("down_weighted"),
        trained.len() as u64
    );
    // The run's invalidations, from the directory holding all its ledgers: gateway 2
    // recorded the one of gateway 1's trajectory.
    let listed = strata(&[
        "ledger".as_ref(),
        "invalidations".as_ref(),
        "--json".as_ref(),
        tmp.path().as_os_str(),
    ]);
    let cross = listed
        .iter()
        .find(|r| r["target"]["trajectory"]["id"] == foreign)
        .unwrap_or_else(|| panic!("{listed:?}"));
    assert_eq!(cross["issued_by_gateway"], 1, "{cross}");
    assert!(
        cross["recorded_in"].as_str().unwrap().contains("g2"),
        "{cross}"
    );

    // The return improves over the learner's versions.
    let mut by_version: BTreeMap<u64, (u64, f64)> = BTreeMap::new();
    for r in first.iter().chain(&second) {
        for (&v, &(n, mean)) in &r.returns_by_version {
            let e = by_version.entry(v).or_insert((0, 0.0));
            e.1 = (e.1 * e.0 as f64 + mean * n as f64) / (e.0 + n) as f64;
            e.0 += n;
        }
    }
    let start = by_version.get(&0).expect("episodes of version 0").1;
    let late = by_version
        .iter()
        .rev()
        .filter(|(_, (n, _))| *n >= 5)
        .take(3)
        .map(|(_, (_, m))| *m)
        .fold(0.0f64, f64::max);
    assert!(
        late > start * 1.5,
        "return {start:.1} at version 0, {late:.1} late: {by_version:?}"
    );
}
