//! Orderly stop: raising the stop flag (what Ctrl-C / SIGTERM do) ends the run within a
//! bound, writes a loadable checkpoint and leaves no thread running. Alone in its test
//! binary so the thread count is this test's own.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use strata_runtime::{load_policy, preset, run, RunDir, Trainer};

fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn stop_flag_ends_the_run_with_a_checkpoint_and_no_threads_left() {
    let before = threads();
    let tmp = tempfile::tempdir().unwrap();
    let mut c = preset("cartpole").unwrap();
    c.runtime.workers = 2;
    c.runtime.mode = strata_runtime::Mode::Async;
    c.train.total_steps = 100_000_000; // far more than the test will run
    let mut trainer = Trainer::new(c).unwrap();
    let stop = trainer.stop_flag();
    let mut dir = RunDir::create(tmp.path(), &trainer).unwrap();
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::Relaxed);
        Instant::now()
    });
    let summary = run::train(&mut trainer, &mut dir, &mut |_| {}).unwrap();
    let asked = stopper.join().unwrap();
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "stopped {:?} after the request",
        asked.elapsed()
    );
    assert!(summary.total_steps > 0 && summary.total_steps < 100_000_000);
    drop(trainer);
    assert_eq!(threads(), before, "threads left running");
    let policy = load_policy(tmp.path()).unwrap();
    assert_eq!(policy.policy_version, summary.policy_version);
}
