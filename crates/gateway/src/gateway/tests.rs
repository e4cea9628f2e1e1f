//! The gateway's core below HTTP: its operations answer domain errors; segments go to
//! the learner on a bounded queue, invalidations and rollbacks through its inbox.

use std::time::Duration;

use serde_json::json;

use super::*;
use crate::auth::Role;
use crate::settings::GatewaySettings;

pub(super) fn open(dir: &Path) -> Gateway {
    let mut settings = GatewaySettings::new("cartpole", dir).unwrap();
    settings.run.ledger.flush_interval_secs = 0.05;
    Gateway::open(settings).unwrap()
}

pub(super) fn agent(name: &str) -> Caller {
    Caller {
        name: name.into(),
        role: Role::Agent,
    }
}

fn operator() -> Caller {
    Caller {
        name: "operator".into(),
        role: Role::Operator,
    }
}

pub(super) fn request<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
    serde_json::from_value(value).unwrap()
}

fn act(g: &Gateway, caller: &Caller, episode: u64, key: &str) -> Result<ActResponse, RequestError> {
    g.act(
        caller,
        episode,
        request(
            json!({"observation": [0.0, 0.1, 0.0, -0.1], "env_seq": 1, "idempotency_key": key}),
        ),
    )
}

fn report(g: &Gateway, caller: &Caller, action: u64, end: bool) -> ReportResponse {
    g.report(
        caller,
        action,
        request(
            json!({"observation_after": [0.0, 0.2, 0.0, -0.2], "reward": 1.0, "terminated": end}),
        ),
    )
    .unwrap()
}

#[test]
fn operations_answer_domain_errors_without_http() {
    let dir = tempfile::tempdir().unwrap();
    let g = open(dir.path());
    let (ana, bob) = (agent("agent-0"), agent("agent-1"));
    let e = g.start_episode(&ana, request(json!({}))).unwrap();
    let first = act(&g, &ana, e.episode_id, "k1").unwrap();
    assert_eq!(
        act(&g, &ana, e.episode_id, "k1").unwrap(),
        first,
        "a retry gets the same answer"
    );
    let other = g.start_episode(&ana, request(json!({}))).unwrap();
    assert!(matches!(
        act(&g, &ana, other.episode_id, "k1"),
        Err(RequestError::Conflict(_))
    ));
    assert!(matches!(
        act(&g, &bob, e.episode_id, "k2"),
        Err(RequestError::Forbidden(_))
    ));
    assert!(matches!(
        act(&g, &ana, 999, "k3"),
        Err(RequestError::NotFound(_))
    ));
    let stored = report(&g, &ana, first.action_id, false);
    assert_eq!(stored.status, ReportStatus::Stored);
    let again = report(&g, &ana, first.action_id, false);
    assert_eq!(
        (again.status, again.sample_id),
        (ReportStatus::Duplicate, stored.sample_id)
    );
    let unknown: InvalidateRequest = request(json!({"trajectory": 999, "text": "gone"}));
    assert!(matches!(
        g.invalidate(&operator(), unknown),
        Err(RequestError::NotFound(_))
    ));
    let rollback = |v: serde_json::Value| g.rollback(&operator(), request(v));
    assert!(matches!(
        rollback(json!({"version": 42})),
        Err(RequestError::NotFound(_))
    ));
    assert!(matches!(rollback(json!({})), Err(RequestError::Invalid(_))));
}

#[test]
fn segments_go_on_the_queue_and_invalidations_and_rollbacks_to_the_inbox() {
    let dir = tempfile::tempdir().unwrap();
    let g = open(dir.path());
    let (tx, rx) = crossbeam_channel::bounded(16);
    g.attach_learner(tx);
    let ana = agent("agent-0");
    let e = g.start_episode(&ana, request(json!({}))).unwrap();
    for (k, end) in [("a", false), ("b", true)] {
        let a = act(&g, &ana, e.episode_id, k).unwrap();
        report(&g, &ana, a.action_id, end);
    }
    let s = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(
        (s.trajectory, s.len(), s.terminated),
        (e.trajectory_id, 2, true)
    );
    let invalidate: InvalidateRequest =
        request(json!({"trajectory": e.trajectory_id, "text": "cell door opened"}));
    g.invalidate(&operator(), invalidate).unwrap();
    assert!(g.inbox.is_invalidated(e.trajectory_id));
    let mut waiting = vec![*s];
    assert_eq!(g.inbox.drop_invalidated(&mut waiting), 2);
    assert!(waiting.is_empty());
    g.rollback(&operator(), request(json!({"version": 0})))
        .unwrap();
    assert_eq!(g.inbox.take_rollback(), Some(0));
    g.detach_learner();
    assert!(
        rx.recv_timeout(Duration::from_secs(1)).is_err(),
        "closed and empty"
    );
}

#[test]
fn a_learner_that_takes_nothing_delays_no_request() {
    // A queue of one segment that nobody drains: the learner stopped taking its queue.
    let dir = tempfile::tempdir().unwrap();
    let g = open(dir.path());
    let (tx, _rx) = crossbeam_channel::bounded(1);
    g.attach_learner(tx);
    let ana = agent("agent-0");
    let mut trajectories = Vec::new();
    for round in 0..5 {
        let e = g.start_episode(&ana, request(json!({}))).unwrap();
        let a = act(&g, &ana, e.episode_id, &format!("k{round}")).unwrap();
        report(&g, &ana, a.action_id, true);
        trajectories.push(e.trajectory_id);
    }
    assert_eq!(
        g.counters.segments_dropped.load(Ordering::Relaxed),
        4,
        "segments beyond the queue's room are shed, counted"
    );
    // Invalidations and rollbacks still answer, and reach the learner.
    for t in &trajectories {
        let invalidate: InvalidateRequest = request(json!({"trajectory": t, "text": "x"}));
        g.invalidate(&operator(), invalidate).unwrap();
    }
    g.rollback(&operator(), request(json!({"version": 0})))
        .unwrap();
    assert!(trajectories.iter().all(|t| g.inbox.is_invalidated(*t)));
    assert_eq!(g.inbox.take_rollback(), Some(0));
}

#[test]
fn the_retention_rule_keeps_what_provenance_and_operators_need_and_lets_the_rest_go() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = GatewaySettings::new("cartpole", dir.path()).unwrap();
    settings.run.ledger.flush_interval_secs = 0.05;
    settings.cooldown_secs = 0.0;
    let g = Gateway::open(settings.clone()).unwrap();
    let params = g.policies.served(0).unwrap().params.clone();
    let ana = agent("agent-0");
    let publish = |g: &Gateway, author: &str| {
        g.publish_params(params.clone(), Channel::Stable, author)
            .unwrap()
    };
    for v in 1..=10 {
        assert_eq!(publish(&g, LEARNER), v);
    }
    // An episode runs version 10: its samples refer to it.
    let e = g.start_episode(&ana, request(json!({}))).unwrap();
    assert_eq!(e.policy_version, 10);
    for _ in 11..=20 {
        publish(&g, LEARNER);
    }
    // An operator's version, then the learner's newest.
    assert_eq!(publish(&g, "operator"), 21);
    for _ in 22..=100 {
        publish(&g, LEARNER);
    }
    let stored = |g: &Gateway, v: u64| g.policies.exists(v);
    assert_eq!(g.sweep_versions().unwrap(), 100 - KEEP_RECENT - 2);
    assert!(
        stored(&g, 10) && stored(&g, 21),
        "sampled and operator's versions stay"
    );
    assert!(stored(&g, 0), "the starting version stays");
    assert!(
        (100 - KEEP_RECENT + 1..=100).all(|v| stored(&g, v)),
        "the newest stay"
    );
    assert!(!stored(&g, 1) && !stored(&g, 11) && !stored(&g, 36));
    assert_eq!(g.counters.versions_removed.load(Ordering::Relaxed), 34);
    // Decided for good: sweeping again removes nothing, and the files on disk agree.
    assert_eq!(g.sweep_versions().unwrap(), 0);
    let files = std::fs::read_dir(dir.path().join("policies"))
        .unwrap()
        .count();
    assert_eq!(files, KEEP_RECENT as usize + 3);
    // A version let go is refused by name, with the rule.
    let err = g
        .rollback(&operator(), request(json!({"version": 11})))
        .unwrap_err();
    assert!(
        err.to_string().contains("was not kept") && err.to_string().contains("newest 64"),
        "{err}"
    );
    // The decisions survive a restart: the journal holds them.
    drop(g);
    let g = Gateway::open(settings).unwrap();
    assert_eq!(g.sweep_versions().unwrap(), 0);
    assert!(stored(&g, 10) && !stored(&g, 11));
    g.rollback(&operator(), request(json!({"version": 10})))
        .unwrap();
    assert_eq!(g.status().stable, 10);
}

/// A gateway serving an LSTM policy (CartPole without velocities, raw observations).
fn open_recurrent(dir: &Path) -> Gateway {
    let mut settings = GatewaySettings::new("cartpole-novel", dir).unwrap();
    settings.run.env.normalize_obs = false;
    settings.run.ledger.flush_interval_secs = 0.05;
    settings.cooldown_secs = 0.0;
    Gateway::open(settings).unwrap()
}

fn act_on(g: &Gateway, caller: &Caller, episode: u64, key: &str, obs: [f32; 2]) -> ActResponse {
    g.act(
        caller,
        episode,
        request(
            json!({"observation": obs, "env_seq": 1, "idempotency_key": key,
                       "context": {"target": [0.0]}}),
        ),
    )
    .unwrap()
}

fn report_after(g: &Gateway, caller: &Caller, action: u64, end: bool) {
    let r: ReportRequest =
        request(json!({"observation_after": [0.01, -0.02], "reward": 1.0, "terminated": end}));
    g.report(caller, action, r).unwrap();
}

fn memory_of(g: &Gateway, episode: u64) -> (Vec<f32>, Vec<f32>) {
    let state = g.state.lock();
    let e = &state.episodes[&episode];
    (e.memory.clone(), e.pending_memory.clone())
}

/// The state version `version` reaches from zero over `observations`, acting as a worker.
fn reference_state(g: &Gateway, version: u64, observations: &[[f32; 2]]) -> Vec<f32> {
    let policy = g.policies.served(version).unwrap();
    let mut model = policy.model.lock();
    let mut state = vec![0.0; model.state_len()];
    let mut rng = SampleRng::seed_from_u64(0);
    for obs in observations {
        let (mut a, mut l, mut v) = ([0.0f32], [0.0f32], [0.0f32]);
        let memory = Memory {
            state: &mut state,
            starts: &[false],
        };
        model.act(obs, memory, &mut rng, &[], &mut a, &mut l, &mut v);
    }
    state
}

#[test]
fn a_recurrent_episode_keeps_its_state_through_aborts_and_restarts_and_a_switch_zeroes_it() {
    let dir = tempfile::tempdir().unwrap();
    let g = open_recurrent(dir.path());
    let (tx, rx) = crossbeam_channel::bounded(16);
    g.attach_learner(tx);
    let ana = agent("agent-0");
    let (o1, o2, o3) = ([0.02, 0.03], [-0.04, 0.01], [0.3, -0.2]);
    let e = g.start_episode(&ana, request(json!({}))).unwrap();
    let id = e.episode_id;
    let (zero, none) = memory_of(&g, id);
    assert_eq!(
        zero,
        vec![0.0; 256],
        "an LSTM of 64 per network: h and c, twice"
    );
    assert!(none.is_empty());

    // An act advances the state aside; a retry does not advance it again; the report
    // makes it the episode's.
    let a1 = act_on(&g, &ana, id, "a1", o1);
    assert_eq!(
        act_on(&g, &ana, id, "a1", o1),
        a1,
        "a retry gets the same answer"
    );
    let after_o1 = reference_state(&g, 0, &[o1]);
    assert_eq!(memory_of(&g, id), (zero.clone(), after_o1.clone()));
    report_after(&g, &ana, a1.action_id, false);
    assert_eq!(memory_of(&g, id), (after_o1.clone(), Vec::new()));
    let a2 = act_on(&g, &ana, id, "a2", o2);
    report_after(&g, &ana, a2.action_id, false);
    let after_o2 = reference_state(&g, 0, &[o1, o2]);
    assert_eq!(memory_of(&g, id).0, after_o2);
    assert_ne!(after_o2, after_o1, "the state moves");

    // An aborted action never happened: the state goes back to before it.
    let a3 = act_on(&g, &ana, id, "a3", o3);
    let moved: RecheckRequest = request(json!({"target": [1.0]}));
    assert_eq!(
        g.recheck(&ana, a3.action_id, moved).unwrap().verdict,
        Verdict::Abort
    );
    assert_eq!(memory_of(&g, id), (after_o2.clone(), Vec::new()));
    let trajectory = g.episode(&ana, id).unwrap().trajectory_id;
    assert_ne!(
        trajectory, e.trajectory_id,
        "the abort started a new trajectory"
    );

    // The first trajectory's steps went to the learner with the state before each.
    assert!(
        rx.try_recv().is_err(),
        "an invalidated trajectory is not cut"
    );

    // A restart (the journal replayed) keeps the episode's state, pending one included.
    let a4 = act_on(&g, &ana, id, "a4", o3);
    let pending = memory_of(&g, id);
    assert_eq!(pending.1, reference_state(&g, 0, &[o1, o2, o3]));
    drop(g);
    let g = open_recurrent(dir.path());
    assert_eq!(memory_of(&g, id), pending, "restored bit for bit");
    let (tx, rx) = crossbeam_channel::bounded(16);
    g.attach_learner(tx);
    report_after(&g, &ana, a4.action_id, false);
    let a5 = act_on(&g, &ana, id, "a5", o1);
    report_after(&g, &ana, a5.action_id, true);
    let s = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!((s.trajectory, s.len()), (trajectory, 2));
    let mut stored = after_o2.clone();
    stored.extend(reference_state(&g, 0, &[o1, o2, o3]));
    assert_eq!(
        s.states(),
        stored,
        "each row keeps the state before its step"
    );
    assert!(
        memory_of(&g, id).0.is_empty(),
        "an ended episode lets its state go"
    );

    // A forced switch of version starts the episode's new trajectory from zero.
    let params = g.policies.served(0).unwrap().params.clone();
    assert_eq!(
        g.publish_params(params, Channel::Stable, "operator")
            .unwrap(),
        1
    );
    let e = g.start_episode(&ana, request(json!({}))).unwrap();
    assert_eq!(e.policy_version, 1);
    let b1 = act_on(&g, &ana, e.episode_id, "b1", o1);
    report_after(&g, &ana, b1.action_id, false);
    assert_ne!(memory_of(&g, e.episode_id).0, zero);
    let force: SwitchRequest = request(json!({"version": 0, "force": true}));
    g.rollback(&operator(), force).unwrap();
    let now = g.episode(&ana, e.episode_id).unwrap();
    assert_eq!(now.policy_version, 0);
    assert_ne!(now.trajectory_id, e.trajectory_id);
    assert_eq!(memory_of(&g, e.episode_id), (zero, Vec::new()));
}

/// A trainer's cursor stops below the lowest sample id whose report is not durable yet:
/// a slower report's sample is read later, never skipped.
#[test]
fn the_durable_horizon_waits_for_the_slowest_report() {
    let dir = tempfile::tempdir().unwrap();
    let g = open(dir.path());
    let start = g.durable_horizon();
    let slow = g.reserve_sample();
    let fast = g.reserve_sample();
    assert_eq!((slow.id, fast.id), (start, start + 1));
    drop(fast);
    assert_eq!(g.durable_horizon(), start, "the slower one holds it");
    drop(slow);
    assert_eq!(
        g.durable_horizon(),
        start + 2,
        "none in flight: the next id"
    );
}

#[test]
fn a_recheck_in_memory_answers_only_what_needs_no_write() {
    let dir = tempfile::tempdir().unwrap();
    let g = open(dir.path());
    let (ana, bob) = (agent("agent-0"), agent("agent-1"));
    let e = g.start_episode(&ana, request(json!({}))).unwrap();
    let with_target = |key: &str| {
        g.act(
            &ana,
            e.episode_id,
            request(json!({"observation": [0.0, 0.1, 0.0, -0.1], "env_seq": 1,
                "idempotency_key": key, "context": {"target": [0.0, 0.0]}})),
        )
        .unwrap()
    };
    let a = with_target("k1");
    let still: RecheckRequest = request(json!({"target": [0.0, 0.0]}));
    let moved: RecheckRequest = request(json!({"target": [5.0, 0.0]}));
    let answer = g.recheck_in_memory(&ana, a.action_id, &still).unwrap();
    assert_eq!(answer.map(|r| r.verdict), Some(Verdict::Proceed));
    // A moved target needs an abort written: left to `recheck`, nothing changed here.
    assert!(g
        .recheck_in_memory(&ana, a.action_id, &moved)
        .unwrap()
        .is_none());
    assert_eq!(
        g.recheck(&ana, a.action_id, still).unwrap().verdict,
        Verdict::Proceed,
        "still outstanding"
    );
    // Refusals are the same as `recheck`'s.
    let bad: RecheckRequest = request(json!({"target": [0.0]}));
    assert!(matches!(
        g.recheck_in_memory(&ana, a.action_id, &bad),
        Err(RequestError::Invalid(_))
    ));
    assert!(matches!(
        g.recheck_in_memory(&bob, a.action_id, &moved),
        Err(RequestError::Forbidden(_) | RequestError::NotFound(_))
    ));
    assert_eq!(
        g.recheck(&ana, a.action_id, moved).unwrap().verdict,
        Verdict::Abort
    );
    let after: RecheckRequest = request(json!({"target": [0.0, 0.0]}));
    assert!(matches!(
        g.recheck_in_memory(&ana, a.action_id, &after),
        Err(RequestError::Conflict(_))
    ));
}
