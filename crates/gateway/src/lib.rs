//! The Strata gateway: the HTTP/JSON API deployed agents call (`strata serve`), and a
//! simulated fleet that drives it (`strata fleet`).
//!
//! An agent starts an episode (pinned to one policy version: the stable one, or the canary
//! candidate for a fraction of episodes, whose samples go to a separate ledger bucket),
//! asks for actions (`act`, idempotent by key), may re-check before executing (a target
//! that moved aborts the action and invalidates the trajectory; an unexpected top-level UI
//! element holds the episode for an operator), and reports each outcome, which is
//! acknowledged only once durable in the ledger. Timeouts are handled by the action's
//! side-effect class. The learner trains on reported steps and publishes versions, which
//! new episodes get after a cooldown. Operators publish, canary, promote and roll back
//! (policy and admission rules together), invalidate, and confirm held episodes.
//!
//! State survives `kill -9`: samples are in the ledger, episodes and actions in a journal
//! (`journal.jsonl`), versions in `policies/`, tokens in `tokens.json`, all under one
//! directory. See `openapi.json` (served at `/openapi.json`) for the API.

mod api;
mod auth;
mod client;
mod client_tls;
mod connections;
mod error;
mod fleet;
mod gateway;
pub mod ids;
mod inbox;
mod journal;
mod learner;
mod metrics;
mod policies;
mod relay;
mod segment;
mod server;
mod settings;
mod state;
mod tls;
mod update_log;

pub use api::*;
pub use auth::{Auth, Caller, Role, TokensFile};
pub use client::{Client, ClientError};
pub use error::{GatewayError, RequestError};
pub use fleet::{run_fleet, FleetError, FleetReport, FleetSettings};
pub use gateway::{Counters, Gateway, ServingPointer, SharedRelease, KEEP_RECENT};
pub use inbox::LearnerInbox;
pub use learner::lay_out;
pub use metrics::Metrics;
pub use relay::RelayQueue;
pub use segment::Segment;
pub use server::{router, Server, OPENAPI};
pub use settings::{GatewaySettings, ReleaseMode};
pub use tls::TlsFiles;
pub use update_log::{lag_seconds, UpdateLog};
