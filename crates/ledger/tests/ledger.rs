//! The ledger end to end on a local directory: what is written is read back whole, repeats
//! and version switches are caught, rules roll back, bad input is refused.

use std::time::Duration;

use strata_ledger::{
    curves, lag_histogram, metrics, recompute, summary, write_manifest, AdmissionRules,
    DecisionKind, DecisionRecord, Invalidation, Ledger, LedgerConfig, LedgerData, LedgerError,
    ManifestFormat, ReasonCode, RuleKind, SampleBatch, SampleRecord, Storage, Target,
    VersionSwitch,
};

const OBS_DIM: usize = 3;

fn config(dir: &std::path::Path) -> LedgerConfig {
    LedgerConfig {
        flush_interval: Duration::from_secs(60),
        ..LedgerConfig::new(dir.to_str().unwrap())
    }
}

/// A sample of trajectory `trajectory` (= episode) at `step`, produced by `version`.
fn record(id: u64, trajectory: u64, step: u32, version: u64, last: bool) -> SampleRecord {
    let x = id as f32;
    SampleRecord {
        sample_id: id,
        episode_id: trajectory,
        trajectory_id: trajectory,
        step,
        policy_version: version,
        config_hash: "cafe".into(),
        issued_at_ns: 1_000_000 + id as i64 * 10,
        completed_at_ns: 1_000_005 + id as i64 * 10,
        obs_count: 2,
        obs_hash: id.wrapping_mul(0x9e37_79b9),
        obs_min: vec![x, -x, 0.0],
        obs_max: vec![x + 1.0, -x + 1.0, 1.0],
        obs_mean: vec![x + 0.5, -x + 0.5, 0.5],
        env_clock: 100 + u64::from(step) * 2,
        sampler_version: version + u64::from(step % 2),
        bucket: "train".parse().unwrap(),
        idempotency_key: None,
        reward: 1.0,
        terminated: last,
        truncated: false,
        episode_return: last.then_some(f64::from(step + 1)),
        success: last.then_some(step >= 3),
        worker: None,
        fragment: None,
        action: None,
        behaviour_log_prob: None,
        observation: None,
        next_observation: None,
    }
}

/// `episodes` episodes of `len` steps each, ids from `first_id`, one version.
fn episodes(first_id: u64, episodes: u64, len: u32, version: u64) -> SampleBatch {
    let mut b = SampleBatch::new(&"train".parse().unwrap(), "cafe", OBS_DIM);
    let mut id = first_id;
    for e in 0..episodes {
        for s in 0..len {
            b.push(&record(id, first_id + e, s, version, s + 1 == len))
                .unwrap();
            id += 1;
        }
    }
    b
}

fn read(dir: &std::path::Path) -> LedgerData {
    LedgerData::read(&Storage::open(dir.to_str().unwrap()).unwrap()).unwrap()
}

fn rows(data: &LedgerData) -> Vec<SampleRecord> {
    let mut out: Vec<SampleRecord> = data
        .samples
        .iter()
        .flat_map(|b| (0..b.len()).map(move |i| b.row(i)))
        .collect();
    out.sort_by_key(|r| r.sample_id);
    out
}

#[test]
fn samples_come_back_with_all_six_fields() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(&config(dir.path())).unwrap();
    let written = episodes(0, 3, 4, 2);
    let mut expected: Vec<SampleRecord> = (0..written.len()).map(|i| written.row(i)).collect();
    ledger.append_samples(written).unwrap();
    ledger.append_samples(episodes(12, 2, 5, 3)).unwrap();
    let b = episodes(12, 2, 5, 3);
    expected.extend((0..b.len()).map(|i| b.row(i)));
    let stats = ledger.close().unwrap();
    assert_eq!(stats.rows_written, 22);

    let data = read(dir.path());
    let back = rows(&data);
    assert_eq!(back, expected);
    for r in &back {
        // (1) version and config hash, (2) issue and completion, (3) observation summary,
        // (4) env clock, (5) sampler version and the derived flag.
        assert!(!r.config_hash.is_empty());
        assert!(r.completed_at_ns >= r.issued_at_ns && r.issued_at_ns > 0);
        assert!(r.obs_count > 0 && r.obs_min.len() == OBS_DIM);
        assert!(r.obs_min.iter().zip(&r.obs_max).all(|(a, b)| a <= b));
        assert!(r.env_clock >= 100);
    }
    // Partitioned by bucket and by ranges of versions: both generations share one.
    let partitions: Vec<_> = std::fs::read_dir(dir.path().join("samples/bucket=train"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(partitions, ["versions=0-999"]);
}

#[test]
fn a_repeated_idempotency_key_is_stored_once_and_marked_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let keyed = |id: u64, key: &str| {
        let mut b = SampleBatch::new(&"stable".parse().unwrap(), "cafe", OBS_DIM);
        let mut r = record(id, 50 + id, 0, 1, true);
        r.idempotency_key = Some(key.into());
        r.bucket = "stable".parse().unwrap();
        b.push(&r).unwrap();
        b
    };
    let ledger = Ledger::open(&config(dir.path())).unwrap();
    ledger.append_samples(keyed(0, "agent-1/action-7")).unwrap();
    ledger.append_samples(keyed(1, "agent-1/action-7")).unwrap();
    ledger.append_samples(keyed(2, "agent-1/action-8")).unwrap();
    assert_eq!(ledger.close().unwrap().duplicates, 1);
    // Also across a restart: the keys are read back on open.
    let ledger = Ledger::open(&config(dir.path())).unwrap();
    assert_eq!(ledger.next_sample_id(), 3);
    ledger.append_samples(keyed(3, "agent-1/action-8")).unwrap();
    ledger.close().unwrap();

    let data = read(dir.path());
    let ids: Vec<u64> = rows(&data).iter().map(|r| r.sample_id).collect();
    assert_eq!(ids, vec![0, 2]);
    let dups: Vec<(String, u64)> = data
        .duplicates
        .iter()
        .map(|d| (d.idempotency_key.clone(), d.original_sample))
        .collect();
    assert_eq!(
        dups,
        vec![
            ("agent-1/action-7".to_string(), 0),
            ("agent-1/action-8".to_string(), 2)
        ]
    );
}

/// Reopening reads the newest sample files only: the highest id comes from the files'
/// names, the key window from the newest files. A corrupt file older than the window is
/// never read (it would be named in an error if it were), and a key repeated from within
/// the window is still caught.
#[test]
fn reopening_reads_the_newest_sample_files_only() {
    use strata_ledger::KEY_WINDOW;
    let dir = tempfile::tempdir().unwrap();
    let keyed = |first: u64, n: u64| {
        let mut b = SampleBatch::new(&"stable".parse().unwrap(), "cafe", OBS_DIM);
        for id in first..first + n {
            let mut r = record(id, 1_000 + id, 0, 1, true);
            r.idempotency_key = Some(format!("agent-1/{id}"));
            r.bucket = "stable".parse().unwrap();
            b.push(&r).unwrap();
        }
        b
    };
    let ledger = Ledger::open(&config(dir.path())).unwrap();
    ledger.append_samples(keyed(0, 10)).unwrap();
    ledger.close().unwrap();
    let oldest: Vec<_> = walk(dir.path())
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .collect();
    assert_eq!(oldest.len(), 1, "{oldest:?}");
    let ledger = Ledger::open(&config(dir.path())).unwrap();
    ledger.append_samples(keyed(10, KEY_WINDOW as u64)).unwrap();
    ledger.close().unwrap();
    std::fs::write(&oldest[0], b"not parquet any more").unwrap();

    let ledger = Ledger::open(&config(dir.path())).unwrap();
    assert_eq!(ledger.next_sample_id(), 10 + KEY_WINDOW as u64);
    let again = |id: u64, key: u64| {
        let mut b = keyed(key, 1);
        b.sample_id[0] = id;
        b
    };
    let next = ledger.next_sample_id();
    ledger.append_samples(again(next, 10)).unwrap(); // in the window: a duplicate
    ledger.append_samples(again(next + 1, 5)).unwrap(); // older than the window: new
    assert_eq!(ledger.close().unwrap().duplicates, 1);
}

/// An owner that writes for days compacts while it writes: the log compacted so far moves
/// into the generation partitions, later appends go on into new log files, and every row
/// reads back once.
#[test]
fn compacting_while_writing_keeps_every_row_once() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(&config(dir.path())).unwrap();
    ledger.append_samples(episodes(0, 2, 5, 1)).unwrap();
    ledger.flush().unwrap();
    assert_eq!(ledger.compact_log().unwrap(), 10);
    assert_eq!(ledger.compact_log().unwrap(), 0, "nothing left to move");
    ledger.append_samples(episodes(10, 2, 5, 2)).unwrap();
    ledger.close().unwrap();
    let wal = dir.path().join("wal/samples");
    assert!(
        walk(dir.path()).iter().all(|p| !p.starts_with(&wal)),
        "the close compacted the rest"
    );
    let ids: Vec<u64> = rows(&read(dir.path()))
        .iter()
        .map(|r| r.sample_id)
        .collect();
    assert_eq!(ids, (0..20).collect::<Vec<_>>());
}

/// With `compact_every`, the ledger's own thread compacts the sample log while the writer
/// goes on: a close then has only the last stretch to compact.
#[test]
fn the_ledger_compacts_its_sample_log_on_its_own_while_writing() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(&LedgerConfig {
        compact_every: Some(Duration::from_millis(50)),
        ..config(dir.path())
    })
    .unwrap();
    ledger.append_samples(episodes(0, 2, 5, 1)).unwrap();
    ledger.flush().unwrap();
    let wal = dir.path().join("wal/samples");
    let logs = || {
        walk(dir.path())
            .iter()
            .filter(|p| p.starts_with(&wal))
            .count()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while logs() > 0 {
        assert!(std::time::Instant::now() < deadline, "never compacted");
        std::thread::sleep(Duration::from_millis(10));
    }
    ledger.append_samples(episodes(10, 1, 5, 2)).unwrap();
    ledger.close().unwrap();
    let ids: Vec<u64> = rows(&read(dir.path()))
        .iter()
        .map(|r| r.sample_id)
        .collect();
    assert_eq!(ids, (0..15).collect::<Vec<_>>());
}

/// A reader of a live ledger is not thrown by the compactions its owner runs meanwhile: a
/// log file compacted away mid-read makes the read start over, never fail.
#[test]
fn reads_of_a_ledger_being_compacted_see_every_row() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(&LedgerConfig {
        compact_every: Some(Duration::from_millis(5)),
        ..config(dir.path())
    })
    .unwrap();
    let storage = Storage::open(dir.path().to_str().unwrap()).unwrap();
    let mut written = 0;
    for round in 0..60u64 {
        ledger
            .append_samples(episodes(round * 10, 2, 5, round + 1))
            .unwrap();
        ledger.flush().unwrap();
        written += 10;
        let seen = LedgerData::read(&storage).unwrap().sample_count();
        assert_eq!(seen, written, "round {round}");
    }
    ledger.close().unwrap();
}

/// A ledger flushed once a second for days would hold a file per flush per table: its
/// owner merges runs of small files, every row reads back once and the same, and the
/// inputs of a merge a crash interrupted are left out by readers and removed by the next
/// owner.
#[test]
fn small_files_are_merged_and_every_row_reads_back_once() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(&config(dir.path())).unwrap();
    let rules = ledger.register_rules(&AdmissionRules::default()).unwrap();
    for round in 0..40u64 {
        let version = round + 1;
        ledger
            .bind(version, "cafe", rules.version, "publish", "test")
            .unwrap();
        ledger
            .append_samples(episodes(round * 10, 2, 5, version))
            .unwrap();
        let first = round * 10;
        let kept = decision(first, first + 9, 0, 0.01, DecisionKind::Trained);
        ledger.append_decisions(vec![kept]).unwrap();
        ledger.flush().unwrap();
    }
    let files_under = |table: &str| {
        walk(dir.path())
            .iter()
            .filter(|p| p.starts_with(dir.path().join(table)))
            .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
            .count()
    };
    assert_eq!(files_under("decisions"), 40);
    let before = read(dir.path());
    // A copy of every file as it was: the inputs a crashed merge would leave.
    let unmerged = tempfile::tempdir().unwrap();
    copy_tree(dir.path(), unmerged.path());
    assert_eq!(ledger.compact_log().unwrap(), 400);
    for table in ["samples", "decisions", "generations"] {
        assert_eq!(files_under(table), 1, "{table} merged into one file");
    }
    let after = read(dir.path());
    assert_eq!(rows(&after), rows(&before));
    assert_eq!(after.decisions, before.decisions);
    assert_eq!(after.generations, before.generations);
    ledger.close().unwrap();
    // The crash: the merged files are in place, and so are their inputs (the sample
    // files were log files then, so the tables written directly stand for them).
    for table in ["decisions", "generations"] {
        copy_tree(&unmerged.path().join(table), &dir.path().join(table));
    }
    assert!(files_under("decisions") > 1);
    let seen = read(dir.path());
    assert_eq!(rows(&seen), rows(&before), "each row once");
    assert_eq!(seen.decisions, before.decisions);
    assert_eq!(seen.generations, before.generations);
    Ledger::open(&config(dir.path())).unwrap().close().unwrap();
    for table in ["samples", "decisions", "generations"] {
        assert_eq!(files_under(table), 1, "{table}: the leftovers removed");
    }
    assert_eq!(rows(&read(dir.path())), rows(&before));
}

/// Copies every file under `from` to the same place under `to`.
fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    for file in walk(from) {
        let target = to.join(file.strip_prefix(from).unwrap());
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(&file, &target).unwrap();
    }
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn a_version_switch_mid_trajectory_invalidates_the_whole_trajectory() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(&config(dir.path())).unwrap();
    let rules = ledger.register_rules(&AdmissionRules::default()).unwrap();
    ledger
        .bind(4, "cafe", rules.version, "publish", "test")
        .unwrap();
    // Trajectory 7: two steps under version 4, then (in a later batch) one under 5.
    let mut b = SampleBatch::new(&"train".parse().unwrap(), "cafe", OBS_DIM);
    b.push(&record(0, 7, 0, 4, false)).unwrap();
    b.push(&record(1, 7, 1, 4, false)).unwrap();
    b.push(&record(2, 8, 0, 4, false)).unwrap();
    ledger.append_samples(b).unwrap();
    let mut b = SampleBatch::new(&"train".parse().unwrap(), "cafe", OBS_DIM);
    b.push(&record(3, 7, 2, 5, true)).unwrap();
    // Trajectory 8's env clock goes backwards: misaligned.
    let mut back = record(4, 8, 1, 4, true);
    back.env_clock = 50;
    b.push(&back).unwrap();
    ledger.append_samples(b).unwrap();
    ledger.close().unwrap();

    let data = read(dir.path());
    assert_eq!(data.invalidations.len(), 2);
    let by_target = |id| {
        data.invalidations
            .iter()
            .find(|i| i.target == Target::Trajectory { id })
            .unwrap()
    };
    let switch = by_target(7);
    assert_eq!(switch.reason, ReasonCode::VersionSwitch);
    assert_eq!(switch.author, "ledger");
    assert_eq!(switch.rules_version, rules.version);
    assert!(switch.text.contains("from 4 to 5"), "{}", switch.text);
    assert_eq!(by_target(8).reason, ReasonCode::ObservationMisaligned);
    // The whole trajectory counts as invalid, including samples written before the switch;
    // nothing was deleted.
    assert_eq!(data.sample_count(), 5);
    let s = summary(&data);
    let invalid: u64 = s
        .iter()
        .map(|g| g.invalidated.get("version_switch").copied().unwrap_or(0))
        .sum();
    assert_eq!(invalid, 3);
}

#[test]
fn rolling_back_a_policy_restores_its_rules_also_after_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let strict = AdmissionRules {
        rule: RuleKind::Strict,
        max_policy_lag: 0,
        ..AdmissionRules::default()
    };
    let decay = AdmissionRules {
        rule: RuleKind::Decay,
        ..AdmissionRules::default()
    };
    let ledger = Ledger::open(&config(dir.path())).unwrap();
    let v1 = ledger.register_rules(&strict).unwrap();
    let v2 = ledger.register_rules(&decay).unwrap();
    assert_eq!((v1.version, v2.version), (1, 2));
    assert_eq!(ledger.register_rules(&strict).unwrap().version, 1);
    ledger
        .bind(3, "cafe", v1.version, "publish", "learner")
        .unwrap();
    ledger
        .bind(4, "cafe", v2.version, "publish", "learner")
        .unwrap();
    assert_eq!(ledger.current().unwrap().1.rules, decay);
    let restored = ledger.rollback(3, "cafe", "operator:ana").unwrap();
    assert_eq!(restored.rules, strict);
    assert_eq!(ledger.current().unwrap(), (3, v1.clone()));
    assert!(matches!(
        ledger.rollback(9, "cafe", "operator:ana"),
        Err(LedgerError::UnknownPolicyVersion(9))
    ));
    ledger.close().unwrap();

    let ledger = Ledger::open(&config(dir.path())).unwrap();
    assert_eq!(ledger.current().unwrap(), (3, v1));
    assert_eq!(ledger.rules_for_policy(4).unwrap().rules, decay);
    let ops: Vec<String> = read(dir.path())
        .generations
        .iter()
        .map(|g| format!("{}:{}:{}", g.operation, g.policy_version, g.rules_version))
        .collect();
    assert_eq!(ops, vec!["publish:3:1", "publish:4:2", "rollback:3:1"]);
}

#[test]
fn metrics_with_and_without_invalid_samples_differ_exactly_by_the_invalidated_set() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(&config(dir.path())).unwrap();
    // Six episodes of lengths 2..=7 (returns 2..=7; success when length >= 4).
    let mut id = 0;
    for (e, len) in (2..=7u32).enumerate() {
        let b = episodes(id, 1, len, e as u64 % 2);
        ledger.append_samples(b).unwrap();
        if len == 5 || len == 7 {
            // An operator throws away the episodes that started at these ids.
            ledger
                .invalidate(Invalidation {
                    target: Target::Samples {
                        first: id + 1,
                        last: id + 1,
                    },
                    reason: ReasonCode::HumanInterrupt,
                    text: "operator stopped the cell".into(),
                    author: "operator:ana".into(),
                    rules_version: 0,
                    at_ns: 1,
                })
                .unwrap();
        }
        id += u64::from(len);
    }
    ledger.close().unwrap();
    let m = metrics(&read(dir.path()));
    assert_eq!(m.all.episodes, 6);
    assert_eq!(m.invalidated.episodes, 2);
    assert_eq!(m.valid.episodes, m.all.episodes - m.invalidated.episodes);
    assert_eq!(m.all.sum_return, 27.0);
    assert_eq!(m.invalidated.sum_return, 12.0);
    assert_eq!(
        m.valid.sum_return,
        m.all.sum_return - m.invalidated.sum_return
    );
    assert_eq!(m.all.successes, 4);
    assert_eq!(m.valid.successes, 2);
    assert!((m.mean_return_difference.unwrap() - (4.5 - 3.75)).abs() < 1e-12);
    assert!((m.success_rate_difference.unwrap() - (4.0 / 6.0 - 0.5)).abs() < 1e-12);
}

fn decision(first: u64, last: u64, age: u64, kl: f64, kind: DecisionKind) -> DecisionRecord {
    DecisionRecord {
        first_sample: first,
        last_sample: last,
        bucket: "train".parse().unwrap(),
        policy_version: 5 - age,
        learner_version: 5,
        update: 5,
        rules_version: 1,
        rules_hash: AdmissionRules::default().hash(),
        decision: kind,
        weight: if kind == DecisionKind::Dropped {
            0.0
        } else {
            1.0
        },
        kl: Some(kl),
        age_versions: age,
        age_seconds: 0.1,
        decided_at_ns: 2,
    }
}

#[test]
fn decisions_are_summarised_and_recomputed_under_other_rules() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(&config(dir.path())).unwrap();
    ledger.register_rules(&AdmissionRules::default()).unwrap();
    ledger.append_samples(episodes(0, 2, 5, 5)).unwrap();
    ledger.append_samples(episodes(10, 2, 5, 4)).unwrap();
    ledger
        .append_decisions(vec![
            decision(0, 9, 0, 0.0, DecisionKind::Trained),
            decision(10, 19, 1, 0.05, DecisionKind::Trained),
        ])
        .unwrap();
    // A decision under rules never registered is refused.
    let mut unknown = decision(0, 1, 0, 0.0, DecisionKind::Trained);
    unknown.rules_version = 9;
    assert!(matches!(
        ledger.append_decisions(vec![unknown]),
        Err(LedgerError::UnknownRulesVersion(9))
    ));
    ledger.close().unwrap();
    let data = read(dir.path());
    let s = summary(&data);
    assert_eq!(s.len(), 2);
    assert!(s.iter().all(|g| g.trained == 10 && g.undecided == 0));

    let strict = AdmissionRules {
        rule: RuleKind::Strict,
        max_policy_lag: 0,
        ..AdmissionRules::default()
    };
    let r = recompute(&data, &strict).unwrap();
    let old = r.iter().find(|g| g.generation == 4).unwrap();
    assert_eq!(old.recomputed, [0, 0, 10]);
    assert_eq!(old.changed, 10);
    let decay = AdmissionRules {
        rule: RuleKind::Decay,
        kl_scale: 0.1,
        ..AdmissionRules::default()
    };
    let r = recompute(&data, &decay).unwrap();
    let old = r.iter().find(|g| g.generation == 4).unwrap();
    assert_eq!(old.recomputed, [0, 10, 0]);
    assert!((old.recomputed_weight - 10.0 * (-0.5f64).exp()).abs() < 1e-4);
    let bad = AdmissionRules {
        kl_scale: 0.0,
        ..AdmissionRules::default()
    };
    assert!(matches!(
        recompute(&data, &bad),
        Err(LedgerError::InvalidRules(_))
    ));
}

#[test]
fn manifests_in_every_format_list_every_sample() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(&config(dir.path())).unwrap();
    ledger.append_samples(episodes(0, 2, 3, 1)).unwrap();
    ledger.close().unwrap();
    let data = read(dir.path());
    let out = tempfile::tempdir().unwrap();
    for (format, name) in [
        (ManifestFormat::Json, "m.jsonl"),
        (ManifestFormat::Csv, "m.csv"),
        (ManifestFormat::Parquet, "m.parquet"),
    ] {
        let path = out.path().join(name);
        assert_eq!(write_manifest(&data, format, &path).unwrap(), 6);
        assert!(path.metadata().unwrap().len() > 0);
    }
    let json = std::fs::read_to_string(out.path().join("m.jsonl")).unwrap();
    let first: serde_json::Value = serde_json::from_str(json.lines().next().unwrap()).unwrap();
    assert_eq!(first["policy_version"], 1);
    assert_eq!(first["config_hash"], "cafe");
    let csv = std::fs::read_to_string(out.path().join("m.csv")).unwrap();
    assert_eq!(csv.lines().count(), 7);
    assert!(csv.lines().next().unwrap().contains("sample_id"));
    // The mode of any new file (the umask's), not a temporary file's owner-only one.
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let plain = out.path().join("plain");
    std::fs::File::create(&plain).unwrap();
    assert_eq!(mode(&out.path().join("m.csv")), mode(&plain));
}

#[test]
fn bad_input_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(&config(dir.path())).unwrap();
    let mut b = episodes(0, 1, 2, 1);
    b.completed_at_ns[1] = 0;
    let err = ledger.append_samples(b).unwrap_err().to_string();
    assert!(err.contains("completed_at_ns"), "{err}");
    let mut b = episodes(0, 1, 2, 1);
    b.reward.pop();
    assert!(ledger
        .append_samples(b)
        .unwrap_err()
        .to_string()
        .contains("column reward"));
    // A bucket names a directory: a path cannot even be made into one.
    assert!("../etc".parse::<strata_ledger::Bucket>().is_err());
    let bad = AdmissionRules {
        min_weight: 3.0,
        ..AdmissionRules::default()
    };
    assert!(matches!(
        ledger.register_rules(&bad),
        Err(LedgerError::InvalidRules(_))
    ));
    assert!(matches!(
        ledger.rules(4),
        Err(LedgerError::UnknownRulesVersion(4))
    ));
    assert!(ledger
        .invalidate(Invalidation {
            target: Target::Trajectory { id: 1 },
            reason: ReasonCode::Operator,
            text: " ".into(),
            author: "x".into(),
            rules_version: 0,
            at_ns: 0,
        })
        .is_err());
    ledger.close().unwrap();
    assert_eq!(read(dir.path()).files, 0);
    assert!(!dir.path().join("rules").exists());
}

#[test]
fn a_corrupt_or_foreign_parquet_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(&config(dir.path())).unwrap();
    ledger.append_samples(episodes(0, 1, 3, 1)).unwrap();
    ledger.close().unwrap();
    let part = dir.path().join("samples/bucket=train/versions=0-999");
    let file = std::fs::read_dir(&part)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let good = std::fs::read(&file).unwrap();

    // Truncated: not readable.
    std::fs::write(&file, &good[..good.len() / 2]).unwrap();
    let err = LedgerData::read(&Storage::open(dir.path().to_str().unwrap()).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(file.file_name().unwrap().to_str().unwrap()),
        "{err}"
    );
    assert!(err.contains("Parquet"), "{err}");
    // Opening the ledger for writing refuses too, and leaves the file alone.
    assert!(Ledger::open(&config(dir.path())).is_err());
    assert_eq!(std::fs::read(&file).unwrap().len(), good.len() / 2);

    // A valid Parquet file that is not a ledger file.
    std::fs::write(&file, &good).unwrap();
    let foreign_dir = tempfile::tempdir().unwrap();
    let other = Ledger::open(&config(foreign_dir.path())).unwrap();
    other.register_rules(&AdmissionRules::default()).unwrap();
    other.bind(1, "cafe", 1, "publish", "t").unwrap();
    other.close().unwrap();
    let gen = std::fs::read_dir(foreign_dir.path().join("generations"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::copy(&gen, part.join("zz-foreign.parquet")).unwrap();
    // A salvaging read (for reports) skips it, names it, and reads the rest.
    let storage = Storage::open(dir.path().to_str().unwrap()).unwrap();
    let (data, skipped) = LedgerData::read_salvaging(&storage).unwrap();
    assert_eq!(data.sample_count(), 3);
    assert_eq!(skipped.len(), 1);
    assert!(skipped[0].to_string().contains("zz-foreign.parquet"));
    let err = LedgerData::read(&Storage::open(dir.path().to_str().unwrap()).unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("zz-foreign.parquet"), "{err}");
    assert!(
        err.contains("a generations file where samples belong"),
        "{err}"
    );

    // A good sample file in the partition of other versions is named too.
    std::fs::remove_file(part.join("zz-foreign.parquet")).unwrap();
    let elsewhere = dir.path().join("samples/bucket=train/versions=1000-1999");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::rename(&file, elsewhere.join("moved.parquet")).unwrap();
    let err = LedgerData::read(&Storage::open(dir.path().to_str().unwrap()).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("holds policy version 1 under versions=1000-1999"),
        "{err}"
    );
}

#[test]
fn an_interrupted_compaction_is_ignored_then_redone() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(&config(dir.path())).unwrap();
    ledger.append_samples(episodes(0, 2, 4, 3)).unwrap();
    ledger.flush().unwrap();
    // The run dies here: its samples are in the log only.
    ledger.abandon();
    let log_dir = dir.path().join("wal/samples/bucket=train");
    let log = std::fs::read_dir(&log_dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    // A compaction that died after placing a partial file under the log's name.
    let partition = dir.path().join("samples/bucket=train/versions=0-999");
    std::fs::create_dir_all(&partition).unwrap();
    std::fs::write(partition.join(log.file_name().unwrap()), b"PAR1 half").unwrap();
    // ... and a staged file the interrupted write left.
    let staged = partition.join(".4242-7.staged");
    std::fs::write(&staged, b"half").unwrap();
    // Readers take the log, not the stray, and leave everything as it is (a run may be
    // writing).
    assert_eq!(read(dir.path()).sample_count(), 8);
    assert!(staged.exists());
    // Reopening recovers: the staged file goes, the stray is replaced, the log removed,
    // nothing lost.
    let ledger = Ledger::open(&config(dir.path())).unwrap();
    ledger.close().unwrap();
    assert!(!log.exists());
    assert!(!staged.exists());
    let data = read(dir.path());
    assert_eq!(rows(&data).len(), 8);
    assert_eq!(rows(&data)[7].sample_id, 7);
}

#[test]
fn durable_appends_survive_a_crash_and_share_group_commits() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = std::sync::Arc::new(Ledger::open(&config(dir.path())).unwrap());
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let ledger = std::sync::Arc::clone(&ledger);
            std::thread::spawn(move || {
                for k in 0..50u64 {
                    // One two-step episode per call, as a deployed agent would report.
                    let first = (t * 50 + k) * 2;
                    ledger
                        .append_samples_durable(episodes(first, 1, 2, 1))
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // Acknowledged means durable: the process "dies" without closing, before any flush
    // (the flush interval is a minute): the rows are in the synced append log only.
    std::sync::Arc::into_inner(ledger)
        .expect("the threads are joined")
        .abandon();
    let appends = dir.path().join("wal/appends/bucket=train");
    let files = std::fs::read_dir(&appends).unwrap().count();
    assert_eq!(
        files, 1,
        "one append-log file, appended to by every group commit"
    );
    assert!(
        !dir.path().join("wal/samples").exists(),
        "nothing flushed yet"
    );
    let data = read(dir.path());
    assert_eq!(data.sample_count(), 400, "readers see append-log rows");
    // A second handle (an operator's, while the writer may still run) leaves them alone.
    let second = Ledger::open(&LedgerConfig {
        compact_on_open: false,
        ..config(dir.path())
    })
    .unwrap();
    second.close().unwrap();
    assert_eq!(std::fs::read_dir(&appends).unwrap().count(), 1);
    // The owner's reopen moves them into the sample log and removes the append log.
    let reopened = Ledger::open(&config(dir.path())).unwrap();
    assert_eq!(reopened.next_sample_id(), 400);
    assert_eq!(std::fs::read_dir(&appends).unwrap().count(), 0);
    reopened.close().unwrap();
    let rows = rows(&read(dir.path()));
    let ids: Vec<u64> = rows.iter().map(|r| r.sample_id).collect();
    assert_eq!(ids, (0..400).collect::<Vec<u64>>(), "every row once");
}

#[test]
fn durable_appends_answered_by_callback_are_durable_and_a_full_queue_hands_the_batch_back() {
    let dir = tempfile::tempdir().unwrap();
    // A queue of one: appends sent faster than the writer syncs find it full.
    let ledger = Ledger::open(&LedgerConfig {
        queue: 1,
        ..config(dir.path())
    })
    .unwrap();
    let (tx, answers) = std::sync::mpsc::channel();
    let (mut queued, mut full) = (0, 0);
    for k in 0..100u64 {
        let tx = tx.clone();
        let then = move |outcome: Result<(), strata_ledger::LedgerError>| {
            tx.send((k, outcome.is_ok())).unwrap();
        };
        match ledger
            .try_append_samples_durable(episodes(k * 2, 1, 2, 1), then)
            .unwrap()
        {
            strata_ledger::Queued::Queued => queued += 1,
            strata_ledger::Queued::Full(batch) => {
                // Handed back whole: appended the waiting way instead.
                assert_eq!(batch.len(), 2);
                full += 1;
                ledger.append_samples_durable(*batch).unwrap();
            }
        }
    }
    drop(tx);
    // Every queued append is answered once, and only those.
    let mut answered: Vec<u64> = Vec::new();
    for (k, ok) in answers.iter() {
        assert!(ok, "append {k} failed");
        answered.push(k);
    }
    answered.sort_unstable();
    answered.dedup();
    assert_eq!(answered.len(), queued, "{full} were handed back");
    // Answered means durable: the process dies without closing or flushing.
    ledger.abandon();
    let data = read(dir.path());
    assert_eq!(data.sample_count(), 200, "every acknowledged row survives");
}

#[test]
fn buckets_stay_apart_when_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(&config(dir.path())).unwrap();
    let mut canary = SampleBatch::new(&"canary".parse().unwrap(), "cafe", OBS_DIM);
    let mut r = record(100, 100, 0, 7, true);
    r.bucket = "canary".parse().unwrap();
    canary.push(&r).unwrap();
    ledger.append_samples(episodes(0, 1, 3, 6)).unwrap();
    ledger.append_samples(canary).unwrap();
    ledger.flush().unwrap();
    for data in [read(dir.path()), {
        ledger.close().unwrap();
        read(dir.path())
    }] {
        let by_bucket: Vec<(strata_ledger::Bucket, Vec<u64>)> = data
            .samples
            .iter()
            .map(|b| (b.bucket.clone(), b.policy_version.clone()))
            .collect();
        assert_eq!(by_bucket.len(), 2, "{by_bucket:?}");
        for (bucket, versions) in by_bucket {
            let expected = if bucket == "canary" { 7 } else { 6 };
            assert!(
                versions.iter().all(|&v| v == expected),
                "{bucket}: {versions:?}"
            );
        }
    }
}

#[test]
fn curves_follow_collection_order_and_mark_only_newer_versions_as_switches() {
    let mut batch = SampleBatch::new(&"train".parse().unwrap(), "cafe", OBS_DIM);
    // Episode 10: v0, v0. Episode 11: v0 then v1 (v1 takes over at step 3). Episode 12: a
    // late v0 sample (asynchronous), which must not switch back. Episode 13: v2.
    let rows = [
        record(0, 10, 0, 0, false),
        record(1, 10, 1, 0, true),
        record(2, 11, 0, 0, false),
        record(3, 11, 1, 1, true),
        record(4, 12, 0, 0, true),
        record(5, 13, 0, 2, true),
    ];
    for r in &rows {
        batch.push(r).unwrap();
    }
    let data = LedgerData {
        samples: vec![batch],
        invalidations: vec![Invalidation {
            target: Target::Samples { first: 2, last: 2 },
            reason: ReasonCode::Operator,
            text: "t".into(),
            author: "a".into(),
            rules_version: 1,
            at_ns: 1,
        }],
        decisions: vec![
            decision(0, 3, 1, 0.0, DecisionKind::Trained),
            decision(4, 5, 0, 0.0, DecisionKind::Trained),
        ],
        ..LedgerData::default()
    };
    let c = curves(&data, "train");
    assert_eq!(c.samples, 6);
    assert_eq!(
        c.switches,
        vec![
            VersionSwitch {
                step: 3,
                version: 1
            },
            VersionSwitch {
                step: 5,
                version: 2
            }
        ]
    );
    let got: Vec<(u64, f64, u64, bool)> = c
        .episodes
        .iter()
        .map(|e| (e.step, e.episode_return, e.generation, e.invalidated))
        .collect();
    // Returns are the recorded raw returns (step + 1 on the last step).
    assert_eq!(
        got,
        vec![
            (2, 2.0, 0, false),
            (4, 2.0, 1, true),
            (5, 1.0, 0, false),
            (6, 1.0, 2, false)
        ]
    );
    assert_eq!(c.by_generation().len(), 3);
    assert!(curves(&data, "canary").episodes.is_empty());
    assert_eq!(lag_histogram(&data, "train"), vec![(0, 2), (1, 4)]);
}

#[test]
fn ledgers_of_several_gateways_read_as_one_and_overlapping_ones_are_refused() {
    // Gateways 1 and 2 number their samples from N << 40; a learner elsewhere keeps a
    // ledger of decisions only.
    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let base = |n: u64| n << 40;
    for (k, d) in dirs.iter().take(2).enumerate() {
        let ledger = Ledger::open(&LedgerConfig {
            first_sample_id: base(k as u64 + 1),
            ..config(d.path())
        })
        .unwrap();
        let first = ledger.reserve_sample_ids(8);
        assert_eq!(
            first,
            base(k as u64 + 1),
            "an empty ledger starts at its first id"
        );
        ledger.append_samples(episodes(first, 2, 4, 0)).unwrap();
        ledger.close().unwrap();
    }
    let learner = Ledger::open(&config(dirs[2].path())).unwrap();
    learner.register_rules(&AdmissionRules::default()).unwrap();
    learner
        .append_decisions(vec![
            decision(base(1), base(1) + 7, 0, 0.0, DecisionKind::Trained),
            decision(base(2), base(2) + 3, 0, 0.0, DecisionKind::Trained),
        ])
        .unwrap();
    learner.close().unwrap();
    let part = |k: usize| (dirs[k].path().display().to_string(), read(dirs[k].path()));
    let all = strata_ledger::union(vec![part(0), part(1), part(2)]).unwrap();
    let rows = summary(&all);
    assert_eq!(rows.iter().map(|g| g.samples).sum::<u64>(), 16);
    assert_eq!(
        rows.iter().map(|g| g.trained).sum::<u64>(),
        12,
        "decisions join samples of both gateways"
    );
    assert_eq!(rows.iter().map(|g| g.undecided).sum::<u64>(), 4);

    // A ledger numbered like gateway 1's (another directory under the same id) is refused.
    let twin = Ledger::open(&LedgerConfig {
        first_sample_id: base(1),
        ..config(dirs[3].path())
    })
    .unwrap();
    twin.append_samples(episodes(base(1) + 4, 1, 4, 0)).unwrap();
    twin.close().unwrap();
    let err = strata_ledger::union(vec![part(0), part(3)])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&dirs[0].path().display().to_string())
            && err.contains(&dirs[3].path().display().to_string()),
        "{err}"
    );
}
