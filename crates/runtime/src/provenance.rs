//! The learner's side of provenance: which episode and trajectory each consumed step
//! belongs to, and the ledger rows of a fragment.

use strata_ledger::SampleBatch;

use crate::buffer::Fragment;
pub use strata_learner::LedgerCursor;

/// Appends fragment `f` of worker `w` (envs `w * m ..`) to `out`, env by env so each
/// trajectory's rows are contiguous; sample ids start at `first_id` in that order.
pub fn append_fragment(
    out: &mut SampleBatch,
    cursor: &mut LedgerCursor,
    f: &Fragment,
    w: usize,
    first_id: u64,
) {
    let (m, steps, od) = (f.envs, f.steps, out.obs_dim);
    let p = &f.provenance;
    for i in 0..m {
        let env = w * m + i;
        let mut ends = f.episodes.iter().filter(|e| e.env == i);
        for t in 0..steps {
            let row = t * m + i;
            let id = first_id + (i * steps + t) as u64;
            if cursor.episode[env] == LedgerCursor::NONE {
                cursor.episode[env] = id;
                cursor.step[env] = 0;
            }
            if cursor.trajectory[env] == LedgerCursor::NONE
                || cursor.trajectory_version[env] != f.version
            {
                cursor.trajectory[env] = id;
                cursor.trajectory_version[env] = f.version;
            }
            let done = f.terminated[row] || f.truncated[row];
            let end = if done { ends.next() } else { None };
            out.sample_id.push(id);
            out.episode_id.push(cursor.episode[env]);
            out.trajectory_id.push(cursor.trajectory[env]);
            out.step.push(cursor.step[env]);
            out.policy_version.push(f.version);
            out.issued_at_ns.push(p.issued_ns[row]);
            out.completed_at_ns
                .push(p.completed_ns[row].max(p.issued_ns[row]));
            out.obs_count.push(p.obs_count[row]);
            out.obs_hash.push(p.obs_hash[row]);
            out.obs_min
                .extend_from_slice(&p.obs_min[row * od..(row + 1) * od]);
            out.obs_max
                .extend_from_slice(&p.obs_max[row * od..(row + 1) * od]);
            out.obs_mean
                .extend_from_slice(&p.obs_mean[row * od..(row + 1) * od]);
            out.env_clock.push(p.clock[row]);
            out.sampler_version.push(p.sampler_version[row]);
            out.idempotency_key.push(None);
            out.reward.push(f.rewards[row]);
            out.terminated.push(f.terminated[row]);
            out.truncated.push(f.truncated[row]);
            // A life lost in a game that goes on has no return of its own to report.
            let counted = end.filter(|e| e.counted);
            out.episode_return.push(counted.map(|e| e.episode_return));
            out.success.push(counted.and_then(|e| e.success));
            out.worker.push(Some(w as u64));
            out.action.push(None);
            out.behaviour_log_prob.push(None);
            out.observation.push(None);
            out.next_observation.push(None);
            out.fragment.push(Some(f.index));
            cursor.step[env] += 1;
            if done {
                cursor.episode[env] = LedgerCursor::NONE;
                cursor.trajectory[env] = LedgerCursor::NONE;
            }
        }
    }
}
