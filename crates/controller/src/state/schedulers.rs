//! The scheduler lease and the scheduler's decisions: one active scheduler at a time, fenced
//! by an epoch that every decision carries, so a deposed scheduler's late decisions are
//! refused at apply and can never place a job twice. Lease times are the proposing primary's
//! (`at_ms`), like every time in the state.

use xce_client::types::{DependencyState, JobId, JobState, PendReason, Placement, Refusal};
use xce_client::version::ACCOUNTING;
use xce_proto::Status;

use super::{Outcome, State};

/// Who may place jobs, and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerLease {
    pub name: String,
    /// The holding process (two schedulers given one name are still told apart).
    pub instance: u64,
    /// Raised whenever the lease passes to a new holder (or back after it ran out).
    pub epoch: u64,
    /// The primary's time at which the lease runs out unless renewed.
    pub expires_ms: u64,
}

impl State {
    /// The lease, if one is held and unexpired at `now_ms`.
    pub fn scheduler_lease(&self, now_ms: u64) -> Option<&SchedulerLease> {
        self.scheduler.as_ref().filter(|l| now_ms <= l.expires_ms)
    }

    pub(super) fn acquire_scheduler(
        &mut self,
        at_ms: u64,
        name: String,
        instance: u64,
        ttl_ms: u32,
    ) -> Outcome {
        if ttl_ms == 0 {
            return self.release_scheduler(at_ms, &name, instance);
        }
        let expires_ms = at_ms.saturating_add(u64::from(ttl_ms));
        let epoch = match &self.scheduler {
            // A renewal keeps the epoch: the holder's decisions in flight stay valid.
            Some(l) if l.name == name && l.instance == instance && at_ms <= l.expires_ms => l.epoch,
            Some(l) if at_ms <= l.expires_ms => {
                let twin = if l.name == name {
                    " (another process under the same name: give each scheduler its own --name)"
                } else {
                    ""
                };
                return Outcome::rejected(
                    Status::Conflict,
                    format!(
                        "scheduler {:?} holds the lease for another {} ms{twin}",
                        l.name,
                        l.expires_ms - at_ms
                    ),
                );
            }
            Some(l) if l.epoch >= super::MAX_EPOCH => {
                return Outcome::rejected(
                    Status::Conflict,
                    format!("scheduler epochs are exhausted ({})", l.epoch),
                );
            }
            Some(l) => l.epoch + 1,
            None => 1,
        };
        self.scheduler = Some(SchedulerLease {
            name,
            instance,
            epoch,
            expires_ms,
        });
        Outcome::Leased { epoch }
    }

    /// Ends the lease now if `name`/`instance` holds it (a clean stop); the next holder gets
    /// the next epoch, like after an expiry. Releasing a lease one does not hold does nothing.
    fn release_scheduler(&mut self, at_ms: u64, name: &str, instance: u64) -> Outcome {
        if let Some(l) = self.scheduler.as_mut() {
            if l.name == name && l.instance == instance && at_ms <= l.expires_ms {
                l.expires_ms = at_ms.saturating_sub(1);
            }
        }
        Outcome::Done
    }

    /// Refuses a decision made under any lease but the current, unexpired one.
    fn check_epoch(&self, at_ms: u64, epoch: u64) -> Result<(), Outcome> {
        match self.scheduler_lease(at_ms) {
            Some(l) if l.epoch == epoch => Ok(()),
            Some(l) => Err(Outcome::rejected(
                Status::Conflict,
                format!(
                    "scheduler epoch {epoch} is stale: {:?} holds the lease at epoch {}",
                    l.name, l.epoch
                ),
            )),
            None => Err(Outcome::rejected(
                Status::Conflict,
                format!("scheduler epoch {epoch} is stale: no scheduler holds the lease"),
            )),
        }
    }

    pub(super) fn dispatch_batch(
        &mut self,
        at_ms: u64,
        epoch: u64,
        placements: Vec<Placement>,
    ) -> Outcome {
        if let Err(stale) = self.check_epoch(at_ms, epoch) {
            return stale;
        }
        let mut refused = Vec::new();
        for Placement { id, host } in placements {
            // A scheduler places only from active queues (an operator's dispatch may not).
            let queue = self.jobs.get(&id).map(|j| j.spec.queue.clone());
            if let Some(queue) = queue.filter(|q| self.queues.get(q).is_some_and(|q| !q.active)) {
                refused.push(Refusal {
                    id,
                    status: Status::Conflict,
                    message: format!("queue {queue} is inactive"),
                });
                continue;
            }
            if let Outcome::Rejected { status, message } = self.dispatch(at_ms, id, host, true) {
                refused.push(Refusal {
                    id,
                    status,
                    message,
                });
            }
        }
        Outcome::Placed { refused }
    }

    pub(super) fn set_pend_reasons(
        &mut self,
        at_ms: u64,
        epoch: u64,
        reasons: Vec<(JobId, PendReason)>,
    ) -> Outcome {
        if let Err(stale) = self.check_epoch(at_ms, epoch) {
            return stale;
        }
        // One change per job (the last reason given wins), so one event per job.
        let reasons: std::collections::BTreeMap<JobId, PendReason> = reasons.into_iter().collect();
        for (id, reason) in reasons {
            // A job waiting for its dependency keeps the controller's reason (`dependencies`).
            let pending = self.jobs.get(&id).is_some_and(|j| {
                j.state == JobState::Pending
                    && !matches!(
                        j.dependency_state,
                        Some(DependencyState::Waiting | DependencyState::Never)
                    )
            });
            if pending {
                let version = self.active_version;
                self.update_job(id, |job| {
                    job.pend_code = Some(reason.code);
                    job.pend_reason = Some(reason.text);
                    job.expected_start_ms =
                        reason.expected_start_ms.filter(|_| version >= ACCOUNTING);
                });
            }
        }
        Outcome::Done
    }
}

#[cfg(test)]
mod tests {
    use xce_client::types::{JobSpec, PendCode, RequestToken};

    use super::super::testing::{join_with, spec};
    use super::super::Command;
    use super::*;

    fn register(s: &mut State, host: &str, cpus: u32) {
        s.apply(
            0,
            join_with(RequestToken::random().0, host, cpus, 0, vec![]),
        );
    }

    /// Submits a job needing `cpus`; returns its id.
    fn submit(s: &mut State, cpus: u32) -> JobId {
        let spec = JobSpec {
            resources: xce_client::types::Resources::new(cpus, 0),
            ..spec(&["true"])
        };
        match super::super::testing::submit(s, RequestToken::random().0, spec) {
            Outcome::Submitted(id) => id,
            other => panic!("submit: {other:?}"),
        }
    }

    fn acquire(s: &mut State, at: u64, name: &str) -> Outcome {
        acquire_as(s, at, name, 1)
    }

    fn acquire_as(s: &mut State, at: u64, name: &str, instance: u64) -> Outcome {
        ask(s, at, name, instance, 1000)
    }

    /// An `acquireScheduler` of `ttl_ms` (0: a release).
    fn ask(s: &mut State, at: u64, name: &str, instance: u64, ttl_ms: u32) -> Outcome {
        s.apply(
            at,
            Command::AcquireScheduler {
                token: RequestToken::random(),
                name: name.into(),
                instance,
                ttl_ms,
            },
        )
    }

    fn batch(s: &mut State, at: u64, epoch: u64, placements: &[(JobId, &str)]) -> Outcome {
        s.apply(
            at,
            Command::DispatchBatch {
                token: RequestToken::random(),
                epoch,
                placements: placements
                    .iter()
                    .map(|(id, host)| Placement {
                        id: *id,
                        host: host.to_string(),
                    })
                    .collect(),
            },
        )
    }

    /// From version 13 a pending job keeps the start the scheduler reserved for it while it
    /// waits for room or behind another's reservation; a reason of another kind, or its
    /// placement, clears it; below 13 none is kept.
    #[test]
    fn a_reserved_start_is_kept_while_the_job_waits_for_it() {
        let reason = |code, at: Option<u64>| PendReason {
            code,
            text: "waiting".into(),
            expected_start_ms: at,
        };
        let set = |s: &mut State, id, r: PendReason| {
            s.apply(
                10,
                Command::SetPendReasons {
                    token: RequestToken::random(),
                    epoch: 1,
                    reasons: vec![(id, r)],
                },
            )
        };
        for version in [12, 13] {
            let mut s = State {
                active_version: version,
                ..State::default()
            };
            register(&mut s, "w1", 1);
            let id = submit(&mut s, 1);
            assert_eq!(acquire(&mut s, 0, "s1"), Outcome::Leased { epoch: 1 });
            set(&mut s, id, reason(PendCode::Resources, Some(5_000)));
            let kept = (version >= 13).then_some(5_000);
            assert_eq!(
                s.job(id).unwrap().expected_start_ms,
                kept,
                "version {version}"
            );
            set(&mut s, id, reason(PendCode::Priority, Some(6_000)));
            let kept = (version >= 13).then_some(6_000);
            assert_eq!(s.job(id).unwrap().expected_start_ms, kept);
            set(&mut s, id, reason(PendCode::Held, Some(7_000)));
            assert_eq!(s.job(id).unwrap().expected_start_ms, None);
            set(&mut s, id, reason(PendCode::Resources, Some(8_000)));
            assert_eq!(
                batch(&mut s, 20, 1, &[(id, "w1")]),
                Outcome::Placed { refused: vec![] }
            );
            assert_eq!(s.job(id).unwrap().expected_start_ms, None, "placed");
        }
    }

    #[test]
    fn one_holder_at_a_time_and_a_new_holder_gets_a_new_epoch() {
        let mut s = State::default();
        assert_eq!(acquire(&mut s, 0, "s1"), Outcome::Leased { epoch: 1 });
        // Renewed by its holder: the same epoch.
        assert_eq!(acquire(&mut s, 500, "s1"), Outcome::Leased { epoch: 1 });
        let Outcome::Rejected { status, message } = acquire(&mut s, 1400, "s2") else {
            panic!("a second scheduler took a held lease");
        };
        assert_eq!(status, Status::Conflict);
        assert!(message.contains("\"s1\" holds the lease"), "{message}");
        // Once it runs out, the standby takes it at the next epoch.
        assert_eq!(acquire(&mut s, 1501, "s2"), Outcome::Leased { epoch: 2 });
        assert_eq!(s.scheduler_lease(1600).map(|l| l.name.as_str()), Some("s2"));
        assert_eq!(s.scheduler_lease(2502), None);
        // Even its old holder coming back starts a new epoch.
        assert_eq!(acquire(&mut s, 2600, "s1"), Outcome::Leased { epoch: 3 });
    }

    /// Two scheduler processes started under one name are not both active.
    #[test]
    fn two_schedulers_of_one_name_are_told_apart() {
        let mut s = State::default();
        assert_eq!(acquire_as(&mut s, 0, "s1", 7), Outcome::Leased { epoch: 1 });
        let Outcome::Rejected { status, message } = acquire_as(&mut s, 10, "s1", 8) else {
            panic!("a second process under the same name took the lease");
        };
        assert_eq!(status, Status::Conflict);
        assert!(message.contains("same name"), "{message}");
        assert_eq!(
            acquire_as(&mut s, 20, "s1", 7),
            Outcome::Leased { epoch: 1 }
        );
    }

    #[test]
    fn a_released_lease_passes_at_once_and_only_its_holder_releases_it() {
        let mut s = State::default();
        acquire_as(&mut s, 0, "s1", 7);
        let release =
            |s: &mut State, at: u64, name: &str, instance: u64| ask(s, at, name, instance, 0);
        // Not the holder: nothing happens.
        assert_eq!(release(&mut s, 10, "s2", 1), Outcome::Done);
        assert_eq!(release(&mut s, 10, "s1", 8), Outcome::Done);
        assert!(s.scheduler_lease(10).is_some());
        assert_eq!(release(&mut s, 20, "s1", 7), Outcome::Done);
        assert_eq!(s.scheduler_lease(20), None);
        assert_eq!(
            acquire_as(&mut s, 20, "s2", 1),
            Outcome::Leased { epoch: 2 }
        );
    }

    #[test]
    fn a_stale_epoch_places_nothing() {
        let mut s = State::default();
        register(&mut s, "w1", 4);
        let id = submit(&mut s, 1);
        acquire(&mut s, 0, "s1");
        acquire(&mut s, 1001, "s2");
        let Outcome::Rejected { status, message } = batch(&mut s, 1100, 1, &[(id, "w1")]) else {
            panic!("a deposed scheduler placed a job");
        };
        assert_eq!(status, Status::Conflict);
        assert!(message.contains("epoch 1 is stale"), "{message}");
        assert_eq!(s.job(id).unwrap().state, JobState::Pending);
        // And an expired lease places nothing either, even its holder's.
        assert!(matches!(
            batch(&mut s, 5000, 2, &[(id, "w1")]),
            Outcome::Rejected { .. }
        ));
        assert_eq!(s.job(id).unwrap().state, JobState::Pending);
    }

    #[test]
    fn each_placement_of_a_batch_is_judged_on_its_own() {
        let mut s = State::default();
        register(&mut s, "w1", 2);
        let (a, b, c) = (submit(&mut s, 1), submit(&mut s, 2), submit(&mut s, 1));
        acquire(&mut s, 0, "s1");
        let Outcome::Placed { refused } = batch(
            &mut s,
            10,
            1,
            &[(a, "w1"), (b, "w1"), (c, "nope"), (a, "w1")],
        ) else {
            panic!("the batch was refused as a whole");
        };
        let refused: Vec<(JobId, Status)> = refused.iter().map(|r| (r.id, r.status)).collect();
        // b no longer fits once a is placed; c names no host; a is placed once only.
        assert_eq!(
            refused,
            vec![
                (b, Status::Conflict),
                (c, Status::NoEnt),
                (a, Status::Conflict)
            ]
        );
        assert_eq!(s.job(a).unwrap().state, JobState::Dispatched);
        assert_eq!(s.job(a).unwrap().attempt, 1);
        assert_eq!(s.job(b).unwrap().state, JobState::Pending);
    }

    #[test]
    fn pend_reasons_touch_only_pending_jobs() {
        let mut s = State::default();
        register(&mut s, "w1", 1);
        let (a, b) = (submit(&mut s, 1), submit(&mut s, 8));
        acquire(&mut s, 0, "s1");
        batch(&mut s, 1, 1, &[(a, "w1")]);
        let (outcome, events) = s.apply_emitting(
            2,
            Command::SetPendReasons {
                token: RequestToken::random(),
                epoch: 1,
                reasons: vec![
                    (a, PendReason::new(PendCode::Resources, "x")),
                    (
                        b,
                        PendReason::new(PendCode::Resources, "no host with 8 free cpus"),
                    ),
                ],
            },
        );
        assert_eq!(outcome, Outcome::Done);
        assert_eq!(s.job(a).unwrap().pend_reason, None);
        assert_eq!(
            s.job(b).unwrap().pend_reason.as_deref(),
            Some("no host with 8 free cpus")
        );
        assert_eq!(events.len(), 1, "{events:?}");
    }
}
