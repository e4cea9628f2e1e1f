//! The gateway against its real HTTP server on loopback.

#[path = "support/exposition.rs"]
mod exposition;
use exposition::check_exposition;
use std::time::Duration;

#[path = "support/harness.rs"]
mod harness;
use harness::*;

use serde_json::{json, Value};
use strata_gateway::*;

#[test]
fn retried_acts_and_reports_are_answered_once() {
    let h = Harness::start(|_| {});
    let a = h.agent(0);
    let e = start(&a);
    assert_eq!(e.policy_version, 0);
    let first = act(&a, e.episode_id, "k1").unwrap();
    let again = act(&a, e.episode_id, "k1").unwrap();
    assert_eq!(first, again, "same key, same answer");
    let (code, msg) = status_of(act(&a, e.episode_id, "k2"));
    assert_eq!(code, 409, "one outstanding action: {msg}");
    let stored = report(&a, first.action_id).unwrap();
    assert_eq!(stored.status, ReportStatus::Stored);
    for _ in 0..3 {
        let dup = report(&a, first.action_id).unwrap();
        assert_eq!(dup.status, ReportStatus::Duplicate);
        assert_eq!(dup.sample_id, stored.sample_id);
    }
    // Starting with the same key returns the same episode.
    let k1: EpisodeInfo = a
        .post("/v1/episodes", &json!({"idempotency_key": "ep"}))
        .unwrap();
    let k2: EpisodeInfo = a
        .post("/v1/episodes", &json!({"idempotency_key": "ep"}))
        .unwrap();
    assert_eq!(k1.episode_id, k2.episode_id);
    let data = h.ledger();
    let rows: usize = data.samples.iter().map(|b| b.len()).sum();
    assert_eq!(rows, 1, "a retried report is stored once");
    assert_eq!(
        data.duplicates.len(),
        3,
        "each repeat is recorded as a duplicate"
    );
    let b = &data.samples[0];
    assert_eq!(b.idempotency_key[0].as_deref(), Some("agent-0/k1"));
    assert_eq!(b.policy_version[0], 0);
    assert!(b.completed_at_ns[0] >= b.issued_at_ns[0]);
    assert_eq!(b.obs_count[0], 1);
}

#[test]
fn recheck_aborts_a_moved_target_and_holds_for_a_popup() {
    let h = Harness::start(|s| s.recheck_threshold = 0.1);
    let a = h.agent(0);
    let e = start(&a);
    let ctx = json!({"context": {"target": [0.5, 0.5], "ui_top_level": ["form"]}});
    let first = act_with(&a, e.episode_id, "s0", ctx.clone()).unwrap();
    let ok: RecheckResponse = a
        .post(
            &format!("/v1/actions/{}/recheck", first.action_id),
            &json!({"target": [0.52, 0.5]}),
        )
        .unwrap();
    assert_eq!(ok.verdict, Verdict::Proceed);
    report(&a, first.action_id).unwrap();

    let second = act_with(&a, e.episode_id, "s1", ctx.clone()).unwrap();
    let moved: RecheckResponse = a
        .post(
            &format!("/v1/actions/{}/recheck", second.action_id),
            &json!({"target": [0.9, 0.5]}),
        )
        .unwrap();
    assert_eq!(moved.verdict, Verdict::Abort, "{}", moved.reason);
    let (code, msg) = status_of(report(&a, second.action_id));
    assert_eq!(code, 409, "an aborted action is never reported: {msg}");
    let third = act_with(&a, e.episode_id, "s2", ctx.clone()).unwrap();
    assert_ne!(
        third.trajectory_id, first.trajectory_id,
        "a new trajectory after the abort"
    );

    let held: RecheckResponse = a
        .post(
            &format!("/v1/actions/{}/recheck", third.action_id),
            &json!({"ui_top_level": ["form", "cookie-banner"]}),
        )
        .unwrap();
    assert_eq!(held.verdict, Verdict::NeedsHuman);
    assert!(held.reason.contains("cookie-banner"), "{}", held.reason);
    let (code, msg) = status_of(act_with(&a, e.episode_id, "s3", ctx.clone()));
    assert_eq!(code, 409);
    assert!(msg.contains("confirmation"), "{msg}");
    let path = format!("/v1/operator/episodes/{}/confirm", e.episode_id);
    let (code, _) = status_of(a.post::<_, EpisodeInfo>(&path, &json!({})));
    assert_eq!(code, 403, "agents cannot confirm");
    let resumed: EpisodeInfo = h.operator().post(&path, &json!({})).unwrap();
    assert_eq!(resumed.status, EpisodeStatus::Active);
    let fourth = act_with(&a, e.episode_id, "s3", ctx).unwrap();
    assert_ne!(fourth.trajectory_id, third.trajectory_id);
    report(&a, fourth.action_id).unwrap();

    let data = h.ledger();
    let stale: Vec<_> = data
        .invalidations
        .iter()
        .filter(|i| i.reason == strata_ledger::ReasonCode::ObservationStale)
        .collect();
    assert_eq!(stale.len(), 1);
    assert_eq!(
        stale[0].target,
        strata_ledger::Target::Trajectory {
            id: first.trajectory_id
        }
    );
    assert!(stale[0].text.contains("moved"), "{}", stale[0].text);
    let held: Vec<_> = data
        .invalidations
        .iter()
        .filter(|i| i.reason == strata_ledger::ReasonCode::HumanInterrupt)
        .collect();
    assert_eq!(held.len(), 1, "the hold is visible in the ledger");
    assert_eq!(
        held[0].target,
        strata_ledger::Target::Trajectory {
            id: third.trajectory_id
        }
    );
}

#[test]
fn side_effect_classes_decide_replay_after_a_timeout() {
    let h = Harness::start(|_| {});
    let a = h.agent(0);
    let e = start(&a);
    let timeout = json!({"outcome": "timeout"});
    // Unsafe (the default type): status unknown, never replayed, trajectory invalidated.
    let x = act(&a, e.episode_id, "u").unwrap();
    assert_eq!(x.side_effect, SideEffect::Unsafe);
    let r: ReportResponse = a
        .post(&format!("/v1/actions/{}/report", x.action_id), &timeout)
        .unwrap();
    assert_eq!(r.status, ReportStatus::StatusUnknown);
    assert_eq!(r.replay.as_deref(), Some("never"));
    let (code, msg) = status_of(
        a.post::<_, ActResponse>(&format!("/v1/actions/{}/replay", x.action_id), &json!({})),
    );
    assert_eq!(code, 409, "{msg}");
    // Read-only: replay allowed, then reported normally.
    let y = act_with(&a, e.episode_id, "r", json!({"action_type": "observe"})).unwrap();
    let r: ReportResponse = a
        .post(&format!("/v1/actions/{}/report", y.action_id), &timeout)
        .unwrap();
    assert_eq!(
        (r.status, r.replay.as_deref()),
        (ReportStatus::TimedOut, Some("allowed"))
    );
    let again: ActResponse = a
        .post(&format!("/v1/actions/{}/replay", y.action_id), &json!({}))
        .unwrap();
    assert_eq!(again, y);
    assert_eq!(
        report(&a, y.action_id).unwrap().status,
        ReportStatus::Stored
    );
    // Queryable: only after the query says it did not happen.
    let z = act_with(&a, e.episode_id, "q", json!({"action_type": "submit"})).unwrap();
    let r: ReportResponse = a
        .post(&format!("/v1/actions/{}/report", z.action_id), &timeout)
        .unwrap();
    assert_eq!(r.replay.as_deref(), Some("query_first"));
    let replay = format!("/v1/actions/{}/replay", z.action_id);
    assert_eq!(
        status_of(a.post::<_, ActResponse>(&replay, &json!({}))).0,
        400
    );
    assert_eq!(
        status_of(a.post::<_, ActResponse>(&replay, &json!({"query_result": "happened"}))).0,
        409
    );
    let ok: ActResponse = a
        .post(&replay, &json!({"query_result": "not_happened"}))
        .unwrap();
    assert_eq!(ok.action_id, z.action_id);
    let data = h.ledger();
    assert!(data.invalidations.iter().any(|i| i.reason
        == strata_ledger::ReasonCode::StatusUnknown
        && i.target
            == strata_ledger::Target::Trajectory {
                id: x.trajectory_id
            }));
}

#[test]
fn roles_are_enforced() {
    let h = Harness::start(|_| {});
    let (a, b, op) = (h.agent(0), h.agent(1), h.operator());
    let e = start(&a);
    let (code, msg) = status_of(act(&b, e.episode_id, "x"));
    assert_eq!(code, 403, "another agent's episode: {msg}");
    for (path, body) in [
        ("/v1/operator/promote", json!({"version": 0})),
        ("/v1/operator/rollback", json!({"version": 0})),
        (
            "/v1/operator/invalidate",
            json!({"trajectory": 1, "text": "x"}),
        ),
        ("/v1/operator/canary", json!({"fraction": 0.5})),
        ("/v1/operator/cooldown", json!({"seconds": 1})),
    ] {
        let (code, msg) = status_of(a.post::<_, Value>(path, &body));
        assert_eq!(code, 403, "{path}: {msg}");
        assert!(msg.contains("operator"), "{msg}");
    }
    let (code, _) = status_of(op.post::<_, EpisodeInfo>("/v1/episodes", &json!({})));
    assert_eq!(code, 403, "operators do not act as agents");
    let anon = Client::new(&h.server().url(), "nope");
    assert_eq!(
        status_of(anon.post::<_, EpisodeInfo>("/v1/episodes", &json!({}))).0,
        401
    );
    let _: ReleaseStatus = op
        .post("/v1/operator/canary", &json!({"fraction": 0.25}))
        .unwrap();
    let s: ReleaseStatus = a.get("/v1/status").unwrap();
    assert_eq!(s.canary_fraction, 0.25);
}

#[test]
fn bad_requests_get_clear_errors() {
    let h = Harness::start(|s| s.max_body_bytes = 4096);
    let a = h.agent(0);
    let e = start(&a);
    let path = format!("/v1/episodes/{}/act", e.episode_id);
    let cases: Vec<(String, String, u16, &str)> = vec![
        (path.clone(), "{not json".into(), 400, "invalid JSON"),
        (
            path.clone(),
            r#"{"observation":[1,2],"env_seq":0,"idempotency_key":"a"}"#.into(),
            400,
            "expects 4",
        ),
        (
            path.clone(),
            r#"{"observation":[1,2,3,1e999],"env_seq":0,"idempotency_key":"a"}"#.into(),
            400,
            "JSON",
        ),
        (
            path.clone(),
            r#"{"observation":[1,2,3,4],"env_seq":0,"idempotency_key":"a","bogus":1}"#.into(),
            400,
            "bogus",
        ),
        (
            path.clone(),
            r#"{"observation":[1,2,3,4],"env_seq":0,"idempotency_key":"a","action_type":"fly"}"#
                .into(),
            400,
            "fly",
        ),
        (
            "/v1/episodes/99/act".into(),
            r#"{"observation":[1,2,3,4],"env_seq":0,"idempotency_key":"a"}"#.into(),
            404,
            "episode 99",
        ),
        (
            "/v1/episodes/abc/act".into(),
            "{}".into(),
            400,
            "not a number",
        ),
        (
            "/v1/actions/77/report".into(),
            r#"{"reward":1,"observation_after":[0,0,0,0]}"#.into(),
            404,
            "action 77",
        ),
        ("/v1/nowhere".into(), "{}".into(), 404, "no such endpoint"),
    ];
    for (path, body, code, needle) in cases {
        let (got, msg) = status_of(a.post_raw::<Value>(&path, &body));
        assert_eq!(got, code, "{path} {body}: {msg}");
        assert!(
            msg.contains(needle),
            "{path} {body}: {msg:?} lacks {needle:?}"
        );
    }
    let big = format!(
        r#"{{"observation":[{}],"env_seq":0,"idempotency_key":"a"}}"#,
        vec!["0.0"; 2000].join(",")
    );
    assert_eq!(status_of(a.post_raw::<Value>(&path, &big)).0, 413);
    let x = act(&a, e.episode_id, "ok").unwrap();
    let nan = a.post::<_, Value>(
        &format!("/v1/actions/{}/report", x.action_id),
        &json!({"reward": 1.0}),
    );
    let (code, msg) = status_of(nan);
    assert_eq!(code, 400);
    assert!(msg.contains("observation_after"), "{msg}");
    let op = h.operator();
    let (code, msg) =
        status_of(op.post::<_, Value>("/v1/operator/rollback", &json!({"version": 42})));
    assert_eq!(code, 404, "{msg}");
    assert!(msg.contains("42"), "{msg}");
    let (code, msg) = status_of(op.post::<_, Value>(
        "/v1/operator/rules",
        &json!({"rule": "drop", "kl_scale": -1.0}),
    ));
    assert_eq!(code, 400);
    assert!(msg.contains("kl_scale"), "{msg}");
    let (code, msg) =
        status_of(op.post::<_, Value>("/v1/operator/canary", &json!({"fraction": 2.0})));
    assert_eq!(code, 400, "{msg}");
    let spec: Value = a.get("/openapi.json").unwrap();
    assert_eq!(spec["openapi"], "3.0.3");
    assert!(spec["paths"]["/v1/episodes/{id}/act"]["post"].is_object());
    // The served spec is this gateway's: observation lengths and action types filled in.
    let observation =
        &spec["components"]["schemas"]["ActRequest"]["properties"]["observation"]["oneOf"][0];
    assert_eq!(observation["minItems"], observation["maxItems"]);
    assert!(
        observation["minItems"].as_u64().unwrap_or(0) > 0,
        "{observation}"
    );
    // Vector observations: a summary value per observation value.
    let summary = &spec["components"]["schemas"]["ExecObservations"]["properties"]["min"];
    assert_eq!(summary["maxItems"], observation["maxItems"], "{summary}");
    let types = &spec["components"]["schemas"]["ActRequest"]["properties"]["action_type"]["enum"];
    assert!(
        types
            .as_array()
            .is_some_and(|t| t.contains(&json!("default"))),
        "{types}"
    );
    for marker in ["x-strata-length", "x-strata-enum"] {
        assert!(
            !spec.to_string().contains(marker),
            "{marker} left in the spec"
        );
    }
    // What publish does under each release mode, as docs/gateway.md says it.
    let publish = spec["paths"]["/v1/operator/publish"]["post"]["description"]
        .as_str()
        .unwrap_or_default();
    for words in [
        "every release mode",
        "canary candidate",
        "strata serve --checkpoint",
    ] {
        assert!(publish.contains(words), "publish's description: {publish}");
    }
    let rows: usize = h.ledger().samples.iter().map(|b| b.len()).sum();
    assert_eq!(rows, 0, "nothing stored by bad requests");
}

#[test]
fn rate_limit_answers_429() {
    let h = Harness::start(|s| {
        s.rate_limit = 5.0;
        s.rate_burst = 5.0;
    });
    let a = h.agent(0);
    let codes: Vec<Option<u16>> = (0..10)
        .map(|_| a.get::<Value>("/v1/status").err().and_then(|e| e.status()))
        .collect();
    assert!(codes.iter().take(5).all(Option::is_none), "{codes:?}");
    assert!(codes.contains(&Some(429)), "{codes:?}");
}

#[test]
fn cooldown_pins_running_episodes_and_force_switch_invalidates() {
    let h = Harness::start(|s| s.cooldown_secs = 0.5);
    let (a, op) = (h.agent(0), h.operator());
    let g = h.server().gateway();
    let before = start(&a);
    let x = act(&a, before.episode_id, "b0").unwrap();
    report(&a, x.action_id).unwrap();
    // A version published now is not sampled until the cooldown has passed.
    let v1 = g
        .publish_params(shifted_params(0.01), Channel::Stable, "test")
        .unwrap();
    assert_eq!(v1, 1);
    let during = start(&a);
    assert_eq!(during.policy_version, 0, "cooldown still running");
    let s: ReleaseStatus = op.get("/v1/status").unwrap();
    assert_eq!(s.pending.len(), 1);
    std::thread::sleep(Duration::from_millis(600));
    let after = start(&a);
    assert_eq!(after.policy_version, 1, "cooldown over");
    let still = act(&a, before.episode_id, "b1").unwrap();
    assert_eq!(
        still.policy_version, 0,
        "running episodes keep their version"
    );
    report(&a, still.action_id).unwrap();
    // A forced switch moves running episodes and invalidates their trajectories.
    let v2 = g
        .publish_params(shifted_params(0.02), Channel::Canary, "test")
        .unwrap();
    std::thread::sleep(Duration::from_millis(600));
    let _: ReleaseStatus = op
        .post(
            "/v1/operator/promote",
            &json!({"version": v2, "force": true}),
        )
        .unwrap();
    let moved: EpisodeInfo = a
        .get(&format!("/v1/episodes/{}", before.episode_id))
        .unwrap();
    assert_eq!(moved.policy_version, v2);
    assert_ne!(moved.trajectory_id, before.trajectory_id);
    let y = act(&a, before.episode_id, "b2").unwrap();
    assert_eq!(y.policy_version, v2);
    let data = h.ledger();
    let switched: Vec<_> = data
        .invalidations
        .iter()
        .filter(|i| i.reason == strata_ledger::ReasonCode::VersionSwitch)
        .map(|i| i.target)
        .collect();
    assert!(
        switched.contains(&strata_ledger::Target::Trajectory {
            id: before.trajectory_id
        }),
        "{switched:?}"
    );
}

/// Fresh CartPole parameters shifted by `delta` (a distinct policy).
fn shifted_params(delta: f32) -> Vec<f32> {
    let model = strata_runtime::build_model(&strata_runtime::preset("cartpole").unwrap()).unwrap();
    model.flat_params().iter().map(|x| x + delta).collect()
}

#[test]
fn canary_samples_go_to_their_own_bucket_and_rollback_restores_rules() {
    let h = Harness::start(|_| {});
    let (a, op) = (h.agent(0), h.operator());
    let g = h.server().gateway();
    // A checkpoint from a real (tiny) training run, published by the operator.
    let mut config = strata_runtime::preset("cartpole").unwrap();
    config.train.total_steps = 256;
    config.ledger.enabled = false;
    let mut trainer = strata_runtime::Trainer::new(config).unwrap();
    trainer.iterate().unwrap();
    let ckpt = h.dir.path().join("ckpt");
    strata_runtime::save_checkpoint(&trainer.state().unwrap(), &ckpt).unwrap();
    drop(trainer);
    let rules_v0 = op.get::<ReleaseStatus>("/v1/status").unwrap().rules_version;
    let r2: ReleaseStatus = op
        .post(
            "/v1/operator/rules",
            &json!({"rule": "drop", "max_age_versions": 3}),
        )
        .unwrap();
    assert_ne!(r2.rules_version, rules_v0);
    let s: ReleaseStatus = op
        .post(
            "/v1/operator/publish",
            &json!({"checkpoint": ckpt.display().to_string()}),
        )
        .unwrap();
    assert_eq!(s.candidate, Some(1));
    let _: ReleaseStatus = op
        .post("/v1/operator/canary", &json!({"fraction": 0.5}))
        .unwrap();
    let episodes: Vec<EpisodeInfo> = (0..40).map(|_| start(&a)).collect();
    let canary: Vec<&EpisodeInfo> = episodes
        .iter()
        .filter(|e| e.channel == Channel::Canary)
        .collect();
    let stable: Vec<&EpisodeInfo> = episodes
        .iter()
        .filter(|e| e.channel == Channel::Stable)
        .collect();
    assert!(
        canary.len() >= 8 && stable.len() >= 8,
        "{} canary of 40",
        canary.len()
    );
    assert!(canary
        .iter()
        .all(|e| e.policy_version == 1 && e.bucket == strata_ledger::Bucket::canary()));
    for (i, e) in [canary[0], stable[0]].into_iter().enumerate() {
        let x = act(&a, e.episode_id, &format!("c{i}")).unwrap();
        report(&a, x.action_id).unwrap();
    }
    let data = h.ledger();
    let dirs: Vec<String> = std::fs::read_dir(h.dir.path().join("ledger/wal/samples"))
        .unwrap()
        .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        dirs.contains(&"bucket=canary".to_string()) && dirs.contains(&"bucket=train".to_string()),
        "{dirs:?}"
    );
    for b in &data.samples {
        let expected = if b.bucket == "canary" { 1 } else { 0 };
        assert!(
            b.policy_version.iter().all(|&v| v == expected),
            "bucket {} holds {:?}",
            b.bucket,
            b.policy_version
        );
    }
    // Rolling back to version 0 restores the rules it was published with.
    let back: ReleaseStatus = op
        .post("/v1/operator/rollback", &json!({"version": 0}))
        .unwrap();
    assert_eq!((back.stable, back.candidate), (0, None));
    assert_eq!(back.rules_version, rules_v0);
    assert_eq!(g.ledger().current().unwrap().1.version, rules_v0);
    assert_eq!(
        g.ledger().rules_for_policy(1).unwrap().version,
        r2.rules_version
    );
    let rolled: Vec<_> = h
        .ledger()
        .generations
        .into_iter()
        .filter(|r| r.operation == "rollback")
        .collect();
    assert_eq!(rolled.len(), 1);
    assert_eq!(
        (rolled[0].policy_version, rolled[0].rules_version),
        (0, rules_v0)
    );
    assert_eq!(start(&a).policy_version, 0);
}

#[test]
fn open_episodes_continue_after_a_restart() {
    let mut h = Harness::start(|_| {});
    let a = h.agent(0);
    let e = start(&a);
    let x = act(&a, e.episode_id, "r0").unwrap();
    report(&a, x.action_id).unwrap();
    let pending = act(&a, e.episode_id, "r1").unwrap();
    h.restart(|_| {});
    let a = h.agent(0);
    let info: EpisodeInfo = a.get(&format!("/v1/episodes/{}", e.episode_id)).unwrap();
    assert_eq!(
        (info.steps, info.pending_action),
        (1, Some(pending.action_id))
    );
    assert_eq!(
        act(&a, e.episode_id, "r1").unwrap(),
        pending,
        "same key, same answer after restart"
    );
    assert_eq!(
        report(&a, pending.action_id).unwrap().status,
        ReportStatus::Stored
    );
    assert_eq!(
        report(&a, x.action_id).unwrap().status,
        ReportStatus::Duplicate
    );
    let next = act(&a, e.episode_id, "r2").unwrap();
    assert!(next.action_id > pending.action_id);
    report_with(&a, next.action_id, true).unwrap();
    let ended: EpisodeInfo = a.get(&format!("/v1/episodes/{}", e.episode_id)).unwrap();
    assert_eq!(ended.status, EpisodeStatus::Ended);
    let data = h.ledger();
    let rows: usize = data.samples.iter().map(|b| b.len()).sum();
    assert_eq!(rows, 3);
}

#[test]
fn the_journal_is_compacted_and_still_restores_open_episodes() {
    let mut h = Harness::start(|s| s.journal_compact_bytes = 4096);
    let a = h.agent(0);
    let e = start(&a);
    for k in 0..30 {
        let x = act(&a, e.episode_id, &format!("j{k}")).unwrap();
        report(&a, x.action_id).unwrap();
    }
    let pending = act(&a, e.episode_id, "last").unwrap();
    let path = h.dir.path().join("journal.jsonl");
    let before = std::fs::metadata(&path).unwrap().len();
    assert!(before > 4096, "{before}");
    assert!(h.server().gateway().compact_journal().unwrap());
    let after = std::fs::metadata(&path).unwrap().len();
    assert!(after < before, "{after} >= {before}");
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 1);
    assert!(
        !h.server().gateway().compact_journal().unwrap(),
        "small again"
    );
    h.restart(|_| {});
    let a = h.agent(0);
    let info: EpisodeInfo = a.get(&format!("/v1/episodes/{}", e.episode_id)).unwrap();
    assert_eq!(
        (info.steps, info.pending_action),
        (30, Some(pending.action_id))
    );
    assert_eq!(
        report(&a, pending.action_id).unwrap().status,
        ReportStatus::Stored
    );
}

#[test]
fn metrics_parse_as_prometheus_text() {
    let h = Harness::start(|_| {});
    let a = h.agent(0);
    let e = start(&a);
    let x = act(&a, e.episode_id, "m0").unwrap();
    report(&a, x.action_id).unwrap();
    let _ = report(&a, 999_999);
    let resp = ureq::get(&format!("{}/metrics", h.server().url()))
        .call()
        .unwrap();
    assert!(
        resp.content_type().contains("openmetrics"),
        "{}",
        resp.content_type()
    );
    let text = resp.into_string().unwrap();
    let samples = check_exposition(&text);
    let find = |name: &str| {
        samples
            .iter()
            .find(|(s, _)| s == name)
            .unwrap_or_else(|| panic!("{name} missing from\n{text}"))
            .1
    };
    assert_eq!(find("strata_gateway_acts_total"), 1.0);
    assert_eq!(find("strata_gateway_reports_stored_total"), 1.0);
    assert_eq!(find("strata_gateway_open_episodes"), 1.0);
    assert_eq!(
        find(r#"strata_gateway_request_seconds_count{route="/v1/episodes/{id}/act"}"#),
        1.0
    );
    assert_eq!(
        find(r#"strata_gateway_responses_total{route="/v1/actions/{id}/report",status="404"}"#),
        1.0
    );
}
