//! A training seen while it runs: `--metrics-addr` serves Prometheus text and the status
//! `strata top` reads; `--monitor` and `strata top` draw in a real terminal (tmux).

#[path = "../../gateway/tests/support/exposition.rs"]
mod exposition;
#[path = "support/optional.rs"]
mod optional;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use exposition::check_exposition;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_strata");

/// A training long enough to be watched; killed when dropped.
struct Training {
    child: Child,
    addr: String,
}

impl Training {
    fn start(run: &Path) -> Training {
        let mut child = Command::new(BIN)
            .args([
                "train",
                "--env",
                "cartpole",
                "--mode",
                "async",
                "--workers",
                "2",
                "--max-steps",
                "100000000",
                "--quiet",
                "--metrics-addr",
                "127.0.0.1:0",
                "--run-dir",
                run.to_str().unwrap(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("metrics: http://") {
                    let addr = rest.split('/').next().unwrap_or_default().to_string();
                    let _ = tx.send(addr);
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the training prints its metrics address");
        Training { child, addr }
    }

    /// `GET path`, the body.
    fn get(&self, path: &str) -> String {
        let mut stream = TcpStream::connect(&self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.addr
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        body.to_string()
    }
}

impl Drop for Training {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn value(samples: &[(String, f64)], series: &str) -> f64 {
    samples
        .iter()
        .find(|(s, _)| s == series)
        .unwrap_or_else(|| panic!("{series} missing: {samples:?}"))
        .1
}

#[test]
fn a_running_training_serves_prometheus_metrics_and_its_status() {
    let tmp = tempfile::tempdir().unwrap();
    let training = Training::start(&tmp.path().join("run"));
    std::thread::sleep(Duration::from_millis(1500));
    let first = check_exposition(&training.get("/metrics"));
    std::thread::sleep(Duration::from_millis(500));
    let text = training.get("/metrics");
    let second = check_exposition(&text);
    let steps = "strata_train_env_steps_total";
    assert!(
        value(&second, steps) > value(&first, steps),
        "training advances"
    );
    assert!(value(&second, "strata_train_env_steps_per_second") > 0.0);
    assert!(value(&second, "strata_train_policy_version") >= 1.0);
    assert_eq!(value(&second, "strata_train_buffer_slots"), 4.0);
    let ready = value(&second, "strata_train_buffer_ready_slots");
    assert!((0.0..=4.0).contains(&ready));
    assert!(value(&second, "strata_train_policy_lag{stat=\"max\"}") <= 1.0);
    for worker in ["worker-0", "worker-1", "learner"] {
        let age = value(
            &second,
            &format!("strata_train_heartbeat_age_seconds{{component=\"{worker}\"}}"),
        );
        assert!((0.0..5.0).contains(&age), "{worker} heartbeat {age}");
        value(
            &second,
            &format!("strata_train_component_policy_version{{component=\"{worker}\"}}"),
        );
    }
    assert!(value(&second, "strata_train_ledger_rows_received_total") > 0.0);
    value(
        &second,
        "strata_train_queue_depth{queue=\"fragments_ready\"}",
    );
    value(
        &second,
        "strata_train_queue_depth{queue=\"ledger_rows_buffered\"}",
    );
    python_reader_check(&text);

    let status: Value = serde_json::from_str(&training.get("/status")).unwrap();
    assert_eq!(status["env"], "cartpole");
    assert_eq!(status["mode"], "async");
    assert_eq!(status["workers"].as_array().unwrap().len(), 2);
    assert!(status["global_step"].as_u64().unwrap() > 0);
}

/// The official Python client's OpenMetrics parser reads the exposition too. Skipped when
/// it is not installed, unless `STRATA_REQUIRE_PROMETHEUS_CLIENT=1` (CI installs it).
fn python_reader_check(text: &str) {
    if !optional::python_module("prometheus_client", "STRATA_REQUIRE_PROMETHEUS_CLIENT") {
        return;
    }
    let script = "import sys\n\
        from prometheus_client.openmetrics.parser import text_string_to_metric_families\n\
        families = list(text_string_to_metric_families(sys.stdin.read()))\n\
        print(sum(len(f.samples) for f in families))\n";
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "prometheus_client rejects the exposition: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let samples: usize = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert_eq!(samples, check_exposition(text).len());
}

/// A detached tmux session running one command at a fixed size; killed when dropped.
struct Tmux {
    session: String,
}

impl Tmux {
    /// None when tmux is missing (an error when `STRATA_REQUIRE_TMUX` is set).
    fn start(name: &str, command: &str) -> Option<Tmux> {
        if !optional::available("tmux", &["-V"], "STRATA_REQUIRE_TMUX", "tmux") {
            return None;
        }
        let session = format!("strata-{name}-{}", std::process::id());
        let status = Command::new("tmux")
            .args(["new-session", "-d", "-s", &session, "-x", "120", "-y", "34"])
            .arg(command)
            .status()
            .unwrap();
        assert!(status.success());
        Some(Tmux { session })
    }

    fn capture(&self) -> String {
        let o = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &self.session])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Waits until the screen shows every needle; the last screen either way.
    fn wait_for(&self, needles: &[&str]) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let screen = self.capture();
            if needles.iter().all(|n| screen.contains(n)) || Instant::now() > deadline {
                return screen;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn send(&self, keys: &str) {
        let _ = Command::new("tmux")
            .args(["send-keys", "-t", &self.session, keys])
            .status();
    }

    fn alive(&self) -> bool {
        Command::new("tmux")
            .args(["has-session", "-t", &self.session])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn wait_gone(&self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.alive() {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        true
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.session])
            .stderr(Stdio::null())
            .status();
    }
}

const MONITOR_SHOWS: [&str; 8] = [
    "strata · cartpole · async",
    "steps/s",
    "slots ready",
    "worker-0",
    "worker-1",
    "learner",
    "heartbeat",
    "rows written",
];

fn assert_shows(screen: &str, needles: &[&str]) {
    for n in needles {
        assert!(screen.contains(n), "the monitor lacks `{n}`:\n{screen}");
    }
}

#[test]
fn the_monitor_renders_in_a_terminal_and_q_stops_the_training() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let command = format!(
        "{BIN} train --env cartpole --mode async --workers 2 --max-steps 100000000 \
         --monitor --run-dir {}",
        run.display()
    );
    let Some(tmux) = Tmux::start("monitor", &command) else {
        return;
    };
    let screen = tmux.wait_for(&MONITOR_SHOWS);
    assert_shows(&screen, &MONITOR_SHOWS);
    assert!(screen.contains("q: stop training"), "{screen}");
    // Log lines go to the run's train.log, not over the screen.
    assert!(!screen.contains("INFO"), "{screen}");
    tmux.send("q");
    assert!(tmux.wait_gone(), "q stops the training");
    assert!(
        run.join("checkpoint/meta.json").exists(),
        "an orderly stop checkpoints"
    );
    assert!(run.join("train.log").exists());
}

#[test]
fn strata_top_shows_a_training_running_elsewhere() {
    let tmp = tempfile::tempdir().unwrap();
    let training = Training::start(&tmp.path().join("run"));
    let command = format!("{BIN} top --addr {}", training.addr);
    let Some(tmux) = Tmux::start("top", &command) else {
        return;
    };
    let screen = tmux.wait_for(&MONITOR_SHOWS);
    assert_shows(&screen, &MONITOR_SHOWS);
    tmux.send("q");
    assert!(tmux.wait_gone(), "q quits strata top");
}
