//! Job transitions: submit, operator control, dispatch, the worker's start and end reports,
//! and losing an attempt. Each change goes through `State::update_job`.

use xce_client::fit::may_run;
use xce_client::types::{
    Job, JobAction, JobEnd, JobId, JobOrder, JobResult, JobSignal, JobSpec, JobState,
};
use xce_proto::Status;

use super::{
    is_placed, validate_spec, EndIntent, LostPolicy, Outcome, Push, State, DEFAULT_QUEUE,
    PEND_REQUEUED,
};

/// Why a job a person killed ended (result `cancelled`).
pub const REASON_KILLED: &str = "killed";
/// Why a job the kernel killed for its memory limit ended.
pub const REASON_OOM: &str = "out of memory";
/// The signal the kernel's OOM killer sends (SIGKILL), shown as the job's signal.
pub(super) const OOM_SIGNAL: i32 = 9;

/// Ends a job `exited` with `result` and the human `reason`.
fn end_job(job: &mut Job, at_ms: u64, result: JobResult, reason: &str) {
    job.state = JobState::Exited;
    job.pend_reason = None;
    job.pend_code = None;
    job.reason = Some(reason.to_string());
    job.result = Some(result);
    job.end_time_ms = Some(at_ms);
}

/// Ends a pending job `cancelled` with `reason` (its dependency can never be met).
pub(super) fn end_cancelled(job: &mut Job, at_ms: u64, reason: &str) {
    end_job(job, at_ms, JobResult::Cancelled, reason);
}

/// Ends a job `done` or `exited` by its own exit code, with no reason.
fn end_by_exit(job: &mut Job, at_ms: u64, code: i32) {
    (job.state, job.result) = if code == 0 {
        (JobState::Done, Some(JobResult::Completed))
    } else {
        (JobState::Exited, Some(JobResult::Failed))
    };
    job.pend_code = None;
    job.end_time_ms = Some(at_ms);
}

/// Puts a job back to pending; its next dispatch is the next attempt, so any copy of the
/// current one is stale from here on.
pub(super) fn requeue(job: &mut Job, why: &str) {
    job.state = JobState::Pending;
    job.pend_reason = Some(why.to_string());
    job.pend_code = None;
    job.reason = None;
    job.result = None;
    job.host = None;
    job.exit_code = None;
    job.signal = None;
    job.start_time_ms = None;
    job.end_time_ms = None;
    job.output_dir = None;
    job.cancelled_by = None;
}

/// Why a job a person cancelled ended: who did, when known.
fn cancelled(job: &Job) -> String {
    match &job.cancelled_by {
        Some(who) => format!("cancelled by {who}"),
        None => REASON_KILLED.to_string(),
    }
}

/// Refuses a user (`by`, a `user`'s session) who may `verb` only their own jobs another's.
pub(super) fn not_owner(job: &Job, by: Option<&str>, verb: &str) -> Option<Outcome> {
    let user = by.filter(|u| *u != job.spec.user)?;
    Some(Outcome::rejected(
        Status::Perm,
        format!(
            "job {} is {}'s: {user} may {verb} only their own jobs",
            job.id, job.spec.user
        ),
    ))
}

pub(super) fn no_such_job(id: JobId) -> Outcome {
    Outcome::rejected(Status::NoEnt, format!("job {id}: no such job"))
}

impl State {
    pub(super) fn submit(
        &mut self,
        at_ms: u64,
        mut spec: JobSpec,
        script: Option<std::sync::Arc<[u8]>>,
    ) -> Outcome {
        if let Err(message) = validate_spec(&spec) {
            return Outcome::rejected(Status::Invalid, message);
        }
        if spec.queue.is_empty() {
            spec.queue = DEFAULT_QUEUE.to_string();
        }
        if let Err(refused) = self.admits(&spec.queue) {
            return refused;
        }
        if spec.resources.cpus == 0 {
            spec.resources.cpus = 1;
        }
        if self.next_job_id >= super::MAX_JOB_ID {
            return Outcome::rejected(Status::Conflict, "job ids are exhausted".to_string());
        }
        if let Err(refused) = self.check_dependency(&spec) {
            return refused;
        }
        if let Err(refused) = super::scripts::take_script(self, spec.script, script) {
            return refused;
        }
        let id = self.next_job_id;
        self.next_job_id += 1;
        let mut job = Job {
            id,
            spec,
            state: JobState::Pending,
            // Until a scheduler says why it waits; readers are told "no scheduler" while
            // none holds the lease (`State::shown`).
            pend_reason: None,
            pend_code: None,
            reason: None,
            result: None,
            host: None,
            attempt: 0,
            runs: 0,
            exit_code: None,
            signal: None,
            submit_time_ms: at_ms,
            start_time_ms: None,
            end_time_ms: None,
            output_dir: None,
            cancelled_by: None,
            dependency_state: None,
            array: None,
            array_task: None,
            expected_start_ms: None,
            usage: None,
            attempts: Vec::new(),
        };
        super::arrays::start(&mut job);
        self.judge_new(&mut job, at_ms);
        self.insert_job(job);
        self.judge_paired(id, at_ms);
        Outcome::Submitted(id)
    }

    pub(super) fn control_job(
        &mut self,
        at_ms: u64,
        id: JobId,
        action: JobAction,
        by: Option<&str>,
        actor: Option<String>,
    ) -> Outcome {
        let Some(job) = self.jobs.get(&id) else {
            return no_such_job(id);
        };
        if let Some(refused) = not_owner(job, by, "control") {
            return refused;
        }
        if job.array.is_some() {
            return match action {
                JobAction::Kill => self.kill_array(at_ms, id, by, actor),
                other => Outcome::rejected(
                    Status::Conflict,
                    format!(
                        "job {id} is an array: a {} of a whole array is not supported yet; \
                         kill it, or give a task's own id",
                        format!("{other:?}").to_lowercase()
                    ),
                ),
            };
        }
        let (state, attempt) = (job.state, job.attempt);
        let host = job.host.clone().unwrap_or_default();
        let intent = self.intents.get(&id).copied();
        let signal = |signal| Push::Signal {
            host: host.clone(),
            order: JobOrder {
                id,
                attempt,
                signal,
            },
        };
        match (action, state) {
            (JobAction::Kill, JobState::Pending) => {
                self.update_job(id, |job| {
                    job.cancelled_by = actor;
                    let reason = cancelled(job);
                    end_job(job, at_ms, JobResult::Cancelled, &reason)
                });
                Outcome::Done
            }
            (JobAction::Requeue, state) if state.is_final() => {
                self.update_job(id, |job| requeue(job, PEND_REQUEUED));
                Outcome::Done
            }
            (_, state) if state.is_final() => Outcome::rejected(
                Status::Conflict,
                format!("job {id}: already {}", state.name()),
            ),
            // The attempt ends when its worker says so; until then the job keeps its cpus.
            (JobAction::Kill | JobAction::Requeue, state) if is_placed(state) => {
                if intent.is_some() {
                    return Outcome::rejected(
                        Status::Conflict,
                        format!("job {id}: already being ended ({intent:?})"),
                    );
                }
                let wanted = if action == JobAction::Kill {
                    self.update_job(id, |job| job.cancelled_by = actor);
                    EndIntent::Kill
                } else {
                    EndIntent::Requeue
                };
                self.intents.insert(id, wanted);
                self.push(signal(JobSignal::Kill));
                Outcome::Done
            }
            (JobAction::Suspend, JobState::Running) if intent.is_none() => {
                self.update_job(id, |job| job.state = JobState::Suspended);
                self.push(signal(JobSignal::Suspend));
                Outcome::Done
            }
            (JobAction::Resume, JobState::Suspended) if intent.is_none() => {
                self.update_job(id, |job| job.state = JobState::Running);
                self.push(signal(JobSignal::Resume));
                Outcome::Done
            }
            (action, state) => Outcome::rejected(
                Status::Conflict,
                format!(
                    "job {id}: cannot {} a job that is {}{}",
                    format!("{action:?}").to_lowercase(),
                    state.name(),
                    if intent.is_some() {
                        " and being ended"
                    } else {
                        ""
                    }
                ),
            ),
        }
    }

    /// Places job `id` on `host`; `ahead`: beyond the host's free room if the cluster's
    /// version takes it (the scheduler's placements, [`super::dispatch_ahead`]).
    pub(super) fn dispatch(&mut self, at_ms: u64, id: JobId, host: String, ahead: bool) -> Outcome {
        let spool_dir = match self.may_dispatch(at_ms, id, &host, ahead) {
            Ok(spool_dir) => spool_dir,
            Err(refused) => return refused,
        };
        // An array's placement is its next task's, split off into a job of its own.
        let id = match self.jobs.get(&id).is_some_and(|j| j.array.is_some()) {
            true => match self.split_task(at_ms, id) {
                Ok(task) => task,
                Err(refused) => return refused,
            },
            false => id,
        };
        let version = self.active_version;
        let attempt = self.update_job(id, |job| {
            job.state = JobState::Dispatched;
            job.pend_reason = None;
            job.pend_code = None;
            job.host = Some(host.clone());
            job.output_dir = spool_dir;
            job.attempt += 1;
            super::runs::dispatched(job, version);
            job.attempt
        });
        if let Some(attempt) = attempt {
            self.push(Push::Start { host, id, attempt });
        }
        Outcome::Done
    }

    /// Whether job `id` may go to `host` now: the spool dir it will have there, or why not.
    fn may_dispatch(
        &self,
        at_ms: u64,
        id: JobId,
        host: &str,
        ahead: bool,
    ) -> Result<Option<String>, Outcome> {
        let Some(record) = self.hosts.get(host) else {
            return Err(Outcome::rejected(
                Status::NoEnt,
                format!("host {host:?}: no such host"),
            ));
        };
        let conflict = |message: String| Err(Outcome::rejected(Status::Conflict, message));
        let host_state = record.state();
        let spool_dir = Some(record.spool_dir.clone()).filter(|d| !d.is_empty());
        let Some(job) = self.jobs.get(&id) else {
            return Err(no_such_job(id));
        };
        if job.state != JobState::Pending {
            return conflict(format!("job {id} is {}, not pending", job.state.name()));
        }
        if host_state != xce_client::types::HostState::Ok {
            return conflict(format!("host {host:?} is {}", host_state.name()));
        }
        if job.attempt >= super::MAX_ATTEMPT {
            return conflict(format!(
                "job {id} has run out of attempts ({})",
                job.attempt
            ));
        }
        if let Some(reason) = xce_client::holds::waiting(&job.spec, at_ms) {
            return conflict(format!("job {id} is {}", reason.text));
        }
        if let Some(why) = self.dependency_blocks(job) {
            return conflict(format!("job {id} is {why}"));
        }
        if let Some(why) = self.over_throttle(job) {
            return conflict(why);
        }
        if let Err(why) = may_run(&record.job_users, &job.spec.user) {
            return conflict(format!(
                "host {host:?} may not run job {id} of user {:?}: {why}",
                job.spec.user
            ));
        }
        if let Err(short) = self.may_place(
            &record.resources,
            &self.host_load(host),
            &job.spec.resources,
            ahead,
        ) {
            return conflict(format!("host {host:?} has {short} by job {id}"));
        }
        Ok(spool_dir)
    }

    /// Whether `attempt` on `host` is the job's current attempt; stale reports are refused so
    /// that an old copy of a job can never change it.
    fn check_current(&self, id: JobId, attempt: u32, host: &str) -> Result<&Job, Outcome> {
        let Some(job) = self.jobs.get(&id) else {
            return Err(no_such_job(id));
        };
        if job.attempt != attempt || job.host.as_deref() != Some(host) || !is_placed(job.state) {
            return Err(Outcome::rejected(
                Status::Conflict,
                format!(
                    "job {id}: attempt {attempt} on {host:?} is stale (current: attempt {} on {:?})",
                    job.attempt, job.host
                ),
            ));
        }
        Ok(job)
    }

    pub(super) fn job_started(
        &mut self,
        at_ms: u64,
        id: JobId,
        attempt: u32,
        host: &str,
    ) -> Outcome {
        match self.check_current(id, attempt, host) {
            Err(rejected) => return rejected,
            // Already running: a repeated report changes nothing.
            Ok(job) if job.state != JobState::Dispatched => return Outcome::Done,
            Ok(_) => {}
        }
        let version = self.active_version;
        self.update_job(id, |job| {
            job.state = JobState::Running;
            job.start_time_ms = Some(at_ms);
            super::runs::started(job, version);
            super::attempts::started(job, host, at_ms, version);
        });
        Outcome::Done
    }

    pub(super) fn job_finished(
        &mut self,
        at_ms: u64,
        id: JobId,
        attempt: u32,
        host: &str,
        end: JobEnd,
        usage: Option<xce_client::types::Usage>,
    ) -> Outcome {
        if let Err(rejected) = self.check_current(id, attempt, host) {
            return rejected;
        }
        let intent = self.intents.remove(&id);
        let version = self.active_version;
        self.update_job(id, |job| {
            super::usage::add(job, usage);
            if super::runs::ended(job, version, Some(&end)) {
                job.start_time_ms.get_or_insert(at_ms);
                let how = super::attempts::Ended::Reported(&end, usage);
                super::attempts::ended(job, at_ms, how, version);
            }
            match &end {
                JobEnd::Exit(code) => job.exit_code = Some(*code),
                JobEnd::Signal(sig) => job.signal = Some(*sig),
                JobEnd::OutOfMemory => job.signal = Some(OOM_SIGNAL),
                JobEnd::TimedOut { exit_code, signal } => {
                    job.exit_code = *exit_code;
                    job.signal = *signal;
                }
                JobEnd::Failed(_) => {}
            }
            let limit = job.spec.limits.time_limit_s;
            match (intent, end) {
                (Some(EndIntent::Requeue), _) => requeue(job, PEND_REQUEUED),
                // It reached its limit before the kill order reached it.
                (_, JobEnd::TimedOut { .. }) => {
                    let reason = super::time_limit::reason(limit);
                    end_job(job, at_ms, JobResult::Timeout, &reason)
                }
                (Some(EndIntent::Kill), _) => {
                    let reason = cancelled(job);
                    end_job(job, at_ms, JobResult::Cancelled, &reason)
                }
                (None, JobEnd::Exit(code)) => end_by_exit(job, at_ms, code),
                (None, JobEnd::Signal(sig)) => end_job(
                    job,
                    at_ms,
                    JobResult::Failed,
                    &format!("killed by signal {sig}"),
                ),
                (None, JobEnd::Failed(reason)) => end_job(job, at_ms, JobResult::Failed, &reason),
                (None, JobEnd::OutOfMemory) => {
                    end_job(job, at_ms, JobResult::OutOfMemory, REASON_OOM)
                }
            }
        });
        Outcome::Done
    }

    /// A placed job whose attempt is gone without an end report: an operator's pending kill
    /// or requeue wins, otherwise its queue's policy decides.
    pub(super) fn lose(&mut self, at_ms: u64, id: JobId, why: &str) {
        let intent = self.intents.remove(&id);
        let Some(job) = self.jobs.get(&id) else {
            return;
        };
        let policy = self
            .queues
            .get(&job.spec.queue)
            .map(|q| q.on_host_lost)
            .unwrap_or_default();
        let version = self.active_version;
        self.update_job(id, |job| {
            if super::runs::ended(job, version, None) {
                super::attempts::ended(job, at_ms, super::attempts::Ended::Lost(why), version);
            }
            match (intent, policy) {
                (Some(EndIntent::Kill), _) => {
                    let reason = cancelled(job);
                    end_job(job, at_ms, JobResult::Cancelled, &reason)
                }
                (Some(EndIntent::Requeue), _) => requeue(job, PEND_REQUEUED),
                // `--no-requeue`: the job's own choice over its queue's.
                (None, LostPolicy::Requeue) if job.spec.no_requeue => {
                    end_job(job, at_ms, JobResult::NodeFail, why)
                }
                (None, LostPolicy::Requeue) => requeue(job, &format!("requeued: {why}")),
                (None, LostPolicy::Exit) => end_job(job, at_ms, JobResult::NodeFail, why),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use xce_client::types::{JobFilter, RequestToken};

    use super::super::testing::*;
    use super::super::{Command, MAX_LIST_BYTES, MAX_NAME_BYTES};
    use super::*;

    #[test]
    fn submit_assigns_ids_in_order_into_the_default_queue() {
        let mut s = State::default();
        assert_eq!(submit(&mut s, 1, spec(&["true"])), Outcome::Submitted(1));
        assert_eq!(submit(&mut s, 2, spec(&["true"])), Outcome::Submitted(2));
        let job = s.job(2).unwrap();
        assert_eq!(job.spec.queue, DEFAULT_QUEUE);
        assert_eq!(job.state, JobState::Pending);
        assert_eq!(job.spec.resources.cpus, 1);
        assert_eq!(job.submit_time_ms, 1000);
        assert_eq!(job.pend_reason, None);
        let shown = s.shown(job.clone(), 1000);
        assert_eq!(
            (shown.pend_reason.as_deref(), shown.pend_code),
            (
                Some(super::super::PEND_NO_SCHEDULER),
                Some(xce_client::types::PendCode::NoScheduler)
            )
        );
    }

    #[test]
    fn a_repeated_token_answers_the_original_result_and_changes_nothing() {
        let mut s = State::default();
        assert_eq!(submit(&mut s, 7, spec(&["a"])), Outcome::Submitted(1));
        let before = s.clone();
        assert_eq!(
            submit(&mut s, 7, spec(&["b"])),
            Outcome::Duplicate(Box::new(Outcome::Submitted(1)))
        );
        assert_eq!(s, before);
        // A rejected write is remembered too: its re-send is rejected the same way.
        let bad = submit(&mut s, 8, spec(&[]));
        assert_eq!(
            submit(&mut s, 8, spec(&["now fine"])),
            Outcome::Duplicate(Box::new(bad))
        );
        assert_eq!(s.job_count(), 1);
    }

    #[test]
    fn invalid_requests_name_the_field_and_change_nothing() {
        let mut s = State::default();
        let before = s.clone();
        rejected_with(&submit(&mut s, 1, spec(&[])), Status::Invalid, "command");
        rejected_with(&submit(&mut s, 2, spec(&[" "])), Status::Invalid, "command");
        let mut gres = spec(&["x"]);
        gres.resources.set_gres("g p u", 1);
        rejected_with(&submit(&mut s, 3, gres), Status::Invalid, "gres");
        let mut unknown = spec(&["x"]);
        unknown.queue = "nope".into();
        rejected_with(&submit(&mut s, 5, unknown), Status::NoEnt, "queue");
        assert_eq!(s.job_count(), before.job_count());
        assert_eq!(s.next_job_id, 1);
    }

    #[test]
    fn oversized_specs_are_invalid_and_name_the_field() {
        let mut s = State::default();
        let mut big = spec(&["x"]);
        big.command.push("a".repeat(MAX_LIST_BYTES));
        rejected_with(&submit(&mut s, 1, big), Status::Invalid, "command:");
        let mut big = spec(&["x"]);
        big.name = "n".repeat(MAX_NAME_BYTES + 1);
        rejected_with(&submit(&mut s, 2, big), Status::Invalid, "name:");
        // An environment is bounded by the script limit from format 8 on (format 7's 64 KiB
        // is kept by the way down to it).
        let mut big = spec(&["x"]);
        big.env = vec![("K".into(), "v".repeat(super::super::MAX_SCRIPT_BYTES))];
        rejected_with(&submit(&mut s, 3, big), Status::Invalid, "env:");
        assert_eq!(s.job_count(), 0);
        let mut large = spec(&["x"]);
        large.env = vec![("K".into(), "v".repeat(MAX_LIST_BYTES))];
        assert_eq!(submit(&mut s, 4, large), Outcome::Submitted(1));
    }

    #[test]
    fn a_job_is_placed_only_on_a_host_that_runs_its_users_jobs() {
        use xce_client::types::{HostAttributes, JobUsers};
        let mut s = State::default();
        let join = |name: &str, job_users: JobUsers, t| Command::RegisterHost {
            token: RequestToken(t),
            host: HostAttributes {
                name: name.into(),
                resources: xce_client::types::Resources::new(4, 1024),
                spool_dir: String::new(),
                job_users,
            },
            held: vec![],
        };
        s.apply(0, join("bobs", JobUsers::Only("bob".into()), 1));
        s.apply(0, join("each", JobUsers::EachUser { root: false }, 2));
        let mut roots = spec(&["true"]);
        roots.user = "root".into();
        submit(&mut s, 3, roots);
        let mut alices = spec(&["true"]);
        alices.user = "alice".into();
        submit(&mut s, 4, alices);
        let refused = s.apply(1, dispatch_cmd(5, 1, "each"));
        rejected_with(&refused, Status::Conflict, "root's");
        rejected_with(
            &s.apply(1, dispatch_cmd(6, 2, "bobs")),
            Status::Conflict,
            "only bob's",
        );
        assert_eq!(s.job(2).unwrap().state, JobState::Pending);
        assert_eq!(s.apply(1, dispatch_cmd(7, 2, "each")), Outcome::Done);
    }

    #[test]
    fn a_user_controls_only_their_own_jobs() {
        let mut s = State::default();
        let mut alices = spec(&["sleep", "9"]);
        alices.user = "alice".into();
        submit(&mut s, 1, alices);
        let control = |s: &mut State, t, by: Option<&str>| {
            s.apply(
                2000,
                Command::ControlJob {
                    token: RequestToken(t),
                    id: 1,
                    action: JobAction::Kill,
                    by: by.map(String::from),
                    actor: None,
                },
            )
        };
        rejected_with(&control(&mut s, 10, Some("bob")), Status::Perm, "alice's");
        assert_eq!(s.job(1).unwrap().state, JobState::Pending);
        assert_eq!(control(&mut s, 11, Some("alice")), Outcome::Done);
        // An operator (no `by`) controls anyone's.
        assert_eq!(
            s.apply(3000, control_cmd(12, 1, JobAction::Requeue)),
            Outcome::Done
        );
    }

    #[test]
    fn kill_ends_a_pending_job_once() {
        let mut s = State::default();
        submit(&mut s, 1, spec(&["sleep", "9"]));
        let kill = |s: &mut State, t| {
            s.apply(
                2000,
                Command::ControlJob {
                    token: RequestToken(t),
                    id: 1,
                    action: JobAction::Kill,
                    by: None,
                    actor: None,
                },
            )
        };
        assert_eq!(kill(&mut s, 10), Outcome::Done);
        let job = s.job(1).unwrap();
        assert_eq!(job.state, JobState::Exited);
        assert_eq!(job.reason.as_deref(), Some("killed"));
        assert_eq!(job.pend_reason, None);
        assert_eq!(job.end_time_ms, Some(2000));
        rejected_with(&kill(&mut s, 11), Status::Conflict, "already exited");
        let missing = s.apply(
            1,
            Command::ControlJob {
                token: RequestToken(12),
                id: 99,
                action: JobAction::Kill,
                by: None,
                actor: None,
            },
        );
        rejected_with(&missing, Status::NoEnt, "job 99");
    }

    #[test]
    fn dispatch_start_finish_with_attempt_fencing() {
        let mut s = State::default();
        s.apply(1, join_with(100, "w1", 2, 0, vec![]));
        let mut two = spec(&["x"]);
        two.resources.cpus = 2;
        submit(&mut s, 1, two.clone());
        submit(&mut s, 2, two);
        assert_eq!(
            apply_pushes(&mut s, dispatch_cmd(10, 1, "w1")),
            (
                Outcome::Done,
                vec![Push::Start {
                    host: "w1".into(),
                    id: 1,
                    attempt: 1
                }]
            )
        );
        rejected_with(
            &s.apply(2, dispatch_cmd(11, 1, "w1")),
            Status::Conflict,
            "not pending",
        );
        rejected_with(
            &s.apply(2, dispatch_cmd(12, 2, "w1")),
            Status::Conflict,
            "0 of 2 cpus free",
        );
        assert_eq!(s.hosts()[0].used.cpus, 2);
        let job = s.job(1).unwrap();
        assert_eq!(
            (job.state, job.attempt, job.host.as_deref()),
            (JobState::Dispatched, 1, Some("w1"))
        );
        let started = |t, attempt| Command::JobStarted {
            token: RequestToken(t),
            id: 1,
            attempt,
            host: "w1".into(),
        };
        rejected_with(&s.apply(3, started(20, 7)), Status::Conflict, "stale");
        assert_eq!(s.apply(3, started(21, 1)), Outcome::Done);
        assert_eq!(s.job(1).unwrap().state, JobState::Running);
        assert_eq!(
            finish_on(&mut s, 30, 1, 1, "w1", JobEnd::Exit(3)),
            Outcome::Done
        );
        let job = s.job(1).unwrap().clone();
        assert_eq!(
            (job.state, job.exit_code, job.end_time_ms),
            (JobState::Exited, Some(3), Some(9))
        );
        // The same end reported again with a new token (as after a worker restart) is refused
        // and changes nothing; with its own token it is a duplicate.
        rejected_with(
            &finish_on(&mut s, 31, 1, 1, "w1", JobEnd::Exit(0)),
            Status::Conflict,
            "stale",
        );
        assert!(matches!(
            finish_on(&mut s, 30, 1, 1, "w1", JobEnd::Exit(3)),
            Outcome::Duplicate(_)
        ));
        assert_eq!(s.job(1).unwrap(), &job);
        // The host has room again.
        assert_eq!(s.apply(2, dispatch_cmd(13, 2, "w1")), Outcome::Done);
    }

    #[test]
    fn dispatch_checks_memory_with_the_shared_fit_rule() {
        let mut s = State::default();
        s.apply(1, join_with(100, "w1", 8, 1000, vec![]));
        let mut big = spec(&["x"]);
        big.resources.mem_mb = 600;
        submit(&mut s, 1, big.clone());
        submit(&mut s, 2, big);
        assert_eq!(s.apply(2, dispatch_cmd(10, 1, "w1")), Outcome::Done);
        rejected_with(
            &s.apply(2, dispatch_cmd(11, 2, "w1")),
            Status::Conflict,
            "400 of 1000 MiB of memory free, 600 needed",
        );
        assert_eq!(s.job(2).unwrap().state, JobState::Pending);
    }

    #[test]
    fn suspend_resume_and_kill_a_running_job_through_its_worker() {
        let mut s = running_on_w1(1);
        let signalled = |signal| {
            vec![Push::Signal {
                host: "w1".into(),
                order: order(1, 1, signal),
            }]
        };
        assert_eq!(
            apply_pushes(&mut s, control_cmd(1, 1, JobAction::Suspend)),
            (Outcome::Done, signalled(JobSignal::Suspend))
        );
        assert_eq!(s.job(1).unwrap().state, JobState::Suspended);
        rejected_with(
            &control(&mut s, 2, 1, JobAction::Suspend),
            Status::Conflict,
            "suspended",
        );
        assert_eq!(
            apply_pushes(&mut s, control_cmd(3, 1, JobAction::Resume)),
            (Outcome::Done, signalled(JobSignal::Resume))
        );
        assert_eq!(s.job(1).unwrap().state, JobState::Running);
        // Kill is asked of the worker; the job keeps its cpus until the worker reports the end.
        assert_eq!(
            apply_pushes(&mut s, control_cmd(4, 1, JobAction::Kill)),
            (Outcome::Done, signalled(JobSignal::Kill))
        );
        assert_eq!(
            (s.job(1).unwrap().state, s.hosts()[0].used.cpus),
            (JobState::Running, 1)
        );
        rejected_with(
            &control(&mut s, 5, 1, JobAction::Kill),
            Status::Conflict,
            "already being ended",
        );
        rejected_with(
            &control(&mut s, 6, 1, JobAction::Suspend),
            Status::Conflict,
            "being ended",
        );
        assert_eq!(finish(&mut s, 7, 1, 1, JobEnd::Signal(15)), Outcome::Done);
        let job = s.job(1).unwrap();
        assert_eq!(
            (job.state, job.reason.as_deref(), job.signal),
            (JobState::Exited, Some("killed"), Some(15))
        );
        assert!(s.intents.is_empty());
    }

    #[test]
    fn a_job_killed_for_its_memory_limit_exits_out_of_memory() {
        let mut s = running_on_w1(1);
        assert_eq!(finish(&mut s, 2, 1, 1, JobEnd::OutOfMemory), Outcome::Done);
        let job = s.job(1).unwrap();
        assert_eq!(
            (job.state, job.reason.as_deref(), job.signal, job.exit_code),
            (JobState::Exited, Some(REASON_OOM), Some(9), None)
        );
    }

    #[test]
    fn requeue_waits_for_the_attempt_to_end_and_fences_it() {
        let mut s = running_on_w1(1);
        assert_eq!(
            apply_pushes(&mut s, control_cmd(1, 1, JobAction::Requeue)),
            (
                Outcome::Done,
                vec![Push::Signal {
                    host: "w1".into(),
                    order: order(1, 1, JobSignal::Kill)
                }]
            )
        );
        assert_eq!(finish(&mut s, 2, 1, 1, JobEnd::Signal(15)), Outcome::Done);
        let job = s.job(1).unwrap().clone();
        assert_eq!(
            (job.state, job.host, job.attempt),
            (JobState::Pending, None, 1)
        );
        assert_eq!(job.pend_reason.as_deref(), Some(PEND_REQUEUED));
        assert_eq!(
            (job.exit_code, job.signal, job.start_time_ms),
            (None, None, None)
        );
        // The old attempt can no longer change the job.
        rejected_with(
            &finish(&mut s, 3, 1, 1, JobEnd::Exit(0)),
            Status::Conflict,
            "stale",
        );
        assert_eq!(s.apply(10, dispatch_cmd(4, 1, "w1")), Outcome::Done);
        assert_eq!(s.job(1).unwrap().attempt, 2);
        let old_start = Command::JobStarted {
            token: RequestToken(5),
            id: 1,
            attempt: 1,
            host: "w1".into(),
        };
        rejected_with(&s.apply(11, old_start), Status::Conflict, "stale");
        // A finished job can be requeued too (run again).
        assert_eq!(finish(&mut s, 6, 1, 2, JobEnd::Exit(0)), Outcome::Done);
        assert_eq!(control(&mut s, 7, 1, JobAction::Requeue), Outcome::Done);
        assert_eq!(s.job(1).unwrap().state, JobState::Pending);
        rejected_with(
            &control(&mut s, 8, 1, JobAction::Requeue),
            Status::Conflict,
            "pending",
        );
    }

    #[test]
    fn counts_per_queue_and_filters() {
        let mut s = State::default();
        for t in 0..3 {
            submit(&mut s, t, spec(&["x"]));
        }
        control(&mut s, 99, 2, JobAction::Kill);
        let q = &s.queues()[0];
        assert_eq!((q.pending, q.running), (2, 0));
        let filter = JobFilter {
            states: vec![JobState::Exited],
            ..JobFilter::default()
        };
        let page = s.jobs_page(&filter, 0, DEFAULT_PAGE_FOR_TESTS);
        assert_eq!(page.jobs.iter().map(|j| j.id).collect::<Vec<_>>(), vec![2]);
    }

    const DEFAULT_PAGE_FOR_TESTS: usize = super::super::DEFAULT_PAGE;

    #[test]
    fn a_kill_records_who_asked_and_a_no_requeue_job_ends_with_its_lost_host() {
        let mut s = running_on_w1(2);
        let kill = Command::ControlJob {
            token: RequestToken(7),
            id: 1,
            action: JobAction::Kill,
            by: None,
            actor: Some("alice".into()),
        };
        assert_eq!(s.apply(5, kill), Outcome::Done);
        finish(&mut s, 8, 1, 1, JobEnd::Signal(15));
        let job = s.job(1).unwrap();
        assert_eq!(
            (job.result, job.reason.as_deref()),
            (Some(JobResult::Cancelled), Some("cancelled by alice"))
        );
        s.update_job(2, |job| job.spec.no_requeue = true);
        let unavailable = Command::SetHostAvailable {
            name: "w1".into(),
            available: false,
        };
        s.apply(6, unavailable);
        s.apply(7, Command::HostLost { name: "w1".into() });
        let job = s.job(2).unwrap();
        assert_eq!(
            (job.state, job.result),
            (JobState::Exited, Some(JobResult::NodeFail))
        );
    }
}
