//! Checks that use tools from outside the project (Python readers, tmux): skipped where the
//! tool is missing, unless the variable CI sets says it must be there.

// Each test binary that includes this file uses its own subset.
#![allow(dead_code)]

use std::process::{Command, Stdio};

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
    let python = std::env::var("STRATA_PYTHON").unwrap_or_else(|_| "python3".into());
    available(
        &python,
        &["-c", "import gymnasium"],
        "STRATA_REQUIRE_GYM",
        "gymnasium",
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
