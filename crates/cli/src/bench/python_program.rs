//! Running a Python program given as source, for the benchmarks' reference sides
//! (Gymnasium's vector envs, PyTorch's encoders).

use anyhow::{Context, Result};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Runs `program` (Python source fed on stdin, as `python - ARGS`) with `args`; returns its
/// output once it exits. Stdout is captured; stderr is captured or passed through as given.
pub(crate) fn run_python_program(
    python: &Path,
    program: &str,
    args: &[String],
    stderr: Stdio,
) -> Result<Output> {
    let mut child = Command::new(python)
        .arg("-")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .with_context(|| format!("cannot run {}", python.display()))?;
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(program.as_bytes())?;
    Ok(child.wait_with_output()?)
}
