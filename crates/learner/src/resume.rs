//! How a checkpointed run goes on: the one rule every way of resuming follows
//! (`strata train --resume`, `strata.train(resume=)`): which settings may change, what a
//! change of identity does to the config hash, and how the budget and schedules move.
//! What counts as identity is [`strata_config::Identity`]'s.

use std::path::Path;

use crate::checkpoint::{read_checkpoint, resume_point, TrainerState};
use crate::LearnerError;
use strata_config::RunConfig;

impl TrainerState {
    /// Takes `wanted` as the config to go on with ([`RunConfig::resumed_with`]). When its
    /// identity differs from the checkpoint's (a new budget, new admission rules), the run
    /// continues under `wanted`'s config hash from the version it stands at; returns a
    /// note saying so.
    ///
    /// # Errors
    /// As [`RunConfig::resumed_with`]: nothing is changed.
    pub fn continue_with(&mut self, wanted: RunConfig) -> Result<Option<String>, LearnerError> {
        let changed = self.config.identity().differences(&wanted.identity());
        self.config = self.config.clone().resumed_with(wanted)?;
        if changed.is_empty() {
            return Ok(None);
        }
        let hash = self.config.config_hash();
        let note = format!(
            "{} changed: the run continues under config hash {hash} (was {}) from policy \
             version {}",
            changed.join(", "),
            self.config_hash,
            self.progress.policy_version
        );
        self.continued_from = Some(std::mem::replace(&mut self.config_hash, hash));
        Ok(Some(note))
    }
}

/// Resumes from `path` (a checkpoint, or a run directory's newest): reads its state, lays
/// the caller's `overrides` over the checkpoint's config, and continues under
/// [`continue_run`]'s rule. Every way of resuming (`strata train --resume`,
/// `strata.train(resume=)`) goes through here.
///
/// # Errors
/// The checkpoint's, the overrides', and [`continue_run`]'s.
pub fn resume_run<E: From<LearnerError>>(
    path: &Path,
    overrides: impl FnOnce(RunConfig) -> Result<RunConfig, E>,
) -> Result<(TrainerState, Vec<String>), E> {
    let state = read_checkpoint(&resume_point(path))?.into_state();
    let wanted = overrides(state.config.clone())?;
    Ok(continue_run(state, wanted)?)
}

/// Continues a checkpointed run with the run-control settings of `wanted` (the
/// checkpoint's config with a command's overrides): the one rule every way of resuming
/// (`strata train --resume`, `strata.train(resume=)`) follows. Returns the state to start
/// the trainer from and what changed that the user should be told.
///
/// - A run solved under `train.stop_when_solved` has its solve stop lifted: asked to
///   resume, it trains on to its budget rather than stopping at once.
/// - A run that has trained its whole budget is refused, saying how to give it more.
/// - A new budget re-anchors the learning-rate and clip schedules where the run stands:
///   from the fraction they had reached they fall linearly to zero at the new budget,
///   without the jump that stretching the old line would give. The same budget keeps the
///   schedule exactly (a resumed run equals an uninterrupted one).
///
/// # Errors
/// [`LearnerError::Config`] when `wanted` changes what defines the policy, or when there
/// is no budget left to train.
pub fn continue_run(
    mut state: TrainerState,
    wanted: RunConfig,
) -> Result<(TrainerState, Vec<String>), LearnerError> {
    let before = state.config.train.total_steps;
    let mut notes = Vec::new();
    notes.extend(state.continue_with(wanted)?);
    let p = &mut state.progress;
    let train = &mut state.config.train;
    let step = p.global_step;
    if p.global_step >= train.total_steps {
        return Err(LearnerError::config(format!(
            "the run has trained its budget: step {} of {} (train.total_steps); nothing was \
             changed. Give a larger budget to train on, e.g. --max-steps {}",
            group_digits(step),
            group_digits(train.total_steps),
            step + train.total_steps.max(1)
        )));
    }
    if let (Some((solved, _)), true) = (p.solved_at, train.stop_when_solved) {
        train.stop_when_solved = false;
        notes.push(format!(
            "the run was solved at step {}; its solve stop is lifted, so it trains on to {} steps",
            group_digits(solved),
            group_digits(train.total_steps)
        ));
    }
    if train.total_steps != before {
        let fraction = p.schedule_remaining(step, before).clamp(0.0, 1.0);
        p.schedule_anchor = Some((step, fraction));
        let ppo = &state.config.ppo;
        let annealed = [
            ("learning rate", ppo.anneal_lr),
            ("clip range", ppo.anneal_clip_range),
        ]
        .iter()
        .filter(|(_, on)| *on)
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(" and ");
        if annealed.is_empty() {
            // Constant schedules: nothing to re-anchor that a user would notice.
        } else if fraction <= 0.0 {
            notes.push(format!(
                "the {annealed} had annealed to zero at the old budget of {} steps: the \
                 {} steps added are collected and recorded, but the weights no longer change",
                group_digits(before),
                group_digits(train.total_steps.saturating_sub(step))
            ));
        } else {
            notes.push(format!(
                "the budget moves from {} to {} steps: the {annealed} go on from {:.1}% of \
                 their start value to zero at step {}",
                group_digits(before),
                group_digits(train.total_steps),
                fraction * 100.0,
                group_digits(train.total_steps)
            ));
        }
    }
    Ok((state, notes))
}

/// `57600` as `57,600`.
pub fn group_digits(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
