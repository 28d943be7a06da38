//! Host transitions: a worker's join (registration and resync), operator open/close, the
//! primary's liveness conclusions (unavailable, lost). Each change goes through
//! `State::update_host`; what it does to jobs goes through the job transitions.

use std::collections::HashSet;

use xce_client::fit::may_run;
use xce_client::types::{
    HeldJob, HeldPhase, HostAction, HostAttributes, JobOrder, JobSignal, JobState,
};
use xce_proto::Status;

use super::{
    check_size, is_placed, validate_host_name, HostRecord, Outcome, Push, State, MAX_PATH_BYTES,
};

fn no_such_host(name: &str) -> Outcome {
    Outcome::rejected(Status::NoEnt, format!("host {name:?}: no such host"))
}

impl State {
    pub(super) fn register_host(
        &mut self,
        at_ms: u64,
        attrs: HostAttributes,
        held: Vec<HeldJob>,
    ) -> Outcome {
        if let Err(message) = validate_host_name(&attrs.name) {
            return Outcome::rejected(Status::Invalid, message);
        }
        if attrs.resources.cpus == 0 {
            return Outcome::rejected(Status::Invalid, "cpus: a host needs at least one cpu");
        }
        if let Err(message) = check_size("host.spool_dir", attrs.spool_dir.len(), MAX_PATH_BYTES) {
            return Outcome::rejected(Status::Invalid, message);
        }
        let before = self.hosts.get(&attrs.name).map(HostRecord::state);
        let fresh = HostRecord {
            resources: attrs.resources.clone(),
            spool_dir: String::new(),
            job_users: super::JobUsers::Any,
            closed: false,
            available: true,
        };
        self.update_host(&attrs.name, Some(fresh), |record| {
            record.resources = attrs.resources.clone();
            record.spool_dir = attrs.spool_dir.clone();
            record.job_users = attrs.job_users.clone();
            record.available = true;
        });
        // A join may change what the host offers (and whether its worker holds starts back,
        // which the primary keeps beside its agent): an event even when its state did not
        // change, so that a scheduler reads the host again.
        if let Some(state) =
            before.filter(|b| Some(*b) == self.hosts.get(&attrs.name).map(HostRecord::state))
        {
            self.emitted.push(super::Event::Host {
                name: attrs.name.clone(),
                state,
            });
        }
        self.resync(at_ms, &attrs.name, &held)
    }

    /// Reconciles what a worker holds with what the state says is placed on its host. The
    /// worker's copy of an attempt that is unknown, stale or over is killed (fencing); a
    /// job placed here that the worker does not hold is lost, unless it was only dispatched:
    /// then it is sent again, as a new attempt. The worker may have started it and died
    /// before its start report left (a copy that ran, was stopped by its lease, and must not
    /// pass for the next run): a new attempt fences anything the old one left behind.
    fn resync(&mut self, at_ms: u64, host: &str, held: &[HeldJob]) -> Outcome {
        let mut orders = Vec::new();
        let mut current = HashSet::new();
        for h in held {
            let order = |signal| JobOrder {
                id: h.id,
                attempt: h.attempt,
                signal,
            };
            let current_state = self
                .jobs
                .get(&h.id)
                .filter(|j| {
                    j.attempt == h.attempt && j.host.as_deref() == Some(host) && is_placed(j.state)
                })
                .map(|j| j.state);
            let Some(state) = current_state else {
                if h.phase != HeldPhase::Finished {
                    orders.push(order(JobSignal::Kill));
                }
                continue;
            };
            current.insert(h.id);
            if h.phase == HeldPhase::Finished {
                continue;
            }
            if self.intents.contains_key(&h.id) {
                orders.push(order(JobSignal::Kill));
            } else if state == JobState::Suspended && h.phase == HeldPhase::Running {
                orders.push(order(JobSignal::Suspend));
            } else if state == JobState::Running && h.phase == HeldPhase::Suspended {
                orders.push(order(JobSignal::Resume));
            }
        }
        let job_users = self.hosts.get(host).map(|h| h.job_users.clone());
        let missing: Vec<(u64, JobState, u32, Result<(), String>)> = self
            .placed_on(host)
            .filter(|j| !current.contains(&j.id))
            .map(|j| {
                let runs = job_users
                    .as_ref()
                    .map_or(Ok(()), |u| may_run(u, &j.spec.user));
                (j.id, j.state, j.attempt, runs)
            })
            .collect();
        for (id, state, attempt, runs) in missing {
            let unstarted = state == JobState::Dispatched && !self.intents.contains_key(&id);
            if let (true, Err(why)) = (unstarted, &runs) {
                // The worker came back running other users' jobs: this one never started
                // there and goes back to its queue.
                let reason = format!("host {host} no longer runs this job: {why}");
                self.update_job(id, |job| super::jobs::requeue(job, &reason));
            } else if unstarted && attempt < super::MAX_ATTEMPT {
                let version = self.active_version;
                let next = self.update_job(id, |job| {
                    job.attempt += 1;
                    super::runs::dispatched(job, version);
                    job.attempt
                });
                if let Some(attempt) = next {
                    self.push(Push::Start {
                        host: host.to_string(),
                        id,
                        attempt,
                    });
                }
            } else {
                self.lose(at_ms, id, &format!("lost by its worker on {host}"));
            }
        }
        Outcome::Resynced { orders }
    }

    /// Ends or requeues every job placed on a host that stayed unavailable too long.
    pub(super) fn host_lost(&mut self, at_ms: u64, name: &str) -> Outcome {
        match self.hosts.get(name) {
            None => return no_such_host(name),
            Some(h) if h.available => {
                return Outcome::rejected(
                    Status::Conflict,
                    format!("host {name:?} is available again"),
                )
            }
            Some(_) => {}
        }
        let placed: Vec<u64> = self.placed_on(name).map(|j| j.id).collect();
        for id in placed {
            self.lose(at_ms, id, &format!("host {name} lost"));
        }
        Outcome::Done
    }

    pub(super) fn control_host(&mut self, name: &str, action: HostAction) -> Outcome {
        match self.update_host(name, None, |h| h.closed = action == HostAction::Close) {
            Some(()) => Outcome::Done,
            None => no_such_host(name),
        }
    }

    pub(super) fn set_host_available(&mut self, name: &str, available: bool) -> Outcome {
        match self.update_host(name, None, |h| h.available = available) {
            Some(()) => Outcome::Done,
            None => no_such_host(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use xce_client::types::{HostState, JobAction, RequestToken};

    use super::super::testing::*;
    use super::super::{Command, Event, LostPolicy, QueueDef};
    use super::*;

    #[test]
    fn hosts_register_close_and_go_unavailable() {
        let mut s = State::default();
        let joined = Outcome::Resynced { orders: vec![] };
        let (outcome, events) = s.apply_emitting(1, join_with(1, "w1", 4, 1000, vec![]));
        assert_eq!(outcome, joined);
        assert_eq!(
            events,
            vec![Event::Host {
                name: "w1".into(),
                state: HostState::Ok
            }]
        );
        assert_eq!(s.hosts()[0].state, HostState::Ok);
        let close = Command::ControlHost {
            token: RequestToken(2),
            name: "w1".into(),
            action: HostAction::Close,
        };
        assert_eq!(s.apply(1, close), Outcome::Done);
        assert_eq!(s.hosts()[0].state, HostState::Closed);
        let down = Command::SetHostAvailable {
            name: "w1".into(),
            available: false,
        };
        assert_eq!(s.apply(1, down), Outcome::Done);
        assert_eq!(s.hosts()[0].state, HostState::Unavailable);
        // Re-joining brings it back, still closed, with new attributes.
        assert_eq!(s.apply(1, join_with(3, "w1", 8, 1000, vec![])), joined);
        assert_eq!(
            (s.hosts()[0].state, s.hosts()[0].capacity.cpus),
            (HostState::Closed, 8)
        );
        let mut bad = join_with(4, "w1", 1, 0, vec![]);
        if let Command::RegisterHost { host, .. } = &mut bad {
            host.name = "bad name".into();
        }
        rejected_with(&s.apply(1, bad), Status::Invalid, "host.name");
        let missing = Command::ControlHost {
            token: RequestToken(5),
            name: "w9".into(),
            action: HostAction::Open,
        };
        rejected_with(&s.apply(1, missing), Status::NoEnt, "w9");
    }

    #[test]
    fn a_worker_back_for_other_users_gets_no_start_it_would_run_as_someone_else() {
        let mut s = State::default();
        s.apply(0, join_cmd(1, "w1", vec![]));
        let mut alices = spec(&["true"]);
        alices.user = "alice".into();
        submit(&mut s, 2, alices);
        s.apply(1, dispatch_cmd(3, 1, "w1"));
        // Back as bob's worker, before the start reached it: alice's job is not sent there.
        let mut rejoin = join_cmd(4, "w1", vec![]);
        if let Command::RegisterHost { host, .. } = &mut rejoin {
            host.job_users = xce_client::types::JobUsers::Only("bob".into());
        }
        let (_, pushes) = apply_pushes(&mut s, rejoin);
        assert_eq!(pushes, vec![]);
        let job = s.job(1).unwrap();
        assert_eq!(job.state, JobState::Pending);
        let reason = job.pend_reason.as_deref().unwrap();
        assert!(reason.contains("only bob's"), "{reason}");
    }

    #[test]
    fn resync_fences_stale_copies_resends_undelivered_starts_and_loses_missing_jobs() {
        // Jobs 1-4 run on w1; job 5 is only dispatched.
        let mut s = running_on_w1(4);
        submit(&mut s, 50, spec(&["true"]));
        s.apply(1, dispatch_cmd(51, 5, "w1"));
        control(&mut s, 52, 2, JobAction::Suspend);
        control(&mut s, 53, 3, JobAction::Kill);
        let (outcome, pushes) = apply_pushes(
            &mut s,
            join_cmd(
                60,
                "w1",
                vec![
                    held(1, 1, HeldPhase::Running),  // current: nothing to do
                    held(2, 1, HeldPhase::Running),  // missed its suspend
                    held(3, 1, HeldPhase::Running),  // being killed: kill again
                    held(9, 4, HeldPhase::Running),  // unknown to the controller: fenced
                    held(1, 7, HeldPhase::Finished), // stale but over: its report will be refused
                ],
            ),
        );
        assert_eq!(
            outcome,
            Outcome::Resynced {
                orders: vec![
                    order(2, 1, JobSignal::Suspend),
                    order(3, 1, JobSignal::Kill),
                    order(9, 4, JobSignal::Kill),
                ],
            }
        );
        // Job 5's start was never confirmed: it is sent again as a new attempt, so that a
        // copy of attempt 1 that did start (and its reports) is fenced.
        assert_eq!(
            pushes,
            vec![Push::Start {
                host: "w1".into(),
                id: 5,
                attempt: 2
            }]
        );
        let stale = s.apply(
            22,
            Command::JobStarted {
                token: RequestToken(62),
                id: 5,
                attempt: 1,
                host: "w1".into(),
            },
        );
        assert!(matches!(stale, Outcome::Rejected { .. }), "{stale:?}");
        // Job 4 was running, and the worker does not have it: lost, requeued by policy.
        let job = s.job(4).unwrap();
        assert_eq!((job.state, job.host.as_deref()), (JobState::Pending, None));
        assert_eq!(
            job.pend_reason.as_deref(),
            Some("requeued: lost by its worker on w1")
        );
        assert_eq!(s.job(5).unwrap().state, JobState::Dispatched);
        // A copy of the lost attempt that shows up later is fenced.
        let late = s.apply(21, join_cmd(61, "w1", vec![held(4, 1, HeldPhase::Running)]));
        let Outcome::Resynced { orders } = late else {
            panic!("{late:?}")
        };
        assert!(orders.contains(&order(4, 1, JobSignal::Kill)));
    }

    #[test]
    fn lost_hosts_requeue_or_exit_per_queue_policy_and_honour_kills() {
        let mut s = running_on_w1(2);
        s.apply(
            0,
            Command::Barrier {
                term: 1,
                queues: vec![QueueDef {
                    name: "strict".into(),
                    priority: 1,
                    on_host_lost: LostPolicy::Exit,
                }],
            },
        );
        let mut strict = spec(&["sleep", "1"]);
        strict.queue = "strict".into();
        submit(&mut s, 70, strict);
        s.apply(1, dispatch_cmd(71, 3, "w1"));
        control(&mut s, 72, 2, JobAction::Kill);
        rejected_with(
            &s.apply(30, Command::HostLost { name: "w1".into() }),
            Status::Conflict,
            "available again",
        );
        s.apply(
            30,
            Command::SetHostAvailable {
                name: "w1".into(),
                available: false,
            },
        );
        assert_eq!(s.unavailable_hosts_with_jobs(), vec!["w1".to_string()]);
        assert_eq!(
            s.apply(31, Command::HostLost { name: "w1".into() }),
            Outcome::Done
        );
        let (a, b, c) = (s.job(1).unwrap(), s.job(2).unwrap(), s.job(3).unwrap());
        assert_eq!(
            (a.state, a.pend_reason.as_deref()),
            (JobState::Pending, Some("requeued: host w1 lost"))
        );
        assert_eq!(
            (b.state, b.reason.as_deref()),
            (JobState::Exited, Some("killed"))
        );
        assert_eq!(
            (c.state, c.reason.as_deref()),
            (JobState::Exited, Some("host w1 lost"))
        );
        assert!(s.unavailable_hosts_with_jobs().is_empty());
        assert_eq!(s.hosts()[0].used.cpus, 0);
    }
}
