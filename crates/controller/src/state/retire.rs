//! Retirement on the job-change path: a job that ended leaves the replicated state for every
//! controller's history store (`crate::history`), so the Raft state and its snapshots hold
//! only live jobs (issue 35; `docs/design/accounting.md`, "History").
//!
//! The primary picks jobs ended long enough ago ([`State::retire_candidates`]) and proposes
//! `RetireJobs`; the apply checks each again, since a job may have gained a waiting dependent
//! since. Each retired job gets the next retirement sequence number (`retired_seq`), so every
//! controller numbers every retired job alike and can tell, from the state alone, how many
//! its history should hold. A job stays while a pending job waits on it (its verdict is read
//! from its record), and an array retires with all its tasks, once every one has ended.

use std::sync::Arc;

use xce_client::types::{Job, JobId};
use xce_proto::Status;

use super::{Event, Outcome, State};

/// The most jobs one `RetireJobs` names (an array's tasks go with it beyond this).
pub const MAX_RETIRE_BATCH: usize = 1_000;

impl State {
    /// How many jobs have retired since the cluster began: the sequence number of the last.
    pub fn retired_seq(&self) -> u64 {
        self.retired_seq
    }

    /// Jobs that may retire now and ended at or before `ended_by_ms`, in id order, retiring
    /// at most `max` records with their arrays' tasks (an array over that goes alone): what
    /// the primary proposes.
    pub fn retire_candidates(&self, ended_by_ms: u64, max: usize) -> Vec<JobId> {
        use xce_client::types::JobState;
        let mut ready: Vec<JobId> = [JobState::Done, JobState::Exited]
            .into_iter()
            .flat_map(|s| self.index.in_state(s).iter().copied())
            .filter(|id| {
                self.jobs.get(id).is_some_and(|j| {
                    j.end_time_ms.is_some_and(|end| end <= ended_by_ms) && self.may_retire(j)
                })
            })
            .collect();
        ready.sort_unstable();
        let mut out = Vec::new();
        let mut records = 0;
        for id in ready {
            let weight = 1 + self.index.tasks_of(id).len();
            if !out.is_empty() && records + weight > max {
                break;
            }
            out.push(id);
            records += weight;
        }
        out
    }

    /// Whether a job may leave the state now: it ended, no unended job's dependency names
    /// it (one met already may be judged again: an `aftercorr` array task by task, a
    /// `singleton` term), and it is no task (a task goes with its array) nor an array with a
    /// task still live.
    fn may_retire(&self, job: &Job) -> bool {
        job.state.is_final()
            && job.array_task.is_none()
            && !self.index.is_named(job.id)
            && self
                .index
                .tasks_of(job.id)
                .iter()
                .all(|t| self.jobs.get(t).is_some_and(|t| t.state.is_final()))
    }

    /// Applies `RetireJobs`: each job that may retire (and its array's tasks) leaves the
    /// state with the next sequence numbers; one that may not stays, silently (it was judged
    /// on an older state, and the primary proposes it again). Needs version 13.
    pub(super) fn retire_jobs(&mut self, ids: Vec<JobId>) -> Outcome {
        if self.active_version < xce_client::version::ACCOUNTING {
            return Outcome::rejected(
                Status::Invalid,
                format!(
                    "retiring jobs to history needs cluster version {}",
                    xce_client::version::ACCOUNTING
                ),
            );
        }
        for id in ids {
            let Some(job) = self.jobs.get(&id) else {
                continue;
            };
            if !self.may_retire(job) {
                continue;
            }
            let tasks = self.index.tasks_of(id);
            self.retire_one(id);
            for task in tasks {
                self.retire_one(task);
            }
        }
        Outcome::Done
    }

    /// Takes one job out of the state and its indexes, and emits it with its sequence
    /// number and its script's bytes for the history store.
    fn retire_one(&mut self, id: JobId) {
        let Some(job) = self.jobs.remove(&id) else {
            return;
        };
        self.index.remove(id, &super::index::Slot::of(&job));
        self.retired_seq += 1;
        let script = job.spec.script.and_then(|s| self.scripts.get(&s).cloned());
        self.emitted.push(Event::Retired {
            seq: self.retired_seq,
            job: Arc::clone(&job),
            script,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::Command;
    use super::*;
    use xce_client::types::{JobEnd, JobSpec, JobState};

    /// `n` jobs running on `w1`, at version 13.
    fn running(n: u64) -> State {
        let mut s = running_on_w1(n);
        s.apply(
            3,
            Command::RaiseVersion {
                to: xce_client::version::ACCOUNTING,
            },
        );
        s
    }

    fn retired(events: &[Event]) -> Vec<(u64, JobId)> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::Retired { seq, job, .. } => Some((*seq, job.id)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn an_ended_job_retires_once_with_the_next_sequence_number() {
        let mut s = running(2);
        finish(&mut s, 50, 1, 1, JobEnd::Exit(0));
        assert_eq!(s.retire_candidates(u64::MAX, 10), vec![1], "2 still runs");
        assert_eq!(
            s.retire_candidates(8, 10),
            Vec::<JobId>::new(),
            "1 ended at 9"
        );
        let (out, events) = s.apply_emitting(50, Command::RetireJobs { ids: vec![1, 2] });
        assert_eq!(out, Outcome::Done);
        assert_eq!(retired(&events), vec![(1, 1)]);
        assert!(s.job(1).is_none());
        assert_eq!(s.job(2).map(|j| j.state), Some(JobState::Running));
        // Again: nothing more retires, and the count stands.
        let (_, events) = s.apply_emitting(51, Command::RetireJobs { ids: vec![1] });
        assert!(retired(&events).is_empty());
        assert_eq!(s.retired_seq(), 1);
        assert_eq!(s.retire_candidates(u64::MAX, 10), Vec::<JobId>::new());
    }

    #[test]
    fn a_job_stays_while_a_pending_job_waits_on_it() {
        let mut s = running(2);
        let child = JobSpec {
            dependency: Some("afterok:1,afterok:2".parse().expect("dependency")),
            ..spec(&["true"])
        };
        assert_eq!(submit(&mut s, 60, child), Outcome::Submitted(3));
        finish(&mut s, 61, 1, 1, JobEnd::Exit(0));
        assert_eq!(s.retire_candidates(u64::MAX, 10), Vec::<JobId>::new());
        s.apply(60, Command::RetireJobs { ids: vec![1] });
        assert!(s.job(1).is_some(), "3 still waits on 1");
        finish(&mut s, 62, 2, 1, JobEnd::Exit(0));
        assert_eq!(s.job(3).map(|j| j.state), Some(JobState::Pending));
        assert_eq!(
            s.retire_candidates(u64::MAX, 10),
            Vec::<JobId>::new(),
            "3 still names them"
        );
        // Once 3 has run and ended, all three may go.
        s.apply(63, dispatch_cmd(63, 3, "w1"));
        finish(&mut s, 64, 3, 1, JobEnd::Exit(0));
        assert_eq!(s.retire_candidates(u64::MAX, 10), vec![1, 2, 3]);
    }

    #[test]
    fn a_job_stays_while_an_unended_job_names_it_even_once_met() {
        let mut s = running(1);
        let child = JobSpec {
            dependency: Some("afterok:1,singleton".parse().expect("dependency")),
            ..spec(&["true"])
        };
        assert_eq!(submit(&mut s, 60, child), Outcome::Submitted(2));
        finish(&mut s, 61, 1, 1, JobEnd::Exit(0));
        assert_eq!(
            s.job(2).and_then(|j| j.dependency_state),
            Some(xce_client::types::DependencyState::Satisfied)
        );
        assert_eq!(s.retire_candidates(u64::MAX, 10), Vec::<JobId>::new());
        s.apply(62, Command::RetireJobs { ids: vec![1] });
        assert!(s.job(1).is_some(), "2 pends, and its dependency names 1");
    }

    #[test]
    fn retiring_needs_version_13() {
        let mut s = running_on_w1(1);
        finish(&mut s, 50, 1, 1, JobEnd::Exit(0));
        let out = s.apply(50, Command::RetireJobs { ids: vec![1] });
        rejected_with(&out, Status::Invalid, "version 13");
        assert!(s.job(1).is_some());
    }
}
