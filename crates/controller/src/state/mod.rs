//! The replicated cluster state and its pure transition function.
//!
//! Sans-I/O: no sockets, clocks or files. Every replica applies the same commands in log order
//! and reaches the same state and the same [`Event`]s; the time a command carries was stamped
//! by the primary that proposed it, so replicas never read their own clocks here.
//!
//! Layout: `command` (what is logged and what applying it answers), `validate` (stateless
//! checks), one file per resource with its transitions and tests (`jobs`, `hosts`, `queues`),
//! `views` (reads), `index` (derived indexes) and `events`. This file holds the state itself,
//! the thin `apply` dispatch and the one transition helper per resource through which every
//! change passes, so that indexes and events can never be forgotten by a command.

pub mod accounts;
mod arrays;
mod attempts;
mod command;
mod dependencies;
mod dispatch_ahead;
mod events;
mod hosts;
mod index;
mod invariants;
mod jobs;
mod queues;
mod restore;
pub mod retire;
mod runs;
mod schedulers;
mod scripts;
mod signal;
pub mod stored;
mod tasks;
pub mod time_limit;
mod update;
mod usage;
mod users;
pub(crate) mod validate;
mod version;
mod views;

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use xce_client::types::{HostState, Job, JobId, RequestToken, ScriptId, Standing};

pub use xce_client::types::JobUsers;

pub use command::{Command, EndIntent, LostPolicy, Outcome, QueueDef};
pub use events::{Event, Push};
pub use index::is_placed;
pub use invariants::{MAX_ATTEMPT, MAX_EPOCH, MAX_JOB_ID};
pub use jobs::{REASON_KILLED, REASON_OOM};
pub use restore::BackupPart;
pub use schedulers::SchedulerLease;
pub use scripts::check_bytes as check_script_bytes;
pub use stored::{
    decode_state, fit_format, CommandRecord, EndIntentRecord, JobRecord, StateRecord,
};
pub use users::{validate_user_name, UserToken, MAX_TOKENS, TOKEN_ROLES};
pub use validate::{
    check_size, validate_command, validate_host_name, validate_spec, MAX_ARRAY_TASKS,
    MAX_LIST_BYTES, MAX_NAME_BYTES, MAX_PATH_BYTES, MAX_SCRIPT_BYTES,
};
pub use views::{DEFAULT_PAGE, MAX_PAGE, MAX_PAGE_BYTES, MAX_PAGE_SCAN};

use index::{Index, Slot};

/// The queue every cluster has; a submit that names no queue lands here.
pub const DEFAULT_QUEUE: &str = "normal";

/// Priority of the default queue when no configuration overrides it.
pub const DEFAULT_QUEUE_PRIORITY: i32 = 30;

/// How many applied request tokens are remembered for deduplication. A client re-sends within
/// seconds; this window covers far more than any failover at full submit speed.
pub const TOKEN_WINDOW: usize = 200_000;

/// Pending reason shown for a pending job while no scheduler holds the lease (derived when
/// the job is read, never stored).
pub const PEND_NO_SCHEDULER: &str = "no scheduler";

/// Reason recorded on a job an operator requeued.
pub const PEND_REQUEUED: &str = "requeued by an operator";

/// A queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueState {
    pub priority: i32,
    pub open: bool,
    pub active: bool,
    pub on_host_lost: LostPolicy,
}

/// A host. `available` is liveness (heartbeats); `closed` is operator state; the reported
/// state is `unavailable` before `closed` before `ok`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRecord {
    /// What it offers to jobs.
    pub resources: xce_client::types::Resources,
    pub spool_dir: String,
    /// Whose jobs its worker runs, as it reported at its last join.
    pub job_users: xce_client::types::JobUsers,
    pub closed: bool,
    pub available: bool,
}

impl HostRecord {
    /// The reported state.
    pub fn state(&self) -> HostState {
        if !self.available {
            HostState::Unavailable
        } else if self.closed {
            HostState::Closed
        } else {
            HostState::Ok
        }
    }
}

/// Applied tokens and their outcomes, bounded to [`TOKEN_WINDOW`] (oldest evicted first).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct TokenWindow {
    outcomes: HashMap<RequestToken, Outcome>,
    order: VecDeque<RequestToken>,
}

impl TokenWindow {
    fn get(&self, token: &RequestToken) -> Option<&Outcome> {
        self.outcomes.get(token)
    }

    fn remember(&mut self, token: RequestToken, outcome: Outcome) {
        if self.outcomes.insert(token, outcome).is_none() {
            self.order.push_back(token);
        }
        while self.order.len() > TOKEN_WINDOW {
            if let Some(old) = self.order.pop_front() {
                self.outcomes.remove(&old);
            }
        }
    }
}

/// The whole replicated cluster state. A snapshot stores it as a [`StateRecord`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    next_job_id: JobId,
    /// Shared with snapshots being built: a snapshot copies the map, not the jobs, and a job
    /// changed meanwhile is copied on write (`Arc::make_mut`).
    jobs: BTreeMap<JobId, Arc<Job>>,
    queues: BTreeMap<String, QueueState>,
    hosts: BTreeMap<String, HostRecord>,
    /// Placed jobs an operator asked to kill or requeue, until their attempt is gone.
    intents: BTreeMap<JobId, EndIntent>,
    tokens: TokenWindow,
    /// The one scheduler allowed to place jobs; kept after it runs out, so epochs only grow.
    scheduler: Option<SchedulerLease>,
    /// Users' tokens by id.
    user_tokens: BTreeMap<String, UserToken>,
    /// The cluster version in force: the store format every member can apply, in which
    /// batches and snapshots are written. Only ever raised (`version`).
    active_version: u32,
    /// Job scripts by content, each once however many jobs run it (`scripts`).
    scripts: BTreeMap<ScriptId, Arc<[u8]>>,
    /// How many jobs have retired to history (`retire`): the last one's sequence number.
    retired_seq: u64,
    /// Derived from `jobs`; rebuilt by [`State::from_record`], never stored.
    index: Index,
    /// Events of the command being applied; drained by every `apply`.
    emitted: Vec<Event>,
    /// Jobs whose state changed in the command being applied: the jobs that wait for them
    /// are judged again before the apply ends (`dependencies`).
    moved: Vec<JobId>,
}

impl Default for State {
    fn default() -> Self {
        let mut queues = BTreeMap::new();
        queues.insert(
            DEFAULT_QUEUE.to_string(),
            QueueState {
                priority: DEFAULT_QUEUE_PRIORITY,
                open: true,
                active: true,
                on_host_lost: LostPolicy::default(),
            },
        );
        State {
            next_job_id: 1,
            jobs: BTreeMap::new(),
            queues,
            hosts: BTreeMap::new(),
            intents: BTreeMap::new(),
            tokens: TokenWindow::default(),
            scheduler: None,
            user_tokens: BTreeMap::new(),
            // A new cluster starts at the oldest version this build writes; its primary
            // raises it as soon as every member reports a newer build.
            active_version: crate::store::OLDEST_FORMAT,
            scripts: BTreeMap::new(),
            retired_seq: 0,
            index: Index::default(),
            emitted: Vec::new(),
            moved: Vec::new(),
        }
    }
}

impl State {
    /// Applies one command stamped with the proposing primary's time; its events are dropped.
    pub fn apply(&mut self, at_ms: u64, cmd: Command) -> Outcome {
        self.apply_into(at_ms, cmd, &mut Vec::new())
    }

    /// Applies one command; returns its outcome and the events it emitted.
    #[cfg(test)]
    pub fn apply_emitting(&mut self, at_ms: u64, cmd: Command) -> (Outcome, Vec<Event>) {
        let mut events = Vec::new();
        let outcome = self.apply_into(at_ms, cmd, &mut events);
        (outcome, events)
    }

    /// Applies one command and appends the events it emitted to `events`.
    pub fn apply_into(&mut self, at_ms: u64, cmd: Command, events: &mut Vec<Event>) -> Outcome {
        let token = cmd.token();
        if let Some(token) = token {
            if let Some(original) = self.tokens.get(&token) {
                return Outcome::Duplicate(Box::new(original.clone()));
            }
        }
        let outcome = match cmd {
            Command::Submit { spec, script, .. } => self.submit(at_ms, spec, script),
            Command::ControlJob {
                id,
                action,
                by,
                actor,
                ..
            } => self.control_job(at_ms, id, action, by.as_deref(), actor),
            Command::UpdateJob {
                id, by, changes, ..
            } => self.update(at_ms, id, by.as_deref(), changes),
            Command::SignalJob {
                id,
                by,
                signal,
                leader_only,
                ..
            } => self.signal_job(id, by.as_deref(), signal, leader_only),
            Command::ControlTasks {
                array,
                tasks,
                by,
                actor,
                op,
                ..
            } => self.control_tasks(at_ms, array, tasks, by.as_deref(), actor, op),
            Command::ControlQueue { name, action, .. } => self.control_queue(&name, action),
            Command::Barrier { queues, .. } => self.define_queues(queues),
            Command::RegisterHost { host, held, .. } => self.register_host(at_ms, host, held),
            Command::HostLost { name } => self.host_lost(at_ms, &name),
            Command::ControlHost { name, action, .. } => self.control_host(&name, action),
            Command::SetHostAvailable { name, available } => {
                self.set_host_available(&name, available)
            }
            // An operator's placement needs free room: only the scheduler sends ahead, to a
            // worker that said it holds starts back.
            Command::Dispatch { id, host, .. } => self.dispatch(at_ms, id, host, false),
            Command::AcquireScheduler {
                name,
                instance,
                ttl_ms,
                ..
            } => self.acquire_scheduler(at_ms, name, instance, ttl_ms),
            Command::DispatchBatch {
                epoch, placements, ..
            } => self.dispatch_batch(at_ms, epoch, placements),
            Command::SetPendReasons { epoch, reasons, .. } => {
                self.set_pend_reasons(at_ms, epoch, reasons)
            }
            Command::JobStarted {
                id, attempt, host, ..
            } => self.job_started(at_ms, id, attempt, &host),
            Command::CreateToken {
                id,
                user,
                role,
                hash,
                expires_in_ms,
                ..
            } => {
                let token = UserToken {
                    user,
                    role,
                    hash,
                    created_ms: at_ms,
                    expires_ms: expires_in_ms.map(|ttl| at_ms.saturating_add(ttl)),
                };
                self.create_token(at_ms, id, token)
            }
            Command::RevokeToken { id, .. } => self.revoke_token(&id),
            Command::Restore { state, .. } => self.restore(*state),
            Command::RestoreJobs {
                base,
                jobs,
                intents,
                scripts,
                ..
            } => self.restore_jobs(base, jobs, intents, scripts),
            Command::JobFinished {
                id,
                attempt,
                host,
                end,
                usage,
                ..
            } => self.job_finished(at_ms, id, attempt, &host, end, usage),
            Command::RaiseVersion { to } => self.raise_version(to),
            Command::RetireJobs { ids } => self.retire_jobs(ids),
        };
        self.settle_dependencies(at_ms);
        if let Some(token) = token {
            self.tokens.remember(token, outcome.clone());
        }
        events.append(&mut self.emitted);
        outcome
    }

    /// Adds a new job (its id taken from the counter by the caller) and emits its event.
    fn insert_job(&mut self, job: Job) {
        let task = job.array_task.map(|t| (t.array_id, Standing::of(&job)));
        self.insert_job_as_is(job);
        if let Some((array_id, class)) = task {
            self.account_task(array_id, None, Some(class), None);
        }
    }

    /// Adds a job whose array, if it is a task, counts it already (a restored one).
    fn insert_job_as_is(&mut self, job: Job) {
        self.index.add(job.id, &Slot::of(&job));
        self.emitted.push(job_event(&job));
        self.jobs.insert(job.id, Arc::new(job));
    }

    /// Changes one job through `f`: the only way a job changes once it exists. Keeps the
    /// indexes current and emits the job's event when anything a watcher sees changed.
    fn update_job<T>(&mut self, id: JobId, f: impl FnOnce(&mut Job) -> T) -> Option<T> {
        let job = Arc::make_mut(self.jobs.get_mut(&id)?);
        let slot = Slot::of(job);
        let seen = Seen::of(job);
        let class = job.array_task.map(|_| Standing::of(job));
        let out = f(job);
        // A start is reserved only for a pending job waiting for room, or behind another's
        // reservation: placed, held, waiting for a dependency or given any other reason, it
        // has none.
        use xce_client::types::PendCode;
        if job.state != xce_client::types::JobState::Pending
            || !matches!(
                job.pend_code,
                Some(PendCode::Resources | PendCode::Priority)
            )
        {
            job.expected_start_ms = None;
        }
        // A task's move is its array's to count.
        let task_move = match (job.array_task, class) {
            (Some(t), Some(from)) if Standing::of(job) != from => {
                Some((t.array_id, from, Standing::of(job), job.end_time_ms))
            }
            _ => None,
        };
        let new_slot = Slot::of(job);
        if new_slot != slot {
            if new_slot.state() != slot.state() {
                self.moved.push(id);
                // A task's start moves no count of its array's, but `after:` on the array
                // may wait for it (`StartedAt::Report`).
                if let (Some(t), xce_client::types::JobState::Dispatched) =
                    (job.array_task, slot.state())
                {
                    self.moved.push(t.array_id);
                }
            }
            self.index.remove(id, &slot);
            self.index.add(id, &new_slot);
        }
        if Seen::of(job) != seen {
            self.emitted.push(job_event(job));
        }
        if let Some((array_id, from, to, at_ms)) = task_move {
            self.account_task(array_id, Some(from), Some(to), at_ms);
        }
        Some(out)
    }

    /// Changes (or, with `new`, first creates) one host through `f`, emitting its event when
    /// it is new or its reported state changed.
    fn update_host<T>(
        &mut self,
        name: &str,
        new: Option<HostRecord>,
        f: impl FnOnce(&mut HostRecord) -> T,
    ) -> Option<T> {
        let before = self.hosts.get(name).map(HostRecord::state);
        if before.is_none() {
            self.hosts.insert(name.to_string(), new?);
        }
        let host = self.hosts.get_mut(name)?;
        let out = f(host);
        let state = host.state();
        if before != Some(state) {
            self.emitted.push(Event::Host {
                name: name.to_string(),
                state,
            });
        }
        Some(out)
    }

    /// Changes (or, with `new`, first creates) one queue through `f`, emitting its event when
    /// it is new or its priority or flags changed.
    fn update_queue<T>(
        &mut self,
        name: &str,
        new: Option<QueueState>,
        f: impl FnOnce(&mut QueueState) -> T,
    ) -> Option<T> {
        let before = self.queues.get(name).map(queue_flags);
        if before.is_none() {
            self.queues.insert(name.to_string(), new?);
        }
        let queue = self.queues.get_mut(name)?;
        let out = f(queue);
        let (priority, open, active) = queue_flags(queue);
        if before != Some((priority, open, active)) {
            self.emitted.push(Event::Queue {
                name: name.to_string(),
                priority,
                open,
                active,
            });
        }
        Some(out)
    }

    /// Asks the ready primary to carry an order to a worker, once this change is applied.
    fn push(&mut self, push: Push) {
        self.emitted.push(Event::Push(push));
    }
}

/// What a watcher sees of a job: a change to any of it is an event.
#[derive(PartialEq, Eq)]
struct Seen {
    state: xce_client::types::JobState,
    host: Option<String>,
    attempt: u32,
    pend_reason: Option<String>,
    pend_code: Option<xce_client::types::PendCode>,
    reason: Option<String>,
    result: Option<xce_client::types::JobResult>,
    /// A dependency met clears the reason it waited with; a reason already cleared (an
    /// update) would otherwise make it no event at all, and the scheduler never see it.
    dependency_state: Option<xce_client::types::DependencyState>,
    /// An array's tasks waiting in it and placed: the scheduler reads it again on a change.
    array: Option<(u64, u64)>,
    /// A placed job's new time limit (`xce update`) moves its end, which the scheduler's
    /// backfill plans with: it reads the job again on an event that changes nothing else.
    time_limit_s: Option<u32>,
    /// The start backfill reserved for it, shown with the job.
    expected_start_ms: Option<u64>,
}

impl Seen {
    fn of(job: &Job) -> Seen {
        Seen {
            state: job.state,
            host: job.host.clone(),
            attempt: job.attempt,
            pend_reason: job.pend_reason.clone(),
            pend_code: job.pend_code,
            reason: job.reason.clone(),
            result: job.result,
            dependency_state: job.dependency_state,
            array: job.array.as_ref().map(|p| (p.pending.len(), p.running)),
            time_limit_s: job.spec.limits.time_limit_s,
            expected_start_ms: job.expected_start_ms,
        }
    }
}

fn job_event(job: &Job) -> Event {
    Event::Job {
        id: job.id,
        state: job.state,
        host: job.host.clone(),
        attempt: job.attempt,
        queue: job.spec.queue.clone(),
        user: job.spec.user.clone(),
        pend_reason: job.pend_reason.clone(),
        pend_code: job.pend_code,
        reason: job.reason.clone(),
        result: job.result,
        task: job.array_task.map(|t| (t.array_id, t.index)),
    }
}

fn queue_flags(q: &QueueState) -> (i32, bool, bool) {
    (q.priority, q.open, q.active)
}
