//! Backfill: start times reserved for the highest-priority jobs that cannot start yet, and the
//! test every later job passes before it may start now: it must delay none of them.
//!
//! Each host's future is a [`Profile`]: its load from now on as a step function, from what
//! its placed jobs hold and when each will have ended at the latest, its start plus its time
//! limit plus a slack (`--backfill-slack-ms`: a job at its limit is sent SIGTERM and killed
//! only after its worker's kill grace, and its start lags its dispatch). A job with no limit,
//! one suspended, and one that is not started where jobs may wait on their host (dispatch
//! ahead) hold their share for ever: an estimate here may be late, never early. A blocked job gets the earliest start at which some host fits it for its whole
//! time limit, and that window is added to the host's profile; a later job may start now only
//! on a host whose profile fits it until its own limit ends. Every job ends by its limit, so a
//! host's load only ever falls sooner than its profile says, and a reservation is never delayed
//! by a job started after it.
//!
//! Up to `depth` reservations a round (depth 1 is EASY backfill); a blocked job beyond them
//! waits without one and holds nothing back. Depth 0 is strict priority: the first blocked job
//! holds back every job after it. So is a blocked job that no profile fits at any time (hosts
//! held by jobs with no time limit): with nothing to reserve, nothing may pass it.

use std::collections::HashMap;

use xce_client::fit::{fits, Resources};
use xce_client::types::JobId;

use crate::view::{PlacedJob, View};

/// A start time reserved for a blocked job this round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    pub id: JobId,
    pub host: String,
    /// Milliseconds since the epoch; the job starts then at the latest, unless a job of higher
    /// priority takes the room first.
    pub start_ms: u64,
}

/// One host's load from now on: `steps[i].1` is held from `steps[i].0` until the next step's
/// time (the last one for ever). The first step is at the round's time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    capacity: Resources,
    steps: Vec<(u64, Resources)>,
}

impl Profile {
    /// The profile of a host offering `capacity` that holds `load` at `now_ms`, of which each
    /// `(end, need)` in `ends` is given back at `end` (times before now count as now).
    pub fn new(
        capacity: Resources,
        now_ms: u64,
        load: Resources,
        mut ends: Vec<(u64, Resources)>,
    ) -> Profile {
        ends.sort_unstable_by_key(|(end, _)| *end);
        let mut steps: Vec<(u64, Resources)> = vec![(now_ms, load)];
        for (end, need) in ends {
            let end = end.max(now_ms);
            let Some((last_time, last_load)) = steps.last() else {
                continue;
            };
            let rest = last_load.minus(&need);
            if *last_time == end {
                if let Some(last) = steps.last_mut() {
                    last.1 = rest;
                }
            } else {
                steps.push((end, rest));
            }
        }
        Profile { capacity, steps }
    }

    /// Whether `need` fits from step `from` until `until` (`None`: for ever); else the first
    /// step it does not fit.
    fn fits_from(&self, from: usize, until: Option<u64>, need: &Resources) -> Result<(), usize> {
        for (i, (time, load)) in self.steps.iter().enumerate().skip(from) {
            if i > from && until.is_some_and(|u| *time >= u) {
                break;
            }
            if fits(&self.capacity, load, need).is_err() {
                return Err(i);
            }
        }
        Ok(())
    }

    /// Whether `need` started now fits until `until`.
    pub fn fits_now(&self, until: Option<u64>, need: &Resources) -> bool {
        self.fits_from(0, until, need).is_ok()
    }

    /// The earliest time before `before` at which `need` fits for `duration_ms` (`None`: for
    /// ever).
    pub fn earliest(
        &self,
        need: &Resources,
        duration_ms: Option<u64>,
        before: Option<u64>,
    ) -> Option<u64> {
        let mut i = 0;
        while let Some((start, _)) = self.steps.get(i) {
            if before.is_some_and(|b| *start >= b) {
                return None;
            }
            let until = duration_ms.map(|d| start.saturating_add(d));
            match self.fits_from(i, until, need) {
                Ok(()) => return Some(*start),
                // Every start up to the failing step would span it.
                Err(failed) => i = failed + 1,
            }
        }
        None
    }

    /// Adds `need` to the load from `from_ms` until `until` (`None`: for ever).
    pub fn hold(&mut self, from_ms: u64, until: Option<u64>, need: &Resources) {
        let first = self.split(from_ms);
        let last = until.map_or(self.steps.len(), |u| self.split(u));
        for step in &mut self.steps[first..last] {
            step.1 = step.1.plus(need);
        }
    }

    /// The index of the step that begins at `time`, made if none does (times before the first
    /// step count as its time).
    fn split(&mut self, time: u64) -> usize {
        let at = self.steps.partition_point(|(t, _)| *t <= time);
        if at == 0 {
            return 0;
        }
        if self.steps[at - 1].0 == time {
            return at - 1;
        }
        let load = self.steps[at - 1].1.clone();
        self.steps.insert(at, (time, load));
        at
    }
}

/// When a placed job will have given its room back at the latest, `slack_ms` after its limit;
/// `None`: not known, for ever.
pub fn ends_at(job: &PlacedJob, now_ms: u64, sends_ahead: bool, slack_ms: u64) -> Option<u64> {
    let limit_ms = u64::from(job.time_limit_s?) * 1000;
    if job.suspended {
        return None;
    }
    let end = match job.started_ms {
        Some(start) => start.saturating_add(limit_ms),
        // A job sent ahead may wait on its host behind the jobs there.
        None if sends_ahead => return None,
        None => now_ms.saturating_add(limit_ms),
    };
    Some(end.saturating_add(slack_ms).max(now_ms))
}

/// A round's reservations and the hosts' profiles they are made in.
#[derive(Debug)]
pub struct Backfill<'v> {
    view: &'v View,
    depth: u32,
    now_ms: u64,
    /// Added to every job's end: what a job may run past its limit.
    slack_ms: u64,
    /// The view's placed jobs' ends by host, once a profile is needed.
    ends: Option<HashMap<&'v str, Vec<(u64, Resources)>>>,
    /// This round's placements: (host, need, end).
    placed: Vec<(String, Resources, Option<u64>)>,
    profiles: HashMap<String, Profile>,
    reservations: Vec<Reservation>,
}

impl<'v> Backfill<'v> {
    /// A round at `now_ms` over `view`, whose `backfill_depth` bounds the reservations.
    pub fn new(view: &'v View, now_ms: u64) -> Backfill<'v> {
        Backfill {
            view,
            depth: view.backfill_depth,
            now_ms,
            slack_ms: view.backfill_slack_ms,
            ends: None,
            placed: Vec::new(),
            profiles: HashMap::new(),
            reservations: Vec::new(),
        }
    }

    /// Whether any reservation was made: jobs placed from now on must pass [`Backfill::admits`].
    pub fn reserving(&self) -> bool {
        !self.reservations.is_empty()
    }

    /// The start reserved for job `id` this round, if one was.
    pub fn reserved(&self, id: JobId) -> Option<u64> {
        self.reservations
            .iter()
            .rev()
            .find(|r| r.id == id)
            .map(|r| r.start_ms)
    }

    /// The reservations made, in priority order.
    pub fn into_reservations(self) -> Vec<Reservation> {
        self.reservations
    }

    /// How long a job of `time_limit_s` may hold its room once it starts.
    fn held_for(&self, time_limit_s: Option<u32>) -> Option<u64> {
        time_limit_s.map(|l| (u64::from(l) * 1000).saturating_add(self.slack_ms))
    }

    fn end_of(&self, time_limit_s: Option<u32>) -> Option<u64> {
        self.held_for(time_limit_s)
            .map(|d| self.now_ms.saturating_add(d))
    }

    /// Records a placement made this round on `host` (after the host's load took it); one
    /// sent `ahead` of the host's room waits there behind its jobs, so its end is not known.
    pub fn placed(&mut self, host: &str, need: &Resources, time_limit_s: Option<u32>, ahead: bool) {
        let end = if ahead {
            None
        } else {
            self.end_of(time_limit_s)
        };
        if let Some(profile) = self.profiles.get_mut(host) {
            profile.hold(self.now_ms, end, need);
        }
        self.placed.push((host.to_string(), need.clone(), end));
    }

    /// Whether `need` may start now on `host` (offering `capacity`, holding `load` with this
    /// round's placements) without delaying any reservation.
    pub fn admits(
        &mut self,
        host: &str,
        capacity: &Resources,
        load: &Resources,
        need: &Resources,
        time_limit_s: Option<u32>,
    ) -> bool {
        if self.reservations.is_empty() {
            return true;
        }
        let until = self.end_of(time_limit_s);
        self.profile(host, capacity, load).fits_now(until, need)
    }

    /// Decides what a job that cannot start now does to the jobs after it, reserving it a
    /// start on one of `hosts` (name, capacity, load: those that run its user's jobs) where it
    /// may: `true` when they are held back (strict priority).
    pub fn blocked<'h>(
        &mut self,
        id: JobId,
        need: &Resources,
        time_limit_s: Option<u32>,
        hosts: impl Iterator<Item = (&'h str, &'h Resources, &'h Resources)>,
    ) -> bool {
        if self.depth == 0 {
            return true;
        }
        if self.reservations.len() >= self.depth as usize {
            return false;
        }
        let duration = self.held_for(time_limit_s);
        let mut best: Option<(u64, &str)> = None;
        for (name, capacity, load) in hosts {
            if fits(capacity, &Resources::default(), need).is_err() {
                continue;
            }
            let before = best.map(|(t, _)| t);
            let profile = self.profile(name, capacity, load);
            if let Some(start) = profile.earliest(need, duration, before) {
                if best.is_none_or(|(t, _)| start < t) {
                    best = Some((start, name));
                }
            }
        }
        let Some((start_ms, host)) = best else {
            return true;
        };
        let until = duration.map(|d| start_ms.saturating_add(d));
        if let Some(profile) = self.profiles.get_mut(host) {
            profile.hold(start_ms, until, need);
        }
        self.reservations.push(Reservation {
            id,
            host: host.to_string(),
            start_ms,
        });
        false
    }

    /// `host`'s profile, made on first use from its load now and the ends of what it holds.
    fn profile(&mut self, host: &str, capacity: &Resources, load: &Resources) -> &Profile {
        if !self.profiles.contains_key(host) {
            let (view, now_ms, slack_ms) = (self.view, self.now_ms, self.slack_ms);
            let sends_ahead = view.sends_ahead();
            let ends_by_host = self.ends.get_or_insert_with(|| {
                let mut by_host: HashMap<&str, Vec<(u64, Resources)>> = HashMap::new();
                for job in view.placed.values() {
                    if let Some(end) = ends_at(job, now_ms, sends_ahead, slack_ms) {
                        by_host
                            .entry(job.host.as_str())
                            .or_default()
                            .push((end, job.need.clone()));
                    }
                }
                by_host
            });
            let mut ends = ends_by_host.get(host).cloned().unwrap_or_default();
            ends.extend(
                self.placed
                    .iter()
                    .filter(|(h, _, _)| h == host)
                    .filter_map(|(_, need, end)| end.map(|e| (e, need.clone()))),
            );
            let profile = Profile::new(capacity.clone(), now_ms, load.clone(), ends);
            self.profiles.insert(host.to_string(), profile);
        }
        &self.profiles[host]
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn cpus(n: u32) -> Resources {
        Resources::new(n, 0)
    }

    #[test]
    fn a_profile_gives_room_back_as_jobs_reach_their_limits() {
        // 4 cpus, 3 held: 1 until 10, 2 until 20.
        let p = Profile::new(cpus(4), 0, cpus(3), vec![(20, cpus(2)), (10, cpus(1))]);
        assert_eq!(p.earliest(&cpus(1), Some(100), None), Some(0));
        assert_eq!(p.earliest(&cpus(2), Some(100), None), Some(10));
        assert_eq!(p.earliest(&cpus(4), None, None), Some(20));
        assert_eq!(p.earliest(&cpus(4), None, Some(20)), None);
        assert_eq!(p.earliest(&cpus(5), Some(1), None), None);
    }

    #[test]
    fn a_reservation_is_a_window_later_jobs_must_fit_around() {
        let mut p = Profile::new(cpus(4), 0, cpus(4), vec![(10, cpus(4))]);
        let start = p.earliest(&cpus(4), Some(30), None);
        assert_eq!(start, Some(10));
        p.hold(10, Some(40), &cpus(4));
        // Nothing fits between 10 and 40; a 1-cpu job fits before 10 (none free now) and
        // after 40.
        assert!(!p.fits_now(Some(5), &cpus(1)));
        assert_eq!(p.earliest(&cpus(1), Some(10), None), Some(40));
        assert_eq!(p.earliest(&cpus(1), Some(5), None), Some(40));
        let mut q = Profile::new(cpus(4), 0, cpus(0), vec![]);
        q.hold(10, Some(40), &cpus(4));
        assert!(q.fits_now(Some(10), &cpus(4)));
        assert!(!q.fits_now(Some(11), &cpus(1)));
        assert!(!q.fits_now(None, &cpus(1)));
        assert_eq!(q.earliest(&cpus(2), Some(20), None), Some(40));
    }

    /// A host's load over time, from a profile, at every time a step begins.
    fn loads(p: &Profile) -> Vec<(u64, u32)> {
        p.steps.iter().map(|(t, l)| (*t, l.cpus)).collect()
    }

    proptest! {
        /// Holding a window adds its need exactly over the window and nowhere else, and the
        /// earliest start found fits for its whole duration while none before it does.
        #[test]
        fn holding_and_searching_agree_with_a_brute_force_timeline(
            load in 0u32..8,
            ends in proptest::collection::vec((0u64..50, 0u32..3), 0..6),
            windows in proptest::collection::vec((0u64..60, 1u64..30, 1u32..4), 0..5),
            need in 1u32..8,
            duration in 1u64..40,
        ) {
            let load = load.max(ends.iter().map(|(_, n)| *n).sum());
            let ends: Vec<(u64, Resources)> = ends.iter().map(|(e, n)| (*e, cpus(*n))).collect();
            let mut p = Profile::new(cpus(8), 0, cpus(load), ends.clone());
            for (from, len, n) in &windows {
                p.hold(*from, Some(from + len), &cpus(*n));
            }
            let at = |t: u64| -> u32 {
                let freed: u32 = ends.iter().filter(|(e, _)| *e <= t).map(|(_, n)| n.cpus).sum();
                let held: u32 = windows.iter().filter(|(f, l, _)| *f <= t && t < f + l).map(|(_, _, n)| *n).sum();
                load - freed + held
            };
            for (t, l) in loads(&p) {
                prop_assert_eq!(l, at(t), "at {}", t);
            }
            let fits_at = |s: u64| (s..s + duration).all(|t| at(t) + need <= 8);
            let found = p.earliest(&cpus(need), Some(duration), None);
            let brute = (0..200).find(|s| fits_at(*s));
            prop_assert_eq!(found, brute);
        }
    }
}
