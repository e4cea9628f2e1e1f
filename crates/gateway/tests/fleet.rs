//! The simulated fleet against a real gateway: it trains CartPole through acts and
//! reports, and the fleet's tasks trigger re-check aborts and human holds.

#[path = "support/harness.rs"]
mod harness;
use harness::*;

use std::time::Duration;

use strata_gateway::*;
use strata_ledger::{LedgerData, Storage};

#[test]
fn the_fleet_trains_cartpole_with_latency_to_a_rising_return() {
    let h = Harness::start(|s| {
        s.release = ReleaseMode::Auto;
        s.cooldown_secs = 0.0;
        s.agent_tokens = 8;
    });
    let mut fleet = FleetSettings::new(
        &h.server().url(),
        h.server().gateway().tokens().clone(),
        8,
        "cartpole",
    );
    fleet.steps = 25_000;
    fleet.max_duration = Duration::from_secs(240);
    let report = run_fleet(&fleet).unwrap();
    assert!(report.steps >= 25_000, "{report:?}");
    assert!(report.stored > 20_000 && report.episodes > 50, "{report:?}");
    assert!(
        report.duplicates > 0 && report.aborts > 0 && report.holds > 0,
        "the faults happened: {report:?}"
    );
    let data = h.ledger();
    let m = strata_ledger::metrics(&data);
    let gens: Vec<(u64, f64, u64)> = m
        .per_generation
        .iter()
        .filter(|(_, all, _)| all.episodes > 0)
        .map(|(g, all, _)| (*g, all.sum_return, all.episodes))
        .collect();
    let mean = |part: &[(u64, f64, u64)]| {
        part.iter().map(|x| x.1).sum::<f64>() / part.iter().map(|x| x.2).sum::<u64>().max(1) as f64
    };
    let n = gens.len();
    assert!(n >= 6, "{gens:?}");
    let (early, late) = (mean(&gens[..n / 4]), mean(&gens[n * 3 / 4..]));
    assert!(
        late > 2.0 * early && late > 60.0,
        "mean return per generation: early {early:.1}, late {late:.1}: {gens:?}"
    );
    assert!(h.server().gateway().status().updates >= 20);
}

/// The fleet on one of the seeds' tasks; returns the ledger's invalidation counts by reason.
fn fleet_invalidations(env: &str) -> std::collections::BTreeMap<String, u64> {
    let dir = tempfile::tempdir().unwrap();
    let mut s = GatewaySettings::new(env, dir.path()).unwrap();
    s.addr = "127.0.0.1:0".parse().unwrap();
    s.agent_tokens = 4;
    let server = Server::start(s).unwrap();
    let mut fleet = FleetSettings::new(&server.url(), server.gateway().tokens().clone(), 4, env);
    fleet.steps = 3_000;
    fleet.lost_report_prob = 0.0;
    fleet.timeout_prob = 0.0;
    fleet.crash_prob = 0.0;
    let report = run_fleet(&fleet).unwrap();
    server.gateway().ledger().flush().unwrap();
    let storage = Storage::open(&dir.path().join("ledger").display().to_string()).unwrap();
    let mut by_reason = std::collections::BTreeMap::new();
    for g in strata_ledger::summary(&LedgerData::read(&storage).unwrap()) {
        for (k, v) in g.invalidated {
            *by_reason.entry(k).or_default() += v;
        }
    }
    by_reason.insert("aborts".into(), report.aborts);
    by_reason.insert("holds".into(), report.holds);
    by_reason
}

#[test]
fn the_moving_arm_target_triggers_recheck_aborts_in_the_fleet() {
    let seen = fleet_invalidations("arm-reach-moving");
    assert!(seen["aborts"] > 0, "{seen:?}");
    assert!(
        seen.get("observation_stale").copied().unwrap_or(0) > 0,
        "{seen:?}"
    );
    assert_eq!(seen["holds"], 0, "{seen:?}");
}

#[test]
fn ui_popups_trigger_human_holds_in_the_fleet() {
    let seen = fleet_invalidations("ui-form");
    assert!(seen["holds"] > 0, "{seen:?}");
    assert!(
        seen.get("human_interrupt").copied().unwrap_or(0) > 0,
        "{seen:?}"
    );
    assert_eq!(seen["aborts"], 0, "{seen:?}");
}

#[test]
fn fleets_of_several_gateways_add_up_and_pool_returns_per_version() {
    let mut a = strata_gateway::FleetReport {
        steps: 10,
        stored: 9,
        seconds: 2.0,
        ..Default::default()
    };
    a.returns_by_version.insert(0, (2, 10.0));
    let mut b = strata_gateway::FleetReport {
        steps: 5,
        stored: 5,
        seconds: 3.0,
        ..Default::default()
    };
    b.returns_by_version.insert(0, (1, 40.0));
    b.returns_by_version.insert(1, (4, 50.0));
    a.merge(&b);
    assert_eq!((a.steps, a.stored, a.seconds), (15, 14, 3.0));
    assert_eq!(a.returns_by_version[&0], (3, 20.0));
    assert_eq!(a.returns_by_version[&1], (4, 50.0));
}
