//! The JSON bodies of the HTTP API (documented in `openapi.json`, served at
//! `/openapi.json`), a file per part of the API; the kinds every part shares are here.

mod acting;
mod observation;
mod operator;
mod policies;
mod reporting;
mod trainer;

use serde::{Deserialize, Serialize};

pub use acting::*;
pub use observation::*;
pub use operator::*;
pub use policies::*;
pub use reporting::*;
pub use trainer::*;

/// How dangerous it is to execute an action twice; declared per action type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SideEffect {
    /// Only observes: safe to replay.
    ReadOnly,
    /// Executing twice equals executing once: safe to replay.
    Idempotent,
    /// The agent can ask the world whether it happened: replay only after the query says no.
    Queryable,
    /// May act twice: a timeout means "status unknown", never a blind replay.
    Unsafe,
}

impl SideEffect {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            SideEffect::ReadOnly => "read_only",
            SideEffect::Idempotent => "idempotent",
            SideEffect::Queryable => "queryable",
            SideEffect::Unsafe => "unsafe",
        }
    }
}

/// Which policy a new episode samples with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    /// The promoted version.
    Stable,
    /// The candidate under canary; its samples go to the canary bucket.
    Canary,
}

/// Where an episode stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EpisodeStatus {
    /// Acting.
    Active,
    /// A re-check saw an unexpected top-level element; resumes on an operator's confirm.
    AwaitingConfirmation,
    /// Ended by the agent or timed out.
    Ended,
}
