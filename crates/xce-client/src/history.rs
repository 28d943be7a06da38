//! A query of finished jobs' history (`xce history`, `GET /v1/history`, the `listHistory`
//! call): one filter, judged alike by the controller that walks its history store and by the
//! front ends that build it from flags or query parameters.

use crate::types::{Job, JobId, JobResult, JobState};

/// Which of a job's times a window bounds (`sacct` windows on end by default when a state is
/// named, LSF's `bhist -C/-S/-D` pick one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TimeField {
    Submit,
    Start,
    /// The default: a finished job's end (`sacct`'s window with a state named).
    #[default]
    End,
}

impl TimeField {
    /// Every field, as the flags and the HTTP API name them.
    pub const ALL: [TimeField; 3] = [TimeField::Submit, TimeField::Start, TimeField::End];

    pub fn name(self) -> &'static str {
        match self {
            TimeField::Submit => "submit",
            TimeField::Start => "start",
            TimeField::End => "end",
        }
    }

    /// The field of this name.
    pub fn parse(text: &str) -> Option<TimeField> {
        TimeField::ALL.into_iter().find(|f| f.name() == text)
    }

    /// The job's time of this kind, if it has one.
    pub fn of(self, job: &Job) -> Option<u64> {
        match self {
            TimeField::Submit => Some(job.submit_time_ms),
            TimeField::Start => job.start_time_ms,
            TimeField::End => job.end_time_ms,
        }
    }
}

/// Which finished jobs a query wants; every field left empty is "any".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistoryFilter {
    pub user: Option<String>,
    pub account: Option<String>,
    pub queue: Option<String>,
    pub name: Option<String>,
    pub states: Vec<JobState>,
    pub results: Vec<JobResult>,
    /// An array: its own record and its tasks'.
    pub array: Option<JobId>,
    /// Ids from, to (both included).
    pub first_id: Option<JobId>,
    pub last_id: Option<JobId>,
    /// The time the window bounds, and its bounds in ms since the epoch (both included).
    pub time: TimeField,
    pub since_ms: Option<u64>,
    pub until_ms: Option<u64>,
}

impl HistoryFilter {
    /// Whether `job` passes every field of the filter.
    pub fn passes(&self, job: &Job) -> bool {
        let same = |want: &Option<String>, got: &str| want.as_deref().is_none_or(|w| w == got);
        let in_window = || {
            if self.since_ms.is_none() && self.until_ms.is_none() {
                return true;
            }
            self.time.of(job).is_some_and(|t| {
                self.since_ms.is_none_or(|s| t >= s) && self.until_ms.is_none_or(|u| t <= u)
            })
        };
        same(&self.user, &job.spec.user)
            && same(&self.account, &job.spec.account)
            && same(&self.queue, &job.spec.queue)
            && same(&self.name, &job.spec.name)
            && (self.states.is_empty() || self.states.contains(&job.state))
            && (self.results.is_empty() || job.result.is_some_and(|r| self.results.contains(&r)))
            && self
                .array
                .is_none_or(|a| job.id == a || job.array_task.is_some_and(|t| t.array_id == a))
            && self.first_id.is_none_or(|f| job.id >= f)
            && self.last_id.is_none_or(|l| job.id <= l)
            && in_window()
    }
}

/// One page of a history query, in id order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistoryPage {
    pub jobs: Vec<Job>,
    /// Where the next page starts (`after`); 0 when this was the last.
    pub next: JobId,
    /// How many retired jobs the answering controller's history does not hold yet (it is
    /// catching up): a page may then lack some.
    pub behind: u64,
    /// How many records were read for this page: a page that stopped at the controller's
    /// bound on reading holds fewer jobs than asked and a `next` to go on from.
    pub scanned: u64,
}

/// `ID` or `FIRST-LAST` (`FIRST-`, `-LAST`): the ids a listing is bounded to, refused when it
/// ends before it starts (the CLI's reading: a typo is said, not answered with nothing).
pub fn id_range(text: &str) -> Result<(Option<JobId>, Option<JobId>), String> {
    let (first, last) = id_bounds(text)?;
    if let (Some(a), Some(b)) = (first, last) {
        if a > b {
            return Err(format!("id: {text:?} ends before it starts"));
        }
    }
    Ok((first, last))
}

/// The bounds `ID` or `FIRST-LAST` gives, in whatever order (the HTTP API's reading: a
/// range that ends before it starts holds no job).
pub fn id_bounds(text: &str) -> Result<(Option<JobId>, Option<JobId>), String> {
    let id = |s: &str| {
        if s.is_empty() {
            return Ok(None);
        }
        s.parse::<JobId>()
            .map(Some)
            .map_err(|_| format!("id: {text:?} is not ID or FIRST-LAST (job ids)"))
    };
    let (first, last) = match text.split_once('-') {
        Some((a, b)) => (id(a)?, id(b)?),
        None => {
            let one = id(text)?;
            (one, one)
        }
    };
    Ok((first, last))
}

#[cfg(test)]
mod tests {
    use super::id_range;

    #[test]
    fn id_ranges_read_as_sacct_users_write_them() {
        assert_eq!(id_range("7"), Ok((Some(7), Some(7))));
        assert_eq!(id_range("3-9"), Ok((Some(3), Some(9))));
        assert_eq!(id_range("3-"), Ok((Some(3), None)));
        assert_eq!(id_range("-9"), Ok((None, Some(9))));
        assert!(id_range("9-3").unwrap_err().contains("ends before"));
        assert!(id_range("x").unwrap_err().contains("\"x\""));
    }
}
