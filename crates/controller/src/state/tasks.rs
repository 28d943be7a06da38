//! `ControlTasks`: what a user asks of an array's tasks by name (`xce kill 42_7`, `xce hold
//! 42_[1-5]`, `xce signal 42 USR1`, `xce update 42 --throttle 4`), each task taking it as a
//! job of its own would.
//!
//! Tasks still waiting in the array's record have no record to change: a kill takes them out
//! of the set (they end unrun, counted by the array); a change splits each one named off into
//! a pending job of its own first (as Slurm does), after the change was judged on the array's
//! spec, so a refused change splits nothing. A change of the whole array changes its record
//! (the tasks still waiting in it) and every task of its own that has not ended. Signals,
//! suspends, resumes and requeues reach only tasks that started. With several tasks named,
//! the action is made on every task that takes it, and refused only when none does.

use xce_client::array::TaskSet;
use xce_client::types::{JobAction, JobChanges, JobId, JobState, TaskOp};
use xce_proto::Status;

use super::jobs::{no_such_job, not_owner};
use super::{Outcome, State};

/// The most waiting tasks one change splits off one by one; a change of more of them is the
/// whole array's (its record is what they share).
pub const MAX_TASKS_SPLIT: u64 = 10_000;

impl State {
    pub(super) fn control_tasks(
        &mut self,
        at_ms: u64,
        array: JobId,
        tasks: Option<TaskSet>,
        by: Option<&str>,
        actor: Option<String>,
        op: TaskOp,
    ) -> Outcome {
        let Some(job) = self.jobs.get(&array) else {
            return no_such_job(array);
        };
        if let Some(refused) = not_owner(job, by, "control") {
            return refused;
        }
        let Some(spec) = &job.spec.array else {
            return Outcome::rejected(
                Status::Conflict,
                format!("job {array} is no array: it has no tasks to name"),
            );
        };
        if let Some(named) = &tasks {
            if let Some(missing) = first_missing(named, &spec.tasks) {
                return Outcome::rejected(
                    Status::NoEnt,
                    format!("job {array}_{missing}: array {array} has no task {missing}"),
                );
            }
        }
        match (op, tasks) {
            (
                TaskOp::Control {
                    action: JobAction::Kill,
                },
                None,
            ) => self.kill_array(at_ms, array, by, actor),
            (
                TaskOp::Control {
                    action: JobAction::Kill,
                },
                Some(named),
            ) => self.kill_tasks(at_ms, array, &named, by, actor),
            (TaskOp::Control { action }, named) => {
                self.each_started(array, named.as_ref(), |s, id| {
                    s.control_job(at_ms, id, action, by, actor.clone())
                })
            }
            (
                TaskOp::Signal {
                    signal,
                    leader_only,
                },
                named,
            ) => self.each_started(array, named.as_ref(), |s, id| {
                s.signal_job(id, by, signal, leader_only)
            }),
            (TaskOp::Update { changes, throttle }, named) => {
                self.update_tasks(at_ms, array, named, by, changes, throttle)
            }
        }
    }

    /// Kills the tasks of `array` that `named` names: the waiting ones end unrun at once,
    /// each started one is killed as any job is.
    fn kill_tasks(
        &mut self,
        at_ms: u64,
        array: JobId,
        named: &TaskSet,
        by: Option<&str>,
        actor: Option<String>,
    ) -> Outcome {
        let unrun = self
            .update_job(array, |a| {
                let taken = a.array.as_mut().map(|p| {
                    let taken = p.pending.take_set(named).len();
                    p.unrun += taken;
                    taken
                });
                super::arrays::settle(a, Some(at_ms));
                taken.unwrap_or(0)
            })
            .unwrap_or(0);
        self.moved.push(array);
        let started = self.each_started(array, Some(named), |s, id| {
            s.control_job(at_ms, id, JobAction::Kill, by, actor.clone())
        });
        match started {
            refused @ Outcome::Rejected { .. } if unrun == 0 => refused,
            _ => Outcome::Done,
        }
    }

    /// `act` on every task of `array` with a record of its own that `named` names (`None`:
    /// all): done if any took it, else the first refusal.
    fn each_started(
        &mut self,
        array: JobId,
        named: Option<&TaskSet>,
        mut act: impl FnMut(&mut State, JobId) -> Outcome,
    ) -> Outcome {
        let targets = self.tasks_named(array, named);
        let mut first_refusal = None;
        let mut took = false;
        for id in targets {
            match act(self, id) {
                refused @ Outcome::Rejected { .. } => {
                    first_refusal.get_or_insert(refused);
                }
                _ => took = true,
            }
        }
        match (took, first_refusal) {
            (true, _) => Outcome::Done,
            (false, Some(refused)) => refused,
            (false, None) => Outcome::rejected(
                Status::Conflict,
                format!(
                    "array {array}: no task {} has started",
                    named.map_or_else(|| "of it".to_string(), |n| format!("of {n}"))
                ),
            ),
        }
    }

    /// The tasks of `array` with records of their own that `named` names, in index order.
    fn tasks_named(&self, array: JobId, named: Option<&TaskSet>) -> Vec<JobId> {
        let Some(named) = named else {
            return self.index.tasks_of(array);
        };
        named
            .runs()
            .flat_map(|run| self.index.tasks_between(array, run.start, run.end))
            .filter(|(index, _)| named.contains(*index))
            .map(|(_, id)| id)
            .collect()
    }

    /// An update of tasks of `array`: its throttle (the whole array only), then `changes` on
    /// every task named that has not ended.
    fn update_tasks(
        &mut self,
        at_ms: u64,
        array: JobId,
        named: Option<TaskSet>,
        by: Option<&str>,
        changes: JobChanges,
        throttle: Option<u32>,
    ) -> Outcome {
        if let Some(throttle) = throttle {
            if let Err(refused) = self.may_throttle(array, named.is_some(), throttle) {
                return refused;
            }
            // The throttle only once the other changes were made: all or nothing.
            let made = match changes == JobChanges::default() {
                true => Outcome::Done,
                false => self.update_tasks(at_ms, array, named, by, changes, None),
            };
            if made == Outcome::Done {
                self.set_throttle(array, throttle);
            }
            return made;
        }
        let Some(job) = self.jobs.get(&array) else {
            return no_such_job(array);
        };
        let mut targets = Vec::new();
        match &named {
            None => {
                if job.state == JobState::Pending {
                    targets.push(array);
                }
            }
            Some(named) => {
                let waiting = job
                    .array
                    .as_ref()
                    .map(|p| p.pending.clone().take_set(named))
                    .unwrap_or_default();
                if waiting.len() > MAX_TASKS_SPLIT {
                    return Outcome::rejected(
                        Status::Invalid,
                        format!(
                            "tasks: {} waiting tasks named, at most {MAX_TASKS_SPLIT} change one \
                             by one; change the whole array ({array})",
                            waiting.len()
                        ),
                    );
                }
                if !waiting.is_empty() {
                    let spec = job.spec.clone();
                    if let Err(refused) = self.check_change(&spec, by, &changes) {
                        return refused;
                    }
                    for index in waiting.iter() {
                        match self.split_off(at_ms, array, index) {
                            Ok(task) => targets.push(task),
                            Err(refused) => return refused,
                        }
                    }
                }
            }
        }
        for id in self.tasks_named(array, named.as_ref()) {
            let live = self.jobs.get(&id).is_some_and(|j| !j.state.is_final());
            if live && !targets.contains(&id) {
                targets.push(id);
            }
        }
        let mut first_refusal = None;
        let mut took = false;
        for id in targets {
            match self.update(at_ms, id, by, changes.clone()) {
                refused @ Outcome::Rejected { .. } => {
                    first_refusal.get_or_insert(refused);
                }
                _ => took = true,
            }
        }
        match (took, first_refusal) {
            (true, _) => Outcome::Done,
            (false, Some(refused)) => refused,
            (false, None) => Outcome::rejected(
                Status::Conflict,
                format!("array {array}: every task named has ended"),
            ),
        }
    }

    /// Whether `array` takes a new throttle.
    fn may_throttle(&self, array: JobId, of_tasks: bool, throttle: u32) -> Result<(), Outcome> {
        let invalid = |message: String| Err(Outcome::rejected(Status::Invalid, message));
        if of_tasks {
            return invalid(format!(
                "throttle: array {array}'s own, not its tasks' (give {array} alone)"
            ));
        }
        if throttle == 0 {
            return invalid("throttle: 0 would run no task".to_string());
        }
        let Some(job) = self.jobs.get(&array) else {
            return Err(no_such_job(array));
        };
        if job.state.is_final() {
            return Err(Outcome::rejected(
                Status::Conflict,
                format!("array {array}: already {}", job.state.name()),
            ));
        }
        Ok(())
    }

    /// A new limit of tasks of `array` placed at once; placed ones above it run on.
    fn set_throttle(&mut self, array: JobId, throttle: u32) {
        self.update_job(array, |a| {
            if let Some(spec) = &mut a.spec.array {
                spec.throttle = Some(throttle);
            }
        });
        // The scheduler reads the array again on its event: it may place more tasks now.
        if let Some(job) = self.jobs.get(&array) {
            self.emitted.push(super::job_event(job));
        }
    }
}

/// The first index of `named` that `all` does not hold.
pub(super) fn first_missing(named: &TaskSet, all: &TaskSet) -> Option<u32> {
    let held = all.clone().take_set(named);
    if held.len() == named.len() {
        return None;
    }
    named.iter().find(|i| !held.contains(*i))
}

#[cfg(test)]
mod tests {
    use xce_client::types::{JobEnd, JobResult, JobSpec, RequestToken};

    use super::super::testing::{dispatch_cmd, finish, join_cmd, rejected_with, spec, submit};
    use super::super::Command;
    use super::*;

    fn cluster_with(array: &str) -> State {
        let mut s = State::default();
        s.apply(0, join_cmd(1, "w1", vec![]));
        let spec = JobSpec {
            array: Some(array.parse().unwrap()),
            ..spec(&["true"])
        };
        assert_eq!(submit(&mut s, 2, spec), Outcome::Submitted(1));
        s
    }

    fn on(t: u128, tasks: Option<&str>, op: TaskOp) -> Command {
        Command::ControlTasks {
            token: RequestToken(t),
            array: 1,
            tasks: tasks.map(|t| t.parse().unwrap()),
            by: None,
            actor: None,
            op,
        }
    }

    fn kill() -> TaskOp {
        TaskOp::Control {
            action: JobAction::Kill,
        }
    }

    fn hold(hold: bool) -> TaskOp {
        TaskOp::Update {
            changes: JobChanges {
                hold: Some(hold),
                ..Default::default()
            },
            throttle: None,
        }
    }

    fn waiting(s: &State) -> String {
        s.job(1)
            .unwrap()
            .array
            .as_ref()
            .unwrap()
            .pending
            .to_string()
    }

    #[test]
    fn a_kill_of_tasks_ends_the_waiting_ones_unrun_and_kills_the_placed_ones() {
        let mut s = cluster_with("0-9");
        assert_eq!(s.apply(1, dispatch_cmd(3, 1, "w1")), Outcome::Done); // task 0: job 2
        assert_eq!(s.apply(2, on(4, Some("0-2,8"), kill())), Outcome::Done);
        assert_eq!(waiting(&s), "3-7,9");
        let p = s.job(1).unwrap().array.clone().unwrap();
        assert_eq!((p.unrun, p.running), (3, 1));
        // Task 0 is being killed, as any placed job is.
        finish(&mut s, 5, 2, 1, JobEnd::Signal(15));
        assert_eq!(s.job(2).unwrap().result, Some(JobResult::Cancelled));
        // What the array never had is named; what has ended is said so.
        rejected_with(
            &s.apply(3, on(6, Some("10"), kill())),
            Status::NoEnt,
            "no task 10",
        );
        rejected_with(
            &s.apply(3, on(7, Some("0"), kill())),
            Status::Conflict,
            "already",
        );
        s.check_invariants().unwrap();
    }

    #[test]
    fn a_change_of_tasks_splits_off_those_named_and_a_refused_one_splits_none() {
        let mut s = cluster_with("0-9");
        assert_eq!(s.apply(1, on(3, Some("4-5"), hold(true))), Outcome::Done);
        assert_eq!(waiting(&s), "0-3,6-9");
        for id in [2, 3] {
            let task = s.job(id).unwrap();
            assert!(
                task.spec.hold && task.state == JobState::Pending,
                "{task:?}"
            );
        }
        // A user may not raise a priority: nothing is split off.
        let raise = Command::ControlTasks {
            token: RequestToken(4),
            array: 1,
            tasks: Some("7".parse().unwrap()),
            by: Some(String::new()),
            actor: None,
            op: TaskOp::Update {
                changes: JobChanges {
                    priority: Some(100),
                    ..Default::default()
                },
                throttle: None,
            },
        };
        rejected_with(&s.apply(1, raise), Status::Perm, "priority");
        assert_eq!(waiting(&s), "0-3,6-9");
        // A release of the whole array reaches the tasks split off and held.
        assert_eq!(s.apply(1, on(5, None, hold(false))), Outcome::Done);
        assert!(!s.job(2).unwrap().spec.hold);
        s.check_invariants().unwrap();
    }

    #[test]
    fn the_throttle_is_the_whole_arrays_and_at_least_one() {
        let mut s = cluster_with("0-9%1");
        let throttle = |n| TaskOp::Update {
            changes: JobChanges::default(),
            throttle: Some(n),
        };
        assert_eq!(s.apply(1, dispatch_cmd(3, 1, "w1")), Outcome::Done);
        rejected_with(
            &s.apply(1, dispatch_cmd(4, 1, "w1")),
            Status::Conflict,
            "throttle",
        );
        assert_eq!(s.apply(1, on(5, None, throttle(2))), Outcome::Done);
        assert_eq!(s.apply(1, dispatch_cmd(6, 1, "w1")), Outcome::Done);
        rejected_with(&s.apply(1, on(7, None, throttle(0))), Status::Invalid, "0");
        rejected_with(
            &s.apply(1, on(8, Some("5"), throttle(3))),
            Status::Invalid,
            "throttle",
        );
        assert_eq!(
            s.job(1).unwrap().spec.array.as_ref().unwrap().to_string(),
            "0-9%2"
        );
    }

    #[test]
    fn a_signal_reaches_only_the_running_tasks_named() {
        let mut s = cluster_with("0-3");
        s.apply(1, dispatch_cmd(3, 1, "w1")); // task 0: job 2
        s.apply(1, dispatch_cmd(4, 1, "w1")); // task 1: job 3
        for (t, id) in [(5, 2), (6, 3)] {
            s.apply(
                1,
                Command::JobStarted {
                    token: RequestToken(t),
                    id,
                    attempt: 1,
                    host: "w1".into(),
                },
            );
        }
        let signal = TaskOp::Signal {
            signal: 10,
            leader_only: false,
        };
        let (outcome, pushes) =
            super::super::testing::apply_pushes(&mut s, on(7, Some("1-3"), signal.clone()));
        assert_eq!(outcome, Outcome::Done);
        let signalled: Vec<u64> = pushes.iter().map(super::super::Push::job).collect();
        assert_eq!(signalled, vec![3]);
        rejected_with(
            &s.apply(1, on(8, Some("2-3"), signal)),
            Status::Conflict,
            "has started",
        );
    }

    /// A task split off to be held, then released, is placed within its array's throttle
    /// like the tasks still waiting in it.
    #[test]
    fn a_task_split_off_is_placed_within_the_throttle() {
        let mut s = cluster_with("0-9%1");
        s.active_version = crate::store::STORE_FORMAT;
        assert_eq!(s.apply(1, on(3, Some("5"), hold(true))), Outcome::Done); // job 2
        assert_eq!(s.apply(1, on(4, Some("5"), hold(false))), Outcome::Done);
        assert_eq!(s.apply(1, dispatch_cmd(5, 1, "w1")), Outcome::Done); // task 0: job 3
        rejected_with(
            &s.apply(1, dispatch_cmd(6, 2, "w1")),
            Status::Conflict,
            "throttle (%1)",
        );
        finish(&mut s, 7, 3, 1, JobEnd::Exit(0));
        assert_eq!(s.apply(1, dispatch_cmd(8, 2, "w1")), Outcome::Done);
    }

    /// A user's submits count an array once, and each of its tasks while placed.
    #[test]
    fn an_array_counts_once_as_a_submit_plus_its_placed_tasks() {
        let mut s = cluster_with("0-999");
        let user = s.job(1).unwrap().spec.user.clone();
        assert_eq!(s.submits_of(&user), 1);
        s.apply(1, dispatch_cmd(3, 1, "w1")); // task 0: job 2
        assert_eq!(s.submits_of(&user), 2);
        s.apply(1, on(4, Some("5"), hold(true))); // task 5 split off, pending: not counted
        assert_eq!(s.submits_of(&user), 2);
        finish(&mut s, 5, 2, 1, JobEnd::Exit(0));
        assert_eq!(s.submits_of(&user), 1);
        s.apply(1, on(6, None, kill()));
        assert_eq!(s.submits_of(&user), 0);
    }

    /// An array whose tasks have all been split off runs on no host of its own, and a
    /// snapshot of it is taken back (it was refused as "running without a host").
    #[test]
    fn a_running_array_survives_a_snapshot() {
        let mut s = cluster_with("0");
        s.apply(1, dispatch_cmd(3, 1, "w1"));
        assert_eq!(s.job(1).unwrap().state, JobState::Running);
        let back = State::try_from_record(s.clone().into_record()).unwrap();
        assert_eq!(back, s);
    }
}
