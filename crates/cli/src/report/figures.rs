//! The report's figures: first the data each one plots (serialised into the report, so a
//! test or a user can check what was drawn), then the drawing, once per backend (SVG
//! for the HTML report, PNG beside it).

use std::path::Path;
use std::sync::Once;

use anyhow::{anyhow, Context, Result};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use serde::Serialize;
use strata_ledger::{EpisodePoint, VersionSwitch};

use super::load::RunData;

/// A subset of DejaVu Sans (printable ASCII and a few symbols; its licence is beside it):
/// text is drawn without any system font library.
const FONT: &[u8] = include_bytes!("../../assets/DejaVuSans-subset.ttf");
const FAMILY: &str = "sans-serif";
const SIZE: (u32, u32) = (960, 420);
/// More version switches than this are drawn as short ticks at the top of the plot.
const DENSE_SWITCHES: usize = 150;

/// Points drawn in all across a figure's series, at most: beyond it, consecutive episodes
/// of a generation are drawn as their mean (so a long run's report stays a few MB).
const POINT_BUDGET: usize = 4000;

/// Episodes completed by one generation: `[env step, return]`.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct GenerationSeries {
    pub(crate) generation: u64,
    /// Episodes it completed.
    pub(crate) episodes: usize,
    /// Consecutive episodes averaged per point (1: every episode drawn).
    pub(crate) episodes_per_point: usize,
    pub(crate) points: Vec<[f64; 2]>,
    /// Of those, episodes with an invalidated sample, drawn again as red crosses.
    pub(crate) invalidated: Vec<[f64; 2]>,
}

/// An evaluation of one pinned version.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct EvalPoint {
    pub(crate) version: u64,
    pub(crate) step: u64,
    pub(crate) mean_return: f64,
    pub(crate) std_return: f64,
    pub(crate) success_rate: Option<f64>,
}

/// Return against env steps, one series per generation, with the version switches.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ReturnsFigure {
    pub(crate) series: Vec<GenerationSeries>,
    pub(crate) switches: Vec<VersionSwitch>,
    pub(crate) eval_points: Vec<EvalPoint>,
}

/// Evaluation return per pinned version.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct EvalFigure {
    pub(crate) points: Vec<EvalPoint>,
}

/// Trained samples per policy lag, in versions.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct LagFigure {
    pub(crate) bins: Vec<(u64, u64)>,
}

/// Where the time went, seconds per part, each a share of the whole it belongs to (the
/// learner's parts of the wall clock, the workers' of their time).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct TimeFigure {
    pub(crate) parts: Vec<(String, f64)>,
    /// Per part, the seconds it is a share of.
    pub(crate) of: Vec<f64>,
    /// The run's wall clock.
    pub(crate) wall: f64,
}

/// Every figure the data allows.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Figures {
    pub(crate) returns: Option<ReturnsFigure>,
    pub(crate) evaluation: Option<EvalFigure>,
    pub(crate) lag: Option<LagFigure>,
    pub(crate) time: Option<TimeFigure>,
}

impl Figures {
    /// The figures `run` has data for.
    pub(crate) fn from_run(run: &RunData) -> Self {
        let eval_points: Vec<EvalPoint> = run
            .evals
            .iter()
            .map(|e| EvalPoint {
                version: e.policy_version,
                step: e.global_step.unwrap_or(0),
                mean_return: e.mean_return,
                std_return: e.std_return,
                success_rate: e.success_rate,
            })
            .collect();
        let bucket = run.bucket();
        let returns = run.ledger.as_ref().map(|data| {
            let curves = strata_ledger::curves(data, &bucket);
            let generations = curves.by_generation();
            let per_series = (POINT_BUDGET / generations.len().max(1)).max(10);
            let series = generations
                .into_iter()
                .map(|(generation, episodes)| GenerationSeries {
                    generation,
                    episodes: episodes.len(),
                    episodes_per_point: episodes.len().div_ceil(per_series).max(1),
                    points: binned(&episodes, per_series),
                    invalidated: binned(
                        &episodes
                            .iter()
                            .copied()
                            .filter(|e| e.invalidated)
                            .collect::<Vec<_>>(),
                        per_series,
                    ),
                })
                .collect();
            ReturnsFigure {
                series,
                switches: curves.switches,
                eval_points: eval_points.clone(),
            }
        });
        let lag = run.ledger.as_ref().map(|data| LagFigure {
            bins: strata_ledger::lag_histogram(data, &bucket),
        });
        let workers = run.config.as_ref().map_or(1, |c| c.runtime.workers);
        let time = run.updates.last().map(|u| {
            let ((learner, wall), (worker, worker_time)) = u.time.accounts(u.wall_seconds, workers);
            let named = |who: &str, parts: Vec<(&str, f64)>, of: f64| {
                parts
                    .into_iter()
                    .map(move |(n, s)| (format!("{who} {n}"), s, of))
                    .collect::<Vec<_>>()
            };
            let all: Vec<_> = named("learner", learner, wall)
                .into_iter()
                .chain(named("workers", worker, worker_time))
                .collect();
            TimeFigure {
                parts: all.iter().map(|(n, s, _)| (n.clone(), *s)).collect(),
                of: all.iter().map(|p| p.2).collect(),
                wall,
            }
        });
        Figures {
            returns,
            evaluation: (!eval_points.is_empty()).then_some(EvalFigure {
                points: eval_points,
            }),
            lag,
            time,
        }
    }
}

/// `[step, return]` of each episode, or of the mean of each run of consecutive episodes
/// when there are more than `budget`.
fn binned(episodes: &[&EpisodePoint], budget: usize) -> Vec<[f64; 2]> {
    let per_point = episodes.len().div_ceil(budget).max(1);
    episodes
        .chunks(per_point)
        .map(|group| {
            let n = group.len() as f64;
            [
                group.iter().map(|e| e.step as f64).sum::<f64>() / n,
                group.iter().map(|e| e.episode_return).sum::<f64>() / n,
            ]
        })
        .collect()
}

/// Registers the bundled font as `sans-serif` (once), for any figure drawn with plotters.
pub(crate) fn register_font() {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // The bytes are a valid font (a test draws with it); failing here only loses text.
        let _ = plotters::style::register_font(FAMILY, FontStyle::Normal, FONT);
    });
}

/// A figure drawn as SVG (returned, for inlining) and written as `<name>.svg` and
/// `<name>.png` into `dir`.
pub(crate) fn render(figure: &dyn Draw, name: &str, dir: &Path) -> Result<String> {
    register_font();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        figure
            .draw_svg(&root)
            .map_err(|e| anyhow!("drawing {name}.svg: {e}"))?;
        root.present()
            .map_err(|e| anyhow!("drawing {name}.svg: {e}"))?;
    }
    let svg_path = dir.join(format!("{name}.svg"));
    std::fs::write(&svg_path, &svg)
        .with_context(|| format!("cannot write {}", svg_path.display()))?;
    let png_path = dir.join(format!("{name}.png"));
    let root = BitMapBackend::new(&png_path, SIZE).into_drawing_area();
    figure
        .draw_png(&root)
        .map_err(|e| anyhow!("drawing {}: {e}", png_path.display()))?;
    root.present()
        .map_err(|e| anyhow!("writing {}: {e}", png_path.display()))?;
    Ok(svg)
}

pub(crate) type DrawResult<DB> =
    Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// Drawing onto either backend (a trait object cannot be generic, so one method each).
pub(crate) trait Draw {
    fn draw_svg(&self, area: &DrawingArea<SVGBackend<'_>, Shift>) -> DrawResult<SVGBackend<'_>>;
    fn draw_png(
        &self,
        area: &DrawingArea<BitMapBackend<'_>, Shift>,
    ) -> DrawResult<BitMapBackend<'_>>;
}

macro_rules! both_backends {
    ($t:ty) => {
        impl Draw for $t {
            fn draw_svg(
                &self,
                area: &DrawingArea<SVGBackend<'_>, Shift>,
            ) -> DrawResult<SVGBackend<'_>> {
                self.draw(area)
            }
            fn draw_png(
                &self,
                area: &DrawingArea<BitMapBackend<'_>, Shift>,
            ) -> DrawResult<BitMapBackend<'_>> {
                self.draw(area)
            }
        }
    };
}

/// For figures defined elsewhere (`compare.rs`).
pub(crate) use both_backends;

both_backends!(ReturnsFigure);
both_backends!(EvalFigure);
both_backends!(LagFigure);
both_backends!(TimeFigure);

/// A colour per generation, cycling through a palette that stays readable on white.
pub(crate) fn generation_colour(generation: u64) -> RGBColor {
    const PALETTE: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(23, 190, 207),
    ];
    PALETTE[(generation % PALETTE.len() as u64) as usize]
}

/// `[lo, hi]` padded by 5%, never empty.
pub(crate) fn padded(lo: f64, hi: f64) -> (f64, f64) {
    if !(lo.is_finite() && hi.is_finite()) {
        return (0.0, 1.0);
    }
    let pad = ((hi - lo) * 0.05).max(1e-6);
    (lo - pad, hi + pad)
}

fn font(size: u32) -> (&'static str, u32) {
    (FAMILY, size)
}

/// Tick labels: whole numbers without decimals, small ones with two.
fn tick(v: &f64) -> String {
    if v.fract().abs() < 1e-9 || v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// The axes every figure shares: a white page, a caption, f64 ranges, tick labels and
/// axis descriptions (an empty description draws none; `y_label_width` 0 hides y labels).
pub(crate) struct Axes<'a> {
    pub(crate) caption: &'a str,
    pub(crate) x: std::ops::Range<f64>,
    pub(crate) y: std::ops::Range<f64>,
    pub(crate) x_desc: &'a str,
    pub(crate) y_desc: &'a str,
    pub(crate) x_labels: usize,
    pub(crate) y_label_width: u32,
}

pub(crate) type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

impl Axes<'_> {
    pub(crate) fn draw<'a, DB: DrawingBackend>(
        &self,
        area: &'a DrawingArea<DB, Shift>,
    ) -> Result<Chart<'a, DB>, DrawingAreaErrorKind<DB::ErrorType>> {
        area.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(area)
            .caption(self.caption, font(16))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(self.y_label_width.max(8))
            .build_cartesian_2d(self.x.clone(), self.y.clone())?;
        let mut mesh = chart.configure_mesh();
        mesh.disable_mesh()
            .x_desc(self.x_desc)
            .x_labels(self.x_labels)
            .x_label_formatter(&tick)
            .y_label_formatter(&tick)
            .label_style(font(12))
            .axis_desc_style(font(13));
        if self.y_label_width == 0 {
            mesh.y_labels(0);
        } else {
            mesh.y_desc(self.y_desc);
        }
        mesh.draw()?;
        Ok(chart)
    }
}

impl ReturnsFigure {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let all = self.series.iter().flat_map(|s| s.points.iter());
        let evals = self
            .eval_points
            .iter()
            .map(|e| [e.step as f64, e.mean_return]);
        let (mut x_max, mut y_lo, mut y_hi) = (1.0f64, f64::INFINITY, f64::NEG_INFINITY);
        for p in all.copied().chain(evals) {
            x_max = x_max.max(p[0]);
            y_lo = y_lo.min(p[1]);
            y_hi = y_hi.max(p[1]);
        }
        for s in &self.switches {
            x_max = x_max.max(s.step as f64);
        }
        let (y_lo, y_hi) = padded(y_lo, y_hi);
        // The legend names only what is drawn: a gateway has no evaluations.
        let crosses = match self.eval_points.is_empty() {
            true => "",
            false => ", x: evaluation",
        };
        let caption = if self.switches.len() <= DENSE_SWITCHES {
            format!("Episode return per generation (lines: version switches{crosses})")
        } else {
            format!(
                "Episode return per generation (top ticks: {} version switches{crosses})",
                self.switches.len()
            )
        };
        let mut chart = Axes {
            caption: &caption,
            x: 0.0..x_max * 1.02,
            y: y_lo..y_hi,
            x_desc: "env steps (ledger order)",
            y_desc: "episode return",
            x_labels: 10,
            y_label_width: 56,
        }
        .draw(area)?;
        // Full-height lines while they leave the curves visible; past that, a rug of ticks
        // along the top edge (thousands of switches would paint the whole plot grey).
        let marker = RGBColor(190, 190, 190);
        let from = if self.switches.len() <= DENSE_SWITCHES {
            y_lo
        } else {
            y_hi - (y_hi - y_lo) * 0.04
        };
        chart.draw_series(self.switches.iter().map(|s| {
            let x = s.step as f64;
            PathElement::new(vec![(x, from), (x, y_hi)], marker.stroke_width(1))
        }))?;
        for s in &self.series {
            let colour = generation_colour(s.generation);
            let points = s.points.iter().map(|p| (p[0], p[1]));
            chart.draw_series(LineSeries::new(points.clone(), colour.stroke_width(1)))?;
            chart.draw_series(points.map(|p| Circle::new(p, 2, colour.filled())))?;
            chart.draw_series(
                s.invalidated
                    .iter()
                    .map(|p| Cross::new((p[0], p[1]), 4, RED.stroke_width(1))),
            )?;
        }
        chart.draw_series(
            self.eval_points
                .iter()
                .map(|e| Cross::new((e.step as f64, e.mean_return), 6, BLACK.stroke_width(2))),
        )?;
        Ok(())
    }
}

impl EvalFigure {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let x_max = self
            .points
            .iter()
            .map(|p| p.version)
            .max()
            .unwrap_or(1)
            .max(1) as f64;
        let lo = self
            .points
            .iter()
            .map(|p| p.mean_return - p.std_return)
            .fold(f64::INFINITY, f64::min);
        let hi = self
            .points
            .iter()
            .map(|p| p.mean_return + p.std_return)
            .fold(f64::NEG_INFINITY, f64::max);
        let (lo, hi) = padded(lo, hi);
        let mut chart = Axes {
            caption: "Evaluation of pinned versions (mean +- std, fixed seeds)",
            x: -0.5..x_max * 1.02 + 0.5,
            y: lo..hi,
            x_desc: "policy version",
            y_desc: "evaluation return",
            x_labels: 10,
            y_label_width: 56,
        }
        .draw(area)?;
        let blue = generation_colour(0);
        chart.draw_series(self.points.iter().map(|p| {
            let x = p.version as f64;
            PathElement::new(
                vec![
                    (x, p.mean_return - p.std_return),
                    (x, p.mean_return + p.std_return),
                ],
                blue.stroke_width(1),
            )
        }))?;
        chart.draw_series(LineSeries::new(
            self.points
                .iter()
                .map(|p| (p.version as f64, p.mean_return)),
            blue.stroke_width(2),
        ))?;
        chart.draw_series(
            self.points
                .iter()
                .map(|p| Circle::new((p.version as f64, p.mean_return), 3, blue.filled())),
        )?;
        Ok(())
    }
}

impl LagFigure {
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let max_lag = self.bins.iter().map(|b| b.0).max().unwrap_or(0);
        let max_count = self.bins.iter().map(|b| b.1).max().unwrap_or(1).max(1);
        let mut chart = Axes {
            caption: "Policy lag of trained samples",
            x: -0.5..max_lag as f64 + 0.5,
            y: 0.0..max_count as f64 * 1.08,
            x_desc: "policy lag (versions)",
            y_desc: "samples",
            x_labels: (max_lag as usize + 1).min(12),
            y_label_width: 72,
        }
        .draw(area)?;
        let colour = generation_colour(0);
        chart.draw_series(self.bins.iter().map(|(lag, count)| {
            let x = *lag as f64;
            Rectangle::new([(x - 0.4, 0.0), (x + 0.4, *count as f64)], colour.filled())
        }))?;
        Ok(())
    }
}

impl TimeFigure {
    /// Each part's share of the whole it belongs to, in percent.
    fn shares(&self) -> Vec<f64> {
        (self.parts.iter().zip(&self.of))
            .map(|(p, of)| 100.0 * p.1 / of.max(1e-9))
            .collect()
    }

    /// The share axis ends at the largest share rounded up to a multiple of ten: the axis
    /// stays within the data (never past 100%), and the labels are drawn inside it.
    fn axis_end(&self) -> f64 {
        let largest = self.shares().into_iter().fold(0.0, f64::max);
        ((largest / 10.0).ceil() * 10.0).clamp(10.0, 100.0)
    }

    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let n = self.parts.len() as f64;
        let end = self.axis_end();
        let caption = format!(
            "Time breakdown: the learner's share of the wall clock ({:.1} s), the workers' of their time",
            self.wall
        );
        let mut chart = Axes {
            caption: &caption,
            x: 0.0..end,
            y: -0.5..n - 0.5,
            x_desc: "share of the time (%)",
            y_desc: "",
            x_labels: 10,
            y_label_width: 0,
        }
        .draw(area)?;
        let colour = generation_colour(1);
        for (i, ((name, seconds), share)) in self.parts.iter().zip(self.shares()).enumerate() {
            // First part on top.
            let y = n - 1.0 - i as f64;
            chart.draw_series(std::iter::once(Rectangle::new(
                [(0.0, y - 0.35), (share, y + 0.35)],
                colour.filled(),
            )))?;
            // A long bar carries its label inside, in white; a short one beside it.
            let (x, style) = if share > end / 2.0 {
                (end * 0.01, font(12).into_font().color(&WHITE))
            } else {
                (share + end * 0.01, font(12).into_font().color(&BLACK))
            };
            chart.draw_series(std::iter::once(Text::new(
                format!("{name} {share:.1}% ({seconds:.2} s)"),
                (x, y + 0.2),
                style,
            )))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figure(seconds: &[f64]) -> TimeFigure {
        let total = seconds.iter().sum::<f64>();
        TimeFigure {
            parts: seconds
                .iter()
                .enumerate()
                .map(|(i, s)| (format!("part {i}"), *s))
                .collect(),
            of: vec![total; seconds.len()],
            wall: total,
        }
    }

    #[test]
    fn the_time_axis_stays_within_the_data() {
        for seconds in [
            vec![1.0],
            vec![0.3, 0.3, 0.4],
            vec![9.0, 1.0, 0.0],
            vec![0.05, 0.05, 0.05, 0.05, 0.8],
            vec![1.0; 9],
            vec![0.0, 0.0],
        ] {
            let f = figure(&seconds);
            let largest = f.shares().into_iter().fold(0.0, f64::max);
            let end = f.axis_end();
            assert!(end <= 100.0, "{seconds:?}: axis to {end}%");
            assert!(
                end >= largest,
                "{seconds:?}: {largest}% past the axis end {end}%"
            );
            assert!(
                end - largest <= 10.0,
                "{seconds:?}: axis to {end}% for {largest}%"
            );
        }
    }
}
