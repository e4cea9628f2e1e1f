//! Acting: an action from the episode's pinned version, the same answer for the same
//! idempotency key; re-checks that abort or hold an action whose view went stale.

use super::*;

impl Gateway {
    pub(super) fn check_vector(&self, name: &str, v: &[f32]) -> Result<(), RequestError> {
        self.check_values(name, v, self.obs_dim)
    }

    /// An observation's values, as a row: JSON numbers as they are; an encoded array
    /// decoded, and put channels-last when it has the env's image shape.
    pub(super) fn observation_row(
        &self,
        name: &str,
        observation: Observation,
    ) -> Result<Vec<f32>, RequestError> {
        let encoded = match observation {
            Observation::Values(values) => {
                self.check_vector(name, &values)?;
                return Ok(values);
            }
            Observation::Encoded(encoded) => encoded,
        };
        use base64::Engine;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded.base64.as_bytes())
            .map_err(|e| RequestError::invalid(format!("{name}.base64: {e}")))?;
        let count: usize = encoded.shape.iter().product();
        if bytes.len() != count {
            return Err(RequestError::invalid(format!(
                "{name}: {} bytes for shape {:?} (expected {count})",
                bytes.len(),
                encoded.shape,
            )));
        }
        let ArrayDtype::Uint8 = encoded.dtype;
        let values: Vec<f32> = bytes.iter().map(|&b| f32::from(b)).collect();
        if encoded.shape == [self.obs_dim] {
            self.check_vector(name, &values)?;
            return Ok(values);
        }
        let reorder = self
            .image_reorder
            .as_ref()
            .filter(|r| r.env_shape == encoded.shape);
        let Some(reorder) = reorder else {
            let image = self.image_reorder.as_ref().map_or_else(String::new, |r| {
                format!(" or the env's image shape {:?}", r.env_shape)
            });
            return Err(RequestError::invalid(format!(
                "{name}: shape {:?}; the policy expects [{}]{image}",
                encoded.shape, self.obs_dim
            )));
        };
        let mut row = vec![0.0; values.len()];
        reorder.apply(&values, &mut row);
        self.check_vector(name, &row)?;
        Ok(row)
    }

    /// A summary of observations: a value per observation value, one per image channel.
    pub(super) fn check_summary(&self, name: &str, v: &[f32]) -> Result<(), RequestError> {
        self.check_values(name, v, self.summary_dim())
    }

    /// The shapes an encoded observation may have: `[obs_dim]`, and the env's image shape
    /// when the observation is one image.
    pub fn encoded_shapes(&self) -> Vec<Vec<usize>> {
        let mut shapes = vec![vec![self.obs_dim]];
        shapes.extend(self.image_reorder.iter().map(|r| r.env_shape.clone()));
        shapes
    }

    /// Values in an observation summary.
    pub fn summary_dim(&self) -> usize {
        self.summary_dim
    }

    fn check_values(&self, name: &str, v: &[f32], expected: usize) -> Result<(), RequestError> {
        if v.len() != expected {
            return Err(RequestError::invalid(format!(
                "{name} has {} values; the policy expects {expected}",
                v.len(),
            )));
        }
        if let Some(i) = v.iter().position(|x| !x.is_finite()) {
            return Err(RequestError::invalid(format!(
                "{name}[{i}] is not a finite number"
            )));
        }
        Ok(())
    }

    pub(super) fn side_effect(&self, action_type: &str) -> Result<SideEffect, RequestError> {
        self.settings
            .side_effects
            .get(action_type)
            .copied()
            .ok_or_else(|| {
                let known: Vec<&str> = self
                    .settings
                    .side_effects
                    .keys()
                    .map(|k| k.as_str())
                    .collect();
                RequestError::invalid(format!(
                    "unknown action_type {action_type:?} (known: {})",
                    known.join(", ")
                ))
            })
    }

    /// Chooses an action with the episode's pinned version. The same idempotency key gets
    /// the same answer; one action per episode is outstanding at a time.
    ///
    /// # Errors
    /// `Invalid` bad observation or action type; `NotFound`/`Forbidden` episode; `Conflict`
    /// wrong state.
    pub fn act(
        &self,
        caller: &Caller,
        id: u64,
        req: ActRequest,
    ) -> Result<ActResponse, RequestError> {
        self.counters.acts.fetch_add(1, Ordering::Relaxed);
        let (observation, action_type, side_effect) = self.checked_action_request(
            req.observation,
            &req.idempotency_key,
            req.action_type.as_deref(),
            req.context.as_ref(),
        )?;
        let key = agent_key(&caller.name, &req.idempotency_key);
        let (version, trajectory, mut memory) = {
            let mut state = self.state.lock();
            if let Some(a) = state
                .action_keys
                .get(&key)
                .and_then(|a| state.actions.get(a))
            {
                if a.episode != id {
                    return Err(RequestError::conflict(format!(
                        "idempotency key {:?} was used for episode {}",
                        req.idempotency_key, a.episode
                    )));
                }
                return Ok(a.answer.clone());
            }
            let e = Self::own(&mut state, caller, id)?;
            Self::check_can_act(e)?;
            (e.version, e.trajectory, e.memory.clone())
        };
        let policy = self.policies.served(version)?;
        let mut action = vec![0.0; self.action_dim];
        let (mut log_prob, mut value) = ([0.0f32], [0.0f32]);
        {
            let seed = xxhash_rust::xxh3::xxh3_64(key.as_bytes()) ^ self.settings.run.train.seed;
            let mut rng = SampleRng::seed_from_u64(seed);
            let mut model = policy.model.lock();
            // The episode's state after its last reported action, advanced by this step
            // (kept aside until the action is reported).
            model.act(
                &observation,
                Memory::one_row(&mut memory),
                &mut rng,
                &[],
                &mut action,
                &mut log_prob,
                &mut value,
            );
        }
        let mut state = self.state.lock();
        if let Some(a) = state
            .action_keys
            .get(&key)
            .and_then(|a| state.actions.get(a))
        {
            return Ok(a.answer.clone()); // a concurrent retry won
        }
        let action_id = state.next_action;
        let e = Self::own(&mut state, caller, id)?;
        if e.pending.is_some() || e.version != version || e.trajectory != trajectory {
            return Err(RequestError::conflict(format!(
                "episode {id} changed while acting: retry"
            )));
        }
        e.pending = Some(action_id);
        e.pending_memory = memory;
        e.last_seq = Some(req.env_seq);
        e.last_activity_ns = now_ns();
        state.next_action += 1;
        let answer = ActResponse {
            action_id,
            action,
            policy_version: version,
            config_hash: self.config_hash.clone(),
            issued_at_ns: now_ns(),
            side_effect,
            trajectory_id: trajectory,
        };
        let rec = ActionRec {
            answer: answer.clone(),
            episode: id,
            key: req.idempotency_key,
            action_type,
            obs: observation,
            log_prob: log_prob[0],
            value: value[0],
            env_seq: req.env_seq,
            context: req.context,
            status: ActionStatus::Pending,
            recorded: None,
        };
        state.remember(rec.clone(), self.settings.remembered_actions);
        self.journal_action(&state, rec)?;
        Ok(answer)
    }

    /// What an act and a record both check: the observation as a row, a non-empty key,
    /// a known action type (its side-effect class), finite target coordinates.
    fn checked_action_request(
        &self,
        observation: Observation,
        idempotency_key: &str,
        action_type: Option<&str>,
        context: Option<&Context>,
    ) -> Result<(Vec<f32>, String, SideEffect), RequestError> {
        let observation = self.observation_row("observation", observation)?;
        if idempotency_key.is_empty() {
            return Err(RequestError::invalid("idempotency_key is empty"));
        }
        let action_type = action_type.unwrap_or("default").to_string();
        let side_effect = self.side_effect(&action_type)?;
        if let Some(t) = context.and_then(|c| c.target.as_ref()) {
            if t.iter().any(|x| !x.is_finite()) {
                return Err(RequestError::invalid(
                    "context.target holds a non-finite number",
                ));
            }
        }
        Ok((observation, action_type, side_effect))
    }

    /// An episode may take a new action: active, none outstanding.
    fn check_can_act(e: &EpisodeRec) -> Result<(), RequestError> {
        Self::check_active(e)?;
        if let Some(p) = e.pending {
            return Err(RequestError::conflict(format!(
                "episode {} has action {p} outstanding: report it first",
                e.id
            )));
        }
        Ok(())
    }

    /// Records an action the agent chose with its own model. It is then re-checked,
    /// reported and replayed as an act's is. Recorded with a version other than the
    /// episode's pinned one, it invalidates the episode's trajectory (reason
    /// `version_switch`, the agent as author): the action belongs to that trajectory,
    /// and the episode goes on, still pinned, in a new one. The same idempotency key gets
    /// the same answer.
    ///
    /// # Errors
    /// `Invalid` bad observation, action, action type, times or a config hash that is not
    /// the version's; `NotFound` an unknown version or episode; `Forbidden` another
    /// agent's episode; `Conflict` wrong state or a key used for another episode.
    pub fn record(
        &self,
        caller: &Caller,
        id: u64,
        req: RecordRequest,
    ) -> Result<RecordResponse, RequestError> {
        let (observation, action_type, side_effect) = self.checked_action_request(
            req.observation,
            &req.idempotency_key,
            req.action_type.as_deref(),
            req.context.as_ref(),
        )?;
        if req.action.is_null() {
            return Err(RequestError::invalid("action is null"));
        }
        let action = req.action.to_string();
        if action.len() > MAX_RECORDED_ACTION {
            return Err(RequestError::invalid(format!(
                "action is {} bytes of JSON (at most {MAX_RECORDED_ACTION})",
                action.len()
            )));
        }
        let log_prob = match (req.log_prob, req.probability) {
            (Some(_), Some(_)) => {
                return Err(RequestError::invalid(
                    "give log_prob or probability, not both",
                ))
            }
            (Some(l), None) if !(l.is_finite() && l <= 0.0) => {
                return Err(RequestError::invalid(format!(
                    "log_prob {l} is not a finite number <= 0"
                )))
            }
            (None, Some(p)) if !(p > 0.0 && p <= 1.0) => {
                return Err(RequestError::invalid(format!(
                    "probability {p} is not in (0, 1]"
                )))
            }
            (l, p) => l.or(p.map(f32::ln)),
        };
        let issued_at_ns = req.issued_at_ns.unwrap_or_else(now_ns);
        if issued_at_ns <= 0 {
            return Err(RequestError::invalid(format!(
                "issued_at_ns {issued_at_ns} is not a time (ns since the Unix epoch)"
            )));
        }
        self.check_recorded_version(req.policy_version, &req.config_hash)?;
        let key = agent_key(&caller.name, &req.idempotency_key);
        let mut state = self.state.lock();
        if let Some(a) = state
            .action_keys
            .get(&key)
            .and_then(|a| state.actions.get(a))
        {
            if a.episode != id || a.recorded.is_none() {
                return Err(RequestError::conflict(format!(
                    "idempotency key {:?} was used for {} on episode {}",
                    req.idempotency_key,
                    if a.recorded.is_some() {
                        "a record"
                    } else {
                        "an act"
                    },
                    a.episode
                )));
            }
            return Ok(Self::record_answer(a));
        }
        let action_id = state.next_action;
        let e = Self::own(&mut state, caller, id)?;
        Self::check_can_act(e)?;
        let (pinned, trajectory) = (e.version, e.trajectory);
        let invalidated = (req.policy_version != pinned).then(|| {
            format!(
                "{} recorded an action of version {} on episode {id}, pinned to version {pinned}",
                caller.name, req.policy_version
            )
        });
        if let Some(text) = &invalidated {
            self.invalidate_and_restart(
                &mut state,
                id,
                ReasonCode::VersionSwitch,
                text,
                &caller.name,
            )?;
        }
        let e = state.episodes.get_mut(&id).expect("episode");
        e.pending = Some(action_id);
        e.last_seq = Some(req.env_seq);
        e.last_activity_ns = now_ns();
        state.next_action += 1;
        let numeric: Option<Vec<f32>> = serde_json::from_value(req.action.clone()).ok();
        let rec = ActionRec {
            answer: ActResponse {
                action_id,
                action: numeric.unwrap_or_default(),
                policy_version: req.policy_version,
                config_hash: req.config_hash,
                issued_at_ns,
                side_effect,
                trajectory_id: trajectory,
            },
            episode: id,
            key: req.idempotency_key,
            action_type,
            obs: observation,
            log_prob: log_prob.unwrap_or(0.0),
            value: 0.0,
            env_seq: req.env_seq,
            context: req.context,
            status: ActionStatus::Pending,
            recorded: Some(Recorded {
                action,
                log_prob,
                invalidated,
            }),
        };
        let answer = Self::record_answer(&rec);
        state.remember(rec.clone(), self.settings.remembered_actions);
        self.journal_action(&state, rec)?;
        Ok(answer)
    }

    fn record_answer(a: &ActionRec) -> RecordResponse {
        RecordResponse {
            action_id: a.answer.action_id,
            policy_version: a.answer.policy_version,
            config_hash: a.answer.config_hash.clone(),
            issued_at_ns: a.answer.issued_at_ns,
            side_effect: a.answer.side_effect,
            trajectory_id: a.answer.trajectory_id,
            invalidated: a.recorded.as_ref().and_then(|r| r.invalidated.clone()),
        }
    }

    /// A recorded version must have been published, with its own config hash (a version
    /// the retention rule removed is taken at its word).
    fn check_recorded_version(&self, version: u64, config_hash: &str) -> Result<(), RequestError> {
        if config_hash.trim().is_empty() {
            return Err(RequestError::invalid("config_hash is empty"));
        }
        if !self.policies.exists(version) {
            return self.require_version_number(version);
        }
        let expected = self.version_hash(version);
        if expected != config_hash {
            return Err(RequestError::invalid(format!(
                "config_hash {config_hash:?} is not version {version}'s ({expected:?})"
            )));
        }
        Ok(())
    }

    pub(super) fn owned_action<'a>(
        state: &'a mut State,
        caller: &Caller,
        action: u64,
    ) -> Result<&'a mut ActionRec, RequestError> {
        let a = state.actions.get(&action).ok_or_else(|| {
            RequestError::not_found(crate::ids::unknown("action", action, state.gateway_id))
        })?;
        let episode = a.episode;
        Self::own(state, caller, episode)?;
        Ok(state.actions.get_mut(&action).expect("checked"))
    }

    /// Invalidates an episode's current trajectory in the ledger and starts a new one; its
    /// outstanding action (if any) is cancelled. Returns once the invalidation is durable:
    /// the caller may acknowledge it.
    pub(super) fn invalidate_and_restart(
        &self,
        state: &mut State,
        episode: u64,
        reason: ReasonCode,
        text: &str,
        author: &str,
    ) -> Result<(), RequestError> {
        Ok(self
            .restart_trajectory(state, episode, reason, text, author)?
            .wait()?)
    }

    /// As [`Gateway::invalidate_and_restart`], the invalidation still on its way to disk:
    /// for many episodes at once, which then share one write.
    pub(super) fn restart_trajectory(
        &self,
        state: &mut State,
        episode: u64,
        reason: ReasonCode,
        text: &str,
        author: &str,
    ) -> Result<strata_ledger::Pending, RequestError> {
        let old = state.episodes[&episode].trajectory;
        let pending = self.ledger.invalidate_pending(Invalidation {
            target: Target::Trajectory { id: old },
            reason,
            text: text.to_string(),
            author: author.to_string(),
            rules_version: self.ledger.current().map_or(0, |(_, r)| r.version),
            at_ns: now_ns(),
        })?;
        self.inbox.invalidate(old);
        self.rows.lock().remove(&old);
        let next = state.next_trajectory;
        state.next_trajectory += 1;
        let e = state.episodes.get_mut(&episode).expect("episode");
        e.trajectory = next;
        if let Some(a) = e.withdraw_pending().and_then(|p| state.actions.get_mut(&p)) {
            if matches!(a.status, ActionStatus::Pending | ActionStatus::TimedOut) {
                a.status = ActionStatus::Cancelled;
            }
        }
        Ok(pending)
    }
}
