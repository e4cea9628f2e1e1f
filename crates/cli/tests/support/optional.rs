//! Checks that use tools from outside the project (Python readers, tmux): skipped where the
//! tool is missing, unless the variable CI sets says it must be there.

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
