//! The journal's records, and how a replay applies them to the state.

use serde::{Deserialize, Serialize};

use super::{agent_key, ActionRec, EpisodeRec, Release, State};

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
