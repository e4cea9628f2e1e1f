//! The machine's process table as tests read it (`/proc`), and waiting on a condition.

// Each test binary that includes this file uses its own subset.
#![allow(dead_code)]

use std::time::{Duration, Instant};

/// (pid, parent pid, state) of every process.
pub fn processes() -> Vec<(u32, u32, char)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The command name may hold spaces and parentheses: the fields start after the
        // last `)`.
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let rest: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let state = rest.first().and_then(|s| s.chars().next()).unwrap_or('?');
        if let Some(ppid) = rest.get(1).and_then(|p| p.parse().ok()) {
            out.push((pid, ppid, state));
        }
    }
    out
}

/// The children of `parent`.
pub fn children_of(parent: u32) -> Vec<u32> {
    processes()
        .into_iter()
        .filter(|&(_, ppid, _)| ppid == parent)
        .map(|(pid, _, _)| pid)
        .collect()
}

/// Alive: not gone and not a zombie.
pub fn alive(pid: u32) -> bool {
    processes()
        .iter()
        .any(|&(p, _, state)| p == pid && state != 'Z')
}

/// Polls `done` every 20 ms; fails the test naming `what` after `limit`.
pub fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
