//! `learner.jsonl`: one JSON line per learner update, appended. Both learners of
//! deployed agents keep one: a gateway's own and the learner of gateways elsewhere. A log
//! that cannot be opened is warned about once; training goes on without it.

use std::io::Write;
use std::path::Path;

use serde::Serialize;

use crate::segment::Segment;

/// An open `learner.jsonl` (or none, when it could not be opened).
pub struct UpdateLog(Option<std::fs::File>);

impl UpdateLog {
    /// Appends to `dir/learner.jsonl`, created if missing.
    pub fn open(dir: &Path) -> Self {
        let path = dir.join("learner.jsonl");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| tracing::warn!(component = "learner", path = %path.display(), error = %e, "no learner log"))
            .ok();
        UpdateLog(file)
    }

    /// Appends `line` as one JSON line.
    pub fn append(&mut self, line: &impl Serialize) {
        if let Some(f) = self.0.as_mut() {
            let mut text = serde_json::to_vec(line).expect("an update line serialises");
            text.push(b'\n');
            let _ = f.write_all(&text);
        }
    }
}

/// Seconds from the newest last step of `segments` to now: how far a version trained on
/// them lags behind what agents did.
pub fn lag_seconds<'a>(segments: impl IntoIterator<Item = &'a Segment>) -> f64 {
    let newest = segments
        .into_iter()
        .map(|s| s.completed_at_ns)
        .max()
        .unwrap_or(0);
    (strata_ledger::now_ns() - newest).max(0) as f64 / 1e9
}
