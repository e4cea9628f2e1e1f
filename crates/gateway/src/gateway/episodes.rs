//! Episodes: started pinned to a version (stable, or the candidate for a canary share),
//! owned by one agent, ended by the agent, by idleness or after a hold an operator
//! confirms.

use super::*;

impl Gateway {
    /// Starts an episode pinned to the stable version, or the candidate for a canary
    /// fraction of episodes (chosen by a hash of the episode id).
    ///
    /// # Errors
    /// Journal failures.
    pub fn start_episode(
        &self,
        caller: &Caller,
        req: StartEpisodeRequest,
    ) -> Result<EpisodeInfo, RequestError> {
        let now = now_ns();
        let mut state = self.state.lock();
        if let Some(k) = &req.idempotency_key {
            if let Some(id) = state.episode_keys.get(&agent_key(&caller.name, k)) {
                if let Some(e) = state.episodes.get(id) {
                    return Ok(self.info(e));
                }
            }
        }
        state.release.refresh(now);
        let id = state.next_episode;
        state.next_episode += 1;
        let trajectory = state.next_trajectory;
        state.next_trajectory += 1;
        let r = &state.release;
        let canary = r.candidate.is_some()
            && (xxhash_rust::xxh3::xxh3_64(&id.to_le_bytes()) as f64 / u64::MAX as f64)
                < r.canary_fraction;
        let (version, channel, bucket) = if canary {
            (
                r.candidate.expect("checked"),
                Channel::Canary,
                Bucket::canary(),
            )
        } else {
            (r.stable, Channel::Stable, self.stable_bucket())
        };
        let episode = EpisodeRec {
            id,
            agent: caller.name.clone(),
            version,
            channel,
            bucket,
            trajectory,
            status: EpisodeStatus::Active,
            steps: 0,
            reward_sum: 0.0,
            last_seq: None,
            last_obs: None,
            pending: None,
            start_key: req.idempotency_key.clone(),
            last_activity_ns: now,
            memory: vec![0.0; self.state_len],
            pending_memory: Vec::new(),
        };
        if let Some(k) = &req.idempotency_key {
            state.episode_keys.insert(agent_key(&caller.name, k), id);
        }
        state.release.retention.note_sampled(version);
        state.episodes.insert(id, episode);
        self.journal_episode(&state, id)?;
        Ok(self.info(&state.episodes[&id]))
    }

    pub(super) fn own<'a>(
        state: &'a mut State,
        caller: &Caller,
        id: u64,
    ) -> Result<&'a mut EpisodeRec, RequestError> {
        let gateway_id = state.gateway_id;
        let e = state.episodes.get_mut(&id).ok_or_else(|| {
            RequestError::not_found(crate::ids::unknown("episode", id, gateway_id))
        })?;
        if e.agent != caller.name {
            return Err(RequestError::forbidden(format!(
                "episode {id} belongs to another agent"
            )));
        }
        Ok(e)
    }

    /// An episode's state (its owner or an operator).
    ///
    /// # Errors
    /// `NotFound` unknown, `Forbidden` another agent's.
    pub fn episode(&self, caller: &Caller, id: u64) -> Result<EpisodeInfo, RequestError> {
        let mut state = self.state.lock();
        if caller.role == crate::auth::Role::Operator {
            let e = state.episodes.get(&id).ok_or_else(|| {
                RequestError::not_found(crate::ids::unknown("episode", id, state.gateway_id))
            })?;
            return Ok(self.info(e));
        }
        let e = Self::own(&mut state, caller, id)?;
        Ok(self.info(e))
    }

    pub(super) fn check_active(e: &EpisodeRec) -> Result<(), RequestError> {
        match e.status {
            EpisodeStatus::Active => Ok(()),
            EpisodeStatus::AwaitingConfirmation => Err(RequestError::conflict(format!(
                "episode {} awaits an operator's confirmation",
                e.id
            ))),
            EpisodeStatus::Ended => Err(RequestError::conflict(format!(
                "episode {} has ended",
                e.id
            ))),
        }
    }

    /// Ends an episode (again: no change).
    ///
    /// # Errors
    /// `NotFound`/`Forbidden` episode.
    pub fn end_episode(&self, caller: &Caller, id: u64) -> Result<EpisodeInfo, RequestError> {
        let mut state = self.state.lock();
        let e = Self::own(&mut state, caller, id)?;
        if e.status != EpisodeStatus::Ended {
            self.close_episode(&mut state, id)?;
        }
        Ok(self.info(&state.episodes[&id]))
    }

    pub(super) fn close_episode(&self, state: &mut State, id: u64) -> Result<(), RequestError> {
        let e = state.episodes.get_mut(&id).expect("episode");
        e.status = EpisodeStatus::Ended;
        if let Some(p) = e.withdraw_pending() {
            if let Some(a) = state.actions.get_mut(&p) {
                if a.status == ActionStatus::Pending {
                    a.status = ActionStatus::Cancelled;
                }
            }
        }
        let last = state.episodes[&id].last_obs.clone();
        self.cut(state, id, Some(last.as_deref()));
        state
            .episodes
            .get_mut(&id)
            .expect("episode")
            .release_memory();
        self.journal_episode(state, id)
    }

    /// Ends episodes idle longer than the episode timeout; once more than 10,000 have
    /// ended, forgets those no remembered action refers to. Returns how many it ended.
    pub fn reap_idle(&self) -> usize {
        let limit = self.settings.episode_timeout.as_nanos() as i64;
        let now = now_ns();
        let mut state = self.state.lock();
        let idle: Vec<u64> = state
            .episodes
            .values()
            .filter(|e| e.status != EpisodeStatus::Ended && now - e.last_activity_ns > limit)
            .map(|e| e.id)
            .collect();
        // The timed-out unsafe actions' trajectories invalidated in one write, durable
        // before any of their episodes is journalled as ended.
        let mut invalidations = Vec::new();
        for &id in &idle {
            let pending = state.episodes[&id].pending;
            let unsafe_pending = pending
                .and_then(|p| state.actions.get(&p))
                .is_some_and(|a| a.answer.side_effect == SideEffect::Unsafe);
            if unsafe_pending {
                let p = pending.expect("checked");
                state.actions.get_mut(&p).expect("action").status = ActionStatus::Unknown;
                let text = format!(
                    "episode {id} timed out with unsafe action {p} outstanding: status unknown"
                );
                match self.restart_trajectory(
                    &mut state,
                    id,
                    ReasonCode::StatusUnknown,
                    &text,
                    "gateway",
                ) {
                    Ok(p) => invalidations.push(p),
                    Err(e) => {
                        tracing::warn!(component = "gateway", error = %e, "could not invalidate a timed-out trajectory")
                    }
                }
            }
        }
        for p in invalidations {
            if let Err(e) = p.wait() {
                tracing::warn!(component = "gateway", error = %e, "a timed-out trajectory's invalidation is not durable yet");
            }
        }
        for &id in &idle {
            if let Err(e) = self.close_episode(&mut state, id) {
                tracing::warn!(component = "gateway", error = %e, "could not journal a timed-out episode");
            }
        }
        state.forget_ended(10_000);
        idle.len()
    }

    /// Resumes an episode held for a human; it continues on a new trajectory.
    ///
    /// # Errors
    /// `NotFound` unknown episode; `Conflict` not held.
    pub fn confirm(&self, id: u64) -> Result<EpisodeInfo, RequestError> {
        let mut state = self.state.lock();
        let next = state.next_trajectory;
        let gateway_id = state.gateway_id;
        let e = state.episodes.get_mut(&id).ok_or_else(|| {
            RequestError::not_found(crate::ids::unknown("episode", id, gateway_id))
        })?;
        if e.status != EpisodeStatus::AwaitingConfirmation {
            return Err(RequestError::conflict(format!(
                "episode {id} is not awaiting confirmation ({:?})",
                e.status
            )));
        }
        e.status = EpisodeStatus::Active;
        e.trajectory = next;
        e.last_activity_ns = now_ns();
        state.next_trajectory += 1;
        self.journal_episode(&state, id)?;
        Ok(self.info(&state.episodes[&id]))
    }
}
