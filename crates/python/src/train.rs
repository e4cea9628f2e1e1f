//! `strata.train`: a training run in a Rust thread, watched from the Python thread.

use crossbeam_channel::{bounded, RecvTimeoutError};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use pyo3::prelude::*;
use strata_runtime::{run, ConfigFile, Existing, RunConfig, RunDir, Trainer};

use crate::runtime_error;

/// How often the waiting thread looks for Ctrl-C and progress.
const TICK: Duration = Duration::from_millis(100);
/// Progress lines waiting for Python: what does not fit is dropped.
const PROGRESS_QUEUE: usize = 64;
/// How long the run's result waits for room behind progress lines Python has not read.
const DONE_WAIT: Duration = Duration::from_secs(60);

/// The config `env`'s preset with the JSON table `config_json` laid over it (the same
/// layering as `strata train --config`).
pub(crate) fn build_config(env: Option<&str>, config_json: &str) -> PyResult<RunConfig> {
    let file = config_file(config_json)?;
    RunConfig::layered(env, Some(&file), &[]).map_err(runtime_error)
}

/// A JSON object of config keys as a config file's table.
fn config_file(config_json: &str) -> PyResult<ConfigFile> {
    let value: serde_json::Value = serde_json::from_str(config_json)
        .map_err(|e| crate::ConfigError::new_err(format!("config is not JSON: {e}")))?;
    let table = toml::Table::try_from(value).map_err(|e| {
        crate::ConfigError::new_err(format!(
            "config must map section names to tables of keys: {e}"
        ))
    })?;
    Ok(ConfigFile {
        name: "(the config argument)".into(),
        table,
    })
}

/// What the training thread tells the waiting one.
enum Event {
    /// An update finished: its metrics line, as JSON.
    Update(String),
    /// The run ended: its summary as JSON, or the error.
    Done(Result<String, strata_runtime::RuntimeError>),
}

/// Trains `env` (a built-in name or `gym:ID`) with `config_json` over its preset into
/// `run_dir` (default: `runs/<env>-seed<seed>-<time>`), or continues `resume`'s
/// checkpoint with `config_json`'s run-control keys. Calls `progress(update_json)` after
/// updates. Returns `(summary_json, run_dir)`.
///
/// Ctrl-C stops the run at its next wait; the checkpoint is written, every thread and env
/// process stopped, then `KeyboardInterrupt` is raised. A second Ctrl-C raises it at once,
/// leaving the training thread to finish its stop on its own.
#[pyfunction]
#[pyo3(signature = (env, config_json, run_dir=None, resume=None, progress=None, overwrite=false))]
pub(crate) fn train(
    py: Python<'_>,
    env: Option<&str>,
    config_json: &str,
    run_dir: Option<PathBuf>,
    resume: Option<PathBuf>,
    progress: Option<Py<PyAny>>,
    overwrite: bool,
) -> PyResult<(String, PathBuf)> {
    // A notebook user may have edited a factory env since the last call.
    strata_env::gym::forget_layouts();
    let trainer = match &resume {
        None => {
            let config = build_config(env, config_json)?;
            py.detach(|| Trainer::new(config)).map_err(runtime_error)?
        }
        Some(path) => {
            let overrides = config_file(config_json)?;
            let (state, notes) = py
                .detach(|| {
                    strata_runtime::resume_run(path, |mut wanted| {
                        for (section, keys) in &overrides.table {
                            let Some(keys) = keys.as_table() else {
                                return Err(strata_runtime::RuntimeError::Config(format!(
                                    "`{section}` must be a table of keys"
                                )));
                            };
                            for (key, value) in keys {
                                wanted.set(&format!("{section}.{key}"), &value.to_string())?;
                            }
                        }
                        Ok(wanted)
                    })
                })
                .map_err(runtime_error)?;
            for note in notes {
                eprintln!("resume: {note}");
            }
            py.detach(|| Trainer::from_state(state))
                .map_err(runtime_error)?
        }
    };
    let existing = Existing::for_command(overwrite, resume.is_some(), run_dir.is_some())
        .map_err(runtime_error)?;
    let root = run_dir
        .or_else(|| resume.as_deref().and_then(RunDir::of_checkpoint))
        .unwrap_or_else(|| RunDir::default_path(trainer.config()));
    // Claimed here, so a refusal is raised before any thread starts.
    let claimed = RunDir::claim(&root, existing).map_err(runtime_error)?;
    let stop = trainer.stop_flag();
    let total_steps = trainer.config().train.total_steps;
    let (events, updates) = bounded::<Event>(PROGRESS_QUEUE);
    let worker = std::thread::Builder::new()
        .name("strata-train".into())
        .spawn(move || {
            let mut trainer = trainer;
            let outcome = claimed.open(&trainer).and_then(|mut run_dir| {
                run::train(&mut trainer, &mut run_dir, &mut |record| {
                    let line = serde_json::json!({ "record": record, "total_steps": total_steps })
                        .to_string();
                    // Progress is best effort: a full queue drops the line, never waits.
                    let _ = events.try_send(Event::Update(line));
                })
            });
            let done = outcome.map(|s| serde_json::to_string(&s).expect("a summary serialises"));
            // The queue may be full of progress: the end waits its turn (the other side
            // reads until it arrives).
            let _ = events.send_timeout(Event::Done(done), DONE_WAIT);
        })
        .map_err(|e| {
            crate::StrataError::new_err(format!("cannot start the training thread: {e}"))
        })?;
    let mut interrupted = None;
    let result = loop {
        match py.detach(|| updates.recv_timeout(TICK)) {
            Ok(Event::Update(line)) => {
                if let Some(callback) = &progress {
                    if let Err(e) = callback.call1(py, (line,)) {
                        // A broken progress display must not lose the run: report it once.
                        e.print(py);
                        stop.store(true, Ordering::Relaxed);
                    }
                }
            }
            Ok(Event::Done(result)) => break result,
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                break Err(strata_runtime::RuntimeError::Worker {
                    worker: 0,
                    error: "the training thread ended without a result".into(),
                })
            }
        }
        if let Err(e) = py.check_signals() {
            if interrupted.is_some() {
                // A second Ctrl-C: raised now. The training thread goes on stopping in
                // order (checkpoint, env processes, ledger) without anyone waiting on it.
                return Err(e);
            }
            // Ctrl-C (or another signal's exception): stop in order, keep waiting for the
            // checkpoint, then raise it.
            stop.store(true, Ordering::Relaxed);
            interrupted = Some(e);
            say(
                py,
                "stopping: finishing the update and writing a checkpoint \
                 (Ctrl-C again to leave at once)\n",
            );
        }
    };
    py.detach(|| worker.join())
        .map_err(|_| crate::StrataError::new_err("the training thread panicked"))?;
    if let Some(e) = interrupted {
        return Err(e);
    }
    Ok((result.map_err(runtime_error)?, root))
}

/// Writes `text` to Python's `sys.stderr` (a notebook shows it; the process's stderr it
/// would not), best effort.
fn say(py: Python<'_>, text: &str) {
    let _ = py
        .import("sys")
        .and_then(|sys| sys.getattr("stderr"))
        .and_then(|stderr| stderr.call_method1("write", (text,)));
}
