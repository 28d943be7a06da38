//! Job dependencies on the job-change path (`--dependency`, `xce_client::dependency`): the
//! checks at submit, the first verdict, and the verdicts of waiting jobs as the jobs they wait
//! for start and end.
//!
//! Decided here, in the apply, so every controller reaches the same verdict at the same entry,
//! across failovers and replays. Every job whose state changes is noted (`State::moved`); at
//! the end of each apply the jobs that wait for a noted one are judged again, in one worklist,
//! so a job cancelled because its dependency can never be met (`--kill-on-invalid-dep`) ends
//! its own dependents' hopes in the same apply. A verdict of `satisfied` or `never` is final
//! (`dependency`'s property tests), except a `singleton` term's, which waits again while
//! another job of its name and user is placed.

use xce_client::array::{JobRef, TaskSet};
use xce_client::dependency::{self, Ended, Expr, Parents, Progress, StartedAt, Term, Verdict};
use xce_client::types::{
    DependencyState, Job, JobId, JobResult, JobSpec, JobState, PendCode, Standing,
};
use xce_proto::Status;

use super::{Outcome, State};

/// What a waiting job's `pend_reason` says.
fn waiting_reason(expr: &Expr) -> String {
    format!("waiting for its dependency {expr}")
}

/// The state as one job's dependency sees it; `task` is the index an `aftercorr` term pairs
/// (a task's own, or one waiting in the array being judged task by task).
struct Lookup<'a> {
    state: &'a State,
    job: &'a Job,
    task: Option<u32>,
}

impl<'a> Lookup<'a> {
    fn of(state: &'a State, job: &'a Job) -> Lookup<'a> {
        Lookup {
            state,
            job,
            task: job.array_task.map(|t| t.index),
        }
    }
}

impl State {
    /// When a dispatched job counts as started here: by the cluster's active version, so
    /// that every member judges each entry alike, replays included.
    fn started_at(&self) -> StartedAt {
        StartedAt::at_version(self.active_version)
    }
}

impl Lookup<'_> {
    /// Whether one task's end can decide this job's wait for array `parent` for good
    /// (`afterok`, `afternotok`): only then is the task that did named, a look over the
    /// array's tasks.
    fn decided_by_an_end(&self, parent: JobId) -> bool {
        use dependency::Kind;
        let Some(expr) = &self.job.spec.dependency else {
            return false;
        };
        expr.terms()
            .iter()
            .any(|t| matches!(t, Term::On(Kind::AfterOk | Kind::AfterNotOk, of) if of.id == parent))
    }
}

impl Parents for Lookup<'_> {
    fn progress(&self, of: &JobRef) -> Option<Progress> {
        let parent = self.state.jobs.get(&of.id)?;
        match (&of.tasks, &parent.array) {
            // Some tasks of an array: each where it stands.
            (Some(named), Some(_)) => Some(self.state.tasks_progress(parent, named)),
            // Tasks of a job that is no array (refused at submit).
            (Some(_), None) => None,
            // A whole array: every one of its tasks, from its counts; a reason names the
            // first task that failed (or ended unrun with a record of its own).
            (None, Some(p)) => {
                let mut progress = Progress {
                    first_failed: (p.failed > 0 && self.decided_by_an_end(parent.id))
                        .then(|| self.state.first_task_ended(parent.id, Standing::Failed))
                        .flatten(),
                    first_unrun: (p.unrun > 0 && self.decided_by_an_end(parent.id))
                        .then(|| self.state.first_task_ended(parent.id, Standing::Unrun))
                        .flatten(),
                    ..Progress::of_array(p)
                };
                if self.state.started_at() == StartedAt::Report {
                    progress.not_yet_started(self.state.index.dispatched_tasks_of(parent.id));
                }
                Some(progress)
            }
            (None, None) => Some(Progress::of_job(parent, self.state.started_at())),
        }
    }

    fn singleton_busy(&self) -> bool {
        let spec = &self.job.spec;
        let others_placed = self.state.index.placed_named(&spec.user, &spec.name);
        let me = u32::from(super::is_placed(self.job.state));
        others_placed > me
    }

    fn own_task(&self) -> Option<u32> {
        self.task
    }
}

/// Whether a dependency pairs tasks (`aftercorr`): its array is judged task by task.
fn pairs_tasks(expr: &Expr) -> bool {
    expr.terms()
        .iter()
        .any(|t| matches!(t, Term::On(dependency::Kind::AfterCorr, _)))
}

/// Where an array judged task by task stands: its first task that may start, and the tasks
/// (in index order) whose condition can never be met, with why.
#[derive(Default)]
struct PairedTasks {
    ready: Option<u32>,
    waiting: bool,
    never: Vec<(u32, String)>,
}

impl State {
    /// Refuses a dependency that names what does not exist: a job never submitted (which
    /// also makes a cycle impossible: a job may only wait for older ones), tasks of a job
    /// that is no array or that its array does not have, and `aftercorr` but between two
    /// arrays whose every task of this one has a task of that one to follow. Tasks named and
    /// `aftercorr` are judged from version 11 on; before, refused by name (as every member of
    /// such a cluster does alike).
    pub(super) fn check_dependency(&self, spec: &JobSpec) -> Result<(), Outcome> {
        let Some(expr) = &spec.dependency else {
            return Ok(());
        };
        // The term at fault, not the whole expression (which may hold a thousand).
        let invalid = |term: &Term, why: String| {
            let term = match term {
                Term::On(kind, job) => format!("{}:{job}", kind.name()),
                Term::Singleton => "singleton".to_string(),
            };
            Err(Outcome::rejected(
                Status::Invalid,
                format!("dependency {term}: {why}"),
            ))
        };
        let tasks_judged = self.active_version >= 11;
        if pairs_tasks(expr) && matches!(expr, Expr::Any(_)) {
            let term = expr
                .terms()
                .into_iter()
                .find(|t| matches!(t, Term::On(dependency::Kind::AfterCorr, _)));
            if let Some(term) = term {
                return invalid(
                    term,
                    "aftercorr cannot be one of several choices (?): join it with , (all)".into(),
                );
            }
        }
        for term in expr.terms() {
            let Term::On(kind, job) = term else { continue };
            let Some(parent) = self.jobs.get(&job.id) else {
                return invalid(term, format!("job {} does not exist", job.id));
            };
            let parent_tasks = parent.spec.array.as_ref().map(|a| &a.tasks);
            if *kind == dependency::Kind::AfterCorr {
                if !tasks_judged {
                    return invalid(
                        term,
                        "aftercorr (each task after the same task of another array) needs \
                         cluster version 11"
                            .into(),
                    );
                }
                let Some(parent_tasks) = parent_tasks else {
                    return invalid(term, format!("job {} is no array: it has no tasks", job.id));
                };
                let Some(own) = spec.array.as_ref() else {
                    return invalid(
                        term,
                        "aftercorr pairs the tasks of two arrays, and this job is no array \
                         (give --array)"
                            .into(),
                    );
                };
                if let Some(i) = super::tasks::first_missing(&own.tasks, parent_tasks) {
                    return invalid(
                        term,
                        format!(
                            "task {i} of this array has no task {}_{i} to follow",
                            job.id
                        ),
                    );
                }
                continue;
            }
            let Some(named) = &job.tasks else { continue };
            let Some(parent_tasks) = parent_tasks else {
                return invalid(term, format!("job {} is no array: it has no tasks", job.id));
            };
            if !tasks_judged {
                return invalid(
                    term,
                    format!(
                        "a dependency on some tasks of an array needs cluster version 11: \
                         depend on the whole array ({})",
                        job.id
                    ),
                );
            }
            if let Some(i) = super::tasks::first_missing(named, parent_tasks) {
                return invalid(term, format!("array {} has no task {i}", job.id));
            }
        }
        Ok(())
    }

    /// A new job's first verdict, set before it is inserted: a job whose dependency is met
    /// already is placed like any other. An array that pairs its tasks waits until
    /// [`State::judge_paired`] has looked at them.
    pub(super) fn judge_new(&self, job: &mut Job, at_ms: u64) {
        let Some(expr) = job.spec.dependency.clone() else {
            return;
        };
        let verdict = match dependency::verdict(&expr, &Lookup::of(self, job)) {
            Verdict::Met if job.array.is_some() && pairs_tasks(&expr) => Verdict::Waiting,
            verdict => verdict,
        };
        apply_verdict(job, &expr, verdict, at_ms);
    }

    /// Judges an array that pairs its tasks (`aftercorr`) again: once it is in the state (the
    /// tasks it follows may have ended long ago), and after each of its tasks was split off
    /// (the next may not be ready).
    pub(super) fn judge_paired(&mut self, id: JobId, at_ms: u64) {
        let paired = self.jobs.get(&id).is_some_and(|j| {
            j.array.is_some() && j.spec.dependency.as_ref().is_some_and(pairs_tasks)
        });
        if paired {
            self.judge(id, at_ms);
        }
    }

    /// Judges again the jobs that wait for a job that moved in this apply, until nothing more
    /// moves. Called at the end of every apply.
    pub(super) fn settle_dependencies(&mut self, at_ms: u64) {
        while let Some(id) = self.moved.pop() {
            let mut due = self.index.dependents_of(id);
            if let Some(job) = self.jobs.get(&id) {
                due.extend(self.index.singletons_of(&job.spec.user, &job.spec.name));
            }
            due.sort_unstable();
            due.dedup();
            for dependent in due {
                self.judge(dependent, at_ms);
            }
        }
    }

    /// Judges one pending job's dependency again, changing it only when its verdict changed.
    /// An array that pairs its tasks is judged task by task once the rest of its dependency
    /// is met: satisfied while one of its tasks may start.
    pub(super) fn judge(&mut self, id: JobId, at_ms: u64) {
        let Some(job) = self.jobs.get(&id) else {
            return;
        };
        let Some(expr) = job.spec.dependency.clone() else {
            return;
        };
        if job.state != JobState::Pending || job.dependency_state == Some(DependencyState::Never) {
            return;
        }
        let mut verdict = dependency::verdict(&expr, &Lookup::of(self, job));
        let paired = job.array.is_some() && pairs_tasks(&expr);
        if paired && verdict == Verdict::Met {
            verdict = self.judge_tasks(id, at_ms);
            if !self
                .jobs
                .get(&id)
                .is_some_and(|j| j.state == JobState::Pending)
            {
                // Its last waiting tasks were set apart: nothing waits in it to judge.
                return;
            }
        }
        let Some(job) = self.jobs.get(&id) else {
            return;
        };
        let now = state_of(&verdict);
        if job.dependency_state == Some(now) {
            return;
        }
        self.update_job(id, |job| match verdict {
            // Its tasks end one by one, never the array at once.
            Verdict::Never(why) if paired => {
                job.dependency_state = Some(DependencyState::Never);
                job.pend_code = Some(PendCode::Dependency);
                job.pend_reason = Some(dependency::never_reason(&why));
            }
            verdict => apply_verdict(job, &expr, verdict, at_ms),
        });
    }

    /// The verdict of an array that pairs its tasks, from its waiting tasks: met when one may
    /// start. A task whose condition can never be met is split off into a job of its own
    /// (cancelled with `--kill-on-invalid-dep`, else pending with the reason, as Slurm keeps
    /// such a task), so no later judgement looks at it again.
    fn judge_tasks(&mut self, id: JobId, at_ms: u64) -> Verdict {
        let Some(array) = self.jobs.get(&id) else {
            return Verdict::Waiting;
        };
        let kill = array.spec.kill_on_invalid_dep == Some(true);
        let paired = self.paired_tasks(array);
        let first_never = paired.never.first().map(|(_, why)| why.clone());
        for (index, why) in paired.never {
            let Ok(task) = self.split_off(at_ms, id, index) else {
                continue;
            };
            let reason = dependency::never_reason(&why);
            self.update_job(task, |t| {
                t.dependency_state = Some(DependencyState::Never);
                if kill {
                    super::jobs::end_cancelled(t, at_ms, &reason);
                } else {
                    t.pend_code = Some(PendCode::Dependency);
                    t.pend_reason = Some(reason);
                }
            });
        }
        match (paired.ready, paired.waiting, first_never) {
            (Some(_), _, _) => Verdict::Met,
            (None, true, _) => Verdict::Waiting,
            (None, false, Some(why)) => Verdict::Never(why),
            (None, false, None) => Verdict::Met,
        }
    }

    /// The tasks waiting in `array` (which pairs its tasks) in index order, up to the first
    /// that may start: a run of tasks whose pair in the first array followed still waits in
    /// that array is passed over at once, so a look costs about the tasks that array has
    /// started, not the tasks this one holds.
    fn paired_tasks(&self, array: &Job) -> PairedTasks {
        let mut out = PairedTasks::default();
        let (Some(expr), Some(progress)) = (&array.spec.dependency, &array.array) else {
            return out;
        };
        let followed = expr.terms().into_iter().find_map(|t| match t {
            Term::On(dependency::Kind::AfterCorr, of) => self.jobs.get(&of.id),
            _ => None,
        });
        let followed_waiting = followed.and_then(|f| f.array.as_ref()).map(|a| &a.pending);
        let mut next = progress.pending.first();
        while let Some(index) = next {
            let after = match followed_waiting.and_then(|w| w.run_holding(index)) {
                Some(run) => {
                    out.waiting = true;
                    if run.step == 1 {
                        run.end
                    } else {
                        index
                    }
                }
                None => {
                    let lookup = Lookup {
                        state: self,
                        job: array,
                        task: Some(index),
                    };
                    match dependency::verdict(expr, &lookup) {
                        Verdict::Met => {
                            out.ready = Some(index);
                            return out;
                        }
                        Verdict::Waiting => out.waiting = true,
                        Verdict::Never(why) => out.never.push((index, why)),
                    }
                    index
                }
            };
            next = after
                .checked_add(1)
                .and_then(|from| progress.pending.first_from(from));
        }
        out
    }

    /// The task of array `array` to start next: its lowest waiting one, or for an array that
    /// pairs its tasks the lowest whose pair has completed.
    pub(super) fn next_task(&self, array: &Job) -> Option<u32> {
        let pending = &array.array.as_ref()?.pending;
        match &array.spec.dependency {
            Some(expr) if pairs_tasks(expr) => self.paired_tasks(array).ready,
            _ => pending.first(),
        }
    }

    /// The lowest task of array `id` with a record of its own that ended as `how`, named
    /// for a reason (`job 12_3 ended failed`).
    fn first_task_ended(&self, id: JobId, how: Standing) -> Option<Ended> {
        self.index
            .tasks_between(id, 0, u32::MAX)
            .find_map(|(_, task)| {
                let job = self.jobs.get(&task)?;
                let index = job.array_task?.index;
                (Standing::of(job) == how).then(|| Ended {
                    who: format!("{id}_{index}"),
                    result: job.result.unwrap_or(JobResult::Failed),
                })
            })
    }

    /// What some tasks of `array` have done, each where it stands: waiting in its set, a job
    /// of its own, or taken out of the set unrun by a kill.
    fn tasks_progress(&self, array: &Job, named: &TaskSet) -> Progress {
        let mut p = Progress::default();
        let Some(progress) = &array.array else {
            return p;
        };
        p.not_started = progress.pending.clone().take_set(named).len();
        let mut own = 0;
        for run in named.runs() {
            for (index, id) in self.index.tasks_between(array.id, run.start, run.end) {
                let Some(task) = self.jobs.get(&id).filter(|_| run.contains(index)) else {
                    continue;
                };
                own += 1;
                p.add_task(
                    Progress::of_job(task, self.started_at()),
                    &format!("{}_{index}", array.id),
                );
            }
        }
        let killed_waiting = named.len().saturating_sub(p.not_started + own);
        if killed_waiting > 0 {
            p.unrun += killed_waiting;
            if p.first_unrun.is_none() {
                let index = named.iter().find(|i| {
                    !progress.pending.contains(*i) && self.index.task_job(array.id, *i).is_none()
                });
                p.first_unrun = index.map(|i| Ended {
                    who: format!("{}_{i}", array.id),
                    result: JobResult::Cancelled,
                });
            }
        }
        p
    }

    /// Whether `job` may be dispatched now as far as its dependency goes; the reason if not.
    /// Judged again against this very moment, so a `singleton` never goes while another of
    /// its name is placed, even second in one batch (`afterok:1?singleton` may go once job 1
    /// completed, whatever runs).
    pub(super) fn dependency_blocks(&self, job: &Job) -> Option<String> {
        let expr = job.spec.dependency.as_ref()?;
        if job.dependency_state != Some(DependencyState::Satisfied) {
            return Some(
                job.pend_reason
                    .clone()
                    .unwrap_or_else(|| waiting_reason(expr)),
            );
        }
        match dependency::verdict(expr, &Lookup::of(self, job)) {
            Verdict::Met => None,
            _ => Some(format!(
                "waiting: a job of {}'s called {:?} runs (singleton)",
                job.spec.user, job.spec.name
            )),
        }
    }
}

fn state_of(verdict: &Verdict) -> DependencyState {
    match verdict {
        Verdict::Waiting => DependencyState::Waiting,
        Verdict::Met => DependencyState::Satisfied,
        Verdict::Never(_) => DependencyState::Never,
    }
}

/// Puts a verdict on a pending job: met, it is placed like any other; waiting or never, it
/// says so; never with `--kill-on-invalid-dep`, it ends cancelled at once.
fn apply_verdict(job: &mut Job, expr: &Expr, verdict: Verdict, at_ms: u64) {
    job.dependency_state = Some(state_of(&verdict));
    match verdict {
        Verdict::Met => {
            // The scheduler says why it waits from here on.
            job.pend_code = None;
            job.pend_reason = None;
        }
        Verdict::Waiting => {
            job.pend_code = Some(PendCode::Dependency);
            job.pend_reason = Some(waiting_reason(expr));
        }
        Verdict::Never(why) if job.spec.kill_on_invalid_dep == Some(true) => {
            super::jobs::end_cancelled(job, at_ms, &dependency::never_reason(&why));
        }
        Verdict::Never(why) => {
            job.pend_code = Some(PendCode::Dependency);
            job.pend_reason = Some(dependency::never_reason(&why));
        }
    }
}

#[cfg(test)]
mod tests {
    use xce_client::types::{JobAction, JobEnd, JobResult, RequestToken};

    use super::super::testing::{control, dispatch_cmd, finish, rejected_with, spec, submit};
    use super::super::{Command, Outcome};
    use super::*;

    /// A state with host w1 and the jobs of `running_on_w1(n)`.
    fn with_running(n: u64) -> State {
        super::super::testing::running_on_w1(n)
    }

    fn after(dependency: &str, kill: bool) -> JobSpec {
        JobSpec {
            dependency: Some(dependency.parse().unwrap()),
            kill_on_invalid_dep: Some(kill),
            ..spec(&["true"])
        }
    }

    fn dep(s: &State, id: JobId) -> (Option<DependencyState>, JobState, Option<String>) {
        let job = s.job(id).unwrap();
        let text = job.pend_reason.clone().or(job.reason.clone());
        (job.dependency_state, job.state, text)
    }

    #[test]
    fn afterok_waits_and_is_released_when_its_parent_completes() {
        let mut s = with_running(1);
        assert_eq!(
            submit(&mut s, 10, after("afterok:1", false)),
            Outcome::Submitted(2)
        );
        let job = s.job(2).unwrap();
        assert_eq!(job.pend_code, Some(PendCode::Dependency));
        assert_eq!(
            dep(&s, 2),
            (
                Some(DependencyState::Waiting),
                JobState::Pending,
                Some("waiting for its dependency afterok:1".into())
            )
        );
        // Not placed while it waits.
        rejected_with(
            &s.apply(3, dispatch_cmd(11, 2, "w1")),
            Status::Conflict,
            "waiting for its dependency",
        );
        finish(&mut s, 12, 1, 1, JobEnd::Exit(0));
        assert_eq!(
            dep(&s, 2),
            (Some(DependencyState::Satisfied), JobState::Pending, None)
        );
        assert_eq!(s.apply(3, dispatch_cmd(13, 2, "w1")), Outcome::Done);
    }

    #[test]
    fn a_dependency_that_can_never_be_met_says_why_and_cascades_when_told_to_kill() {
        let mut s = with_running(1);
        // 2 waits for 1 to succeed, 3 for 2 (killed when it never can), 4 for 2 (kept).
        submit(&mut s, 10, after("afterok:1", true));
        submit(&mut s, 11, after("afterany:2", true));
        submit(&mut s, 12, after("afterok:2", false));
        finish(&mut s, 13, 1, 1, JobEnd::Exit(3));
        let why = "never satisfied: job 1 ended failed";
        let job = s.job(2).unwrap();
        assert_eq!(
            (job.state, job.result, job.reason.as_deref()),
            (JobState::Exited, Some(JobResult::Cancelled), Some(why))
        );
        // 2 ended without running: afterany is met, afterok never (and 4 is not killed).
        assert_eq!(
            dep(&s, 3),
            (Some(DependencyState::Satisfied), JobState::Pending, None)
        );
        assert_eq!(
            dep(&s, 4),
            (
                Some(DependencyState::Never),
                JobState::Pending,
                Some("never satisfied: job 2 ended cancelled".into())
            )
        );
        assert_eq!(s.job(4).unwrap().pend_code, Some(PendCode::Dependency));
    }

    #[test]
    fn afternotok_is_never_met_by_a_job_cancelled_before_it_ran() {
        let mut s = with_running(1);
        submit(&mut s, 10, spec(&["sleep", "1"])); // 2, pending (w1 is not full, but unplaced)
        submit(&mut s, 11, after("afternotok:2", false));
        submit(&mut s, 12, after("afternotok:1", false));
        control(&mut s, 13, 2, JobAction::Kill);
        assert_eq!(
            dep(&s, 3),
            (
                Some(DependencyState::Never),
                JobState::Pending,
                Some("never satisfied: job 2 ended cancelled before it ran".into())
            )
        );
        finish(&mut s, 14, 1, 1, JobEnd::Signal(9));
        assert_eq!(dep(&s, 4).0, Some(DependencyState::Satisfied));
    }

    #[test]
    fn after_and_any_of_are_met_as_soon_as_they_can_be() {
        let mut s = super::super::State::default();
        s.apply(0, super::super::testing::join_cmd(1, "w1", vec![]));
        submit(&mut s, 10, spec(&["true"])); // 1
        submit(&mut s, 11, spec(&["true"])); // 2
        submit(&mut s, 12, after("after:1", false)); // 3
        submit(&mut s, 13, after("afterok:1?afterok:2", false)); // 4
        assert_eq!(s.apply(3, dispatch_cmd(14, 1, "w1")), Outcome::Done);
        assert_eq!(dep(&s, 3).0, Some(DependencyState::Satisfied));
        assert_eq!(dep(&s, 4).0, Some(DependencyState::Waiting));
        finish(&mut s, 15, 1, 1, JobEnd::Exit(1));
        assert_eq!(dep(&s, 4).0, Some(DependencyState::Waiting));
        s.apply(3, dispatch_cmd(16, 2, "w1"));
        finish(&mut s, 17, 2, 1, JobEnd::Exit(0));
        assert_eq!(dep(&s, 4).0, Some(DependencyState::Satisfied));
    }

    #[test]
    fn singleton_jobs_of_one_name_run_one_at_a_time() {
        let mut s = super::super::State::default();
        s.apply(0, super::super::testing::join_cmd(1, "w1", vec![]));
        let one = |name: &str| JobSpec {
            name: name.into(),
            ..after("singleton", false)
        };
        submit(&mut s, 10, one("nightly")); // 1
        submit(&mut s, 11, one("nightly")); // 2
        submit(&mut s, 12, one("other")); // 3
        assert_eq!(dep(&s, 1).0, Some(DependencyState::Satisfied));
        assert_eq!(dep(&s, 2).0, Some(DependencyState::Satisfied));
        // Once one of a name is placed, the next waits (and is refused if placed anyway).
        assert_eq!(s.apply(3, dispatch_cmd(14, 1, "w1")), Outcome::Done);
        assert_eq!(dep(&s, 2).0, Some(DependencyState::Waiting));
        rejected_with(
            &s.apply(3, dispatch_cmd(15, 2, "w1")),
            Status::Conflict,
            "waiting",
        );
        assert_eq!(s.apply(3, dispatch_cmd(16, 3, "w1")), Outcome::Done);
        finish(&mut s, 17, 1, 1, JobEnd::Exit(0));
        assert_eq!(dep(&s, 2).0, Some(DependencyState::Satisfied));
        assert_eq!(s.apply(3, dispatch_cmd(18, 2, "w1")), Outcome::Done);
    }

    #[test]
    fn a_dependency_names_only_jobs_that_exist() {
        let mut s = with_running(1);
        rejected_with(
            &submit(&mut s, 10, after("afterok:1:7", false)),
            Status::Invalid,
            "dependency afterok:7: job 7 does not exist",
        );
        rejected_with(
            &submit(&mut s, 11, after("afterok:1_3", false)),
            Status::Invalid,
            "job 1 is no array",
        );
        rejected_with(
            &submit(&mut s, 12, after("aftercorr:1", false)),
            Status::Invalid,
            "aftercorr",
        );
        // The next id is not a job yet: no job waits for itself or a later one.
        rejected_with(
            &submit(&mut s, 13, after("afterok:2", false)),
            Status::Invalid,
            "job 2 does not exist",
        );
        let array = JobSpec {
            array: Some("0-3".parse().unwrap()),
            ..crate::state::testing::spec(&["true"])
        };
        let Outcome::Submitted(a) = submit(&mut s, 94, array) else {
            panic!("the array was refused");
        };
        rejected_with(
            &submit(&mut s, 95, after(&format!("afterok:{a}_2"), false)),
            Status::Invalid,
            &format!("depend on the whole array ({a})"),
        );
    }

    /// A cluster of the current version on host w1 (64 cpus) with array 1 of `tasks`.
    fn with_array(tasks: &str) -> State {
        let mut s = State {
            active_version: crate::store::STORE_FORMAT,
            ..State::default()
        };
        s.apply(
            0,
            super::super::testing::join_with(1, "w1", 64, 1 << 20, vec![]),
        );
        let array = JobSpec {
            array: Some(tasks.parse().unwrap()),
            ..spec(&["true"])
        };
        assert_eq!(submit(&mut s, 2, array), Outcome::Submitted(1));
        s
    }

    fn task_of(s: &State, array: JobId, index: u32) -> Job {
        let id = s.index.task_job(array, index).unwrap();
        s.job(id).unwrap().clone()
    }

    fn array_after(tasks: &str, dependency: &str, kill: bool) -> JobSpec {
        JobSpec {
            array: Some(tasks.parse().unwrap()),
            ..after(dependency, kill)
        }
    }

    /// The task `index` of `array`, split off and placed by a dispatch of the array.
    fn place_next(s: &mut State, t: u128, array: JobId) -> (JobId, u32) {
        let from = s.next_job_id;
        assert_eq!(s.apply(3, dispatch_cmd(t, array, "w1")), Outcome::Done);
        // Tasks that can never start may be split off beside it.
        let id = (from..s.next_job_id)
            .find(|id| s.job(*id).unwrap().state == JobState::Dispatched)
            .unwrap();
        (id, s.job(id).unwrap().array_task.unwrap().index)
    }

    /// From version 12 a job may be dispatched ahead of free room and wait on its host, so
    /// `after:` waits for its start report: on a plain job, a task named, and a whole array
    /// alike. Before, its dispatch counted as its start (and logs of those versions replay
    /// so).
    #[test]
    fn after_waits_for_a_reported_start_from_version_12() {
        use DependencyState::{Satisfied, Waiting};
        let started = |s: &mut State, t: u128, id: JobId| {
            let report = Command::JobStarted {
                token: RequestToken(t),
                id,
                attempt: 1,
                host: "w1".into(),
            };
            assert_eq!(s.apply(4, report), Outcome::Done);
        };
        for version in [11, xce_client::version::DISPATCH_AHEAD] {
            let mut s = with_array("0-1");
            s.active_version = version;
            submit(&mut s, 3, spec(&["true"])); // 2
            submit(&mut s, 4, after("after:2", false)); // 3
            submit(&mut s, 5, after("after:1", false)); // 4
            submit(&mut s, 6, after("after:1_0", false)); // 5
            assert_eq!(s.apply(3, dispatch_cmd(7, 2, "w1")), Outcome::Done);
            let (t0, i0) = place_next(&mut s, 8, 1);
            let (t1, _) = place_next(&mut s, 9, 1);
            assert_eq!(i0, 0);
            let states = |s: &State| [3, 4, 5].map(|id| dep(s, id).0);
            if version < xce_client::version::DISPATCH_AHEAD {
                assert_eq!(states(&s), [Some(Satisfied); 3], "version {version}");
                continue;
            }
            assert_eq!(states(&s), [Some(Waiting); 3]);
            started(&mut s, 10, 2);
            started(&mut s, 11, t0);
            assert_eq!(
                states(&s),
                [Some(Satisfied), Some(Waiting), Some(Satisfied)],
                "the whole array waits for task 1"
            );
            started(&mut s, 12, t1);
            assert_eq!(states(&s), [Some(Satisfied); 3]);
        }
    }

    /// A job killed after its dispatch and before its start (sent ahead and waiting on its
    /// host, or just dispatched) never ran from version 12: `afternotok` on it is never met,
    /// as for a job cancelled while pending. Before, every dispatch counted as a run.
    #[test]
    fn afternotok_is_never_met_by_a_job_killed_before_its_start_from_version_12() {
        for version in [11, xce_client::version::DISPATCH_AHEAD] {
            let mut s = with_array("0");
            s.active_version = version;
            submit(&mut s, 3, spec(&["true"])); // 2
            submit(&mut s, 4, after("afternotok:2", false)); // 3
            submit(&mut s, 5, after("afternotok:1", false)); // 4
            assert_eq!(s.apply(3, dispatch_cmd(6, 2, "w1")), Outcome::Done);
            let (task, _) = place_next(&mut s, 7, 1);
            for (t, id) in [(8, 2), (10, task)] {
                control(&mut s, t, id, JobAction::Kill);
                let before = JobEnd::Failed(xce_client::types::KILLED_BEFORE_START.into());
                finish(&mut s, t + 1, id, 1, before);
                let job = s.job(id).unwrap();
                assert_eq!(job.result, Some(JobResult::Cancelled), "{job:?}");
            }
            let verdicts = [3, 4].map(|id| dep(&s, id));
            if version < xce_client::version::DISPATCH_AHEAD {
                assert_eq!(verdicts.map(|v| v.0), [Some(DependencyState::Satisfied); 2]);
                continue;
            }
            assert_eq!(
                verdicts.map(|v| v.2),
                [
                    Some("never satisfied: job 2 ended cancelled before it ran".into()),
                    Some("never satisfied: job 1_0 ended cancelled before it ran".into()),
                ]
            );
            let array = s.job(1).unwrap().array.clone().unwrap();
            assert_eq!((array.failed, array.unrun), (0, 1));
        }
    }

    /// An attempt that ends before its start was reported ran, unless its end says it was
    /// killed before it started: a command that could not start failed (and meets
    /// `afternotok`, and fails its array), as does one whose start report a worker lost.
    #[test]
    fn a_job_that_ends_before_its_start_report_ran_unless_killed_before_it_started() {
        let mut s = with_array("0");
        submit(&mut s, 3, spec(&["/nonexistent"])); // 2
        submit(&mut s, 4, after("afternotok:2", false)); // 3
        submit(&mut s, 5, after("afternotok:1", false)); // 4
        assert_eq!(s.apply(3, dispatch_cmd(6, 2, "w1")), Outcome::Done);
        let (task, _) = place_next(&mut s, 7, 1);
        for (t, id) in [(8, 2), (9, task)] {
            let cannot = JobEnd::Failed("cannot start /nonexistent: no such file".into());
            finish(&mut s, t, id, 1, cannot);
            let job = s.job(id).unwrap();
            assert_eq!(
                (job.result, job.runs, job.start_time_ms.is_some()),
                (Some(JobResult::Failed), 1, true),
                "{job:?}"
            );
        }
        assert_eq!(
            [3, 4].map(|id| dep(&s, id).0),
            [Some(DependencyState::Satisfied); 2]
        );
        let array = s.job(1).unwrap();
        assert_eq!(array.result, Some(JobResult::Failed), "{array:?}");
        // Killed before it started: no run, and no start time.
        let Outcome::Submitted(id) = submit(&mut s, 10, spec(&["true"])) else {
            panic!("not submitted");
        };
        assert_eq!(s.apply(3, dispatch_cmd(11, id, "w1")), Outcome::Done);
        control(&mut s, 12, id, JobAction::Kill);
        let before = JobEnd::Failed(xce_client::types::KILLED_BEFORE_START.into());
        finish(&mut s, 13, id, 1, before);
        let job = s.job(id).unwrap();
        assert_eq!((job.runs, job.start_time_ms), (0, None), "{job:?}");
    }

    #[test]
    fn a_dependency_on_some_tasks_waits_for_those_alone() {
        let mut s = with_array("0-3");
        assert_eq!(
            submit(&mut s, 10, after("afterok:1_1", false)),
            Outcome::Submitted(2)
        );
        submit(&mut s, 11, after("afterany:1_[0-1]", false)); // 3
        let (t0, _) = place_next(&mut s, 12, 1);
        let (t1, i1) = place_next(&mut s, 13, 1);
        assert_eq!(i1, 1);
        finish(&mut s, 14, t1, 1, JobEnd::Exit(0));
        // 1_1 completed while 1_2 and 1_3 still wait: 2 goes; 3 waits for 1_0.
        assert_eq!(dep(&s, 2).0, Some(DependencyState::Satisfied));
        assert_eq!(dep(&s, 3).0, Some(DependencyState::Waiting));
        finish(&mut s, 15, t0, 1, JobEnd::Exit(4));
        assert_eq!(dep(&s, 3).0, Some(DependencyState::Satisfied));
        // afterok on a task that failed: never, naming the task.
        submit(&mut s, 16, after("afterok:1_[0-1]", false)); // 6
        assert_eq!(
            dep(&s, 6),
            (
                Some(DependencyState::Never),
                JobState::Pending,
                Some("never satisfied: job 1_0 ended failed".into())
            )
        );
        // A task killed while it waits in its array ended unrun.
        control(&mut s, 17, 1, JobAction::Kill);
        submit(&mut s, 18, after("afternotok:1_3", false)); // 7
        assert_eq!(
            dep(&s, 7).2.as_deref(),
            Some("never satisfied: job 1_3 ended cancelled before it ran")
        );
        rejected_with(
            &submit(&mut s, 19, after("afterok:1_[2-4]", false)),
            Status::Invalid,
            "dependency afterok:1_[2-4]: array 1 has no task 4",
        );
    }

    #[test]
    fn aftercorr_starts_each_task_after_its_pair_completed() {
        let mut s = with_array("0-3");
        assert_eq!(
            submit(&mut s, 10, array_after("0-3", "aftercorr:1", false)),
            Outcome::Submitted(2)
        );
        let waiting = dep(&s, 2);
        assert_eq!(waiting.0, Some(DependencyState::Waiting));
        rejected_with(
            &s.apply(3, dispatch_cmd(11, 2, "w1")),
            Status::Conflict,
            "waiting for its dependency",
        );
        let a: Vec<(JobId, u32)> = (0..3).map(|k| place_next(&mut s, 20 + k, 1)).collect();
        // 1_1 completes first: 2_1 may start, though 1_0 still runs.
        finish(&mut s, 30, a[1].0, 1, JobEnd::Exit(0));
        assert_eq!(dep(&s, 2).0, Some(DependencyState::Satisfied));
        let (b1, i) = place_next(&mut s, 31, 2);
        assert_eq!(i, 1);
        // Nothing else of 2 may start now.
        assert_eq!(dep(&s, 2).0, Some(DependencyState::Waiting));
        finish(&mut s, 32, b1, 1, JobEnd::Exit(0));
        // 1_0 completes, 1_2 fails: 2_0 goes, 2_2 never will (kept pending, as Slurm keeps it).
        finish(&mut s, 33, a[0].0, 1, JobEnd::Exit(0));
        finish(&mut s, 34, a[2].0, 1, JobEnd::Exit(1));
        let (_, i) = place_next(&mut s, 35, 2);
        assert_eq!(i, 0);
        let never = task_of(&s, 2, 2);
        assert_eq!(
            (
                never.state,
                never.dependency_state,
                never.pend_reason.as_deref()
            ),
            (
                JobState::Pending,
                Some(DependencyState::Never),
                Some("never satisfied: job 1_2 ended failed")
            )
        );
        rejected_with(
            &s.apply(3, dispatch_cmd(36, never.id, "w1")),
            Status::Conflict,
            "never satisfied",
        );
        // 2_3 waits for 1_3.
        assert_eq!(dep(&s, 2).0, Some(DependencyState::Waiting));
        let (a3, _) = place_next(&mut s, 37, 1);
        finish(&mut s, 38, a3, 1, JobEnd::Exit(0));
        let (_, i) = place_next(&mut s, 39, 2);
        assert_eq!(i, 3);
        assert!(s.job(2).unwrap().array.as_ref().unwrap().pending.is_empty());
    }

    #[test]
    fn aftercorr_with_kill_on_invalid_dep_cancels_the_tasks_that_never_can_start() {
        let mut s = with_array("0-2");
        let (a0, _) = place_next(&mut s, 5, 1);
        finish(&mut s, 6, a0, 1, JobEnd::Exit(3));
        // The pair ended before this array came: its task 0 ends cancelled at once.
        submit(&mut s, 10, array_after("0-2", "aftercorr:1", true)); // 3
        let cancelled = task_of(&s, 3, 0);
        assert_eq!(
            (cancelled.result, cancelled.reason.as_deref()),
            (
                Some(JobResult::Cancelled),
                Some("never satisfied: job 1_0 ended failed")
            )
        );
        // Its pair killed while waiting: 3_2 cancelled too; 3_1 follows 1_1.
        s.apply(
            3,
            Command::ControlTasks {
                token: RequestToken(11),
                array: 1,
                tasks: Some("2".parse().unwrap()),
                by: None,
                actor: None,
                op: xce_client::types::TaskOp::Control {
                    action: JobAction::Kill,
                },
            },
        );
        let p = s.job(3).unwrap().array.clone().unwrap();
        assert_eq!((p.pending.len(), p.unrun), (1, 2));
        let (a1, _) = place_next(&mut s, 12, 1);
        finish(&mut s, 13, a1, 1, JobEnd::Exit(0));
        let (b1, i) = place_next(&mut s, 14, 3);
        assert_eq!(i, 1);
        finish(&mut s, 15, b1, 1, JobEnd::Exit(0));
        let b = s.job(3).unwrap();
        assert_eq!(
            (b.state, b.result),
            (JobState::Exited, Some(JobResult::Cancelled))
        );
    }

    #[test]
    fn aftercorr_pairs_two_arrays_whose_tasks_match() {
        let mut s = with_array("0-3");
        for (t, spec, why) in [
            (10, after("aftercorr:1", false), "this job is no array"),
            (
                11,
                array_after("0-4", "aftercorr:1", false),
                "task 4 of this array has no task 1_4",
            ),
            (
                12,
                array_after("0-3", "aftercorr:1?afterok:1", false),
                "join it with ,",
            ),
        ] {
            rejected_with(&submit(&mut s, t, spec), Status::Invalid, why);
        }
        submit(&mut s, 13, spec(&["true"])); // 2
        rejected_with(
            &submit(&mut s, 14, array_after("0", "aftercorr:2", false)),
            Status::Invalid,
            "job 2 is no array",
        );
        s.active_version = 10;
        rejected_with(
            &submit(&mut s, 15, array_after("0-3", "aftercorr:1", false)),
            Status::Invalid,
            "needs cluster version 11",
        );
        rejected_with(
            &submit(&mut s, 16, after("afterok:1_2", false)),
            Status::Invalid,
            "needs cluster version 11",
        );
    }

    #[test]
    fn a_scheduler_s_reason_does_not_hide_a_waiting_dependency() {
        let mut s = with_running(1);
        submit(&mut s, 10, after("afterok:1", false));
        let lease = Command::AcquireScheduler {
            token: xce_client::types::RequestToken(11),
            name: "s1".into(),
            instance: 1,
            ttl_ms: 60_000,
        };
        s.apply(3, lease);
        let epoch = s.scheduler_lease(3).unwrap().epoch;
        let reasons = Command::SetPendReasons {
            token: xce_client::types::RequestToken(12),
            epoch,
            reasons: vec![(
                2,
                xce_client::types::PendReason::new(PendCode::Resources, "no room"),
            )],
        };
        s.apply(3, reasons);
        assert_eq!(s.job(2).unwrap().pend_code, Some(PendCode::Dependency));
    }

    fn change(t: u128, id: JobId, changes: xce_client::types::JobChanges) -> Command {
        Command::UpdateJob {
            token: xce_client::types::RequestToken(t),
            id,
            by: None,
            changes,
        }
    }

    /// Held and released while it waits, a dependent keeps its reason, and is released (an
    /// event the scheduler sees) when its parent completes. Before, the release cleared the
    /// reason, and the release of the dependency changed nothing an event carries.
    #[test]
    fn a_dependent_held_and_released_while_it_waits_is_released_by_its_parent() {
        let mut s = with_running(1);
        submit(&mut s, 10, after("afterok:1", false));
        for (t, hold) in [(11, true), (12, false)] {
            let hold = xce_client::types::JobChanges {
                hold: Some(hold),
                ..Default::default()
            };
            assert_eq!(s.apply(3, change(t, 2, hold)), Outcome::Done);
        }
        assert_eq!(s.job(2).unwrap().pend_code, Some(PendCode::Dependency));
        let (_, events) = s.apply_emitting(
            9,
            Command::JobFinished {
                token: xce_client::types::RequestToken(13),
                id: 1,
                attempt: 1,
                host: "w1".into(),
                end: JobEnd::Exit(0),
                usage: None,
            },
        );
        assert_eq!(dep(&s, 2).0, Some(DependencyState::Satisfied));
        assert!(
            events
                .iter()
                .any(|e| matches!(e, super::super::Event::Job { id: 2, .. })),
            "{events:?}"
        );
    }

    /// A waiting `singleton` renamed to a name no job of its user runs under may go; and
    /// `afterok:1?singleton` goes once job 1 completed, whatever of its name runs.
    #[test]
    fn a_singleton_is_judged_again_when_renamed() {
        let mut s = with_running(1);
        let named = |name: &str, dependency: &str| JobSpec {
            name: name.into(),
            ..after(dependency, false)
        };
        submit(&mut s, 10, named("a", "singleton")); // 2, runs
        assert_eq!(s.apply(3, dispatch_cmd(11, 2, "w1")), Outcome::Done);
        submit(&mut s, 12, named("a", "singleton")); // 3 waits for 2
        assert_eq!(dep(&s, 3).0, Some(DependencyState::Waiting));
        let rename = xce_client::types::JobChanges {
            name: Some("b".into()),
            ..Default::default()
        };
        assert_eq!(s.apply(3, change(13, 3, rename)), Outcome::Done);
        assert_eq!(dep(&s, 3).0, Some(DependencyState::Satisfied));
        assert_eq!(s.apply(3, dispatch_cmd(14, 3, "w1")), Outcome::Done);
        submit(&mut s, 15, named("a", "afterok:1?singleton")); // 4
        finish(&mut s, 16, 1, 1, JobEnd::Exit(0));
        assert_eq!(dep(&s, 4).0, Some(DependencyState::Satisfied));
        assert_eq!(s.apply(3, dispatch_cmd(17, 4, "w1")), Outcome::Done);
    }

    /// A parent that ran, was requeued, and was cancelled while pending again did run: its
    /// `afternotok` dependent may go.
    #[test]
    fn a_parent_requeued_then_cancelled_counts_as_run() {
        let mut s = with_running(1);
        submit(&mut s, 10, after("afternotok:1", false));
        control(&mut s, 11, 1, JobAction::Requeue);
        finish(&mut s, 12, 1, 1, JobEnd::Signal(9)); // the requeue's kill ends attempt 1
        assert_eq!(s.job(1).unwrap().state, JobState::Pending);
        control(&mut s, 13, 1, JobAction::Kill);
        assert_eq!(dep(&s, 2).0, Some(DependencyState::Satisfied));
    }

    #[test]
    fn a_dependency_of_too_many_conditions_is_refused() {
        let mut s = with_running(1);
        let many = vec!["afterok:1"; super::super::validate::MAX_DEPENDENCY_TERMS + 1].join(",");
        rejected_with(
            &submit(&mut s, 10, after(&many, false)),
            Status::Invalid,
            "dependency: 1025 conditions, at most 1024",
        );
    }

    #[test]
    fn a_restored_state_knows_who_waits_for_whom() {
        let mut s = with_running(1);
        submit(&mut s, 10, after("afterok:1", false));
        let mut back = State::try_from_record(s.clone().into_record()).unwrap();
        assert_eq!(back, s);
        finish(&mut back, 12, 1, 1, JobEnd::Exit(0));
        assert_eq!(dep(&back, 2).0, Some(DependencyState::Satisfied));
    }
}
