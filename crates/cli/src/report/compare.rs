//! `strata report A B C ...`: several runs on one page. Runs whose configs differ only in
//! the seed form a group, drawn as the mean of their return curves with a band from the
//! lowest to the highest seed; groups are labelled by the config keys that tell them apart
//! (`ppo.learning_rate=0.001`), or by their env when only seeds differ.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use serde::Serialize;
use strata_runtime::{RunConfig, RunLayout, UpdateRecord};

use super::figures::{both_backends, generation_colour, padded, render, Axes, Draw, DrawResult};
use super::html::{escape, DATA_ID};
use super::load::{read_config, read_lines};

/// Points on each group's curve.
const GRID: usize = 120;

/// One run as the comparison needs it.
struct Run {
    dir: PathBuf,
    config: RunConfig,
    /// `(env step, mean return of the recent episodes)` after each update.
    curve: Vec<(f64, f64)>,
    last: Option<UpdateRecord>,
}

/// Runs that differ only in their seed.
#[derive(Debug, Serialize)]
pub(crate) struct Group {
    /// The keys that tell this group from the others, `key=value, ...`.
    pub(crate) label: String,
    pub(crate) runs: Vec<String>,
    pub(crate) seeds: Vec<u64>,
    /// Env steps of the curve's points (up to the shortest run's end).
    pub(crate) steps: Vec<f64>,
    /// Mean over the runs at each step, and the lowest and highest run.
    pub(crate) mean: Vec<f64>,
    pub(crate) low: Vec<f64>,
    pub(crate) high: Vec<f64>,
    /// Each run's last mean return.
    pub(crate) final_returns: Vec<f64>,
    /// Each run's training throughput, env steps per second.
    pub(crate) steps_per_sec: Vec<f64>,
}

/// The figure: one mean line and band per group.
pub(crate) struct CompareFigure<'a> {
    groups: &'a [Group],
}

/// Writes the comparison of `dirs` into `out` (default: `compare-<time>` beside the first
/// run) and prints where.
///
/// # Errors
/// A directory that is not a run with a config and metrics, or output that cannot be
/// written.
pub(crate) fn run(dirs: &[PathBuf], out: Option<PathBuf>) -> Result<()> {
    let runs = dirs.iter().map(|d| load(d)).collect::<Result<Vec<Run>>>()?;
    let groups = group(&runs);
    let out = out.unwrap_or_else(|| {
        let stamp = strata_runtime::utc_stamp(std::time::SystemTime::now());
        dirs[0]
            .parent()
            .unwrap_or(Path::new("."))
            .join(format!("compare-{stamp}"))
    });
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let svg = render(&CompareFigure { groups: &groups }, "compare", &out)?;
    let path = out.join("report.html");
    std::fs::write(&path, page(&groups, &svg))
        .with_context(|| format!("cannot write {}", path.display()))?;
    println!(
        "report: {} ({} runs in {} groups)",
        path.display(),
        runs.len(),
        groups.len()
    );
    Ok(())
}

fn load(dir: &Path) -> Result<Run> {
    let mut problems = Vec::new();
    let run = RunLayout::new(dir);
    let (config, _) = read_config(&run.config(), true, &mut problems);
    let updates: Vec<UpdateRecord> = read_lines(&run.metrics(), true, &mut problems);
    let Some(config) = config else {
        bail!("{}: {}", dir.display(), problems.join("; "));
    };
    if updates.is_empty() {
        bail!(
            "{}: no updates recorded (metrics.jsonl){}",
            dir.display(),
            if problems.is_empty() {
                String::new()
            } else {
                format!(": {}", problems.join("; "))
            }
        );
    }
    let curve = updates
        .iter()
        .filter_map(|u| Some((u.global_step as f64, u.mean_return?)))
        .collect();
    Ok(Run {
        dir: dir.to_path_buf(),
        config,
        curve,
        last: updates.last().cloned(),
    })
}

/// A config's keys as `dotted.key -> value`, the seed left out.
fn flat_keys(config: &RunConfig) -> BTreeMap<String, String> {
    fn walk(prefix: &str, table: &toml::Table, out: &mut BTreeMap<String, String>) {
        for (key, value) in table {
            let name = if prefix.is_empty() {
                key.clone()
            } else {
                format!("{prefix}.{key}")
            };
            match value {
                toml::Value::Table(t) => walk(&name, t, out),
                other => {
                    out.insert(name, other.to_string());
                }
            }
        }
    }
    let table = config.to_table();
    let mut out = BTreeMap::new();
    walk("", &table, &mut out);
    out.remove("train.seed");
    out
}

/// Runs grouped by their configs less the seed, in the order their first runs were given.
fn group(runs: &[Run]) -> Vec<Group> {
    let keys: Vec<BTreeMap<String, String>> = runs.iter().map(|r| flat_keys(&r.config)).collect();
    let mut members: Vec<Vec<usize>> = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        match members.iter_mut().find(|m| keys[m[0]] == *k) {
            Some(m) => m.push(i),
            None => members.push(vec![i]),
        }
    }
    // The keys whose values are not the same in every group.
    let differing: Vec<&String> = keys
        .iter()
        .flat_map(|k| k.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|key| {
            let first = keys[members[0][0]].get(*key);
            members.iter().any(|m| keys[m[0]].get(*key) != first)
        })
        .collect();
    members
        .into_iter()
        .map(|m| {
            let own = &keys[m[0]];
            let label = if differing.is_empty() {
                runs[m[0]].config.env.name.clone()
            } else {
                differing
                    .iter()
                    .map(|k| format!("{k}={}", own.get(*k).map_or("-", String::as_str)))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            curve_of(label, m.iter().map(|&i| &runs[i]).collect())
        })
        .collect()
}

fn curve_of(label: String, runs: Vec<&Run>) -> Group {
    // Up to the shortest run's end: each point is a mean over every run.
    let end = runs
        .iter()
        .map(|r| r.curve.last().map_or(0.0, |p| p.0))
        .fold(f64::INFINITY, f64::min);
    let start = runs
        .iter()
        .map(|r| r.curve.first().map_or(0.0, |p| p.0))
        .fold(0.0, f64::max);
    let steps: Vec<f64> = if end.is_finite() && end > start {
        (0..GRID)
            .map(|i| start + (end - start) * i as f64 / (GRID - 1) as f64)
            .collect()
    } else {
        Vec::new()
    };
    let (mut mean, mut low, mut high) = (Vec::new(), Vec::new(), Vec::new());
    for &x in &steps {
        let ys: Vec<f64> = runs.iter().map(|r| at(&r.curve, x)).collect();
        mean.push(ys.iter().sum::<f64>() / ys.len() as f64);
        low.push(ys.iter().copied().fold(f64::INFINITY, f64::min));
        high.push(ys.iter().copied().fold(f64::NEG_INFINITY, f64::max));
    }
    Group {
        label,
        runs: runs.iter().map(|r| r.dir.display().to_string()).collect(),
        seeds: runs.iter().map(|r| r.config.train.seed).collect(),
        steps,
        mean,
        low,
        high,
        final_returns: runs
            .iter()
            .filter_map(|r| r.last.as_ref()?.mean_return)
            .collect(),
        steps_per_sec: runs
            .iter()
            .filter_map(|r| Some(r.last.as_ref()?.env_steps_per_sec))
            .collect(),
    }
}

/// `curve` (sorted by step) at step `x`, linear between its points.
fn at(curve: &[(f64, f64)], x: f64) -> f64 {
    let i = curve.partition_point(|p| p.0 < x);
    match (i.checked_sub(1).map(|j| curve[j]), curve.get(i)) {
        (Some(a), Some(b)) if b.0 > a.0 => a.1 + (b.1 - a.1) * (x - a.0) / (b.0 - a.0),
        (_, Some(b)) => b.1,
        (Some(a), None) => a.1,
        (None, None) => f64::NAN,
    }
}

impl CompareFigure<'_> {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let x_max = self
            .groups
            .iter()
            .flat_map(|g| g.steps.last())
            .fold(1.0f64, |a, &b| a.max(b));
        let lo = self
            .groups
            .iter()
            .flat_map(|g| &g.low)
            .fold(f64::INFINITY, |a, &b| a.min(b));
        let hi = self
            .groups
            .iter()
            .flat_map(|g| &g.high)
            .fold(f64::NEG_INFINITY, |a, &b| a.max(b));
        let (lo, hi) = padded(lo, hi);
        let mut chart = Axes {
            caption:
                "Mean return of recent episodes (line: mean over seeds, band: lowest to highest)",
            x: 0.0..x_max * 1.02,
            y: lo..hi,
            x_desc: "env steps",
            y_desc: "mean return",
            x_labels: 10,
            y_label_width: 56,
        }
        .draw(area)?;
        for (i, g) in self.groups.iter().enumerate() {
            let colour = generation_colour(i as u64);
            if g.runs.len() > 1 {
                let band: Vec<(f64, f64)> = g
                    .steps
                    .iter()
                    .zip(&g.high)
                    .map(|(&x, &y)| (x, y))
                    .chain(g.steps.iter().zip(&g.low).rev().map(|(&x, &y)| (x, y)))
                    .collect();
                chart.draw_series(std::iter::once(Polygon::new(
                    band,
                    colour.mix(0.18).filled(),
                )))?;
            }
            let label = format!(
                "{} ({} run{})",
                g.label,
                g.runs.len(),
                if g.runs.len() == 1 { "" } else { "s" }
            );
            chart
                .draw_series(LineSeries::new(
                    g.steps.iter().zip(&g.mean).map(|(&x, &y)| (x, y)),
                    colour.stroke_width(2),
                ))?
                .label(label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .position(SeriesLabelPosition::LowerRight)
            .draw()?;
        Ok(())
    }
}

both_backends!(CompareFigure<'_>);

fn mean_std(values: &[f64]) -> String {
    if values.is_empty() {
        return "–".into();
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let std = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
    format!("{mean:.1} ± {std:.1}")
}

fn page(groups: &[Group], svg: &str) -> String {
    let mut h = String::new();
    let runs: usize = groups.iter().map(|g| g.runs.len()).sum();
    let _ = write!(
        h,
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Strata: {runs} runs compared</title>\
         <style>body{{font-family:sans-serif;margin:2em;max-width:1100px}}\
         table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left}}\
         svg{{max-width:100%;height:auto}}</style></head><body>\n\
         <h1>{runs} runs in {} group{}</h1>\n<div class=\"figure\">{svg}</div>\n",
        groups.len(),
        if groups.len() == 1 { "" } else { "s" }
    );
    h.push_str(
        "<table><tr><th>group</th><th>seeds</th><th>final mean return (mean ± std over seeds)</th>\
         <th>steps/s</th><th>runs</th></tr>\n",
    );
    for g in groups {
        let seeds: Vec<String> = g.seeds.iter().map(u64::to_string).collect();
        let rate = g.steps_per_sec.iter().sum::<f64>() / g.steps_per_sec.len().max(1) as f64;
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{rate:.0}</td><td>{}</td></tr>",
            escape(&g.label),
            seeds.join(", "),
            mean_std(&g.final_returns),
            g.runs
                .iter()
                .map(|r| escape(r))
                .collect::<Vec<_>>()
                .join("<br>")
        );
    }
    h.push_str("</table>\n");
    let data = serde_json::to_string(groups).expect("groups serialise");
    let _ = write!(
        h,
        "<script type=\"application/json\" id=\"{DATA_ID}\">{}</script>\n</body></html>\n",
        data.replace("</", "<\\/")
    );
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_curve_is_read_between_its_points_and_held_at_its_ends() {
        let curve = [(10.0, 1.0), (20.0, 3.0)];
        assert_eq!(at(&curve, 15.0), 2.0);
        assert_eq!(at(&curve, 5.0), 1.0);
        assert_eq!(at(&curve, 25.0), 3.0);
        assert_eq!(at(&curve, 20.0), 3.0);
    }
}
