//! A job's record of its attempts that started (`Job::attempts`), on the job-change path:
//! what history lists of a job's runs (each one's host, times, end and usage), from version 13
//! (`ACCOUNTING`), so every member records the same at the same entry.
//!
//! An attempt is recorded once its start is reported; one that ends without a start report but
//! counts as a run (`runs::ended`: a command that could not start, a start report a worker's
//! crash lost) is recorded at its end, started then; one that started before the raise to 13
//! is recorded at its end with the job's start time. One killed before it started is none.

use xce_client::types::{AttemptRun, Job, JobEnd, JobState, Usage, MAX_ATTEMPT_RUNS};
use xce_client::version::ACCOUNTING;

/// The current attempt of `job` started on `host` at `at_ms`.
pub(super) fn started(job: &mut Job, host: &str, at_ms: u64, version: u32) {
    if version < ACCOUNTING {
        return;
    }
    record(
        job,
        AttemptRun {
            attempt: job.attempt,
            host: host.to_string(),
            start_ms: at_ms,
            ..AttemptRun::default()
        },
    );
}

/// How an attempt's end reads in its record.
pub(super) enum Ended<'a> {
    /// Its worker reported this end.
    Reported(&'a JobEnd, Option<Usage>),
    /// Its host or worker lost it, for this reason.
    Lost(&'a str),
}

/// The current attempt of `job` ended at `at_ms`, having run (`runs::ended` said so); call it
/// before the job leaves its host.
pub(super) fn ended(job: &mut Job, at_ms: u64, how: Ended<'_>, version: u32) {
    if version < ACCOUNTING {
        return;
    }
    let current = job.attempt;
    let open = job
        .attempts
        .last()
        .is_some_and(|a| a.attempt == current && a.end_ms.is_none());
    if !open {
        // No record of its start: it started before the cluster recorded attempts (its
        // start time says when), or no start report came (it started as it ended).
        let started = matches!(job.state, JobState::Running | JobState::Suspended);
        let start_ms = job.start_time_ms.filter(|_| started).unwrap_or(at_ms);
        let host = job.host.clone().unwrap_or_default();
        record(
            job,
            AttemptRun {
                attempt: current,
                host,
                start_ms,
                ..AttemptRun::default()
            },
        );
    }
    let Some(run) = job.attempts.last_mut() else {
        return;
    };
    run.end_ms = Some(at_ms);
    match how {
        Ended::Reported(end, usage) => {
            run.usage = usage;
            match end {
                JobEnd::Exit(code) => run.exit_code = Some(*code),
                JobEnd::Signal(sig) => run.signal = Some(*sig),
                JobEnd::Failed(why) => run.reason = Some(why.clone()),
                JobEnd::OutOfMemory => {
                    run.signal = Some(super::jobs::OOM_SIGNAL);
                    run.reason = Some(super::REASON_OOM.to_string());
                }
                JobEnd::TimedOut { exit_code, signal } => {
                    run.exit_code = *exit_code;
                    run.signal = *signal;
                    run.reason = Some("time limit reached".to_string());
                }
            }
        }
        Ended::Lost(why) => run.reason = Some(why.to_string()),
    }
}

/// Adds a run, keeping the latest [`MAX_ATTEMPT_RUNS`].
fn record(job: &mut Job, run: AttemptRun) {
    job.attempts.push(run);
    if job.attempts.len() > MAX_ATTEMPT_RUNS {
        let over = job.attempts.len() - MAX_ATTEMPT_RUNS;
        job.attempts.drain(..over);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::{Command, State};
    use xce_client::types::{JobEnd, RequestToken, Usage};

    fn at_13(n: u64) -> State {
        let mut s = State::default();
        s.apply(
            0,
            Command::RaiseVersion {
                to: xce_client::version::ACCOUNTING,
            },
        );
        s.apply(0, join_cmd(900, "w1", vec![]));
        for id in 1..=n {
            submit(&mut s, 1000 + id as u128, spec(&["sleep", "9"]));
        }
        s
    }

    fn start(s: &mut State, t: u128, id: u64, attempt: u32, at: u64) {
        let cmd = Command::JobStarted {
            token: RequestToken(t),
            id,
            attempt,
            host: "w1".into(),
        };
        assert_eq!(s.apply(at, cmd), super::super::Outcome::Done);
    }

    #[test]
    fn each_attempt_that_started_is_recorded_with_its_host_times_end_and_usage() {
        let mut s = at_13(1);
        s.apply(1, dispatch_cmd(10, 1, "w1"));
        start(&mut s, 11, 1, 1, 100);
        // An operator requeues it: its attempt ends, and the next one runs to its end.
        control(&mut s, 12, 1, xce_client::types::JobAction::Requeue);
        let used = Usage {
            cpu_user_ms: 5,
            cpu_sys_ms: 1,
            max_rss_kb: 64,
        };
        s.apply(
            200,
            Command::JobFinished {
                token: RequestToken(13),
                id: 1,
                attempt: 1,
                host: "w1".into(),
                end: JobEnd::Signal(15),
                usage: Some(used),
            },
        );
        s.apply(300, dispatch_cmd(14, 1, "w1"));
        start(&mut s, 15, 1, 2, 400);
        finish(&mut s, 16, 1, 2, JobEnd::Exit(3));
        let runs: Vec<_> = s
            .job(1)
            .map(|j| j.attempts.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|a| {
                (
                    a.attempt,
                    a.start_ms,
                    a.end_ms,
                    a.exit_code,
                    a.signal,
                    a.usage,
                )
            })
            .collect();
        assert_eq!(
            runs,
            vec![
                (1, 100, Some(200), None, Some(15), Some(used)),
                (2, 400, Some(9), Some(3), None, None),
            ]
        );
    }

    #[test]
    fn an_attempt_killed_before_it_started_is_none_and_a_lost_one_says_why() {
        let mut s = at_13(2);
        s.apply(1, dispatch_cmd(10, 1, "w1"));
        finish(
            &mut s,
            11,
            1,
            1,
            JobEnd::Failed(xce_client::types::KILLED_BEFORE_START.into()),
        );
        assert_eq!(s.job(1).map(|j| j.attempts.len()), Some(0));
        s.apply(1, dispatch_cmd(12, 2, "w1"));
        start(&mut s, 13, 2, 1, 50);
        let down = Command::SetHostAvailable {
            name: "w1".into(),
            available: false,
        };
        s.apply(55, down);
        s.apply(60, Command::HostLost { name: "w1".into() });
        let run = s.job(2).and_then(|j| j.attempts.last().cloned());
        assert_eq!(
            run.as_ref().map(|r| (r.start_ms, r.end_ms)),
            Some((50, Some(60)))
        );
        assert!(run
            .and_then(|r| r.reason)
            .is_some_and(|r| r.contains("lost")));
    }

    #[test]
    fn before_version_13_nothing_is_recorded() {
        let mut s = running_on_w1(1);
        finish(&mut s, 50, 1, 1, JobEnd::Exit(0));
        assert_eq!(s.job(1).map(|j| j.attempts.len()), Some(0));
    }
}
