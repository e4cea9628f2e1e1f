//! The live terminal monitor (ratatui): `strata train --monitor` draws the training it
//! runs; `strata top` draws one running elsewhere, from its `/status` endpoint. Both draw
//! a [`LiveSnapshot`]: progress, throughput, versions, policy lag, the buffer's slots, each
//! worker's state, version and heartbeat, and the ledger.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Gauge, Paragraph, Row, Table};
use ratatui::Frame;
use strata_runtime::{ComponentView, LiveSnapshot};

/// How often the screen is redrawn.
const REFRESH: Duration = Duration::from_millis(250);

fn thousands(n: u64) -> String {
    strata_runtime::group_digits(n)
}

/// A framed bar filled to `ratio` (clamped to [0, 1]) with `label` on it.
fn gauge(title: &str, colour: Color, ratio: f64, label: String) -> Gauge<'_> {
    Gauge::default()
        .block(Block::default().borders(Borders::ALL).title(title))
        .gauge_style(Style::default().fg(colour))
        .ratio(ratio.clamp(0.0, 1.0))
        .label(label)
}

/// Draws one snapshot onto the whole frame.
pub(crate) fn draw(frame: &mut Frame, s: &LiveSnapshot, footer: &str) {
    let [header, progress, buffer, workers, ledger, help] = Layout::vertical([
        Constraint::Length(4),
        Constraint::Length(3),
        Constraint::Length(3),
        Constraint::Min(4),
        Constraint::Length(3),
        Constraint::Length(1),
    ])
    .areas(frame.area());

    let state = if s.finished { "finished" } else { "running" };
    let eval = s
        .last_eval
        .map_or_else(|| "–".into(), |(v, r)| format!("{r:.1} (v{v})"));
    let lines = vec![
        Line::from(format!(
            "strata · {} · {} · config {} · {} · up {:.1} s",
            s.env, s.mode, s.config_hash, state, s.uptime_seconds
        ))
        .style(Style::default().add_modifier(Modifier::BOLD)),
        Line::from(format!(
            "version {} · updates {} · {:.0} steps/s · mean return {} · eval {}",
            s.policy_version,
            s.updates,
            s.env_steps_per_sec,
            s.mean_return.map_or_else(|| "–".into(), |m| format!("{m:.1}")),
            eval
        )),
        Line::from(format!(
            "policy lag min/mean/max {}/{:.2}/{} (admitted up to {}) · dropped samples {} · lost fragments {}",
            s.lag.0, s.lag.1, s.lag.2, s.max_policy_lag, s.dropped_samples, s.invalid_fragments
        )),
    ];
    frame.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::BOTTOM)),
        header,
    );

    let done = if s.total_steps > 0 {
        (s.global_step as f64 / s.total_steps as f64).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let steps = format!(
        "{} / {} ({:.0}%)",
        thousands(s.global_step),
        thousands(s.total_steps),
        100.0 * done
    );
    frame.render_widget(gauge("steps", Color::Green, done, steps), progress);
    let fill = if s.buffer.slots > 0 {
        s.buffer.ready as f64 / s.buffer.slots as f64
    } else {
        0.0
    };
    let slots = format!(
        "{} of {} slots ready · {} being written · {} early",
        s.buffer.ready, s.buffer.slots, s.buffer.writing, s.early_fragments
    );
    frame.render_widget(gauge("buffer", Color::Cyan, fill, slots), buffer);

    let row = |c: &ComponentView| {
        let behind = c.policy_version.map_or_else(
            || "–".into(),
            |v| s.policy_version.saturating_sub(v).to_string(),
        );
        let style = if c.heartbeat_age_seconds > 5.0 && !s.finished {
            Style::default().fg(Color::Red)
        } else {
            Style::default()
        };
        Row::new(vec![
            c.name.clone(),
            c.state.clone(),
            c.policy_version
                .map_or_else(|| "–".into(), |v| v.to_string()),
            behind,
            format!("{:.2} s", c.heartbeat_age_seconds),
            c.restarts.to_string(),
        ])
        .style(style)
    };
    let rows: Vec<Row> = s.workers.iter().chain(&s.others).map(row).collect();
    frame.render_widget(
        Table::new(
            rows,
            [
                Constraint::Length(12),
                Constraint::Length(32),
                Constraint::Length(9),
                Constraint::Length(8),
                Constraint::Length(11),
                Constraint::Length(9),
            ],
        )
        .header(
            Row::new([
                "component",
                "state",
                "version",
                "behind",
                "heartbeat",
                "restarts",
            ])
            .style(Style::default().add_modifier(Modifier::BOLD)),
        )
        .block(Block::default().borders(Borders::ALL).title("workers")),
        workers,
    );

    let ledger_line = s.ledger.as_ref().map_or_else(
        || "no ledger".to_string(),
        |l| {
            format!(
                "{} rows written · {} buffered · {} files · {:.1} MB",
                thousands(l.rows_written),
                thousands(l.rows_buffered),
                l.files_written,
                l.bytes_written as f64 / 1e6
            )
        },
    );
    frame.render_widget(
        Paragraph::new(ledger_line).block(Block::default().borders(Borders::ALL).title("ledger")),
        ledger,
    );
    frame.render_widget(
        Paragraph::new(footer).style(Style::default().fg(Color::DarkGray)),
        help,
    );
}

/// Whether a key asks to quit (`q`, Esc, Ctrl-C: raw mode turns Ctrl-C into a key).
fn quit_key(timeout: Duration) -> Result<bool> {
    if !event::poll(timeout)? {
        return Ok(false);
    }
    Ok(match event::read()? {
        Event::Key(k) if k.kind == KeyEventKind::Press => {
            matches!(k.code, KeyCode::Char('q') | KeyCode::Esc)
                || (k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL))
        }
        _ => false,
    })
}

/// Draws `snapshot()` every [`REFRESH`] until `done` is raised (then once more) or the
/// user quits, which raises `quit`. The terminal is restored however it ends.
pub(crate) fn run_monitor(
    snapshot: &dyn Fn() -> Result<LiveSnapshot>,
    done: &AtomicBool,
    quit: &AtomicBool,
    footer: &str,
) -> Result<()> {
    let mut terminal = ratatui::try_init().context("cannot start the terminal monitor")?;
    let result = (|| -> Result<()> {
        loop {
            let finished = done.load(Ordering::Relaxed);
            match snapshot() {
                Ok(s) => {
                    terminal.draw(|f| draw(f, &s, footer))?;
                }
                Err(e) => {
                    let text = format!("{e:#}");
                    terminal.draw(|f| {
                        f.render_widget(Paragraph::new(format!("{text}\n\n{footer}")), f.area());
                    })?;
                }
            }
            if finished {
                return Ok(());
            }
            let next = Instant::now() + REFRESH;
            while Instant::now() < next {
                if quit_key(next.saturating_duration_since(Instant::now()))? {
                    quit.store(true, Ordering::Relaxed);
                    return Ok(());
                }
            }
        }
    })();
    ratatui::restore();
    result
}

/// Arguments of `strata top`.
#[derive(Args, Debug)]
pub(crate) struct TopArgs {
    /// The training's metrics endpoint (`strata train --metrics-addr`).
    #[arg(long, default_value = "127.0.0.1:9100")]
    addr: String,
}

/// `strata top`: the monitor for a training running elsewhere.
///
/// # Errors
/// When the terminal cannot be set up.
pub(crate) fn top(args: TopArgs) -> Result<()> {
    let url = format!("http://{}/status", args.addr);
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(2))
        .build();
    let fetch = || -> Result<LiveSnapshot> {
        let body = agent
            .get(&url)
            .call()
            .with_context(|| format!("no training answers at {url} (start one with `strata train --metrics-addr {}`)", args.addr))?
            .into_string()?;
        serde_json::from_str(&body)
            .with_context(|| format!("{url} did not answer a training status"))
    };
    let never = Arc::new(AtomicBool::new(false));
    let quit = AtomicBool::new(false);
    run_monitor(&fetch, &never, &quit, "q: quit")
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;
    use strata_runtime::{BufferView, LedgerView};

    #[test]
    fn a_snapshot_renders_workers_buffer_and_versions() {
        let snap = LiveSnapshot {
            env: "cartpole".into(),
            mode: "async".into(),
            config_hash: "f4786d1254b78dc4".into(),
            global_step: 51_200,
            total_steps: 102_400,
            updates: 200,
            policy_version: 200,
            env_steps_per_sec: 61_000.0,
            mean_return: Some(321.5),
            last_eval: Some((180, 500.0)),
            lag: (0, 0.75, 1),
            max_policy_lag: 1,
            buffer: BufferView {
                slots: 4,
                ready: 2,
                writing: 1,
            },
            workers: vec![
                ComponentView {
                    name: "worker-0".into(),
                    state: "stepping envs".into(),
                    heartbeat_age_seconds: 0.01,
                    policy_version: Some(199),
                    restarts: 0,
                },
                ComponentView {
                    name: "worker-1".into(),
                    state: "waiting for a free buffer slot".into(),
                    heartbeat_age_seconds: 0.02,
                    policy_version: Some(200),
                    restarts: 2,
                },
            ],
            ledger: Some(LedgerView {
                rows_written: 49_152,
                ..LedgerView::default()
            }),
            ..LiveSnapshot::default()
        };
        let mut terminal = Terminal::new(TestBackend::new(110, 24)).unwrap();
        terminal.draw(|f| draw(f, &snap, "q: quit")).unwrap();
        let screen: String = terminal
            .backend()
            .buffer()
            .content()
            .chunks(110)
            .map(|row| row.iter().map(|c| c.symbol()).collect::<String>() + "\n")
            .collect();
        for needle in [
            "cartpole",
            "version 200",
            "61000 steps/s",
            "51,200 / 102,400 (50%)",
            "2 of 4 slots ready",
            "worker-1",
            "waiting for a free buffer slot",
            "eval 500.0 (v180)",
            "49,152 rows written",
            "q: quit",
        ] {
            assert!(
                screen.contains(needle),
                "screen lacks `{needle}`:\n{screen}"
            );
        }
        // worker-0 is one version behind the learner.
        let line = screen.lines().find(|l| l.contains("worker-0")).unwrap();
        assert!(line.contains("199") && line.contains(" 1 "), "{line}");
    }
}
