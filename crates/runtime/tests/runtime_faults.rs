//! Failures are contained: a worker whose env panics, returns NaN or hangs is reported,
//! restarted, and its fragment recorded invalid while training continues; too many
//! failures stop the run with the worker's error.

use strata_env::{FaultKind, FaultPlan};
use strata_runtime::{preset, RunConfig, RuntimeError, Trainer};

fn with_fault(kind: FaultKind, at_step: u64) -> RunConfig {
    let mut c = preset("cartpole").unwrap();
    c.runtime.workers = 2;
    c.env.fault = Some(FaultPlan {
        kind,
        at_step,
        hang_seconds: 3.0,
    });
    c.env.fault_worker = 1;
    c.train.total_steps = 12 * c.steps_per_update();
    c.runtime.wait_timeout_secs = 5.0;
    // Short enough for a quick test, long enough that a busy CI machine does not starve a
    // healthy worker past it.
    c.runtime.restart_after_secs = if kind == FaultKind::Hang { 1.0 } else { 30.0 };
    c
}

fn train_through(config: RunConfig) -> Trainer {
    let mut t = Trainer::new(config).unwrap();
    while !t.finished() {
        t.iterate().unwrap();
    }
    t
}

fn assert_one_invalid(t: &Trainer, reason: &str) {
    let invalid = &t.progress().invalid_fragments;
    assert_eq!(invalid.len(), 1, "{invalid:?}");
    assert_eq!(invalid[0].worker, 1);
    assert_eq!(invalid[0].incarnation, 0);
    assert!(
        invalid[0].reason.contains(reason),
        "{:?}",
        invalid[0].reason
    );
    assert_eq!(
        t.progress().global_step,
        t.config().train.total_steps,
        "training continued to the end"
    );
}

#[test]
fn a_panicking_env_is_contained_and_its_worker_restarted() {
    let t = train_through(with_fault(FaultKind::Panic, 70));
    assert_one_invalid(&t, "panicked");
}

#[test]
fn an_env_returning_nan_stops_its_worker_not_the_batch() {
    let t = train_through(with_fault(FaultKind::Nan, 40));
    assert_one_invalid(&t, "non-finite observation");
}

#[test]
fn a_hanging_env_is_reported_and_its_worker_restarted() {
    let mut t = train_through(with_fault(FaultKind::Hang, 50));
    assert_one_invalid(&t, "silent for");
    // The hung thread wakes, sees it was replaced, and stops: shutdown joins it.
    t.shutdown();
}

#[test]
fn too_many_failures_stop_the_run_with_the_workers_error() {
    let mut c = with_fault(FaultKind::Panic, 10);
    c.runtime.max_consecutive_failures = 1;
    let mut t = Trainer::new(c).unwrap();
    let err = loop {
        match t.iterate() {
            Ok(_) => continue,
            Err(e) => break e,
        }
    };
    assert!(
        matches!(err, RuntimeError::Worker { worker: 1, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("injected fault"), "{err}");
}
