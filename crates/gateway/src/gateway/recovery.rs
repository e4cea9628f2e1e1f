//! Recovery: opening the gateway's directory after a start or a crash (tokens, policies,
//! ledger, journal replay) and settling reports that were durable but not yet journalled;
//! compacting the journal so the next recovery stays short.

use super::*;

impl Gateway {
    /// Opens the gateway's directory: tokens, policies (version 0 is a fresh model), the
    /// ledger (recovered) and the journal (replayed, so open episodes continue).
    ///
    /// # Errors
    /// Invalid settings, or unreadable state.
    pub fn open(mut settings: GatewaySettings) -> Result<Gateway, GatewayError> {
        settings.validate()?;
        // A gym: env's layout is part of what the served versions are (the config hash).
        strata_config::resolve_env(&mut settings.run)?;
        let dir = settings.dir.clone();
        std::fs::create_dir_all(&dir).map_err(|e| GatewayError::io(&dir, e))?;
        // One process per gateway directory: a second `strata serve` on it is refused
        // before it reads or writes anything there.
        let lock =
            strata_dirlock::DirLock::acquire(&dir, "gateway directory").map_err(|e| match e {
                strata_dirlock::LockError::Held { .. } => GatewayError::InUse(e.to_string()),
                strata_dirlock::LockError::Io { path, source, .. } => {
                    GatewayError::io(path, source)
                }
            })?;
        check_gateway_id(&dir, settings.gateway_id)?;
        let tokens = TokensFile::load_or_create(&dir.join("tokens.json"), settings.agent_tokens)?;
        let auth = Auth::new(&tokens, settings.rate_limit, settings.rate_burst);
        let run = &settings.run;
        let config_hash = run.config_hash();
        let spec = strata_config::env_spec(run)?;
        let model = strata_config::build_model(run)?;
        let action_dim = match model.head() {
            Head::Categorical { .. } => 1,
            Head::Gaussian { dim } => dim,
        };
        let policies = DiskPolicyStore::open(&dir.join("policies"), run, 64)?;
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
        // A stop or restart compacts only the last half minute of reports.
        ledger_config.compact_every = Some(std::time::Duration::from_secs(30));
        let id_base = crate::ids::id_base(settings.gateway_id);
        ledger_config.first_sample_id = id_base;
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
        // Episode, action and trajectory ids from this gateway's range too: an agent that
        // brings an id to another gateway is told where it belongs, never answered with
        // that gateway's own episode of the same number.
        state.next_trajectory = state.next_trajectory.max(id_base);
        state.next_episode = state.next_episode.max(id_base);
        state.next_action = state.next_action.max(id_base);
        state.gateway_id = settings.gateway_id;
        let stopped_cleanly = std::mem::take(&mut state.stopped_cleanly);
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
            images: spec.images.clone(),
            summary_dim: spec.summary_dim(),
            image_ranges: spec.image_ranges(),
            image_reorder: settings
                .run
                .env
                .gym
                .layout
                .as_ref()
                .and_then(strata_env::gym::GymLayout::image_reorder),
            action_dim,
            state_len: run.network.state_len(),
            ledger,
            journal,
            state: Mutex::new(state),
            rows: Mutex::new(Default::default()),
            pages: Mutex::new(strata_ledger::PageReader::new()),
            trained_lock: Mutex::new(()),
            in_flight: Mutex::new(Default::default()),
            policies,
            auth,
            tokens,
            learner_tx: Mutex::new(None),
            inbox: LearnerInbox::default(),
            report_tasks: tokio_util::task::TaskTracker::new(),
            active_rules: Mutex::new(active_rules),
            counters: Counters::default(),
            snapshot_bytes: AtomicU64::new(0),
            shared: std::sync::OnceLock::new(),
            settings,
            _lock: lock,
        };
        // After a clean stop nothing was in flight; after a crash a report may be durable
        // in the ledger and not journalled.
        if !stopped_cleanly {
            gateway.settle_reports_in_flight()?;
        }
        // A gateway of a run that spans machines relays every invalidation from its
        // first request on, before its feed to the learner is connected.
        if gateway.settings.gateway_id > 0 {
            gateway.inbox.relay().start();
        }
        Ok(gateway)
    }

    /// After a crash, an action may be durable in the ledger but not yet journalled as
    /// reported: find those by idempotency key so a retried report is a duplicate.
    pub(super) fn settle_reports_in_flight(&self) -> Result<(), GatewayError> {
        let mut state = self.state.lock();
        let pending: std::collections::HashMap<String, u64> = state
            .actions
            .values()
            .filter(|a| matches!(a.status, ActionStatus::Pending | ActionStatus::TimedOut))
            .map(|a| {
                let agent = state
                    .episodes
                    .get(&a.episode)
                    .map_or("", |e| e.agent.as_str());
                (agent_key(agent, &a.key), a.answer.action_id)
            })
            .collect();
        if pending.is_empty() {
            return Ok(());
        }
        // Only the keys in flight are looked for: the scan reads the key columns a file at
        // a time, so a restart's memory follows the reports in flight, not the history.
        let wanted = pending.keys().cloned().collect();
        for (key, (sample, version)) in self.ledger.find_keyed_samples(&wanted)? {
            let action = pending[&key];
            let a = state.actions.get_mut(&action).expect("pending action");
            if a.answer.policy_version == version {
                a.status = ActionStatus::Reported { sample };
                let episode = a.episode;
                if let Some(e) = state.episodes.get_mut(&episode) {
                    if e.pending == Some(action) {
                        e.take_reported();
                        e.steps += 1;
                    }
                }
            }
        }
        Ok(())
    }

    /// Records a clean stop (synced): the next start skips settling reports in flight.
    /// Called once nothing is served any more.
    ///
    /// # Errors
    /// The journal's failure.
    pub fn journal_clean_stop(&self) -> Result<(), RequestError> {
        let _state = self.state.lock();
        self.journal(&Event::Stopped, true)
    }

    /// Rewrites the journal as one snapshot once it holds more than
    /// `journal_compact_bytes` and four times the last snapshot (serving pauses only while
    /// the state is cloned and the records appended meanwhile are copied); returns whether
    /// it did.
    ///
    /// # Errors
    /// The write failure (the old journal stays in use).
    pub fn compact_journal(&self) -> Result<bool, RequestError> {
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
            let state = self.state.lock();
            (
                Event::Snapshot {
                    state: Box::new(state.clone()),
                },
                self.journal.size(),
            )
        };
        self.journal
            .compact(&snapshot, taken_at)
            .map_err(|e| RequestError::unavailable(e.to_string()))?;
        self.snapshot_bytes
            .store(self.journal.size(), Ordering::Relaxed);
        Ok(true)
    }
}

/// The gateway id a directory was opened with (file `gateway-id`), kept: reopened with
/// another id, its new ids could fall in a range another gateway numbers from.
fn check_gateway_id(dir: &std::path::Path, id: u16) -> Result<(), GatewayError> {
    let path = dir.join("gateway-id");
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let kept: u16 = text.trim().parse().map_err(|_| {
                GatewayError::Config(format!(
                    "{}: {:?} is not a gateway id",
                    path.display(),
                    text.trim()
                ))
            })?;
            if kept != id {
                return Err(GatewayError::Config(format!(
                    "this gateway directory ({}) belongs to gateway id {kept}, not {id}: pass --gateway-id {kept} (ids are numbered per gateway; another id would mix its records with another gateway's)",
                    dir.display()
                )));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // A directory used before ids existed is gateway 0's.
            let used = dir.join("journal.jsonl").exists();
            if used && id != 0 {
                return Err(GatewayError::Config(format!(
                    "this gateway directory ({}) was used by a gateway alone (id 0): start a gateway of a run that spans machines in a new directory",
                    dir.display()
                )));
            }
            let tmp = dir.join(".gateway-id.tmp");
            std::fs::write(&tmp, format!("{id}\n"))
                .and_then(|()| std::fs::File::open(&tmp)?.sync_all())
                .and_then(|()| std::fs::rename(&tmp, &path))
                .map_err(|e| GatewayError::io(&path, e))
        }
        Err(e) => Err(GatewayError::io(&path, e)),
    }
}
