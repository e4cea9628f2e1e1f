//! The gateway's operations, independent of HTTP: episodes pinned to versions, acts with
//! idempotency, re-checks, durable reports, side-effect-aware replay, and the operator's
//! release controls. Every state change is journalled before it is answered.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Mutex;

use rand::SeedableRng;
use strata_ledger::{
    now_ns, Invalidation, Ledger, LedgerConfig, LedgerData, ReasonCode, SampleBatch, SampleRecord,
    Target,
};
use strata_nn::{Head, SampleRng};

use crate::api::*;
use crate::auth::{Auth, Caller, TokensFile};
use crate::error::{ApiError, GatewayError};
use crate::journal::Journal;
use crate::learner::Segment;
use crate::policies::PolicyStore;
use crate::settings::{GatewaySettings, ReleaseMode};
use crate::state::{agent_key, ActionRec, ActionStatus, EpisodeRec, Event, State};

/// The bucket canary samples go to.
pub const CANARY_BUCKET: &str = "canary";

/// Trajectories invalidated lately, which the learner skips if their segments are already
/// queued. Bounded: a queued segment is trained on within seconds, so the oldest entries
/// can be forgotten.
#[derive(Default)]
pub(crate) struct RecentlyInvalid {
    set: HashSet<u64>,
    order: std::collections::VecDeque<u64>,
}

impl RecentlyInvalid {
    const CAPACITY: usize = 1 << 16;

    fn insert(&mut self, trajectory: u64) {
        if self.set.insert(trajectory) {
            self.order.push_back(trajectory);
            if self.order.len() > Self::CAPACITY {
                let oldest = self.order.pop_front().expect("non-empty");
                self.set.remove(&oldest);
            }
        }
    }

    /// Whether `trajectory` was invalidated lately.
    pub(crate) fn contains(&self, trajectory: u64) -> bool {
        self.set.contains(&trajectory)
    }
}

/// Counters for status and benchmarks.
#[derive(Default)]
pub struct Counters {
    /// Acts answered (retries included).
    pub acts: AtomicU64,
    /// Reports stored.
    pub reports: AtomicU64,
    /// Reports answered as duplicates.
    pub duplicates: AtomicU64,
    /// Re-check aborts.
    pub aborts: AtomicU64,
    /// Re-checks that put an episode on hold.
    pub holds: AtomicU64,
    /// Segments the learner's full queue could not take.
    pub segments_dropped: AtomicU64,
    /// Learner updates.
    pub updates: AtomicU64,
}

/// A running gateway's state and operations.
pub struct Gateway {
    pub(crate) settings: GatewaySettings,
    config_hash: String,
    obs_dim: usize,
    action_dim: usize,
    pub(crate) ledger: Ledger,
    journal: Journal,
    state: Mutex<State>,
    /// Training rows per trajectory, gathered until it is cut.
    rows: Mutex<std::collections::HashMap<u64, Segment>>,
    pub(crate) policies: PolicyStore,
    pub(crate) auth: Auth,
    pub(crate) tokens: TokensFile,
    learner_tx: Mutex<Option<SyncSender<Segment>>>,
    /// Trajectories invalidated while their samples may still await training.
    pub(crate) invalidated: Mutex<RecentlyInvalid>,
    /// A rollback for the learner to apply: the version whose parameters it continues from.
    pub(crate) reset_learner: Mutex<Option<u64>>,
    /// The admission-rules version the learner applies and new versions are bound to.
    active_rules: Mutex<u64>,
    /// Counters.
    pub counters: Counters,
    /// Size of the journal's last snapshot.
    snapshot_bytes: AtomicU64,
}

impl Gateway {
    /// Opens the gateway's directory: tokens, policies (version 0 is a fresh model), the
    /// ledger (recovered) and the journal (replayed, so open episodes continue).
    ///
    /// # Errors
    /// Invalid settings, or unreadable state.
    pub fn open(settings: GatewaySettings) -> Result<Gateway, GatewayError> {
        settings.validate()?;
        let dir = settings.dir.clone();
        std::fs::create_dir_all(&dir).map_err(|e| GatewayError::io(&dir, e))?;
        let tokens = TokensFile::load_or_create(&dir.join("tokens.json"), settings.agent_tokens)?;
        let auth = Auth::new(&tokens, settings.rate_limit, settings.rate_burst);
        let run = &settings.run;
        let config_hash = run.config_hash();
        let spec =
            strata_env::spec_for(&run.env.name).map_err(strata_runtime::RuntimeError::from)?;
        let model = strata_runtime::build_model(run)?;
        let action_dim = match model.head() {
            Head::Categorical { .. } => 1,
            Head::Gaussian { dim } => dim,
        };
        let policies = PolicyStore::open(&dir.join("policies"), run, 64)?;
        if !policies.exists(0) {
            policies.insert(0, model.flat_params().to_vec())?;
        }
        let location = run
            .ledger
            .location
            .clone()
            .unwrap_or_else(|| dir.join("ledger").display().to_string());
        let mut ledger_config = LedgerConfig::new(location);
        ledger_config.flush_rows = run.ledger.flush_rows;
        ledger_config.flush_interval =
            std::time::Duration::from_secs_f64(run.ledger.flush_interval_secs);
        let ledger = Ledger::open(&ledger_config)?;
        let active_rules = match ledger.current() {
            Some((_, rules)) => rules.version,
            None => {
                let rules = ledger.register_rules(&run.admission)?;
                ledger.bind(0, &config_hash, rules.version, "publish", "gateway")?;
                rules.version
            }
        };
        let keep = settings.remembered_actions;
        let journal_path = dir.join("journal.jsonl");
        let mut state = State::new(0, settings.cooldown_secs, settings.canary_fraction);
        Journal::replay(&journal_path, |e: Event| state.apply(e, keep))?;
        let journal = Journal::rewrite(
            &journal_path,
            &Event::Snapshot {
                state: Box::new(state.clone()),
            },
        )?;
        if !state.episodes.is_empty() {
            tracing::info!(
                component = "gateway",
                episodes = state.episodes.len(),
                actions = state.actions.len(),
                "journal replayed"
            );
        }
        let gateway = Gateway {
            config_hash,
            obs_dim: spec.obs_dim(),
            action_dim,
            ledger,
            journal,
            state: Mutex::new(state),
            rows: Mutex::new(Default::default()),
            policies,
            auth,
            tokens,
            learner_tx: Mutex::new(None),
            invalidated: Mutex::new(RecentlyInvalid::default()),
            reset_learner: Mutex::new(None),
            active_rules: Mutex::new(active_rules),
            counters: Counters::default(),
            snapshot_bytes: AtomicU64::new(0),
            settings,
        };
        gateway.settle_reports_in_flight()?;
        Ok(gateway)
    }

    /// After a crash, an action may be durable in the ledger but not yet journalled as
    /// reported: find those by idempotency key so a retried report is a duplicate.
    fn settle_reports_in_flight(&self) -> Result<(), GatewayError> {
        let mut state = self.state.lock().expect("state");
        let pending: std::collections::HashMap<String, u64> = state
            .actions
            .values()
            .filter(|a| matches!(a.status, ActionStatus::Pending | ActionStatus::TimedOut))
            .map(|a| {
                let agent = state
                    .episodes
                    .get(&a.episode)
                    .map_or("", |e| e.agent.as_str());
                (ledger_key(agent, &a.key), a.answer.action_id)
            })
            .collect();
        if pending.is_empty() {
            return Ok(());
        }
        let data = LedgerData::read(self.ledger.storage())?;
        for b in &data.samples {
            for i in 0..b.len() {
                let Some(key) = &b.idempotency_key[i] else {
                    continue;
                };
                let Some(&action) = pending.get(key) else {
                    continue;
                };
                let a = state.actions.get_mut(&action).expect("pending action");
                if a.answer.policy_version == b.policy_version[i] {
                    a.status = ActionStatus::Reported {
                        sample: b.sample_id[i],
                    };
                    let episode = a.episode;
                    if let Some(e) = state.episodes.get_mut(&episode) {
                        if e.pending == Some(action) {
                            e.pending = None;
                            e.steps += 1;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The learner's queue.
    pub(crate) fn attach_learner(&self, tx: SyncSender<Segment>) {
        *self.learner_tx.lock().expect("learner tx") = Some(tx);
    }

    /// The config hash of the served model.
    pub fn config_hash(&self) -> &str {
        &self.config_hash
    }

    /// Observation width.
    pub fn obs_dim(&self) -> usize {
        self.obs_dim
    }

    /// The tokens in use.
    pub fn tokens(&self) -> &TokensFile {
        &self.tokens
    }

    /// The ledger.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Bytes in the journal now.
    pub fn journal_size(&self) -> u64 {
        self.journal.size()
    }

    fn journal(&self, event: &Event, sync: bool) -> Result<(), ApiError> {
        self.journal
            .append(event, sync)
            .map_err(|e| ApiError::internal(e.to_string()))
    }

    /// Journals an action's record with its episode's (both may have changed).
    fn journal_action(&self, state: &State, action: ActionRec) -> Result<(), ApiError> {
        let episode = state.episodes[&action.episode].clone();
        self.journal(
            &Event::ActionEpisode {
                action: Box::new(action),
                episode,
            },
            false,
        )
    }

    fn journal_episode(&self, state: &State, id: u64) -> Result<(), ApiError> {
        self.journal(
            &Event::Episode {
                episode: state.episodes[&id].clone(),
                next_trajectory: state.next_trajectory,
            },
            false,
        )
    }

    fn info(&self, e: &EpisodeRec) -> EpisodeInfo {
        EpisodeInfo {
            episode_id: e.id,
            policy_version: e.version,
            config_hash: self.config_hash.clone(),
            channel: e.channel,
            bucket: e.bucket.clone(),
            trajectory_id: e.trajectory,
            status: e.status,
            steps: e.steps,
            pending_action: e.pending,
            obs_dim: self.obs_dim,
            action_dim: self.action_dim,
        }
    }

    fn stable_bucket(&self) -> String {
        self.settings.run.ledger.bucket.clone()
    }

    /// Starts an episode pinned to the stable version, or the candidate for a canary
    /// fraction of episodes (chosen by a hash of the episode id).
    ///
    /// # Errors
    /// Journal failures.
    pub fn start_episode(
        &self,
        caller: &Caller,
        req: StartEpisodeRequest,
    ) -> Result<EpisodeInfo, ApiError> {
        let now = now_ns();
        let mut state = self.state.lock().expect("state");
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
                CANARY_BUCKET.to_string(),
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
        };
        if let Some(k) = &req.idempotency_key {
            state.episode_keys.insert(agent_key(&caller.name, k), id);
        }
        state.episodes.insert(id, episode);
        self.journal_episode(&state, id)?;
        Ok(self.info(&state.episodes[&id]))
    }

    fn own<'a>(
        state: &'a mut State,
        caller: &Caller,
        id: u64,
    ) -> Result<&'a mut EpisodeRec, ApiError> {
        let e = state
            .episodes
            .get_mut(&id)
            .ok_or_else(|| ApiError::not_found(format!("unknown episode {id}")))?;
        if e.agent != caller.name {
            return Err(ApiError::forbidden(format!(
                "episode {id} belongs to another agent"
            )));
        }
        Ok(e)
    }

    /// An episode's state (its owner or an operator).
    ///
    /// # Errors
    /// 404 unknown, 403 another agent's.
    pub fn episode(&self, caller: &Caller, id: u64) -> Result<EpisodeInfo, ApiError> {
        let mut state = self.state.lock().expect("state");
        if caller.role == crate::auth::Role::Operator {
            let e = state
                .episodes
                .get(&id)
                .ok_or_else(|| ApiError::not_found(format!("unknown episode {id}")))?;
            return Ok(self.info(e));
        }
        let e = Self::own(&mut state, caller, id)?;
        Ok(self.info(e))
    }

    fn check_vector(&self, name: &str, v: &[f32]) -> Result<(), ApiError> {
        if v.len() != self.obs_dim {
            return Err(ApiError::bad_request(format!(
                "{name} has {} values; the policy expects {}",
                v.len(),
                self.obs_dim
            )));
        }
        if let Some(i) = v.iter().position(|x| !x.is_finite()) {
            return Err(ApiError::bad_request(format!(
                "{name}[{i}] is not a finite number"
            )));
        }
        Ok(())
    }

    fn side_effect(&self, action_type: &str) -> Result<SideEffect, ApiError> {
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
                ApiError::bad_request(format!(
                    "unknown action_type {action_type:?} (known: {})",
                    known.join(", ")
                ))
            })
    }

    /// Chooses an action with the episode's pinned version. The same idempotency key gets
    /// the same answer; one action per episode is outstanding at a time.
    ///
    /// # Errors
    /// 400 bad observation or action type; 404/403 episode; 409 wrong state.
    pub fn act(&self, caller: &Caller, id: u64, req: ActRequest) -> Result<ActResponse, ApiError> {
        self.counters.acts.fetch_add(1, Ordering::Relaxed);
        self.check_vector("observation", &req.observation)?;
        if req.idempotency_key.is_empty() {
            return Err(ApiError::bad_request("idempotency_key is empty"));
        }
        let action_type = req.action_type.clone().unwrap_or_else(|| "default".into());
        let side_effect = self.side_effect(&action_type)?;
        if let Some(t) = req.context.as_ref().and_then(|c| c.target.as_ref()) {
            if t.iter().any(|x| !x.is_finite()) {
                return Err(ApiError::bad_request(
                    "context.target holds a non-finite number",
                ));
            }
        }
        let key = agent_key(&caller.name, &req.idempotency_key);
        let (version, trajectory) = {
            let mut state = self.state.lock().expect("state");
            if let Some(a) = state
                .action_keys
                .get(&key)
                .and_then(|a| state.actions.get(a))
            {
                if a.episode != id {
                    return Err(ApiError::conflict(format!(
                        "idempotency key {:?} was used for episode {}",
                        req.idempotency_key, a.episode
                    )));
                }
                return Ok(a.answer.clone());
            }
            let e = Self::own(&mut state, caller, id)?;
            Self::check_active(e)?;
            if let Some(p) = e.pending {
                return Err(ApiError::conflict(format!(
                    "episode {id} has action {p} outstanding: report it first"
                )));
            }
            (e.version, e.trajectory)
        };
        let policy = self.policies.get(version)?;
        let mut action = vec![0.0; self.action_dim];
        let (mut log_prob, mut value) = ([0.0f32], [0.0f32]);
        {
            let seed = xxhash_rust::xxh3::xxh3_64(key.as_bytes()) ^ self.settings.run.train.seed;
            let mut rng = SampleRng::seed_from_u64(seed);
            let mut model = policy.model.lock().expect("model");
            model.act(
                &req.observation,
                &mut rng,
                &[],
                &mut action,
                &mut log_prob,
                &mut value,
            );
        }
        let mut state = self.state.lock().expect("state");
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
            return Err(ApiError::conflict(format!(
                "episode {id} changed while acting: retry"
            )));
        }
        e.pending = Some(action_id);
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
            obs: req.observation,
            log_prob: log_prob[0],
            value: value[0],
            env_seq: req.env_seq,
            context: req.context,
            status: ActionStatus::Pending,
        };
        state.remember(rec.clone(), self.settings.remembered_actions);
        self.journal_action(&state, rec)?;
        Ok(answer)
    }

    fn check_active(e: &EpisodeRec) -> Result<(), ApiError> {
        match e.status {
            EpisodeStatus::Active => Ok(()),
            EpisodeStatus::AwaitingConfirmation => Err(ApiError::conflict(format!(
                "episode {} awaits an operator's confirmation",
                e.id
            ))),
            EpisodeStatus::Ended => Err(ApiError::conflict(format!("episode {} has ended", e.id))),
        }
    }

    fn owned_action<'a>(
        state: &'a mut State,
        caller: &Caller,
        action: u64,
    ) -> Result<&'a mut ActionRec, ApiError> {
        let a = state
            .actions
            .get(&action)
            .ok_or_else(|| ApiError::not_found(format!("unknown action {action}")))?;
        let episode = a.episode;
        Self::own(state, caller, episode)?;
        Ok(state.actions.get_mut(&action).expect("checked"))
    }

    /// Compares the agent's current view with the one the action was chosen on.
    ///
    /// # Errors
    /// 404/403 action; 409 an action no longer outstanding; 400 a bad view.
    pub fn recheck(
        &self,
        caller: &Caller,
        action: u64,
        req: RecheckRequest,
    ) -> Result<RecheckResponse, ApiError> {
        let mut state = self.state.lock().expect("state");
        let a = Self::owned_action(&mut state, caller, action)?;
        if a.status != ActionStatus::Pending {
            return Err(ApiError::conflict(format!(
                "action {action} is not outstanding ({:?})",
                a.status
            )));
        }
        let context = a.context.clone().unwrap_or_default();
        let episode = a.episode;
        if let Some(extra) = req.ui_top_level.as_ref().and_then(|now| {
            let before = context.ui_top_level.clone().unwrap_or_default();
            now.iter().find(|el| !before.contains(el)).cloned()
        }) {
            a.status = ActionStatus::Cancelled;
            let rec = a.clone();
            // A person will step in: the trajectory is recorded as interrupted (so the
            // hold shows in the ledger) and the episode resumes on a new one.
            let text = format!(
                "action {action}: unexpected top-level element {extra:?}; held for an operator"
            );
            self.invalidate_and_restart(
                &mut state,
                episode,
                ReasonCode::HumanInterrupt,
                &text,
                "gateway",
            )?;
            let e = state.episodes.get_mut(&episode).expect("episode");
            e.status = EpisodeStatus::AwaitingConfirmation;
            self.counters.holds.fetch_add(1, Ordering::Relaxed);
            self.journal_action(&state, rec)?;
            return Ok(RecheckResponse {
                verdict: Verdict::NeedsHuman,
                reason: format!(
                    "unexpected top-level element {extra:?}: episode {episode} awaits an operator's confirmation"
                ),
            });
        }
        if let (Some(before), Some(now)) = (&context.target, &req.target) {
            if before.len() != now.len() || now.iter().any(|x| !x.is_finite()) {
                return Err(ApiError::bad_request(format!(
                    "target must hold {} finite numbers",
                    before.len()
                )));
            }
            let moved = before
                .iter()
                .zip(now)
                .map(|(a, b)| (a - b) * (a - b))
                .sum::<f32>()
                .sqrt();
            if moved > self.settings.recheck_threshold {
                a.status = ActionStatus::Aborted;
                let rec = a.clone();
                let text = format!(
                    "action {action}: target moved {moved:.4} (threshold {}) before it executed",
                    self.settings.recheck_threshold
                );
                self.invalidate_and_restart(
                    &mut state,
                    episode,
                    ReasonCode::ObservationStale,
                    &text,
                    "gateway",
                )?;
                self.counters.aborts.fetch_add(1, Ordering::Relaxed);
                self.journal_action(&state, rec)?;
                return Ok(RecheckResponse {
                    verdict: Verdict::Abort,
                    reason: text,
                });
            }
        }
        Ok(RecheckResponse {
            verdict: Verdict::Proceed,
            reason: "the view matches the one the action was chosen on".into(),
        })
    }

    /// Invalidates an episode's current trajectory in the ledger and starts a new one; its
    /// outstanding action (if any) is cancelled.
    fn invalidate_and_restart(
        &self,
        state: &mut State,
        episode: u64,
        reason: ReasonCode,
        text: &str,
        author: &str,
    ) -> Result<(), ApiError> {
        let old = state.episodes[&episode].trajectory;
        self.ledger.invalidate(Invalidation {
            target: Target::Trajectory { id: old },
            reason,
            text: text.to_string(),
            author: author.to_string(),
            rules_version: self.ledger.current().map_or(0, |(_, r)| r.version),
            at_ns: now_ns(),
        })?;
        self.invalidated.lock().expect("invalidated").insert(old);
        self.rows.lock().expect("rows").remove(&old);
        let next = state.next_trajectory;
        state.next_trajectory += 1;
        let e = state.episodes.get_mut(&episode).expect("episode");
        e.trajectory = next;
        if let Some(a) = e.pending.take().and_then(|p| state.actions.get_mut(&p)) {
            if matches!(a.status, ActionStatus::Pending | ActionStatus::TimedOut) {
                a.status = ActionStatus::Cancelled;
            }
        }
        Ok(())
    }

    /// Stores a report durably (answered only once it is in the ledger's synced log), or
    /// handles a timeout by the action's side-effect class.
    ///
    /// # Errors
    /// 400 bad values; 404 unknown action; 409 an aborted or cancelled action; 503 when the
    /// ledger cannot store it (nothing acknowledged).
    pub fn report(
        &self,
        caller: &Caller,
        action: u64,
        req: ReportRequest,
    ) -> Result<ReportResponse, ApiError> {
        let (rec, episode, sampler) = {
            let mut state = self.state.lock().expect("state");
            let a = Self::owned_action(&mut state, caller, action)?;
            match a.status {
                ActionStatus::Reported { sample } => {
                    self.counters.duplicates.fetch_add(1, Ordering::Relaxed);
                    let (episode, key) = (a.episode, a.key.clone());
                    let e = &state.episodes[&episode];
                    let (key, bucket) = (ledger_key(&e.agent, &key), e.bucket.clone());
                    drop(state);
                    // Answered only once the duplicate's record is durable, as a report is.
                    self.record_duplicate(key, sample, bucket)?;
                    return Ok(ReportResponse {
                        status: ReportStatus::Duplicate,
                        sample_id: Some(sample),
                        replay: None,
                    });
                }
                ActionStatus::Unknown => {
                    return Ok(ReportResponse {
                        status: ReportStatus::StatusUnknown,
                        sample_id: None,
                        replay: Some("never".into()),
                    })
                }
                ActionStatus::Aborted | ActionStatus::Cancelled => {
                    return Err(ApiError::conflict(format!(
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
                return self.timed_out(&mut state, action);
            }
            let a = a.clone();
            let e = state.episodes[&a.episode].clone();
            // The newest version any new episode would get now.
            let r = &state.release;
            (a, e, r.stable.max(r.candidate.unwrap_or(0)))
        };
        let after = req.observation_after.as_ref().ok_or_else(|| {
            ApiError::bad_request("observation_after is required for an executed action")
        })?;
        self.check_vector("observation_after", after)?;
        let reward = req
            .reward
            .ok_or_else(|| ApiError::bad_request("reward is required for an executed action"))?;
        if !reward.is_finite() {
            return Err(ApiError::bad_request("reward is not a finite number"));
        }
        let completed = req.completed_at_ns.unwrap_or_else(now_ns);
        if completed < rec.answer.issued_at_ns {
            return Err(ApiError::bad_request(format!(
                "completed_at_ns {completed} is before the action was issued ({})",
                rec.answer.issued_at_ns
            )));
        }
        let during = match &req.during_execution {
            Some(d) => {
                for (name, v) in [("min", &d.min), ("max", &d.max), ("mean", &d.mean)] {
                    self.check_vector(&format!("during_execution.{name}"), v)?;
                }
                if d.count == 0 {
                    return Err(ApiError::bad_request("during_execution.count is 0"));
                }
                d.clone()
            }
            None => {
                // The observation after counts once, summarised as the latency wrapper does.
                let mut s = strata_env::ExecSummary::new(1, self.obs_dim);
                s.start(0);
                s.observe(0, after);
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
        let sample_id = self.ledger.reserve_sample_ids(1);
        let ended = req.terminated || req.truncated;
        let record = SampleRecord {
            sample_id,
            episode_id: episode.id,
            trajectory_id: rec.answer.trajectory_id,
            step: episode.steps,
            policy_version: rec.answer.policy_version,
            config_hash: self.config_hash.clone(),
            issued_at_ns: rec.answer.issued_at_ns,
            completed_at_ns: completed,
            obs_count: during.count,
            obs_hash: during.hash,
            obs_min: during.min,
            obs_max: during.max,
            obs_mean: during.mean,
            env_clock: req.env_seq.unwrap_or(rec.env_seq + 1),
            sampler_version: sampler,
            newer_policy_sampling: sampler > rec.answer.policy_version,
            bucket: episode.bucket.clone(),
            idempotency_key: Some(ledger_key(&episode.agent, &rec.key)),
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
        };
        let mut batch = SampleBatch::new(&episode.bucket, &self.config_hash, self.obs_dim);
        batch.push(&record).map_err(ApiError::bad_request)?;
        self.ledger.append_samples_durable(batch)?;
        // Durable: now remember it.
        let mut state = self.state.lock().expect("state");
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
        e.pending = None;
        e.last_seq = Some(record.env_clock);
        e.last_obs = Some(after.clone());
        e.last_activity_ns = now_ns();
        if ended {
            e.status = EpisodeStatus::Ended;
        }
        let (trajectory, version) = (e.trajectory, e.version);
        if trajectory == rec.answer.trajectory_id {
            let held = self.add_row(&rec, &record, trajectory, version, &episode.bucket);
            let full = held >= self.settings.run.ppo.n_steps;
            if ended || full {
                let bootstrap = if req.terminated {
                    Some(None)
                } else {
                    Some(Some(after.as_slice()))
                };
                self.cut(&state, rec.episode, bootstrap);
            }
        }
        self.counters.reports.fetch_add(1, Ordering::Relaxed);
        self.journal_action(&state, rec)?;
        Ok(ReportResponse {
            status: ReportStatus::Stored,
            sample_id: Some(sample_id),
            replay: None,
        })
    }

    fn record_duplicate(&self, key: String, sample: u64, bucket: String) -> Result<(), ApiError> {
        let row = strata_ledger::DuplicateRecord {
            idempotency_key: key,
            original_sample: sample,
            bucket,
            at_ns: now_ns(),
        };
        self.ledger.record_duplicate(row)?;
        Ok(())
    }

    fn timed_out(&self, state: &mut State, action: u64) -> Result<ReportResponse, ApiError> {
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
        self.journal(
            &Event::Action {
                action: Box::new(rec),
            },
            false,
        )?;
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
    /// 409 when replay is not allowed; 400 a queryable action without a query result.
    pub fn replay(
        &self,
        caller: &Caller,
        action: u64,
        req: ReplayRequest,
    ) -> Result<ActResponse, ApiError> {
        let mut state = self.state.lock().expect("state");
        let a = Self::owned_action(&mut state, caller, action)?;
        match a.status {
            ActionStatus::TimedOut => {}
            ActionStatus::Unknown => {
                return Err(ApiError::conflict(format!(
                    "action {action} is unsafe and its status is unknown: it is never replayed"
                )))
            }
            other => {
                return Err(ApiError::conflict(format!(
                    "action {action} did not time out ({other:?}): nothing to replay"
                )))
            }
        }
        match (a.answer.side_effect, req.query_result.as_deref()) {
            (SideEffect::ReadOnly | SideEffect::Idempotent, _) => {}
            (SideEffect::Queryable, Some("not_happened")) => {}
            (SideEffect::Queryable, Some("happened")) => {
                return Err(ApiError::conflict(format!(
                    "action {action} happened: report its outcome instead of replaying it"
                )))
            }
            (SideEffect::Queryable, other) => {
                return Err(ApiError::bad_request(format!(
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

    /// Ends an episode (again: no change).
    ///
    /// # Errors
    /// 404/403 episode.
    pub fn end_episode(&self, caller: &Caller, id: u64) -> Result<EpisodeInfo, ApiError> {
        let mut state = self.state.lock().expect("state");
        let e = Self::own(&mut state, caller, id)?;
        if e.status != EpisodeStatus::Ended {
            self.close_episode(&mut state, id)?;
        }
        Ok(self.info(&state.episodes[&id]))
    }

    fn close_episode(&self, state: &mut State, id: u64) -> Result<(), ApiError> {
        let e = state.episodes.get_mut(&id).expect("episode");
        e.status = EpisodeStatus::Ended;
        if let Some(p) = e.pending.take() {
            if let Some(a) = state.actions.get_mut(&p) {
                if a.status == ActionStatus::Pending {
                    a.status = ActionStatus::Cancelled;
                }
            }
        }
        let last = state.episodes[&id].last_obs.clone();
        self.cut(state, id, Some(last.as_deref()));
        self.journal_episode(state, id)
    }

    /// Rewrites the journal as one snapshot once it holds more than
    /// `journal_compact_bytes` and four times the last snapshot (serving pauses only while
    /// the state is cloned and the records appended meanwhile are copied); returns whether
    /// it did.
    ///
    /// # Errors
    /// The write failure (the old journal stays in use).
    pub fn compact_journal(&self) -> Result<bool, ApiError> {
        let bound = self
            .settings
            .journal_compact_bytes
            .max(4 * self.snapshot_bytes.load(Ordering::Relaxed));
        if self.journal.size() < bound {
            return Ok(false);
        }
        // Every record is appended under the state lock, so the state and the journal's
        // size taken together agree: what is appended later is copied after the snapshot.
        let (snapshot, taken_at) = {
            let state = self.state.lock().expect("state");
            (
                Event::Snapshot {
                    state: Box::new(state.clone()),
                },
                self.journal.size(),
            )
        };
        self.journal
            .compact(&snapshot, taken_at)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        self.snapshot_bytes
            .store(self.journal.size(), Ordering::Relaxed);
        Ok(true)
    }

    /// Ends episodes idle longer than the episode timeout; once more than 10,000 have
    /// ended, forgets those no remembered action refers to. Returns how many it ended.
    pub fn reap_idle(&self) -> usize {
        let limit = self.settings.episode_timeout.as_nanos() as i64;
        let now = now_ns();
        let mut state = self.state.lock().expect("state");
        let idle: Vec<u64> = state
            .episodes
            .values()
            .filter(|e| e.status != EpisodeStatus::Ended && now - e.last_activity_ns > limit)
            .map(|e| e.id)
            .collect();
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
                if let Err(e) = self.invalidate_and_restart(
                    &mut state,
                    id,
                    ReasonCode::StatusUnknown,
                    &text,
                    "gateway",
                ) {
                    tracing::warn!(component = "gateway", error = %e, "could not invalidate a timed-out trajectory");
                }
            }
            if let Err(e) = self.close_episode(&mut state, id) {
                tracing::warn!(component = "gateway", error = %e, "could not journal a timed-out episode");
            }
        }
        state.forget_ended(10_000);
        idle.len()
    }

    /// Adds a reported step to its trajectory's rows; returns how many it holds.
    fn add_row(
        &self,
        a: &ActionRec,
        r: &SampleRecord,
        trajectory: u64,
        version: u64,
        bucket: &str,
    ) -> usize {
        let mut rows = self.rows.lock().expect("rows");
        let seg = rows.entry(trajectory).or_insert_with(|| {
            Segment::new(trajectory, version, bucket, self.obs_dim, self.action_dim)
        });
        seg.push(
            r.sample_id,
            &a.obs,
            &a.answer.action,
            a.log_prob,
            a.value,
            r.reward,
            r.completed_at_ns,
        );
        seg.len()
    }

    /// Hands a trajectory's rows to the learner. `bootstrap`: `None` to discard them,
    /// `Some(None)` after a terminal state, `Some(Some(obs))` to bootstrap V(obs).
    fn cut(&self, state: &State, episode: u64, bootstrap: Option<Option<&[f32]>>) {
        let e = &state.episodes[&episode];
        let Some(mut seg) = self.rows.lock().expect("rows").remove(&e.trajectory) else {
            return;
        };
        let Some(bootstrap) = bootstrap else { return };
        seg.terminated = bootstrap.is_none();
        if let Some(obs) = bootstrap {
            if let Ok(policy) = self.policies.get(seg.version) {
                let mut v = [0.0f32];
                policy.model.lock().expect("model").values(obs, &mut v);
                seg.bootstrap = v[0];
            }
        }
        let tx = self.learner_tx.lock().expect("learner tx");
        if let Some(tx) = tx.as_ref() {
            if tx.try_send(seg).is_err() {
                self.counters
                    .segments_dropped
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    // ----- operator -----

    /// The release state.
    pub fn status(&self) -> ReleaseStatus {
        let now = now_ns();
        let mut state = self.state.lock().expect("state");
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
            rules_version: *self.active_rules.lock().expect("rules"),
        }
    }

    /// Applies an operator's change to the release under the state lock, journals the new
    /// release (synced) and answers the resulting status.
    fn change_release(
        &self,
        change: impl FnOnce(&Self, &mut State) -> Result<(), ApiError>,
    ) -> Result<ReleaseStatus, ApiError> {
        {
            let mut state = self.state.lock().expect("state");
            change(self, &mut state)?;
            self.journal_release(&state)?;
        }
        Ok(self.status())
    }

    /// 404 unless `version` was published.
    fn require_version(&self, version: u64) -> Result<(), ApiError> {
        if self.policies.exists(version) {
            Ok(())
        } else {
            Err(ApiError::not_found(format!(
                "unknown policy version {version}"
            )))
        }
    }

    fn journal_release(&self, state: &State) -> Result<(), ApiError> {
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
    ) -> Result<u64, ApiError> {
        let version = {
            let mut state = self.state.lock().expect("state");
            state.release.latest += 1;
            state.release.latest
        };
        self.policies
            .insert(version, params)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let rules = *self.active_rules.lock().expect("rules");
        self.ledger
            .bind(version, &self.config_hash, rules, "publish", author)?;
        let mut state = self.state.lock().expect("state");
        state.release.publish(version, channel, now_ns());
        self.journal_release(&state)?;
        Ok(version)
    }

    /// Publishes a checkpoint written by `strata train` as the canary candidate.
    ///
    /// # Errors
    /// 400 when the checkpoint is unreadable or for another env or network.
    pub fn publish_checkpoint(
        &self,
        caller: &Caller,
        req: PublishRequest,
    ) -> Result<ReleaseStatus, ApiError> {
        let policy = strata_runtime::load_policy(Path::new(&req.checkpoint))
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        let ours = &self.settings.run;
        if policy.config.env.name != ours.env.name || policy.config.network != ours.network {
            return Err(ApiError::bad_request(format!(
                "checkpoint {} is for env {:?} with network {:?}; this gateway serves {:?} with {:?}",
                req.checkpoint, policy.config.env.name, policy.config.network, ours.env.name, ours.network
            )));
        }
        if policy.config.env.normalize_obs {
            return Err(ApiError::bad_request(format!(
                "checkpoint {} normalises observations; the gateway serves raw observations",
                req.checkpoint
            )));
        }
        self.publish_params(
            policy.model.flat_params().to_vec(),
            Channel::Canary,
            &caller.name,
        )?;
        Ok(self.status())
    }

    /// Sets the canary fraction.
    ///
    /// # Errors
    /// 400 outside [0, 1].
    pub fn set_canary(&self, req: CanaryRequest) -> Result<ReleaseStatus, ApiError> {
        if !(0.0..=1.0).contains(&req.fraction) {
            return Err(ApiError::bad_request(format!(
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
    /// 400 for a negative or non-finite value.
    pub fn set_cooldown(&self, req: CooldownRequest) -> Result<ReleaseStatus, ApiError> {
        if !(req.seconds.is_finite() && req.seconds >= 0.0) {
            return Err(ApiError::bad_request(format!(
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
    /// 404 unknown version; 409 no candidate.
    pub fn promote(&self, caller: &Caller, req: SwitchRequest) -> Result<ReleaseStatus, ApiError> {
        let version = {
            let state = self.state.lock().expect("state");
            match req.version.or(state.release.candidate) {
                Some(v) => v,
                None => {
                    return Err(ApiError::conflict(
                        "no candidate to promote: name a version",
                    ))
                }
            }
        };
        self.require_version(version)?;
        let rules = self.ledger.rules_for_policy(version)?;
        self.ledger.bind(
            version,
            &self.config_hash,
            rules.version,
            "promote",
            &caller.name,
        )?;
        self.change_release(|g, state| {
            if state.release.candidate == Some(version) {
                state.release.candidate = None;
            }
            if req.force {
                state
                    .release
                    .pending
                    .retain(|p| p.channel != Channel::Stable);
                state.release.stable = version;
                g.force_switch(state, version, &caller.name)?;
            } else {
                state.release.publish(version, Channel::Stable, now_ns());
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
    /// 400 without a version; 404 unknown version.
    pub fn rollback(&self, caller: &Caller, req: SwitchRequest) -> Result<ReleaseStatus, ApiError> {
        let version = req
            .version
            .ok_or_else(|| ApiError::bad_request("rollback needs a version"))?;
        self.require_version(version)?;
        let rules = self
            .ledger
            .rollback(version, &self.config_hash, &caller.name)?;
        *self.active_rules.lock().expect("rules") = rules.version;
        let status = self.change_release(|g, state| {
            state.release.pending.clear();
            state.release.candidate = None;
            state.release.stable = version;
            if req.force {
                g.force_switch(state, version, &caller.name)?;
            }
            Ok(())
        })?;
        *self.reset_learner.lock().expect("reset") = Some(version);
        Ok(status)
    }

    fn force_switch(&self, state: &mut State, version: u64, author: &str) -> Result<(), ApiError> {
        let running: Vec<u64> = state
            .episodes
            .values()
            .filter(|e| e.status != EpisodeStatus::Ended && e.version != version)
            .map(|e| e.id)
            .collect();
        for id in running {
            let from = state.episodes[&id].version;
            let text = format!("forced switch from version {from} to {version}");
            self.invalidate_and_restart(state, id, ReasonCode::VersionSwitch, &text, author)?;
            let e = state.episodes.get_mut(&id).expect("episode");
            e.version = version;
            e.channel = Channel::Stable;
            e.bucket = self.stable_bucket();
            self.journal_episode(state, id)?;
        }
        Ok(())
    }

    /// The admission rules the learner applies now.
    ///
    /// # Errors
    /// The registered version is unknown (cannot happen for a version set here).
    pub fn active_rules(&self) -> Result<strata_ledger::VersionedRules, ApiError> {
        let v = *self.active_rules.lock().expect("rules");
        Ok(self.ledger.rules(v)?)
    }

    /// Registers new admission rules: the learner applies them from its next update, and
    /// versions published from now on are bound to them (so rolling back to an older
    /// version restores that version's rules).
    ///
    /// # Errors
    /// 400 naming the invalid key.
    pub fn set_rules(
        &self,
        rules: strata_ledger::AdmissionRules,
    ) -> Result<ReleaseStatus, ApiError> {
        if rules.rule == strata_ledger::RuleKind::Strict {
            return Err(ApiError::bad_request(
                "rule `strict` admits only on-policy samples; deployed agents are always asynchronous (use `drop` or `decay`)",
            ));
        }
        let registered = self.ledger.register_rules(&rules).map_err(|e| match e {
            strata_ledger::LedgerError::InvalidRules(m) => {
                ApiError::bad_request(format!("invalid admission rules: {m}"))
            }
            other => ApiError::from(other),
        })?;
        *self.active_rules.lock().expect("rules") = registered.version;
        Ok(self.status())
    }

    /// Records an operator's invalidation.
    ///
    /// # Errors
    /// 400 for a bad target, reason or empty text; 404 for a trajectory or sample this
    /// gateway never issued.
    pub fn invalidate(
        &self,
        caller: &Caller,
        req: InvalidateRequest,
    ) -> Result<serde_json::Value, ApiError> {
        let target = match (req.trajectory, req.first_sample) {
            (Some(id), None) => Target::Trajectory { id },
            (None, Some(first)) => {
                let last = req.last_sample.unwrap_or(first);
                if last < first {
                    return Err(ApiError::bad_request(format!(
                        "last_sample {last} < first_sample {first}"
                    )));
                }
                Target::Samples { first, last }
            }
            _ => {
                return Err(ApiError::bad_request(
                    "give either `trajectory` or `first_sample` (with optional `last_sample`)",
                ))
            }
        };
        self.require_known(target)?;
        let reason = match req.reason.as_deref() {
            None => ReasonCode::Operator,
            Some(r) => ReasonCode::parse(r).map_err(ApiError::bad_request)?,
        };
        if req.text.trim().is_empty() {
            return Err(ApiError::bad_request("text is empty: say why"));
        }
        self.ledger.invalidate(Invalidation {
            target,
            reason,
            text: req.text,
            author: caller.name.clone(),
            rules_version: self.ledger.current().map_or(0, |(_, r)| r.version),
            at_ns: now_ns(),
        })?;
        if let Target::Trajectory { id } = target {
            self.invalidated.lock().expect("invalidated").insert(id);
        }
        Ok(serde_json::json!({ "invalidated": target }))
    }

    /// Refuses a target this gateway never issued: trajectories are numbered from 1 in
    /// order (the journal keeps the counter across restarts), samples by the ledger.
    fn require_known(&self, target: Target) -> Result<(), ApiError> {
        match target {
            Target::Trajectory { id } => {
                let next = self.state.lock().expect("state").next_trajectory;
                if id == 0 || id >= next {
                    return Err(ApiError::not_found(if next <= 1 {
                        format!("no trajectory {id}: this gateway has issued none yet")
                    } else {
                        format!(
                            "no trajectory {id}: this gateway has issued trajectories 1 to {}",
                            next - 1
                        )
                    }));
                }
            }
            Target::Samples { last, .. } => {
                let next = self.ledger.next_sample_id();
                if last >= next {
                    return Err(ApiError::not_found(if next == 0 {
                        format!("no sample {last}: the ledger holds none yet")
                    } else {
                        format!(
                            "no sample {last}: the ledger's sample ids go up to {}",
                            next - 1
                        )
                    }));
                }
            }
        }
        Ok(())
    }

    /// Resumes an episode held for a human; it continues on a new trajectory.
    ///
    /// # Errors
    /// 404 unknown episode; 409 not held.
    pub fn confirm(&self, id: u64) -> Result<EpisodeInfo, ApiError> {
        let mut state = self.state.lock().expect("state");
        let next = state.next_trajectory;
        let e = state
            .episodes
            .get_mut(&id)
            .ok_or_else(|| ApiError::not_found(format!("unknown episode {id}")))?;
        if e.status != EpisodeStatus::AwaitingConfirmation {
            return Err(ApiError::conflict(format!(
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

    /// Whether new versions come from the learner.
    pub fn learns(&self) -> bool {
        self.settings.release != ReleaseMode::Manual
    }
}

/// The idempotency key stored in the ledger: agents' keys are their own, so the agent's
/// name scopes them.
fn ledger_key(agent: &str, key: &str) -> String {
    format!("{agent}/{key}")
}

#[cfg(test)]
mod tests {
    use super::RecentlyInvalid;

    #[test]
    fn recently_invalid_forgets_the_oldest_beyond_its_capacity() {
        let mut r = RecentlyInvalid::default();
        let n = RecentlyInvalid::CAPACITY as u64;
        for t in 0..=n {
            r.insert(t);
            r.insert(t); // repeats change nothing
        }
        assert!(!r.contains(0), "the oldest is forgotten");
        assert!(r.contains(1) && r.contains(n));
        assert_eq!(r.order.len(), RecentlyInvalid::CAPACITY);
    }
}
