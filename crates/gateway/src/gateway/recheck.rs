//! Re-checks: before an action executes, the agent's current view is compared with the one
//! the action was chosen on; a moved target aborts it, a new top-level element holds the
//! episode for an operator. A view that still matches is answered without writing.

use super::*;

impl Gateway {
    /// Compares the agent's current view with the one the action was chosen on.
    ///
    /// # Errors
    /// `NotFound`/`Forbidden` action; `Conflict` an action no longer outstanding; `Invalid`
    /// a bad view.
    pub fn recheck(
        &self,
        caller: &Caller,
        action: u64,
        req: RecheckRequest,
    ) -> Result<RecheckResponse, RequestError> {
        let mut state = self.state.lock();
        let a = Self::owned_action(&mut state, caller, action)?;
        let finding = self.recheck_finding(action, a, &req)?;
        let episode = a.episode;
        match finding {
            Finding::Proceed => Ok(proceed()),
            Finding::Hold { extra } => {
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
                Ok(RecheckResponse {
                    verdict: Verdict::NeedsHuman,
                    reason: format!(
                        "unexpected top-level element {extra:?}: episode {episode} awaits an operator's confirmation"
                    ),
                })
            }
            Finding::Abort { moved } => {
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
                Ok(RecheckResponse {
                    verdict: Verdict::Abort,
                    reason: text,
                })
            }
        }
    }

    /// A re-check answered without writing anything: `Some` when the view still matches
    /// (or the request is refused), `None` when the action must be aborted or held, which
    /// [`Gateway::recheck`] then does (it checks again: the state may change in between).
    /// Nothing blocks here, so a server answers it on its async workers.
    ///
    /// # Errors
    /// As [`Gateway::recheck`].
    pub fn recheck_in_memory(
        &self,
        caller: &Caller,
        action: u64,
        req: &RecheckRequest,
    ) -> Result<Option<RecheckResponse>, RequestError> {
        let mut state = self.state.lock();
        let a = Self::owned_action(&mut state, caller, action)?;
        Ok(match self.recheck_finding(action, a, req)? {
            Finding::Proceed => Some(proceed()),
            Finding::Hold { .. } | Finding::Abort { .. } => None,
        })
    }

    /// What a re-check of the outstanding action `a` finds, changing nothing.
    fn recheck_finding(
        &self,
        action: u64,
        a: &ActionRec,
        req: &RecheckRequest,
    ) -> Result<Finding, RequestError> {
        if a.status != ActionStatus::Pending {
            return Err(RequestError::conflict(format!(
                "action {action} is not outstanding ({:?})",
                a.status
            )));
        }
        let context = a.context.as_ref();
        let before_ui = context
            .and_then(|c| c.ui_top_level.as_deref())
            .unwrap_or(&[]);
        if let Some(extra) = req
            .ui_top_level
            .as_ref()
            .and_then(|now| now.iter().find(|el| !before_ui.contains(el)))
        {
            return Ok(Finding::Hold {
                extra: extra.clone(),
            });
        }
        if let (Some(before), Some(now)) = (context.and_then(|c| c.target.as_ref()), &req.target) {
            if before.len() != now.len() || now.iter().any(|x| !x.is_finite()) {
                return Err(RequestError::invalid(format!(
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
                return Ok(Finding::Abort { moved });
            }
        }
        Ok(Finding::Proceed)
    }
}

/// What a re-check finds.
enum Finding {
    /// The view matches: go ahead.
    Proceed,
    /// A top-level element appeared that was not there: an operator must confirm.
    Hold {
        /// The element.
        extra: String,
    },
    /// The target moved past the threshold: never execute.
    Abort {
        /// How far.
        moved: f32,
    },
}

/// The answer to a re-check that found the view unchanged.
fn proceed() -> RecheckResponse {
    RecheckResponse {
        verdict: Verdict::Proceed,
        reason: "the view matches the one the action was chosen on".into(),
    }
}
