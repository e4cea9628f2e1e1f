//! `strata bench soak` at a small size (and once by its old flag, `--soak MINUTES`): a gateway under a fleet and a training run, each
//! its own process, then the gateway's stop and restart. It catches leaks of open files,
//! threads and processes by counting them (not by timing anything).

use std::process::Command;

#[test]
fn a_short_soak_leaks_no_files_threads_or_processes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("soak");
    let json = tmp.path().join("soak.json");
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args([
            "bench",
            "soak",
            "--minutes",
            "0.3",
            "--agents",
            "8",
            "--dir",
        ])
        .arg(&dir)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let soak = &report["soak"];
    assert_eq!(soak["processes_left"], 0, "{soak:#}");
    let rows = soak["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "{soak:#}");
    for row in rows {
        let (warm, end) = (&row["warm"], &row["end"]);
        let count = |s: &serde_json::Value, key: &str| s[key].as_u64().unwrap();
        // Open files and threads level off: connections and pool threads come and go, but
        // nothing piles up with the traffic.
        assert!(
            count(end, "open_files") <= count(warm, "open_files") + 8,
            "{row:#}"
        );
        assert!(
            count(end, "threads") <= count(warm, "threads") + 16,
            "{row:#}"
        );
    }
    // Every sample was taken and plotted; the restart answered (the command checks it).
    let csv = std::fs::read_to_string(dir.join("soak.csv")).unwrap();
    assert!(csv.lines().count() > 3 * 5, "{csv}");
    assert!(std::fs::metadata(dir.join("soak.svg")).unwrap().len() > 1000);
    assert!(soak["restart_rss_mb"].as_f64().unwrap() > 0.0);
    // Its directory is the soak's own: a second soak there is refused.
    let again = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["bench", "--soak", "0.3", "--soak-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("is not empty"));
}
