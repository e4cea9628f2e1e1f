//! Reporting: outcomes stored durably before they are acknowledged, duplicates answered as
//! such, timeouts handled by the action's side-effect class, replays where it is safe.

use strata_ledger::Queued;

use super::*;

/// How a report goes on after its checks: answered already, a retry whose duplicate
/// record must be made durable, or a sample to make durable and then remember.
pub(super) enum Begun<'g> {
    /// Nothing to store: the answer.
    Answered(ReportResponse),
    /// A retry of a stored report: its duplicate record to make durable.
    Duplicate {
        /// The agent's idempotency key.
        key: String,
        /// The sample the first report stored.
        sample: u64,
        /// Its canary bucket.
        bucket: Bucket,
    },
    /// A new sample to make durable, then remember.
    Store(Box<ToStore<'g>>),
}

/// A checked report's sample, not yet durable, and what remembering it needs.
pub(super) struct ToStore<'g> {
    reservation: Reservation<'g>,
    action: u64,
    batch: Option<SampleBatch>,
    record: SampleRecord,
    episode: EpisodeRec,
    after: Vec<f32>,
    reward: f32,
    terminated: bool,
    ended: bool,
}

impl Gateway {
    /// Stores a report durably (answered only once it is in the ledger's synced log), or
    /// handles a timeout by the action's side-effect class.
    ///
    /// # Errors
    /// `Invalid` bad values; `NotFound` unknown action; `Conflict` an aborted or cancelled
    /// action; `Unavailable` when the
    /// ledger cannot store it (nothing acknowledged).
    pub fn report(
        &self,
        caller: &Caller,
        action: u64,
        req: ReportRequest,
    ) -> Result<ReportResponse, RequestError> {
        match self.begin_report(caller, action, req)? {
            Begun::Answered(answer) => Ok(answer),
            Begun::Duplicate {
                key,
                sample,
                bucket,
            } => self.answer_duplicate(key, sample, bucket),
            Begun::Store(mut store) => {
                let batch = store.batch.take().expect("a batch to store");
                self.ledger.append_samples_durable(batch)?;
                self.remember_report(*store)
            }
        }
    }

    /// [`Gateway::report`] for an async request handler on a multi-threaded runtime: the
    /// sample's durable append is awaited, not waited for on a blocking thread (two thread
    /// handoffs fewer per report). Run it to its end (spawn it): a report dropped while
    /// its sample is being made durable would not remember that it was stored.
    ///
    /// # Errors
    /// As [`Gateway::report`].
    pub async fn report_async(
        &self,
        caller: &Caller,
        action: u64,
        req: ReportRequest,
    ) -> Result<ReportResponse, RequestError> {
        if req.outcome == Outcome::Timeout {
            // A timeout may invalidate and restart the episode, which waits for durable
            // writes: in place, as the blocking path does.
            return tokio::task::block_in_place(|| self.report(caller, action, req));
        }
        match self.begin_report(caller, action, req)? {
            Begun::Answered(answer) => Ok(answer),
            // A retry's durable record (rare): waited for in place.
            Begun::Duplicate {
                key,
                sample,
                bucket,
            } => tokio::task::block_in_place(|| self.answer_duplicate(key, sample, bucket)),
            Begun::Store(mut store) => {
                let batch = store.batch.take().expect("a batch to store");
                let (tx, rx) = tokio::sync::oneshot::channel();
                let queued = self
                    .ledger
                    .try_append_samples_durable(batch, move |outcome| {
                        let _ = tx.send(outcome);
                    })?;
                match queued {
                    Queued::Queued => {
                        let wait = self.ledger.durable_answer_timeout();
                        match tokio::time::timeout(wait, rx).await {
                            Ok(Ok(outcome)) => outcome?,
                            Ok(Err(_)) => {
                                return Err(RequestError::unavailable(
                                    "the ledger's writer stopped before the report was durable",
                                ))
                            }
                            Err(_) => {
                                return Err(RequestError::unavailable(format!(
                                    "no answer from the ledger's writer within {wait:?}: the report is not acknowledged"
                                )))
                            }
                        }
                    }
                    // Overload: wait for room in place, as the blocking path does.
                    Queued::Full(batch) => {
                        tokio::task::block_in_place(|| self.ledger.append_samples_durable(*batch))?
                    }
                }
                self.remember_report(*store)
            }
        }
    }

    /// A report's checks, up to the sample it would store: what is answered at once, a
    /// duplicate, or the sample (its id reserved) to make durable.
    fn begin_report(
        &self,
        caller: &Caller,
        action: u64,
        req: ReportRequest,
    ) -> Result<Begun<'_>, RequestError> {
        let (rec, episode, sampler) = {
            let mut state = self.state.lock();
            let a = Self::owned_action(&mut state, caller, action)?;
            match a.status {
                ActionStatus::Reported { sample } => {
                    self.counters.duplicates.fetch_add(1, Ordering::Relaxed);
                    let (episode, key) = (a.episode, a.key.clone());
                    let e = &state.episodes[&episode];
                    let (key, bucket) = (agent_key(&e.agent, &key), e.bucket.clone());
                    return Ok(Begun::Duplicate {
                        key,
                        sample,
                        bucket,
                    });
                }
                ActionStatus::Unknown => {
                    return Ok(Begun::Answered(ReportResponse {
                        status: ReportStatus::StatusUnknown,
                        sample_id: None,
                        replay: Some("never".into()),
                    }))
                }
                ActionStatus::Aborted | ActionStatus::Cancelled => {
                    return Err(RequestError::conflict(format!(
                        "action {action} was {}: it must not have been executed",
                        if a.status == ActionStatus::Aborted {
                            "aborted by a re-check"
                        } else {
                            "cancelled"
                        }
                    )))
                }
                ActionStatus::Pending | ActionStatus::TimedOut => {}
            }
            if req.outcome == Outcome::Timeout {
                return self.timed_out(&mut state, action).map(Begun::Answered);
            }
            let a = a.clone();
            let e = state.episodes[&a.episode].clone();
            // The newest version any new episode would get now.
            let r = &state.release;
            (a, e, r.stable.max(r.candidate.unwrap_or(0)))
        };
        let after = req.observation_after.clone().ok_or_else(|| {
            RequestError::invalid("observation_after is required for an executed action")
        })?;
        let after = self.observation_row("observation_after", after)?;
        let reward = req
            .reward
            .ok_or_else(|| RequestError::invalid("reward is required for an executed action"))?;
        if !reward.is_finite() {
            return Err(RequestError::invalid("reward is not a finite number"));
        }
        let completed = req.completed_at_ns.unwrap_or_else(now_ns);
        if completed < rec.answer.issued_at_ns {
            return Err(RequestError::invalid(format!(
                "completed_at_ns {completed} is before the action was issued ({})",
                rec.answer.issued_at_ns
            )));
        }
        let during = match &req.during_execution {
            Some(d) => {
                for (name, v) in [("min", &d.min), ("max", &d.max), ("mean", &d.mean)] {
                    self.check_summary(&format!("during_execution.{name}"), v)?;
                }
                if d.count == 0 {
                    return Err(RequestError::invalid("during_execution.count is 0"));
                }
                d.clone()
            }
            None => {
                // The observation after counts once, summarised as the latency wrapper does.
                let mut s = strata_env::ExecSummary::with_images(1, self.obs_dim, &self.images);
                s.start(0);
                s.observe(0, &after);
                s.finish(0);
                ExecObservations {
                    count: 1,
                    hash: s.hash[0],
                    min: s.min,
                    max: s.max,
                    mean: s.mean,
                }
            }
        };
        let reservation = self.reserve_sample();
        let sample_id = reservation.id;
        let ended = req.terminated || req.truncated;
        // What a trainer elsewhere needs: the action as executed, and for an action the
        // agent chose with its own model the transition itself.
        let (executed, behaviour_log_prob, observation, next_observation) = match &rec.recorded {
            Some(r) => (
                r.action.clone(),
                r.log_prob,
                Some(f32_le_bytes(&rec.obs)),
                Some(f32_le_bytes(&after)),
            ),
            None => (
                serde_json::to_string(&rec.answer.action).expect("numbers serialise"),
                Some(rec.log_prob),
                None,
                None,
            ),
        };
        let record = SampleRecord {
            sample_id,
            episode_id: episode.id,
            trajectory_id: rec.answer.trajectory_id,
            step: episode.steps,
            policy_version: rec.answer.policy_version,
            config_hash: rec.answer.config_hash.clone(),
            issued_at_ns: rec.answer.issued_at_ns,
            completed_at_ns: completed,
            obs_count: during.count,
            obs_hash: during.hash,
            obs_min: during.min,
            obs_max: during.max,
            obs_mean: during.mean,
            env_clock: req.env_seq.unwrap_or(rec.env_seq + 1),
            sampler_version: sampler,
            bucket: episode.bucket.clone(),
            idempotency_key: Some(agent_key(&episode.agent, &rec.key)),
            reward,
            terminated: req.terminated,
            truncated: req.truncated,
            episode_return: if ended {
                Some(
                    req.episode_return
                        .unwrap_or(episode.reward_sum + f64::from(reward)),
                )
            } else {
                None
            },
            success: if ended { req.success } else { None },
            worker: None,
            fragment: None,
            action: Some(executed),
            behaviour_log_prob,
            observation,
            next_observation,
        };
        let mut batch =
            SampleBatch::new(&episode.bucket, &rec.answer.config_hash, self.summary_dim());
        batch.push(&record).map_err(RequestError::invalid)?;
        Ok(Begun::Store(Box::new(ToStore {
            reservation,
            action,
            batch: Some(batch),
            record,
            episode,
            after,
            reward,
            terminated: req.terminated,
            ended,
        })))
    }

    /// Remembers a report whose sample is durable: the action reported, the episode a step
    /// on, the learner's row, the journal.
    fn remember_report(&self, store: ToStore<'_>) -> Result<ReportResponse, RequestError> {
        let ToStore {
            reservation,
            action,
            record,
            episode,
            after,
            reward,
            terminated,
            ended,
            ..
        } = store;
        let sample_id = reservation.id;
        drop(reservation);
        let mut state = self.state.lock();
        let a = state.actions.get_mut(&action).expect("action");
        if let ActionStatus::Reported { sample } = a.status {
            // A concurrent retry stored it first; this copy was marked duplicate by the ledger.
            self.counters.duplicates.fetch_add(1, Ordering::Relaxed);
            return Ok(ReportResponse {
                status: ReportStatus::Duplicate,
                sample_id: Some(sample),
                replay: None,
            });
        }
        a.status = ActionStatus::Reported { sample: sample_id };
        let rec = a.clone();
        let e = state.episodes.get_mut(&rec.episode).expect("episode");
        e.steps += 1;
        e.reward_sum += f64::from(reward);
        let state_before = e.take_reported();
        e.last_seq = Some(record.env_clock);
        e.last_obs = Some(after.clone());
        e.last_activity_ns = now_ns();
        if ended {
            e.status = EpisodeStatus::Ended;
        }
        let (trajectory, version) = (e.trajectory, e.version);
        // Strata's learner trains on its own versions' steps only: a recorded action's
        // step is for the trainer that produced its version.
        if trajectory == rec.answer.trajectory_id && rec.recorded.is_none() {
            let held = self.add_row(
                &rec,
                &record,
                &state_before,
                (trajectory, version),
                &episode.bucket,
            );
            let full = held >= self.settings.run.ppo.n_steps;
            if ended || full {
                let bootstrap = if terminated {
                    Some(None)
                } else {
                    Some(Some(after.as_slice()))
                };
                self.cut(&state, rec.episode, bootstrap);
            }
        }
        if ended {
            state
                .episodes
                .get_mut(&rec.episode)
                .expect("episode")
                .release_memory();
        }
        self.counters.reports.fetch_add(1, Ordering::Relaxed);
        self.journal_action(&state, rec)?;
        Ok(ReportResponse {
            status: ReportStatus::Stored,
            sample_id: Some(sample_id),
            replay: None,
        })
    }

    /// Answers a retried report once its duplicate's record is durable, as a report is.
    fn answer_duplicate(
        &self,
        key: String,
        sample: u64,
        bucket: Bucket,
    ) -> Result<ReportResponse, RequestError> {
        self.record_duplicate(key, sample, bucket)?;
        Ok(ReportResponse {
            status: ReportStatus::Duplicate,
            sample_id: Some(sample),
            replay: None,
        })
    }

    pub(super) fn record_duplicate(
        &self,
        key: String,
        sample: u64,
        bucket: Bucket,
    ) -> Result<(), RequestError> {
        let row = strata_ledger::DuplicateRecord {
            idempotency_key: key,
            original_sample: sample,
            bucket,
            at_ns: now_ns(),
        };
        self.ledger.record_duplicate(row)?;
        Ok(())
    }

    pub(super) fn timed_out(
        &self,
        state: &mut State,
        action: u64,
    ) -> Result<ReportResponse, RequestError> {
        let a = state.actions.get_mut(&action).expect("action");
        let class = a.answer.side_effect;
        let episode = a.episode;
        if class == SideEffect::Unsafe {
            a.status = ActionStatus::Unknown;
            let rec = a.clone();
            let text = format!(
                "action {action} ({}, unsafe) timed out: status unknown, never replayed",
                rec.action_type
            );
            self.invalidate_and_restart(
                state,
                episode,
                ReasonCode::StatusUnknown,
                &text,
                "gateway",
            )?;
            self.journal_action(state, rec)?;
            return Ok(ReportResponse {
                status: ReportStatus::StatusUnknown,
                sample_id: None,
                replay: Some("never".into()),
            });
        }
        a.status = ActionStatus::TimedOut;
        let rec = a.clone();
        self.journal(&Event::Action { action: rec }, false)?;
        Ok(ReportResponse {
            status: ReportStatus::TimedOut,
            sample_id: None,
            replay: Some(
                if class == SideEffect::Queryable {
                    "query_first"
                } else {
                    "allowed"
                }
                .into(),
            ),
        })
    }

    /// Allows re-executing a timed-out action when its class permits: read-only and
    /// idempotent always, queryable after the query says it did not happen, unsafe never.
    ///
    /// # Errors
    /// `Conflict` when replay is not allowed; `Invalid` a queryable action without a query result.
    pub fn replay(
        &self,
        caller: &Caller,
        action: u64,
        req: ReplayRequest,
    ) -> Result<ActResponse, RequestError> {
        let mut state = self.state.lock();
        let a = Self::owned_action(&mut state, caller, action)?;
        match a.status {
            ActionStatus::TimedOut => {}
            ActionStatus::Unknown => {
                return Err(RequestError::conflict(format!(
                    "action {action} is unsafe and its status is unknown: it is never replayed"
                )))
            }
            other => {
                return Err(RequestError::conflict(format!(
                    "action {action} did not time out ({other:?}): nothing to replay"
                )))
            }
        }
        match (a.answer.side_effect, req.query_result.as_deref()) {
            (SideEffect::ReadOnly | SideEffect::Idempotent, _) => {}
            (SideEffect::Queryable, Some("not_happened")) => {}
            (SideEffect::Queryable, Some("happened")) => {
                return Err(RequestError::conflict(format!(
                    "action {action} happened: report its outcome instead of replaying it"
                )))
            }
            (SideEffect::Queryable, other) => {
                return Err(RequestError::invalid(format!(
                    "action {action} is queryable: replay needs query_result `not_happened` (got {other:?})"
                )))
            }
            (SideEffect::Unsafe, _) => unreachable!("unsafe timeouts become Unknown"),
        }
        a.status = ActionStatus::Pending;
        let rec = a.clone();
        self.journal(
            &Event::Action {
                action: Box::new(rec.clone()),
            },
            false,
        )?;
        Ok(rec.answer)
    }
}

/// A sample id reserved by a report, given up when dropped (stored or failed).
pub(super) struct Reservation<'g> {
    gateway: &'g Gateway,
    /// The id.
    pub(super) id: u64,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.gateway.in_flight.lock().remove(&self.id);
    }
}

impl Gateway {
    /// Reserves the next sample id until the returned reservation is dropped.
    pub(super) fn reserve_sample(&self) -> Reservation<'_> {
        // Under the lock: a reader of the horizon sees an id reserved or not yet handed out.
        let mut in_flight = self.in_flight.lock();
        let id = self.ledger.reserve_sample_ids(1);
        in_flight.insert(id);
        Reservation { gateway: self, id }
    }

    /// Every sample id below this one is durable in the ledger or will never be.
    pub(super) fn durable_horizon(&self) -> u64 {
        let in_flight = self.in_flight.lock();
        in_flight
            .first()
            .copied()
            .unwrap_or_else(|| self.ledger.next_sample_id())
    }
}
