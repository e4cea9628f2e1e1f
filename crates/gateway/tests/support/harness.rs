//! A gateway on loopback for tests, with clients for its agents and operator, and the
//! request helpers the tests share.

// Each test binary that includes this file uses its own subset.
#![allow(dead_code)]

use serde_json::{json, Value};
use strata_gateway::*;
use strata_ledger::{LedgerData, Storage};

pub struct Harness {
    pub server: Option<Server>,
    pub dir: tempfile::TempDir,
}

impl Harness {
    pub fn start(configure: impl FnOnce(&mut GatewaySettings)) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let mut s = GatewaySettings::new("cartpole", dir.path()).unwrap();
        s.addr = "127.0.0.1:0".parse().unwrap();
        s.release = ReleaseMode::Manual;
        s.cooldown_secs = 0.0;
        s.agent_tokens = 4;
        s.run.ledger.flush_interval_secs = 0.05;
        configure(&mut s);
        Harness {
            server: Some(Server::start(s).unwrap()),
            dir,
        }
    }

    pub fn server(&self) -> &Server {
        self.server.as_ref().unwrap()
    }

    pub fn agent(&self, i: usize) -> Client {
        let tokens = self.server().gateway().tokens().agent_tokens();
        Client::new(&self.server().url(), &tokens[i].1)
    }

    pub fn operator(&self) -> Client {
        Client::new(
            &self.server().url(),
            self.server().gateway().tokens().operator(),
        )
    }

    pub fn ledger(&self) -> LedgerData {
        self.server().gateway().ledger().flush().unwrap();
        let storage = Storage::open(&self.dir.path().join("ledger").display().to_string()).unwrap();
        LedgerData::read(&storage).unwrap()
    }

    pub fn restart(&mut self, configure: impl FnOnce(&mut GatewaySettings)) {
        self.server.take().unwrap().stop().unwrap();
        let mut s = GatewaySettings::new("cartpole", self.dir.path()).unwrap();
        s.addr = "127.0.0.1:0".parse().unwrap();
        s.release = ReleaseMode::Manual;
        s.cooldown_secs = 0.0;
        configure(&mut s);
        self.server = Some(Server::start(s).unwrap());
    }
}

pub fn start(c: &Client) -> EpisodeInfo {
    c.post("/v1/episodes", &json!({})).unwrap()
}

pub fn act(c: &Client, episode: u64, key: &str) -> Result<ActResponse, ClientError> {
    act_with(c, episode, key, json!({}))
}

pub fn act_with(
    c: &Client,
    episode: u64,
    key: &str,
    extra: Value,
) -> Result<ActResponse, ClientError> {
    let mut body = json!({
        "observation": [0.01, -0.02, 0.03, 0.0],
        "env_seq": 1,
        "idempotency_key": key,
    });
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    c.post(&format!("/v1/episodes/{episode}/act"), &body)
}

pub fn report(c: &Client, action: u64) -> Result<ReportResponse, ClientError> {
    report_with(c, action, false)
}

pub fn report_with(
    c: &Client,
    action: u64,
    terminated: bool,
) -> Result<ReportResponse, ClientError> {
    c.post(
        &format!("/v1/actions/{action}/report"),
        &json!({
            "observation_after": [0.02, -0.01, 0.03, 0.01],
            "reward": 1.0,
            "env_seq": 2,
            "terminated": terminated,
        }),
    )
}

pub fn status_of<T: std::fmt::Debug>(r: Result<T, ClientError>) -> (u16, String) {
    match r.unwrap_err() {
        ClientError::Status { status, message } => (status, message),
        e => panic!("expected an HTTP error, got {e}"),
    }
}
