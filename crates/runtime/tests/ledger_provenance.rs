//! Training runs keep a ledger: every consumed sample is stored with its six provenance
//! fields, every admission decision can be recomputed from what is stored, action latency
//! shows in the execution summaries, and a resumed run marks what it supersedes.

use strata_ledger::{
    recompute, summary, AdmissionRules, DecisionKind, LedgerData, ReasonCode, RuleKind, Storage,
    Target,
};
use strata_runtime::{preset, run, Mode, RunConfig, RunDir, Trainer, UpdateRecord};

fn train(config: RunConfig, dir: &std::path::Path) -> (Trainer, Vec<UpdateRecord>) {
    let mut trainer = Trainer::new(config).unwrap();
    let mut run_dir = RunDir::create(dir, &trainer).unwrap();
    let mut records = Vec::new();
    run::train(&mut trainer, &mut run_dir, &mut |r| records.push(r.clone())).unwrap();
    (trainer, records)
}

fn ledger(dir: &std::path::Path) -> LedgerData {
    let storage = Storage::open(dir.join("ledger").to_str().unwrap()).unwrap();
    LedgerData::read(&storage).unwrap()
}

fn cartpole(updates: u64) -> RunConfig {
    let mut c = preset("cartpole").unwrap();
    c.train.total_steps = updates * c.steps_per_update();
    c
}

#[test]
fn every_consumed_sample_is_stored_with_all_six_fields() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = cartpole(6);
    c.runtime.workers = 2;
    let (trainer, records) = train(c, tmp.path());
    let data = ledger(tmp.path());
    let hash = trainer.config_hash().to_string();
    assert_eq!(data.sample_count() as u64, trainer.progress().global_step);
    let mut ids = Vec::new();
    let mut fragments = std::collections::BTreeMap::new();
    for b in &data.samples {
        assert_eq!(b.bucket, "train");
        assert_eq!(b.config_hash, hash); // (1) with the policy version
        for i in 0..b.len() {
            let r = b.row(i);
            ids.push(r.sample_id);
            assert!(r.policy_version < 6);
            assert!(r.issued_at_ns > 0 && r.completed_at_ns >= r.issued_at_ns); // (2)
            assert_eq!(r.obs_count, 1); // (3) no latency: the observation itself
            assert_eq!(r.obs_min.len(), 4);
            assert_eq!(r.obs_min, r.obs_max);
            assert!(r.env_clock > 0); // (4)
            assert!(r.sampler_version >= r.policy_version); // (5)
            assert_eq!(r.episode_return.is_some(), r.terminated || r.truncated);
            // Where it came from: worker 0 or 1, and that worker's fragment number.
            *fragments
                .entry((r.worker.unwrap(), r.fragment.unwrap()))
                .or_insert(0) += 1;
        }
    }
    // Six updates of one fragment per worker, each 32 steps of 4 envs.
    assert_eq!(fragments.len(), 12);
    assert!(
        fragments.values().all(|&rows| rows == 32 * 4),
        "{fragments:?}"
    );
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), data.sample_count(), "sample ids are unique");
    // Every sample has a decision under the registered rules; every batch names them.
    let s = summary(&data);
    assert!(s.iter().all(|g| g.undecided == 0 && g.trained == g.samples));
    assert!(s.iter().all(|g| g.rules_versions == vec![1]));
    for r in &records {
        assert_eq!(r.admission.rules_version, Some(1));
        assert_eq!(r.admission.trained, 8 * 32);
    }
    // Every published version is bound to its rules.
    let bound: Vec<u64> = data.generations.iter().map(|g| g.policy_version).collect();
    assert_eq!(bound, (0..=6).collect::<Vec<_>>());
    // (6) nothing was invalidated in a clean run.
    assert!(data.invalidations.is_empty());
}

#[test]
fn action_latency_shows_in_clock_and_observation_summaries() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = cartpole(2);
    c.env.action_latency_ticks = 2;
    train(c, tmp.path());
    let data = ledger(tmp.path());
    let mut checked = 0;
    for b in &data.samples {
        for i in 1..b.len() {
            let same = b.trajectory_id[i] == b.trajectory_id[i - 1];
            if same && !b.terminated[i] {
                // Two ticks of the previous action, then one of the new: three
                // observations, three clock ticks.
                assert_eq!(b.obs_count[i], 3);
                assert_eq!(b.env_clock[i] - b.env_clock[i - 1], 3);
                let d = i * 4..(i + 1) * 4;
                assert!(b.obs_min[d.clone()]
                    .iter()
                    .zip(&b.obs_max[d])
                    .all(|(lo, hi)| lo <= hi));
                checked += 1;
            }
        }
    }
    assert!(checked > 100, "{checked}");
}

#[test]
fn admission_decisions_are_recorded_and_recompute_to_themselves() {
    for rules in [
        AdmissionRules {
            rule: RuleKind::Drop,
            max_age_versions: Some(0),
            ..AdmissionRules::default()
        },
        AdmissionRules {
            rule: RuleKind::Decay,
            kl_scale: 0.0005,
            min_weight: 0.01,
            ..AdmissionRules::default()
        },
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = cartpole(8);
        c.runtime.mode = Mode::Async;
        c.train.deterministic = true;
        c.admission = rules.clone();
        let (_, records) = train(c, tmp.path());
        let data = ledger(tmp.path());
        let dropped: u64 = records.iter().map(|r| r.admission.dropped).sum();
        let down: u64 = records.iter().map(|r| r.admission.down_weighted).sum();
        match rules.rule {
            // Async fragments lag by one after the first update: all of those are dropped.
            RuleKind::Drop => assert_eq!(dropped, 7 * 256),
            _ => assert!(down + dropped > 0, "decay changed nothing"),
        }
        let kinds: Vec<DecisionKind> = data.decisions.iter().map(|d| d.decision).collect();
        assert_eq!(kinds.len(), 8);
        assert!(data.decisions.iter().all(|d| d.kl.is_some()));
        // The same data under the same rules: every decision comes out the same.
        let again = recompute(&data, &rules).unwrap();
        assert!(again.iter().all(|g| g.changed == 0), "{again:?}");
    }
}

#[test]
fn strict_rules_refuse_async_collection() {
    let mut c = cartpole(2);
    c.runtime.mode = Mode::Async;
    c.admission.rule = RuleKind::Strict;
    let err = Trainer::new(c).err().unwrap().to_string();
    assert!(err.contains("admission.rule"), "{err}");
}

#[test]
fn resuming_from_an_earlier_checkpoint_marks_later_samples_abandoned() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = cartpole(6);
    c.train.checkpoint_every = 3 * c.steps_per_update();
    let (first, _) = train(c, tmp.path());
    let total = first.progress().global_step;
    drop(first);
    let checkpoint = tmp.path().join(format!(
        "checkpoints/step-{}",
        3 * preset("cartpole").unwrap().steps_per_update()
    ));
    let mut resumed = Trainer::resume(&checkpoint, None).unwrap();
    let mut run_dir = RunDir::create(tmp.path(), &resumed).unwrap();
    run::train(&mut resumed, &mut run_dir, &mut |_| {}).unwrap();
    let data = ledger(tmp.path());
    let abandoned: Vec<_> = data
        .invalidations
        .iter()
        .filter(|i| i.reason == ReasonCode::AbandonedByResume)
        .collect();
    assert_eq!(abandoned.len(), 1);
    assert_eq!(abandoned[0].author, "learner");
    let half = total / 2;
    assert_eq!(
        abandoned[0].target,
        Target::Samples {
            first: half,
            last: total - 1
        }
    );
    // Nothing was deleted: both continuations are stored, new ids after the old ones.
    assert_eq!(data.sample_count() as u64, total + half);
    let invalid: u64 = summary(&data)
        .iter()
        .map(|g| g.invalidated.values().sum::<u64>())
        .sum();
    assert_eq!(invalid, half);
}

#[test]
fn a_ledger_that_cannot_write_stops_the_run_with_the_storage_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ledger");
    let mut trainer = Trainer::new(cartpole(400)).unwrap();
    let ledger = strata_ledger::Ledger::open(&strata_ledger::LedgerConfig {
        flush_interval: std::time::Duration::from_millis(5),
        ..strata_ledger::LedgerConfig::new(dir.to_str().unwrap())
    })
    .unwrap();
    trainer.attach_ledger(ledger).unwrap();
    // The storage breaks: the sample log's directory cannot be created.
    std::fs::write(dir.join("wal"), b"in the way").unwrap();
    let err = loop {
        match trainer.iterate() {
            Ok(_) => assert!(!trainer.finished(), "the run ended without noticing"),
            Err(e) => break e,
        }
    };
    let message = err.to_string();
    assert!(message.starts_with("ledger:"), "{message}");
    assert!(message.contains("writing"), "{message}");
}
