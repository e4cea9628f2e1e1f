//! `strata bench pixels` on a MinAtar preset: real env processes and real training, its
//! pieces measured and the ceilings derived from them as the report says.

#[path = "support/optional.rs"]
mod optional;

use std::process::Command;

#[test]
fn the_pixel_bench_measures_the_pieces_and_derives_both_ceilings() {
    let Some(python) = optional::gym_python_with("gymnasium, minatar") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let o = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["bench", "pixels", "--quick", "--json"])
        .arg(&json)
        .current_dir(dir.path())
        .env("STRATA_PYTHON", &python)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains("gym:MinAtar/Breakout-v1: 32768 steps an update"),
        "{out}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = report["pixels"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k}: {r}"));
    assert_eq!(r["steps_per_update"], 32768);
    assert_eq!(r["preset_mode"], "sync");
    for k in [
        "learn_seconds",
        "collect_seconds",
        "preset_steps_per_sec",
        "async_steps_per_sec",
    ] {
        assert!(f(k) > 0.0, "{k}: {r}");
    }
    let (learn, collect) = (f("learn_seconds"), f("collect_seconds"));
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * b;
    assert!(
        close(f("ceiling_in_turns"), 32768.0 / (learn + collect)),
        "{r}"
    );
    assert!(
        close(f("ceiling_overlapped"), 32768.0 / learn.max(collect)),
        "{r}"
    );
    // Taking turns, the preset cannot beat the sum of its pieces by much (the rest of an
    // update only adds to it; 10% for the timers' own noise).
    assert!(
        f("preset_steps_per_sec") <= 1.1 * f("ceiling_in_turns"),
        "{r}"
    );
}
