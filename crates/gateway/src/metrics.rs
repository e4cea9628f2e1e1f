//! Prometheus metrics of a running gateway (`GET /metrics`, OpenMetrics text): request
//! latency per route, responses per route and status, and what the gateway, its learner
//! and its ledger have done.

use std::sync::atomic::Ordering;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::gateway::Gateway;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Route {
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteStatus {
    route: String,
    status: u16,
}

fn latency_histogram() -> Histogram {
    // 50 us to ~1.6 s.
    Histogram::new(exponential_buckets(50e-6, 2.0, 16))
}

/// Counters mirrored from the gateway at each scrape.
struct Mirrored {
    acts: Counter,
    reports: Counter,
    duplicates: Counter,
    aborts: Counter,
    holds: Counter,
    segments_dropped: Counter,
    versions_removed: Counter,
    ledger_rows_received: Counter,
    ledger_rows_written: Counter,
    ledger_files_written: Counter,
}

/// The gateway's metrics registry.
pub struct Metrics {
    registry: Registry,
    latency: Family<Route, Histogram, fn() -> Histogram>,
    responses: Family<RouteStatus, Counter>,
    mirrored: Mirrored,
    open_episodes: Gauge,
    stable_version: Gauge,
    latest_version: Gauge,
    canary_candidate: Gauge,
    learner_updates: Gauge,
    ledger_rows_buffered: Gauge,
    journal_bytes: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// An empty registry with every metric declared.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("strata_gateway");
        let latency = Family::<Route, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        registry.register(
            "request_seconds",
            "Time to answer a request, by route",
            latency.clone(),
        );
        let responses = Family::<RouteStatus, Counter>::default();
        registry.register(
            "responses",
            "Responses by route and HTTP status",
            responses.clone(),
        );
        let mirrored = Mirrored {
            acts: Counter::default(),
            reports: Counter::default(),
            duplicates: Counter::default(),
            aborts: Counter::default(),
            holds: Counter::default(),
            segments_dropped: Counter::default(),
            versions_removed: Counter::default(),
            ledger_rows_received: Counter::default(),
            ledger_rows_written: Counter::default(),
            ledger_files_written: Counter::default(),
        };
        for (name, help, c) in [
            ("acts", "Acts answered (retries included)", &mirrored.acts),
            (
                "reports_stored",
                "Reports stored durably",
                &mirrored.reports,
            ),
            (
                "reports_duplicate",
                "Repeated reports answered as duplicates",
                &mirrored.duplicates,
            ),
            (
                "recheck_aborts",
                "Re-checks that aborted an action",
                &mirrored.aborts,
            ),
            (
                "recheck_holds",
                "Re-checks that held an episode for a person",
                &mirrored.holds,
            ),
            (
                "learner_segments_dropped",
                "Segments the learner's full queue could not take",
                &mirrored.segments_dropped,
            ),
            (
                "policy_versions_removed",
                "Policy versions the retention rule removed from disk",
                &mirrored.versions_removed,
            ),
            (
                "ledger_rows_received",
                "Sample rows handed to the ledger",
                &mirrored.ledger_rows_received,
            ),
            (
                "ledger_rows_written",
                "Sample rows in ledger files",
                &mirrored.ledger_rows_written,
            ),
            (
                "ledger_files_written",
                "Ledger files written",
                &mirrored.ledger_files_written,
            ),
        ] {
            registry.register(name, help, c.clone());
        }
        let gauge = |registry: &mut Registry, name: &str, help: &str| {
            let g = Gauge::default();
            registry.register(name, help, g.clone());
            g
        };
        Metrics {
            open_episodes: gauge(&mut registry, "open_episodes", "Episodes not ended"),
            stable_version: gauge(
                &mut registry,
                "stable_version",
                "Version new stable episodes get",
            ),
            latest_version: gauge(&mut registry, "latest_version", "Newest version published"),
            canary_candidate: gauge(
                &mut registry,
                "canary_candidate",
                "Candidate under canary (-1: none)",
            ),
            learner_updates: gauge(&mut registry, "learner_updates", "Learner updates so far"),
            ledger_rows_buffered: gauge(
                &mut registry,
                "ledger_rows_buffered",
                "Sample rows buffered in the ledger writer",
            ),
            journal_bytes: gauge(
                &mut registry,
                "journal_bytes",
                "Size of the episode journal",
            ),
            registry,
            latency,
            responses,
            mirrored,
        }
    }

    /// Records one answered request.
    pub fn observe(&self, route: &str, status: u16, seconds: f64) {
        self.latency
            .get_or_create(&Route {
                route: route.to_string(),
            })
            .observe(seconds);
        self.responses
            .get_or_create(&RouteStatus {
                route: route.to_string(),
                status,
            })
            .inc();
    }

    /// The metrics as OpenMetrics text, with the gateway's state read now.
    pub fn render(&self, g: &Gateway) -> String {
        let mirror = |c: &Counter, now: u64| {
            c.inc_by(now.saturating_sub(c.get()));
        };
        let m = &self.mirrored;
        let counters = &g.counters;
        mirror(&m.acts, counters.acts.load(Ordering::Relaxed));
        mirror(&m.reports, counters.reports.load(Ordering::Relaxed));
        mirror(&m.duplicates, counters.duplicates.load(Ordering::Relaxed));
        mirror(&m.aborts, counters.aborts.load(Ordering::Relaxed));
        mirror(&m.holds, counters.holds.load(Ordering::Relaxed));
        mirror(
            &m.segments_dropped,
            counters.segments_dropped.load(Ordering::Relaxed),
        );
        mirror(
            &m.versions_removed,
            counters.versions_removed.load(Ordering::Relaxed),
        );
        let ledger = g.ledger().stats();
        mirror(&m.ledger_rows_received, ledger.rows_received);
        mirror(&m.ledger_rows_written, ledger.rows_written);
        mirror(&m.ledger_files_written, ledger.files_written);
        self.ledger_rows_buffered.set(ledger.rows_buffered as i64);
        let status = g.status();
        self.open_episodes.set(status.open_episodes as i64);
        self.stable_version.set(status.stable as i64);
        self.latest_version.set(status.latest as i64);
        self.canary_candidate
            .set(status.candidate.map_or(-1, |c| c as i64));
        self.learner_updates.set(status.updates as i64);
        self.journal_bytes.set(g.journal_size() as i64);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }
}
