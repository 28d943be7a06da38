//! `UpdateJob`: changes to one job after its submit (`xce update`, `xce hold`, `xce release`).
//! A pending job takes any change its owner or an operator asks, judged by the same rules as a
//! submit; a placed one only a new time limit, which its worker hands to the shim (the job
//! keeps running). A user may lower, never raise, their job's priority and time limit: what
//! an operator granted is the operator's to raise. The cluster's limits (a queue's maximum
//! time, the largest job) are the service's to check before it proposes, as at submit.

use xce_client::types::{DependencyState, JobChanges, JobId, JobSpec, JobState};
use xce_proto::Status;

use super::jobs::{no_such_job, not_owner};
use super::{is_placed, validate_spec, Outcome, Push, State};

impl State {
    pub(super) fn update(
        &mut self,
        at_ms: u64,
        id: JobId,
        by: Option<&str>,
        changes: JobChanges,
    ) -> Outcome {
        let Some(job) = self.jobs.get(&id) else {
            return no_such_job(id);
        };
        if let Some(refused) = not_owner(job, by, "change") {
            return refused;
        }
        if job.state.is_final() {
            return Outcome::rejected(
                Status::Conflict,
                format!("job {id}: already {}", job.state.name()),
            );
        }
        // An array's own record changes only while tasks wait in it (what later tasks get);
        // one whose tasks all started has nothing left to change.
        if job.array.is_some() && job.state != JobState::Pending {
            return Outcome::rejected(
                Status::Conflict,
                format!("job {id} is an array whose tasks have all started: change each task"),
            );
        }
        let mut spec = job.spec.clone();
        if let Err(refused) = change(&mut spec, &changes, by.is_some()) {
            return refused;
        }
        if let Err(message) = validate_spec(&spec) {
            return Outcome::rejected(Status::Invalid, message);
        }
        let placed = is_placed(job.state);
        if placed {
            if let Some(field) = pending_only(&changes) {
                return Outcome::rejected(
                    Status::Conflict,
                    format!(
                        "job {id} is {}: only its time limit can change, not its {field}",
                        job.state.name()
                    ),
                );
            }
        } else if let Some(Err(refused)) = changes.queue.as_deref().map(|q| self.admits(q)) {
            return refused;
        }
        let (host, attempt) = (job.host.clone(), job.attempt);
        let limit_changed = spec.limits != job.spec.limits;
        let time_limit_s = spec.limits.time_limit_s;
        let emitted = self.emitted.len();
        self.update_job(id, |job| {
            job.spec = spec;
            // The scheduler says anew why it waits; a dependency that is not met keeps the
            // controller's reason (`dependencies`).
            let waits = matches!(
                job.dependency_state,
                Some(DependencyState::Waiting | DependencyState::Never)
            );
            if job.state == JobState::Pending && !waits {
                job.pend_reason = None;
                job.pend_code = None;
            }
        });
        // A new name may be one no other job of its user runs under (`singleton`).
        self.judge(id, at_ms);
        // Every change is an event, though none of what an event carries changed (a job
        // released before the scheduler said it was held): the scheduler reads the job again
        // on it, and would otherwise never see it released.
        if self.emitted.len() == emitted {
            if let Some(job) = self.jobs.get(&id) {
                self.emitted.push(super::job_event(job));
            }
        }
        if placed && limit_changed {
            self.push(Push::TimeLimit {
                host: host.unwrap_or_default(),
                id,
                attempt,
                time_limit_s,
            });
        }
        Outcome::Done
    }
}

impl State {
    /// Whether a pending job with `spec` takes `changes` from `by`, as [`State::update`]
    /// judges it: an array's waiting tasks are judged this way before any is split off to
    /// take them, so a refused change leaves the array as it was.
    pub(super) fn check_change(
        &self,
        spec: &JobSpec,
        by: Option<&str>,
        changes: &JobChanges,
    ) -> Result<(), Outcome> {
        let mut spec = spec.clone();
        change(&mut spec, changes, by.is_some())?;
        validate_spec(&spec).map_err(|message| Outcome::rejected(Status::Invalid, message))?;
        match changes.queue.as_deref() {
            Some(queue) => self.admits(queue),
            None => Ok(()),
        }
    }
}

/// The first change a placed job cannot take, by its field name.
fn pending_only(changes: &JobChanges) -> Option<&'static str> {
    let JobChanges {
        name,
        priority,
        queue,
        cpus,
        mem_mb,
        time_limit_s: _,
        hold,
        begin_time_ms,
    } = changes;
    [
        ("name", name.is_some()),
        ("priority", priority.is_some()),
        ("queue", queue.is_some()),
        ("cpus", cpus.is_some()),
        ("memory", mem_mb.is_some()),
        ("hold", hold.is_some()),
        ("begin time", begin_time_ms.is_some()),
    ]
    .into_iter()
    .find_map(|(field, set)| set.then_some(field))
}

/// `spec` with `changes` made; a user (`user_only`) may only lower priority and time.
fn change(spec: &mut JobSpec, changes: &JobChanges, user_only: bool) -> Result<(), Outcome> {
    let JobChanges {
        name,
        priority,
        queue,
        cpus,
        mem_mb,
        time_limit_s,
        hold,
        begin_time_ms,
    } = changes.clone();
    let raise = |what: &str, from: String, to: String| {
        Outcome::rejected(
            Status::Perm,
            format!("{what}: a user may lower their job's, not raise it ({from} to {to}); ask an operator"),
        )
    };
    if let Some(priority) = priority {
        if user_only && priority > spec.priority {
            return Err(raise(
                "priority",
                spec.priority.to_string(),
                priority.to_string(),
            ));
        }
        spec.priority = priority;
    }
    if let Some(limit) = time_limit_s {
        if limit == 0 {
            return Err(Outcome::rejected(
                Status::Invalid,
                "time_limit_s: must be at least 1".to_string(),
            ));
        }
        let now = spec.limits.time_limit_s;
        // No limit is the longest: any limit lowers it.
        if user_only && now.is_some_and(|now| limit > now) {
            let from = now.map_or_else(|| "no limit".to_string(), |s| format!("{s} s"));
            return Err(raise("time limit", from, format!("{limit} s")));
        }
        spec.limits.time_limit_s = Some(limit);
    }
    if let Some(name) = name {
        spec.name = name;
    }
    if let Some(queue) = queue {
        spec.queue = queue;
    }
    if let Some(cpus) = cpus {
        spec.resources.cpus = cpus.max(1);
    }
    if let Some(mem_mb) = mem_mb {
        spec.resources.mem_mb = mem_mb;
    }
    if let Some(hold) = hold {
        spec.hold = hold;
    }
    if let Some(begin) = begin_time_ms {
        spec.begin_time_ms = Some(begin).filter(|b| *b > 0);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use xce_client::types::{JobAction, JobChanges, JobState, RequestToken};
    use xce_proto::Status;

    use crate::state::testing::*;
    use crate::state::{Command, Outcome, Push, State};

    fn update(t: u128, id: u64, by: Option<&str>, changes: JobChanges) -> Command {
        Command::UpdateJob {
            token: RequestToken(t),
            id,
            by: by.map(str::to_string),
            changes,
        }
    }

    fn alices_pending_job() -> State {
        let mut s = State::default();
        s.apply(0, join_cmd(900, "w1", vec![]));
        let mut job = spec(&["true"]);
        job.user = "alice".into();
        job.priority = 5;
        job.limits.time_limit_s = Some(600);
        job.hold = true;
        assert_eq!(submit(&mut s, 1, job), Outcome::Submitted(1));
        s
    }

    /// Regression: a job released before the scheduler had said it was held changed nothing
    /// an event carries, so no event went out, and the scheduler's view kept it held for
    /// good (tests/scripts.rs saw it under load).
    #[test]
    fn every_change_is_an_event_though_nothing_an_event_carries_changed() {
        let mut s = alices_pending_job();
        let release = JobChanges {
            hold: Some(false),
            ..JobChanges::default()
        };
        let (outcome, events) = s.apply_emitting(1, update(2, 1, None, release));
        assert_eq!(outcome, Outcome::Done);
        assert!(
            events
                .iter()
                .any(|e| matches!(e, crate::state::Event::Job { id: 1, .. })),
            "{events:?}"
        );
    }

    #[test]
    fn a_held_job_is_placed_only_once_released() {
        let mut s = alices_pending_job();
        let refused = s.apply(1, dispatch_cmd(2, 1, "w1"));
        rejected_with(&refused, Status::Conflict, "held");
        let release = JobChanges {
            hold: Some(false),
            ..JobChanges::default()
        };
        assert_eq!(
            s.apply(1, update(3, 1, Some("alice"), release)),
            Outcome::Done
        );
        assert_eq!(s.apply(1, dispatch_cmd(4, 1, "w1")), Outcome::Done);
    }

    #[test]
    fn a_job_waits_for_its_begin_time() {
        let mut s = alices_pending_job();
        let changes = JobChanges {
            hold: Some(false),
            begin_time_ms: Some(10_000),
            ..JobChanges::default()
        };
        assert_eq!(s.apply(1, update(3, 1, None, changes)), Outcome::Done);
        rejected_with(
            &s.apply(9_999, dispatch_cmd(4, 1, "w1")),
            Status::Conflict,
            "begins at",
        );
        assert_eq!(s.apply(10_000, dispatch_cmd(5, 1, "w1")), Outcome::Done);
    }

    #[test]
    fn a_user_lowers_their_own_job_s_priority_and_time_and_an_operator_raises_them() {
        let mut s = alices_pending_job();
        let raise = |t, by: Option<&str>| {
            update(
                t,
                1,
                by,
                JobChanges {
                    priority: Some(9),
                    ..JobChanges::default()
                },
            )
        };
        rejected_with(
            &s.apply(1, raise(2, Some("alice"))),
            Status::Perm,
            "ask an operator",
        );
        rejected_with(
            &s.apply(1, raise(3, Some("bob"))),
            Status::Perm,
            "only their own jobs",
        );
        assert_eq!(s.apply(1, raise(4, None)), Outcome::Done);
        let longer = JobChanges {
            time_limit_s: Some(601),
            ..JobChanges::default()
        };
        rejected_with(
            &s.apply(1, update(5, 1, Some("alice"), longer)),
            Status::Perm,
            "600 s to 601 s",
        );
        let shorter = JobChanges {
            time_limit_s: Some(60),
            name: Some("shorter".into()),
            ..JobChanges::default()
        };
        assert_eq!(
            s.apply(1, update(6, 1, Some("alice"), shorter)),
            Outcome::Done
        );
        let job = s.job(1).unwrap();
        assert_eq!(
            (
                job.spec.priority,
                job.spec.limits.time_limit_s,
                job.spec.name.as_str()
            ),
            (9, Some(60), "shorter")
        );
        let closed = JobChanges {
            queue: Some("nowhere".into()),
            ..JobChanges::default()
        };
        rejected_with(
            &s.apply(1, update(7, 1, None, closed)),
            Status::NoEnt,
            "no such queue",
        );
    }

    #[test]
    fn a_running_job_takes_only_a_new_time_limit_which_goes_to_its_worker() {
        let mut s = running_on_w1(1);
        let rename = JobChanges {
            name: Some("x".into()),
            ..JobChanges::default()
        };
        rejected_with(
            &s.apply(5, update(7, 1, None, rename)),
            Status::Conflict,
            "not its name",
        );
        let longer = JobChanges {
            time_limit_s: Some(3600),
            ..JobChanges::default()
        };
        let (outcome, pushes) = apply_pushes(&mut s, update(8, 1, None, longer));
        assert_eq!(outcome, Outcome::Done);
        assert_eq!(
            pushes,
            vec![Push::TimeLimit {
                host: "w1".into(),
                id: 1,
                attempt: 1,
                time_limit_s: Some(3600),
            }]
        );
        assert_eq!(s.job(1).unwrap().state, JobState::Running);
        control(&mut s, 9, 1, JobAction::Kill);
        let done = JobChanges {
            time_limit_s: Some(1),
            ..JobChanges::default()
        };
        finish(&mut s, 10, 1, 1, xce_client::types::JobEnd::Signal(15));
        rejected_with(
            &s.apply(5, update(11, 1, None, done)),
            Status::Conflict,
            "already exited",
        );
    }
}
