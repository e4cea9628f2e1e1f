//! Training elsewhere: a trainer that is not Strata reads the admitted transitions its
//! versions' agents recorded, with their weights under the rules in force, and reports
//! which it trained on into which version, so the ledger's decisions and the
//! per-generation metrics stay true for it.

use super::*;

/// Rows on a page when the query does not say.
const DEFAULT_PAGE: usize = 1_000;
/// The most rows on a page.
const MAX_PAGE: usize = 10_000;
/// The most samples one `trained` report may name.
const MAX_TRAINED: usize = 1_000_000;

impl Gateway {
    /// A page of the samples a trainer may train on.
    ///
    /// # Errors
    /// `Invalid` a bad limit, bucket or cursor; `NotFound` a `learner_version` never
    /// published; `Unavailable` when the ledger cannot be read.
    pub fn admitted(&self, query: &AdmittedQuery) -> Result<AdmittedPage, RequestError> {
        let limit = query.limit.unwrap_or(DEFAULT_PAGE);
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(RequestError::invalid(format!(
                "limit {limit} is not in 1..={MAX_PAGE}"
            )));
        }
        let bucket = query
            .bucket
            .as_deref()
            .map(Bucket::new)
            .transpose()
            .map_err(|e| RequestError::invalid(format!("bucket: {e}")))?;
        if query.after.is_some() {
            // Refused, not translated: a trainer that passes today's `next_cursor` (one
            // past the last id looked at) as `after` would skip a sample a page.
            return Err(RequestError::invalid(
                "`after` is gone: page with `cursor`, passing each page's `next_cursor` (where to go on from; omit it for the first page)",
            ));
        }
        let from = query.cursor.unwrap_or(0);
        let learner_version = match query.learner_version {
            Some(v) => {
                self.require_version_number(v)?;
                v
            }
            None => self.state.lock().release.latest,
        };
        let rules = self.active_rules()?;
        // Taken before the read: every id below it is then in what is read.
        let horizon = self.durable_horizon();
        let page = self.pages.lock().admitted(
            self.ledger.storage(),
            &rules,
            &strata_ledger::AdmittedQuery {
                from,
                before: Some(horizon),
                limit,
                learner_version,
                bucket: bucket.as_ref(),
                now_ns: now_ns(),
            },
        )?;
        let samples = page
            .rows
            .into_iter()
            .map(|row| {
                let s = row.sample;
                AdmittedSample {
                    sample_id: s.sample_id,
                    episode_id: s.episode_id,
                    trajectory_id: s.trajectory_id,
                    step: s.step,
                    policy_version: s.policy_version,
                    config_hash: s.config_hash,
                    bucket: s.bucket.to_string(),
                    observation: f32_from_le_bytes(s.observation.as_deref().unwrap_or_default()),
                    action: s
                        .action
                        .as_deref()
                        .and_then(|a| serde_json::from_str(a).ok())
                        .unwrap_or(serde_json::Value::Null),
                    behaviour_log_prob: s.behaviour_log_prob,
                    reward: s.reward,
                    next_observation: f32_from_le_bytes(
                        s.next_observation.as_deref().unwrap_or_default(),
                    ),
                    terminated: s.terminated,
                    truncated: s.truncated,
                    completed_at_ns: s.completed_at_ns,
                    admission: row.admission.as_str().to_string(),
                    weight: row.weight,
                }
            })
            .collect();
        Ok(AdmittedPage {
            samples,
            next_cursor: page.next_cursor,
            more: page.more,
            learner_version,
            rules_version: rules.version,
            rules_hash: rules.hash,
            left_out: page.left_out,
        })
    }

    /// Records what a trainer trained on: each sample gets the decision the rules in
    /// force make for it, counted from `base_version`, as the update into `version`
    /// (which must be published, and external: Strata's own versions are its learner's).
    ///
    /// # Errors
    /// `Invalid` an unknown, already decided or Strata-chosen sample, a missing KL, or a
    /// version that is not external; `NotFound` an unknown version; `Unavailable` when the
    /// ledger cannot be read or written (nothing recorded).
    pub fn trained(
        &self,
        caller: &Caller,
        req: TrainedRequest,
    ) -> Result<TrainedResponse, RequestError> {
        if req.samples.is_empty() {
            return Err(RequestError::invalid("samples is empty"));
        }
        if req.samples.len() > MAX_TRAINED {
            return Err(RequestError::invalid(format!(
                "{} samples in one report (at most {MAX_TRAINED}: report in parts)",
                req.samples.len()
            )));
        }
        self.require_version(req.version)?;
        self.require_version_number(req.base_version)?;
        if self.policies.external(req.version).is_none() {
            return Err(RequestError::invalid(format!(
                "version {} is Strata's own: only a version published as `external` is reported as trained elsewhere",
                req.version
            )));
        }
        if req.base_version >= req.version {
            return Err(RequestError::invalid(format!(
                "base_version {} is not before version {}",
                req.base_version, req.version
            )));
        }
        let mut kl = std::collections::BTreeMap::new();
        for (version, value) in &req.kl {
            let v: u64 = version.parse().map_err(|_| {
                RequestError::invalid(format!("kl key {version:?} is not a version number"))
            })?;
            if !(value.is_finite() && *value >= 0.0) {
                return Err(RequestError::invalid(format!(
                    "kl of version {v} is {value} (a KL is finite and >= 0)"
                )));
            }
            kl.insert(v, *value);
        }
        let rules = self.active_rules()?;
        // One report at a time: two reports of the same samples must not both pass the
        // "not yet decided" check.
        let _one = self.trained_lock.lock();
        let decisions = self
            .pages
            .lock()
            .trained_decisions(
                self.ledger.storage(),
                &rules,
                &strata_ledger::TrainedReport {
                    version: req.version,
                    base_version: req.base_version,
                    samples: &req.samples,
                    kl: &kl,
                    now_ns: now_ns(),
                },
            )?
            .map_err(RequestError::invalid)?;
        let mut answer = TrainedResponse {
            trained: 0,
            down_weighted: 0,
            dropped: 0,
            decisions: decisions.len() as u64,
            rules_version: rules.version,
        };
        for d in &decisions {
            let n = d.last_sample - d.first_sample + 1;
            match d.decision {
                strata_ledger::DecisionKind::Trained => answer.trained += n,
                strata_ledger::DecisionKind::DownWeighted => answer.down_weighted += n,
                strata_ledger::DecisionKind::Dropped => answer.dropped += n,
            }
        }
        self.ledger.append_decisions(decisions)?;
        // Readers (the next admitted page, the next report) see the decisions at once.
        self.ledger.flush()?;
        tracing::info!(
            component = "gateway",
            trainer = %caller.name,
            version = req.version,
            base_version = req.base_version,
            trained = answer.trained,
            dropped = answer.dropped,
            "training reported"
        );
        Ok(answer)
    }

    /// `NotFound` unless `version` was handed out (it may since have been removed).
    pub(super) fn require_version_number(&self, version: u64) -> Result<(), RequestError> {
        let latest = self.state.lock().release.latest;
        if version > latest {
            return Err(RequestError::not_found(format!(
                "unknown policy version {version} (the newest published is {latest})"
            )));
        }
        Ok(())
    }
}
