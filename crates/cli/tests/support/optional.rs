//! Checks that use tools from outside the project (Python readers, tmux): skipped where the
//! tool is missing, unless the variable CI sets says it must be there. Included by path by
//! the test binaries of several crates. A plain `cargo test` says once per tool what it
//! skipped and how to run everything (`scripts/test-all.sh`).

// Each test binary that includes this file uses its own subset.
#![allow(dead_code)]

use std::io::Write;
use std::process::{Command, Stdio};

/// Says on the terminal, once per `cargo test` (whose children the test binaries are) and
/// tool, that checks needing `what` were skipped. Written to stderr itself, past the test
/// harness's capture, which would hide it.
fn say_skipped(what: &str) {
    let marker = std::env::temp_dir().join("strata-test-skips");
    let cargo = std::os::unix::process::parent_id().to_string();
    let said = std::fs::read_to_string(&marker).unwrap_or_default();
    let mut lines: Vec<&str> = said.lines().collect();
    if lines.first() != Some(&cargo.as_str()) {
        lines = vec![&cargo];
    }
    if lines.contains(&what) {
        return;
    }
    lines.push(what);
    let _ = std::fs::write(&marker, lines.join("\n"));
    let _ = writeln!(
        std::io::stderr(),
        "note: {what} is not installed here, so the checks that need it were skipped; \
         scripts/test-all.sh sets up everything and runs every test"
    );
}

/// Whether `program args` runs successfully. When it does not, the caller skips its check
/// (and says so), unless `require_var` is set, which fails the test instead.
pub fn available(program: &str, args: &[&str], require_var: &str, what: &str) -> bool {
    let ok = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var(require_var).is_err(),
            "{require_var} is set but {what} is not installed"
        );
        eprintln!("{what} not installed: check skipped");
        say_skipped(what);
    }
    ok
}

/// Whether `python3` can import `module` (see [`available`]).
pub fn python_module(module: &str, require_var: &str) -> bool {
    available(
        "python3",
        &["-c", &format!("import {module}")],
        require_var,
        module,
    )
}

/// The interpreter `gym:` envs run (`STRATA_PYTHON`, else `python3`), if it can import
/// gymnasium (see [`available`]; `STRATA_REQUIRE_GYM` makes a missing one fail).
pub fn gym_python() -> Option<String> {
    gym_python_with("gymnasium")
}

/// As [`gym_python`], for an interpreter that imports `modules` (`gymnasium, mujoco`).
pub fn gym_python_with(modules: &str) -> Option<String> {
    let python = std::env::var("STRATA_PYTHON").unwrap_or_else(|_| "python3".into());
    available(
        &python,
        &["-c", &format!("import {modules}")],
        "STRATA_REQUIRE_GYM",
        modules,
    )
    .then_some(python)
}

/// The NATS server the cluster tests start (`STRATA_NATS_SERVER`, else `nats-server` on the
/// `PATH`), if it runs (`STRATA_REQUIRE_NATS` makes a missing one fail).
pub fn nats_server() -> Option<String> {
    let server = std::env::var("STRATA_NATS_SERVER").unwrap_or_else(|_| "nats-server".into());
    available(
        &server,
        &["--version"],
        "STRATA_REQUIRE_NATS",
        "nats-server",
    )
    .then_some(server)
}
