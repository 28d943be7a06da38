//! Read views of the state: what the service answers and what the primary's own tasks look
//! at. They read the indexes rather than scanning every job.

use xce_client::fit::Resources;
use xce_client::types::{Host, Job, JobFilter, JobId, JobPage, JobState, Queue};

use super::{HostRecord, State};

/// Jobs in a page when the caller asks for no particular number.
pub const DEFAULT_PAGE: usize = 1000;
/// Most jobs in one page, whatever the caller asks.
pub const MAX_PAGE: usize = 5000;
/// Most jobs one page call looks at: a filter that matches few jobs (a queue or user alone)
/// returns a shorter, even empty, page with a cursor instead of scanning on, so that no
/// listing holds the state (and the controller's one thread) for long.
pub const MAX_PAGE_SCAN: usize = 100_000;
/// Most bytes (approximately, as encoded) of jobs in one page: far below capnp's 64 MiB
/// message limit even when every job carries the largest command and environment allowed.
pub const MAX_PAGE_BYTES: usize = 8 * 1024 * 1024;

/// About how many bytes a job takes in a reply.
fn approx_job_bytes(job: &Job) -> usize {
    let s = &job.spec;
    256 + s.name.len()
        + s.user.len()
        + s.queue.len()
        + s.cwd.len()
        + s.command.iter().map(|a| a.len() + 8).sum::<usize>()
        + s.env
            .iter()
            .map(|(k, v)| k.len() + v.len() + 16)
            .sum::<usize>()
        + job.pend_reason.as_ref().map_or(0, String::len)
        + job.reason.as_ref().map_or(0, String::len)
        + job.host.as_ref().map_or(0, String::len)
        + job.output_dir.as_ref().map_or(0, String::len)
}

/// Ids from several id-ordered sets, merged in id order.
fn merge_ids<'a>(
    mut sets: Vec<std::iter::Peekable<Box<dyn Iterator<Item = JobId> + 'a>>>,
) -> impl Iterator<Item = JobId> + 'a {
    std::iter::from_fn(move || {
        let (i, _) = sets
            .iter_mut()
            .enumerate()
            .filter_map(|(i, s)| s.peek().map(|id| (i, *id)))
            .min_by_key(|(_, id)| *id)?;
        sets[i].next()
    })
}

impl State {
    /// One host record.
    pub fn host(&self, name: &str) -> Option<&HostRecord> {
        self.hosts.get(name)
    }

    /// What the jobs placed on `host` use there.
    pub fn host_load(&self, host: &str) -> Resources {
        self.index
            .load(host)
            .map(|l| l.used.clone())
            .unwrap_or_default()
    }

    /// Jobs dispatched to, running or suspended on `host`, in id order.
    pub(super) fn placed_on<'a>(&'a self, host: &str) -> impl Iterator<Item = &'a Job> + 'a {
        self.index
            .load(host)
            .into_iter()
            .flat_map(|l| l.jobs.iter())
            .filter_map(|id| self.jobs.get(id).map(|j| &**j))
    }

    /// Names of unavailable hosts that still have jobs placed on them, by name.
    pub fn unavailable_hosts_with_jobs(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .index
            .busy_hosts()
            .filter(|name| self.hosts.get(*name).is_some_and(|h| !h.available))
            .map(str::to_string)
            .collect();
        names.sort();
        names
    }

    /// Names of hosts currently marked available.
    pub fn available_hosts(&self) -> Vec<String> {
        self.hosts
            .iter()
            .filter(|(_, h)| h.available)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// All hosts, by name.
    pub fn hosts(&self) -> Vec<Host> {
        self.hosts
            .iter()
            .map(|(name, h)| {
                let load = self.index.load(name);
                Host {
                    name: name.clone(),
                    capacity: h.resources.clone(),
                    state: h.state(),
                    running: load.map_or(0, |l| l.jobs.len() as u32),
                    used: load.map(|l| l.used.clone()).unwrap_or_default(),
                    job_users: h.job_users.clone(),
                    // Not replicated: the primary's reader adds what the worker's join said.
                    queues_starts: false,
                }
            })
            .collect()
    }

    /// A job as a reader is told it at `now_ms`: while no scheduler holds the lease, a
    /// pending job's reason says "no scheduler" (derived from the lease, never stored per
    /// job), after what it last recorded (a requeue, a lost host).
    pub fn shown(&self, mut job: Job, now_ms: u64) -> Job {
        if job.state == JobState::Pending && self.scheduler_lease(now_ms).is_none() {
            // Whatever it waited for before, nothing places it now.
            job.pend_code = Some(xce_client::types::PendCode::NoScheduler);
            let none = super::PEND_NO_SCHEDULER;
            job.pend_reason = Some(match job.pend_reason.take() {
                Some(recorded) => format!("{recorded}; {none}"),
                None => none.to_string(),
            });
        }
        job
    }

    /// One job.
    pub fn job(&self, id: JobId) -> Option<&Job> {
        self.jobs.get(&id).map(|j| &**j)
    }

    /// Task `index` of array `array` (`42_7`): its own record once split off, else the
    /// array's, in which it still waits; or why there is none.
    pub fn task(&self, array: JobId, index: u32) -> Result<Job, String> {
        let Some(job) = self.job(array) else {
            return Err(format!("job {array}: no such job"));
        };
        let Some(spec) = &job.spec.array else {
            return Err(format!("job {array} is no array: it has no task {index}"));
        };
        if !spec.tasks.contains(index) {
            return Err(format!(
                "job {array}_{index}: array {array} has no task {index}"
            ));
        }
        let own = self
            .index
            .task_job(array, index)
            .and_then(|id| self.job(id));
        Ok(own.unwrap_or(job).clone())
    }

    /// How many jobs `user` has submitted and not yet ended, as `jobs.max_submitted_per_user`
    /// counts them: an array once, plus each of its tasks while placed (from the index).
    pub fn submits_of(&self, user: &str) -> u64 {
        self.index.submits_of(user)
    }

    /// How many jobs are in `state` (from the index: no scan).
    pub fn count_in_state(&self, state: JobState) -> usize {
        self.index.in_state(state).len()
    }

    /// How many jobs exist.
    pub fn job_count(&self) -> usize {
        self.jobs.len()
    }

    /// Jobs passing `filter` with ids above `after`, in id order: at most `limit` (clamped to
    /// `1..=MAX_PAGE`, 0 meaning [`DEFAULT_PAGE`]), about [`MAX_PAGE_BYTES`], and from at most
    /// [`MAX_PAGE_SCAN`] jobs looked at. A filter on states walks the per-state indexes only.
    pub fn jobs_page(&self, filter: &JobFilter, after: JobId, limit: usize) -> JobPage {
        let limit = match limit {
            0 => DEFAULT_PAGE,
            n => n.min(MAX_PAGE),
        };
        let start = after.saturating_add(1);
        let ids: Box<dyn Iterator<Item = JobId> + '_> = if filter.states.is_empty() {
            Box::new(self.jobs.range(start..).map(|(id, _)| *id))
        } else {
            let mut states: Vec<JobState> = filter.states.clone();
            states.sort_by_key(|s| JobState::ALL.iter().position(|a| a == s));
            states.dedup();
            let sets = states
                .into_iter()
                .map(|s| {
                    let it: Box<dyn Iterator<Item = JobId> + '_> =
                        Box::new(self.index.in_state(s).range(start..).copied());
                    it.peekable()
                })
                .collect();
            Box::new(merge_ids(sets))
        };
        let mut jobs = Vec::new();
        let mut bytes = 0;
        for (scanned, job) in ids.filter_map(|id| self.jobs.get(&id)).enumerate() {
            if scanned >= MAX_PAGE_SCAN {
                // Not at the end: the next page goes on from the last job looked at.
                return JobPage {
                    jobs,
                    next: Some(job.id - 1),
                };
            }
            if !filter.matches(job) {
                continue;
            }
            bytes += approx_job_bytes(job);
            jobs.push(Job::clone(job));
            if jobs.len() >= limit || bytes >= MAX_PAGE_BYTES {
                let next = jobs.last().map(|j| j.id);
                return JobPage { jobs, next };
            }
        }
        JobPage { jobs, next: None }
    }

    /// All queues with their pending and running counts, highest priority first.
    pub fn queues(&self) -> Vec<Queue> {
        let mut out: Vec<Queue> = self
            .queues
            .iter()
            .map(|(name, q)| {
                let counts = self.index.queue_counts(name);
                Queue {
                    name: name.clone(),
                    priority: q.priority,
                    open: q.open,
                    active: q.active,
                    pending: counts.pending,
                    running: counts.placed,
                    // Configuration, not state: the service fills them in.
                    default_time_s: None,
                    max_time_s: None,
                }
            })
            .collect();
        out.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(&b.name)));
        out
    }
}
