//! The sample columns, declared once. [`SampleRecord`], the columnar [`SampleBatch`], the
//! samples table's Arrow schema and both codecs are generated from the one list below: a
//! new provenance column is one line there (plus whoever fills it in).

use std::ops::Range;

use arrow_array::{ArrayRef, BooleanArray, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, SchemaRef};
use serde::{Deserialize, Serialize};

use crate::arrow_codec::{
    column, record_batch, AddedOptBytes, AddedOptF32, AddedOptText, AddedOptU64, Bool, Codec,
    Nanos, ObsList, OptBool, OptF64, OptText, F32, U32, U64,
};
use crate::bucket::Bucket;
use crate::schema::{table_schema, Table};

/// The Arrow column holding the batch's config hash on every row (after `policy_version`).
const CONFIG_HASH: &str = "config_hash";
/// The Arrow column derived from `sampler_version` (after it).
const NEWER_POLICY_SAMPLING: &str = "newer_policy_sampling";

macro_rules! sample_columns {
    ($( $(#[$doc:meta])* $name:ident: $cell:ty, [$elem:ty] by $codec:ident => $arrow:literal, )*) => {
        /// One sample's provenance: the six fields of DESIGN.md plus identity and outcome.
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        pub struct SampleRecord {
            $( $(#[$doc])* pub $name: $cell, )*
            /// (1) Config hash of the policy that chose the action.
            pub config_hash: String,
            /// Storage area (`train`, `stable`, `canary`, ...).
            pub bucket: Bucket,
        }

        /// Samples in columns, as the learner and the writer handle them. All rows share
        /// `bucket`, `config_hash` and the observation width; observation statistics are
        /// flat, `obs_dim` values per row.
        #[derive(Clone, Debug, Default, PartialEq)]
        pub struct SampleBatch {
            /// Storage area of every row.
            pub bucket: Bucket,
            /// Config hash of every row.
            pub config_hash: String,
            /// Observation width.
            pub obs_dim: usize,
            $( $(#[$doc])* pub $name: Vec<$elem>, )*
        }

        impl SampleBatch {
            /// Keeps the first `rows` rows.
            pub fn truncate(&mut self, rows: usize) {
                let od = self.obs_dim;
                $( self.$name.truncate(rows * <$codec as Codec>::width(od)); )*
            }

            /// Appends one record.
            ///
            /// # Errors
            /// When a per-dimension column of the record does not have `obs_dim` values, or
            /// its config hash differs from the batch's.
            pub fn push(&mut self, r: &SampleRecord) -> Result<(), String> {
                let od = self.obs_dim;
                $(
                    if let Err(found) = <$codec as Codec>::fits(&r.$name, od) {
                        return Err(format!(
                            "sample {}: {} has {found} values, expected {od} (the observation width)",
                            r.sample_id,
                            stringify!($name)
                        ));
                    }
                )*
                if r.config_hash != self.config_hash {
                    return Err(format!(
                        "sample {}: config hash {} in a batch of {}",
                        r.sample_id, r.config_hash, self.config_hash
                    ));
                }
                $( <$codec as Codec>::push(&mut self.$name, &r.$name); )*
                Ok(())
            }

            /// Row `i` as a record.
            pub fn row(&self, i: usize) -> SampleRecord {
                let od = self.obs_dim;
                SampleRecord {
                    $( $name: <$codec as Codec>::cell(&self.$name, i, <$codec as Codec>::width(od)), )*
                    config_hash: self.config_hash.clone(),
                    bucket: self.bucket.clone(),
                }
            }

            /// Appends rows `rows` of `other` (same bucket, config and width).
            pub fn extend_from(&mut self, other: &SampleBatch, rows: Range<usize>) {
                let od = other.obs_dim;
                $(
                    let w = <$codec as Codec>::width(od);
                    self.$name.extend_from_slice(&other.$name[rows.start * w..rows.end * w]);
                )*
            }

            /// Each column's name and row count.
            fn column_rows(&self) -> Vec<(&'static str, usize)> {
                let od = self.obs_dim;
                vec![$( (stringify!($name), self.$name.len() / <$codec as Codec>::width(od).max(1)), )*]
            }
        }

        /// The stored columns' fields, in table order.
        fn stored_fields() -> Vec<Field> {
            vec![$( <$codec as Codec>::field($arrow), )*]
        }

        /// The stored columns' arrays, in table order.
        fn stored_arrays(b: &SampleBatch) -> Vec<ArrayRef> {
            let n = b.len();
            vec![$( <$codec as Codec>::encode(&b.$name, n, b.obs_dim), )*]
        }

        /// A file's columns, read whole.
        struct Decoded {
            obs_dim: usize,
            $( $name: Vec<$elem>, )*
        }

        impl Decoded {
            fn read(batch: &RecordBatch) -> Result<Decoded, String> {
                let mut obs_dim: Option<usize> = None;
                $(
                    let ($name, width) = <$codec as Codec>::decode(batch, $arrow)?;
                    if let Some(w) = width {
                        if obs_dim.is_some_and(|d| d != w) {
                            return Err(format!("column {}: rows of width {w}, other columns {}", $arrow, obs_dim.unwrap_or(0)));
                        }
                        obs_dim = Some(w);
                    }
                )*
                Ok(Decoded { obs_dim: obs_dim.unwrap_or(0), $( $name, )* })
            }

            /// Appends rows `rows` to `b`, a column at a time.
            fn append_rows(&self, b: &mut SampleBatch, rows: Range<usize>) {
                $(
                    let w = <$codec as Codec>::width(self.obs_dim);
                    b.$name.extend_from_slice(&self.$name[rows.start * w..rows.end * w]);
                )*
            }
        }
    };
}

sample_columns! {
    /// Unique within the ledger.
    sample_id: u64, [u64] by U64 => "sample_id",
    /// The episode it belongs to (spans policy versions in async training).
    episode_id: u64, [u64] by U64 => "episode_id",
    /// Steps of one episode under one policy version.
    trajectory_id: u64, [u64] by U64 => "trajectory_id",
    /// Index of the step within its episode.
    step: u32, [u32] by U32 => "step",
    /// (1) Policy version that chose the action.
    policy_version: u64, [u64] by U64 => "policy_version",
    /// (2) When the action was issued (ns since the epoch).
    issued_at_ns: i64, [i64] by Nanos => "issued_at",
    /// (2) When its execution completed (ns since the epoch).
    completed_at_ns: i64, [i64] by Nanos => "completed_at",
    /// (3) Observations seen while the action executed.
    obs_count: u32, [u32] by U32 => "obs_count",
    /// (3) Hash of those observations, in order.
    obs_hash: u64, [u64] by U64 => "obs_hash",
    /// (3) Per-dimension minimum.
    obs_min: Vec<f32>, [f32] by ObsList => "obs_min",
    /// (3) Per-dimension maximum.
    obs_max: Vec<f32>, [f32] by ObsList => "obs_max",
    /// (3) Per-dimension mean.
    obs_mean: Vec<f32>, [f32] by ObsList => "obs_mean",
    /// (4) The environment's own clock or sequence number at completion.
    env_clock: u64, [u64] by U64 => "env_clock",
    /// (5) The newest version sampling when this sample completed (whether a newer policy
    /// was already sampling is derived from it: [`SampleRecord::newer_policy_sampling`]).
    sampler_version: u64, [u64] by U64 => "sampler_version",
    /// The agent's idempotency key (deployed agents; simulators leave it empty).
    idempotency_key: Option<String>, [Option<String>] by OptText => "idempotency_key",
    /// Reward as trained on (after wrappers).
    reward: f32, [f32] by F32 => "reward",
    /// The episode reached a terminal state.
    terminated: bool, [bool] by Bool => "terminated",
    /// The episode was cut (time limit, operator).
    truncated: bool, [bool] by Bool => "truncated",
    /// The episode's undiscounted raw return, on its last step.
    episode_return: Option<f64>, [Option<f64>] by OptF64 => "episode_return",
    /// Whether the episode succeeded, on its last step, where the task defines success.
    success: Option<bool>, [Option<bool>] by OptBool => "success",
    /// The rollout worker whose fragment holds the sample (deployed agents' samples: none).
    /// With `fragment`, where a sample came from: one fragment id per worker's fragment.
    worker: Option<u64>, [Option<u64>] by AddedOptU64 => "worker",
    /// That worker's fragment number.
    fragment: Option<u64>, [Option<u64>] by AddedOptU64 => "fragment",
    /// The action as the agent executed it, in JSON (deployed agents' samples; a vector
    /// for Strata's own versions, any JSON value for an external policy's).
    action: Option<String>, [Option<String>] by AddedOptText => "action",
    /// The log-probability of the action under the policy that chose it, where known (for
    /// off-policy corrections by a trainer elsewhere).
    behaviour_log_prob: Option<f32>, [Option<f32>] by AddedOptF32 => "behaviour_log_prob",
    /// The observation the action was chosen on, as little-endian `f32`s of the gateway's
    /// observation layout: stored for external policies' samples, which a trainer
    /// elsewhere trains on (Strata's own keep only the summary).
    observation: Option<Vec<u8>>, [Option<Vec<u8>>] by AddedOptBytes => "observation",
    /// The observation after the action, as `observation`.
    next_observation: Option<Vec<u8>>, [Option<Vec<u8>>] by AddedOptBytes => "next_observation",
}

impl SampleRecord {
    /// (5) Whether a newer policy than the one that chose the action was already sampling
    /// when it completed.
    pub fn newer_policy_sampling(&self) -> bool {
        self.sampler_version > self.policy_version
    }
}

impl SampleBatch {
    /// An empty batch for one bucket, config and observation width.
    pub fn new(bucket: &Bucket, config_hash: &str, obs_dim: usize) -> Self {
        SampleBatch {
            bucket: bucket.clone(),
            config_hash: config_hash.to_string(),
            obs_dim,
            ..SampleBatch::default()
        }
    }

    /// Rows held.
    pub fn len(&self) -> usize {
        self.sample_id.len()
    }

    /// Whether it holds no rows.
    pub fn is_empty(&self) -> bool {
        self.sample_id.is_empty()
    }

    /// Drops every row, keeping the allocations.
    pub fn clear(&mut self) {
        self.truncate(0);
    }

    /// Checks that every column has the batch's length and values are usable.
    ///
    /// # Errors
    /// Names the first column or row that is wrong.
    pub fn validate(&self) -> Result<(), String> {
        let n = self.len();
        if let Some((name, len)) = self.column_rows().into_iter().find(|(_, len)| *len != n) {
            return Err(format!("column {name} has {len} rows, sample_id has {n}"));
        }
        for i in 0..n {
            if self.completed_at_ns[i] < self.issued_at_ns[i] {
                return Err(format!(
                    "sample {}: completed_at_ns {} is before issued_at_ns {}",
                    self.sample_id[i], self.completed_at_ns[i], self.issued_at_ns[i]
                ));
            }
            if !self.reward[i].is_finite() {
                return Err(format!(
                    "sample {}: reward is {}",
                    self.sample_id[i], self.reward[i]
                ));
            }
            for (name, bytes) in [
                ("observation", &self.observation[i]),
                ("next_observation", &self.next_observation[i]),
            ] {
                if let Some(len) = bytes.as_ref().map(Vec::len).filter(|l| l % 4 != 0) {
                    return Err(format!(
                        "sample {}: {name} is {len} bytes, not a whole number of little-endian f32s",
                        self.sample_id[i]
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Where the batch-level and derived columns sit among the stored ones.
fn position_after(fields: &[Field], name: &str) -> usize {
    fields
        .iter()
        .position(|f| f.name() == name)
        .map_or(fields.len(), |i| i + 1)
}

/// Schema of the samples table (bucket and generation are in the path). Built once: every
/// durable append converts a batch with it.
pub fn arrow_schema() -> SchemaRef {
    static SCHEMA: std::sync::LazyLock<SchemaRef> = std::sync::LazyLock::new(build_schema);
    SCHEMA.clone()
}

fn build_schema() -> SchemaRef {
    let mut fields = stored_fields();
    let at = position_after(&fields, "policy_version");
    fields.insert(at, Field::new(CONFIG_HASH, DataType::Utf8, false));
    let at = position_after(&fields, "sampler_version");
    fields.insert(
        at,
        Field::new(NEWER_POLICY_SAMPLING, DataType::Boolean, false),
    );
    table_schema(Table::Samples, fields)
}

/// Samples as an Arrow batch.
pub fn to_arrow(b: &SampleBatch) -> RecordBatch {
    let schema = arrow_schema();
    let mut arrays = stored_arrays(b);
    let n = b.len();
    let config_hash = StringArray::from_iter_values(std::iter::repeat_n(&b.config_hash, n));
    let newer: BooleanArray = b
        .sampler_version
        .iter()
        .zip(&b.policy_version)
        .map(|(s, p)| Some(s > p))
        .collect();
    let fields = schema.fields();
    let at = |name: &str| {
        fields
            .iter()
            .position(|f| f.name() == name)
            .expect("in the schema")
    };
    arrays.insert(at(CONFIG_HASH), std::sync::Arc::new(config_hash));
    arrays.insert(at(NEWER_POLICY_SAMPLING), std::sync::Arc::new(newer));
    record_batch(schema, arrays)
}

/// Appends the rows of a samples file to `out` (config hash from the rows; the bucket,
/// from the path, is the caller's to set).
///
/// # Errors
/// A missing or mistyped column.
pub fn from_arrow(batch: &RecordBatch, out: &mut Vec<SampleBatch>) -> Result<(), String> {
    let columns = Decoded::read(batch)?;
    let config_hash = column::<StringArray>(batch, CONFIG_HASH)?;
    let (w, n) = (columns.obs_dim, batch.num_rows());
    // Rows come in runs of one config hash (almost always one run per file).
    let mut start = 0;
    while start < n {
        let hash = config_hash.value(start);
        let end = (start..n)
            .find(|&i| config_hash.value(i) != hash)
            .unwrap_or(n);
        let fits = out
            .last()
            .is_some_and(|b| b.config_hash == hash && b.obs_dim == w);
        if !fits {
            // The bucket is in the file's path: the caller sets it.
            out.push(SampleBatch::new(&Bucket::default(), hash, w));
        }
        columns.append_rows(out.last_mut().expect("pushed"), start..end);
        start = end;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Sample `id` of trajectory 1, version 3, written under `config`.
    pub(crate) fn record(id: u64, config: &str) -> SampleRecord {
        SampleRecord {
            sample_id: id,
            episode_id: 1,
            trajectory_id: 1,
            step: id as u32,
            policy_version: 3,
            issued_at_ns: 10,
            completed_at_ns: 20,
            obs_count: 2,
            obs_hash: 99,
            obs_min: vec![0.0, -1.0],
            obs_max: vec![1.0, 1.0],
            obs_mean: vec![0.5, 0.0],
            env_clock: 7 + id,
            sampler_version: 3 + id % 2,
            idempotency_key: (id == 1).then(|| "agent-0/k".to_string()),
            reward: 1.5,
            terminated: false,
            truncated: id == 2,
            episode_return: (id == 2).then_some(4.5),
            success: (id == 2).then_some(true),
            worker: (id != 1).then_some(1),
            fragment: (id != 1).then_some(40 + id),
            action: (id == 2).then(|| r#"{"click":[3,4]}"#.to_string()),
            behaviour_log_prob: (id == 2).then_some(-0.7),
            observation: (id == 2).then(|| vec![1, 2, 3, 4]),
            next_observation: (id == 2).then(|| vec![5, 6, 7, 8]),
            config_hash: config.into(),
            bucket: Bucket::train(),
        }
    }

    /// A ledger written before the `worker`, `fragment` and payload columns existed reads
    /// back with them null.
    #[test]
    fn files_without_the_added_columns_read_as_nulls() {
        let mut b = SampleBatch::new(&Bucket::train(), "cafe", 2);
        b.push(&record(2, "cafe")).unwrap();
        let full = to_arrow(&b);
        let keep: Vec<usize> = (0..full.num_columns())
            .filter(|&i| {
                let added = [
                    "worker",
                    "fragment",
                    "action",
                    "behaviour_log_prob",
                    "observation",
                    "next_observation",
                ];
                !added.contains(&full.schema().field(i).name().as_str())
            })
            .collect();
        let old = full.project(&keep).unwrap();
        let mut read = Vec::new();
        from_arrow(&old, &mut read).unwrap();
        let row = read[0].row(0);
        assert_eq!((row.worker, row.fragment), (None, None));
        assert_eq!((row.action, row.observation), (None, None));
        assert_eq!(row.sample_id, 2);
    }

    /// Every generated path agrees: records in, Arrow out (columns in the table's order,
    /// the derived flag computed), Arrow in, the same records back.
    #[test]
    fn records_round_trip_through_arrow_in_table_order() {
        let mut b = SampleBatch::new(&Bucket::train(), "cafe", 2);
        for id in 0..3 {
            b.push(&record(id, "cafe")).unwrap();
        }
        b.validate().unwrap();
        let arrow = to_arrow(&b);
        let names: Vec<&str> = arrow
            .schema_ref()
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        assert_eq!(names[4..6], ["policy_version", "config_hash"]);
        assert_eq!(names[14..16], ["sampler_version", "newer_policy_sampling"]);
        assert_eq!(names.len(), 28);
        assert_eq!(
            names[22..],
            [
                "worker",
                "fragment",
                "action",
                "behaviour_log_prob",
                "observation",
                "next_observation"
            ],
            "added columns come last"
        );
        let newer = column::<BooleanArray>(&arrow, NEWER_POLICY_SAMPLING).unwrap();
        assert_eq!((newer.value(0), newer.value(1)), (false, true));
        let mut back = Vec::new();
        from_arrow(&arrow, &mut back).unwrap();
        back[0].bucket = Bucket::train();
        assert_eq!(back, [b.clone()]);
        for id in 0..3 {
            assert_eq!(back[0].row(id as usize), record(id, "cafe"));
        }
        let mut tail = SampleBatch::new(&Bucket::train(), "cafe", 2);
        tail.extend_from(&b, 1..3);
        assert_eq!(tail.row(0), record(1, "cafe"));
        tail.truncate(1);
        assert_eq!(tail.obs_min.len(), 2);
        tail.validate().unwrap();
    }

    #[test]
    fn bad_records_and_columns_are_named() {
        let mut b = SampleBatch::new(&Bucket::train(), "cafe", 2);
        let mut r = record(0, "cafe");
        r.obs_max.push(3.0);
        let err = b.push(&r).unwrap_err();
        assert!(err.contains("obs_max has 3 values, expected 2"), "{err}");
        let err = b.push(&record(0, "beef")).unwrap_err();
        assert!(err.contains("config hash beef"), "{err}");
        b.push(&record(0, "cafe")).unwrap();
        b.reward.push(1.0);
        let err = b.validate().unwrap_err();
        assert!(err.contains("column reward has 2 rows"), "{err}");
    }
}
