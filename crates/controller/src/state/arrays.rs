//! Job arrays on the job-change path (`--array`, `xce_client::array`): an array is one record
//! that holds its pending tasks as index runs; a task becomes a job of its own only when it
//! is placed (split off in the same write as its dispatch), so a million pending tasks cost
//! about what one job costs.
//!
//! The array's own record counts its tasks by where they stand (`ArrayProgress`): every change
//! of a task passes `State::update_job`, which tells [`State::account_task`] the task's move,
//! so the counts are exact whatever ends a task (its end, a kill, a lost host, a requeue). The
//! record is `pending` while tasks wait in it, `running` while only split-off tasks remain,
//! and ends once every task has: `done` if each completed, `exited` otherwise.

use xce_client::types::{
    ArrayProgress, ArrayTask, Job, JobAction, JobId, JobResult, JobSpec, JobState, Standing,
};
use xce_proto::Status;

use super::{Outcome, State};

/// A new array's own record: every task waits in it.
pub(super) fn start(job: &mut Job) {
    if let Some(spec) = &job.spec.array {
        job.array = Some(ArrayProgress {
            pending: spec.tasks.clone(),
            ..ArrayProgress::default()
        });
    }
}

/// Sets an array record's state from its counts; `at_ms` is when its last task ended.
pub(super) fn settle(job: &mut Job, at_ms: Option<u64>) {
    let Some(p) = &job.array else {
        return;
    };
    let live = match (p.pending.is_empty(), p.waiting + p.running > 0) {
        (false, _) => Some(JobState::Pending),
        (true, true) => Some(JobState::Running),
        (true, false) => None,
    };
    if live != Some(JobState::Pending) {
        job.pend_code = None;
        job.pend_reason = None;
    }
    if let Some(state) = live {
        // Live again (a task requeued after the array ended): no end of its own.
        job.state = state;
        job.result = None;
        job.reason = None;
        job.end_time_ms = None;
        return;
    }
    // A task ends unrun only when someone kills it (or the array) before it starts: the
    // array was cancelled, whatever else its tasks did.
    let (state, result) = match (p.failed, p.unrun) {
        (0, 0) => (JobState::Done, JobResult::Completed),
        (_, 0) => (JobState::Exited, JobResult::Failed),
        _ => (JobState::Exited, JobResult::Cancelled),
    };
    if job.state != state {
        job.state = state;
        job.result = Some(result);
        job.end_time_ms = at_ms.or(job.end_time_ms);
        job.reason = match result {
            JobResult::Completed => None,
            _ => Some(format!(
                "{} of {} tasks did not complete",
                p.failed + p.unrun,
                p.done()
            )),
        };
    }
}

/// Why array `array` may place no more tasks now: it runs as many as its throttle allows.
fn throttle_reached(array: &Job) -> Option<String> {
    let throttle = array.spec.array.as_ref()?.throttle?;
    let running = array.array.as_ref()?.running;
    (running >= u64::from(throttle)).then(|| {
        format!(
            "array {} runs {throttle} tasks, its throttle (%{throttle})",
            array.id
        )
    })
}

impl State {
    /// Splits the next task off array `id` into a job of its own (pending; the caller places
    /// it at once), or says why none may go now.
    pub(super) fn split_task(&mut self, at_ms: u64, id: JobId) -> Result<JobId, Outcome> {
        let conflict = |message: String| Err(Outcome::rejected(Status::Conflict, message));
        let Some(array) = self.jobs.get(&id) else {
            return Err(super::jobs::no_such_job(id));
        };
        let (Some(_), Some(progress)) = (&array.spec.array, &array.array) else {
            return conflict(format!("job {id} is no array"));
        };
        if progress.pending.is_empty() {
            return conflict(format!("array {id} has no task left to start"));
        }
        if let Some(why) = throttle_reached(array) {
            return conflict(why);
        }
        let Some(index) = self.next_task(array) else {
            return conflict(format!(
                "array {id}: no task of it may start yet (its tasks wait for the tasks they \
                 follow)"
            ));
        };
        let task = self.split_off(at_ms, id, index)?;
        self.judge_paired(id, at_ms);
        Ok(task)
    }

    /// Splits task `index`, waiting in array `id`, off into a pending job of its own: to be
    /// placed, or to take what only that task is asked (`xce hold 42_7`).
    pub(super) fn split_off(
        &mut self,
        at_ms: u64,
        id: JobId,
        index: u32,
    ) -> Result<JobId, Outcome> {
        let conflict = |message: String| Err(Outcome::rejected(Status::Conflict, message));
        let Some(array) = self.jobs.get(&id) else {
            return Err(super::jobs::no_such_job(id));
        };
        let (Some(spec), Some(progress)) = (&array.spec.array, &array.array) else {
            return conflict(format!("job {id} is no array"));
        };
        if !progress.pending.contains(index) {
            return conflict(format!("task {id}_{index} is not waiting in its array"));
        }
        if self.next_job_id >= super::MAX_JOB_ID {
            return conflict("job ids are exhausted".to_string());
        }
        let task = ArrayTask {
            array_id: id,
            index,
            count: spec.tasks.len(),
            min: spec.tasks.first().unwrap_or(0),
            max: spec.tasks.last().unwrap_or(0),
            step: spec.step(),
        };
        let job = Job {
            id: self.next_job_id,
            spec: JobSpec {
                array: None,
                ..array.spec.clone()
            },
            state: JobState::Pending,
            pend_reason: None,
            pend_code: None,
            reason: None,
            result: None,
            host: None,
            attempt: 0,
            runs: 0,
            exit_code: None,
            signal: None,
            submit_time_ms: array.submit_time_ms,
            start_time_ms: None,
            end_time_ms: None,
            output_dir: None,
            cancelled_by: None,
            dependency_state: array.dependency_state,
            array: None,
            array_task: Some(task),
            expected_start_ms: None,
            usage: None,
            attempts: Vec::new(),
        };
        let task_id = job.id;
        self.next_job_id += 1;
        // The task counts as waiting before it leaves the set, so the array never looks
        // ended in between (its last task split off).
        self.insert_job(job);
        self.update_job(id, |a| {
            if let Some(p) = &mut a.array {
                p.pending.remove(index);
            }
            settle(a, Some(at_ms));
        });
        Ok(task_id)
    }

    /// Why task `job`, a pending job of its own (split off to be held, changed or requeued),
    /// may not be placed now: its array runs as many tasks as its throttle allows. Judged
    /// from version 10 on, where a task can be split off without being placed (before, a
    /// requeued task was placed without it, as every member of such a cluster does alike).
    pub(super) fn over_throttle(&self, job: &Job) -> Option<String> {
        if self.active_version < 10 {
            return None;
        }
        throttle_reached(self.jobs.get(&job.array_task?.array_id)?)
    }

    /// Moves a task of array `array_id` from one class to another on its array's counts
    /// (`None`: it did not exist, or no longer does), and the array's state with them. The
    /// jobs that wait for the array are judged again.
    pub(super) fn account_task(
        &mut self,
        array_id: JobId,
        from: Option<Standing>,
        to: Option<Standing>,
        at_ms: Option<u64>,
    ) {
        self.update_job(array_id, |a| {
            if let Some(p) = &mut a.array {
                if let Some(from) = from {
                    let n = p.count_mut(from);
                    *n = n.saturating_sub(1);
                }
                if let Some(to) = to {
                    *p.count_mut(to) += 1;
                }
            }
            settle(a, at_ms);
        });
        self.moved.push(array_id);
    }

    /// A kill of a whole array: its waiting tasks end unrun at once, each task of its own is
    /// killed as any job is; the array ends once they have.
    pub(super) fn kill_array(
        &mut self,
        at_ms: u64,
        id: JobId,
        by: Option<&str>,
        actor: Option<String>,
    ) -> Outcome {
        let Some(array) = self.jobs.get(&id) else {
            return super::jobs::no_such_job(id);
        };
        if array.state.is_final() {
            return Outcome::rejected(
                Status::Conflict,
                format!("array {id}: already {}", array.state.name()),
            );
        }
        self.update_job(id, |a| {
            a.cancelled_by = actor.clone();
            if let Some(p) = &mut a.array {
                let left = p.pending.len();
                p.pending = Default::default();
                p.unrun += left;
            }
            settle(a, Some(at_ms));
        });
        self.moved.push(id);
        for task in self.index.tasks_of(id) {
            let live = self.jobs.get(&task).is_some_and(|t| !t.state.is_final());
            if live {
                self.control_job(at_ms, task, JobAction::Kill, by, actor.clone());
            }
        }
        Outcome::Done
    }
}

#[cfg(test)]
mod tests {
    use xce_client::types::{JobEnd, RequestToken};

    use super::super::testing::{control_cmd, dispatch_cmd, finish, join_cmd, spec, submit};
    use super::super::Command;
    use super::*;

    fn array(text: &str) -> JobSpec {
        JobSpec {
            array: Some(text.parse().unwrap()),
            ..spec(&["true"])
        }
    }

    fn progress(s: &State, id: JobId) -> (u64, u64, u64, u64, u64, u64) {
        let p = s.job(id).unwrap().array.clone().unwrap();
        (
            p.pending.len(),
            p.waiting,
            p.running,
            p.completed,
            p.failed,
            p.unrun,
        )
    }

    fn cluster() -> State {
        let mut s = State::default();
        s.apply(0, join_cmd(1, "w1", vec![]));
        s
    }

    #[test]
    fn a_task_is_split_off_when_placed_and_the_array_counts_it() {
        let mut s = cluster();
        assert_eq!(submit(&mut s, 10, array("0-9:3")), Outcome::Submitted(1));
        assert_eq!(progress(&s, 1), (4, 0, 0, 0, 0, 0));
        assert_eq!(s.apply(3, dispatch_cmd(11, 1, "w1")), Outcome::Done);
        let task = s.job(2).unwrap();
        assert_eq!(task.state, JobState::Dispatched);
        let t = task.array_task.unwrap();
        assert_eq!(
            (t.array_id, t.index, t.count, t.min, t.max, t.step),
            (1, 0, 4, 0, 9, 3)
        );
        assert_eq!(task.spec.array, None);
        assert_eq!(progress(&s, 1), (3, 0, 1, 0, 0, 0));
        assert_eq!(s.job(1).unwrap().state, JobState::Pending);
        finish(&mut s, 12, 2, 1, JobEnd::Exit(0));
        assert_eq!(progress(&s, 1), (3, 0, 0, 1, 0, 0));
        // The rest, in index order; one fails.
        for (t, task, code) in [(13, 3, 0), (15, 4, 1), (17, 5, 0)] {
            assert_eq!(s.apply(3, dispatch_cmd(t, 1, "w1")), Outcome::Done);
            assert_eq!(
                s.job(task).unwrap().array_task.unwrap().index,
                (task as u32 - 2) * 3
            );
            finish(&mut s, t + 1, task, 1, JobEnd::Exit(code));
        }
        let a = s.job(1).unwrap();
        assert_eq!(progress(&s, 1), (0, 0, 0, 3, 1, 0));
        assert_eq!(
            (a.state, a.result),
            (JobState::Exited, Some(JobResult::Failed))
        );
        super::super::testing::rejected_with(
            &s.apply(3, dispatch_cmd(20, 1, "w1")),
            Status::Conflict,
            "not pending",
        );
    }

    #[test]
    fn the_throttle_bounds_the_tasks_placed_at_once() {
        let mut s = cluster();
        submit(&mut s, 10, array("1-5%2"));
        assert_eq!(s.apply(3, dispatch_cmd(11, 1, "w1")), Outcome::Done);
        assert_eq!(s.apply(3, dispatch_cmd(12, 1, "w1")), Outcome::Done);
        super::super::testing::rejected_with(
            &s.apply(3, dispatch_cmd(13, 1, "w1")),
            Status::Conflict,
            "throttle (%2)",
        );
        finish(&mut s, 14, 2, 1, JobEnd::Exit(0));
        assert_eq!(s.apply(3, dispatch_cmd(15, 1, "w1")), Outcome::Done);
    }

    #[test]
    fn a_kill_of_the_array_ends_every_task_once() {
        let mut s = cluster();
        submit(&mut s, 10, array("0-999999"));
        assert_eq!(s.apply(3, dispatch_cmd(11, 1, "w1")), Outcome::Done);
        assert_eq!(
            s.apply(5, control_cmd(12, 1, JobAction::Kill)),
            Outcome::Done
        );
        // The waiting ones ended at once; the placed one is being killed.
        assert_eq!(progress(&s, 1), (0, 0, 1, 0, 0, 999_999));
        assert_eq!(s.job(1).unwrap().state, JobState::Running);
        finish(&mut s, 13, 2, 1, JobEnd::Signal(15));
        let a = s.job(1).unwrap();
        assert_eq!(
            (a.state, a.result),
            (JobState::Exited, Some(JobResult::Cancelled))
        );
        assert_eq!(s.job(2).unwrap().result, Some(JobResult::Cancelled));
        // A dependent of the array sees it: afterany is met.
        let after = JobSpec {
            dependency: Some("afterany:1".parse().unwrap()),
            ..spec(&["true"])
        };
        submit(&mut s, 14, after);
        assert_eq!(
            s.job(3).unwrap().dependency_state,
            Some(xce_client::types::DependencyState::Satisfied)
        );
    }

    #[test]
    fn afterok_on_an_array_waits_for_every_task_and_fails_with_one() {
        let mut s = cluster();
        submit(&mut s, 10, array("1-2"));
        let after = JobSpec {
            dependency: Some("afterok:1".parse().unwrap()),
            kill_on_invalid_dep: Some(false),
            ..spec(&["true"])
        };
        submit(&mut s, 11, after); // 2
        s.apply(3, dispatch_cmd(12, 1, "w1")); // task 3
        finish(&mut s, 13, 3, 1, JobEnd::Exit(0));
        assert_eq!(
            s.job(2).unwrap().dependency_state,
            Some(xce_client::types::DependencyState::Waiting)
        );
        s.apply(3, dispatch_cmd(14, 1, "w1")); // task 4
        finish(&mut s, 15, 4, 1, JobEnd::Exit(2));
        let waits = s.job(2).unwrap();
        assert_eq!(
            (waits.dependency_state, waits.pend_reason.as_deref()),
            (
                Some(xce_client::types::DependencyState::Never),
                // The task that failed, named.
                Some("never satisfied: job 1_2 ended failed")
            )
        );
    }

    /// An array's own record takes no signal, and no change once its tasks all started.
    #[test]
    fn an_array_record_refuses_what_only_its_tasks_can_take() {
        let mut s = cluster();
        submit(&mut s, 10, array("1"));
        s.apply(3, dispatch_cmd(11, 1, "w1"));
        assert_eq!(s.job(1).unwrap().state, JobState::Running);
        let signal = Command::SignalJob {
            token: RequestToken(12),
            id: 1,
            by: None,
            signal: 10,
            leader_only: false,
        };
        super::super::testing::rejected_with(&s.apply(3, signal), Status::Conflict, "array");
        let update = Command::UpdateJob {
            token: RequestToken(13),
            id: 1,
            by: None,
            changes: xce_client::types::JobChanges {
                time_limit_s: Some(60),
                ..Default::default()
            },
        };
        super::super::testing::rejected_with(&s.apply(3, update), Status::Conflict, "array");
    }

    /// A backup restored into a new cluster keeps an array's counts as they were: its
    /// restored tasks are not counted a second time.
    #[test]
    fn a_restored_array_counts_its_tasks_once() {
        let mut s = cluster();
        submit(&mut s, 10, array("1-3"));
        s.apply(3, dispatch_cmd(11, 1, "w1")); // task 2
        let mut parts = Vec::new();
        s.backup_parts(1 << 20, |p| {
            parts.push(p);
            Ok::<_, postcard::Error>(())
        })
        .unwrap();
        let mut fresh = State::default();
        let base = RequestToken(1 << 100);
        for (i, part) in parts.into_iter().enumerate() {
            let token = RequestToken((1 << 100) + i as u128);
            let cmd = match part {
                super::super::BackupPart::Base(state) => Command::Restore {
                    token,
                    state: Box::new(state),
                },
                super::super::BackupPart::Jobs {
                    jobs,
                    intents,
                    scripts,
                } => Command::RestoreJobs {
                    token,
                    base,
                    jobs,
                    intents,
                    scripts,
                },
            };
            assert_eq!(fresh.apply(5, cmd), Outcome::Done);
        }
        assert_eq!(progress(&fresh, 1), progress(&s, 1));
        assert_eq!(progress(&fresh, 1), (2, 0, 1, 0, 0, 0));
    }

    #[test]
    fn a_requeued_task_is_counted_where_it_stands() {
        let mut s = cluster();
        submit(&mut s, 10, array("1-2"));
        s.apply(3, dispatch_cmd(11, 1, "w1")); // task 2
        finish(&mut s, 12, 2, 1, JobEnd::Exit(0));
        s.apply(5, control_cmd(13, 2, JobAction::Requeue));
        assert_eq!(progress(&s, 1), (1, 1, 0, 0, 0, 0));
        s.apply(
            3,
            Command::Dispatch {
                token: RequestToken(14),
                id: 2,
                host: "w1".into(),
            },
        );
        assert_eq!(progress(&s, 1), (1, 0, 1, 0, 0, 0));
        let back = State::try_from_record(s.clone().into_record()).unwrap();
        assert_eq!(back, s);
    }
}
