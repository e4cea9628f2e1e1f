//! Gateway settings, with defaults that work out of the box (loopback, a local directory).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use strata_config::RunConfig;

use crate::api::SideEffect;
use crate::error::GatewayError;

/// What the learner does with the versions it trains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReleaseMode {
    /// Each trained version becomes stable after the cooldown.
    Auto,
    /// Each trained version becomes the canary candidate after the cooldown; an operator
    /// promotes.
    Canary,
    /// No learner: versions come only from operators' checkpoints.
    Manual,
}

impl std::str::FromStr for ReleaseMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(ReleaseMode::Auto),
            "canary" => Ok(ReleaseMode::Canary),
            "manual" => Ok(ReleaseMode::Manual),
            other => Err(format!(
                "unknown release mode {other:?} (auto, canary, manual)"
            )),
        }
    }
}

/// How a gateway runs.
#[derive(Clone, Debug)]
pub struct GatewaySettings {
    /// State directory: journal, policies, tokens, and the ledger unless
    /// `run.ledger.location` names another.
    pub dir: PathBuf,
    /// The env, model, PPO and admission settings (a preset by default).
    pub run: RunConfig,
    /// Listen address (loopback by default; port 0 picks one).
    pub addr: SocketAddr,
    /// Seconds between publishing a version and new episodes sampling with it.
    pub cooldown_secs: f64,
    /// Fraction of new episodes that get the candidate.
    pub canary_fraction: f64,
    /// Where trained versions go.
    pub release: ReleaseMode,
    /// Train on the reported steps (off when the versions come from a learner elsewhere).
    pub learner: bool,
    /// A re-check aborts when the target moved farther than this (Euclidean).
    pub recheck_threshold: f32,
    /// Side-effect class per action type (`default` for acts that name none).
    pub side_effects: BTreeMap<String, SideEffect>,
    /// An episode with no request for this long is ended (its agent is presumed gone).
    pub episode_timeout: Duration,
    /// Requests per second per token.
    pub rate_limit: f64,
    /// Requests a token may make at once.
    pub rate_burst: f64,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// Largest request head (request line and headers); larger ones are answered 431.
    pub max_header_bytes: usize,
    /// Connections served at once; more are answered 503 and closed (lowered to fit the
    /// open-files limit, keeping descriptors for the ledger).
    pub max_connections: usize,
    /// A connection that sends no complete request head for this long after opening or
    /// after its last answer is closed: idle keep-alive and half-sent heads alike.
    pub header_read_timeout: Duration,
    /// Agent tokens created with a new tokens file.
    pub agent_tokens: usize,
    /// Issued actions remembered for idempotent retries.
    pub remembered_actions: usize,
    /// Segments waiting for the learner.
    pub learner_queue: usize,
    /// HTTP worker threads.
    pub http_threads: usize,
    /// The journal is rewritten as one snapshot when it grows past this many bytes (and
    /// past four times the last snapshot).
    pub journal_compact_bytes: u64,
    /// Parameters to serve as the stable version at once, before the first request is
    /// answered and before the learner starts from the newest version
    /// (`strata serve --checkpoint`), with the author recorded for them.
    pub serve_first: Option<(Vec<f32>, String)>,
    /// This gateway's number among the gateways feeding one learner (1 to
    /// [`crate::ids::MAX_GATEWAY_ID`]; 0: a gateway alone). Its sample and trajectory ids
    /// are numbered from `gateway_id << 40`, apart from every other gateway's.
    pub gateway_id: u16,
    /// Serve HTTPS with this certificate and key (reloaded by [`crate::Server::reload_tls`]);
    /// none: plain HTTP.
    pub tls: Option<crate::tls::TlsFiles>,
    /// With `tls`: also serve plain HTTP here, a loopback address only (agents and checks
    /// on the gateway's own machine).
    pub plain_addr: Option<SocketAddr>,
}

impl GatewaySettings {
    /// Defaults for `env`'s preset, state in `dir`.
    ///
    /// # Errors
    /// An unknown env.
    pub fn new(env: &str, dir: impl Into<PathBuf>) -> Result<Self, GatewayError> {
        let run = strata_config::preset(env).ok_or_else(|| {
            GatewayError::Config(format!(
                "env: unknown env {env:?} (known: {})",
                strata_env::env_names().join(", ")
            ))
        })?;
        Ok(Self::for_run(run, dir))
    }

    /// Defaults around the run config `run`, state in `dir`. Its reward scaling is turned
    /// off: agents report raw rewards, and scaling (a checkpoint trained with
    /// `env.normalize_reward`) shapes only training in envs.
    pub fn for_run(mut run: RunConfig, dir: impl Into<PathBuf>) -> Self {
        run.env.normalize_reward = false;
        GatewaySettings {
            dir: dir.into(),
            run,
            addr: SocketAddr::from(([127, 0, 0, 1], 7878)),
            cooldown_secs: 1.0,
            canary_fraction: 0.0,
            release: ReleaseMode::Auto,
            learner: true,
            recheck_threshold: 0.05,
            side_effects: BTreeMap::from([
                ("default".to_string(), SideEffect::Unsafe),
                ("observe".to_string(), SideEffect::ReadOnly),
                ("set".to_string(), SideEffect::Idempotent),
                ("submit".to_string(), SideEffect::Queryable),
                ("move".to_string(), SideEffect::Unsafe),
            ]),
            episode_timeout: Duration::from_secs(30),
            rate_limit: 50_000.0,
            rate_burst: 5_000.0,
            max_body_bytes: 64 * 1024,
            max_header_bytes: 32 * 1024,
            max_connections: 512,
            header_read_timeout: Duration::from_secs(10),
            agent_tokens: 64,
            remembered_actions: 100_000,
            learner_queue: 4096,
            http_threads: 2,
            journal_compact_bytes: 64 << 20,
            serve_first: None,
            gateway_id: 0,
            tls: None,
            plain_addr: None,
        }
    }

    /// Checks every value, naming the bad one.
    ///
    /// # Errors
    /// [`GatewayError::Config`].
    pub fn validate(&self) -> Result<(), GatewayError> {
        let bad = |key: &str, why: String| Err(GatewayError::Config(format!("{key}: {why}")));
        if !(self.cooldown_secs.is_finite() && self.cooldown_secs >= 0.0) {
            return bad(
                "cooldown_secs",
                format!("{} is not >= 0", self.cooldown_secs),
            );
        }
        if !(0.0..=1.0).contains(&self.canary_fraction) {
            return bad(
                "canary_fraction",
                format!("{} is not in [0, 1]", self.canary_fraction),
            );
        }
        if !(self.recheck_threshold.is_finite() && self.recheck_threshold > 0.0) {
            return bad(
                "recheck_threshold",
                format!("{} is not > 0", self.recheck_threshold),
            );
        }
        if !(self.rate_limit > 0.0 && self.rate_burst >= 1.0) {
            return bad("rate_limit", "rate must be > 0 and burst >= 1".to_string());
        }
        if !self.side_effects.contains_key("default") {
            return bad("side_effects", "no class for action type `default`".into());
        }
        if self.run.env.normalize_obs || self.run.env.normalize_reward {
            return bad(
                "env.normalize_obs/normalize_reward",
                "the gateway serves policies on raw observations and rewards; turn normalisation off".into(),
            );
        }
        if self.run.admission.rule == strata_ledger::RuleKind::Strict {
            return bad(
                "admission.rule",
                "`strict` admits only on-policy samples; deployed agents are always asynchronous (use `drop` or `decay`)".into(),
            );
        }
        let head_cap = crate::connections::TRANSPORT_HEAD_BYTES;
        if !(1024..head_cap).contains(&self.max_header_bytes) {
            return bad(
                "max_header_bytes",
                format!("{} is not in [1024, {head_cap})", self.max_header_bytes),
            );
        }
        if self.max_connections == 0 {
            return bad("max_connections", "must be at least 1".into());
        }
        if self.header_read_timeout.is_zero() {
            return bad("header_read_timeout", "must be more than 0 s".into());
        }
        if self.http_threads == 0 {
            return bad("http_threads", "must be at least 1".into());
        }
        if let Some(p) = self.plain_addr {
            if self.tls.is_none() {
                return bad("plain_addr", "only beside HTTPS (give the TLS certificate and key); without TLS the gateway serves plain HTTP on its address".into());
            }
            if !p.ip().is_loopback() {
                return bad("plain_addr", format!("{p} is not a loopback address: plain HTTP carries bearer tokens in the clear, so it is served to this machine only"));
            }
        }
        if self.gateway_id > crate::ids::MAX_GATEWAY_ID {
            return bad(
                "gateway_id",
                format!(
                    "{} is not in 0..={}",
                    self.gateway_id,
                    crate::ids::MAX_GATEWAY_ID
                ),
            );
        }
        self.run.validate()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_env_without_a_preset_serves_on_raw_rewards() {
        // The generic preset trains on the env's own rewards, as agents report them.
        let generic = strata_config::preset("gym:NoPresetHere-v0").unwrap();
        assert!(!generic.env.normalize_reward);
        let settings = GatewaySettings::new("gym:NoPresetHere-v0", "unused").unwrap();
        assert_eq!(settings.run, generic);
        settings.validate().unwrap();
        // A checkpoint trained on scaled rewards serves on raw ones too.
        let mut trained = strata_config::preset("pendulum").unwrap();
        trained.env.normalize_reward = true;
        let settings = GatewaySettings::for_run(trained, "unused");
        assert!(!settings.run.env.normalize_reward);
        settings.validate().unwrap();
    }
}
