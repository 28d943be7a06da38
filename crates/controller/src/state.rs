//! The replicated cluster state and its pure transition function.
//!
//! Sans-I/O: no sockets, clocks or files. Every replica applies the same commands in log order
//! and reaches the same state; the time a command carries was stamped by the primary that
//! proposed it, so replicas never read their own clocks here.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use xce_client::types::{
    Host, HostAction, HostAttributes, HostState, Job, JobAction, JobEnd, JobFilter, JobId, JobSpec,
    JobState, Queue, QueueAction, RequestToken,
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

/// A queue definition, as given in the controller configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueDef {
    pub name: String,
    pub priority: i32,
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
    /// A worker joined (or re-joined) with its host's attributes.
    RegisterHost {
        token: RequestToken,
        host: HostAttributes,
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
            Command::Barrier { .. } | Command::SetHostAvailable { .. } => None,
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
}

/// A host as stored. `available` is liveness (heartbeats); `closed` is operator state; the
/// reported state is `unavailable` before `closed` before `ok`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostRecord {
    pub cpus: u32,
    pub mem_mb: u64,
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
            },
        );
        State {
            next_job_id: 1,
            jobs: BTreeMap::new(),
            queues,
            hosts: BTreeMap::new(),
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
        Command::RegisterHost { host, .. } => 64 + host.name.len(),
        Command::SetHostAvailable { name, .. } => 32 + name.len(),
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
            Command::RegisterHost { host, .. } => self.register_host(host),
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
            },
        );
        Outcome::Submitted(id)
    }

    fn control_job(&mut self, at_ms: u64, id: JobId, action: JobAction) -> Outcome {
        let Some(job) = self.jobs.get_mut(&id) else {
            return Outcome::rejected(Status::NoEnt, format!("job {id}: no such job"));
        };
        match (action, job.state) {
            (JobAction::Kill, JobState::Pending) => {
                job.state = JobState::Exited;
                job.pend_reason = None;
                job.reason = Some("killed".into());
                job.end_time_ms = Some(at_ms);
                Outcome::Done
            }
            (_, state) if state.is_final() => Outcome::rejected(
                Status::Conflict,
                format!("job {id}: already {}", state.name()),
            ),
            (action, state) => Outcome::rejected(
                Status::Conflict,
                format!(
                    "job {id}: cannot {} a job that is {}",
                    format!("{action:?}").to_lowercase(),
                    state.name()
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
                .and_modify(|q| q.priority = def.priority)
                .or_insert(QueueState {
                    priority: def.priority,
                    open: true,
                    active: true,
                });
        }
        Outcome::Done
    }

    fn register_host(&mut self, attrs: HostAttributes) -> Outcome {
        if let Err(message) = validate_host_name(&attrs.name) {
            return Outcome::rejected(Status::Invalid, message);
        }
        if attrs.cpus == 0 {
            return Outcome::rejected(Status::Invalid, "cpus: a host needs at least one cpu");
        }
        let record = self.hosts.entry(attrs.name).or_insert(HostRecord {
            cpus: attrs.cpus,
            mem_mb: attrs.mem_mb,
            closed: false,
            available: true,
        });
        record.cpus = attrs.cpus;
        record.mem_mb = attrs.mem_mb;
        record.available = true;
        Outcome::Done
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
        let mut running = 0;
        let mut cpus = 0;
        for j in self.jobs.values() {
            if j.host.as_deref() == Some(host) && is_placed(j.state) {
                running += 1;
                cpus += j.spec.cpus.max(0) as u32;
            }
        }
        (running, cpus)
    }

    fn dispatch(&mut self, id: JobId, host: String) -> Outcome {
        let Some(record) = self.hosts.get(&host) else {
            return Outcome::rejected(Status::NoEnt, format!("host {host:?}: no such host"));
        };
        let (host_state, host_cpus) = (record.state(), record.cpus);
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
        if job.attempt != attempt || job.host.as_deref() != Some(host) {
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
        // Already running or ended: a repeated report changes nothing.
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
        let job = match self.current_attempt(id, attempt, host) {
            Ok(job) => job,
            Err(rejected) => return rejected,
        };
        if job.state.is_final() {
            return Outcome::Done;
        }
        job.end_time_ms = Some(at_ms);
        job.start_time_ms.get_or_insert(at_ms);
        match end {
            JobEnd::Exit(0) => {
                job.state = JobState::Done;
                job.exit_code = Some(0);
            }
            JobEnd::Exit(code) => {
                job.state = JobState::Exited;
                job.exit_code = Some(code);
            }
            JobEnd::Signal(sig) => {
                job.state = JobState::Exited;
                job.signal = Some(sig);
                job.reason = Some(format!("killed by signal {sig}"));
            }
            JobEnd::Failed(reason) => {
                job.state = JobState::Exited;
                job.reason = Some(reason);
            }
        }
        Outcome::Done
    }

    /// One host record.
    pub fn host(&self, name: &str) -> Option<&HostRecord> {
        self.hosts.get(name)
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
            },
            QueueDef {
                name: "high".into(),
                priority: 50,
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
        };
        let register = |s: &mut State, t, attrs: HostAttributes| {
            s.apply(
                1,
                Command::RegisterHost {
                    token: RequestToken(t),
                    host: attrs,
                },
            )
        };
        assert_eq!(register(&mut s, 1, attrs.clone()), Outcome::Done);
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
        assert_eq!(register(&mut s, 3, bigger), Outcome::Done);
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
                },
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
        // The same end reported again (a new token, as after a worker restart) changes nothing.
        assert_eq!(s.apply(5, finished(31, JobEnd::Exit(0))), Outcome::Done);
        assert_eq!(s.job(1).unwrap(), &job);
        // The host has room again.
        assert_eq!(dispatch(&mut s, 13, 2), Outcome::Done);
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
        let token = (0u128..40).prop_map(RequestToken);
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
            (
                token.clone(),
                0u64..12,
                prop_oneof![Just(JobAction::Kill), Just(JobAction::Suspend)]
            )
                .prop_map(|(token, id, action)| Command::ControlJob {
                    token,
                    id,
                    action
                }),
            (
                token,
                prop_oneof![Just("normal"), Just("x")],
                prop_oneof![Just(QueueAction::Open), Just(QueueAction::Close)]
            )
                .prop_map(|(token, name, action)| Command::ControlQueue {
                    token,
                    name: name.into(),
                    action
                }),
        ]
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
                let oa = a.apply(i as u64, cmd.clone());
                let ob = b.apply(i as u64, cmd.clone());
                prop_assert_eq!(&oa, &ob);
                for j in finals {
                    prop_assert_eq!(a.job(j.id), Some(&j));
                }
            }
            prop_assert_eq!(&a, &b);
            let ids: Vec<JobId> = a.jobs.keys().copied().collect();
            prop_assert_eq!(ids, (1..a.next_job_id).collect::<Vec<_>>());
            let snapshot = a.clone();
            for cmd in cmds {
                a.apply(0, cmd);
            }
            prop_assert_eq!(a, snapshot);
        }
    }
}
