//! Rust-side domain types shared by the controller, the daemons, the CLI and the HTTP API.
//! The wire form lives in `xce-proto`; conversions are in [`crate::wire`], JSON shapes in
//! [`crate::json`].

use serde::{Deserialize, Serialize};

/// A job id: small integers assigned in log order (`Job <42>`).
pub type JobId = u64;

/// The client-generated token that makes a write idempotent: the controller applies a token
/// once and answers any repeat with `dupJob` and the original result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RequestToken(pub u128);

impl RequestToken {
    /// A fresh random token; 128 random bits make collisions between clients negligible.
    pub fn random() -> Self {
        RequestToken(rand::random())
    }
}

/// What a user asks to run.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct JobSpec {
    pub name: String,
    pub user: String,
    /// Empty means the controller's default queue.
    pub queue: String,
    pub command: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: String,
    /// Signed so that a negative request reaches validation and is rejected by name.
    pub cpus: i32,
    pub mem_mb: i64,
    pub priority: i32,
}

/// Job life cycle: `pending → dispatched → running ⇄ suspended → done | exited`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    Pending,
    Dispatched,
    Running,
    Suspended,
    Done,
    Exited,
}

impl JobState {
    /// All states, in life-cycle order.
    pub const ALL: [JobState; 6] = [
        JobState::Pending,
        JobState::Dispatched,
        JobState::Running,
        JobState::Suspended,
        JobState::Done,
        JobState::Exited,
    ];

    /// The contract name (`pending`, ...).
    pub fn name(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Dispatched => "dispatched",
            JobState::Running => "running",
            JobState::Suspended => "suspended",
            JobState::Done => "done",
            JobState::Exited => "exited",
        }
    }

    /// Whether the job has ended for good.
    pub fn is_final(self) -> bool {
        matches!(self, JobState::Done | JobState::Exited)
    }
}

/// A job as the controller knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    pub id: JobId,
    pub spec: JobSpec,
    pub state: JobState,
    /// Why a pending job waits.
    pub pend_reason: Option<String>,
    /// Why a job ended as it did ("killed", ...).
    pub reason: Option<String>,
    pub host: Option<String>,
    /// Dispatch attempt; fences stale copies of a job so it never runs twice at once.
    pub attempt: u32,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Milliseconds since the Unix epoch, stamped by the primary that proposed the change.
    pub submit_time_ms: u64,
    pub start_time_ms: Option<u64>,
    pub end_time_ms: Option<u64>,
    /// The spool dir on `host` holding the latest attempt's `<id>.<attempt>.out|err`.
    pub output_dir: Option<String>,
}

/// A job control action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobAction {
    Kill,
    Suspend,
    Resume,
    Requeue,
}

/// A queue and, in replies, its job counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Queue {
    pub name: String,
    pub priority: i32,
    pub open: bool,
    pub active: bool,
    pub pending: u32,
    pub running: u32,
}

/// A queue control action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum QueueAction {
    Open,
    Close,
    Activate,
    Inactivate,
}

impl QueueAction {
    /// The CLI/HTTP verb.
    pub fn name(self) -> &'static str {
        match self {
            QueueAction::Open => "open",
            QueueAction::Close => "close",
            QueueAction::Activate => "activate",
            QueueAction::Inactivate => "inactivate",
        }
    }
}

/// A controller's role as the answering primary sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemberRole {
    Primary,
    Standby,
    Unreachable,
}

/// One controller candidate in a cluster report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub name: String,
    pub addr: String,
    pub role: MemberRole,
}

/// The cluster as the primary sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterInfo {
    pub primary: Option<String>,
    pub term: u64,
    pub members: Vec<Member>,
}

/// Which jobs a listing returns; empty fields mean "any".
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct JobFilter {
    pub queue: Option<String>,
    pub states: Vec<JobState>,
}

impl JobFilter {
    /// Whether `job` passes the filter.
    pub fn matches(&self, job: &Job) -> bool {
        self.queue.as_ref().is_none_or(|q| *q == job.spec.queue)
            && (self.states.is_empty() || self.states.contains(&job.state))
    }
}

/// Whether a host takes jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HostState {
    Ok,
    /// Closed by an operator: no new jobs.
    Closed,
    /// Its worker stopped heartbeating for longer than the TTL.
    Unavailable,
}

impl HostState {
    /// The contract name (`ok`, `closed`, `unavailable`).
    pub fn name(self) -> &'static str {
        match self {
            HostState::Ok => "ok",
            HostState::Closed => "closed",
            HostState::Unavailable => "unavailable",
        }
    }
}

/// A worker host as the controller reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    pub name: String,
    pub cpus: u32,
    pub mem_mb: u64,
    pub state: HostState,
    pub running: u32,
    pub cpus_used: u32,
}

/// A host control action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HostAction {
    Open,
    Close,
}

/// Who a joining daemon is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    User,
    Worker,
    Scheduler,
    Apiserver,
}

/// What a worker reports about its host when it joins.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct HostAttributes {
    pub name: String,
    pub cpus: u32,
    pub mem_mb: u64,
    /// Where the worker writes job output, so that users can be told where to look.
    pub spool_dir: String,
}

/// How a job attempt ended, as its worker saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobEnd {
    /// The process exited with this code.
    Exit(i32),
    /// The process was killed by this signal.
    Signal(i32),
    /// It never ran; the reason ("command not found: ...").
    Failed(String),
}

/// A signal the primary sends to one attempt's process group through the worker's agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum JobSignal {
    /// SIGTERM, then SIGKILL after the worker's grace period.
    Kill,
    /// SIGSTOP.
    Suspend,
    /// SIGCONT.
    Resume,
}

/// What the primary tells a worker to do with one attempt it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct JobOrder {
    pub id: JobId,
    pub attempt: u32,
    pub signal: JobSignal,
}

/// Where an attempt stands on the worker that holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HeldPhase {
    Running,
    Suspended,
    /// Ended; its end report is not acknowledged yet.
    Finished,
}

/// One attempt a worker holds, as it reports it at every join (resync).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HeldJob {
    pub id: JobId,
    pub attempt: u32,
    pub phase: HeldPhase,
}
