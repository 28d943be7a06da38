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

use xce_client::array::JobRef;
use xce_client::dependency::{self, Expr, Parents, Progress, Term, Verdict};
use xce_client::types::{DependencyState, Job, JobId, JobSpec, JobState, PendCode};
use xce_proto::Status;

use super::{Outcome, State};

/// What a waiting job's `pend_reason` says.
fn waiting_reason(expr: &Expr) -> String {
    format!("waiting for its dependency {expr}")
}

/// The state as one job's dependency sees it.
struct Lookup<'a> {
    state: &'a State,
    job: &'a Job,
}

impl Parents for Lookup<'_> {
    fn progress(&self, of: &JobRef) -> Option<Progress> {
        // Arrays are not in the state yet: a name of tasks names none (refused at submit).
        let parent = self.state.jobs.get(&of.id)?;
        // An array: every one of its tasks.
        if let Some(p) = &parent.array {
            return Some(Progress {
                not_started: p.not_started(),
                running: p.running,
                completed: p.completed,
                failed: p.failed,
                unrun: p.unrun,
                ..Progress::default()
            });
        }
        Some(Progress::of_job(parent))
    }

    fn singleton_busy(&self) -> bool {
        let spec = &self.job.spec;
        let others_placed = self.state.index.placed_named(&spec.user, &spec.name);
        let me = u32::from(super::is_placed(self.job.state));
        others_placed > me
    }

    fn own_task(&self) -> Option<u32> {
        None
    }
}

impl State {
    /// Refuses a dependency that names what does not exist: a job never submitted (which
    /// also makes a cycle impossible: a job may only wait for older ones), tasks of a job
    /// that is no array, or `aftercorr` from a job that is no array.
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
        for term in expr.terms() {
            let Term::On(kind, job) = term else { continue };
            if *kind == dependency::Kind::AfterCorr {
                return invalid(
                    term,
                    "aftercorr (each task after the same task of another array) is not \
                     supported yet"
                        .into(),
                );
            }
            let Some(parent) = self.jobs.get(&job.id) else {
                return invalid(term, format!("job {} does not exist", job.id));
            };
            match (&job.tasks, parent.array.is_some()) {
                (Some(_), false) => {
                    return invalid(term, format!("job {} is no array: it has no tasks", job.id))
                }
                (Some(_), true) => {
                    return invalid(
                        term,
                        format!(
                            "a dependency on some tasks of an array is not supported yet: \
                             depend on the whole array ({})",
                            job.id
                        ),
                    )
                }
                (None, _) => {}
            }
        }
        Ok(())
    }

    /// A new job's first verdict, set before it is inserted: a job whose dependency is met
    /// already is placed like any other.
    pub(super) fn judge_new(&self, job: &mut Job, at_ms: u64) {
        let Some(expr) = job.spec.dependency.clone() else {
            return;
        };
        let verdict = dependency::verdict(&expr, &Lookup { state: self, job });
        apply_verdict(job, &expr, verdict, at_ms);
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
        let verdict = dependency::verdict(&expr, &Lookup { state: self, job });
        let now = state_of(&verdict);
        if job.dependency_state == Some(now) {
            return;
        }
        self.update_job(id, |job| apply_verdict(job, &expr, verdict, at_ms));
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
        match dependency::verdict(expr, &Lookup { state: self, job }) {
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
    use xce_client::types::{JobAction, JobEnd, JobResult};

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
