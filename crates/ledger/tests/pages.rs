//! The page reader against the whole-ledger answers it replaces: the same pages and the same
//! report checks, from a ledger of many files (flushed, compacted, merged and durable only in
//! the append log), read while its writer is still open.

use std::collections::BTreeMap;
use std::time::Duration;

use strata_ledger::{
    admitted, trained_decisions, AdmissionRules, AdmittedQuery, Bucket, DecisionKind,
    DecisionRecord, Invalidation, Ledger, LedgerConfig, LedgerData, PageReader, ReasonCode,
    RuleKind, SampleBatch, SampleRecord, Storage, Target, TrainedReport,
};

const OBS_DIM: usize = 2;

/// Step `step` of trajectory `trajectory`, produced by `version`, with its transition
/// stored unless `id % 11 == 0`.
fn record(id: u64, trajectory: u64, step: u32, version: u64, bucket: &Bucket) -> SampleRecord {
    SampleRecord {
        sample_id: id,
        episode_id: trajectory,
        trajectory_id: trajectory,
        step,
        policy_version: version,
        config_hash: "ext".into(),
        issued_at_ns: 1_000_000 + id as i64 * 10,
        completed_at_ns: 1_000_005 + id as i64 * 10,
        obs_count: 1,
        obs_hash: id,
        obs_min: vec![0.0; OBS_DIM],
        obs_max: vec![1.0; OBS_DIM],
        obs_mean: vec![0.5; OBS_DIM],
        env_clock: 10 + u64::from(step) * 2,
        sampler_version: version,
        bucket: bucket.clone(),
        idempotency_key: None,
        reward: 1.0,
        terminated: step == 7,
        truncated: false,
        episode_return: (step == 7).then_some(8.0),
        success: None,
        worker: None,
        fragment: None,
        action: Some("1".into()),
        behaviour_log_prob: Some(-0.5),
        observation: (!id.is_multiple_of(11)).then(|| vec![0; 4 * OBS_DIM]),
        next_observation: (!id.is_multiple_of(11)).then(|| vec![0; 4 * OBS_DIM]),
    }
}

/// Rows `ids` of trajectories of eight steps, the version rising every 64 ids, a tenth
/// of them in the canary bucket.
fn rows(ids: std::ops::Range<u64>) -> Vec<SampleBatch> {
    let mut by_bucket: BTreeMap<String, SampleBatch> = BTreeMap::new();
    for id in ids {
        let trajectory = id / 8;
        let bucket = if trajectory % 10 == 3 {
            Bucket::new("canary").unwrap()
        } else {
            Bucket::train()
        };
        by_bucket
            .entry(bucket.to_string())
            .or_insert_with(|| SampleBatch::new(&bucket, "ext", OBS_DIM))
            .push(&record(id, trajectory, (id % 8) as u32, id / 64, &bucket))
            .unwrap();
    }
    by_bucket.into_values().collect()
}

fn decision(first: u64, last: u64, rules_version: u64, rules_hash: &str) -> DecisionRecord {
    DecisionRecord {
        first_sample: first,
        last_sample: last,
        bucket: Bucket::train(),
        policy_version: first / 64,
        learner_version: first / 64 + 1,
        update: first / 64 + 2,
        rules_version,
        rules_hash: rules_hash.into(),
        decision: DecisionKind::Trained,
        weight: 1.0,
        kl: None,
        age_versions: 1,
        age_seconds: 0.0,
        decided_at_ns: 5,
    }
}

/// Copies the files of `from` (and below) into `to`.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn pages_and_report_checks_answer_as_the_whole_ledger_does() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(&LedgerConfig {
        flush_rows: 40,
        flush_interval: Duration::from_secs(60),
        ..LedgerConfig::new(dir.path().to_str().unwrap())
    })
    .unwrap();
    let rules = ledger
        .register_rules(&AdmissionRules {
            rule: RuleKind::Decay,
            kl_scale: 0.1,
            ..AdmissionRules::default()
        })
        .unwrap();
    let invalidate = |target, reason| {
        ledger
            .invalidate(Invalidation {
                target,
                reason,
                text: "test".into(),
                author: "op".into(),
                rules_version: rules.version,
                at_ns: 1,
            })
            .unwrap();
    };
    // Flushed files, compacted into partitions (and their runs merged), then more files.
    for chunk in (0..1_500u64).step_by(75) {
        for b in rows(chunk..chunk + 75) {
            ledger.append_samples(b).unwrap();
        }
    }
    ledger.flush().unwrap();
    ledger.compact_log().unwrap();
    for chunk in (1_500..2_400u64).step_by(90) {
        for b in rows(chunk..chunk + 90) {
            ledger.append_samples(b).unwrap();
        }
    }
    invalidate(Target::Trajectory { id: 20 }, ReasonCode::VersionSwitch);
    invalidate(Target::Trajectory { id: 250 }, ReasonCode::Operator);
    invalidate(
        Target::Samples {
            first: 700,
            last: 760,
        },
        ReasonCode::Operator,
    );
    invalidate(
        Target::Samples {
            first: 2_390,
            last: 2_450,
        },
        ReasonCode::HumanInterrupt,
    );
    ledger
        .append_decisions(vec![
            decision(100, 180, rules.version, &rules.hash),
            decision(1_900, 1_999, rules.version, &rules.hash),
        ])
        .unwrap();
    ledger.flush().unwrap();
    // Rows both in the append log and in a flushed file (as a reader can find them while
    // a flush moves them): each is read once.
    for b in rows(2_400..2_430) {
        ledger.append_samples_durable(b).unwrap();
    }
    let appends = dir.path().join("wal/appends");
    let kept = tempfile::tempdir().unwrap();
    copy_dir(&appends, kept.path());
    ledger.flush().unwrap();
    copy_dir(kept.path(), &appends);
    // The newest rows are durable in the append log alone (the writer has not flushed).
    for b in rows(2_430..2_460) {
        ledger.append_samples_durable(b).unwrap();
    }

    let storage = Storage::open(dir.path().to_str().unwrap()).unwrap();
    let whole = LedgerData::read(&storage).unwrap();
    assert_eq!(whole.sample_count(), 2_460);
    assert!(whole.files > 20, "{} files", whole.files);
    let mut reader = PageReader::new();
    let canary = Bucket::new("canary").unwrap();
    for from in [
        0,
        1,
        99,
        181,
        700,
        761,
        1_499,
        1_500,
        2_389,
        2_455,
        2_460,
        u64::MAX,
    ] {
        for limit in [1, 7, 100, 10_000] {
            for bucket in [None, Some(&canary)] {
                for before in [None, Some(2_430)] {
                    let query = AdmittedQuery {
                        from,
                        before,
                        limit,
                        learner_version: 30,
                        bucket,
                        now_ns: 2_000_000,
                    };
                    let expected = admitted(&whole, &rules, &query);
                    let page = reader.admitted(&storage, &rules, &query).unwrap();
                    assert_eq!(page, expected, "{query:?}");
                }
            }
        }
    }
    // A trainer following the cursor from the start sees every admitted sample once.
    let mut cursor = 0;
    let mut seen = Vec::new();
    loop {
        let page = reader
            .admitted(
                &storage,
                &rules,
                &AdmittedQuery {
                    from: cursor,
                    before: None,
                    limit: 97,
                    learner_version: 30,
                    bucket: None,
                    now_ns: 2_000_000,
                },
            )
            .unwrap();
        seen.extend(page.rows.iter().map(|r| r.sample.sample_id));
        cursor = page.next_cursor;
        if !page.more {
            break;
        }
    }
    let all = admitted(
        &whole,
        &rules,
        &AdmittedQuery {
            from: 0,
            before: None,
            limit: 100_000,
            learner_version: 30,
            bucket: None,
            now_ns: 2_000_000,
        },
    );
    let expected: Vec<u64> = all.rows.iter().map(|r| r.sample.sample_id).collect();
    assert_eq!(seen, expected);
    assert!(seen.len() > 1_500);

    let kl = BTreeMap::from([(0u64, 0.01)]);
    let reports: [&[u64]; 6] = [
        &[],
        &[300, 301, 302, 303],
        &[5, 2_455],
        &[150],                     // decided
        &[705],                     // invalidated
        &[22, 2_000, 2_001, 9_999], // not in the ledger
    ];
    for samples in reports {
        for kl in [&BTreeMap::new(), &kl] {
            let report = TrainedReport {
                version: 40,
                base_version: 30,
                samples,
                kl,
                now_ns: 3_000_000,
            };
            let expected = trained_decisions(&whole, &rules, &report);
            let got = reader.trained_decisions(&storage, &rules, &report).unwrap();
            assert_eq!(got, expected, "{samples:?}");
        }
    }
    drop(ledger);
}
