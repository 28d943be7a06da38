//! The replicated cluster state and its pure transition function.
//!
//! Sans-I/O: no sockets, clocks or files. Every replica applies the same commands in log order
//! and reaches the same state; the time a command carries was stamped by the primary that
//! proposed it, so replicas never read their own clocks here.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use serde::{Deserialize, Serialize};
use xce_client::types::{
    HeldJob, HeldPhase, Host, HostAction, HostAttributes, HostState, Job, JobAction, JobEnd,
    JobFilter, JobId, JobOrder, JobSignal, JobSpec, JobState, Queue, QueueAction, RequestToken,
};
use xce_proto::Status;

/// The queue every cluster has; a submit that names no queue lands here.
pub const DEFAULT_QUEUE: &str = "normal";

/// Priority of the default queue when no configuration overrides it.
pub const DEFAULT_QUEUE_PRIORITY: i32 = 30;

/// How many applied request tokens are remembered for deduplication. A client re-sends within
/// seconds; this window covers far more than any failover at full submit speed.
pub const TOKEN_WINDOW: usize = 200_000;

/// Pending reason recorded at submit: nothing places jobs until a scheduler exists.
pub const PEND_NO_SCHEDULER: &str = "no scheduler";

/// Reason recorded on a job an operator requeued.
pub const PEND_REQUEUED: &str = "requeued by an operator";

/// What happens to a running job whose host or worker lost it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LostPolicy {
    /// Back to pending; the next dispatch is a new attempt.
    #[default]
    Requeue,
    /// The job ends `exited` with the reason.
    Exit,
}

/// A queue definition, as given in the controller configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueDef {
    pub name: String,
    pub priority: i32,
    /// What becomes of this queue's jobs when their host is lost.
    #[serde(default)]
    pub on_host_lost: LostPolicy,
}

/// An operator's request to end a placed job, waiting for its worker to report the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndIntent {
    /// The job ends `exited` with reason "killed".
    Kill,
    /// The job goes back to pending once its current attempt is gone.
    Requeue,
}

/// One state change, as stored in the Raft log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    Submit {
        token: RequestToken,
        spec: JobSpec,
    },
    ControlJob {
        token: RequestToken,
        id: JobId,
        action: JobAction,
    },
    ControlQueue {
        token: RequestToken,
        name: String,
        action: QueueAction,
    },
    /// A worker joined (or re-joined) with its host's attributes and the attempts it holds:
    /// registers the host and reconciles its jobs (resync).
    RegisterHost {
        token: RequestToken,
        host: HostAttributes,
        held: Vec<HeldJob>,
    },
    ControlHost {
        token: RequestToken,
        name: String,
        action: HostAction,
    },
    /// The primary's liveness tracking: a host stopped or resumed heartbeating.
    SetHostAvailable {
        name: String,
        available: bool,
    },
    /// Place a pending job on a host; validated here, at apply time, so a stale decision is a
    /// conflict and never a double placement.
    Dispatch {
        token: RequestToken,
        id: JobId,
        host: String,
    },
    /// A worker started an attempt.
    JobStarted {
        token: RequestToken,
        id: JobId,
        attempt: u32,
        host: String,
    },
    /// A worker saw an attempt end.
    JobFinished {
        token: RequestToken,
        id: JobId,
        attempt: u32,
        host: String,
        end: JobEnd,
    },
    /// The primary's liveness tracking: a host stayed unavailable beyond the grace period;
    /// its placed jobs are lost (requeued or exited, per queue policy).
    HostLost {
        name: String,
    },
    /// Proposed by every new primary: once applied, the primary has committed an entry of its
    /// own term and applied everything before it (the readiness barrier). It also brings the
    /// configured queues into the replicated state.
    Barrier {
        term: u64,
        queues: Vec<QueueDef>,
    },
}

impl Command {
    fn token(&self) -> Option<RequestToken> {
        match self {
            Command::Submit { token, .. }
            | Command::ControlJob { token, .. }
            | Command::ControlQueue { token, .. }
            | Command::RegisterHost { token, .. }
            | Command::ControlHost { token, .. }
            | Command::Dispatch { token, .. }
            | Command::JobStarted { token, .. }
            | Command::JobFinished { token, .. } => Some(*token),
            Command::Barrier { .. }
            | Command::SetHostAvailable { .. }
            | Command::HostLost { .. } => None,
        }
    }
}

/// The result of applying one command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// A job was created.
    Submitted(JobId),
    /// The change was made.
    Done,
    /// Nothing changed; the status and message say why.
    Rejected { status: Status, message: String },
    /// The token was applied before; this is the original outcome.
    Duplicate(Box<Outcome>),
    /// The change was made; the primary must now signal the attempt on its host.
    Signal { host: String, order: JobOrder },
    /// A worker's join was applied: `orders` go back to it; jobs in `restart` were dispatched
    /// to it but it never got them, so the primary sends them again (same attempt).
    Resynced {
        orders: Vec<JobOrder>,
        restart: Vec<JobId>,
    },
}

impl Outcome {
    fn rejected(status: Status, message: impl Into<String>) -> Outcome {
        Outcome::Rejected {
            status,
            message: message.into(),
        }
    }
}

/// A queue as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueState {
    pub priority: i32,
    pub open: bool,
    pub active: bool,
    pub on_host_lost: LostPolicy,
}

/// A host as stored. `available` is liveness (heartbeats); `closed` is operator state; the
/// reported state is `unavailable` before `closed` before `ok`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostRecord {
    pub cpus: u32,
    pub mem_mb: u64,
    pub spool_dir: String,
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
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
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

/// The whole replicated cluster state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    next_job_id: JobId,
    jobs: BTreeMap<JobId, Job>,
    queues: BTreeMap<String, QueueState>,
    hosts: BTreeMap<String, HostRecord>,
    /// Placed jobs an operator asked to kill or requeue, until their attempt is gone.
    intents: BTreeMap<JobId, EndIntent>,
    tokens: TokenWindow,
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
        }
    }
}

/// Largest name-like field (job name, user, queue), in bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// Largest working directory, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;
/// Largest command line or environment, in bytes. Bounded specs keep every Raft batch and
/// every message far below capnp's message limit.
pub const MAX_LIST_BYTES: usize = 64 * 1024;

fn check_size(field: &str, len: usize, max: usize) -> Result<(), String> {
    if len > max {
        return Err(format!("{field}: {len} bytes, at most {max} allowed"));
    }
    Ok(())
}

/// Approximate encoded size of a command, for bounding Raft batches.
pub fn approx_size(cmd: &Command) -> usize {
    match cmd {
        Command::Submit { spec, .. } => {
            64 + spec.name.len()
                + spec.user.len()
                + spec.queue.len()
                + spec.cwd.len()
                + spec.command.iter().map(|a| a.len() + 8).sum::<usize>()
                + spec
                    .env
                    .iter()
                    .map(|(k, v)| k.len() + v.len() + 16)
                    .sum::<usize>()
        }
        Command::ControlQueue { name, .. } | Command::ControlHost { name, .. } => 64 + name.len(),
        Command::RegisterHost { host, held, .. } => 64 + host.name.len() + 24 * held.len(),
        Command::SetHostAvailable { name, .. } | Command::HostLost { name } => 32 + name.len(),
        Command::ControlJob { .. } => 48,
        Command::Dispatch { host, .. } | Command::JobStarted { host, .. } => 64 + host.len(),
        Command::JobFinished { host, end, .. } => {
            64 + host.len()
                + match end {
                    JobEnd::Failed(r) => r.len(),
                    _ => 8,
                }
        }
        Command::Barrier { queues, .. } => {
            32 + queues.iter().map(|q| q.name.len() + 8).sum::<usize>()
        }
    }
}

/// Checks what can be checked without the state, so that a bad request is answered before it
/// costs a log entry. `apply` checks again (it must stand alone); this only fails earlier.
pub fn validate_spec(spec: &JobSpec) -> Result<(), String> {
    check_size("name", spec.name.len(), MAX_NAME_BYTES)?;
    check_size("user", spec.user.len(), MAX_NAME_BYTES)?;
    check_size("queue", spec.queue.len(), MAX_NAME_BYTES)?;
    check_size("cwd", spec.cwd.len(), MAX_PATH_BYTES)?;
    check_size(
        "command",
        spec.command.iter().map(String::len).sum(),
        MAX_LIST_BYTES,
    )?;
    check_size(
        "env",
        spec.env.iter().map(|(k, v)| k.len() + v.len()).sum(),
        MAX_LIST_BYTES,
    )?;
    match spec.command.first() {
        None => return Err("command: must not be empty".into()),
        Some(arg0) if arg0.trim().is_empty() => {
            return Err("command: the program name must not be empty".into())
        }
        Some(_) => {}
    }
    if spec.cpus < 0 {
        return Err(format!("cpus: must not be negative (got {})", spec.cpus));
    }
    if spec.mem_mb < 0 {
        return Err(format!(
            "mem_mb: must not be negative (got {})",
            spec.mem_mb
        ));
    }
    if let Some((k, _)) = spec
        .env
        .iter()
        .find(|(k, _)| k.is_empty() || k.contains('='))
    {
        return Err(format!("env: invalid variable name {k:?}"));
    }
    Ok(())
}

/// Whether a job in this state holds a place on its host.
/// Ends a job `exited` with `reason`.
fn end_job(job: &mut Job, at_ms: u64, reason: &str) {
    job.state = JobState::Exited;
    job.reason = Some(reason.to_string());
    job.end_time_ms = Some(at_ms);
}

/// Puts a job back to pending; its next dispatch is the next attempt, so any copy of the
/// current one is stale from here on.
fn requeue(job: &mut Job, why: &str) {
    job.state = JobState::Pending;
    job.pend_reason = Some(why.to_string());
    job.reason = None;
    job.host = None;
    job.exit_code = None;
    job.signal = None;
    job.start_time_ms = None;
    job.end_time_ms = None;
    job.output_dir = None;
}

fn is_placed(state: JobState) -> bool {
    matches!(
        state,
        JobState::Dispatched | JobState::Running | JobState::Suspended
    )
}

/// Checks a host name as given by a worker (`--name`).
pub fn validate_host_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(())
    } else {
        Err(format!(
            "host.name: {name:?} must be letters, digits, '-', '_' or '.'"
        ))
    }
}

impl State {
    /// Applies one command stamped with the proposing primary's time.
    pub fn apply(&mut self, at_ms: u64, cmd: Command) -> Outcome {
        let token = cmd.token();
        if let Some(token) = token {
            if let Some(original) = self.tokens.get(&token) {
                return Outcome::Duplicate(Box::new(original.clone()));
            }
        }
        let outcome = match cmd {
            Command::Submit { spec, .. } => self.submit(at_ms, spec),
            Command::ControlJob { id, action, .. } => self.control_job(at_ms, id, action),
            Command::ControlQueue { name, action, .. } => self.control_queue(&name, action),
            Command::Barrier { queues, .. } => self.define_queues(queues),
            Command::RegisterHost { host, held, .. } => self.register_host(at_ms, host, held),
            Command::HostLost { name } => self.host_lost(at_ms, &name),
            Command::ControlHost { name, action, .. } => self.control_host(&name, action),
            Command::SetHostAvailable { name, available } => {
                self.set_host_available(&name, available)
            }
            Command::Dispatch { id, host, .. } => self.dispatch(id, host),
            Command::JobStarted {
                id, attempt, host, ..
            } => self.job_started(at_ms, id, attempt, &host),
            Command::JobFinished {
                id,
                attempt,
                host,
                end,
                ..
            } => self.job_finished(at_ms, id, attempt, &host, end),
        };
        if let Some(token) = token {
            self.tokens.remember(token, outcome.clone());
        }
        outcome
    }

    fn submit(&mut self, at_ms: u64, mut spec: JobSpec) -> Outcome {
        if let Err(message) = validate_spec(&spec) {
            return Outcome::rejected(Status::Invalid, message);
        }
        if spec.queue.is_empty() {
            spec.queue = DEFAULT_QUEUE.to_string();
        }
        match self.queues.get(&spec.queue) {
            None => {
                return Outcome::rejected(
                    Status::Invalid,
                    format!("queue: no such queue {:?}", spec.queue),
                )
            }
            Some(q) if !q.open => {
                return Outcome::rejected(
                    Status::Conflict,
                    format!("queue: {:?} is closed to new jobs", spec.queue),
                )
            }
            Some(_) => {}
        }
        if spec.cpus == 0 {
            spec.cpus = 1;
        }
        let id = self.next_job_id;
        self.next_job_id += 1;
        self.jobs.insert(
            id,
            Job {
                id,
                spec,
                state: JobState::Pending,
                pend_reason: Some(PEND_NO_SCHEDULER.to_string()),
                reason: None,
                host: None,
                attempt: 0,
                exit_code: None,
                signal: None,
                submit_time_ms: at_ms,
                start_time_ms: None,
                end_time_ms: None,
                output_dir: None,
            },
        );
        Outcome::Submitted(id)
    }

    fn control_job(&mut self, at_ms: u64, id: JobId, action: JobAction) -> Outcome {
        let Some(job) = self.jobs.get_mut(&id) else {
            return Outcome::rejected(Status::NoEnt, format!("job {id}: no such job"));
        };
        let intent = self.intents.get(&id).copied();
        let signal = |job: &Job, signal| Outcome::Signal {
            host: job.host.clone().unwrap_or_default(),
            order: JobOrder {
                id,
                attempt: job.attempt,
                signal,
            },
        };
        match (action, job.state) {
            (JobAction::Kill, JobState::Pending) => {
                job.state = JobState::Exited;
                job.pend_reason = None;
                job.reason = Some("killed".into());
                job.end_time_ms = Some(at_ms);
                Outcome::Done
            }
            (JobAction::Requeue, state) if state.is_final() => {
                requeue(job, PEND_REQUEUED);
                Outcome::Done
            }
            (_, state) if state.is_final() => Outcome::rejected(
                Status::Conflict,
                format!("job {id}: already {}", state.name()),
            ),
            // The attempt ends when its worker says so; until then the job keeps its cpus.
            (JobAction::Kill | JobAction::Requeue, state) if is_placed(state) => {
                if intent.is_some() {
                    return Outcome::rejected(
                        Status::Conflict,
                        format!("job {id}: already being ended ({intent:?})"),
                    );
                }
                let wanted = if action == JobAction::Kill {
                    EndIntent::Kill
                } else {
                    EndIntent::Requeue
                };
                self.intents.insert(id, wanted);
                signal(job, JobSignal::Kill)
            }
            (JobAction::Suspend, JobState::Running) if intent.is_none() => {
                job.state = JobState::Suspended;
                signal(job, JobSignal::Suspend)
            }
            (JobAction::Resume, JobState::Suspended) if intent.is_none() => {
                job.state = JobState::Running;
                signal(job, JobSignal::Resume)
            }
            (action, state) => Outcome::rejected(
                Status::Conflict,
                format!(
                    "job {id}: cannot {} a job that is {}{}",
                    format!("{action:?}").to_lowercase(),
                    state.name(),
                    if intent.is_some() {
                        " and being ended"
                    } else {
                        ""
                    }
                ),
            ),
        }
    }

    fn control_queue(&mut self, name: &str, action: QueueAction) -> Outcome {
        let Some(q) = self.queues.get_mut(name) else {
            return Outcome::rejected(Status::NoEnt, format!("queue {name:?}: no such queue"));
        };
        match action {
            QueueAction::Open => q.open = true,
            QueueAction::Close => q.open = false,
            QueueAction::Activate => q.active = true,
            QueueAction::Inactivate => q.active = false,
        }
        Outcome::Done
    }

    /// Adds configured queues that are missing and updates the priority of known ones; their
    /// open/active state is operator state and stays as it is.
    fn define_queues(&mut self, queues: Vec<QueueDef>) -> Outcome {
        for def in queues {
            self.queues
                .entry(def.name)
                .and_modify(|q| {
                    q.priority = def.priority;
                    q.on_host_lost = def.on_host_lost;
                })
                .or_insert(QueueState {
                    priority: def.priority,
                    open: true,
                    active: true,
                    on_host_lost: def.on_host_lost,
                });
        }
        Outcome::Done
    }

    fn register_host(&mut self, at_ms: u64, attrs: HostAttributes, held: Vec<HeldJob>) -> Outcome {
        if let Err(message) = validate_host_name(&attrs.name) {
            return Outcome::rejected(Status::Invalid, message);
        }
        if attrs.cpus == 0 {
            return Outcome::rejected(Status::Invalid, "cpus: a host needs at least one cpu");
        }
        if let Err(message) = check_size("host.spool_dir", attrs.spool_dir.len(), MAX_PATH_BYTES) {
            return Outcome::rejected(Status::Invalid, message);
        }
        let name = attrs.name.clone();
        let record = self.hosts.entry(attrs.name).or_insert(HostRecord {
            cpus: attrs.cpus,
            mem_mb: attrs.mem_mb,
            spool_dir: String::new(),
            closed: false,
            available: true,
        });
        record.cpus = attrs.cpus;
        record.mem_mb = attrs.mem_mb;
        record.spool_dir = attrs.spool_dir;
        record.available = true;
        self.resync(at_ms, &name, &held)
    }

    /// Reconciles what a worker holds with what the state says is placed on its host. The
    /// worker's copy of an attempt that is unknown, stale or over is killed (fencing); a
    /// job placed here that the worker does not hold is lost, unless it was only dispatched
    /// (the worker never got it: it is sent again).
    fn resync(&mut self, at_ms: u64, host: &str, held: &[HeldJob]) -> Outcome {
        let mut orders = Vec::new();
        let mut current = HashSet::new();
        for h in held {
            let order = |signal| JobOrder {
                id: h.id,
                attempt: h.attempt,
                signal,
            };
            let current_state = self
                .jobs
                .get(&h.id)
                .filter(|j| {
                    j.attempt == h.attempt && j.host.as_deref() == Some(host) && is_placed(j.state)
                })
                .map(|j| j.state);
            let Some(state) = current_state else {
                if h.phase != HeldPhase::Finished {
                    orders.push(order(JobSignal::Kill));
                }
                continue;
            };
            current.insert(h.id);
            if h.phase == HeldPhase::Finished {
                continue;
            }
            if self.intents.contains_key(&h.id) {
                orders.push(order(JobSignal::Kill));
            } else if state == JobState::Suspended && h.phase == HeldPhase::Running {
                orders.push(order(JobSignal::Suspend));
            } else if state == JobState::Running && h.phase == HeldPhase::Suspended {
                orders.push(order(JobSignal::Resume));
            }
        }
        let missing: Vec<(JobId, JobState)> = self
            .placed_on(host)
            .filter(|j| !current.contains(&j.id))
            .map(|j| (j.id, j.state))
            .collect();
        let mut restart = Vec::new();
        for (id, state) in missing {
            if state == JobState::Dispatched && !self.intents.contains_key(&id) {
                restart.push(id);
            } else {
                self.lose(at_ms, id, &format!("lost by its worker on {host}"));
            }
        }
        Outcome::Resynced { orders, restart }
    }

    /// Ends or requeues every job placed on a host that stayed unavailable too long.
    fn host_lost(&mut self, at_ms: u64, name: &str) -> Outcome {
        match self.hosts.get(name) {
            None => {
                return Outcome::rejected(Status::NoEnt, format!("host {name:?}: no such host"))
            }
            Some(h) if h.available => {
                return Outcome::rejected(
                    Status::Conflict,
                    format!("host {name:?} is available again"),
                )
            }
            Some(_) => {}
        }
        let placed: Vec<JobId> = self.placed_on(name).map(|j| j.id).collect();
        for id in placed {
            self.lose(at_ms, id, &format!("host {name} lost"));
        }
        Outcome::Done
    }

    /// A placed job whose attempt is gone without an end report: an operator's pending kill
    /// or requeue wins, otherwise its queue's policy decides.
    fn lose(&mut self, at_ms: u64, id: JobId, why: &str) {
        let intent = self.intents.remove(&id);
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        let policy = self
            .queues
            .get(&job.spec.queue)
            .map(|q| q.on_host_lost)
            .unwrap_or_default();
        match (intent, policy) {
            (Some(EndIntent::Kill), _) => end_job(job, at_ms, "killed"),
            (Some(EndIntent::Requeue), _) => requeue(job, PEND_REQUEUED),
            (None, LostPolicy::Requeue) => requeue(job, &format!("requeued: {why}")),
            (None, LostPolicy::Exit) => end_job(job, at_ms, why),
        }
    }

    fn control_host(&mut self, name: &str, action: HostAction) -> Outcome {
        let Some(h) = self.hosts.get_mut(name) else {
            return Outcome::rejected(Status::NoEnt, format!("host {name:?}: no such host"));
        };
        h.closed = action == HostAction::Close;
        Outcome::Done
    }

    fn set_host_available(&mut self, name: &str, available: bool) -> Outcome {
        match self.hosts.get_mut(name) {
            Some(h) => {
                h.available = available;
                Outcome::Done
            }
            None => Outcome::rejected(Status::NoEnt, format!("host {name:?}: no such host")),
        }
    }

    /// CPUs taken on `host` by jobs placed there and not yet ended.
    fn cpus_used(&self, host: &str) -> (u32, u32) {
        self.placed_on(host).fold((0, 0), |(running, cpus), j| {
            (running + 1, cpus + j.spec.cpus.max(0) as u32)
        })
    }

    /// Jobs dispatched to, running or suspended on `host`.
    fn placed_on<'a>(&'a self, host: &'a str) -> impl Iterator<Item = &'a Job> + 'a {
        self.jobs
            .values()
            .filter(move |j| j.host.as_deref() == Some(host) && is_placed(j.state))
    }

    fn dispatch(&mut self, id: JobId, host: String) -> Outcome {
        let Some(record) = self.hosts.get(&host) else {
            return Outcome::rejected(Status::NoEnt, format!("host {host:?}: no such host"));
        };
        let (host_state, host_cpus) = (record.state(), record.cpus);
        let spool_dir = Some(record.spool_dir.clone()).filter(|d| !d.is_empty());
        let (_, used) = self.cpus_used(&host);
        let Some(job) = self.jobs.get_mut(&id) else {
            return Outcome::rejected(Status::NoEnt, format!("job {id}: no such job"));
        };
        if job.state != JobState::Pending {
            return Outcome::rejected(
                Status::Conflict,
                format!("job {id} is {}, not pending", job.state.name()),
            );
        }
        if host_state != HostState::Ok {
            return Outcome::rejected(
                Status::Conflict,
                format!("host {host:?} is {}", host_state.name()),
            );
        }
        let need = job.spec.cpus.max(0) as u32;
        if used + need > host_cpus {
            return Outcome::rejected(
                Status::Conflict,
                format!(
                    "host {host:?} has {} of {host_cpus} cpus free; job {id} needs {need}",
                    host_cpus.saturating_sub(used)
                ),
            );
        }
        job.state = JobState::Dispatched;
        job.pend_reason = None;
        job.host = Some(host);
        job.output_dir = spool_dir;
        job.attempt += 1;
        Outcome::Done
    }

    /// The job, if `attempt` on `host` is its current attempt; stale reports are refused so
    /// that an old copy of a job can never change it.
    fn current_attempt(
        &mut self,
        id: JobId,
        attempt: u32,
        host: &str,
    ) -> Result<&mut Job, Outcome> {
        let Some(job) = self.jobs.get_mut(&id) else {
            return Err(Outcome::rejected(
                Status::NoEnt,
                format!("job {id}: no such job"),
            ));
        };
        if job.attempt != attempt || job.host.as_deref() != Some(host) || !is_placed(job.state) {
            return Err(Outcome::rejected(
                Status::Conflict,
                format!(
                    "job {id}: attempt {attempt} on {host:?} is stale (current: attempt {} on {:?})",
                    job.attempt, job.host
                ),
            ));
        }
        Ok(job)
    }

    fn job_started(&mut self, at_ms: u64, id: JobId, attempt: u32, host: &str) -> Outcome {
        let job = match self.current_attempt(id, attempt, host) {
            Ok(job) => job,
            Err(rejected) => return rejected,
        };
        if job.state == JobState::Dispatched {
            job.state = JobState::Running;
            job.start_time_ms = Some(at_ms);
        }
        // Already running: a repeated report changes nothing.
        Outcome::Done
    }

    fn job_finished(
        &mut self,
        at_ms: u64,
        id: JobId,
        attempt: u32,
        host: &str,
        end: JobEnd,
    ) -> Outcome {
        if let Err(rejected) = self.current_attempt(id, attempt, host) {
            return rejected;
        }
        let intent = self.intents.remove(&id);
        let Some(job) = self.jobs.get_mut(&id) else {
            return Outcome::rejected(Status::NoEnt, format!("job {id}: no such job"));
        };
        job.start_time_ms.get_or_insert(at_ms);
        match &end {
            JobEnd::Exit(code) => job.exit_code = Some(*code),
            JobEnd::Signal(sig) => job.signal = Some(*sig),
            JobEnd::Failed(_) => {}
        }
        match (intent, end) {
            (Some(EndIntent::Requeue), _) => requeue(job, PEND_REQUEUED),
            (Some(EndIntent::Kill), _) => end_job(job, at_ms, "killed"),
            (None, JobEnd::Exit(0)) => {
                job.state = JobState::Done;
                job.end_time_ms = Some(at_ms);
            }
            (None, JobEnd::Exit(_)) => {
                job.state = JobState::Exited;
                job.end_time_ms = Some(at_ms);
            }
            (None, JobEnd::Signal(sig)) => end_job(job, at_ms, &format!("killed by signal {sig}")),
            (None, JobEnd::Failed(reason)) => end_job(job, at_ms, &reason),
        }
        Outcome::Done
    }

    /// One host record.
    pub fn host(&self, name: &str) -> Option<&HostRecord> {
        self.hosts.get(name)
    }

    /// Names of unavailable hosts that still have jobs placed on them.
    pub fn unavailable_hosts_with_jobs(&self) -> Vec<String> {
        // One pass over the jobs: this runs on every liveness tick.
        let busy: HashSet<&str> = self
            .jobs
            .values()
            .filter(|j| is_placed(j.state))
            .filter_map(|j| j.host.as_deref())
            .collect();
        self.hosts
            .iter()
            .filter(|(name, h)| !h.available && busy.contains(name.as_str()))
            .map(|(n, _)| n.clone())
            .collect()
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
                let (running, cpus_used) = self.cpus_used(name);
                Host {
                    name: name.clone(),
                    cpus: h.cpus,
                    mem_mb: h.mem_mb,
                    state: h.state(),
                    running,
                    cpus_used,
                }
            })
            .collect()
    }

    /// One job.
    pub fn job(&self, id: JobId) -> Option<&Job> {
        self.jobs.get(&id)
    }

    /// Jobs passing `filter`, in id order.
    pub fn jobs(&self, filter: &JobFilter) -> Vec<Job> {
        self.jobs
            .values()
            .filter(|j| filter.matches(j))
            .cloned()
            .collect()
    }

    /// How many jobs exist.
    pub fn job_count(&self) -> usize {
        self.jobs.len()
    }

    /// All queues with their pending and running counts, highest priority first.
    pub fn queues(&self) -> Vec<Queue> {
        let mut counts: HashMap<&str, (u32, u32)> = HashMap::new();
        for job in self.jobs.values() {
            let c = counts.entry(job.spec.queue.as_str()).or_default();
            match job.state {
                JobState::Pending => c.0 += 1,
                JobState::Dispatched | JobState::Running | JobState::Suspended => c.1 += 1,
                JobState::Done | JobState::Exited => {}
            }
        }
        let mut out: Vec<Queue> = self
            .queues
            .iter()
            .map(|(name, q)| {
                let (pending, running) = counts.get(name.as_str()).copied().unwrap_or_default();
                Queue {
                    name: name.clone(),
                    priority: q.priority,
                    open: q.open,
                    active: q.active,
                    pending,
                    running,
                }
            })
            .collect();
        out.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(&b.name)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn spec(cmd: &[&str]) -> JobSpec {
        JobSpec {
            command: cmd.iter().map(|s| s.to_string()).collect(),
            ..JobSpec::default()
        }
    }

    fn submit(state: &mut State, token: u128, spec: JobSpec) -> Outcome {
        state.apply(
            1000,
            Command::Submit {
                token: RequestToken(token),
                spec,
            },
        )
    }

    fn rejected_with(outcome: &Outcome, status: Status, fragment: &str) {
        match outcome {
            Outcome::Rejected { status: s, message } => {
                assert_eq!(*s, status, "{message}");
                assert!(message.contains(fragment), "{message:?} lacks {fragment:?}");
            }
            other => panic!("expected {status} rejection, got {other:?}"),
        }
    }

    #[test]
    fn submit_assigns_ids_in_order_into_the_default_queue() {
        let mut s = State::default();
        assert_eq!(submit(&mut s, 1, spec(&["true"])), Outcome::Submitted(1));
        assert_eq!(submit(&mut s, 2, spec(&["true"])), Outcome::Submitted(2));
        let job = s.job(2).unwrap();
        assert_eq!(job.spec.queue, DEFAULT_QUEUE);
        assert_eq!(job.state, JobState::Pending);
        assert_eq!(job.spec.cpus, 1);
        assert_eq!(job.submit_time_ms, 1000);
        assert_eq!(job.pend_reason.as_deref(), Some(PEND_NO_SCHEDULER));
    }

    #[test]
    fn a_repeated_token_answers_the_original_result_and_changes_nothing() {
        let mut s = State::default();
        assert_eq!(submit(&mut s, 7, spec(&["a"])), Outcome::Submitted(1));
        let before = s.clone();
        assert_eq!(
            submit(&mut s, 7, spec(&["b"])),
            Outcome::Duplicate(Box::new(Outcome::Submitted(1)))
        );
        assert_eq!(s, before);
        // A rejected write is remembered too: its re-send is rejected the same way.
        let bad = submit(&mut s, 8, spec(&[]));
        assert_eq!(
            submit(&mut s, 8, spec(&["now fine"])),
            Outcome::Duplicate(Box::new(bad))
        );
        assert_eq!(s.job_count(), 1);
    }

    #[test]
    fn invalid_requests_name_the_field_and_change_nothing() {
        let mut s = State::default();
        let before = s.jobs.clone();
        rejected_with(&submit(&mut s, 1, spec(&[])), Status::Invalid, "command");
        rejected_with(&submit(&mut s, 2, spec(&[" "])), Status::Invalid, "command");
        let mut neg = spec(&["x"]);
        neg.cpus = -1;
        rejected_with(&submit(&mut s, 3, neg), Status::Invalid, "cpus");
        let mut neg = spec(&["x"]);
        neg.mem_mb = -5;
        rejected_with(&submit(&mut s, 4, neg), Status::Invalid, "mem_mb");
        let mut unknown = spec(&["x"]);
        unknown.queue = "nope".into();
        rejected_with(&submit(&mut s, 5, unknown), Status::Invalid, "queue");
        assert_eq!(s.jobs, before);
        assert_eq!(s.next_job_id, 1);
    }

    #[test]
    fn oversized_specs_are_invalid_and_name_the_field() {
        let mut s = State::default();
        let mut big = spec(&["x"]);
        big.command.push("a".repeat(MAX_LIST_BYTES));
        rejected_with(&submit(&mut s, 1, big), Status::Invalid, "command:");
        let mut big = spec(&["x"]);
        big.name = "n".repeat(MAX_NAME_BYTES + 1);
        rejected_with(&submit(&mut s, 2, big), Status::Invalid, "name:");
        let mut big = spec(&["x"]);
        big.env = vec![("K".into(), "v".repeat(MAX_LIST_BYTES))];
        rejected_with(&submit(&mut s, 3, big), Status::Invalid, "env:");
        assert_eq!(s.job_count(), 0);
    }

    #[test]
    fn kill_ends_a_pending_job_once() {
        let mut s = State::default();
        submit(&mut s, 1, spec(&["sleep", "9"]));
        let kill = |s: &mut State, t| {
            s.apply(
                2000,
                Command::ControlJob {
                    token: RequestToken(t),
                    id: 1,
                    action: JobAction::Kill,
                },
            )
        };
        assert_eq!(kill(&mut s, 10), Outcome::Done);
        let job = s.job(1).unwrap();
        assert_eq!(job.state, JobState::Exited);
        assert_eq!(job.reason.as_deref(), Some("killed"));
        assert_eq!(job.end_time_ms, Some(2000));
        rejected_with(&kill(&mut s, 11), Status::Conflict, "already exited");
        let missing = s.apply(
            1,
            Command::ControlJob {
                token: RequestToken(12),
                id: 99,
                action: JobAction::Kill,
            },
        );
        rejected_with(&missing, Status::NoEnt, "job 99");
    }

    #[test]
    fn queue_controls_and_closed_queues() {
        let mut s = State::default();
        let ctl = |s: &mut State, t, name: &str, action| {
            s.apply(
                1,
                Command::ControlQueue {
                    token: RequestToken(t),
                    name: name.into(),
                    action,
                },
            )
        };
        assert_eq!(ctl(&mut s, 1, "normal", QueueAction::Close), Outcome::Done);
        rejected_with(&submit(&mut s, 2, spec(&["x"])), Status::Conflict, "closed");
        assert_eq!(
            ctl(&mut s, 3, "normal", QueueAction::Inactivate),
            Outcome::Done
        );
        let q = &s.queues()[0];
        assert!(!q.open && !q.active);
        assert_eq!(ctl(&mut s, 4, "normal", QueueAction::Open), Outcome::Done);
        assert_eq!(
            ctl(&mut s, 5, "normal", QueueAction::Activate),
            Outcome::Done
        );
        assert_eq!(submit(&mut s, 6, spec(&["x"])), Outcome::Submitted(1));
        rejected_with(
            &ctl(&mut s, 7, "gpu", QueueAction::Open),
            Status::NoEnt,
            "gpu",
        );
    }

    #[test]
    fn barrier_defines_queues_and_keeps_operator_state() {
        let mut s = State::default();
        s.apply(
            1,
            Command::ControlQueue {
                token: RequestToken(1),
                name: "normal".into(),
                action: QueueAction::Close,
            },
        );
        let defs = vec![
            QueueDef {
                name: "normal".into(),
                priority: 10,
                on_host_lost: LostPolicy::Requeue,
            },
            QueueDef {
                name: "high".into(),
                priority: 50,
                on_host_lost: LostPolicy::Exit,
            },
        ];
        s.apply(
            2,
            Command::Barrier {
                term: 3,
                queues: defs,
            },
        );
        let qs = s.queues();
        assert_eq!(qs[0].name, "high");
        assert_eq!(
            (qs[1].name.as_str(), qs[1].priority, qs[1].open),
            ("normal", 10, false)
        );
    }

    #[test]
    fn counts_per_queue() {
        let mut s = State::default();
        for t in 0..3 {
            submit(&mut s, t, spec(&["x"]));
        }
        s.apply(
            5,
            Command::ControlJob {
                token: RequestToken(99),
                id: 2,
                action: JobAction::Kill,
            },
        );
        let q = &s.queues()[0];
        assert_eq!((q.pending, q.running), (2, 0));
        let filter = JobFilter {
            queue: None,
            states: vec![JobState::Exited],
        };
        assert_eq!(s.jobs(&filter).len(), 1);
    }

    #[test]
    fn hosts_register_close_and_go_unavailable() {
        let mut s = State::default();
        let attrs = HostAttributes {
            name: "w1".into(),
            cpus: 4,
            mem_mb: 1000,
            spool_dir: "/spool".into(),
        };
        let register = |s: &mut State, t, attrs: HostAttributes| {
            s.apply(
                1,
                Command::RegisterHost {
                    token: RequestToken(t),
                    host: attrs,
                    held: vec![],
                },
            )
        };
        let joined = Outcome::Resynced {
            orders: vec![],
            restart: vec![],
        };
        assert_eq!(register(&mut s, 1, attrs.clone()), joined);
        assert_eq!(s.hosts()[0].state, HostState::Ok);
        let close = Command::ControlHost {
            token: RequestToken(2),
            name: "w1".into(),
            action: HostAction::Close,
        };
        assert_eq!(s.apply(1, close), Outcome::Done);
        assert_eq!(s.hosts()[0].state, HostState::Closed);
        let down = Command::SetHostAvailable {
            name: "w1".into(),
            available: false,
        };
        assert_eq!(s.apply(1, down), Outcome::Done);
        assert_eq!(s.hosts()[0].state, HostState::Unavailable);
        // Re-joining brings it back, still closed, with new attributes.
        let mut bigger = attrs.clone();
        bigger.cpus = 8;
        assert_eq!(register(&mut s, 3, bigger), joined);
        assert_eq!(
            (s.hosts()[0].state, s.hosts()[0].cpus),
            (HostState::Closed, 8)
        );
        rejected_with(
            &register(
                &mut s,
                4,
                HostAttributes {
                    name: "bad name".into(),
                    cpus: 1,
                    mem_mb: 0,
                    spool_dir: "/spool".into(),
                },
            ),
            Status::Invalid,
            "host.name",
        );
        let missing = Command::ControlHost {
            token: RequestToken(5),
            name: "w9".into(),
            action: HostAction::Open,
        };
        rejected_with(&s.apply(1, missing), Status::NoEnt, "w9");
    }

    #[test]
    fn dispatch_start_finish_with_attempt_fencing() {
        let mut s = State::default();
        s.apply(
            1,
            Command::RegisterHost {
                token: RequestToken(100),
                host: HostAttributes {
                    name: "w1".into(),
                    cpus: 2,
                    mem_mb: 0,
                    spool_dir: "/spool".into(),
                },
                held: vec![],
            },
        );
        let mut two = spec(&["x"]);
        two.cpus = 2;
        submit(&mut s, 1, two.clone());
        submit(&mut s, 2, two);
        let dispatch = |s: &mut State, t, id| {
            s.apply(
                2,
                Command::Dispatch {
                    token: RequestToken(t),
                    id,
                    host: "w1".into(),
                },
            )
        };
        assert_eq!(dispatch(&mut s, 10, 1), Outcome::Done);
        rejected_with(&dispatch(&mut s, 11, 1), Status::Conflict, "not pending");
        rejected_with(
            &dispatch(&mut s, 12, 2),
            Status::Conflict,
            "0 of 2 cpus free",
        );
        assert_eq!(s.hosts()[0].cpus_used, 2);
        let job = s.job(1).unwrap();
        assert_eq!(
            (job.state, job.attempt, job.host.as_deref()),
            (JobState::Dispatched, 1, Some("w1"))
        );
        let started = |t, attempt| Command::JobStarted {
            token: RequestToken(t),
            id: 1,
            attempt,
            host: "w1".into(),
        };
        rejected_with(&s.apply(3, started(20, 7)), Status::Conflict, "stale");
        assert_eq!(s.apply(3, started(21, 1)), Outcome::Done);
        assert_eq!(s.job(1).unwrap().state, JobState::Running);
        let finished = |t, end| Command::JobFinished {
            token: RequestToken(t),
            id: 1,
            attempt: 1,
            host: "w1".into(),
            end,
        };
        assert_eq!(s.apply(4, finished(30, JobEnd::Exit(3))), Outcome::Done);
        let job = s.job(1).unwrap().clone();
        assert_eq!(
            (job.state, job.exit_code, job.end_time_ms),
            (JobState::Exited, Some(3), Some(4))
        );
        // The same end reported again with a new token (as after a worker restart) is refused
        // and changes nothing; with its own token it is a duplicate.
        rejected_with(
            &s.apply(5, finished(31, JobEnd::Exit(0))),
            Status::Conflict,
            "stale",
        );
        assert!(matches!(
            s.apply(5, finished(30, JobEnd::Exit(3))),
            Outcome::Duplicate(_)
        ));
        assert_eq!(s.job(1).unwrap(), &job);
        // The host has room again.
        assert_eq!(dispatch(&mut s, 13, 2), Outcome::Done);
    }

    /// A state with host `w1` (8 cpus) and `n` one-cpu jobs in `normal`, all dispatched to
    /// `w1` and reported started (attempt 1).
    fn running_on_w1(n: u64) -> State {
        let mut s = State::default();
        s.apply(0, join_cmd(900, "w1", vec![]));
        for id in 1..=n {
            submit(&mut s, 1000 + id as u128, spec(&["sleep", "9"]));
            let t = 2000 + id as u128 * 10;
            let placed = s.apply(
                1,
                Command::Dispatch {
                    token: RequestToken(t),
                    id,
                    host: "w1".into(),
                },
            );
            assert_eq!(placed, Outcome::Done);
            let started = s.apply(
                2,
                Command::JobStarted {
                    token: RequestToken(t + 1),
                    id,
                    attempt: 1,
                    host: "w1".into(),
                },
            );
            assert_eq!(started, Outcome::Done);
        }
        s
    }

    fn join_cmd(t: u128, host: &str, held: Vec<HeldJob>) -> Command {
        Command::RegisterHost {
            token: RequestToken(t),
            host: HostAttributes {
                name: host.into(),
                cpus: 8,
                mem_mb: 0,
                spool_dir: "/spool".into(),
            },
            held,
        }
    }

    fn control(s: &mut State, t: u128, id: JobId, action: JobAction) -> Outcome {
        s.apply(
            5,
            Command::ControlJob {
                token: RequestToken(t),
                id,
                action,
            },
        )
    }

    fn finish(s: &mut State, t: u128, id: JobId, attempt: u32, end: JobEnd) -> Outcome {
        s.apply(
            9,
            Command::JobFinished {
                token: RequestToken(t),
                id,
                attempt,
                host: "w1".into(),
                end,
            },
        )
    }

    fn order(id: JobId, attempt: u32, signal: JobSignal) -> JobOrder {
        JobOrder {
            id,
            attempt,
            signal,
        }
    }

    fn held(id: JobId, attempt: u32, phase: HeldPhase) -> HeldJob {
        HeldJob { id, attempt, phase }
    }

    fn signalled(host: &str, o: JobOrder) -> Outcome {
        Outcome::Signal {
            host: host.into(),
            order: o,
        }
    }

    #[test]
    fn suspend_resume_and_kill_a_running_job_through_its_worker() {
        let mut s = running_on_w1(1);
        assert_eq!(
            control(&mut s, 1, 1, JobAction::Suspend),
            signalled("w1", order(1, 1, JobSignal::Suspend))
        );
        assert_eq!(s.job(1).unwrap().state, JobState::Suspended);
        rejected_with(
            &control(&mut s, 2, 1, JobAction::Suspend),
            Status::Conflict,
            "suspended",
        );
        assert_eq!(
            control(&mut s, 3, 1, JobAction::Resume),
            signalled("w1", order(1, 1, JobSignal::Resume))
        );
        assert_eq!(s.job(1).unwrap().state, JobState::Running);
        // Kill is asked of the worker; the job keeps its cpus until the worker reports the end.
        assert_eq!(
            control(&mut s, 4, 1, JobAction::Kill),
            signalled("w1", order(1, 1, JobSignal::Kill))
        );
        assert_eq!(
            (s.job(1).unwrap().state, s.hosts()[0].cpus_used),
            (JobState::Running, 1)
        );
        rejected_with(
            &control(&mut s, 5, 1, JobAction::Kill),
            Status::Conflict,
            "already being ended",
        );
        rejected_with(
            &control(&mut s, 6, 1, JobAction::Suspend),
            Status::Conflict,
            "being ended",
        );
        assert_eq!(finish(&mut s, 7, 1, 1, JobEnd::Signal(15)), Outcome::Done);
        let job = s.job(1).unwrap();
        assert_eq!(
            (job.state, job.reason.as_deref(), job.signal),
            (JobState::Exited, Some("killed"), Some(15))
        );
        assert!(s.intents.is_empty());
    }

    #[test]
    fn requeue_waits_for_the_attempt_to_end_and_fences_it() {
        let mut s = running_on_w1(1);
        assert_eq!(
            control(&mut s, 1, 1, JobAction::Requeue),
            signalled("w1", order(1, 1, JobSignal::Kill))
        );
        assert_eq!(finish(&mut s, 2, 1, 1, JobEnd::Signal(15)), Outcome::Done);
        let job = s.job(1).unwrap().clone();
        assert_eq!(
            (job.state, job.host, job.attempt),
            (JobState::Pending, None, 1)
        );
        assert_eq!(job.pend_reason.as_deref(), Some(PEND_REQUEUED));
        assert_eq!(
            (job.exit_code, job.signal, job.start_time_ms),
            (None, None, None)
        );
        // The old attempt can no longer change the job.
        rejected_with(
            &finish(&mut s, 3, 1, 1, JobEnd::Exit(0)),
            Status::Conflict,
            "stale",
        );
        assert_eq!(
            s.apply(
                10,
                Command::Dispatch {
                    token: RequestToken(4),
                    id: 1,
                    host: "w1".into()
                }
            ),
            Outcome::Done
        );
        assert_eq!(s.job(1).unwrap().attempt, 2);
        let old_start = Command::JobStarted {
            token: RequestToken(5),
            id: 1,
            attempt: 1,
            host: "w1".into(),
        };
        rejected_with(&s.apply(11, old_start), Status::Conflict, "stale");
        // A finished job can be requeued too (run again).
        assert_eq!(finish(&mut s, 6, 1, 2, JobEnd::Exit(0)), Outcome::Done);
        assert_eq!(control(&mut s, 7, 1, JobAction::Requeue), Outcome::Done);
        assert_eq!(s.job(1).unwrap().state, JobState::Pending);
        rejected_with(
            &control(&mut s, 8, 1, JobAction::Requeue),
            Status::Conflict,
            "pending",
        );
    }

    #[test]
    fn resync_fences_stale_copies_resends_undelivered_starts_and_loses_missing_jobs() {
        // Jobs 1-4 run on w1; job 5 is only dispatched.
        let mut s = running_on_w1(4);
        submit(&mut s, 50, spec(&["true"]));
        s.apply(
            1,
            Command::Dispatch {
                token: RequestToken(51),
                id: 5,
                host: "w1".into(),
            },
        );
        control(&mut s, 52, 2, JobAction::Suspend);
        control(&mut s, 53, 3, JobAction::Kill);
        let outcome = s.apply(
            20,
            join_cmd(
                60,
                "w1",
                vec![
                    held(1, 1, HeldPhase::Running),  // current: nothing to do
                    held(2, 1, HeldPhase::Running),  // missed its suspend
                    held(3, 1, HeldPhase::Running),  // being killed: kill again
                    held(9, 4, HeldPhase::Running),  // unknown to the controller: fenced
                    held(1, 7, HeldPhase::Finished), // stale but over: its report will be refused
                ],
            ),
        );
        assert_eq!(
            outcome,
            Outcome::Resynced {
                orders: vec![
                    order(2, 1, JobSignal::Suspend),
                    order(3, 1, JobSignal::Kill),
                    order(9, 4, JobSignal::Kill),
                ],
                // Job 5's start never reached the worker: it is sent again, same attempt.
                restart: vec![5],
            }
        );
        // Job 4 was running, and the worker does not have it: lost, requeued by policy.
        let job = s.job(4).unwrap();
        assert_eq!((job.state, job.host.as_deref()), (JobState::Pending, None));
        assert_eq!(
            job.pend_reason.as_deref(),
            Some("requeued: lost by its worker on w1")
        );
        assert_eq!(s.job(5).unwrap().state, JobState::Dispatched);
        // A copy of the lost attempt that shows up later is fenced.
        let late = s.apply(21, join_cmd(61, "w1", vec![held(4, 1, HeldPhase::Running)]));
        let Outcome::Resynced { orders, .. } = late else {
            panic!("{late:?}")
        };
        assert!(orders.contains(&order(4, 1, JobSignal::Kill)));
    }

    #[test]
    fn lost_hosts_requeue_or_exit_per_queue_policy_and_honour_kills() {
        let mut s = running_on_w1(2);
        s.apply(
            0,
            Command::Barrier {
                term: 1,
                queues: vec![QueueDef {
                    name: "strict".into(),
                    priority: 1,
                    on_host_lost: LostPolicy::Exit,
                }],
            },
        );
        let mut strict = spec(&["sleep", "1"]);
        strict.queue = "strict".into();
        submit(&mut s, 70, strict);
        s.apply(
            1,
            Command::Dispatch {
                token: RequestToken(71),
                id: 3,
                host: "w1".into(),
            },
        );
        control(&mut s, 72, 2, JobAction::Kill);
        rejected_with(
            &s.apply(30, Command::HostLost { name: "w1".into() }),
            Status::Conflict,
            "available again",
        );
        s.apply(
            30,
            Command::SetHostAvailable {
                name: "w1".into(),
                available: false,
            },
        );
        assert_eq!(s.unavailable_hosts_with_jobs(), vec!["w1".to_string()]);
        assert_eq!(
            s.apply(31, Command::HostLost { name: "w1".into() }),
            Outcome::Done
        );
        let (a, b, c) = (s.job(1).unwrap(), s.job(2).unwrap(), s.job(3).unwrap());
        assert_eq!(
            (a.state, a.pend_reason.as_deref()),
            (JobState::Pending, Some("requeued: host w1 lost"))
        );
        assert_eq!(
            (b.state, b.reason.as_deref()),
            (JobState::Exited, Some("killed"))
        );
        assert_eq!(
            (c.state, c.reason.as_deref()),
            (JobState::Exited, Some("host w1 lost"))
        );
        assert!(s.unavailable_hosts_with_jobs().is_empty());
        assert_eq!(s.hosts()[0].cpus_used, 0);
    }

    #[test]
    fn token_window_is_bounded() {
        let mut w = TokenWindow::default();
        for t in 0..(TOKEN_WINDOW as u128 + 10) {
            w.remember(RequestToken(t), Outcome::Done);
        }
        assert_eq!(w.outcomes.len(), TOKEN_WINDOW);
        assert!(w.get(&RequestToken(0)).is_none());
        assert!(w.get(&RequestToken(TOKEN_WINDOW as u128 + 9)).is_some());
    }

    fn command() -> impl Strategy<Value = Command> {
        let token = (0u128..60).prop_map(RequestToken);
        let host = prop_oneof![Just("w1"), Just("w2")].prop_map(String::from);
        let id = 0u64..8;
        let attempt = 0u32..3;
        let action = prop_oneof![
            Just(JobAction::Kill),
            Just(JobAction::Suspend),
            Just(JobAction::Resume),
            Just(JobAction::Requeue)
        ];
        let phase = prop_oneof![
            Just(HeldPhase::Running),
            Just(HeldPhase::Suspended),
            Just(HeldPhase::Finished)
        ];
        let held = (id.clone(), attempt.clone(), phase).prop_map(|(id, attempt, phase)| HeldJob {
            id,
            attempt,
            phase,
        });
        let end = prop_oneof![
            (0i32..3).prop_map(JobEnd::Exit),
            Just(JobEnd::Signal(9)),
            Just(JobEnd::Failed("no".into()))
        ];
        prop_oneof![
            (
                token.clone(),
                prop::collection::vec("[a-z ]{0,3}", 0..3),
                -1i32..3,
                prop_oneof![Just(""), Just("normal"), Just("x")]
            )
                .prop_map(|(token, command, cpus, queue)| Command::Submit {
                    token,
                    spec: JobSpec {
                        command,
                        cpus,
                        queue: queue.into(),
                        ..JobSpec::default()
                    },
                }),
            (token.clone(), id.clone(), action)
                .prop_map(|(token, id, action)| Command::ControlJob { token, id, action }),
            (
                token.clone(),
                prop_oneof![Just("normal"), Just("x")],
                prop_oneof![Just(QueueAction::Open), Just(QueueAction::Close)]
            )
                .prop_map(|(token, name, action)| Command::ControlQueue {
                    token,
                    name: name.into(),
                    action
                }),
            (
                token.clone(),
                host.clone(),
                1u32..3,
                prop::collection::vec(held, 0..4)
            )
                .prop_map(|(token, name, cpus, held)| {
                    Command::RegisterHost {
                        token,
                        host: HostAttributes {
                            name,
                            cpus,
                            mem_mb: 0,
                            spool_dir: "/spool".into(),
                        },
                        held,
                    }
                }),
            (host.clone(), any::<bool>())
                .prop_map(|(name, available)| Command::SetHostAvailable { name, available }),
            host.clone().prop_map(|name| Command::HostLost { name }),
            (token.clone(), id.clone(), host.clone())
                .prop_map(|(token, id, host)| Command::Dispatch { token, id, host }),
            (token.clone(), id.clone(), attempt.clone(), host.clone()).prop_map(
                |(token, id, attempt, host)| Command::JobStarted {
                    token,
                    id,
                    attempt,
                    host
                }
            ),
            (token, id, attempt, host, end).prop_map(|(token, id, attempt, host, end)| {
                Command::JobFinished {
                    token,
                    id,
                    attempt,
                    host,
                    end,
                }
            }),
        ]
    }

    /// What must hold after every command, whatever the order of events.
    fn check_invariants(s: &State) -> Result<(), TestCaseError> {
        for job in s.jobs.values() {
            if is_placed(job.state) {
                prop_assert!(job.host.is_some() && job.attempt > 0, "{:?}", job);
            }
            if job.state == JobState::Pending {
                prop_assert!(job.host.is_none(), "{:?}", job);
            }
        }
        for id in s.intents.keys() {
            let state = s.job(*id).map(|j| j.state);
            prop_assert!(
                state.is_some_and(is_placed),
                "intent left on job {} ({:?})",
                id,
                state
            );
        }
        Ok(())
    }

    proptest! {
        /// Replicas that apply the same log agree; ids are dense and in order; a final job
        /// never changes again; re-applying a whole log changes nothing (every write is
        /// deduplicated by its token).
        #[test]
        fn apply_is_deterministic_and_idempotent(cmds in prop::collection::vec(command(), 0..60)) {
            let (mut a, mut b) = (State::default(), State::default());
            for (i, cmd) in cmds.iter().enumerate() {
                let finals: Vec<Job> = a.jobs.values().filter(|j| j.state.is_final()).cloned().collect();
                let attempts: Vec<(JobId, u32)> = a.jobs.values().map(|j| (j.id, j.attempt)).collect();
                let requeue = matches!(cmd, Command::ControlJob { action: JobAction::Requeue, .. });
                let dispatch = matches!(cmd, Command::Dispatch { .. });
                let oa = a.apply(i as u64, cmd.clone());
                let ob = b.apply(i as u64, cmd.clone());
                prop_assert_eq!(&oa, &ob);
                // Only an operator's requeue brings a final job back.
                if !requeue {
                    for j in finals {
                        prop_assert_eq!(a.job(j.id), Some(&j));
                    }
                }
                // Attempts only grow, and only by a dispatch.
                for (id, before) in attempts {
                    let now = a.job(id).map(|j| j.attempt).unwrap_or(0);
                    prop_assert!(now == before || (dispatch && now == before + 1));
                }
                // A dispatch that was accepted left its host within its cpus.
                if let (Command::Dispatch { host, .. }, Outcome::Done) = (cmd, &oa) {
                    let h = a.hosts().into_iter().find(|h| &h.name == host).unwrap();
                    prop_assert!(h.cpus_used <= h.cpus, "{:?}", h);
                }
                check_invariants(&a)?;
            }
            prop_assert_eq!(&a, &b);
            let ids: Vec<JobId> = a.jobs.keys().copied().collect();
            prop_assert_eq!(ids, (1..a.next_job_id).collect::<Vec<_>>());
            // Liveness commands carry no token: the primary proposes them from fresh state.
            let snapshot = a.clone();
            for cmd in cmds.into_iter().filter(|c| c.token().is_some()) {
                a.apply(0, cmd);
            }
            prop_assert_eq!(a, snapshot);
        }
    }
}
