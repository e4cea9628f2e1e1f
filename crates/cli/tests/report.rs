//! `strata report` and what training writes for it: per-generation series with version
//! switches at the right steps (checked on the plotted data, not pixels), evaluation keyed
//! by version, TensorBoard scalars read back by TensorBoard's own reader, and damaged runs
//! reported as far as they can be read.

#[path = "support/optional.rs"]
mod optional;
#[path = "support/strata.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::{parquet_files, stderr, strata, train_cartpole};

use serde_json::Value;

fn train(run: &Path, extra: &[&str]) {
    let o = train_cartpole(run, extra);
    assert!(o.status.success(), "train failed: {}", stderr(&o));
}

fn jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Runs `strata report` and returns the plotted data embedded in the HTML, and stderr.
fn report(run: &Path) -> (Value, String) {
    let o = strata(&["report", run.to_str().unwrap()]);
    assert!(o.status.success(), "report failed: {}", stderr(&o));
    let html = std::fs::read_to_string(run.join("report/report.html")).unwrap();
    let start_tag = "<script type=\"application/json\" id=\"strata-report-data\">";
    let start = html.find(start_tag).expect("the report embeds its data") + start_tag.len();
    let end = start + html[start..].find("</script>").unwrap();
    let data = serde_json::from_str(&html[start..end].replace("<\\/", "</")).unwrap();
    (data, stderr(&o))
}

/// Env steps per update, from the first metrics line.
fn steps_per_update(run: &Path) -> u64 {
    jsonl(&run.join("metrics.jsonl"))[0]["global_step"]
        .as_u64()
        .unwrap()
}

/// The checks both runs share: one series per generation, in order, each episode once;
/// evaluation points are eval.jsonl's; every figure exists as SVG and PNG.
fn check_common(run: &Path, data: &Value) -> Vec<(u64, u64)> {
    let returns = &data["figures"]["returns"];
    let series = returns["series"].as_array().unwrap();
    let generations: Vec<u64> = series
        .iter()
        .map(|s| s["generation"].as_u64().unwrap())
        .collect();
    assert!(
        generations.windows(2).all(|w| w[0] < w[1]),
        "one series per generation, ascending: {generations:?}"
    );
    for s in series {
        let points = s["points"].as_array().unwrap();
        assert!(!points.is_empty());
        let steps: Vec<f64> = points.iter().map(|p| p[0].as_f64().unwrap()).collect();
        assert!(
            steps.windows(2).all(|w| w[0] <= w[1]),
            "points in step order"
        );
    }
    let evals = jsonl(&run.join("eval.jsonl"));
    let plotted = returns["eval_points"].as_array().unwrap();
    assert_eq!(plotted.len(), evals.len());
    for (p, e) in plotted.iter().zip(&evals) {
        assert_eq!(p["version"], e["policy_version"]);
        assert_eq!(p["step"], e["global_step"]);
        assert_eq!(p["mean_return"], e["mean_return"]);
    }
    // Evaluations are pinned to distinct versions, first the initial one.
    assert_eq!(evals[0]["policy_version"], 0);
    let versions: Vec<u64> = evals
        .iter()
        .map(|e| e["policy_version"].as_u64().unwrap())
        .collect();
    assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
    for name in ["returns", "evaluation", "policy_lag", "time"] {
        let svg = std::fs::read_to_string(run.join(format!("report/{name}.svg"))).unwrap();
        assert!(svg.contains("<svg"), "{name}.svg");
        let png = std::fs::read(run.join(format!("report/{name}.png"))).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{name}.png");
    }
    let html = std::fs::read_to_string(run.join("report/report.html")).unwrap();
    assert_eq!(html.matches("<svg").count(), 4, "four figures inlined");
    assert!(html.contains("Ledger per generation"));
    // One greedy episode of the best version, inline and beside the page.
    let gif = std::fs::read(run.join("report/best-episode.gif")).unwrap();
    assert_eq!(&gif[..6], b"GIF89a");
    assert!(
        html.contains("<h2>Watch it</h2>") && html.contains("src=\"data:image/gif;base64,R0lGODlh")
    );
    // The run's recorded config hash, from config.toml's header.
    let config = std::fs::read_to_string(run.join("config.toml")).unwrap();
    let hash = config
        .lines()
        .next()
        .unwrap()
        .strip_prefix("# config hash ")
        .unwrap();
    assert!(
        html.contains(&format!("<td>{hash}</td>")),
        "config hash {hash}"
    );
    returns["switches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["version"].as_u64().unwrap(), s["step"].as_u64().unwrap()))
        .collect()
}

#[test]
fn report_of_a_sync_run_marks_each_switch_where_the_version_took_over() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    train(
        &run,
        &["--mode", "sync", "--workers", "2", "--max-steps", "12288"],
    );
    let (data, warnings) = report(&run);
    assert!(
        warnings.is_empty(),
        "a complete run has no problems: {warnings}"
    );
    let switches = check_common(&run, &data);
    let spu = steps_per_update(&run);
    let updates = jsonl(&run.join("metrics.jsonl")).len() as u64;
    // Synchronous: version v collects exactly the v-th batch, so its samples begin after v
    // batches, and every version but the last published one took over.
    let expected: Vec<(u64, u64)> = (1..updates).map(|v| (v, v * spu)).collect();
    assert_eq!(switches, expected);
    // Nothing lags in sync mode.
    assert_eq!(
        data["figures"]["lag"]["bins"],
        serde_json::json!([[0, 12288]])
    );
    // Every episode is drawn (a short run is under the point budget).
    let series = data["figures"]["returns"]["series"].as_array().unwrap();
    for s in series {
        assert_eq!(s["episodes_per_point"], 1);
        assert_eq!(s["points"].as_array().unwrap().len() as u64, s["episodes"]);
        assert!(s["invalidated"].as_array().unwrap().is_empty());
    }

    // Invalidate the first two batches: their episodes are marked, the rest are not, and
    // the ledger table counts them per generation with the reason.
    let o = strata(&[
        "ledger",
        "invalidate",
        run.to_str().unwrap(),
        "--samples",
        &format!("0..={}", 2 * spu - 1),
        "--reason",
        "operator",
        "--text",
        "report test",
        "--author",
        "ci",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (data, _) = report(&run);
    let series = data["figures"]["returns"]["series"].as_array().unwrap();
    let marked = |generation: u64| {
        series
            .iter()
            .find(|s| s["generation"] == generation)
            .map_or(0, |s| s["invalidated"].as_array().unwrap().len())
    };
    assert!(marked(0) > 0 && marked(1) > 0, "the first two generations");
    let last = series.last().unwrap()["generation"].as_u64().unwrap();
    assert_eq!(marked(last), 0);
    let html = std::fs::read_to_string(run.join("report/report.html")).unwrap();
    assert!(
        html.contains(&format!("{spu} operator")),
        "the table counts invalidated samples by reason"
    );
}

#[test]
fn report_of_an_async_run_has_a_series_per_generation() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    train(
        &run,
        &["--mode", "async", "--workers", "2", "--max-steps", "4096"],
    );
    let (data, warnings) = report(&run);
    assert!(warnings.is_empty(), "{warnings}");
    let switches = check_common(&run, &data);
    let spu = steps_per_update(&run);
    let series = data["figures"]["returns"]["series"].as_array().unwrap();
    assert!(series.len() >= 5, "{} generations", series.len());
    assert!(switches.len() >= 5);
    // With policy lag up to 1, version v is published after v batches and is trained on
    // no later than one batch after that.
    for (v, step) in &switches {
        assert!(
            v * spu <= *step && *step <= (v + 1) * spu,
            "version {v} took over at step {step}, outside [{}, {}]",
            v * spu,
            (v + 1) * spu
        );
    }
    assert!(switches
        .windows(2)
        .all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1));
    let lag = data["figures"]["lag"]["bins"].as_array().unwrap();
    let lagged: u64 = lag
        .iter()
        .filter(|b| b[0].as_u64().unwrap() >= 1)
        .map(|b| b[1].as_u64().unwrap())
        .sum();
    assert!(lagged > 0, "async samples lag: {lag:?}");
}

#[test]
fn report_says_what_is_missing_and_reports_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    // Not a run at all.
    let o = strata(&["report", tmp.path().to_str().unwrap()]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("not a run directory") && err.contains("metrics.jsonl"),
        "{err}"
    );
    let o = strata(&["report", tmp.path().join("nowhere").to_str().unwrap()]);
    assert!(stderr(&o).contains("no such directory"));

    // A run with a truncated metrics file, no eval file and a cut-off ledger file.
    let run = tmp.path().join("run");
    train(&run, &["--max-steps", "4096", "--workers", "2"]);
    let metrics = run.join("metrics.jsonl");
    let full = std::fs::read(&metrics).unwrap();
    std::fs::write(&metrics, &full[..full.len() - 40]).unwrap();
    std::fs::remove_file(run.join("eval.jsonl")).unwrap();
    let victim = parquet_files(&run.join("ledger/samples"))
        .pop()
        .expect("the run stored samples");
    let bytes = std::fs::read(&victim).unwrap();
    std::fs::write(&victim, &bytes[..bytes.len() / 2]).unwrap();
    let (data, warnings) = report(&run);
    for needle in [
        "metrics.jsonl",
        "truncated",
        "eval.jsonl: missing",
        victim.file_name().unwrap().to_str().unwrap(),
    ] {
        assert!(
            warnings.contains(needle),
            "stderr lacks `{needle}`:\n{warnings}"
        );
    }
    let problems = data["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 3, "{problems:?}");
    // What could be read is still there: the time breakdown from the intact lines, the
    // curves from the intact ledger files.
    assert!(data["figures"]["time"].is_object());
    assert!(!data["figures"]["returns"]["series"]
        .as_array()
        .unwrap()
        .is_empty());
    assert!(data["figures"]["evaluation"].is_null());
    let html = std::fs::read_to_string(run.join("report/report.html")).unwrap();
    assert!(html.contains("Missing or damaged"));
    assert!(html.contains("Not drawn: needs eval.jsonl"));
}

/// TensorBoard's reader (`scripts/read_tensorboard.py`) reads the scalars back, and they
/// are the run's numbers. Skipped when TensorBoard is not installed, unless
/// `STRATA_REQUIRE_TENSORBOARD=1` (CI installs it).
#[test]
fn tensorboard_reads_the_scalars_back() {
    if !optional::python_module("tensorboard", "STRATA_REQUIRE_TENSORBOARD") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    train(&run, &["--max-steps", "8192"]);
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/read_tensorboard.py");
    let o = Command::new("python3")
        .arg(script)
        .arg(run.join("tb"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let scalars: Value = serde_json::from_slice(&o.stdout).unwrap();
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-4 * b.abs().max(1.0);
    let updates = jsonl(&run.join("metrics.jsonl"));
    let read = scalars["train/policy_version"].as_array().unwrap();
    assert_eq!(read.len(), updates.len());
    for (r, u) in read.iter().zip(&updates) {
        assert_eq!(r[0], u["global_step"]);
        assert!(close(
            r[1].as_f64().unwrap(),
            u["policy_version"].as_f64().unwrap()
        ));
    }
    let losses = scalars["ppo/value_loss"].as_array().unwrap();
    for (r, u) in losses.iter().zip(&updates) {
        assert!(close(
            r[1].as_f64().unwrap(),
            u["value_loss"].as_f64().unwrap()
        ));
    }
    let evals = jsonl(&run.join("eval.jsonl"));
    let read = scalars["eval/mean_return"].as_array().unwrap();
    assert_eq!(read.len(), evals.len());
    for (r, e) in read.iter().zip(&evals) {
        assert_eq!(r[0], e["global_step"]);
        assert!(close(
            r[1].as_f64().unwrap(),
            e["mean_return"].as_f64().unwrap()
        ));
    }
}

#[test]
fn eval_pins_one_version_of_a_run() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    train(&run, &["--max-steps", "8192", "--checkpoint-every", "4096"]);
    let spu = steps_per_update(&run);
    let wanted = 4096 / spu;
    let o = strata(&[
        "eval",
        "--checkpoint",
        run.to_str().unwrap(),
        "--version",
        &wanted.to_string(),
        "--episodes",
        "3",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let result: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(result["policy_version"], wanted);
    assert_eq!(result["episodes"], 3);
    // --record: a GIF of the first env's episode, named after the version and seed.
    let videos = tmp.path().join("videos");
    let o = strata(&[
        "eval",
        "--checkpoint",
        run.to_str().unwrap(),
        "--version",
        &wanted.to_string(),
        "--episodes",
        "2",
        "--record",
        videos.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let gif = videos.join(format!("v{wanted}-seed12345.gif"));
    assert_eq!(&std::fs::read(&gif).unwrap()[..6], b"GIF89a");
    assert!(stderr(&o).contains("(1 episode, "), "{}", stderr(&o));
    // A version no checkpoint holds is refused, naming the ones there are.
    let o = strata(&[
        "eval",
        "--checkpoint",
        run.to_str().unwrap(),
        "--version",
        "7",
    ]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("no checkpoint holds policy version 7"),
        "{err}"
    );
    // The periodic checkpoints are named (the best one's version, wherever training put
    // it, may sit among them).
    let listed: Vec<u64> = err
        .split("checkpointed versions: ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .map(|list| {
            list.split(", ")
                .filter_map(|v| v.trim().parse().ok())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        listed.contains(&wanted) && listed.contains(&(2 * wanted)),
        "{err}"
    );
}

/// `strata report A B C`: seeds of one config form a group (mean and band), groups are
/// labelled by the key that tells them apart, and the page embeds what it drew.
#[test]
fn a_report_of_several_runs_groups_seeds_and_labels_configs_by_their_difference() {
    let tmp = tempfile::tempdir().unwrap();
    let runs: Vec<PathBuf> = [("0.001", "1"), ("0.001", "2"), ("0.003", "1")]
        .iter()
        .map(|(lr, seed)| {
            let run = tmp.path().join(format!("lr{lr}-s{seed}"));
            let set = format!("ppo.learning_rate={lr}");
            train(
                &run,
                &["--seed", seed, "--max-steps", "4096", "--set", &set],
            );
            run
        })
        .collect();
    let out = tmp.path().join("compared");
    let mut args = vec!["report"];
    args.extend(runs.iter().map(|r| r.to_str().unwrap()));
    args.extend(["--out", out.to_str().unwrap()]);
    let o = strata(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    for file in ["compare.svg", "compare.png"] {
        assert!(out.join(file).exists(), "no {file}");
    }
    let svg = std::fs::read_to_string(out.join("compare.svg")).unwrap();
    assert!(
        svg.contains("ppo.learning_rate=0.001 (2 runs)"),
        "the legend"
    );
    assert!(
        svg.contains("ppo.learning_rate=0.003 (1 run)"),
        "the legend"
    );
    let start_tag = "<script type=\"application/json\" id=\"strata-report-data\">";
    let start = html.find(start_tag).expect("the page embeds its data") + start_tag.len();
    let end = start + html[start..].find("</script>").unwrap();
    let groups: Vec<Value> = serde_json::from_str(&html[start..end].replace("<\\/", "</")).unwrap();
    assert_eq!(groups.len(), 2);
    assert_eq!(groups[0]["label"], "ppo.learning_rate=0.001");
    assert_eq!(groups[0]["seeds"], serde_json::json!([1, 2]));
    assert_eq!(groups[1]["seeds"], serde_json::json!([1]));
    let floats = |v: &Value| -> Vec<f64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    let g = &groups[0];
    let (mean, low, high) = (floats(&g["mean"]), floats(&g["low"]), floats(&g["high"]));
    assert!(!mean.is_empty() && mean.len() == floats(&g["steps"]).len());
    for ((m, l), h) in mean.iter().zip(&low).zip(&high) {
        assert!(l <= m && m <= h, "the mean lies in its band: {l} {m} {h}");
    }
    assert!(
        low.iter().zip(&high).any(|(l, h)| l < h),
        "two seeds differ somewhere"
    );
    // Something not a run is named.
    let o = strata(&[
        "report",
        runs[0].to_str().unwrap(),
        tmp.path().to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("config.toml"), "{}", stderr(&o));
}
