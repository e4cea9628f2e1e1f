//! What the gateway remembers between requests (and, through the journal, across
//! restarts): episodes, actions, idempotency keys and the release state.

use std::collections::{BTreeSet, HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::api::{ActResponse, Channel, Context, EpisodeStatus};

/// An episode.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EpisodeRec {
    /// Id.
    pub id: u64,
    /// The agent (token name) that owns it.
    pub agent: String,
    /// Pinned version.
    pub version: u64,
    /// Stable or canary.
    pub channel: Channel,
    /// Ledger bucket.
    pub bucket: strata_ledger::Bucket,
    /// Current trajectory.
    pub trajectory: u64,
    /// Status.
    pub status: EpisodeStatus,
    /// Steps reported.
    pub steps: u32,
    /// Sum of reported rewards.
    pub reward_sum: f64,
    /// Env sequence of the last act or report.
    pub last_seq: Option<u64>,
    /// The last reported observation (bootstraps a cut trajectory's value).
    pub last_obs: Option<Vec<f32>>,
    /// The action awaiting its report.
    pub pending: Option<u64>,
    /// The key it was started with.
    pub start_key: Option<String>,
    /// Wall-clock ns of the last request on it.
    pub last_activity_ns: i64,
    /// A recurrent policy's state after the last reported action: what the next act and
    /// the bootstrap of a cut trajectory start from. Zero when the episode starts and after
    /// a switch of version; empty for a feed-forward policy and once the episode ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "state_bytes")]
    pub memory: Vec<f32>,
    /// The state after the outstanding action: it becomes `memory` when the action is
    /// reported, and is dropped when the action is never executed (aborted, cancelled).
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "state_bytes")]
    pub pending_memory: Vec<f32>,
}

impl EpisodeRec {
    /// The outstanding action was executed and reported: the state after it carries on.
    /// Returns the state before it (the one its step was taken from).
    pub fn take_reported(&mut self) -> Vec<f32> {
        self.pending = None;
        if self.pending_memory.is_empty() {
            return Vec::new();
        }
        std::mem::replace(&mut self.memory, std::mem::take(&mut self.pending_memory))
    }

    /// The outstanding action will never be executed: the state goes back to before it.
    /// Returns the action.
    pub fn withdraw_pending(&mut self) -> Option<u64> {
        self.pending_memory.clear();
        self.pending.take()
    }

    /// The episode runs a new version from here: a state of the old one's means nothing.
    pub fn reset_memory(&mut self) {
        self.memory.fill(0.0);
        self.pending_memory.clear();
    }

    /// The episode ended: its state is no longer needed.
    pub fn release_memory(&mut self) {
        self.memory = Vec::new();
        self.pending_memory = Vec::new();
    }
}

/// A recurrent state in the journal: its `f32`s as little-endian bytes in base64 (exact,
/// and under half the size of JSON numbers).
mod state_bytes {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(state: &[f32], s: S) -> Result<S::Ok, S::Error> {
        let bytes = super::f32_le_bytes(state);
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f32>, D::Error> {
        let text = String::deserialize(d)?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map_err(serde::de::Error::custom)?;
        if bytes.len() % 4 != 0 {
            return Err(serde::de::Error::custom(format!(
                "a recurrent state of {} bytes (not whole f32s)",
                bytes.len()
            )));
        }
        Ok(super::f32_from_le_bytes(&bytes))
    }
}

/// Values as little-endian `f32` bytes: how the journal keeps a recurrent state and the
/// ledger a transition's observations.
pub(crate) fn f32_le_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// [`f32_le_bytes`] read back (a trailing partial value is ignored).
pub(crate) fn f32_from_le_bytes(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().expect("four bytes")))
        .collect()
}

/// Where an action stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionStatus {
    /// Issued, not reported.
    Pending,
    /// The agent timed out on it; replay may be allowed.
    TimedOut,
    /// Reported and stored as `sample`.
    Reported {
        /// The sample id.
        sample: u64,
    },
    /// A re-check aborted it (never executed).
    Aborted,
    /// Not executed: the episode awaits a human, or a forced switch replaced its version.
    Cancelled,
    /// An unsafe action that timed out: whether it happened is unknown.
    Unknown,
}

/// An issued action and what is needed to train on it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ActionRec {
    /// The answer given (returned again for the same key).
    pub answer: ActResponse,
    /// Episode.
    pub episode: u64,
    /// Idempotency key.
    pub key: String,
    /// Action type.
    pub action_type: String,
    /// The observation acted on.
    pub obs: Vec<f32>,
    /// Log-prob of the action.
    pub log_prob: f32,
    /// V(obs).
    pub value: f32,
    /// Env sequence at the act.
    pub env_seq: u64,
    /// What a re-check compares against.
    pub context: Option<Context>,
    /// Status.
    pub status: ActionStatus,
    /// For an action the agent chose with its own model and recorded: what it recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded: Option<Recorded>,
}

/// An action an agent chose with its own model (`record`), as it recorded it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Recorded {
    /// The action, as JSON text.
    pub action: String,
    /// Its log-probability under the policy that chose it, if given.
    pub log_prob: Option<f32>,
    /// Why this record invalidated its trajectory, if it did.
    pub invalidated: Option<String>,
}

/// A version waiting out the cooldown.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PendingRelease {
    /// The version.
    pub version: u64,
    /// Which channel it joins.
    pub channel: Channel,
    /// Wall-clock ns from which new episodes get it.
    pub ready_at_ns: i64,
}

/// Which versions new episodes get.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Release {
    /// Version for stable episodes.
    pub stable: u64,
    /// Candidate for canary episodes.
    pub candidate: Option<u64>,
    /// Fraction of new episodes that get the candidate.
    pub canary_fraction: f64,
    /// Seconds between publishing and sampling.
    pub cooldown_secs: f64,
    /// Published versions waiting out the cooldown, oldest first.
    pub pending: VecDeque<PendingRelease>,
    /// The newest version number handed out.
    pub latest: u64,
    /// Which stored versions the retention rule keeps.
    #[serde(default)]
    pub retention: Retention,
}

/// The versions the retention rule must keep that it has not decided on yet. Versions up
/// to `decided_upto` are decided: those still stored are kept for good (samples or an
/// operator refer to them), the rest were removed. So what is remembered here covers only
/// the versions since the last sweep, however long the gateway runs.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Retention {
    /// Versions up to this one are decided.
    pub decided_upto: u64,
    /// Undecided versions an episode was pinned to (its samples refer to them).
    pub sampled: BTreeSet<u64>,
    /// Undecided versions an operator published, promoted or rolled back to.
    pub pinned: BTreeSet<u64>,
}

impl Retention {
    /// An episode was pinned to `version`.
    pub fn note_sampled(&mut self, version: u64) {
        if version > self.decided_upto {
            self.sampled.insert(version);
        }
    }

    /// An operator acted on `version`.
    pub fn pin(&mut self, version: u64) {
        if version > self.decided_upto {
            self.pinned.insert(version);
        }
    }

    /// Versions up to `version` are decided: forget what was noted for them.
    pub fn decide_upto(&mut self, version: u64) {
        self.decided_upto = self.decided_upto.max(version);
        self.sampled = self.sampled.split_off(&(self.decided_upto + 1));
        self.pinned = self.pinned.split_off(&(self.decided_upto + 1));
    }
}

impl Release {
    /// Whether the retention rule keeps `version`: the release state names it (stable,
    /// candidate, waiting out its cooldown), an episode was pinned to it, or an operator
    /// acted on it.
    pub fn keeps(&self, version: u64) -> bool {
        self.stable == version
            || self.candidate == Some(version)
            || self.pending.iter().any(|p| p.version == version)
            || self.retention.sampled.contains(&version)
            || self.retention.pinned.contains(&version)
    }

    /// Applies every pending version whose cooldown has passed.
    pub fn refresh(&mut self, now_ns: i64) {
        while let Some(p) = self.pending.front() {
            if p.ready_at_ns > now_ns {
                break;
            }
            let p = self.pending.pop_front().expect("front exists");
            match p.channel {
                Channel::Stable => self.stable = p.version,
                Channel::Canary => self.candidate = Some(p.version),
            }
        }
    }

    /// Makes `version` stable, at once (dropping any stable version still waiting out its
    /// cooldown) or after the cooldown; a candidate that is `version` stops being one.
    pub fn promote(&mut self, version: u64, at_once: bool, now_ns: i64) {
        if self.candidate == Some(version) {
            self.candidate = None;
        }
        if at_once {
            self.pending.retain(|p| p.channel != Channel::Stable);
            self.stable = version;
        } else {
            self.publish(version, Channel::Stable, now_ns);
        }
    }

    /// Applies a stable version chosen elsewhere (another gateway's promote or rollback),
    /// which is seen again on every look until it is stable: queued once, not each time.
    pub fn follow(&mut self, version: u64, at_once: bool, now_ns: i64) {
        // Waiting as the canary candidate is not waiting to be stable.
        let queued = self.stable == version
            || self
                .pending
                .iter()
                .any(|p| p.version == version && p.channel == Channel::Stable);
        if at_once || !queued {
            self.promote(version, at_once, now_ns);
        } else if self.candidate == Some(version) {
            self.candidate = None;
        }
    }

    /// Queues `version` for `channel` after the cooldown.
    pub fn publish(&mut self, version: u64, channel: Channel, now_ns: i64) {
        let ready_at_ns = now_ns + (self.cooldown_secs * 1e9) as i64;
        self.pending.push_back(PendingRelease {
            version,
            channel,
            ready_at_ns,
        });
        self.refresh(now_ns);
    }
}

/// Everything the journal restores.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct State {
    /// Next episode id.
    pub next_episode: u64,
    /// Next action id.
    pub next_action: u64,
    /// Next trajectory id.
    pub next_trajectory: u64,
    /// Open (and recently ended) episodes.
    pub episodes: HashMap<u64, EpisodeRec>,
    /// Recent actions, by id.
    /// Boxed: a record is a few hundred bytes, and a table of 100,000 inline records
    /// (with its empty slots) was one 67 MB allocation, reallocated as it grew.
    pub actions: HashMap<u64, Box<ActionRec>>,
    /// Action ids in issue order, to forget the oldest closed ones.
    pub action_order: VecDeque<u64>,
    /// Agent-scoped key -> action id: derived from `actions`, so not journalled.
    #[serde(skip)]
    pub action_keys: HashMap<String, u64>,
    /// Agent-scoped start key -> episode id: derived from `episodes`, so not journalled.
    #[serde(skip)]
    pub episode_keys: HashMap<String, u64>,
    /// Release state.
    pub release: Release,
    /// Replay only: the journal ends with a clean stop (no report can be in flight).
    #[serde(skip)]
    pub stopped_cleanly: bool,
}

impl State {
    /// A fresh gateway serving `initial` as stable.
    pub fn new(initial: u64, cooldown_secs: f64, canary_fraction: f64) -> Self {
        State {
            next_episode: 1,
            next_action: 1,
            next_trajectory: 1,
            episodes: HashMap::new(),
            actions: HashMap::new(),
            action_order: VecDeque::new(),
            action_keys: HashMap::new(),
            episode_keys: HashMap::new(),
            stopped_cleanly: false,
            release: Release {
                stable: initial,
                candidate: None,
                canary_fraction,
                cooldown_secs,
                pending: VecDeque::new(),
                latest: initial,
                retention: Retention::default(),
            },
        }
    }

    /// Remembers an action, forgetting the oldest beyond `keep` that nothing can act on
    /// any more. An action still open (pending, or timed out and replayable) on an episode
    /// that has not ended is kept, at most one per open episode; once its episode ends it
    /// goes like any other. (Stopping at the oldest open action instead, as this once did,
    /// kept every later action forever behind one an agent timed out on.)
    pub fn remember(&mut self, rec: ActionRec, keep: usize) {
        let id = rec.answer.action_id;
        self.action_keys
            .insert(agent_key(&self.episodes[&rec.episode].agent, &rec.key), id);
        self.actions.insert(id, Box::new(rec));
        self.action_order.push_back(id);
        let mut still_open = Vec::new();
        while self.action_order.len() > keep {
            let Some(oldest) = self.action_order.pop_front() else {
                break;
            };
            let Some(a) = self.actions.get(&oldest) else {
                continue;
            };
            let episode = self.episodes.get(&a.episode);
            let open = matches!(a.status, ActionStatus::Pending | ActionStatus::TimedOut)
                && episode.is_some_and(|e| e.status != EpisodeStatus::Ended);
            if open {
                still_open.push(oldest);
                continue;
            }
            let key = agent_key(episode.map_or("", |e| e.agent.as_str()), &a.key);
            self.action_keys.remove(&key);
            self.actions.remove(&oldest);
        }
        for id in still_open.into_iter().rev() {
            self.action_order.push_front(id);
        }
    }

    /// Forgets ended episodes nothing refers to any more (their actions are forgotten).
    pub fn forget_ended(&mut self, keep: usize) {
        let ended = self
            .episodes
            .values()
            .filter(|e| e.status == EpisodeStatus::Ended)
            .count();
        if ended <= keep {
            return;
        }
        let referenced: std::collections::HashSet<u64> =
            self.actions.values().map(|a| a.episode).collect();
        let (agents, keys): (Vec<_>, Vec<_>) = self
            .episodes
            .values()
            .filter(|e| e.status == EpisodeStatus::Ended && !referenced.contains(&e.id))
            .map(|e| (e.id, e.start_key.as_ref().map(|k| agent_key(&e.agent, k))))
            .unzip();
        for id in agents {
            self.episodes.remove(&id);
        }
        for key in keys.into_iter().flatten() {
            self.episode_keys.remove(&key);
        }
    }
}

/// An agent's idempotency key scoped by the agent (agents choose keys independently):
/// the one encoding, in the gateway's maps and the ledger's `idempotency_key` column alike.
/// Agent names are the gateway's own token names, which hold no `/`.
pub fn agent_key(agent: &str, key: &str) -> String {
    format!("{agent}/{key}")
}

/// A journal record. Externally tagged: an internally tagged enum buffers its content,
/// and serde cannot then read the integer keys of the snapshot's maps back.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// Everything, as of the last start.
    Snapshot {
        /// The state.
        state: Box<State>,
    },
    /// An episode's record after a change.
    Episode {
        /// Its record.
        episode: EpisodeRec,
        /// Counter after the change.
        next_trajectory: u64,
    },
    /// An action was issued (or its status changed).
    Action {
        /// Its record.
        action: Box<ActionRec>,
    },
    /// An action's record and its episode's, after either changed.
    ActionEpisode {
        /// The action.
        action: Box<ActionRec>,
        /// The episode.
        episode: EpisodeRec,
    },
    /// The release changed.
    Release {
        /// The new release state.
        release: Release,
    },
    /// The gateway stopped cleanly: it answered nothing more after this record.
    Stopped,
}

impl State {
    /// Rebuilds the key indexes from the episodes and remembered actions they point to.
    fn index_keys(&mut self) {
        self.episode_keys = self
            .episodes
            .values()
            .filter_map(|e| Some((agent_key(&e.agent, e.start_key.as_ref()?), e.id)))
            .collect();
        self.action_keys = self
            .actions
            .values()
            .filter_map(|a| {
                let agent = &self.episodes.get(&a.episode)?.agent;
                Some((agent_key(agent, &a.key), a.answer.action_id))
            })
            .collect();
    }

    /// Applies a journal record (replay).
    pub fn apply(&mut self, event: Event, keep_actions: usize) {
        self.stopped_cleanly = matches!(event, Event::Stopped);
        match event {
            Event::Stopped => {}
            Event::Snapshot { state } => {
                *self = *state;
                self.index_keys();
            }
            Event::Episode {
                episode,
                next_trajectory,
            } => {
                self.next_episode = self.next_episode.max(episode.id + 1);
                self.next_trajectory = self.next_trajectory.max(next_trajectory);
                self.release.retention.note_sampled(episode.version);
                if let Some(k) = &episode.start_key {
                    self.episode_keys
                        .insert(agent_key(&episode.agent, k), episode.id);
                }
                self.episodes.insert(episode.id, episode);
            }
            Event::Action { action } => self.apply_action(*action, keep_actions),
            Event::ActionEpisode { action, episode } => {
                self.episodes.insert(episode.id, episode);
                self.apply_action(*action, keep_actions);
            }
            Event::Release { release } => self.release = release,
        }
    }

    fn apply_action(&mut self, action: ActionRec, keep: usize) {
        let id = action.answer.action_id;
        self.next_action = self.next_action.max(id + 1);
        if let Some(a) = self.actions.get_mut(&id) {
            **a = action;
        } else if self.episodes.contains_key(&action.episode) {
            self.remember(action, keep);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn episode(id: u64, status: EpisodeStatus) -> EpisodeRec {
        EpisodeRec {
            id,
            agent: "agent-0".into(),
            version: 0,
            channel: Channel::Stable,
            bucket: "train".parse().unwrap(),
            trajectory: id,
            status,
            steps: 0,
            reward_sum: 0.0,
            last_seq: None,
            last_obs: None,
            pending: None,
            start_key: None,
            last_activity_ns: 0,
            memory: Vec::new(),
            pending_memory: Vec::new(),
        }
    }

    fn action(id: u64, episode: u64, status: ActionStatus) -> ActionRec {
        ActionRec {
            answer: serde_json::from_value(serde_json::json!({
                "action_id": id, "action": [0.0], "policy_version": 0, "config_hash": "c",
                "trajectory_id": episode, "side_effect": "unsafe",
                "issued_at_ns": 0
            }))
            .unwrap(),
            episode,
            key: format!("k{id}"),
            action_type: "default".into(),
            obs: vec![0.0; 4],
            log_prob: 0.0,
            value: 0.0,
            env_seq: id,
            context: None,
            status,
            recorded: None,
        }
    }

    #[test]
    fn remembered_actions_stay_bounded_past_an_action_left_open() {
        let mut state = State::new(0, 0.0, 0.0);
        state.episodes.insert(1, episode(1, EpisodeStatus::Active));
        state.episodes.insert(2, episode(2, EpisodeStatus::Ended));
        // Open on a live episode: kept. Timed out on an ended one: nothing can act on it.
        state.remember(action(1, 1, ActionStatus::Pending), 10);
        state.remember(action(2, 2, ActionStatus::TimedOut), 10);
        for id in 3..1_000 {
            state.remember(action(id, 1, ActionStatus::Reported { sample: id }), 10);
        }
        // The newest ten, and the open action beyond them.
        assert_eq!(state.actions.len(), 11);
        assert_eq!(state.action_order.len(), 11);
        assert!(state.actions.contains_key(&1), "the open action is kept");
        assert!(!state.actions.contains_key(&2));
        assert!(state.actions.contains_key(&990) && !state.actions.contains_key(&989));
        assert_eq!(state.action_keys.len(), 11);
    }

    #[test]
    fn a_snapshot_with_episodes_and_actions_reads_back() {
        let mut state = State::new(0, 1.0, 0.0);
        state.episodes.insert(
            4,
            EpisodeRec {
                id: 4,
                agent: "agent-0".into(),
                version: 0,
                channel: Channel::Stable,
                bucket: "train".parse().unwrap(),
                trajectory: 9,
                status: EpisodeStatus::Active,
                steps: 2,
                reward_sum: 2.0,
                last_seq: Some(3),
                last_obs: None,
                pending: Some(7),
                start_key: Some("k".into()),
                last_activity_ns: 1,
                memory: vec![0.5, -1.0e-30, f32::MAX],
                pending_memory: Vec::new(),
            },
        );
        state.episode_keys.insert(agent_key("agent-0", "k"), 4);
        let line = serde_json::to_string(&Event::Snapshot {
            state: Box::new(state),
        })
        .unwrap();
        let mut back = State::new(0, 0.0, 0.0);
        back.apply(serde_json::from_str(&line).unwrap(), 10);
        assert_eq!(back.episodes[&4].pending, Some(7));
        assert_eq!(back.episodes[&4].memory, [0.5, -1.0e-30, f32::MAX], "exact");
        assert!(back.episodes[&4].pending_memory.is_empty());
        assert_eq!(back.episode_keys[&agent_key("agent-0", "k")], 4);
        assert_eq!(back.release.cooldown_secs, 1.0);
    }

    fn stable_pending(release: &Release) -> Vec<u64> {
        release
            .pending
            .iter()
            .filter(|p| p.channel == Channel::Stable)
            .map(|p| p.version)
            .collect()
    }

    #[test]
    fn a_followed_version_is_queued_once_however_often_it_is_seen() {
        let mut release = State::new(0, 60.0, 0.1).release;
        release.candidate = Some(2);
        for look in 0..3 {
            release.follow(2, false, look);
        }
        assert_eq!(stable_pending(&release), vec![2]);
        assert_eq!((release.stable, release.candidate), (0, None));
        // After its cooldown it is stable, and seeing it again changes nothing.
        release.refresh(61_000_000_000);
        release.follow(2, false, 61_000_000_000);
        assert_eq!((release.stable, release.pending.len()), (2, 0));
    }

    #[test]
    fn a_version_still_waiting_as_the_canary_is_queued_as_stable_when_followed() {
        // Every gateway imports a learner's version as the canary; one operator promotes
        // it before that cooldown ends: the others queue it as stable at once too.
        let mut release = State::new(0, 60.0, 0.1).release;
        release.publish(2, Channel::Canary, 0);
        release.follow(2, false, 1);
        assert_eq!(stable_pending(&release), vec![2]);
    }

    #[test]
    fn a_version_followed_at_once_replaces_any_waiting_stable_version() {
        let mut release = State::new(0, 60.0, 0.1).release;
        release.follow(2, false, 0);
        release.publish(3, Channel::Canary, 0);
        release.follow(1, true, 1);
        assert_eq!(release.stable, 1);
        assert!(stable_pending(&release).is_empty());
        assert_eq!(release.pending.len(), 1, "the canary still waits");
    }
}
