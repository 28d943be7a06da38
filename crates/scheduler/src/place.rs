//! Placement as pure logic: from a view (and what is already in flight) to decisions, with no
//! I/O, so that it can be tested exhaustively.
//!
//! Order: queue priority, then job priority (both highest first), then submit order (lowest
//! id first). A job fits a host when the shared [`fits`] rule says so and the host runs its
//! user's jobs ([`may_run`]); hosts that are not `ok` and queues that are inactive are skipped. Among the hosts it fits, a job goes to the one
//! with the most free cpus (load is spread, not packed).
//!
//! A job that cannot be placed now but would fit some host were it empty is *blocked*. With
//! backfill ([`crate::backfill`], `--backfill-depth`), the first blocked jobs get a reserved
//! start, and a later job starts only where it delays none of them. Otherwise, and where no
//! start can be reserved, the rule is **strict priority**: no job after a blocked one is placed
//! in this round, so a smaller job never overtakes (and so never delays) it. A job that fits no
//! host even when empty can never run here; it does not block the others (they cannot delay
//! it), and its reason says so.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, HashSet};

use xce_client::fit::{fits, fits_ahead, may_run, Resources};
use xce_client::types::{HostState, JobId, PendCode, PendReason, Placement};

use crate::backfill::{Backfill, Reservation};
use crate::view::View;

/// Reason for the jobs behind a blocked higher-priority one. Fixed text, so that it changes
/// (and is published) once, not every time the blocking job changes.
pub const BEHIND: &str = "waiting behind a higher-priority job that does not fit yet";

/// Reason for a job that would fit now, but only where it would delay the start reserved for
/// a higher-priority job.
/// Read as `priority` where a cluster keeps the text alone (format 6).
pub const RESERVED: &str =
    "waiting behind the reserved start of a higher-priority job, which it would delay";

/// One round's decisions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// In decision order.
    pub placements: Vec<Placement>,
    /// Pending jobs whose reason should change, and the new reason.
    pub reasons: Vec<(JobId, PendReason)>,
    /// The earliest begin time (ms since the epoch) of a job that waits for one: the next
    /// round is due then, whatever else happens.
    pub wake_at_ms: Option<u64>,
    /// Starts reserved for blocked jobs, highest priority first.
    pub reservations: Vec<Reservation>,
}

/// Decides up to `max` placements from `view`. Jobs in `in_flight` (decided, not yet
/// published) are neither placed again nor given reasons; `reserved` is what in-flight
/// placements will use on each host, so nothing is over-committed meanwhile.
pub fn plan(
    view: &View,
    in_flight: &HashSet<JobId>,
    reserved: &HashMap<String, Resources>,
    max: usize,
) -> Plan {
    plan_at(view, in_flight, reserved, max, xce_client::when::now_ms())
}

/// [`plan`] at `now_ms`: a held job, or one before its begin time, is placed nowhere and
/// blocks nothing ([`xce_client::holds`]).
pub fn plan_at(
    view: &View,
    in_flight: &HashSet<JobId>,
    reserved: &HashMap<String, Resources>,
    max: usize,
    now_ms: u64,
) -> Plan {
    let mut loads: HashMap<&str, Resources> = view.loads();
    for (host, r) in reserved {
        let load = loads.entry(host.as_str()).or_default();
        *load = load.plus(r);
    }
    let mut free = FreeHosts::new(view, &loads);
    // Every round orders every pending job: the job is carried along (not looked up again),
    // and a queue's priority is looked up once per run of jobs of one queue.
    let mut last_queue: Option<(&str, i32)> = None;
    let mut order: Vec<(i32, i32, JobId, &crate::view::PendingJob)> = view
        .pending
        .iter()
        .filter(|(id, _)| in_flight.is_empty() || !in_flight.contains(id))
        .map(|(id, j)| {
            let qprio = match last_queue {
                Some((name, prio)) if name == j.queue => prio,
                _ => {
                    let prio = view.queues.get(&j.queue).map_or(i32::MIN, |q| q.priority);
                    last_queue = Some((&j.queue, prio));
                    prio
                }
            };
            (qprio, j.priority, *id, j)
        })
        .collect();
    order.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
    let mut out = Plan::default();
    let mut backfill = Backfill::new(view, now_ms);
    let mut blocked = false;
    // Tasks placed this round, by array: counted against its throttle.
    let mut placed_of: HashMap<JobId, u64> = HashMap::new();
    for (_, _, id, job) in order {
        // A job that waits for its dependency, an array with no task it may start now, or a
        // task of its own whose array runs as many as its throttle allows: nothing to place,
        // nothing held back.
        let throttled = job.array_of.is_some_and(|array| {
            let room = view.arrays.get(&array).and_then(|a| a.room);
            room.is_some_and(|room| placed_of.get(&array).copied().unwrap_or(0) >= room)
        });
        if job.waits_for_dependency || job.array_room == Some(0) || throttled {
            continue;
        }
        // Borrowed where the text is fixed: thousands of jobs behind a blocked one cost no
        // allocation per round.
        let waits = xce_client::holds::waiting_for(job.hold, job.begin_time_ms, now_ms);
        if let (Some(_), false, Some(begin)) = (&waits, job.hold, job.begin_time_ms) {
            out.wake_at_ms = Some(out.wake_at_ms.map_or(begin, |w| w.min(begin)));
        }
        let reason: Option<(PendCode, Cow<'static, str>)> = match view.queues.get(&job.queue) {
            _ if waits.is_some() => waits.map(|r| (r.code, r.text.into())),
            None => Some((
                PendCode::QueueInactive,
                format!("queue {} does not exist", job.queue).into(),
            )),
            Some(q) if !q.active => Some((
                PendCode::QueueInactive,
                format!("queue {} is inactive", job.queue).into(),
            )),
            Some(_) => match free.never_fits(&job.need, &job.user) {
                Some((code, never)) => Some((code, never.into())),
                None if blocked => Some((PendCode::Priority, BEHIND.into())),
                None if out.placements.len() >= max => None,
                None => {
                    // An array places as many of its tasks as it may and hosts hold, each
                    // placement splitting its next task off.
                    let tasks = job.array_room.unwrap_or(1);
                    let (need, limit) = (&job.need, job.time_limit_s);
                    let mut short = None;
                    for _ in 0..tasks {
                        if out.placements.len() >= max {
                            break;
                        }
                        let host = free
                            .take(need, &job.user, |name, cap, load| {
                                backfill.admits(name, cap, load, need, limit)
                            })
                            .map(|host| (host, false))
                            .or_else(|why| match why {
                                // A job sent ahead starts as soon as room frees, ahead of
                                // any reservation there.
                                Short::Room(_) if !backfill.reserving() => free
                                    .take_ahead(need, &job.user)
                                    .map(|host| (host, true))
                                    .ok_or(why),
                                _ => Err(why),
                            });
                        match host {
                            Ok((host, ahead)) => {
                                backfill.placed(&host, need, limit, ahead);
                                out.placements.push(Placement { id, host });
                            }
                            Err(why) => {
                                short = Some(why);
                                break;
                            }
                        }
                    }
                    if let Some(array) = job.array_of {
                        *placed_of.entry(array).or_default() += 1;
                    }
                    let placed_any = out.placements.last().is_some_and(|p| p.id == id);
                    match short {
                        None => None,
                        Some(why) => {
                            // The rest of an array waits for room as a job that does not fit.
                            blocked = backfill.blocked(id, need, limit, free.hosts_for(&job.user));
                            match why {
                                _ if placed_any => None,
                                Short::Room(why) => Some((PendCode::Resources, why.into())),
                                Short::Reserved => Some((PendCode::Priority, RESERVED.into())),
                            }
                        }
                    }
                }
            },
        };
        if let Some((code, text)) = reason {
            let expected = backfill
                .reserved(id)
                .filter(|_| view.version >= xce_client::version::ACCOUNTING)
                .map(|at| at.div_ceil(1000) * 1000);
            if job.pend_reason.as_deref() != Some(&*text) || moved(job.expected_start_ms, expected)
            {
                let mut reason = PendReason::new(code, text.into_owned());
                reason.expected_start_ms = expected;
                out.reasons.push((id, reason));
            }
        }
    }
    out.reservations = backfill.into_reservations();
    out
}

/// How far a reserved start may move before it is published again: it is an estimate (each
/// round recomputes it from the ends of what runs), and every publication is a write.
pub const EXPECTED_START_SLACK_MS: u64 = 5_000;

/// Whether a job's reserved start, as published (`was`), should be published again as `now`.
fn moved(was: Option<u64>, now: Option<u64>) -> bool {
    match (was, now) {
        (Some(a), Some(b)) => a.abs_diff(b) >= EXPECTED_START_SLACK_MS,
        (None, None) => false,
        _ => true,
    }
}

/// Why a job that would fit some host when it is empty was not placed now.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Short {
    /// No host has room for it now; the text says what it lacks.
    Room(String),
    /// Some host has room now, but each would delay a reserved start.
    Reserved,
}

/// Why a job fits no host even when it is empty, and its code; `None` when some host fits.
type NeverFits = Option<(PendCode, String)>;

/// The `ok` hosts ordered by free cpus, updated as jobs are placed.
struct FreeHosts {
    /// (free cpus, name), so the last entry has the most.
    by_free: BTreeSet<(u32, String)>,
    hosts: HashMap<String, (Resources, Resources)>,
    /// Whose jobs each host runs.
    users: HashMap<String, xce_client::types::JobUsers>,
    /// [`FreeHosts::never_fits`] answers by user and need. They depend on capacities and
    /// users only, which placing does not change, and pending jobs share a few of them: each
    /// is a scan of every host (100,000 jobs on 1,000 hosts asked 10^8 times a round).
    never: HashMap<String, HashMap<Resources, Option<(PendCode, String)>>>,
    /// How many of those scans were made.
    scans: usize,
    /// The last answer of [`FreeHosts::never_fits`], by user and need.
    last_never: Option<(String, Resources, NeverFits)>,
    /// Hosts that may be sent jobs beyond their free room ([`FreeHosts::take_ahead`]).
    ahead: Vec<String>,
    /// Rounds of a host's resources that may wait on it.
    rounds: u32,
}

impl FreeHosts {
    fn new(view: &View, loads: &HashMap<&str, Resources>) -> FreeHosts {
        let mut by_free = BTreeSet::new();
        let mut hosts = HashMap::new();
        let mut users = HashMap::new();
        for (name, h) in view.hosts.iter().filter(|(_, h)| h.state == HostState::Ok) {
            let load = loads.get(name.as_str()).cloned().unwrap_or_default();
            by_free.insert((h.capacity.minus(&load).cpus, name.clone()));
            hosts.insert(name.clone(), (h.capacity.clone(), load));
            users.insert(name.clone(), h.job_users.clone());
        }
        FreeHosts {
            by_free,
            hosts,
            users,
            never: HashMap::new(),
            scans: 0,
            last_never: None,
            rounds: view.dispatch_ahead,
            // Topped up in blocks: a host is sent jobs ahead in a round only when half its
            // rounds ahead (rounded up) of its cpus are free under its bound, so that one
            // dispatch write carries that many rounds of jobs, not one for each end.
            ahead: if view.sends_ahead() {
                view.hosts
                    .iter()
                    .filter(|(_, h)| h.state == HostState::Ok && h.queues_starts)
                    .filter(|(name, h)| {
                        let load = loads.get(name.as_str()).map_or(0, |l| l.cpus);
                        let bound = h.capacity.cpus.saturating_mul(1 + view.dispatch_ahead);
                        let block = h
                            .capacity
                            .cpus
                            .saturating_mul(view.dispatch_ahead.div_ceil(2));
                        bound.saturating_sub(load) >= block
                    })
                    .map(|(name, _)| name.clone())
                    .collect()
            } else {
                Vec::new()
            },
        }
    }

    /// Whether host `name` runs `user`'s jobs.
    fn runs(&self, name: &str, user: &str) -> bool {
        self.users
            .get(name)
            .is_some_and(|u| may_run(u, user).is_ok())
    }

    /// Why a job of `user` needing `need` fits no host here even when it is empty, if it
    /// does not, and its code. Judged host by host: the most cpus and the most memory may be
    /// on different hosts.
    fn never_fits(&mut self, need: &Resources, user: &str) -> Option<(PendCode, String)> {
        // Pending jobs come in runs of one user and need: the last answer, without a hash.
        if let Some((u, n, answer)) = &self.last_never {
            if u == user && n == need {
                return answer.clone();
            }
        }
        if let Some(known) = self.never.get(user).and_then(|by_need| by_need.get(need)) {
            let known = known.clone();
            self.last_never = Some((user.to_string(), need.clone(), known.clone()));
            return known;
        }
        self.scans += 1;
        let answer = self.never_fits_scan(need, user);
        self.never
            .entry(user.to_string())
            .or_default()
            .insert(need.clone(), answer.clone());
        self.last_never = Some((user.to_string(), need.clone(), answer.clone()));
        answer
    }

    fn never_fits_scan(&self, need: &Resources, user: &str) -> Option<(PendCode, String)> {
        if self.hosts.is_empty() {
            // Hosts may open or come back.
            return Some((PendCode::Resources, "no host is open and available".into()));
        }
        let theirs: Vec<&Resources> = self
            .hosts
            .iter()
            .filter(|(name, _)| self.runs(name, user))
            .map(|(_, (cap, _))| cap)
            .collect();
        if theirs.is_empty() {
            return Some((
                PendCode::TooBig,
                if user.is_empty() {
                    "no host runs jobs that name no user".into()
                } else {
                    format!("no host runs {user}'s jobs")
                },
            ));
        }
        let empty = Resources::default();
        if theirs.iter().any(|cap| fits(cap, &empty, need).is_ok()) {
            return None;
        }
        let largest = theirs.iter().fold(Resources::default(), |l, c| {
            let mut most = Resources::new(l.cpus.max(c.cpus), l.mem_mb.max(c.mem_mb));
            for name in need.gres.keys() {
                most.set_gres(name, l.gres(name).max(c.gres(name)));
            }
            most
        });
        let short_gres = need.gres.iter().find(|(name, n)| **n > largest.gres(name));
        let text = if need.cpus > largest.cpus {
            format!(
                "no host with {} cpus (largest has {})",
                need.cpus, largest.cpus
            )
        } else if need.mem_mb > largest.mem_mb {
            format!(
                "no host with {} MiB of memory (largest has {})",
                need.mem_mb, largest.mem_mb
            )
        } else if let Some((name, n)) = short_gres {
            format!("no host with {n} {name} (most has {})", largest.gres(name))
        } else if need.gres.is_empty() {
            format!(
                "no host with both {} cpus and {} MiB of memory",
                need.cpus, need.mem_mb
            )
        } else {
            format!(
                "no host with all of {} cpus, {} MiB of memory{} at once",
                need.cpus,
                need.mem_mb,
                need.gres
                    .iter()
                    .map(|(name, n)| format!(", {n} {name}"))
                    .collect::<String>()
            )
        };
        Some((PendCode::TooBig, text))
    }

    /// Places `need`, which fits some host when it is empty ([`FreeHosts::never_fits`]),
    /// on the host with the most free cpus that fits it now and that `admits` (name, capacity,
    /// load) lets it start on; else says why not.
    fn take(
        &mut self,
        need: &Resources,
        user: &str,
        mut admits: impl FnMut(&str, &Resources, &Resources) -> bool,
    ) -> Result<String, Short> {
        let mut room = false;
        let found = self
            .by_free
            .iter()
            .rev()
            .take_while(|(free, _)| *free >= need.cpus)
            .find(|(_, name)| {
                let (cap, load) = &self.hosts[name];
                let fits_now = self.runs(name, user) && fits(cap, load, need).is_ok();
                room |= fits_now;
                fits_now && admits(name, cap, load)
            })
            .cloned();
        let Some((free, name)) = found else {
            return Err(if room {
                Short::Reserved
            } else {
                Short::Room(self.short_of(need))
            });
        };
        self.by_free.remove(&(free, name.clone()));
        if let Some((cap, load)) = self.hosts.get_mut(&name) {
            *load = load.plus(need);
            self.by_free.insert((cap.minus(load).cpus, name.clone()));
        }
        Ok(name)
    }

    /// Places `need`, which fits no host's free room now, ahead on a host whose worker holds
    /// it until room frees (dispatch ahead): one that fits it alone and whose placed jobs stay
    /// within the configured rounds of what it offers, the one with the least queued there.
    fn take_ahead(&mut self, need: &Resources, user: &str) -> Option<String> {
        let name = self
            .ahead
            .iter()
            .filter(|name| self.runs(name, user))
            .filter_map(|name| {
                let (cap, load) = self.hosts.get(name)?;
                let room = fits_ahead(cap, load, need, self.rounds).is_ok();
                room.then(|| (load.cpus.saturating_sub(cap.cpus), name))
            })
            .min()
            .map(|(_, name)| name.clone())?;
        if let Some((cap, load)) = self.hosts.get_mut(&name) {
            self.by_free.remove(&(cap.minus(load).cpus, name.clone()));
            *load = load.plus(need);
            self.by_free.insert((cap.minus(load).cpus, name.clone()));
        }
        Some(name)
    }

    /// The hosts that run `user`'s jobs, with what each offers and holds, most free cpus first.
    fn hosts_for<'a>(
        &'a self,
        user: &'a str,
    ) -> impl Iterator<Item = (&'a str, &'a Resources, &'a Resources)> + 'a {
        self.by_free
            .iter()
            .rev()
            .filter(move |(_, name)| self.runs(name, user))
            .filter_map(|(_, name)| {
                let (cap, load) = self.hosts.get(name)?;
                Some((name.as_str(), cap, load))
            })
    }

    /// The reason for a job that would fit some host when it is empty, but fits none now.
    fn short_of(&self, need: &Resources) -> String {
        let most_cpus = self.by_free.last().map_or(0, |(f, _)| *f);
        if need.cpus > most_cpus {
            format!(
                "no host with {} free cpus (most free: {most_cpus})",
                need.cpus
            )
        } else {
            let most_mem = self
                .hosts
                .values()
                .map(|(cap, load)| cap.minus(load).mem_mb)
                .max()
                .unwrap_or(0);
            format!(
                "no host with {} free cpus and {} MiB of free memory (most free memory: {most_mem} MiB)",
                need.cpus, need.mem_mb
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::view::{HostView, PendingJob, PlacedJob, QueueView};
    use xce_client::types::JobUsers;

    fn r(cpus: u32, mem_mb: u64) -> Resources {
        Resources::new(cpus, mem_mb)
    }

    fn why(code: PendCode, text: &str) -> PendReason {
        PendReason::new(code, text)
    }

    fn view(hosts: &[(&str, u32, u64)], queues: &[(&str, i32, bool)]) -> View {
        let mut v = View::default();
        for (name, cpus, mem) in hosts {
            v.hosts.insert(
                name.to_string(),
                HostView {
                    capacity: r(*cpus, *mem),
                    state: HostState::Ok,
                    job_users: JobUsers::Any,
                    queues_starts: false,
                },
            );
        }
        for (name, priority, active) in queues {
            v.queues.insert(
                name.to_string(),
                QueueView {
                    priority: *priority,
                    active: *active,
                },
            );
        }
        v
    }

    fn pend(v: &mut View, id: JobId, queue: &str, priority: i32, need: Resources) {
        v.pending
            .insert(id, PendingJob::plain(queue, priority, need, None));
    }

    fn placed_ids(p: &Plan) -> Vec<JobId> {
        p.placements.iter().map(|p| p.id).collect()
    }

    fn none() -> (HashSet<JobId>, HashMap<String, Resources>) {
        (HashSet::new(), HashMap::new())
    }

    /// Dispatch ahead: once free room is taken, a host whose worker holds starts back gets
    /// up to the configured rounds of its resources, least queued first; only when configured so,
    /// on version 12, and never a job larger than the host.
    #[test]
    fn full_hosts_are_sent_one_more_round_ahead_when_their_workers_hold_it() {
        let ahead_view = |dispatch_ahead, version, queues_starts| {
            let mut v = view(&[("w1", 2, 0), ("w2", 2, 0)], &[("q", 0, true)]);
            v.dispatch_ahead = u32::from(dispatch_ahead);
            v.version = version;
            for h in v.hosts.values_mut() {
                h.queues_starts = queues_starts;
            }
            for id in 1..=10 {
                pend(&mut v, id, "q", 0, r(1, 0));
            }
            pend(&mut v, 11, "q", -1, r(3, 0));
            v
        };
        let (f, res) = none();
        let v = ahead_view(true, 12, true);
        let p = plan(&v, &f, &res, 100);
        assert_eq!(placed_ids(&p), (1..=8).collect::<Vec<_>>());
        let on = |host: &str| p.placements.iter().filter(|pl| pl.host == host).count();
        assert_eq!((on("w1"), on("w2")), (4, 4));
        // The rest wait for room; the job larger than a host is never sent ahead.
        assert!(p.reasons.iter().any(|(id, _)| *id == 9));
        assert!(p.placements.iter().all(|pl| pl.id != 11));
        // A host with less than a round free under its bound waits to be topped up.
        let mut v = ahead_view(true, 12, true);
        for (i, host) in ["w1", "w1", "w1", "w2", "w2"].iter().enumerate() {
            v.placed.insert(
                100 + i as JobId,
                PlacedJob::dispatched(host.to_string(), r(1, 0), None),
            );
        }
        let p = plan(&v, &f, &res, 100);
        assert_eq!(
            p.placements
                .iter()
                .map(|pl| pl.host.as_str())
                .collect::<Vec<_>>(),
            vec!["w2", "w2"]
        );
        for (dispatch_ahead, version, queues_starts) in
            [(false, 12, true), (true, 11, true), (true, 12, false)]
        {
            let v = ahead_view(dispatch_ahead, version, queues_starts);
            let p = plan(&v, &f, &res, 100);
            assert_eq!(
                placed_ids(&p),
                vec![1, 2, 3, 4],
                "{dispatch_ahead} {version} {queues_starts}"
            );
        }
    }

    #[test]
    fn a_round_scans_the_hosts_once_for_each_user_and_need() {
        let mut v = view(&[("w1", 4, 0), ("w2", 4, 0)], &[("q", 0, true)]);
        for id in 1..=50 {
            pend(&mut v, id, "q", 0, r(1, 0));
        }
        for id in 51..=60 {
            pend(&mut v, id, "q", 0, r(9, 0));
        }
        let loads = v.loads();
        let mut free = FreeHosts::new(&v, &loads);
        let answers: Vec<Option<String>> = v
            .pending
            .values()
            .map(|job| free.never_fits(&job.need, &job.user).map(|(_, text)| text))
            .collect();
        assert_eq!(free.scans, 2);
        assert_eq!(answers.iter().filter(|a| a.is_none()).count(), 50);
        assert_eq!(
            answers[55].as_deref(),
            Some("no host with 9 cpus (largest has 4)")
        );
    }

    /// An array places as many tasks in one round as it has room for and hosts hold, and
    /// what comes after it waits behind; a task of its own counts against its array's
    /// throttle.
    #[test]
    fn an_array_places_several_tasks_a_round_within_its_throttle() {
        let mut v = view(&[("w1", 2, 0), ("w2", 2, 0)], &[("q", 0, true)]);
        pend(&mut v, 1, "q", 0, r(1, 0));
        v.pending.get_mut(&1).unwrap().array_room = Some(5);
        pend(&mut v, 2, "q", 0, r(1, 0));
        let (f, res) = none();
        let p = plan(&v, &f, &res, 100);
        assert_eq!(placed_ids(&p), vec![1, 1, 1, 1]);
        assert_eq!(p.reasons, vec![(2, why(PendCode::Priority, BEHIND))]);
        // Room for two: two placements, and job 2 goes beside them.
        v.pending.get_mut(&1).unwrap().array_room = Some(2);
        let p = plan(&v, &f, &res, 100);
        assert_eq!(placed_ids(&p), vec![1, 1, 2]);
        // Tasks 3 and 4 of array 9 (throttle room 1 left): only one goes.
        let mut v = view(&[("w1", 4, 0)], &[("q", 0, true)]);
        for id in [3, 4] {
            pend(&mut v, id, "q", 0, r(1, 0));
            v.pending.get_mut(&id).unwrap().array_of = Some(9);
        }
        v.arrays.insert(
            9,
            crate::view::ArrayView {
                need: r(1, 0),
                room: Some(1),
                time_limit_s: None,
            },
        );
        let p = plan(&v, &f, &res, 100);
        assert_eq!(placed_ids(&p), vec![3]);
        assert!(p.reasons.is_empty(), "{:?}", p.reasons);
    }

    #[test]
    fn queue_priority_then_job_priority_then_submit_order() {
        let mut v = view(&[("w1", 3, 0)], &[("low", 10, true), ("high", 50, true)]);
        pend(&mut v, 1, "low", 100, r(1, 0));
        pend(&mut v, 2, "high", 0, r(1, 0));
        pend(&mut v, 3, "high", 5, r(1, 0));
        pend(&mut v, 4, "high", 0, r(1, 0));
        let (f, res) = none();
        let p = plan(&v, &f, &res, 100);
        assert_eq!(placed_ids(&p), vec![3, 2, 4]);
        assert_eq!(
            p.reasons,
            vec![(
                1,
                why(
                    PendCode::Resources,
                    "no host with 1 free cpus (most free: 0)"
                )
            )]
        );
    }

    #[test]
    fn a_job_too_big_for_any_host_says_so_and_blocks_nothing() {
        let mut v = view(&[("w1", 2, 1024), ("w2", 2, 1024)], &[("normal", 30, true)]);
        pend(&mut v, 1, "normal", 0, r(64, 0));
        pend(&mut v, 2, "normal", 0, r(1, 4096));
        pend(&mut v, 3, "normal", 0, r(1, 0));
        let (f, res) = none();
        let p = plan(&v, &f, &res, 100);
        assert_eq!(placed_ids(&p), vec![3]);
        assert_eq!(
            p.reasons,
            vec![
                (
                    1,
                    why(PendCode::TooBig, "no host with 64 cpus (largest has 2)")
                ),
                (
                    2,
                    why(
                        PendCode::TooBig,
                        "no host with 4096 MiB of memory (largest has 1024)"
                    )
                )
            ]
        );
    }

    /// Regression: the most cpus and the most memory were taken from different hosts, so a
    /// job that fits neither host counted as "waits for room" and blocked everything behind
    /// it for good.
    #[test]
    fn a_job_no_single_host_can_take_blocks_nothing() {
        let mut v = view(&[("w1", 4, 1024), ("w2", 2, 8192)], &[("normal", 30, true)]);
        pend(&mut v, 1, "normal", 0, r(4, 4096));
        pend(&mut v, 2, "normal", 0, r(1, 0));
        let (f, res) = none();
        let p = plan(&v, &f, &res, 100);
        assert_eq!(placed_ids(&p), vec![2]);
        assert_eq!(
            p.reasons,
            vec![(
                1,
                why(
                    PendCode::TooBig,
                    "no host with both 4 cpus and 4096 MiB of memory"
                )
            )]
        );
    }

    #[test]
    fn a_blocked_job_holds_back_the_smaller_ones_behind_it() {
        let mut v = view(&[("w1", 4, 0)], &[("normal", 30, true)]);
        v.placed
            .insert(9, PlacedJob::dispatched("w1".into(), r(2, 0), None));
        pend(&mut v, 1, "normal", 0, r(4, 0));
        pend(&mut v, 2, "normal", 0, r(1, 0));
        let (f, res) = none();
        let p = plan(&v, &f, &res, 100);
        assert!(p.placements.is_empty());
        assert_eq!(
            p.reasons,
            vec![
                (
                    1,
                    why(
                        PendCode::Resources,
                        "no host with 4 free cpus (most free: 2)"
                    )
                ),
                (2, why(PendCode::Priority, BEHIND))
            ]
        );
    }

    #[test]
    fn inactive_queues_closed_hosts_and_unchanged_reasons() {
        let mut v = view(&[("w1", 4, 0), ("w2", 4, 0)], &[("normal", 30, false)]);
        v.hosts.get_mut("w2").unwrap().state = HostState::Closed;
        pend(&mut v, 1, "normal", 0, r(1, 0));
        let (f, res) = none();
        let p = plan(&v, &f, &res, 100);
        assert_eq!(
            p.reasons,
            vec![(1, why(PendCode::QueueInactive, "queue normal is inactive"))]
        );
        // Once the controller has it, the same reason is not published again.
        v.pending.get_mut(&1).unwrap().pend_reason = Some("queue normal is inactive".into());
        assert_eq!(plan(&v, &f, &res, 100), Plan::default());
        v.queues.get_mut("normal").unwrap().active = true;
        let p = plan(&v, &f, &res, 100);
        assert_eq!(
            p.placements,
            vec![Placement {
                id: 1,
                host: "w1".into()
            }]
        );
    }

    #[test]
    fn in_flight_jobs_and_their_reservations_count() {
        let mut v = view(&[("w1", 2, 0)], &[("normal", 30, true)]);
        pend(&mut v, 1, "normal", 0, r(2, 0));
        pend(&mut v, 2, "normal", 0, r(2, 0));
        let in_flight: HashSet<JobId> = [1].into();
        let reserved: HashMap<String, Resources> = [("w1".to_string(), r(2, 0))].into();
        let p = plan(&v, &in_flight, &reserved, 100);
        assert!(p.placements.is_empty());
        assert_eq!(p.reasons.len(), 1);
        assert_eq!(p.reasons[0].0, 2);
    }

    #[test]
    fn a_held_job_or_one_before_its_begin_time_waits_and_blocks_nothing() {
        let mut v = view(&[("h1", 1, 0)], &[("normal", 0, true)]);
        pend(&mut v, 1, "normal", 9, r(1, 0));
        pend(&mut v, 2, "normal", 9, r(1, 0));
        pend(&mut v, 3, "normal", 0, r(1, 0));
        v.pending.get_mut(&1).unwrap().hold = true;
        v.pending.get_mut(&2).unwrap().begin_time_ms = Some(5_000);
        let (f, res) = none();
        let p = plan_at(&v, &f, &res, 100, 4_000);
        assert_eq!(placed_ids(&p), vec![3], "the waiting ones block nothing");
        assert_eq!(
            p.reasons[0],
            (1, why(PendCode::Held, "held: xce release lets it run"))
        );
        assert_eq!(p.reasons[1].1.code, PendCode::BeginTime);
        assert_eq!(p.wake_at_ms, Some(5_000));
        v.pending.remove(&3);
        let p = plan_at(&v, &f, &res, 100, 5_000);
        assert_eq!(placed_ids(&p), vec![2], "placed from its begin time on");
        assert_eq!(p.wake_at_ms, None);
    }

    /// A job whose dependency is not met is the controller's to explain: no placement, no
    /// reason of the scheduler's, and nothing behind it held back.
    #[test]
    fn a_job_waiting_for_its_dependency_is_placed_nowhere_and_blocks_nothing() {
        let mut v = view(&[("h1", 1, 0)], &[("normal", 0, true)]);
        pend(&mut v, 1, "normal", 9, r(1, 0));
        pend(&mut v, 2, "normal", 0, r(1, 0));
        v.pending.get_mut(&1).unwrap().waits_for_dependency = true;
        let (f, res) = none();
        let p = plan(&v, &f, &res, 100);
        assert_eq!(placed_ids(&p), vec![2]);
        assert!(p.reasons.iter().all(|(id, _)| *id != 1), "{:?}", p.reasons);
    }

    #[test]
    fn a_job_goes_only_to_a_host_that_runs_its_users_jobs() {
        let mut v = view(&[("any", 4, 0), ("bobs", 8, 0)], &[("normal", 30, true)]);
        v.hosts.get_mut("any").unwrap().job_users = JobUsers::Only("alice".into());
        v.hosts.get_mut("bobs").unwrap().job_users = JobUsers::Only("bob".into());
        for (id, user) in [(1, "carol"), (2, "bob"), (3, "alice")] {
            pend(&mut v, id, "normal", 0, r(1, 0));
            v.pending.get_mut(&id).unwrap().user = user.into();
        }
        let (f, res) = none();
        let p = plan(&v, &f, &res, 10);
        let placed: Vec<(JobId, &str)> = p
            .placements
            .iter()
            .map(|p| (p.id, p.host.as_str()))
            .collect();
        assert_eq!(placed, [(2, "bobs"), (3, "any")]);
        assert_eq!(
            p.reasons,
            [(1, why(PendCode::TooBig, "no host runs carol's jobs"))]
        );
    }

    /// A view at time 0 for backfill: `w1` with `cpus`, placed jobs (cpus, limit s, started
    /// at 0), pending jobs in priority order (cpus, limit s).
    fn timed(
        cpus: u32,
        depth: u32,
        placed: &[(u32, Option<u32>)],
        pending: &[(u32, Option<u32>)],
    ) -> View {
        let mut v = view(&[("w1", cpus, 0)], &[("q", 0, true)]);
        v.backfill_depth = depth;
        for (i, (cpus, limit)) in placed.iter().enumerate() {
            let mut job = PlacedJob::dispatched("w1".into(), r(*cpus, 0), *limit);
            job.started_ms = Some(0);
            v.placed.insert(100 + i as JobId, job);
        }
        for (i, (cpus, limit)) in pending.iter().enumerate() {
            let id = i as JobId + 1;
            pend(&mut v, id, "q", 0, r(*cpus, 0));
            v.pending.get_mut(&id).unwrap().time_limit_s = *limit;
        }
        v
    }

    #[test]
    fn short_jobs_backfill_before_a_reserved_start_and_longer_ones_wait() {
        // 2 of 4 cpus run until 100 s. Job 1 (4 cpus) can start at 100 s; job 2 ends by 60 s
        // and goes now; jobs 3 (to 200 s) and 4 (no limit) would delay job 1.
        let pending = [(4, Some(50)), (1, Some(60)), (1, Some(200)), (1, None)];
        let v = timed(4, 100, &[(2, Some(100))], &pending);
        let (f, res) = none();
        let p = plan_at(&v, &f, &res, 100, 0);
        assert_eq!(placed_ids(&p), vec![2]);
        assert_eq!(
            p.reservations,
            vec![
                Reservation {
                    id: 1,
                    host: "w1".into(),
                    start_ms: 100_000
                },
                // Jobs 3 and 4 are reserved after job 1 in turn.
                Reservation {
                    id: 3,
                    host: "w1".into(),
                    start_ms: 150_000
                },
                Reservation {
                    id: 4,
                    host: "w1".into(),
                    start_ms: 150_000
                },
            ]
        );
        let reasons: Vec<(JobId, PendCode)> =
            p.reasons.iter().map(|(id, r)| (*id, r.code)).collect();
        assert_eq!(
            reasons,
            vec![
                (1, PendCode::Resources),
                (3, PendCode::Priority),
                (4, PendCode::Priority)
            ]
        );
        assert_eq!(p.reasons[1].1.text, RESERVED);
        // Strict priority (depth 0) places nothing behind job 1.
        let v = timed(4, 0, &[(2, Some(100))], &pending);
        let p = plan_at(&v, &f, &res, 100, 0);
        assert!(p.placements.is_empty() && p.reservations.is_empty());
        assert_eq!(p.reasons[1].1.text, BEHIND);
    }

    /// From version 13 a reserved job's reason carries its start (rounded up to a second),
    /// published again only once it moved by the slack.
    #[test]
    fn a_reserved_start_is_published_with_the_reason_from_version_13() {
        let (f, res) = none();
        let mut v = timed(4, 100, &[(2, Some(100))], &[(4, Some(50))]);
        v.version = 12;
        let p = plan_at(&v, &f, &res, 100, 0);
        assert_eq!(p.reasons[0].1.expected_start_ms, None);
        v.version = 13;
        let p = plan_at(&v, &f, &res, 100, 0);
        assert_eq!(p.reasons[0].1.expected_start_ms, Some(100_000));
        // Known as published: not sent again while it stays within the slack...
        let job = v.pending.get_mut(&1).unwrap();
        job.pend_reason = Some(p.reasons[0].1.text.clone());
        job.expected_start_ms = Some(100_000 + EXPECTED_START_SLACK_MS - 1000);
        assert!(plan_at(&v, &f, &res, 100, 0).reasons.is_empty());
        // ...and sent once it moved further.
        v.pending.get_mut(&1).unwrap().expected_start_ms = Some(100_000 + EXPECTED_START_SLACK_MS);
        let p = plan_at(&v, &f, &res, 100, 0);
        assert_eq!(p.reasons[0].1.expected_start_ms, Some(100_000));
        // A start 1 ms into a second is published as the next second.
        let mut v = timed(4, 100, &[(2, Some(100))], &[(4, Some(50))]);
        v.version = 13;
        v.placed.values_mut().for_each(|j| j.started_ms = Some(1));
        let p = plan_at(&v, &f, &res, 100, 0);
        assert_eq!(p.reasons[0].1.expected_start_ms, Some(101_000));
    }

    /// The slack counts on both sides: a running job holds its room that long past its limit
    /// (so the reserved start is that much later, when the room is surely free), and a job
    /// that would start now must end, slack and all, before it.
    #[test]
    fn the_slack_counts_for_running_jobs_and_for_jobs_that_would_start() {
        let (f, res) = none();
        let pending = [(4, Some(50)), (1, Some(60))];
        for (slack_ms, placed, reserved_at) in [
            (0, vec![2], 100_000),
            (20_000, vec![2], 120_000),
            (30_000, vec![2], 130_000),
        ] {
            let mut v = timed(4, 100, &[(2, Some(100))], &pending);
            v.backfill_slack_ms = slack_ms;
            let p = plan_at(&v, &f, &res, 100, 0);
            assert_eq!(placed_ids(&p), placed, "slack {slack_ms}");
            assert_eq!(p.reservations[0].start_ms, reserved_at, "slack {slack_ms}");
        }
    }

    #[test]
    fn with_no_end_known_nothing_passes_a_blocked_job() {
        // The running job has no limit: job 1's start cannot be reserved, so job 2 (which
        // fits now) must not pass it.
        let v = timed(4, 100, &[(2, None)], &[(4, Some(50)), (1, Some(10))]);
        let (f, res) = none();
        let p = plan_at(&v, &f, &res, 100, 0);
        assert!(p.placements.is_empty() && p.reservations.is_empty());
        assert_eq!(p.reasons[1].1.text, BEHIND);
    }

    #[test]
    fn beyond_the_depth_a_blocked_job_holds_nothing_back() {
        // EASY (depth 1): job 1 is reserved at 100 s; job 2 gets no reservation; job 3
        // fits in the gap and starts though job 2 waits.
        let pending = [(4, Some(50)), (3, Some(50)), (2, Some(100))];
        let v = timed(4, 1, &[(2, Some(100))], &pending);
        let (f, res) = none();
        let p = plan_at(&v, &f, &res, 100, 0);
        assert_eq!(placed_ids(&p), vec![3]);
        assert_eq!(p.reservations.len(), 1);
        // A job that ends after the reservation, but on resources it does not need, may start
        // too: 8 cpus, 4 run to 100 s, job 1 needs 6 from 100 s; a 2-cpu job with no limit fits
        // beside it for ever, a third 1-cpu job of no limit does not.
        let pending = [(6, Some(50)), (2, None), (1, None)];
        let v = timed(8, 1, &[(4, Some(100))], &pending);
        let p = plan_at(&v, &f, &res, 100, 0);
        assert_eq!(placed_ids(&p), vec![2]);
        assert_eq!(
            p.reasons.last().map(|(id, r)| (*id, r.text.as_str())),
            Some((3, RESERVED))
        );
    }

    /// A view with time limits and starts, for backfill's properties.
    fn arb_timed_view() -> impl Strategy<Value = (View, u64)> {
        let hosts = prop::collection::vec(1u32..6, 1..4);
        let limit = prop_oneof![1 => Just(None), 4 => (1u32..100).prop_map(Some)];
        let placed = prop::collection::vec(
            (
                0usize..4,
                1u32..4,
                limit.clone(),
                prop_oneof![Just(None), (0u64..50_000).prop_map(Some)],
                any::<bool>(),
            ),
            0..8,
        );
        let pending = prop::collection::vec((1u32..6, limit, -1i32..2), 0..20);
        let slack = prop_oneof![Just(0u64), 1u64..10_000];
        (hosts, placed, pending, (0u32..6, slack), 50_000u64..60_000).prop_map(
            |(hosts, placed, pending, (depth, slack), now)| {
                let named: Vec<(String, u32, u64)> = hosts
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (format!("w{i}"), *c, 0))
                    .collect();
                let refs: Vec<(&str, u32, u64)> =
                    named.iter().map(|(n, c, m)| (n.as_str(), *c, *m)).collect();
                let mut v = view(&refs, &[("q", 0, true)]);
                v.backfill_depth = depth;
                v.backfill_slack_ms = slack;
                for (i, (h, cpus, limit, started, suspended)) in placed.into_iter().enumerate() {
                    if h < hosts.len() {
                        let mut job = PlacedJob::dispatched(format!("w{h}"), r(cpus, 0), limit);
                        job.started_ms = started;
                        job.suspended = suspended && started.is_some();
                        v.placed.insert(1000 + i as JobId, job);
                    }
                }
                for (i, (cpus, limit, prio)) in pending.into_iter().enumerate() {
                    let id = i as JobId + 1;
                    pend(&mut v, id, "q", prio, r(cpus, 0));
                    v.pending.get_mut(&id).unwrap().time_limit_s = limit;
                }
                (v, now)
            },
        )
    }

    proptest! {
        /// Whatever backfill starts and reserves, each host's committed future (what runs, to
        /// its estimated end; what starts now, to its limit; every reservation's window) never
        /// needs more than the host has at any time beyond what ran there already: so no start
        /// delays a reservation, as jobs only end sooner than their estimates. And a placed
        /// job never comes after a blocked one that got no reservation within the depth.
        #[test]
        fn backfill_never_overcommits_any_host_at_any_time((v, now) in arb_timed_view()) {
            let (f, res) = none();
            let p = plan_at(&v, &f, &res, 1000, now);
            prop_assert!(p.reservations.len() <= v.backfill_depth as usize);
            // (host, from, until, cpus): everything committed.
            let mut windows: Vec<(String, u64, Option<u64>, u32)> = Vec::new();
            for job in v.placed.values() {
                let end = crate::backfill::ends_at(job, now, v.sends_ahead(), v.backfill_slack_ms);
                windows.push((job.host.clone(), now, end, job.need.cpus));
            }
            for pl in &p.placements {
                let job = &v.pending[&pl.id];
                let end = job.time_limit_s.map(|l| now + u64::from(l) * 1000 + v.backfill_slack_ms);
                windows.push((pl.host.clone(), now, end, job.need.cpus));
            }
            for rsv in &p.reservations {
                prop_assert!(rsv.start_ms >= now);
                let job = &v.pending[&rsv.id];
                let end = job.time_limit_s.map(|l| rsv.start_ms + u64::from(l) * 1000 + v.backfill_slack_ms);
                windows.push((rsv.host.clone(), rsv.start_ms, end, job.need.cpus));
            }
            for (name, host) in &v.hosts {
                let mine: Vec<_> = windows.iter().filter(|w| &w.0 == name).collect();
                let at = |t: u64| -> u32 {
                    mine.iter()
                        .filter(|(_, from, until, _)| *from <= t && until.is_none_or(|u| t < u))
                        .map(|w| w.3)
                        .sum()
                };
                let already = at(now).saturating_sub(
                    p.placements.iter().filter(|pl| &pl.host == name)
                        .map(|pl| v.pending[&pl.id].need.cpus).sum::<u32>()
                        + p.reservations.iter().filter(|rs| &rs.host == name && rs.start_ms == now)
                        .map(|rs| v.pending[&rs.id].need.cpus).sum::<u32>(),
                );
                // Jobs there before the round may over-fill a host (sent ahead, or a test's
                // making); what the round adds must fit beside them.
                let cap = host.capacity.cpus.max(already);
                let mut times: Vec<u64> = mine.iter().flat_map(|w| [Some(w.1), w.2]).flatten().collect();
                times.push(now);
                for t in times {
                    prop_assert!(at(t) <= cap, "{} over-committed at {}: {} of {}; {:?}", name, t, at(t), cap, p);
                }
            }
        }
    }

    fn arb_view() -> impl Strategy<Value = View> {
        let hosts = prop::collection::vec(
            (
                1u32..5,
                prop_oneof![Just(0u64), 256u64..2048],
                any::<bool>(),
                0usize..4,
                any::<bool>(),
            ),
            0..5,
        );
        let jobs = prop::collection::vec(
            (
                0usize..3,
                -2i32..3,
                0u32..4,
                prop_oneof![Just(0u64), 64u64..1024],
                0usize..4,
            ),
            0..30,
        );
        let placed = prop::collection::vec((0usize..5, 0u32..3, 0u64..512), 0..6);
        let ahead = (0u32..=3, 11u32..=12);
        (
            hosts,
            jobs,
            placed,
            prop::collection::vec(any::<bool>(), 3),
            ahead,
        )
            .prop_map(|(hosts, jobs, placed, active, (dispatch_ahead, version))| {
                let mut v = View {
                    dispatch_ahead,
                    version,
                    ..View::default()
                };
                for (i, (cpus, mem, ok, users, queues_starts)) in hosts.iter().enumerate() {
                    let job_users = match users {
                        0 | 1 => JobUsers::Any,
                        2 => JobUsers::EachUser { root: false },
                        _ => JobUsers::Only("bob".into()),
                    };
                    v.hosts.insert(
                        format!("w{i}"),
                        HostView {
                            capacity: r(*cpus, *mem),
                            state: if *ok {
                                HostState::Ok
                            } else {
                                HostState::Closed
                            },
                            job_users,
                            queues_starts: *queues_starts,
                        },
                    );
                }
                for (i, prio) in [10, 20, 30].iter().enumerate() {
                    v.queues.insert(
                        format!("q{i}"),
                        QueueView {
                            priority: *prio,
                            active: active[i],
                        },
                    );
                }
                for (i, (q, prio, cpus, mem, user)) in jobs.into_iter().enumerate() {
                    let id = i as JobId + 1;
                    pend(&mut v, id, &format!("q{q}"), prio, r(cpus, mem));
                    if let Some(job) = v.pending.get_mut(&id) {
                        job.user = ["", "bob", "root", "alice"][user].to_string();
                    }
                }
                for (i, (h, cpus, mem)) in placed.into_iter().enumerate() {
                    if h < hosts.len() {
                        v.placed.insert(
                            1000 + i as JobId,
                            PlacedJob::dispatched(format!("w{h}"), r(cpus, mem), None),
                        );
                    }
                }
                v
            })
    }

    proptest! {
        /// Nothing is over-committed beyond what was already there, but for jobs sent ahead
        /// (configured so, on version 12, to a host whose worker holds them back, which they
        /// fit alone, within the configured rounds of what it offers); each job is placed once, on an `ok` host
        /// of an active queue; and no placed job comes after (in the order) a blocked job
        /// that could fit some empty host.
        #[test]
        fn placements_never_overcommit_and_keep_priority(v in arb_view(), max in 1usize..40) {
            let (f, res) = none();
            let p = plan(&v, &f, &res, max);
            prop_assert!(p.placements.len() <= max);
            let mut loads = v.loads().into_iter().map(|(k, l)| (k.to_string(), l)).collect::<HashMap<_, _>>();
            let mut seen = HashSet::new();
            for pl in &p.placements {
                prop_assert!(seen.insert(pl.id), "job {} placed twice", pl.id);
                let job = &v.pending[&pl.id];
                let host = &v.hosts[&pl.host];
                prop_assert_eq!(host.state, HostState::Ok);
                prop_assert!(may_run(&host.job_users, &job.user).is_ok(), "{:?} on {:?}", job, host);
                prop_assert!(v.queues[&job.queue].active);
                let load = loads.entry(pl.host.clone()).or_default();
                let room = fits(&host.capacity, load, &job.need).is_ok();
                let ahead = v.sends_ahead()
                    && host.queues_starts
                    && fits_ahead(&host.capacity, load, &job.need, v.dispatch_ahead).is_ok();
                prop_assert!(room || ahead, "{:?} on {:?} with {:?}", job, host, load);
                *load = load.plus(&job.need);
            }
            // Strict priority: a job given a "fits now nowhere" reason that could fit an empty
            // host comes after every placed job of an active queue.
            let key = |id: JobId| {
                let j = &v.pending[&id];
                (std::cmp::Reverse(v.queues[&j.queue].priority), std::cmp::Reverse(j.priority), id)
            };
            for (id, reason) in &p.reasons {
                // Every reason's code is the one its text reads as where a cluster still
                // writes format 6 (which keeps the text alone): nothing is lost there.
                prop_assert_eq!(reason.code, PendCode::of_v6_text(&reason.text), "{:?}", reason);
                let reason = &reason.text;
                let need = &v.pending[id].need;
                let user = &v.pending[id].user;
                let fits_some_empty_host = v.hosts.values().any(|h| {
                    h.state == HostState::Ok
                        && may_run(&h.job_users, user).is_ok()
                        && fits(&h.capacity, &Resources::default(), need).is_ok()
                });
                if reason.contains("free") {
                    // Only a job that some empty host could take holds the others back...
                    prop_assert!(fits_some_empty_host, "job {} blocks but can never run: {}", id, reason);
                    for pl in &p.placements {
                        prop_assert!(key(pl.id) < key(*id), "job {} overtook blocked job {}", pl.id, id);
                    }
                }
                // ...and a job that no host could ever take is told so.
                if !fits_some_empty_host && v.queues[&v.pending[id].queue].active {
                    prop_assert!(reason.starts_with("no host"), "job {}: {}", id, reason);
                }
            }
            // Every pending job is either placed, given a reason, or left for the next round
            // (only when `max` was reached).
            for id in v.pending.keys() {
                let placed = seen.contains(id);
                let reasoned = p.reasons.iter().any(|(r, _)| r == id);
                prop_assert!(placed || reasoned || p.placements.len() == max, "job {} left out", id);
            }
        }
    }
}
