//! Learner intake: reported steps gathered per trajectory and cut into segments, handed
//! to the learner on a bounded queue that sheds them when full (never making a request
//! wait); invalidations and rollbacks reach it through [`LearnerInbox`].

use crossbeam_channel::TrySendError;

use super::*;

impl Gateway {
    /// Connects the learner's queue.
    pub(crate) fn attach_learner(&self, tx: Sender<Box<Segment>>) {
        *self.learner_tx.lock() = Some(tx);
    }

    /// Sends the segments this gateway cuts to `tx` (a feed to the run's learner in another
    /// process, bounded: a full queue sheds them, counted) and queues its invalidations for
    /// relaying ([`crate::RelayQueue::take`]; a gateway with a `gateway_id` queues them
    /// from its opening on). The gateway then trains on nothing itself.
    pub fn feed_learner_elsewhere(&self, tx: Sender<Box<Segment>>) {
        self.inbox.relay().start();
        self.attach_learner(tx);
    }

    /// Closes the learner's queue and stops the learner after the update it is in.
    pub(crate) fn detach_learner(&self) {
        self.inbox.stop();
        self.learner_tx.lock().take();
    }

    /// Adds a reported step to its trajectory's rows; returns how many it holds.
    pub(super) fn add_row(
        &self,
        a: &ActionRec,
        r: &SampleRecord,
        state_before: &[f32],
        (trajectory, version): (u64, u64),
        bucket: &Bucket,
    ) -> usize {
        let mut rows = self.rows.lock();
        let seg = rows.entry(trajectory).or_insert_with(|| {
            Segment::new(
                trajectory,
                version,
                bucket,
                (self.obs_dim, self.action_dim),
                &self.image_ranges,
            )
        });
        seg.push(
            r.sample_id,
            &a.obs,
            &a.answer.action,
            a.log_prob,
            a.value,
            r.reward,
            state_before,
            r.completed_at_ns,
        );
        seg.len()
    }

    /// Hands a trajectory's rows to the learner. `bootstrap`: `None` to discard them,
    /// `Some(None)` after a terminal state, `Some(Some(obs))` to bootstrap V(obs).
    pub(super) fn cut(&self, state: &State, episode: u64, bootstrap: Option<Option<&[f32]>>) {
        let e = &state.episodes[&episode];
        let Some(mut seg) = self.rows.lock().remove(&e.trajectory) else {
            return;
        };
        let Some(bootstrap) = bootstrap else { return };
        seg.terminated = bootstrap.is_none();
        if let Some(obs) = bootstrap {
            if let Ok(policy) = self.policies.served(seg.version) {
                let mut v = [0.0f32];
                // A recurrent policy's value from the state after the last step.
                let mut memory = e.memory.clone();
                policy
                    .model
                    .lock()
                    .values(obs, Memory::one_row(&mut memory), &mut v);
                seg.bootstrap = v[0];
            }
        }
        let tx = self.learner_tx.lock();
        if let Some(tx) = tx.as_ref() {
            // Segments are the one thing dropped under load (counted): agents keep going.
            if let Err(TrySendError::Full(_)) = tx.try_send(Box::new(seg)) {
                self.counters
                    .segments_dropped
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}
