//! The HTTP endpoint of a running training (`strata train --metrics-addr`): `GET /metrics`
//! in Prometheus text format and `GET /status`, the same snapshot as JSON (what
//! `strata top` reads). A snapshot is taken per request; the training pays nothing between
//! scrapes.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::thread::JoinHandle;

use anyhow::{Context, Result};
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use strata_runtime::{LiveHandle, LiveSnapshot};
use tokio::sync::oneshot;

type FloatGauge = Gauge<f64, AtomicU64>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Component {
    component: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ComponentState {
    component: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Stat {
    stat: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Queue {
    queue: String,
}

fn gauge(registry: &mut Registry, name: &str, help: &str, value: f64) {
    let g = FloatGauge::default();
    g.set(value);
    registry.register(name, help, g);
}

fn counter(registry: &mut Registry, name: &str, help: &str, value: u64) {
    let c: Counter = Counter::default();
    c.inc_by(value);
    registry.register(name, help, c);
}

/// The snapshot in Prometheus (OpenMetrics) text format.
pub(crate) fn exposition(s: &LiveSnapshot) -> String {
    let mut r = Registry::with_prefix("strata_train");
    counter(&mut r, "env_steps", "Env steps trained on", s.global_step);
    gauge(
        &mut r,
        "env_steps_per_second",
        "Env steps per second over the last few seconds",
        s.env_steps_per_sec,
    );
    counter(&mut r, "updates", "PPO updates done", s.updates);
    gauge(
        &mut r,
        "policy_version",
        "Latest published policy version",
        s.policy_version as f64,
    );
    gauge(
        &mut r,
        "uptime_seconds",
        "Seconds since the trainer started",
        s.uptime_seconds,
    );
    if let Some(m) = s.mean_return {
        gauge(&mut r, "mean_return", "Mean return of recent episodes", m);
    }
    if let Some((version, ret)) = s.last_eval {
        gauge(
            &mut r,
            "eval_mean_return",
            "Mean return of the latest evaluation",
            ret,
        );
        gauge(
            &mut r,
            "eval_policy_version",
            "Policy version of the latest evaluation",
            version as f64,
        );
    }
    let lag = Family::<Stat, FloatGauge>::default();
    for (stat, v) in [
        ("min", s.lag.0 as f64),
        ("mean", s.lag.1),
        ("max", s.lag.2 as f64),
    ] {
        lag.get_or_create(&Stat { stat: stat.into() }).set(v);
    }
    r.register(
        "policy_lag",
        "Policy lag of the last batch, in versions",
        lag,
    );
    gauge(
        &mut r,
        "max_policy_lag",
        "Largest policy lag admitted",
        s.max_policy_lag as f64,
    );
    gauge(
        &mut r,
        "buffer_slots",
        "Experience buffer slots",
        s.buffer.slots as f64,
    );
    gauge(
        &mut r,
        "buffer_ready_slots",
        "Slots holding a fragment the learner has not consumed",
        s.buffer.ready as f64,
    );
    gauge(
        &mut r,
        "buffer_writing_slots",
        "Slots a worker is writing now",
        s.buffer.writing as f64,
    );
    let queues = Family::<Queue, FloatGauge>::default();
    let mut depths = vec![
        ("fragments_ready", s.buffer.ready as f64),
        ("fragments_early", s.early_fragments as f64),
    ];
    if let Some(l) = &s.ledger {
        depths.push(("ledger_rows_buffered", l.rows_buffered as f64));
    }
    for (queue, depth) in depths {
        queues
            .get_or_create(&Queue {
                queue: queue.into(),
            })
            .set(depth);
    }
    r.register("queue_depth", "Items waiting in each queue", queues);
    let age = Family::<Component, FloatGauge>::default();
    let version = Family::<Component, FloatGauge>::default();
    let restarts = Family::<Component, FloatGauge>::default();
    let state = Family::<ComponentState, FloatGauge>::default();
    for c in s.workers.iter().chain(&s.others) {
        let label = Component {
            component: c.name.clone(),
        };
        age.get_or_create(&label).set(c.heartbeat_age_seconds);
        if let Some(v) = c.policy_version {
            version.get_or_create(&label).set(v as f64);
        }
        restarts.get_or_create(&label).set(f64::from(c.restarts));
        state
            .get_or_create(&ComponentState {
                component: c.name.clone(),
                state: c.state.clone(),
            })
            .set(1.0);
    }
    r.register(
        "heartbeat_age_seconds",
        "Seconds since each worker's (and the learner's) last heartbeat",
        age,
    );
    r.register(
        "component_policy_version",
        "Policy version each worker samples with",
        version,
    );
    r.register("component_restarts", "Restarts of each worker", restarts);
    r.register(
        "component_state",
        "What each component is doing (1 for its current state)",
        state,
    );
    counter(
        &mut r,
        "invalid_fragments",
        "Fragments lost to failures or restarts",
        s.invalid_fragments as u64,
    );
    counter(
        &mut r,
        "dropped_samples",
        "Samples admission dropped",
        s.dropped_samples,
    );
    if let Some(l) = &s.ledger {
        counter(
            &mut r,
            "ledger_rows_received",
            "Rows handed to the ledger",
            l.rows_received,
        );
        counter(
            &mut r,
            "ledger_rows_written",
            "Ledger rows in files",
            l.rows_written,
        );
        counter(
            &mut r,
            "ledger_files_written",
            "Ledger files written",
            l.files_written,
        );
        counter(
            &mut r,
            "ledger_bytes_written",
            "Ledger bytes written",
            l.bytes_written,
        );
    }
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &r)
        .expect("writing to a String cannot fail");
    out
}

async fn metrics(State(live): State<LiveHandle>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        exposition(&live.snapshot()),
    )
}

async fn status(State(live): State<LiveHandle>) -> impl IntoResponse {
    let body = serde_json::to_string(&live.snapshot()).expect("a snapshot serialises");
    ([(header::CONTENT_TYPE, "application/json")], body)
}

/// The endpoint, served from its own thread until dropped.
pub(crate) struct LiveServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl LiveServer {
    /// Binds `addr` (port 0: any free port) and serves `live`.
    ///
    /// # Errors
    /// When the address cannot be bound.
    pub(crate) fn start(addr: &str, live: LiveHandle) -> Result<Self> {
        let listener = std::net::TcpListener::bind(addr)
            .with_context(|| format!("cannot listen on {addr}"))?;
        listener.set_nonblocking(true)?;
        let bound = listener.local_addr()?;
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let app = Router::new()
            .route("/metrics", get(metrics))
            .route("/status", get(status))
            .with_state(live);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .context("cannot start the metrics endpoint's runtime")?;
        let thread = std::thread::Builder::new()
            .name("strata-metrics".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                        return;
                    };
                    let shutdown = async {
                        let _ = stop_rx.await;
                    };
                    if let Err(e) = axum::serve(listener, app)
                        .with_graceful_shutdown(shutdown)
                        .await
                    {
                        tracing::warn!(component = "metrics", error = %e, "metrics endpoint stopped");
                    }
                });
            })?;
        Ok(LiveServer {
            addr: bound,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// The bound address.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for LiveServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            // A scraper holding a connection open must not hold up the exit for long.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
            while !t.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}
