//! Training elsewhere: the samples a trainer that is not Strata may train on (those with a
//! stored transition, not invalidated, not yet decided, admitted by the rules in force),
//! and the decisions its report of what it trained on becomes.

use std::collections::{BTreeMap, HashMap};

use crate::analysis::Index;
use crate::bucket::Bucket;
use crate::reader::LedgerData;
use crate::record::{DecisionKind, DecisionRecord};
use crate::rules::{SampleFacts, VersionedRules};
use crate::samples::SampleRecord;

/// How the rules admit a sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdmittedAs {
    /// Full weight.
    Trained,
    /// A weight below one.
    DownWeighted,
    /// Rule `decay` on a sample older than the trainer's version: its weight follows from
    /// the KL the trainer measures (and reports with what it trained on).
    NeedsKl,
}

impl AdmittedAs {
    /// The name used in answers.
    pub fn as_str(self) -> &'static str {
        match self {
            AdmittedAs::Trained => "trained",
            AdmittedAs::DownWeighted => "down_weighted",
            AdmittedAs::NeedsKl => "needs_kl",
        }
    }
}

/// One admitted sample.
#[derive(Clone, Debug, PartialEq)]
pub struct AdmittedRow {
    /// The sample, with its transition.
    pub sample: SampleRecord,
    /// How it is admitted.
    pub admission: AdmittedAs,
    /// Its policy-loss weight (`None` for [`AdmittedAs::NeedsKl`]).
    pub weight: Option<f32>,
}

/// A page of admitted samples.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AdmittedPage {
    /// The samples, by id.
    pub rows: Vec<AdmittedRow>,
    /// Where the next page goes on from: one past the last id looked at (the query's
    /// `from` when none was), so that a trainer that follows it never skips a sample,
    /// whether or not the ledger held any when it asked.
    pub next_cursor: u64,
    /// Whether samples beyond this page are stored.
    pub more: bool,
    /// Samples looked at and left out: without a stored transition (Strata's own
    /// versions), invalidated, already decided, or dropped by the rules.
    pub left_out: u64,
}

/// What to read.
#[derive(Clone, Debug)]
pub struct AdmittedQuery<'a> {
    /// Samples from this id on (a previous page's `next_cursor`; 0 for the first).
    pub from: u64,
    /// Only samples below this id: a writer's horizon, below which every id is stored or
    /// never will be (ids are reserved before their rows are durable, so a higher one may
    /// be stored first). Rows at or above it wait for a later page (`more` is set).
    pub before: Option<u64>,
    /// At most this many rows.
    pub limit: usize,
    /// The trainer's version: ages count from it.
    pub learner_version: u64,
    /// Only this bucket.
    pub bucket: Option<&'a Bucket>,
    /// Now (ns since the epoch), for ages in seconds.
    pub now_ns: i64,
}

/// Samples in id order with the batch and row holding each.
fn by_id(data: &LedgerData) -> Vec<(u64, usize, usize)> {
    let mut ids: Vec<(u64, usize, usize)> = data
        .samples
        .iter()
        .enumerate()
        .flat_map(|(b, batch)| {
            batch
                .sample_id
                .iter()
                .enumerate()
                .map(move |(i, &id)| (id, b, i))
        })
        .collect();
    ids.sort_unstable_by_key(|&(id, ..)| id);
    ids
}

/// The admitted samples from `query.from` on under `rules`: one page of at most
/// `query.limit`.
pub fn admitted(data: &LedgerData, rules: &VersionedRules, query: &AdmittedQuery) -> AdmittedPage {
    let index = Index::new(data);
    let mut page = Page::new(query);
    for (id, b, i) in by_id(data).into_iter().filter(|&(id, ..)| id >= query.from) {
        if page
            .offer(&index, rules, query, &data.samples[b], i)
            .is_break()
        {
            break;
        }
        debug_assert!(page.page.next_cursor == id.saturating_add(1));
    }
    page.page
}

/// A page being filled, one sample at a time in id order.
pub(crate) struct Page {
    pub(crate) page: AdmittedPage,
}

impl Page {
    pub(crate) fn new(query: &AdmittedQuery) -> Self {
        Page {
            page: AdmittedPage {
                next_cursor: query.from,
                ..AdmittedPage::default()
            },
        }
    }

    /// Takes in row `i` of `batch` (the next id, ascending): admitted onto the page or
    /// left out. Breaks, leaving the row for a later page, once the page is full or the
    /// row is at the writer's horizon.
    pub(crate) fn offer(
        &mut self,
        index: &Index<'_>,
        rules: &VersionedRules,
        query: &AdmittedQuery,
        batch: &crate::samples::SampleBatch,
        i: usize,
    ) -> std::ops::ControlFlow<()> {
        let page = &mut self.page;
        let id = batch.sample_id[i];
        if page.rows.len() == query.limit || query.before.is_some_and(|h| id >= h) {
            page.more = true;
            return std::ops::ControlFlow::Break(());
        }
        page.next_cursor = id.saturating_add(1);
        if query.bucket.is_some_and(|want| *want != batch.bucket)
            || batch.observation[i].is_none()
            || index.decision(id).is_some()
            || index.invalidation(id, batch.trajectory_id[i]).is_some()
        {
            page.left_out += 1;
            return std::ops::ControlFlow::Continue(());
        }
        let facts = SampleFacts {
            age_versions: query
                .learner_version
                .saturating_sub(batch.policy_version[i]),
            age_seconds: (query.now_ns - batch.completed_at_ns[i]).max(0) as f64 / 1e9,
            kl: None,
        };
        let (admission, weight) = match rules.rules.decide(facts) {
            Ok(a) if a.decision == DecisionKind::Dropped => {
                page.left_out += 1;
                return std::ops::ControlFlow::Continue(());
            }
            Ok(a) if a.decision == DecisionKind::Trained => (AdmittedAs::Trained, Some(a.weight)),
            Ok(a) => (AdmittedAs::DownWeighted, Some(a.weight)),
            Err(_) => (AdmittedAs::NeedsKl, None),
        };
        page.rows.push(AdmittedRow {
            sample: batch.row(i),
            admission,
            weight,
        });
        std::ops::ControlFlow::Continue(())
    }
}

/// What a trainer reports: it trained from `base_version` into `version` on `samples`,
/// measuring `kl` (by producing version) where rule `decay` needs it.
#[derive(Clone, Debug)]
pub struct TrainedReport<'a> {
    /// The version its training produced.
    pub version: u64,
    /// The version it trained from.
    pub base_version: u64,
    /// The samples it consumed.
    pub samples: &'a [u64],
    /// KL(producing || base) by producing version.
    pub kl: &'a BTreeMap<u64, f64>,
    /// When it reported (ns since the epoch).
    pub now_ns: i64,
}

/// The decisions `report` becomes under `rules`: one record per run of consecutive
/// samples with one bucket, producing version and decision.
///
/// # Errors
/// Names the first sample that is unknown, has no stored transition (Strata's own
/// versions' samples are Strata's learner's), was decided before or is invalidated, or a
/// producing
/// version whose KL rule `decay` needs and the report lacks.
pub fn trained_decisions(
    data: &LedgerData,
    rules: &VersionedRules,
    report: &TrainedReport,
) -> Result<Vec<DecisionRecord>, String> {
    let index = Index::new(data);
    let mut wanted: Vec<u64> = report.samples.to_vec();
    wanted.sort_unstable();
    wanted.dedup();
    let wanted_set: std::collections::HashSet<u64> = wanted.iter().copied().collect();
    let found: HashMap<u64, (usize, usize)> = by_id(data)
        .into_iter()
        .filter(|(id, ..)| wanted_set.contains(id))
        .map(|(id, b, i)| (id, (b, i)))
        .collect();
    let mut out: Vec<DecisionRecord> = Vec::new();
    for id in wanted {
        let &(b, i) = found
            .get(&id)
            .ok_or_else(|| format!("sample {id} is not in the ledger"))?;
        let batch = &data.samples[b];
        if batch.observation[i].is_none() {
            return Err(format!(
                "sample {id} was chosen by Strata's own version {}: its transition is not stored for trainers elsewhere",
                batch.policy_version[i]
            ));
        }
        if let Some(d) = index.decision(id) {
            return Err(format!(
                "sample {id} was already decided ({} in the update into version {})",
                d.decision.as_str(),
                d.update
            ));
        }
        if let Some(reason) = index.invalidation(id, batch.trajectory_id[i]) {
            return Err(format!(
                "sample {id} was invalidated ({}): it may not be trained on",
                reason.as_str()
            ));
        }
        let produced_by = batch.policy_version[i];
        let age_seconds = (report.now_ns - batch.completed_at_ns[i]).max(0) as f64 / 1e9;
        let kl = report.kl.get(&produced_by).copied();
        let admission = rules
            .rules
            .decide(SampleFacts {
                age_versions: report.base_version.saturating_sub(produced_by),
                age_seconds,
                kl,
            })
            .map_err(|e| format!("sample {id} of version {produced_by}: {e}: report it in `kl`"))?;
        let extends = out.last().is_some_and(|d| {
            d.last_sample + 1 == id
                && d.bucket == batch.bucket
                && d.policy_version == produced_by
                && d.decision == admission.decision
                && d.weight == admission.weight
        });
        if extends {
            let d = out.last_mut().expect("checked");
            d.last_sample = id;
            d.age_seconds = age_seconds;
            continue;
        }
        out.push(DecisionRecord {
            first_sample: id,
            last_sample: id,
            bucket: batch.bucket.clone(),
            policy_version: produced_by,
            learner_version: report.base_version,
            update: report.version,
            rules_version: rules.version,
            rules_hash: rules.hash.clone(),
            decision: admission.decision,
            weight: admission.weight,
            kl,
            age_versions: report.base_version.saturating_sub(produced_by),
            age_seconds,
            decided_at_ns: report.now_ns,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Invalidation, ReasonCode, Target};
    use crate::rules::{AdmissionRules, RuleKind};
    use crate::samples::{tests::record, SampleBatch};

    /// Samples 0..6 of versions 1, 1, 2, 2, 3, 3 (trajectory = version), each with a
    /// stored transition but sample 5, completed at 1 s.
    fn ledger() -> LedgerData {
        let mut batch = SampleBatch::new(&Bucket::train(), "ext", 2);
        for id in 0..6 {
            let mut r = record(id, "ext");
            r.policy_version = id / 2 + 1;
            r.trajectory_id = id / 2 + 1;
            r.completed_at_ns = 1_000_000_000;
            r.observation = (id != 5).then(|| vec![0; 8]);
            batch.push(&r).unwrap();
        }
        LedgerData {
            samples: vec![batch],
            ..LedgerData::default()
        }
    }

    fn rules(rules: AdmissionRules) -> VersionedRules {
        VersionedRules {
            version: 7,
            hash: rules.hash(),
            rules,
        }
    }

    fn query(learner_version: u64) -> AdmittedQuery<'static> {
        AdmittedQuery {
            from: 0,
            before: None,
            limit: 100,
            learner_version,
            bucket: None,
            now_ns: 2_000_000_000,
        }
    }

    fn ids(page: &AdmittedPage) -> Vec<u64> {
        page.rows.iter().map(|r| r.sample.sample_id).collect()
    }

    #[test]
    fn a_trainer_reads_what_the_rules_admit_and_its_report_becomes_decisions() {
        let mut data = ledger();
        data.invalidations.push(Invalidation {
            target: Target::Trajectory { id: 2 },
            reason: ReasonCode::VersionSwitch,
            text: "switched".into(),
            author: "agent-0".into(),
            rules_version: 7,
            at_ns: 0,
        });
        // Drop older than one version: version 1 at learner version 3 is dropped, version
        // 2 is invalidated, sample 5 has no transition.
        let drop = rules(AdmissionRules {
            max_age_versions: Some(1),
            ..AdmissionRules::default()
        });
        let page = admitted(&data, &drop, &query(3));
        assert_eq!(ids(&page), [4]);
        assert_eq!(page.left_out, 5);
        assert_eq!(page.rows[0].weight, Some(1.0));
        // Paging: one row, then the rest after its cursor.
        let all = admitted(&data, &drop, &query(2));
        assert_eq!(ids(&all), [0, 1, 4]);
        let first = admitted(
            &data,
            &drop,
            &AdmittedQuery {
                limit: 1,
                ..query(2)
            },
        );
        assert_eq!((ids(&first), first.more), (vec![0], true));
        let rest = admitted(
            &data,
            &drop,
            &AdmittedQuery {
                from: first.next_cursor,
                ..query(2)
            },
        );
        assert_eq!((ids(&rest), rest.more), (vec![1, 4], false));
        // Below a writer's horizon only: the rest waits, and the cursor stops short of it.
        let held = admitted(
            &data,
            &drop,
            &AdmittedQuery {
                before: Some(4),
                ..query(2)
            },
        );
        assert_eq!(
            (ids(&held), held.more, held.next_cursor),
            (vec![0, 1], true, 4)
        );
        let none = admitted(
            &data,
            &drop,
            &AdmittedQuery {
                from: u64::MAX,
                ..query(2)
            },
        );
        assert!(none.rows.is_empty());
        // A trainer that polls before anything is stored goes on from sample 0.
        let early = admitted(&LedgerData::default(), &drop, &query(2));
        assert_eq!((early.next_cursor, early.more), (0, false));
        let later = admitted(
            &data,
            &drop,
            &AdmittedQuery {
                from: early.next_cursor,
                ..query(2)
            },
        );
        assert_eq!(ids(&later), [0, 1, 4]);

        // Decay: the learner's own version's samples at full weight, older ones need the
        // KL the trainer measures.
        let decay = rules(AdmissionRules {
            rule: RuleKind::Decay,
            kl_scale: 0.1,
            ..AdmissionRules::default()
        });
        let page = admitted(&data, &decay, &query(3));
        let how: Vec<(u64, AdmittedAs)> = page
            .rows
            .iter()
            .map(|r| (r.sample.sample_id, r.admission))
            .collect();
        assert_eq!(
            how,
            [
                (0, AdmittedAs::NeedsKl),
                (1, AdmittedAs::NeedsKl),
                (4, AdmittedAs::Trained)
            ]
        );
        let kl = BTreeMap::new();
        let report = TrainedReport {
            version: 4,
            base_version: 3,
            samples: &[4, 0, 1],
            kl: &kl,
            now_ns: 3_000_000_000,
        };
        let missing = trained_decisions(&data, &decay, &report).unwrap_err();
        assert!(missing.contains("sample 0 of version 1"), "{missing}");
        let kl = BTreeMap::from([(1, 0.05)]);
        let decided =
            trained_decisions(&data, &decay, &TrainedReport { kl: &kl, ..report }).unwrap();
        let runs: Vec<(u64, u64, DecisionKind, u64)> = decided
            .iter()
            .map(|d| (d.first_sample, d.last_sample, d.decision, d.update))
            .collect();
        assert_eq!(
            runs,
            [
                (0, 1, DecisionKind::DownWeighted, 4),
                (4, 4, DecisionKind::Trained, 4)
            ]
        );
        assert!((decided[0].weight - (-0.5f32).exp()).abs() < 1e-6);
        assert_eq!(
            (decided[0].learner_version, decided[0].age_versions),
            (3, 2)
        );
        assert_eq!(decided[0].kl, Some(0.05));
        assert_eq!(decided[0].rules_version, 7);

        // Decided once: read no more, reported again refused; unknown and untransitioned
        // samples are refused by id.
        data.decisions.extend(decided);
        assert!(admitted(&data, &decay, &query(3)).rows.is_empty());
        let again = trained_decisions(&data, &decay, &TrainedReport { kl: &kl, ..report });
        assert!(again.unwrap_err().contains("already decided"));
        for (id, why) in [
            (5, "not stored"),
            (9, "not in the ledger"),
            (2, "invalidated (version_switch)"),
        ] {
            let err = trained_decisions(
                &data,
                &decay,
                &TrainedReport {
                    samples: &[id],
                    ..report
                },
            )
            .unwrap_err();
            assert!(err.contains(why), "{err}");
        }
    }
}
