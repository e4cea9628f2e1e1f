//! What the gateway remembers between requests (and, through the journal, across
//! restarts): episodes (`episode`), actions (`action`), idempotency keys and the release
//! state (`release`); the journal's records in `event`.

mod action;
mod episode;
mod event;
mod release;

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::api::EpisodeStatus;

pub use action::*;
pub use episode::*;
pub use event::*;
pub use release::*;

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
    /// This gateway's id among a run's gateways (set at opening; 0: a gateway alone).
    #[serde(skip)]
    pub gateway_id: u16,
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
            gateway_id: 0,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Channel;

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
