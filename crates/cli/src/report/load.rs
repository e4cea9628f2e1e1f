//! Reads what a run directory holds, keeping going past anything missing or damaged and
//! saying what it was.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use serde::de::DeserializeOwned;
use strata_ledger::{LedgerData, Storage};
use strata_runtime::{EvalResult, RunConfig, RunLayout, UpdateRecord};

/// A run directory as far as it could be read.
pub(crate) struct RunData {
    /// Whether it is a gateway's directory rather than a training run's.
    pub(crate) gateway: bool,
    /// The directory.
    pub(crate) dir: PathBuf,
    /// `config.toml`.
    pub(crate) config: Option<RunConfig>,
    /// The config hash the run recorded in `config.toml`'s first line (a resumed run keeps
    /// its checkpoint's hash, which a hash of the file's keys need not reproduce).
    pub(crate) config_hash: Option<String>,
    /// `metrics.jsonl`, the lines that parse.
    pub(crate) updates: Vec<UpdateRecord>,
    /// `eval.jsonl`, the lines that parse.
    pub(crate) evals: Vec<EvalResult>,
    /// The sample ledger, without any file that could not be read.
    pub(crate) ledger: Option<LedgerData>,
    /// The ledger's location.
    pub(crate) ledger_location: String,
    /// What was missing or damaged, in words.
    pub(crate) problems: Vec<String>,
}

impl RunData {
    /// Reads `dir`.
    ///
    /// # Errors
    /// When `dir` does not exist, or holds none of a run's files.
    pub(crate) fn load(dir: &Path) -> Result<Self> {
        if !dir.is_dir() {
            bail!("{}: no such directory", dir.display());
        }
        let run = RunLayout::new(dir);
        let known = [
            run.config(),
            run.metrics(),
            run.evals(),
            run.ledger(),
            run.final_checkpoint(),
        ];
        if !known.iter().any(|f| f.exists()) {
            let names: Vec<String> = known
                .iter()
                .filter_map(|f| f.file_name())
                .map(|f| f.to_string_lossy().into_owned())
                .collect();
            bail!(
                "{}: not a run directory (none of {} is there; `strata train --run-dir` writes them)",
                dir.display(),
                names.join(", ")
            );
        }
        let mut problems = Vec::new();
        // A gateway's directory (`strata serve --dir`) has a ledger and none of a
        // training's files: their absence is no problem there.
        let gateway = dir.join("journal.jsonl").exists();
        let expected = !gateway;
        let (config, config_hash) = read_config(&run.config(), expected, &mut problems);
        let updates = read_lines(&run.metrics(), expected, &mut problems);
        let evals = read_lines(&run.evals(), expected, &mut problems);
        let ledger_location = config
            .as_ref()
            .and_then(|c| c.ledger.location.clone())
            .unwrap_or_else(|| run.ledger().to_string_lossy().into_owned());
        let ledger = read_ledger(&ledger_location, &mut problems);
        Ok(RunData {
            gateway,
            dir: dir.to_path_buf(),
            config,
            config_hash,
            updates,
            evals,
            ledger,
            ledger_location,
            problems,
        })
    }

    /// The ledger bucket the run trained from.
    pub(crate) fn bucket(&self) -> String {
        self.config
            .as_ref()
            .map_or_else(|| "train".to_string(), |c| c.ledger.bucket.to_string())
    }
}

/// Whether a failed read is worth reporting: a missing file only when it was `expected`.
fn worth_reporting(e: &std::io::Error, expected: bool) -> bool {
    expected || e.kind() != std::io::ErrorKind::NotFound
}

/// The config and the hash recorded with it (the header `RunLayout` writes).
pub(crate) fn read_config(
    path: &Path,
    expected: bool,
    problems: &mut Vec<String>,
) -> (Option<RunConfig>, Option<String>) {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if !worth_reporting(&e, expected) => return (None, None),
        Err(e) => {
            problems.push(format!(
                "{}: {} (env and settings unknown)",
                path.display(),
                describe(&e)
            ));
            return (None, None);
        }
    };
    let hash = RunLayout::saved_hash(&text);
    match RunConfig::from_saved_toml(&text) {
        Ok(c) => (Some(c), hash),
        Err(e) => {
            problems.push(format!("{}: not a valid run config: {e}", path.display()));
            (None, hash)
        }
    }
}

/// Parses every line that parses; a bad or cut-off line is named and skipped.
pub(crate) fn read_lines<T: DeserializeOwned>(
    path: &Path,
    expected: bool,
    problems: &mut Vec<String>,
) -> Vec<T> {
    let text = match fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) if !worth_reporting(&e, expected) => return Vec::new(),
        Err(e) => {
            problems.push(format!("{}: {}", path.display(), describe(&e)));
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    let mut bad = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line) {
            Ok(v) => out.push(v),
            Err(e) => bad.push(format!("line {} ({e})", i + 1)),
        }
    }
    if !bad.is_empty() {
        let cut = if text.ends_with('\n') {
            ""
        } else {
            "; the file ends mid-line (truncated)"
        };
        problems.push(format!(
            "{}: {} unreadable line(s) skipped: {}{cut}",
            path.display(),
            bad.len(),
            bad.iter().take(3).cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    out
}

fn read_ledger(location: &str, problems: &mut Vec<String>) -> Option<LedgerData> {
    let local = !location.contains("://");
    if local && !Path::new(location).is_dir() {
        problems.push(format!(
            "{location}: no sample ledger (per-generation curves, policy lag and the ledger summary need it)"
        ));
        return None;
    }
    let storage = match Storage::open(location) {
        Ok(s) => s,
        Err(e) => {
            problems.push(format!("{location}: cannot open the ledger: {e}"));
            return None;
        }
    };
    match LedgerData::read_salvaging(&storage) {
        Ok((data, skipped)) => {
            for e in skipped {
                problems.push(format!("ledger file skipped: {e}"));
            }
            Some(data)
        }
        Err(e) => {
            problems.push(format!("{location}: cannot read the ledger: {e}"));
            None
        }
    }
}

fn describe(e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::NotFound {
        "missing".into()
    } else {
        e.to_string()
    }
}
