//! Bring your own policy: external versions published, canaried, promoted and rolled
//! back like Strata's own; agents recording what their own model did; a trainer that is
//! not Strata reading the admitted transitions and reporting what it trained on.

#[path = "support/harness.rs"]
mod harness;
use harness::*;

use serde_json::{json, Value};
use strata_gateway::*;
use strata_ledger::{DecisionKind, ReasonCode, Target};

const SHA: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

fn external(name: &str, hash: &str) -> Value {
    json!({"external": {
        "artifact": {"uri": format!("s3://models/{name}.pt"), "sha256": SHA, "size": 1234},
        "config_hash": hash,
        "trainer": "numpy-reinforce@1",
        "metadata": {"name": name},
    }})
}

fn trainer(h: &Harness) -> Client {
    let tokens = h.server().gateway().tokens();
    let (_, token) = tokens.trainers.iter().next().expect("a trainer token");
    Client::new(&h.server().url(), token)
}

/// Records step `seq` of an episode (the env's clock runs 2 per step: act, report).
fn record(
    c: &Client,
    episode: u64,
    (key, seq): (&str, u64),
    version: u64,
    hash: &str,
) -> RecordResponse {
    c.post(
        &format!("/v1/episodes/{episode}/record"),
        &json!({
            "observation": [0.01, -0.02, 0.03, 0.0],
            "action": {"push": "left", "force": [0.5]},
            "policy_version": version,
            "config_hash": hash,
            "log_prob": -0.69,
            "env_seq": 2 * seq,
            "idempotency_key": key,
        }),
    )
    .unwrap()
}

/// Reports step `seq`'s outcome.
fn outcome(c: &Client, action: u64, seq: u64, terminated: bool) -> ReportResponse {
    c.post(
        &format!("/v1/actions/{action}/report"),
        &json!({
            "observation_after": [0.02, -0.01, 0.03, 0.01],
            "reward": 1.0,
            "env_seq": 2 * seq + 1,
            "terminated": terminated,
        }),
    )
    .unwrap()
}

#[test]
fn external_versions_take_part_in_release_and_their_agents_record_what_they_did() {
    let mut h = Harness::start(|_| {});
    let (op, tr, a) = (h.operator(), trainer(&h), h.agent(0));

    // Publishing: a bad reference is refused naming the field; a trainer may publish.
    let mut bad = external("bad", "ext-a");
    bad["external"]["artifact"]["sha256"] = json!("xyz");
    let (code, msg) = status_of(tr.post::<_, ReleaseStatus>("/v1/operator/publish", &bad));
    assert_eq!(code, 400, "{msg}");
    assert!(msg.contains("sha256"), "{msg}");
    let (code, msg) = status_of(tr.post::<_, ReleaseStatus>("/v1/operator/publish", &json!({})));
    assert_eq!(code, 400, "neither checkpoint nor external: {msg}");
    let s: ReleaseStatus = tr
        .post("/v1/operator/publish", &external("a", "ext-a"))
        .unwrap();
    assert_eq!((s.published, s.candidate), (Some(1), Some(1)));

    // Roles: a trainer decides nothing an operator decides; an agent neither publishes
    // nor reads or reports training.
    for path in [
        "/v1/operator/promote",
        "/v1/operator/rollback",
        "/v1/operator/canary",
    ] {
        let (code, msg) =
            status_of(tr.post::<_, Value>(path, &json!({"version": 1, "fraction": 1})));
        assert_eq!(code, 403, "{path}: {msg}");
    }
    let (code, _) = status_of(tr.post::<_, Value>(
        "/v1/operator/invalidate",
        &json!({"trajectory": 1, "text": "x"}),
    ));
    assert_eq!(code, 403);
    let (code, _) = status_of(a.post::<_, Value>("/v1/operator/publish", &external("x", "h")));
    assert_eq!(code, 403);
    let (code, _) = status_of(a.get::<Value>("/v1/trainer/admitted"));
    assert_eq!(code, 403);
    let (code, _) = status_of(a.post::<_, Value>(
        "/v1/trainer/trained",
        &json!({"version": 1, "base_version": 0, "samples": [1]}),
    ));
    assert_eq!(code, 403);

    // Canary: every new episode gets the external candidate, in the canary bucket, told
    // which artifact to act with.
    let _: ReleaseStatus = op
        .post("/v1/operator/canary", &json!({"fraction": 1.0}))
        .unwrap();
    let e = start(&a);
    assert_eq!((e.policy_version, e.channel), (1, Channel::Canary));
    assert_eq!(e.config_hash, "ext-a");
    let ext = e
        .external
        .clone()
        .expect("the artifact of an external version");
    assert_eq!(ext.artifact.uri, "s3://models/a.pt");
    assert_eq!(ext.metadata["name"], "a");

    // The gateway does not act with an external version: the agent records.
    let (code, msg) = status_of(act(&a, e.episode_id, "act-1"));
    assert_eq!(code, 409, "{msg}");
    assert!(msg.contains("record"), "{msg}");
    let (code, msg) = status_of(a.post::<_, RecordResponse>(
        &format!("/v1/episodes/{}/record", e.episode_id),
        &json!({
            "observation": [0.0, 0.0, 0.0, 0.0], "action": {}, "policy_version": 1,
            "config_hash": "not-a's", "env_seq": 1, "idempotency_key": "r0",
        }),
    ));
    assert_eq!(code, 400, "{msg}");
    assert!(msg.contains("config_hash"), "{msg}");
    let r1 = record(&a, e.episode_id, ("r1", 0), 1, "ext-a");
    assert_eq!(r1.invalidated, None);
    assert_eq!(
        record(&a, e.episode_id, ("r1", 0), 1, "ext-a"),
        r1,
        "same key, same answer"
    );
    let stored = outcome(&a, r1.action_id, 0, false);
    assert_eq!(stored.status, ReportStatus::Stored);
    let both = json!({
        "observation": [0.0, 0.0, 0.0, 0.0], "action": 1, "policy_version": 1,
        "config_hash": "ext-a", "env_seq": 2, "idempotency_key": "r-both",
        "log_prob": -0.1, "probability": 0.9,
    });
    let path = format!("/v1/episodes/{}/record", e.episode_id);
    let (code, msg) = status_of(a.post::<_, RecordResponse>(&path, &both));
    assert_eq!(code, 400, "{msg}");
    let mut by_probability = both.clone();
    by_probability["log_prob"] = Value::Null;
    by_probability["idempotency_key"] = json!("r2");
    let r2: RecordResponse = a.post(&path, &by_probability).unwrap();
    let r2_sample = outcome(&a, r2.action_id, 1, false).sample_id.unwrap();

    // A second episode's agent acts with another version than its episode's: the whole
    // trajectory is invalidated (its earlier step too), the agent named as author.
    let e2 = start(&a);
    let before = record(&a, e2.episode_id, ("s1", 0), 1, "ext-a");
    outcome(&a, before.action_id, 0, false);
    let hash0 = h.server().gateway().config_hash().to_string();
    let switched = record(&a, e2.episode_id, ("s2", 1), 0, &hash0);
    let why = switched.invalidated.clone().expect("a version switch");
    assert!(why.contains("version 0"), "{why}");
    assert_eq!(switched.trajectory_id, e2.trajectory_id);
    outcome(&a, switched.action_id, 1, false);
    let after = record(&a, e2.episode_id, ("s3", 2), 1, "ext-a");
    assert_ne!(
        after.trajectory_id, e2.trajectory_id,
        "goes on in a new one"
    );
    outcome(&a, after.action_id, 2, true);

    let data = h.ledger();
    let inv = data
        .invalidations
        .iter()
        .find(|i| {
            i.target
                == Target::Trajectory {
                    id: e2.trajectory_id,
                }
        })
        .expect("the switched trajectory is invalidated");
    assert_eq!(inv.reason, ReasonCode::VersionSwitch);
    assert_eq!(inv.author, "agent-0");
    let rows: Vec<_> = data
        .samples
        .iter()
        .flat_map(|b| (0..b.len()).map(move |i| b.row(i)))
        .collect();
    assert_eq!(
        rows.len(),
        5,
        "the ledger keeps every step, invalid ones too"
    );
    let first = rows
        .iter()
        .find(|r| r.sample_id == stored.sample_id.unwrap())
        .unwrap();
    assert_eq!(first.config_hash, "ext-a");
    assert_eq!(first.policy_version, 1);
    assert_eq!(
        first.action.as_deref(),
        Some(r#"{"force":[0.5],"push":"left"}"#)
    );
    assert_eq!(first.behaviour_log_prob, Some(-0.69));
    let second = rows.iter().find(|r| r.sample_id == r2_sample).unwrap();
    assert_eq!(second.behaviour_log_prob, Some(0.9f32.ln()));
    assert_eq!(second.action.as_deref(), Some("1"));
    assert_eq!(first.observation.as_ref().map(Vec::len), Some(16));
    let by_v0 = rows.iter().find(|r| r.policy_version == 0).unwrap();
    assert_eq!(by_v0.config_hash, hash0, "recorded as the version it used");

    // The trainer reads what it may train on: the first episode's two steps and the
    // third trajectory's one; the invalidated trajectory's two are left out.
    let page: AdmittedPage = tr.get("/v1/trainer/admitted?learner_version=1").unwrap();
    let ids: Vec<u64> = page.samples.iter().map(|s| s.sample_id).collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert_eq!(page.left_out, 2);
    let s = &page.samples[0];
    assert_eq!(s.observation, [0.01, -0.02, 0.03, 0.0]);
    assert_eq!(s.next_observation, [0.02, -0.01, 0.03, 0.01]);
    assert_eq!(s.action["push"], "left");
    assert_eq!((s.admission.as_str(), s.weight), ("trained", Some(1.0)));
    let small: AdmittedPage = tr.get("/v1/trainer/admitted?limit=1").unwrap();
    assert_eq!((small.samples.len(), small.more), (1, true));
    let next: AdmittedPage = tr
        .get(&format!(
            "/v1/trainer/admitted?limit=1&cursor={}",
            small.next_cursor
        ))
        .unwrap();
    assert_eq!(next.samples[0].sample_id, ids[1], "the cursor pages on");
    let (code, msg) = status_of(tr.get::<Value>("/v1/trainer/admitted?limit=0"));
    assert_eq!(code, 400, "{msg}");

    // It trains, publishes the result and reports what it trained on into it.
    let s: ReleaseStatus = tr
        .post("/v1/operator/publish", &external("b", "ext-b"))
        .unwrap();
    let v2 = s.published.unwrap();
    let (code, msg) = status_of(tr.post::<_, TrainedResponse>(
        "/v1/trainer/trained",
        &json!({"version": v2, "base_version": 1, "samples": [ids[0], 999]}),
    ));
    assert_eq!(code, 400, "{msg}");
    assert!(msg.contains("sample 999"), "{msg}");
    let (code, msg) = status_of(tr.post::<_, TrainedResponse>(
        "/v1/trainer/trained",
        &json!({"version": 0, "base_version": 0, "samples": [ids[0]]}),
    ));
    assert_eq!(
        code, 400,
        "only external versions are trained elsewhere: {msg}"
    );
    let done: TrainedResponse = tr
        .post(
            "/v1/trainer/trained",
            &json!({"version": v2, "base_version": 1, "samples": ids}),
        )
        .unwrap();
    assert_eq!((done.trained, done.dropped), (3, 0));
    let (code, msg) = status_of(tr.post::<_, TrainedResponse>(
        "/v1/trainer/trained",
        &json!({"version": v2, "base_version": 1, "samples": [ids[0]]}),
    ));
    assert_eq!(code, 400, "decided once: {msg}");
    assert!(msg.contains("already decided"), "{msg}");
    let page: AdmittedPage = tr.get("/v1/trainer/admitted").unwrap();
    assert!(page.samples.is_empty(), "trained on: no longer offered");
    let data = h.ledger();
    let d = data
        .decisions
        .iter()
        .find(|d| d.first_sample <= ids[0] && ids[0] <= d.last_sample)
        .unwrap();
    assert_eq!(d.decision, DecisionKind::Trained);
    assert_eq!((d.policy_version, d.learner_version, d.update), (1, 1, v2));

    // The manifest says, for each sample, which version produced it, which trained on it
    // and under which rules.
    let out = h.dir.path().join("manifest.jsonl");
    strata_ledger::write_manifest(&data, strata_ledger::ManifestFormat::Json, &out).unwrap();
    let text = std::fs::read_to_string(&out).unwrap();
    let row: Value = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|r| r["sample_id"] == ids[0])
        .unwrap();
    assert_eq!(row["policy_version"], 1);
    assert_eq!(row["decision"], "trained");
    assert_eq!(row["update"], v2);
    assert_eq!(row["rules_version"], d.rules_version);
    // The transition is exported as the numbers the agent sent.
    let numbers = |v: &Value| -> Vec<f32> {
        v.as_array()
            .expect("an array of numbers")
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect()
    };
    assert_eq!(numbers(&row["observation"]), [0.01, -0.02, 0.03, 0.0]);
    assert_eq!(numbers(&row["next_observation"]), [0.02, -0.01, 0.03, 0.01]);
    let csv = h.dir.path().join("manifest.csv");
    strata_ledger::write_manifest(&data, strata_ledger::ManifestFormat::Csv, &csv).unwrap();
    let text = std::fs::read_to_string(&csv).unwrap();
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|c| *c == name).unwrap();
    // The second record's row (its action, `1`, holds no comma to quote).
    let line: Vec<&str> = text
        .lines()
        .map(|l| l.split(',').collect::<Vec<_>>())
        .find(|f| f.len() == header.len() && f[column("sample_id")] == r2_sample.to_string())
        .expect("the second record's row");
    assert_eq!(line[column("observation")], "0;0;0;0");
    assert_eq!(line[column("next_observation")], "0.02;-0.01;0.03;0.01");

    // Promote the new version, roll back to the first: both external, both bound in the
    // ledger with their own config hash.
    let _: ReleaseStatus = op
        .post(
            "/v1/operator/promote",
            &json!({"version": v2, "force": true}),
        )
        .unwrap();
    let e3 = start(&a);
    assert_eq!((e3.policy_version, e3.config_hash.as_str()), (v2, "ext-b"));
    let s: ReleaseStatus = op
        .post("/v1/operator/rollback", &json!({"version": 1}))
        .unwrap();
    assert_eq!((s.stable, s.candidate), (1, None));
    let data = h.ledger();
    let bound: Vec<(u64, &str, &str)> = data
        .generations
        .iter()
        .map(|g| {
            (
                g.policy_version,
                g.operation.as_str(),
                g.config_hash.as_str(),
            )
        })
        .collect();
    assert!(bound.contains(&(v2, "promote", "ext-b")), "{bound:?}");
    assert!(bound.contains(&(1, "rollback", "ext-a")), "{bound:?}");

    // A restart keeps the external versions.
    h.restart(|_| {});
    let a = h.agent(0);
    let _: ReleaseStatus = h
        .operator()
        .post("/v1/operator/canary", &json!({"fraction": 0.0}))
        .unwrap();
    let e4 = start(&a);
    assert_eq!(e4.policy_version, 1);
    assert_eq!(e4.external.unwrap().artifact.uri, "s3://models/a.pt");
}

/// The samples of `trajectory` on any page a trainer can read.
fn offered(tr: &Client, trajectory: u64) -> Vec<u64> {
    let page: AdmittedPage = tr.get("/v1/trainer/admitted?limit=10000").unwrap();
    page.samples
        .iter()
        .filter(|s| s.trajectory_id == trajectory)
        .map(|s| s.sample_id)
        .collect()
}

#[test]
fn an_acknowledged_invalidation_is_in_every_read_after_it_even_with_a_reader_racing_it() {
    let h = Harness::start(|_| {});
    let (op, tr, a) = (h.operator(), trainer(&h), h.agent(0));
    // Version 1 to train from, version 2 (the candidate) for every new episode.
    let _: ReleaseStatus = tr
        .post("/v1/operator/publish", &external("a", "ext-a"))
        .unwrap();
    let s: ReleaseStatus = tr
        .post("/v1/operator/publish", &external("b", "ext-b"))
        .unwrap();
    let v2 = s.published.unwrap();
    let _: ReleaseStatus = op
        .post("/v1/operator/canary", &json!({"fraction": 1.0}))
        .unwrap();
    let hash0 = h.server().gateway().config_hash().to_string();

    // A reader polls the trainer's page as fast as it can while trajectories are
    // invalidated; every page it asked for after an acknowledgement must leave that
    // trajectory out.
    let acked: std::sync::Arc<std::sync::Mutex<Vec<(std::time::Instant, u64)>>> =
        Default::default();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (tr, acked, stop) = (trainer(&h), acked.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut pages = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let asked = std::time::Instant::now();
                let page: AdmittedPage = tr.get("/v1/trainer/admitted?limit=10000").unwrap();
                for &(at, trajectory) in acked.lock().unwrap().iter() {
                    if at < asked {
                        let seen: Vec<u64> = page
                            .samples
                            .iter()
                            .filter(|s| s.trajectory_id == trajectory)
                            .map(|s| s.sample_id)
                            .collect();
                        assert!(
                            seen.is_empty(),
                            "trajectory {trajectory} offered after its invalidation was acknowledged: {seen:?}"
                        );
                    }
                }
                pages += 1;
            }
            pages
        })
    };
    let mut step = 0;
    let mut invalidated = Vec::new();
    for round in 0..12 {
        let e = start(&a);
        assert_eq!(e.policy_version, v2);
        for _ in 0..4 {
            let r = record(&a, e.episode_id, (&format!("k{step}"), step), v2, "ext-b");
            outcome(&a, r.action_id, step, false);
            step += 1;
        }
        assert_eq!(offered(&tr, e.trajectory_id).len(), 4, "round {round}");
        let switched = record(&a, e.episode_id, (&format!("k{step}"), step), 0, &hash0);
        let at = std::time::Instant::now();
        assert!(switched.invalidated.is_some());
        acked.lock().unwrap().push((at, e.trajectory_id));
        invalidated.push(e.trajectory_id);
        // At once, by this client too: not offered, and a report of them refused by id.
        assert!(offered(&tr, e.trajectory_id).is_empty(), "round {round}");
        let first = step - 4;
        let ids: Vec<u64> = h
            .ledger()
            .samples
            .iter()
            .flat_map(|b| (0..b.len()).map(move |i| (b.trajectory_id[i], b.sample_id[i])))
            .filter(|&(t, _)| t == e.trajectory_id)
            .map(|(_, id)| id)
            .collect();
        assert_eq!(ids.len(), 4, "round {round}: steps {first}..{step}");
        let (code, msg) = status_of(tr.post::<_, TrainedResponse>(
            "/v1/trainer/trained",
            &json!({"version": v2, "base_version": 1, "samples": &ids[..2]}),
        ));
        assert_eq!(code, 400, "{msg}");
        assert!(msg.contains("invalidated"), "{msg}");
        step += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let pages = reader.join().unwrap();
    assert!(pages > 0);
    // The manifest agrees.
    let data = h.ledger();
    for t in invalidated {
        assert!(data
            .invalidations
            .iter()
            .any(|i| i.target == Target::Trajectory { id: t }));
    }
}

#[test]
fn a_trainer_polling_before_the_first_record_follows_the_cursor_to_every_sample() {
    let h = Harness::start(|_| {});
    let (op, tr, a) = (h.operator(), trainer(&h), h.agent(0));
    let _: ReleaseStatus = tr
        .post("/v1/operator/publish", &external("a", "ext-a"))
        .unwrap();
    let _: ReleaseStatus = op
        .post("/v1/operator/canary", &json!({"fraction": 1.0}))
        .unwrap();
    // Nothing recorded yet: the cursor says where to go on from.
    let empty: AdmittedPage = tr.get("/v1/trainer/admitted").unwrap();
    assert_eq!(
        (empty.samples.len(), empty.next_cursor, empty.more),
        (0, 0, false)
    );
    let mut cursor = empty.next_cursor;
    let mut seen = Vec::new();
    let e = start(&a);
    for step in 0..5 {
        let r = record(&a, e.episode_id, (&format!("k{step}"), step), 1, "ext-a");
        let stored = outcome(&a, r.action_id, step, step == 4);
        let page: AdmittedPage = tr
            .get(&format!("/v1/trainer/admitted?cursor={cursor}&limit=2"))
            .unwrap();
        seen.extend(page.samples.iter().map(|s| s.sample_id));
        cursor = page.next_cursor;
        assert!(seen.contains(&stored.sample_id.unwrap()) || page.more);
    }
    loop {
        let page: AdmittedPage = tr
            .get(&format!("/v1/trainer/admitted?cursor={cursor}&limit=2"))
            .unwrap();
        seen.extend(page.samples.iter().map(|s| s.sample_id));
        cursor = page.next_cursor;
        if !page.more {
            break;
        }
    }
    assert_eq!(seen, [0, 1, 2, 3, 4], "sample 0 included, none twice");
    // The older parameter is refused, naming the one to use: read as before, it would
    // skip a sample a page.
    let (code, msg) = status_of(tr.get::<AdmittedPage>("/v1/trainer/admitted?after=2"));
    assert_eq!(code, 400, "{msg}");
    assert!(msg.contains("cursor"), "{msg}");
    // A version never published is not found, not echoed.
    let (code, msg) = status_of(tr.get::<AdmittedPage>("/v1/trainer/admitted?learner_version=999"));
    assert_eq!(code, 404, "{msg}");
    assert!(msg.contains("999"), "{msg}");
}
