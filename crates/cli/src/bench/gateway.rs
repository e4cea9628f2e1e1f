//! `strata bench gateway`: the gateway on loopback, in two phases. Acts: act threads
//! send acts at a fixed rate (open loop), each on an episode started beforehand, so acts
//! alone are measured. Reports: reporter threads report every action issued (each durable
//! before it is answered), as fast as they are answered.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::json;
use strata_gateway::{
    ActResponse, Client, EpisodeInfo, GatewaySettings, ReleaseMode, ReportResponse, Server,
};

/// The gateway's figures.
#[derive(Serialize, Debug, Default)]
pub struct GatewayReport {
    /// Acts per second asked for.
    pub target_acts_per_sec: f64,
    /// Acts per second answered.
    pub acts_per_sec: f64,
    /// Act round trip, median, ms.
    pub act_p50_ms: f64,
    /// Act round trip, 99th percentile, ms.
    pub act_p99_ms: f64,
    /// Act round trip, worst, ms.
    pub act_max_ms: f64,
    /// Acts not sent (no episode left) or failed; 0 in a sound run.
    pub acts_skipped: u64,
    /// Reports acknowledged (durable) per second.
    pub reports_per_sec: f64,
    /// Report round trip, median, ms.
    pub report_p50_ms: f64,
    /// Report round trip, 99th percentile, ms.
    pub report_p99_ms: f64,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Runs the gateway benchmark at `rate` acts per second for `seconds`.
pub fn run(rate: f64, seconds: f64) -> Result<GatewayReport> {
    let dir = tempfile::tempdir()?;
    let mut settings = GatewaySettings::new("cartpole", dir.path())?;
    settings.addr = "127.0.0.1:0".parse()?;
    settings.release = ReleaseMode::Manual;
    settings.rate_limit = 1e9;
    settings.rate_burst = 1e9;
    // Episodes are started before the timed phase; none may time out meanwhile.
    settings.episode_timeout = Duration::from_secs(3600);
    let server = Server::start(settings).context("starting the gateway")?;
    let token = server.gateway().tokens().agent_tokens()[0].1.clone();
    let client = Client::new(&server.url(), &token);
    const ACT_THREADS: usize = 4;
    const REPORTERS: usize = 64;
    let episodes = (rate * seconds * 1.05) as usize + 64;
    let ids: Vec<u64> = std::thread::scope(|s| {
        let parts: Vec<_> = (0..ACT_THREADS)
            .map(|_| {
                let c = client.clone();
                s.spawn(move || -> Result<Vec<u64>> {
                    (0..episodes.div_ceil(ACT_THREADS))
                        .map(|_| {
                            let e: EpisodeInfo = c
                                .post("/v1/episodes", &json!({}))
                                .map_err(anyhow::Error::msg)?;
                            Ok(e.episode_id)
                        })
                        .collect()
                })
            })
            .collect();
        parts
            .into_iter()
            .map(|p| p.join().expect("starter"))
            .collect::<Result<Vec<Vec<u64>>>>()
    })?
    .concat();
    let next = AtomicU64::new(0);
    let skipped = AtomicU64::new(0);
    let started = Instant::now();
    let end = started + Duration::from_secs_f64(seconds);
    let (mut acts, actions): (Vec<f64>, Vec<u64>) = std::thread::scope(|s| {
        let threads: Vec<_> = (0..ACT_THREADS)
            .map(|i| {
                let period = Duration::from_secs_f64(ACT_THREADS as f64 / rate);
                let first = started + period.mul_f64(i as f64 / ACT_THREADS as f64);
                let (c, ids, next, skipped) = (client.clone(), &ids, &next, &skipped);
                s.spawn(move || actor(&c, ids, next, skipped, first, period, end))
            })
            .collect();
        let mut lat = Vec::new();
        let mut actions = Vec::new();
        for t in threads {
            let (l, a) = t.join().expect("act thread");
            lat.extend(l);
            actions.extend(a);
        }
        (lat, actions)
    });
    let act_seconds = started.elapsed().as_secs_f64();
    let queue = Mutex::new(actions.into_iter());
    let report_start = Instant::now();
    let mut reports: Vec<f64> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..REPORTERS)
            .map(|_| {
                let (c, queue) = (client.clone(), &queue);
                s.spawn(move || reporter(&c, queue))
            })
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().expect("reporter"))
            .collect()
    });
    let report_seconds = report_start.elapsed().as_secs_f64();
    acts.sort_by(f64::total_cmp);
    reports.sort_by(f64::total_cmp);
    server.stop()?;
    Ok(GatewayReport {
        target_acts_per_sec: rate,
        acts_per_sec: acts.len() as f64 / act_seconds,
        act_p50_ms: percentile(&acts, 0.5),
        act_p99_ms: percentile(&acts, 0.99),
        act_max_ms: acts.last().copied().unwrap_or(f64::NAN),
        acts_skipped: skipped.load(Ordering::Relaxed),
        reports_per_sec: reports.len() as f64 / report_seconds,
        report_p50_ms: percentile(&reports, 0.5),
        report_p99_ms: percentile(&reports, 0.99),
    })
}

/// Sends acts on schedule, each on the next unused episode; returns latencies (ms) and
/// the action ids.
fn actor(
    client: &Client,
    episodes: &[u64],
    next: &AtomicU64,
    skipped: &AtomicU64,
    first: Instant,
    period: Duration,
    end: Instant,
) -> (Vec<f64>, Vec<u64>) {
    let (mut latencies, mut actions) = (Vec::new(), Vec::new());
    let mut at = first;
    while at < end {
        let now = Instant::now();
        if now < at {
            std::thread::sleep(at - now);
        }
        at += period;
        let Some(&episode) = episodes.get(next.fetch_add(1, Ordering::Relaxed) as usize) else {
            skipped.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let body = json!({
            "observation": [0.01, 0.02, -0.01, 0.0],
            "env_seq": 0,
            "idempotency_key": format!("{episode}-0"),
        });
        let t = Instant::now();
        match client.post::<_, ActResponse>(&format!("/v1/episodes/{episode}/act"), &body) {
            Ok(a) => {
                latencies.push(t.elapsed().as_secs_f64() * 1e3);
                actions.push(a.action_id);
            }
            Err(e) => {
                skipped.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(error = %e, "act failed");
            }
        }
    }
    (latencies, actions)
}

/// Reports actions from `queue` until it is empty; returns latencies (ms).
fn reporter(client: &Client, queue: &Mutex<std::vec::IntoIter<u64>>) -> Vec<f64> {
    let mut latencies = Vec::new();
    let body = json!({
        "observation_after": [0.01, 0.02, -0.01, 0.0],
        "reward": 1.0,
        "env_seq": 1,
    });
    loop {
        let Some(action) = queue.lock().next() else {
            return latencies;
        };
        let t = Instant::now();
        match client.post::<_, ReportResponse>(&format!("/v1/actions/{action}/report"), &body) {
            Ok(_) => latencies.push(t.elapsed().as_secs_f64() * 1e3),
            Err(e) => tracing::debug!(error = %e, "report failed"),
        }
    }
}
