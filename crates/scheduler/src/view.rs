//! The scheduler's local view of the cluster: pending jobs (what to place), placed jobs (what
//! uses each host), hosts and queues. Loaded in pages at every (re)join, kept current by the
//! controller's events in between. Pure data: loading is `load`, the only I/O here.

use std::collections::{BTreeMap, HashMap};

use xce_client::fit::Resources;
use xce_client::ops::{GetCluster, ListHosts, ListJobs, ListQueues};
use xce_client::types::{
    ClusterEvent, DependencyState, HostState, Job, JobFilter, JobId, JobState, JobUsers, PendCode,
};
use xce_client::{Client, ClientError};

/// A pending job, as placement needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingJob {
    pub queue: String,
    pub priority: i32,
    pub need: Resources,
    /// Whose job it is: it goes only to a host that runs this user's jobs.
    pub user: String,
    /// Why it waits, as the controller last said (so a reason is published only on change).
    pub pend_reason: Option<String>,
    /// Held (`--hold`, `xce hold`): placed nowhere until released.
    pub hold: bool,
    /// Placed nowhere before this time (`--begin`), ms since the epoch.
    pub begin_time_ms: Option<u64>,
    /// Its dependency is not met (the controller decides it, and says why in its reason):
    /// placed nowhere, given no reason of the scheduler's, blocking nothing.
    pub waits_for_dependency: bool,
    /// For an array's own record, how many of its tasks may be placed now (those waiting in
    /// it, within its throttle): each placement splits one off, and a round may make several.
    /// `None`: a plain job.
    pub array_room: Option<u64>,
    /// For a task split off into a job of its own (requeued, released): its array, whose
    /// throttle it counts against.
    pub array_of: Option<JobId>,
    /// How long it may run once started (`None`: no limit): what backfill plans with.
    pub time_limit_s: Option<u32>,
    /// The start backfill reserved for it, as the controller last knew it (so a new one is
    /// published only when it moved).
    pub expected_start_ms: Option<u64>,
}

impl PendingJob {
    /// A plain job of `queue` needing `need` for `time_limit_s` (`None`: no limit), with no
    /// user, reason, hold, begin time or dependency: what a simulation or a benchmark places.
    pub fn plain(queue: &str, priority: i32, need: Resources, time_limit_s: Option<u32>) -> Self {
        PendingJob {
            queue: queue.to_string(),
            priority,
            need,
            user: String::new(),
            pend_reason: None,
            hold: false,
            begin_time_ms: None,
            waits_for_dependency: false,
            array_room: None,
            array_of: None,
            time_limit_s,
            expected_start_ms: None,
        }
    }
}

/// An array's own record, as placing its split-off tasks needs it: what each task takes, and
/// how many more may run at once (its throttle less its running tasks; `None`: no throttle).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArrayView {
    pub need: Resources,
    pub room: Option<u64>,
    pub time_limit_s: Option<u32>,
}

/// A placed job (dispatched, running or suspended): what it holds on its host, and until
/// when at the latest (its start plus its time limit: [`crate::backfill::ends_at`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacedJob {
    pub host: String,
    pub need: Resources,
    pub time_limit_s: Option<u32>,
    /// When it started (ms since the epoch): the controller's record in a full read, this
    /// scheduler's clock when the event saying so came (later, so never an early estimate).
    /// `None`: dispatched, not started.
    pub started_ms: Option<u64>,
    pub suspended: bool,
}

impl PlacedJob {
    /// A job just placed on `host`, not started yet.
    pub fn dispatched(host: String, need: Resources, time_limit_s: Option<u32>) -> PlacedJob {
        PlacedJob {
            host,
            need,
            time_limit_s,
            started_ms: None,
            suspended: false,
        }
    }
}

/// A host as placement needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostView {
    pub capacity: Resources,
    pub state: HostState,
    /// Whose jobs its worker runs.
    pub job_users: JobUsers,
    /// Its worker holds a start that does not fit until room frees: it may be sent jobs
    /// ahead of its free room (dispatch ahead).
    pub queues_starts: bool,
}

/// A queue as placement needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueView {
    pub priority: i32,
    pub active: bool,
}

/// What an event asks of the view's owner beyond the change itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Followup {
    Nothing,
    /// A job the view does not know: read it.
    FetchJob(JobId),
    /// A host the view does not know (its size is not in the event): re-read the hosts.
    FetchHosts,
}

/// The whole view. `pending` is ordered by id, which is submit order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct View {
    pub pending: BTreeMap<JobId, PendingJob>,
    pub placed: HashMap<JobId, PlacedJob>,
    pub hosts: BTreeMap<String, HostView>,
    pub queues: HashMap<String, QueueView>,
    /// Every live array's record, pending or running only through its tasks.
    pub arrays: HashMap<JobId, ArrayView>,
    /// The cluster's active version, read with the hosts.
    pub version: u32,
    /// Rounds of a host's resources this scheduler sends ahead of its free room
    /// (`--dispatch-ahead`; 0: none).
    pub dispatch_ahead: u32,
    /// How many blocked jobs a round reserves a start for (`--backfill-depth`; 0: strict
    /// priority, [`crate::backfill`]).
    pub backfill_depth: u32,
    /// What backfill adds to every job's end (`--backfill-slack-ms`).
    pub backfill_slack_ms: u64,
}

impl View {
    /// Whether hosts whose workers hold starts back may be sent jobs beyond their free room:
    /// configured so, on a cluster whose apply takes them (version 12).
    pub fn sends_ahead(&self) -> bool {
        self.dispatch_ahead > 0 && self.version >= xce_client::version::DISPATCH_AHEAD
    }

    /// Adds or updates a job from a full read.
    pub fn put_job(&mut self, job: &Job) {
        let need = job.spec.resources.clone();
        let time_limit_s = job.spec.limits.time_limit_s;
        self.pending.remove(&job.id);
        // A start this view heard of later (a resume) than the record's stands: the record
        // does not say how long the job was suspended.
        let heard = self.placed.remove(&job.id).and_then(|p| p.started_ms);
        self.arrays.remove(&job.id);
        if let (Some(progress), false) = (&job.array, job.state.is_final()) {
            let throttle = job.spec.array.as_ref().and_then(|a| a.throttle);
            self.arrays.insert(
                job.id,
                ArrayView {
                    need: need.clone(),
                    room: throttle.map(|t| u64::from(t).saturating_sub(progress.running)),
                    time_limit_s,
                },
            );
        }
        match (job.state, &job.host) {
            (JobState::Pending, _) => {
                self.pending.insert(
                    job.id,
                    PendingJob {
                        queue: job.spec.queue.clone(),
                        priority: job.spec.priority,
                        need,
                        user: job.spec.user.clone(),
                        pend_reason: job.pend_reason.clone(),
                        hold: job.spec.hold,
                        begin_time_ms: job.spec.begin_time_ms,
                        waits_for_dependency: matches!(
                            job.dependency_state,
                            Some(DependencyState::Waiting | DependencyState::Never)
                        ),
                        array_room: job.array.as_ref().map(|p| {
                            let throttle = job
                                .spec
                                .array
                                .as_ref()
                                .and_then(|a| a.throttle)
                                .map_or(u64::MAX, u64::from);
                            p.pending.len().min(throttle.saturating_sub(p.running))
                        }),
                        array_of: job.array_task.map(|t| t.array_id),
                        time_limit_s,
                        expected_start_ms: job.expected_start_ms,
                    },
                );
            }
            (JobState::Dispatched | JobState::Running | JobState::Suspended, Some(host)) => {
                self.placed.insert(
                    job.id,
                    PlacedJob {
                        host: host.clone(),
                        need,
                        time_limit_s,
                        started_ms: job
                            .start_time_ms
                            .filter(|_| job.state != JobState::Dispatched)
                            .map(|at| heard.map_or(at, |h| h.max(at))),
                        suspended: job.state == JobState::Suspended,
                    },
                );
            }
            _ => {}
        }
    }

    /// Records that this scheduler's placement of pending job `id` on `host` was made.
    pub fn placed_now(&mut self, id: JobId, host: String) {
        if let Some(job) = self.pending.remove(&id) {
            self.placed
                .insert(id, PlacedJob::dispatched(host, job.need, job.time_limit_s));
        }
    }

    /// What each host's placed jobs use.
    pub fn loads(&self) -> HashMap<&str, Resources> {
        let mut loads: HashMap<&str, Resources> = HashMap::new();
        for p in self.placed.values() {
            let load = loads.entry(p.host.as_str()).or_default();
            *load = load.plus(&p.need);
        }
        loads
    }

    /// Applies one event; says what else must be read when the event does not carry enough.
    pub fn apply(&mut self, event: &ClusterEvent) -> Followup {
        match event {
            ClusterEvent::Job {
                id,
                state,
                host,
                pend_reason,
                pend_code,
                queue,
                task,
                ..
            } => self.apply_job(
                *id,
                *state,
                host.as_deref(),
                pend_reason,
                *pend_code,
                queue,
                task.map(|t| t.0),
            ),
            // A host's event may come from a join that changed what it offers or whether its
            // worker holds starts back, neither of which the event carries: read the hosts.
            ClusterEvent::Host { name, state, .. } => {
                if let Some(h) = self.hosts.get_mut(name) {
                    h.state = *state;
                }
                Followup::FetchHosts
            }
            ClusterEvent::Queue {
                name,
                priority,
                active,
                ..
            } => {
                self.queues.insert(
                    name.clone(),
                    QueueView {
                        priority: *priority,
                        active: *active,
                    },
                );
                Followup::Nothing
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn apply_job(
        &mut self,
        id: JobId,
        state: JobState,
        host: Option<&str>,
        pend_reason: &Option<String>,
        pend_code: Option<PendCode>,
        queue: &str,
        array_of: Option<JobId>,
    ) -> Followup {
        if self.arrays.contains_key(&id) {
            // An array's own record: a task was split off, started or ended, which changes
            // its room (not in the event), or it ended.
            if !state.is_final() {
                return Followup::FetchJob(id);
            }
            self.arrays.remove(&id);
            self.pending.remove(&id);
            return Followup::Nothing;
        }
        // A task placed takes what its array's tasks take: no read needed.
        let task_need = || {
            let array = array_of?;
            self.arrays
                .get(&array)
                .map(|a| (a.need.clone(), a.time_limit_s, None))
        };
        // What it takes, for how long, and since when it runs (as this view knew it).
        let (need, time_limit_s, started_ms) = match (self.pending.get(&id), self.placed.get(&id)) {
            (Some(p), _) => (p.need.clone(), p.time_limit_s, None),
            // Resumed: what is left of its limit is at most its whole limit from now.
            (None, Some(p)) if p.suspended => (p.need.clone(), p.time_limit_s, None),
            (None, Some(p)) => (p.need.clone(), p.time_limit_s, p.started_ms),
            (None, None) if state.is_final() => return Followup::Nothing,
            (None, None) => match (task_need(), is_placed(state) && host.is_some()) {
                (Some(known), true) => known,
                _ => return Followup::FetchJob(id),
            },
        };
        match (state, host) {
            (JobState::Pending, _) => {
                let Some(known) = self.pending.get_mut(&id) else {
                    // Requeued: its priority and user are not in the event.
                    return Followup::FetchJob(id);
                };
                if pend_reason.is_none() || known.array_room.is_some() {
                    // A pending job the view knows loses its reason only when it changed
                    // (`xce update`, `hold`, `release`), and what changed is not in the event;
                    // an array's event is a task split off or ended, which changes its room.
                    return Followup::FetchJob(id);
                }
                known.queue = queue.to_string();
                known.pend_reason = pend_reason.clone();
                // Only the controller gives this code: a dependency that waits again (a
                // `singleton` whose name runs now). One met clears the reason (read above).
                if pend_code == Some(PendCode::Dependency) {
                    known.waits_for_dependency = true;
                }
            }
            (JobState::Dispatched | JobState::Running | JobState::Suspended, Some(host)) => {
                let known = self
                    .placed
                    .get(&id)
                    .map(|p| (p.started_ms.is_some(), p.suspended));
                if known == Some((true, state == JobState::Suspended)) {
                    // No change of state: its time limit may have changed (`xce update`),
                    // which backfill's estimate of its end must know.
                    return Followup::FetchJob(id);
                }
                self.pending.remove(&id);
                // Its start as this view first heard of it: at or after the real one.
                let started_ms = match state {
                    JobState::Dispatched => None,
                    _ => started_ms.or_else(|| Some(xce_client::when::now_ms())),
                };
                self.placed.insert(
                    id,
                    PlacedJob {
                        host: host.to_string(),
                        need,
                        time_limit_s,
                        started_ms,
                        suspended: state == JobState::Suspended,
                    },
                );
            }
            _ => {
                self.pending.remove(&id);
                self.placed.remove(&id);
            }
        }
        Followup::Nothing
    }
}

/// Whether a job in this state holds a place on its host.
pub fn is_placed(state: JobState) -> bool {
    matches!(
        state,
        JobState::Dispatched | JobState::Running | JobState::Suspended
    )
}

/// Reads the queues into `view`, replacing what it had.
pub async fn load_queues(client: &Client, view: &mut View) -> Result<(), ClientError> {
    view.queues = client
        .call(ListQueues)
        .await?
        .into_iter()
        .map(|q| {
            let queue = QueueView {
                priority: q.priority,
                active: q.active,
            };
            (q.name, queue)
        })
        .collect();
    Ok(())
}

/// A view read in full, and how many events the picker had applied when the read began:
/// those after it may or may not be in the view, so the picker reads again what they touched.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub view: View,
    pub events_before: u64,
    /// When the read began: it shows every placement committed before then.
    pub began: std::time::Instant,
}

/// Reads the hosts into `view`, replacing what it had, and the cluster's version (which decides
/// whether they may be sent jobs ahead).
pub async fn load_hosts(client: &Client, view: &mut View) -> Result<(), ClientError> {
    view.version = client.call(GetCluster).await?.active_version;
    view.hosts = client
        .call(ListHosts)
        .await?
        .into_iter()
        .map(|h| {
            let view = HostView {
                capacity: h.capacity,
                state: h.state,
                job_users: h.job_users,
                queues_starts: h.queues_starts,
            };
            (h.name, view)
        })
        .collect();
    Ok(())
}

/// Reads the whole view: queues, hosts, and every pending and placed job, in pages.
pub async fn load(client: &Client) -> Result<View, ClientError> {
    let mut view = View::default();
    load_queues(client, &mut view).await?;
    load_hosts(client, &mut view).await?;
    read_live_jobs(client, 0, &mut view).await?;
    Ok(view)
}

/// The jobs the view holds: pending and placed.
fn live_jobs() -> JobFilter {
    JobFilter {
        states: vec![
            JobState::Pending,
            JobState::Dispatched,
            JobState::Running,
            JobState::Suspended,
        ],
        ..JobFilter::default()
    }
}

/// Reads every pending and placed job with an id above `after` into `view`, page by page.
pub async fn read_live_jobs(
    client: &Client,
    after: JobId,
    view: &mut View,
) -> Result<(), ClientError> {
    let mut after = after;
    loop {
        let page = client
            .call(ListJobs {
                filter: live_jobs(),
                after,
                limit: 0,
            })
            .await?;
        for job in &page.jobs {
            view.put_job(job);
        }
        match page.next {
            Some(next) => after = next,
            None => return Ok(()),
        }
    }
}
