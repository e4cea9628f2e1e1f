//! Where a run directory keeps each thing, and the header that ties its `config.toml` to
//! the config hash: the one place those names are spelled. Writers (the runtime's `RunDir`,
//! checkpoints, the run loop) and readers (`strata report`, resume, discovery) ask here.
//!
//! ```text
//! <run>/config.toml            # config hash <hash>, then the config
//! <run>/metrics.jsonl          one update record per line
//! <run>/eval.jsonl             one evaluation per line
//! <run>/tb/                    TensorBoard scalars (report.tensorboard)
//! <run>/checkpoint/            the final checkpoint
//! <run>/checkpoints/step-N/    periodic checkpoints (train.checkpoint_every)
//! <run>/best/                  the best-evaluated version, its eval.json beside it
//! <run>/ledger/                the sample ledger (unless ledger.location says otherwise)
//! ```

use std::path::{Path, PathBuf};

const CONFIG: &str = "config.toml";
const METRICS: &str = "metrics.jsonl";
const EVALS: &str = "eval.jsonl";
const TENSORBOARD: &str = "tb";
const FINAL_CHECKPOINT: &str = "checkpoint";
const PERIODIC_CHECKPOINTS: &str = "checkpoints";
const PERIODIC_PREFIX: &str = "step-";
/// The run directory's checkpoint of its best-evaluated version.
pub const BEST_DIR: &str = "best";
/// That version's evaluation, beside it.
pub const BEST_EVAL: &str = "eval.json";
const LEDGER: &str = "ledger";
/// The first line of a saved config, before the hash.
const HASH_HEADER: &str = "# config hash ";

/// The paths of one run directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunLayout {
    root: PathBuf,
}

impl RunLayout {
    /// The layout of the run directory `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        RunLayout { root: root.into() }
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `config.toml`: the config, under its hash header.
    pub fn config(&self) -> PathBuf {
        self.root.join(CONFIG)
    }

    /// `metrics.jsonl`: one update record per line.
    pub fn metrics(&self) -> PathBuf {
        self.root.join(METRICS)
    }

    /// `eval.jsonl`: one evaluation per line.
    pub fn evals(&self) -> PathBuf {
        self.root.join(EVALS)
    }

    /// `tb/`: TensorBoard event files.
    pub fn tensorboard(&self) -> PathBuf {
        self.root.join(TENSORBOARD)
    }

    /// `checkpoint/`: the final checkpoint.
    pub fn final_checkpoint(&self) -> PathBuf {
        self.root.join(FINAL_CHECKPOINT)
    }

    /// `checkpoints/`: the periodic checkpoints' directory.
    pub fn periodic_checkpoints(&self) -> PathBuf {
        self.root.join(PERIODIC_CHECKPOINTS)
    }

    /// `checkpoints/step-N/`: the periodic checkpoint taken at `step`.
    pub fn periodic_checkpoint(&self, step: u64) -> PathBuf {
        self.periodic_checkpoints()
            .join(format!("{PERIODIC_PREFIX}{step}"))
    }

    /// The step a periodic checkpoint's directory name (`step-N`) stands for.
    pub fn periodic_step(name: &str) -> Option<u64> {
        name.strip_prefix(PERIODIC_PREFIX)?.parse().ok()
    }

    /// `best/`: the checkpoint of the best-evaluated version.
    pub fn best_checkpoint(&self) -> PathBuf {
        self.root.join(BEST_DIR)
    }

    /// `ledger/`: where the run's ledger is unless `ledger.location` names another.
    pub fn ledger(&self) -> PathBuf {
        self.root.join(LEDGER)
    }

    /// The entries whose presence marks a directory as a run's.
    pub fn markers(&self) -> [PathBuf; 5] {
        [
            self.config(),
            self.metrics(),
            self.final_checkpoint(),
            self.periodic_checkpoints(),
            self.ledger(),
        ]
    }

    /// Whether the directory holds a run (any of [`RunLayout::markers`]).
    pub fn holds_run(&self) -> bool {
        self.markers().iter().any(|p| p.exists())
    }

    /// A saved config's text: the hash header, then the config's TOML.
    pub fn config_text(hash: &str, toml: &str) -> String {
        format!("{}\n{toml}", Self::hash_header(hash))
    }

    /// The header line naming `hash` (as `strata config show` prints it too).
    pub fn hash_header(hash: &str) -> String {
        format!("{HASH_HEADER}{hash}")
    }

    /// The config hash a saved config's first line names.
    pub fn saved_hash(text: &str) -> Option<String> {
        let hash = text.lines().next()?.strip_prefix(HASH_HEADER)?.trim();
        Some(hash.to_string())
    }

    /// The config hash this run directory's `config.toml` names.
    pub fn run_hash(&self) -> Option<String> {
        Self::saved_hash(&std::fs::read_to_string(self.config()).ok()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_config_names_its_hash_on_its_first_line() {
        let text = RunLayout::config_text("5bc67a90277d4050", "[env]\nname = \"cartpole\"\n");
        assert!(text.starts_with("# config hash 5bc67a90277d4050\n[env]"));
        assert_eq!(
            RunLayout::saved_hash(&text).as_deref(),
            Some("5bc67a90277d4050")
        );
        assert_eq!(RunLayout::saved_hash("[env]\n"), None);
        assert_eq!(RunLayout::saved_hash(""), None);
    }

    #[test]
    fn periodic_checkpoints_are_named_by_step() {
        let run = RunLayout::new("runs/x");
        let dir = run.periodic_checkpoint(2048);
        assert_eq!(dir, Path::new("runs/x/checkpoints/step-2048"));
        let name = dir.file_name().unwrap().to_str().unwrap();
        assert_eq!(RunLayout::periodic_step(name), Some(2048));
        assert_eq!(RunLayout::periodic_step("best"), None);
    }
}
