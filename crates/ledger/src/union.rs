//! Several ledgers read as one: the gateways of a run that spans machines each keep their
//! own ledger (one writer per directory), its learner another; an audit asks them all at
//! once. Their sample ids are disjoint by construction (gateway `N` numbers from
//! `N << 40`), so the union is their tables side by side; ledgers whose samples overlap
//! are refused, naming both.

use crate::{LedgerData, LedgerError};

/// The ledgers `parts` (each with where it was read from, for errors) as one.
///
/// # Errors
/// [`LedgerError::Rejected`] when two ledgers' sample id ranges overlap (they are not the
/// ledgers of one run's gateways, or one gateway id served two directories).
pub fn union(parts: Vec<(String, LedgerData)>) -> Result<LedgerData, LedgerError> {
    let mut ranges: Vec<(u64, u64, &str)> = parts
        .iter()
        .filter_map(|(location, data)| {
            let ids = data
                .samples
                .iter()
                .flat_map(|b| b.sample_id.iter().copied());
            let (low, high) = ids.fold((u64::MAX, 0), |(l, h), id| (l.min(id), h.max(id)));
            (low <= high).then_some((low, high, location.as_str()))
        })
        .collect();
    ranges.sort_unstable();
    for pair in ranges.windows(2) {
        let ((_, high, a), (low, _, b)) = (pair[0], pair[1]);
        if low <= high {
            return Err(LedgerError::Rejected(format!(
                "{a} and {b} both hold sample ids around {low}: they are not ledgers of one run's gateways (each gateway numbers from its id << 40; was one gateway id used for two directories?)"
            )));
        }
    }
    let mut out = LedgerData::default();
    for (_, data) in parts {
        out.samples.extend(data.samples);
        out.decisions.extend(data.decisions);
        out.invalidations.extend(data.invalidations);
        out.duplicates.extend(data.duplicates);
        out.generations.extend(data.generations);
        out.files += data.files;
    }
    // Events of several ledgers in the order they happened.
    out.invalidations.sort_by_key(|i| i.at_ns);
    out.generations.sort_by_key(|g| g.at_ns);
    Ok(out)
}
