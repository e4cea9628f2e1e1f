//! The report as one self-contained HTML file: figures inlined as SVG, tables, what was
//! missing, and the plotted data as JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use strata_ledger::{GenerationSummary, MetricsReport, SideMetrics};

use super::figures::Figures;
use super::load::RunData;

/// The id of the `<script type="application/json">` element holding the plotted data.
pub(crate) const DATA_ID: &str = "strata-report-data";

/// Escapes text for HTML content and attributes.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

fn num(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), |v| format!("{v:.2}"))
}

/// Everything the page shows besides the run itself.
pub(crate) struct Page<'a> {
    pub(crate) run: &'a RunData,
    pub(crate) figures: &'a Figures,
    /// `(title, inline SVG)` per drawn figure; `(title, why not)` for the others.
    pub(crate) drawn: Vec<(String, Result<String, String>)>,
    pub(crate) summary: Vec<GenerationSummary>,
    pub(crate) metrics: Option<MetricsReport>,
    /// The best version's episode, or why there is none; `None` when not asked for.
    pub(crate) video: Option<Result<super::Video, String>>,
}

const STYLE: &str = "body{font-family:sans-serif;margin:2em;max-width:1100px;color:#222}\
table{border-collapse:collapse;font-size:13px;margin:1em 0}\
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}\
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}\
.problems{background:#fff4e5;border:1px solid #f0a030;padding:0.5em 1em}\
.figure{margin:1.5em 0}.missing{color:#a00}\
.scroll{max-height:420px;overflow:auto;display:inline-block}";

impl Page<'_> {
    /// The HTML document.
    /// The best version's greedy episode, inline (the page stays one file).
    fn video(&self, h: &mut String) {
        use base64::Engine as _;
        let Some(video) = &self.video else { return };
        h.push_str("<h2>Watch it</h2>\n");
        match video {
            Ok(v) => {
                let _ = writeln!(
                    h,
                    "<p>One greedy episode of the {} (policy v{}, evaluation seed): return \
                     {:.2}, {} frames; also <code>best-episode.gif</code> beside this page.</p>\n\
                     <img alt=\"an episode of policy v{}\" src=\"data:image/gif;base64,{}\">",
                    escape(&v.which),
                    v.version,
                    v.episode_return,
                    v.frames,
                    v.version,
                    base64::engine::general_purpose::STANDARD.encode(&v.gif)
                );
            }
            Err(why) => {
                let _ = writeln!(h, "<p class=\"missing\">No video: {}</p>", escape(why));
            }
        }
    }

    pub(crate) fn render(&self) -> String {
        let mut h = String::new();
        let title = format!("Strata report: {}", self.run.dir.display());
        let _ = write!(
            h,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <title>{}</title><style>{STYLE}</style></head><body>\n<h1>{}</h1>\n",
            escape(&title),
            escape(&title)
        );
        self.overview(&mut h);
        if !self.run.problems.is_empty() {
            h.push_str("<div class=\"problems\"><h2>Missing or damaged</h2><ul>\n");
            for p in &self.run.problems {
                let _ = writeln!(h, "<li>{}</li>", escape(p));
            }
            h.push_str("</ul><p>Everything below is what could be read.</p></div>\n");
        }
        h.push_str("<h2>Figures</h2>\n");
        for (title, svg) in &self.drawn {
            let _ = writeln!(h, "<div class=\"figure\"><h3>{}</h3>", escape(title));
            match svg {
                Ok(svg) => h.push_str(svg),
                Err(why) => {
                    let _ = write!(h, "<p class=\"missing\">Not drawn: {}</p>", escape(why));
                }
            }
            h.push_str("</div>\n");
        }
        self.video(&mut h);
        // A gateway serves and learns; it has no evaluations to show.
        if !self.run.gateway {
            self.evaluations(&mut h);
        }
        self.generations(&mut h);
        let data = serde_json::json!({
            "figures": self.figures,
            "problems": self.run.problems,
        });
        // `</` inside a script element would end it early.
        let json = data.to_string().replace("</", "<\\/");
        let _ = write!(
            h,
            "<script type=\"application/json\" id=\"{DATA_ID}\">{json}</script>\n</body></html>\n"
        );
        h
    }

    fn overview(&self, h: &mut String) {
        let mut rows: Vec<(&str, String)> = Vec::new();
        if let Some(c) = &self.run.config {
            rows.push(("env", c.env.name.clone()));
            let hash = self.run.config_hash.clone();
            rows.push(("config hash", hash.unwrap_or_else(|| c.config_hash())));
            rows.push((
                "collection",
                format!(
                    "{:?}, {} worker(s), {} env(s), max policy lag {}",
                    c.runtime.mode,
                    c.runtime.workers,
                    c.env.num_envs,
                    c.effective_lag()
                )
                .to_lowercase(),
            ));
            rows.push(("seed", c.train.seed.to_string()));
        }
        if let Some(u) = self.run.updates.last() {
            rows.push(("env steps", u.global_step.to_string()));
            rows.push(("updates", u.update.to_string()));
            rows.push(("latest policy version", u.policy_version.to_string()));
            rows.push(("training seconds", format!("{:.2}", u.wall_seconds)));
            rows.push((
                "env steps per second",
                format!("{:.0}", u.env_steps_per_sec),
            ));
            rows.push(("recent mean return", num(u.mean_return)));
            rows.push((
                "worker faults survived (fragments lost, not trained on)",
                u.worker_faults.to_string(),
            ));
        }
        if let Some(m) = &self.metrics {
            rows.push((
                "mean return, all / without invalidated episodes",
                format!("{} / {}", num(m.all.mean_return), num(m.valid.mean_return)),
            ));
        }
        if self.run.gateway {
            rows.push((
                "kind",
                "a gateway's directory: the deployed agents' samples, per generation".into(),
            ));
        }
        rows.push(("ledger", self.run.ledger_location.clone()));
        h.push_str("<h2>Run</h2><table>\n");
        for (k, v) in rows {
            let _ = writeln!(h, "<tr><th>{}</th><td>{}</td></tr>", escape(k), escape(&v));
        }
        h.push_str("</table>\n");
    }

    fn evaluations(&self, h: &mut String) {
        h.push_str("<h2>Evaluations (pinned versions)</h2>\n");
        if self.run.evals.is_empty() {
            h.push_str("<p class=\"missing\">No evaluations recorded (eval.jsonl).</p>\n");
            return;
        }
        h.push_str(
            "<div class=\"scroll\"><table><tr><th>version</th><th>env step</th>\
             <th>episodes</th><th>mean return</th><th>std</th><th>mean length</th>\
             <th>success</th></tr>\n",
        );
        for e in &self.run.evals {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.2}</td>\
                 <td>{:.1}</td><td>{}</td></tr>",
                e.policy_version,
                e.global_step.map_or_else(|| "–".into(), |s| s.to_string()),
                e.episodes,
                e.mean_return,
                e.std_return,
                e.mean_length,
                e.success_rate
                    .map_or_else(|| "–".into(), |s| format!("{:.0}%", 100.0 * s))
            );
        }
        h.push_str("</table></div>\n");
    }

    fn generations(&self, h: &mut String) {
        h.push_str("<h2>Ledger per generation</h2>\n");
        if self.summary.is_empty() {
            h.push_str("<p class=\"missing\">No ledger samples to summarise.</p>\n");
            return;
        }
        let episodes: BTreeMap<u64, (&SideMetrics, &SideMetrics)> = self
            .metrics
            .iter()
            .flat_map(|m| m.per_generation.iter().map(|(g, a, v)| (*g, (a, v))))
            .collect();
        let evals: BTreeMap<u64, f64> = self
            .run
            .evals
            .iter()
            .map(|e| (e.policy_version, e.mean_return))
            .collect();
        h.push_str(
            "<div class=\"scroll\"><table><tr><th>bucket</th><th>generation</th>\
             <th>samples</th><th>trained</th><th>down-weighted</th><th>dropped</th>\
             <th>undecided</th><th>invalidated</th><th>newer policy sampling</th>\
             <th>episodes</th><th>mean return</th><th>valid episodes</th>\
             <th>valid mean return</th><th>eval return</th></tr>\n",
        );
        for s in &self.summary {
            let invalidated = if s.invalidated.is_empty() {
                "0".to_string()
            } else {
                s.invalidated
                    .iter()
                    .map(|(r, n)| format!("{n} {r}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let (all, valid) = episodes
                .get(&s.generation)
                .map_or((None, None), |(a, v)| (Some(*a), Some(*v)));
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
                 <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
                 <td>{}</td><td>{}</td></tr>",
                escape(&s.bucket),
                s.generation,
                s.samples,
                s.trained,
                s.down_weighted,
                s.dropped,
                s.undecided,
                escape(&invalidated),
                s.newer_policy_sampling,
                all.map_or(0, |a| a.episodes),
                num(all.and_then(|a| a.mean_return)),
                valid.map_or(0, |v| v.episodes),
                num(valid.and_then(|v| v.mean_return)),
                num(evals.get(&s.generation).copied()),
            );
        }
        h.push_str("</table></div>\n");
    }
}
