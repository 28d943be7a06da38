//! A job's count of attempts that started (`Job::runs`), on the job-change path: what
//! `afternotok` and an array's count of tasks that ended unrun go by (`Standing::of`).
//!
//! From version 12 (`DISPATCH_AHEAD`) an attempt counts once its start is reported, or when it
//! ends (reported, or its host lost) unless its end says it was killed before it started: a
//! job sent ahead of its host's free room may be killed while it waits there, and then never
//! ran, while a command that could not start, or one whose start report a worker's crash
//! lost, did. Before, each dispatch counted (a dispatch went only to free room, where a job
//! starts at once), as logs of those versions were applied: `runs` then equals `attempt`,
//! which is also what a record of format 11 or older reads back as.

use xce_client::types::{Job, JobEnd, JobState, KILLED_BEFORE_START};
use xce_client::version::DISPATCH_AHEAD;

/// A new attempt of `job` was dispatched, on a cluster at active version `version`.
pub(super) fn dispatched(job: &mut Job, version: u32) {
    if version < DISPATCH_AHEAD {
        job.runs = job.attempt;
    }
}

/// The start of `job`'s current attempt was reported, at active version `version`. An attempt
/// dispatched before the raise to 12 counted already: a count never passes the attempt.
pub(super) fn started(job: &mut Job, version: u32) {
    if version >= DISPATCH_AHEAD {
        count_run(job);
    }
}

/// Counts `job`'s current attempt as a run; never past the attempt.
fn count_run(job: &mut Job) {
    job.runs = job.runs.saturating_add(1).min(job.attempt);
}

/// `job`'s current attempt ends as `end` (`None`: its host was lost), at active version
/// `version`; call it before the job leaves its state. Whether the attempt started: one still
/// dispatched (no start report applied) counts as a run now, unless its end says it was
/// killed before it started.
pub(super) fn ended(job: &mut Job, version: u32, end: Option<&JobEnd>) -> bool {
    if version < DISPATCH_AHEAD || job.state != JobState::Dispatched {
        return true;
    }
    if matches!(end, Some(JobEnd::Failed(reason)) if reason == KILLED_BEFORE_START) {
        return false;
    }
    count_run(job);
    true
}
