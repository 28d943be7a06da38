//! Starts that arrive while this worker's join is unanswered wait for its answer.
//!
//! A join carries the attempts the worker held when it was sent, and the primary's resync
//! treats a dispatched job missing from that list as never received: it sends it again as a
//! new attempt, which fences the old one. A start that crossed the join on the wire (the
//! primary pushed it after the worker took its list) is exactly such a job, yet it is here:
//! run at once, it would run, be fenced by the new attempt, and run again. So a start that
//! arrives between a join's list and its answer is parked; once the answer is in, the primary
//! is asked whether the attempt is still the one it wants run here, and only then is it run.
//! A join that fails leaves the window open: its resync may have been applied all the same.

use std::collections::HashMap;

use xce_client::types::{Job, JobId, JobState};

use crate::shim::FencedCopy;

/// The parked starts, and whether a join is unanswered.
#[derive(Debug, Default)]
pub struct JoinWindow {
    open: bool,
    parked: HashMap<JobId, Parked>,
    /// The number of the agent capability the last answered join passed
    /// ([`AgentHandle::capability`]): starts through an older one come over a connection this
    /// worker has left.
    ///
    /// [`AgentHandle::capability`]: xce_client::agent::AgentHandle::capability
    answered: u64,
}

/// A start that waits, with the older copy it fences (its shim already told to stop it): the
/// attempt, once run, still starts its job only after that copy is gone.
#[derive(Debug)]
pub struct Parked {
    pub job: Job,
    pub attempt: u32,
    pub fenced: Option<FencedCopy>,
    /// The bytes of the job's script, for a job with one.
    pub script: Option<Vec<u8>>,
}

impl JoinWindow {
    /// A join's list of held attempts is being taken: what arrives from now on waits.
    pub fn open(&mut self) {
        self.open = true;
    }

    /// A join was answered, carrying agent capability `generation`: what waits is returned,
    /// to be checked against the primary (those of an earlier, failed join too). It stays
    /// parked until [`JoinWindow::take`].
    pub fn close(&mut self, generation: u64) -> Vec<(JobId, u32)> {
        self.open = false;
        self.answered = self.answered.max(generation);
        let mut due: Vec<(JobId, u32)> =
            self.parked.iter().map(|(id, p)| (*id, p.attempt)).collect();
        due.sort_unstable();
        due
    }

    /// Parks a start if a join is unanswered; otherwise hands it back to be run.
    pub fn park(&mut self, start: Parked) -> Option<Parked> {
        if !self.open {
            return Some(start);
        }
        self.parked.insert(start.job.id, start);
        None
    }

    /// Parks a start whether or not a join is unanswered: it runs only once the primary,
    /// asked, still wants it here.
    pub fn hold(&mut self, start: Parked) {
        self.parked.insert(start.job.id, start);
    }

    /// Whether a start through agent capability `generation` came over a connection this
    /// worker has left: one passed at a join older than the last answered one. On the
    /// connection of that join, every push through an older capability arrives before its
    /// answer (the primary replaces the capability before it answers), so while the window
    /// is open it is parked anyway.
    pub fn from_a_left_connection(&self, generation: u64) -> bool {
        generation < self.answered
    }

    /// Whether a join is unanswered (its answer has every parked start checked).
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Whether this attempt is parked.
    pub fn holds(&self, id: JobId, attempt: u32) -> bool {
        self.parked.get(&id).is_some_and(|p| p.attempt == attempt)
    }

    /// Takes a parked attempt out (to run it or let it go); `None` if it is not parked (a
    /// newer attempt or a kill took it already).
    pub fn take(&mut self, id: JobId, attempt: u32) -> Option<Parked> {
        if !self.holds(id, attempt) {
            return None;
        }
        self.parked.remove(&id)
    }

    /// Lets go of whatever attempt of `id` is parked (a newer one arrived), returning the
    /// older copy it was to wait for: the newer attempt waits for it instead.
    pub fn forget(&mut self, id: JobId) -> Option<FencedCopy> {
        self.parked.remove(&id).and_then(|p| p.fenced)
    }

    /// Lets go of every parked start (the worker stops: they never ran, and the primary
    /// sends them again once it rejoins). Returns them.
    pub fn clear(&mut self) -> Vec<(JobId, u32)> {
        let all = self.parked.drain().map(|(id, p)| (id, p.attempt)).collect();
        self.open = false;
        all
    }
}

/// Whether the primary's view of a job (read after the join was answered) still wants this
/// attempt run on `host`: not if the resync moved it to a newer attempt, or it moved on.
pub fn still_due(job: &Job, attempt: u32, host: &str) -> bool {
    job.attempt == attempt && job.host.as_deref() == Some(host) && job.state == JobState::Dispatched
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(id: JobId, attempt: u32) -> Parked {
        Parked {
            job: job(id, attempt),
            attempt,
            fenced: None,
            script: None,
        }
    }

    fn job(id: JobId, attempt: u32) -> Job {
        Job {
            id,
            spec: Default::default(),
            state: JobState::Dispatched,
            pend_reason: None,
            pend_code: None,
            reason: None,
            result: None,
            host: Some("w1".into()),
            attempt,
            runs: attempt,
            exit_code: None,
            signal: None,
            submit_time_ms: 0,
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
        }
    }

    #[test]
    fn starts_wait_only_while_a_join_is_unanswered() {
        let mut window = JoinWindow::default();
        assert!(window.park(start(1, 1)).is_some(), "no join: it runs");
        window.open();
        assert!(window.park(start(2, 1)).is_none());
        assert!(window.holds(2, 1) && !window.holds(2, 2));
        assert_eq!(window.close(0), vec![(2, 1)]);
        // Closed: new starts run, the parked one waits for its check.
        assert!(window.park(start(3, 1)).is_some());
        assert!(window.holds(2, 1));
        assert!(window.take(2, 2).is_none());
        assert_eq!(window.take(2, 1).map(|p| p.job.id), Some(2));
        assert!(window.take(2, 1).is_none(), "taken once");
    }

    #[test]
    fn a_failed_join_keeps_its_starts_for_the_next_answer() {
        let mut window = JoinWindow::default();
        window.open();
        assert!(window.park(start(5, 1)).is_none());
        // The join failed: nothing closes the window; the next join opens it again.
        window.open();
        assert!(window.park(start(6, 2)).is_none());
        assert_eq!(window.close(0), vec![(5, 1), (6, 2)]);
        assert!(window.forget(5).is_none());
        assert!(!window.holds(5, 1));
        assert_eq!(window.clear(), vec![(6, 2)]);
        assert!(window.close(0).is_empty());
    }

    #[test]
    fn a_newer_start_inherits_the_copy_a_parked_one_fenced() {
        let mut window = JoinWindow::default();
        window.open();
        let older = FencedCopy {
            attempt: 1,
            shim: crate::procs::ProcRecord {
                pid: 4242,
                start_ticks: 7,
            },
        };
        let parked = Parked {
            fenced: Some(older),
            ..start(8, 2)
        };
        assert!(window.park(parked).is_none());
        let inherited = window.forget(8).expect("the fenced copy");
        assert_eq!((inherited.attempt, inherited.shim.pid), (1, 4242));
    }

    #[test]
    fn only_the_same_attempt_on_this_host_still_dispatched_is_due() {
        let current = job(7, 1);
        assert!(still_due(&current, 1, "w1"));
        assert!(!still_due(&current, 1, "w2"));
        assert!(
            !still_due(&job(7, 2), 1, "w1"),
            "the resync sent a newer attempt"
        );
        let running = Job {
            state: JobState::Running,
            ..job(7, 1)
        };
        assert!(!still_due(&running, 1, "w1"));
    }

    #[test]
    fn a_capability_older_than_the_last_answered_join_s_is_from_a_left_connection() {
        let mut window = JoinWindow::default();
        assert!(!window.from_a_left_connection(0), "before any join");
        window.open();
        window.close(4);
        assert!(window.from_a_left_connection(3));
        assert!(!window.from_a_left_connection(4));
        assert!(!window.from_a_left_connection(5), "a join in flight");
        // An older number never lowers what was answered.
        window.close(2);
        assert!(window.from_a_left_connection(3));
    }
}
