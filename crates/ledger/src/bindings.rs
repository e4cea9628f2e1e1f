//! Which admission rules each policy version is bound to, held as runs of consecutive
//! versions bound to the same rules. A gateway's learner binds several versions a second,
//! nearly all to the rules in force: one entry per version grew by about 40 MB a day,
//! where runs grow only when rules change or an old version is bound again.

use std::collections::BTreeMap;

/// Policy version -> rules version, as last bound.
#[derive(Debug, Default)]
pub(crate) struct Bindings {
    /// First version of a run -> (its last version, the rules version).
    runs: BTreeMap<u64, (u64, u64)>,
}

impl Bindings {
    /// The rules version `version` was last bound to.
    pub(crate) fn get(&self, version: u64) -> Option<u64> {
        let (_, &(last, rules)) = self.runs.range(..=version).next_back()?;
        (version <= last).then_some(rules)
    }

    /// Binds `version` to `rules`, replacing an earlier binding.
    pub(crate) fn insert(&mut self, version: u64, rules: u64) {
        if self.get(version) == Some(rules) {
            return;
        }
        // Take `version` out of the run holding it, if any.
        if let Some((&first, &(last, old))) = self.runs.range(..=version).next_back() {
            if version <= last {
                self.runs.remove(&first);
                if first < version {
                    self.runs.insert(first, (version - 1, old));
                }
                if version < last {
                    self.runs.insert(version + 1, (last, old));
                }
            }
        }
        // Join the neighbouring runs bound to the same rules.
        let (mut first, mut last) = (version, version);
        if let Some(before) = version.checked_sub(1) {
            if let Some((&f, &(l, r))) = self.runs.range(..=before).next_back() {
                if l == before && r == rules {
                    self.runs.remove(&f);
                    first = f;
                }
            }
        }
        if let Some(after) = version.checked_add(1) {
            if let Some(&(l, r)) = self.runs.get(&after) {
                if r == rules {
                    self.runs.remove(&after);
                    last = l;
                }
            }
        }
        self.runs.insert(first, (last, rules));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn runs_answer_as_a_map_of_every_binding_would() {
        let mut runs = Bindings::default();
        let mut reference = HashMap::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for step in 0..20_000u64 {
            // Mostly new versions under the current rules; now and then a rules change or
            // an old version bound again (a promote or rollback).
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let version = if x.is_multiple_of(10) {
                x % (step + 1)
            } else {
                step
            };
            let rules = if x.is_multiple_of(97) {
                x % 5
            } else {
                step / 1000
            };
            runs.insert(version, rules);
            reference.insert(version, rules);
        }
        for v in 0..20_100 {
            assert_eq!(runs.get(v), reference.get(&v).copied(), "version {v}");
        }
        assert!(
            runs.runs.len() < reference.len() / 3,
            "{} runs for {} bindings",
            runs.runs.len(),
            reference.len()
        );
    }
}
