//! The attempts this worker let go of: a start order for one of them, or an older one, is
//! most likely a late copy, so it waits until the primary says the attempt is still due here.
//!
//! The job table forgets an attempt once it is settled (its end delivered, or the resync
//! superseded it before it ran). Until now a start order for that attempt arriving afterwards
//! found no entry and ran the job again. Within one cluster such an order can only be late:
//! attempt numbers only grow (every dispatch and every resync re-send takes the next one),
//! so a due start is always newer than anything this worker let go of. A deposed primary that
//! was frozen or slow between applying a dispatch and pushing it is one sender of such
//! orders: by the time its push arrives, this worker may have joined the new primary, run the
//! attempt its resync sent again, and reported its end.
//!
//! The start is not refused outright but checked (`jobInfo`, as for a start that crossed a
//! join, [`crate::join_window`]): a worker that lives on while its cluster is restored from a
//! backup meets job ids and attempts again that it let go of in the old cluster, and those
//! are due.
//!
//! The memory is bounded by count ([`ENDED_KEPT`] jobs, oldest forgotten first) and lives as
//! long as the worker process: a restarted worker joins the current primary afresh, and a
//! late order needs a connection the old process had.

use std::collections::{HashMap, VecDeque};

use xce_client::types::JobId;

/// How many jobs' last ended attempt are remembered (about 40 bytes each).
pub const ENDED_KEPT: usize = 65_536;

/// The last attempt of each recent job this worker let go of.
#[derive(Debug)]
pub struct Ended {
    last: HashMap<JobId, u32>,
    /// Jobs in the order they were first remembered, to forget the oldest.
    order: VecDeque<JobId>,
    kept: usize,
}

impl Default for Ended {
    fn default() -> Self {
        Ended::keeping(ENDED_KEPT)
    }
}

impl Ended {
    /// A memory of at most `kept` jobs (at least one).
    pub fn keeping(kept: usize) -> Ended {
        Ended {
            last: HashMap::new(),
            order: VecDeque::new(),
            kept: kept.max(1),
        }
    }

    /// Remembers that `attempt` of `id` is over here.
    pub fn remember(&mut self, id: JobId, attempt: u32) {
        match self.last.get_mut(&id) {
            Some(last) => *last = (*last).max(attempt),
            None => {
                if self.order.len() == self.kept {
                    if let Some(oldest) = self.order.pop_front() {
                        self.last.remove(&oldest);
                    }
                }
                self.last.insert(id, attempt);
                self.order.push_back(id);
            }
        }
    }

    /// The last attempt of `id` remembered as over, if it is at least `attempt`: a start for
    /// `attempt` is then a late copy.
    pub fn covering(&self, id: JobId, attempt: u32) -> Option<u32> {
        self.last.get(&id).copied().filter(|last| *last >= attempt)
    }

    /// How many jobs are remembered.
    pub fn len(&self) -> usize {
        self.last.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn an_ended_attempt_covers_itself_and_older_ones_not_newer() {
        let mut ended = Ended::default();
        ended.remember(7, 2);
        assert_eq!(ended.covering(7, 1), Some(2));
        assert_eq!(ended.covering(7, 2), Some(2));
        assert_eq!(ended.covering(7, 3), None);
        assert_eq!(ended.covering(8, 1), None);
        // An older attempt let go of later does not lower what is covered.
        ended.remember(7, 1);
        assert_eq!(ended.covering(7, 2), Some(2));
    }

    proptest! {
        /// Never more than `kept` jobs; the most recent `kept` jobs are all remembered, each
        /// with the highest attempt given for it.
        #[test]
        fn keeps_the_newest_jobs_within_its_bound(
            kept in 1usize..8,
            ends in proptest::collection::vec((0u64..12, 1u32..5), 0..60),
        ) {
            let mut ended = Ended::keeping(kept);
            for (id, attempt) in &ends {
                ended.remember(*id, *attempt);
            }
            prop_assert!(ended.len() <= kept);
            // The model: jobs in the order first remembered, the oldest dropped past `kept`;
            // a job dropped and remembered again counts as new.
            let mut model: Vec<(JobId, u32)> = Vec::new();
            for (id, attempt) in &ends {
                match model.iter_mut().find(|(m, _)| m == id) {
                    Some((_, a)) => *a = (*a).max(*attempt),
                    None => {
                        if model.len() == kept {
                            model.remove(0);
                        }
                        model.push((*id, *attempt));
                    }
                }
            }
            for (id, attempt) in &model {
                prop_assert_eq!(ended.covering(*id, *attempt), Some(*attempt));
                prop_assert_eq!(ended.covering(*id, attempt + 1), None);
            }
            prop_assert_eq!(ended.len(), model.len());
        }
    }
}
