//! Dispatch ahead (cluster version 12): a host may be sent jobs beyond its free room, up to
//! [`MAX_AHEAD_ROUNDS`] more rounds of its resources, so its worker starts the next the
//! moment one ends instead of waiting for the end's write, a scheduling round and the
//! dispatch's write. The worker admits by its own resources (`xce_worker::admission`), so no
//! more than the host offers ever runs at once; the apply only bounds how much may wait
//! there. Below version 12 a placement needs free room, as every member of a mixed cluster
//! judges alike.

use xce_client::fit::{fits, fits_ahead, Resources, Shortfall, MAX_AHEAD_ROUNDS};
use xce_client::version::DISPATCH_AHEAD;

use super::State;

impl State {
    /// Whether a job needing `need` may be placed on a host offering `capacity` whose placed
    /// jobs (dispatched, running, suspended) use `load`: it fits the free room, or, for a
    /// placement that may go `ahead` (the scheduler's) from version 12, it fits the host
    /// alone and the host's placed jobs stay within `1 + MAX_AHEAD_ROUNDS` times what it
    /// offers. The shortfall named is the free room's.
    pub(super) fn may_place(
        &self,
        capacity: &Resources,
        load: &Resources,
        need: &Resources,
        ahead: bool,
    ) -> Result<(), Shortfall> {
        let now = fits(capacity, load, need);
        if now.is_ok() || !ahead || self.active_version < DISPATCH_AHEAD {
            return now;
        }
        fits_ahead(capacity, load, need, MAX_AHEAD_ROUNDS).or(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::testing::*;
    use crate::state::{Command, Outcome};
    use xce_client::types::JobState;
    use xce_proto::Status;

    /// Submits `n` jobs of `cpus` cpus each; their ids.
    fn jobs(s: &mut State, from: u128, n: u64, cpus: u32) -> Vec<u64> {
        (0..n)
            .map(|i| {
                let mut spec = spec(&["true"]);
                spec.resources = Resources::new(cpus, 0);
                match submit(s, from + u128::from(i), spec) {
                    Outcome::Submitted(id) => id,
                    other => panic!("{other:?}"),
                }
            })
            .collect()
    }

    #[test]
    fn from_version_12_a_host_takes_more_rounds_of_its_resources() {
        let mut s = State::default();
        s.apply(1, join_with(1, "w1", 2, 0, vec![]));
        let ids = jobs(&mut s, 10, 9, 1);
        let big = jobs(&mut s, 20, 1, 3)[0];
        // The scheduler's placements (an operator's `xce dispatch` is checked below).
        let place = |s: &mut State, _t: u128, id| s.dispatch(2, id, "w1".into(), true);
        assert_eq!(place(&mut s, 30, ids[0]), Outcome::Done);
        assert_eq!(place(&mut s, 31, ids[1]), Outcome::Done);
        // Below 12 (what a member of an older build judges alike): free room only.
        let full = place(&mut s, 32, ids[2]);
        rejected_with(&full, Status::Conflict, "0 of 2 cpus free, 1 needed");
        assert_eq!(
            s.apply(3, Command::RaiseVersion { to: DISPATCH_AHEAD }),
            Outcome::Done
        );
        for (t, id) in (33..).zip(&ids[2..8]) {
            assert_eq!(place(&mut s, t, *id), Outcome::Done);
        }
        assert_eq!(s.job(ids[7]).unwrap().state, JobState::Dispatched);
        // Never more than four times the host placed, never a job larger than the host.
        let beyond = place(&mut s, 45, ids[8]);
        rejected_with(&beyond, Status::Conflict, "0 of 2 cpus free, 1 needed");
        let too_big = place(&mut s, 46, big);
        rejected_with(&too_big, Status::Conflict, "cpus free, 3 needed");
        // An end frees a place for the next one.
        assert_eq!(
            finish(&mut s, 47, ids[0], 1, xce_client::types::JobEnd::Exit(0)),
            Outcome::Done
        );
        // An operator's placement needs free room, whatever the version.
        let by_hand = s.apply(2, dispatch_cmd(49, ids[8], "w1"));
        rejected_with(&by_hand, Status::Conflict, "0 of 2 cpus free, 1 needed");
        assert_eq!(place(&mut s, 48, ids[8]), Outcome::Done);
    }
}
