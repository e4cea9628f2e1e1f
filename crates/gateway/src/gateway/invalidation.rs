//! Operators' invalidations of trajectories or sample ranges this gateway issued.

use super::*;

/// How long an operator's invalidation waits to reach the learner of a run that spans
/// machines before the request is answered `unavailable`.
const RELAY_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl Gateway {
    /// Records an operator's invalidation; returns once it is durable (and so in every
    /// read: the next admitted page leaves its samples out, a trainer's report of them is
    /// refused, the gateway's learner trains on none of them).
    ///
    /// # Errors
    /// `Invalid` for a bad target, reason or empty text; `NotFound` for a trajectory or sample this
    /// gateway never issued.
    pub fn invalidate(
        &self,
        caller: &Caller,
        req: InvalidateRequest,
    ) -> Result<serde_json::Value, RequestError> {
        let target = match (req.trajectory, req.first_sample) {
            (Some(id), None) => Target::Trajectory { id },
            (None, Some(first)) => {
                let last = req.last_sample.unwrap_or(first);
                if last < first {
                    return Err(RequestError::invalid(format!(
                        "last_sample {last} < first_sample {first}"
                    )));
                }
                Target::Samples { first, last }
            }
            _ => {
                return Err(RequestError::invalid(
                    "give either `trajectory` or `first_sample` (with optional `last_sample`)",
                ))
            }
        };
        self.require_known(target)?;
        let reason = match req.reason.as_deref() {
            None => ReasonCode::Operator,
            Some(r) => ReasonCode::parse(r).map_err(RequestError::invalid)?,
        };
        if strata_ledger::is_blank(&req.text) {
            return Err(RequestError::invalid("text is empty: say why"));
        }
        let pending = self.ledger.invalidate_pending(Invalidation {
            target,
            reason,
            text: req.text,
            author: caller.name.clone(),
            rules_version: self.ledger.current().map_or(0, |(_, r)| r.version),
            at_ns: now_ns(),
        })?;
        // The learner is told at once: it trains on none of it while the write lands.
        match target {
            Target::Trajectory { id } => self.inbox.invalidate(id),
            Target::Samples { first, last } => self.inbox.invalidate_samples(first, last),
        }
        let relay = self.inbox.relay();
        let mark = relay.mark();
        pending.wait()?;
        if relay.is_on() && !relay.wait_relayed(mark, RELAY_WAIT) {
            return Err(RequestError::unavailable(format!(
                "the invalidation is recorded in this gateway's ledger but did not reach the run's learner within {RELAY_WAIT:?} (is NATS up?); it is relayed when NATS answers: repeat the request to wait for that"
            )));
        }
        Ok(serde_json::json!({ "invalidated": target }))
    }

    /// Refuses a target this gateway never issued: trajectories are numbered from 1 in
    /// order (the journal keeps the counter across restarts), samples by the ledger.
    pub(super) fn require_known(&self, target: Target) -> Result<(), RequestError> {
        // A trajectory or samples another gateway of the run issued: this gateway records
        // the invalidation and relays it to the run's learner.
        let foreign = |id: u64| {
            let issuer = crate::ids::gateway_of(id);
            self.inbox.relay().is_on()
                && issuer != 0
                && issuer != u64::from(self.settings.gateway_id)
        };
        match target {
            Target::Trajectory { id } if foreign(id) => {}
            Target::Samples { first, last } if foreign(first) && foreign(last) => {}
            Target::Trajectory { id } => {
                let next = self.state.lock().next_trajectory;
                if id == 0 || id >= next {
                    return Err(RequestError::not_found(if next <= 1 {
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
                    return Err(RequestError::not_found(if next == 0 {
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
}
