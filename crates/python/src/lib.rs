//! The native module of the `strata` Python package (`strata._strata`): Strata's trainer,
//! policies and ledger, called from Python with the GIL released while Rust works.
//!
//! The package's pure-Python layer (`python/strata/`) is the API users see: it turns
//! Python values into the JSON this module takes, renders progress, and holds the
//! gateway client. Here:
//!
//! - [`train::train`]: a training run in a Rust thread; the calling thread waits with the
//!   GIL released, hands each update to Python for progress, and turns Ctrl-C into an
//!   orderly stop (a checkpoint, then `KeyboardInterrupt`).
//! - [`policy::Policy`]: a checkpointed policy; `predict` on numpy arrays.
//! - [`ledger::ledger_table`]: a ledger's tables as Arrow IPC streams for pyarrow.
//!
//! Errors are `strata.StrataError` (and its `ConfigError`) carrying the same messages
//! the `strata` command prints.

mod ledger;
mod policy;
mod train;

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    _strata,
    StrataError,
    PyException,
    "Something Strata refused or could not do; the message says what."
);
create_exception!(
    _strata,
    ConfigError,
    StrataError,
    "A config value, key or env that is not valid; the message names it."
);

/// A runtime error as a Python exception, with its causes (as the CLI prints them).
pub(crate) fn error(e: impl std::error::Error) -> PyErr {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(&format!("\n  caused by: {text}"));
        }
        source = cause.source();
    }
    StrataError::new_err(message)
}

/// Config problems are `ConfigError`; everything else `StrataError`.
pub(crate) fn runtime_error(e: impl Into<strata_runtime::RuntimeError>) -> PyErr {
    use strata_runtime::RuntimeError as E;
    match e.into() {
        e @ (E::Config(_) | E::InvalidConfig(_) | E::ConfigFile { .. }) => {
            ConfigError::new_err(e.to_string())
        }
        other => error(other),
    }
}

/// Rust's log lines (a worker restarted, a slow wait) on stderr, at `STRATA_LOG` or
/// `RUST_LOG`'s level (warnings by default).
fn init_logging() {
    let filter = std::env::var("STRATA_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "warn".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .try_init();
}

/// Built-in envs and the Gymnasium ids they reproduce (`cartpole`: `CartPole-v1`).
#[pyfunction]
fn builtin_envs() -> PyResult<Vec<(String, String)>> {
    strata_env::env_names()
        .iter()
        .map(|name| {
            let spec = strata_env::spec_for(name).map_err(error)?;
            Ok((name.to_string(), spec.gymnasium_id))
        })
        .collect()
}

/// The effective config of `env` with `config_json` laid over its preset, as TOML (what
/// `strata config show` prints).
#[pyfunction]
#[pyo3(signature = (env, config_json))]
fn config_toml(env: Option<&str>, config_json: &str) -> PyResult<String> {
    strata_env::gym::forget_layouts();
    Ok(train::build_config(env, config_json)?.to_toml())
}

#[pymodule]
fn _strata(m: &Bound<'_, PyModule>) -> PyResult<()> {
    init_logging();
    m.add("StrataError", m.py().get_type::<StrataError>())?;
    m.add("ConfigError", m.py().get_type::<ConfigError>())?;
    // A forced kernel path the CPU lacks fails the import with the reason, not a model
    // call later.
    strata_nn::select_kernel_path().map_err(|e| ConfigError::new_err(e.to_string()))?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(builtin_envs, m)?)?;
    m.add_function(wrap_pyfunction!(config_toml, m)?)?;
    m.add_function(wrap_pyfunction!(train::train, m)?)?;
    m.add_class::<policy::Policy>()?;
    m.add_function(wrap_pyfunction!(policy::load, m)?)?;
    m.add_function(wrap_pyfunction!(policy::evaluate, m)?)?;
    m.add_function(wrap_pyfunction!(ledger::ledger_table, m)?)?;
    m.add_function(wrap_pyfunction!(ledger::ledger_report, m)?)?;
    Ok(())
}
