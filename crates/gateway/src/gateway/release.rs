//! Release control: versions published (by the learner or from a checkpoint), cooldown,
//! canary share, promotion and rollback, and the admission rules versions are bound to.

use super::*;

impl Gateway {
    /// The release state.
    pub fn status(&self) -> ReleaseStatus {
        let now = now_ns();
        let mut state = self.state.lock();
        state.release.refresh(now);
        let r = &state.release;
        ReleaseStatus {
            stable: r.stable,
            candidate: r.candidate,
            canary_fraction: r.canary_fraction,
            cooldown_secs: r.cooldown_secs,
            pending: r
                .pending
                .iter()
                .map(|p| {
                    (
                        p.version,
                        p.channel,
                        (p.ready_at_ns - now).max(0) as f64 / 1e9,
                    )
                })
                .collect(),
            latest: r.latest,
            open_episodes: state
                .episodes
                .values()
                .filter(|e| e.status != EpisodeStatus::Ended)
                .count(),
            updates: self.counters.updates.load(Ordering::Relaxed),
            rules_version: *self.active_rules.lock(),
            published: None,
        }
    }

    /// Applies an operator's change to the release under the state lock, journals the new
    /// release (synced) and answers the resulting status.
    pub(super) fn change_release(
        &self,
        change: impl FnOnce(&Self, &mut State) -> Result<(), RequestError>,
    ) -> Result<ReleaseStatus, RequestError> {
        {
            let mut state = self.state.lock();
            change(self, &mut state)?;
            self.journal_release(&state)?;
        }
        Ok(self.status())
    }

    /// `NotFound` unless `version` was published.
    pub(super) fn require_version(&self, version: u64) -> Result<(), RequestError> {
        if self.policies.exists(version) {
            return Ok(());
        }
        let release = &self.state.lock().release;
        Err(RequestError::not_found(
            if version <= release.retention.decided_upto {
                format!("policy version {version} was not kept: {}", retention::RULE)
            } else {
                format!("unknown policy version {version}")
            },
        ))
    }

    pub(super) fn journal_release(&self, state: &State) -> Result<(), RequestError> {
        self.journal(
            &Event::Release {
                release: state.release.clone(),
            },
            true,
        )
    }

    /// Stores `params` as the next version, binds it to the current admission rules and
    /// queues it for `channel` after the cooldown. Returns the version.
    ///
    /// # Errors
    /// Storage failures.
    pub fn publish_params(
        &self,
        params: Vec<f32>,
        channel: Channel,
        author: &str,
    ) -> Result<u64, RequestError> {
        let version = {
            let mut state = self.state.lock();
            state.release.latest += 1;
            state.release.latest
        };
        self.policies
            .insert(version, params)
            .map_err(|e| RequestError::unavailable(e.to_string()))?;
        self.bind_published(version, &self.config_hash, channel, author)?;
        Ok(version)
    }

    /// Stores an external version's reference as the next version and queues it as the
    /// canary candidate after the cooldown, as [`Gateway::publish_params`] does. Returns
    /// the version.
    ///
    /// # Errors
    /// `Invalid` a bad reference; storage failures.
    pub fn publish_external(
        &self,
        policy: ExternalPolicy,
        author: &str,
    ) -> Result<u64, RequestError> {
        policy.validate().map_err(RequestError::invalid)?;
        let version = {
            let mut state = self.state.lock();
            state.release.latest += 1;
            state.release.latest
        };
        let hash = policy.config_hash.clone();
        self.policies
            .insert_external(version, policy)
            .map_err(|e| RequestError::unavailable(e.to_string()))?;
        self.bind_published(version, &hash, Channel::Canary, author)?;
        Ok(version)
    }

    /// Binds a stored `version` to the admission rules in force and queues it.
    fn bind_published(
        &self,
        version: u64,
        config_hash: &str,
        channel: Channel,
        author: &str,
    ) -> Result<(), RequestError> {
        let rules = *self.active_rules.lock();
        self.ledger
            .bind(version, config_hash, rules, "publish", author)?;
        let mut state = self.state.lock();
        state.release.publish(version, channel, now_ns());
        if author != LEARNER {
            state.release.retention.pin(version);
        }
        self.journal_release(&state)?;
        Ok(())
    }

    /// The config hash of a stored version: an external version's own, else the
    /// gateway's.
    pub(super) fn version_hash(&self, version: u64) -> String {
        self.policies
            .external(version)
            .map_or_else(|| self.config_hash.clone(), |p| p.config_hash.clone())
    }

    /// Serves `params` as the stable version at once (`strata serve --checkpoint`):
    /// published as a new version and promoted at once by `author` (running episodes
    /// switch, their trajectories invalidated), unless the stable version holds exactly
    /// these parameters already (a restart with the same checkpoint). Returns the version
    /// and whether it was published now.
    ///
    /// # Errors
    /// Storage or journal failures.
    pub fn serve_params_now(
        &self,
        params: Vec<f32>,
        author: &str,
    ) -> Result<(u64, bool), RequestError> {
        let stable = self.status().stable;
        if self
            .policies
            .served(stable)
            .is_ok_and(|s| s.params == params)
        {
            return Ok((stable, false));
        }
        let version = self.publish_params(params, Channel::Stable, author)?;
        let operator = Caller {
            name: author.to_string(),
            role: crate::auth::Role::Operator,
        };
        self.promote(
            &operator,
            SwitchRequest {
                version: Some(version),
                force: true,
            },
        )?;
        Ok((version, true))
    }

    /// Publishes a checkpoint written by `strata train`, or an external version, as the
    /// canary candidate (after the cooldown).
    ///
    /// # Errors
    /// `Invalid` when the checkpoint is unreadable or for another env or network, when the
    /// external reference is bad, or when the request names neither or both.
    pub fn publish(
        &self,
        caller: &Caller,
        req: PublishRequest,
    ) -> Result<ReleaseStatus, RequestError> {
        let version = match (req.checkpoint, req.external) {
            (Some(checkpoint), None) => self.publish_checkpoint(caller, &checkpoint)?,
            (None, Some(external)) => self.publish_external(external, &caller.name)?,
            (None, None) => {
                return Err(RequestError::invalid(
                    "publish needs `checkpoint` (a directory written by strata train) or `external` (an artifact reference)",
                ))
            }
            (Some(_), Some(_)) => {
                return Err(RequestError::invalid(
                    "publish takes one of `checkpoint` and `external`, not both",
                ))
            }
        };
        Ok(ReleaseStatus {
            published: Some(version),
            ..self.status()
        })
    }

    fn publish_checkpoint(&self, caller: &Caller, checkpoint: &str) -> Result<u64, RequestError> {
        let policy = strata_learner::load_policy(Path::new(checkpoint))
            .map_err(|e| RequestError::invalid(e.to_string()))?;
        let ours = &self.settings.run;
        if policy.config.env.name != ours.env.name || policy.config.network != ours.network {
            return Err(RequestError::invalid(format!(
                "checkpoint {} is for env {:?} with network {:?}; this gateway serves {:?} with {:?}",
                checkpoint, policy.config.env.name, policy.config.network, ours.env.name, ours.network
            )));
        }
        if policy.config.env.normalize_obs {
            return Err(RequestError::invalid(format!(
                "checkpoint {checkpoint} normalises observations; the gateway serves raw observations"
            )));
        }
        self.publish_params(
            policy.model.flat_params().to_vec(),
            Channel::Canary,
            &caller.name,
        )
    }

    /// Sets the canary fraction.
    ///
    /// # Errors
    /// `Invalid` outside [0, 1].
    pub fn set_canary(&self, req: CanaryRequest) -> Result<ReleaseStatus, RequestError> {
        if !(0.0..=1.0).contains(&req.fraction) {
            return Err(RequestError::invalid(format!(
                "fraction {} is not in [0, 1]",
                req.fraction
            )));
        }
        self.change_release(|_, state| {
            state.release.canary_fraction = req.fraction;
            Ok(())
        })
    }

    /// Sets the cooldown for versions published from now on.
    ///
    /// # Errors
    /// `Invalid` for a negative or non-finite value.
    pub fn set_cooldown(&self, req: CooldownRequest) -> Result<ReleaseStatus, RequestError> {
        if !(req.seconds.is_finite() && req.seconds >= 0.0) {
            return Err(RequestError::invalid(format!(
                "seconds {} is not >= 0",
                req.seconds
            )));
        }
        self.change_release(|_, state| {
            state.release.cooldown_secs = req.seconds;
            Ok(())
        })
    }

    /// Promotes a version (the candidate by default) to stable after the cooldown; with
    /// `force`, at once and for running episodes too (their trajectories are invalidated).
    ///
    /// # Errors
    /// `NotFound` unknown version; `Conflict` no candidate.
    pub fn promote(
        &self,
        caller: &Caller,
        req: SwitchRequest,
    ) -> Result<ReleaseStatus, RequestError> {
        let version = {
            let state = self.state.lock();
            match req.version.or(state.release.candidate) {
                Some(v) => v,
                None => {
                    return Err(RequestError::conflict(
                        "no candidate to promote: name a version",
                    ))
                }
            }
        };
        self.require_version(version)?;
        let rules = self.ledger.rules_for_policy(version)?;
        // Shared with other gateways: the pointer moves first, or nothing does.
        self.move_pointer(ServingPointer {
            version,
            rules_version: rules.version,
            immediate: req.force,
            rules: Some(rules.rules.clone()),
            by_learner: false,
        })?;
        self.ledger.bind(
            version,
            &self.version_hash(version),
            rules.version,
            "promote",
            &caller.name,
        )?;
        self.change_release(|g, state| {
            state.release.promote(version, req.force, now_ns());
            state.release.retention.pin(version);
            if req.force {
                g.force_switch(state, version, &caller.name)?;
            }
            Ok(())
        })
    }

    /// Rolls back to `version`: it becomes stable at once (no cooldown) with the admission
    /// rules it was published with, the candidate is withdrawn, and the learner continues
    /// from its parameters — one `rollback` operation in the ledger. With `force`, running
    /// episodes switch too (their trajectories are invalidated).
    ///
    /// # Errors
    /// `Invalid` without a version; `NotFound` unknown version.
    pub fn rollback(
        &self,
        caller: &Caller,
        req: SwitchRequest,
    ) -> Result<ReleaseStatus, RequestError> {
        let version = req
            .version
            .ok_or_else(|| RequestError::invalid("rollback needs a version"))?;
        self.require_version(version)?;
        let bound = self.ledger.rules_for_policy(version)?;
        self.move_pointer(ServingPointer {
            version,
            rules_version: bound.version,
            immediate: true,
            rules: Some(bound.rules),
            by_learner: false,
        })?;
        let rules = self
            .ledger
            .rollback(version, &self.version_hash(version), &caller.name)?;
        *self.active_rules.lock() = rules.version;
        let status = self.change_release(|g, state| {
            state.release.pending.clear();
            state.release.candidate = None;
            state.release.stable = version;
            state.release.retention.pin(version);
            if req.force {
                g.force_switch(state, version, &caller.name)?;
            }
            Ok(())
        })?;
        self.inbox.roll_back(version);
        Ok(status)
    }

    pub(super) fn force_switch(
        &self,
        state: &mut State,
        version: u64,
        author: &str,
    ) -> Result<(), RequestError> {
        let running: Vec<u64> = state
            .episodes
            .values()
            .filter(|e| e.status != EpisodeStatus::Ended && e.version != version)
            .map(|e| e.id)
            .collect();
        let mut pending = Vec::with_capacity(running.len());
        for id in running {
            let from = state.episodes[&id].version;
            let text = format!("forced switch from version {from} to {version}");
            let p = self.restart_trajectory(state, id, ReasonCode::VersionSwitch, &text, author)?;
            pending.push((id, Some(p)));
            let e = state.episodes.get_mut(&id).expect("episode");
            e.version = version;
            e.reset_memory();
            e.channel = Channel::Stable;
            e.bucket = self.stable_bucket();
        }
        // Every switched trajectory's invalidation durable (in one write) before a switch
        // is journalled or answered: a journal never names a switch the ledger lacks.
        for (_, p) in &mut pending {
            if let Some(p) = p.take() {
                p.wait()?;
            }
        }
        for (id, _) in pending {
            self.journal_episode(state, id)?;
        }
        Ok(())
    }

    /// The admission rules the learner applies now.
    ///
    /// # Errors
    /// The registered version is unknown (cannot happen for a version set here).
    pub fn active_rules(&self) -> Result<strata_ledger::VersionedRules, RequestError> {
        let v = *self.active_rules.lock();
        Ok(self.ledger.rules(v)?)
    }

    /// Registers new admission rules: the learner applies them from its next update, and
    /// versions published from now on are bound to them (so rolling back to an older
    /// version restores that version's rules).
    ///
    /// # Errors
    /// `Invalid` naming the invalid key.
    pub fn set_rules(
        &self,
        rules: strata_ledger::AdmissionRules,
    ) -> Result<ReleaseStatus, RequestError> {
        if rules.rule == strata_ledger::RuleKind::Strict {
            return Err(RequestError::invalid(
                "rule `strict` admits only on-policy samples; deployed agents are always asynchronous (use `drop` or `decay`)",
            ));
        }
        let registered = self.ledger.register_rules(&rules).map_err(|e| match e {
            strata_ledger::LedgerError::InvalidRules(m) => {
                RequestError::invalid(format!("invalid admission rules: {m}"))
            }
            other => RequestError::from(other),
        })?;
        // Shared with other gateways and a learner elsewhere: the pointer carries the new
        // rules (same version), or nothing changes here.
        self.move_pointer_rules(registered.version, rules)?;
        *self.active_rules.lock() = registered.version;
        Ok(self.status())
    }
}
