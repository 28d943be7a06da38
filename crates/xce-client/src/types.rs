//! Rust-side domain types shared by the controller, the daemons, the CLI and the HTTP API.
//! The wire form lives in `xce-proto`; conversions are in [`crate::wire`], JSON shapes in
//! [`crate::json`].

use serde::{Deserialize, Serialize};

pub use crate::resources::{Limits, Resources};

/// An enum whose variants have contract names (`pending`, `open`, ...): gives it `ALL`,
/// `name()`, `Display` and a `FromStr` whose error lists what is accepted, written once for
/// every such enum (the CLI parses its arguments with it).
macro_rules! named_enum {
    ($(#[$meta:meta])* pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        pub enum $name { $($(#[$vmeta])* $variant),+ }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The contract name.
            pub fn name(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            /// Every contract name, in declaration order: what a front end lists or an
            /// OpenAPI schema enumerates, taken from here so that it cannot drift.
            pub const NAMES: &'static [&'static str] = &[$($text),+];
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl std::str::FromStr for $name {
            type Err = UnknownName;
            fn from_str(s: &str) -> Result<Self, UnknownName> {
                $name::ALL.iter().copied().find(|v| v.name() == s).ok_or_else(|| UnknownName {
                    what: stringify!($name),
                    got: s.to_string(),
                    expected: $name::ALL.iter().map(|v| v.name()).collect::<Vec<_>>().join(", "),
                })
            }
        }
    };
}

/// A name that is not one of an enum's contract names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: unknown value {got:?} (expected one of: {expected})")]
pub struct UnknownName {
    pub what: &'static str,
    pub got: String,
    pub expected: String,
}

/// A job id: small integers assigned in log order (`Job <42>`).
pub type JobId = u64;

/// The client-generated token that makes a write idempotent: the controller applies a token
/// once and answers any repeat with `dupJob` and the original result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RequestToken(pub u128);

impl RequestToken {
    /// A fresh random token; 128 random bits make collisions between clients negligible.
    pub fn random() -> Self {
        RequestToken(crate::random::u128())
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
    /// What the job is given while it runs (cpus 0 means the default, 1).
    pub resources: Resources,
    pub priority: i32,
    pub limits: Limits,
    /// The job script, by content (its bytes are stored once per distinct content, in the
    /// controller's script table); with one, `command` holds the script's arguments.
    pub script: Option<ScriptId>,
    /// Where the job's standard output goes, an `output_path` pattern relative to `cwd`;
    /// `None`: `xce-%j.out`.
    pub stdout: Option<String>,
    /// Where its standard error goes; `None`: where its standard output goes.
    pub stderr: Option<String>,
    /// `None`: truncate on the first attempt, append on later ones (no attempt's output is
    /// lost to a requeue).
    pub open_mode: Option<OpenMode>,
    /// Held: not placed until released (`--hold`, `xce hold`).
    pub hold: bool,
    /// Not placed before this time (milliseconds since the Unix epoch; `--begin`).
    pub begin_time_ms: Option<u64>,
    /// A signal the job gets some time before its time limit (`--signal`).
    pub warn_signal: Option<Warning>,
    /// A job whose host is lost ends `node_fail` instead of running again (`--no-requeue`).
    pub no_requeue: bool,
    /// What it waits for before it may be placed (`--dependency`).
    pub dependency: Option<crate::dependency::Expr>,
    /// Whether it is cancelled once its dependency can never be met (`--kill-on-invalid-dep`);
    /// `None`: the cluster's default, which the submit service fills in.
    pub kill_on_invalid_dep: Option<bool>,
    /// Submitted as an array of tasks (`--array`): this record holds them until each is
    /// split off into a job of its own as it is placed.
    pub array: Option<crate::array::ArraySpec>,
    /// The account its use is charged to (`--account`); empty: none. Where the controller's
    /// configuration has accounts, the submit fills in the user's default and refuses an
    /// account the user is not in (from cluster version 13).
    pub account: String,
}

pub use crate::script::ScriptId;
pub use crate::signals::Warning;

named_enum! {
    /// How a job's output files are opened (`--open-mode`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum OpenMode {
        Append => "append",
        Truncate => "truncate",
    }
}

named_enum! {
    /// Where a job's dependency stands: decided by the controller as its parents start and
    /// end (`xce_client::dependency`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum DependencyState {
        /// Some condition may still be met: not placed yet.
        Waiting => "waiting",
        /// Met: placed like any job.
        Satisfied => "satisfied",
        /// Can never be met (the job's `pend_reason` says why): stays pending, or is
        /// cancelled with `--kill-on-invalid-dep`.
        Never => "never",
    }
}

named_enum! {
    /// Job life cycle: `pending → dispatched → running ⇄ suspended → done | exited`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum JobState {
        Pending => "pending",
        Dispatched => "dispatched",
        Running => "running",
        Suspended => "suspended",
        Done => "done",
        Exited => "exited",
    }
}

impl JobState {
    /// Whether the job has ended for good.
    pub fn is_final(self) -> bool {
        matches!(self, JobState::Done | JobState::Exited)
    }
}

named_enum! {
    /// How a job that ended, ended: apart from its lifecycle `state`, so that a new way to end
    /// is a new result, never a new state. Front ends map the pair (squeue's `TO`, bjobs'
    /// `EXIT`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
    pub enum JobResult {
        /// It exited with code 0.
        Completed => "completed",
        /// It exited non-zero, was killed by a signal, or never started.
        Failed => "failed",
        /// A person killed it, pending or running.
        Cancelled => "cancelled",
        /// It ran past its time limit.
        Timeout => "timeout",
        /// The kernel killed it for going over its memory limit.
        OutOfMemory => "out_of_memory",
        /// Its host was lost while it ran.
        NodeFail => "node_fail",
    }
}

named_enum! {
    /// Why a pending job waits, as a code front ends can map (Slurm's squeue `%r`); the
    /// human text is the job's `pend_reason`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
    pub enum PendCode {
        /// It fits some host when that host is free, and none has room now.
        Resources => "resources",
        /// A job before it in the order waits for room; it may not overtake.
        Priority => "priority",
        /// No scheduler holds the lease.
        NoScheduler => "no_scheduler",
        /// Its queue is inactive (or gone).
        QueueInactive => "queue_inactive",
        /// No host could run it even when empty.
        TooBig => "too_big",
        /// Held by a user or operator.
        Held => "held",
        /// Its begin time has not come.
        BeginTime => "begin_time",
        /// It waits for other jobs.
        Dependency => "dependency",
        /// A limit of its user, account or queue holds it back.
        Limit => "limit",
    }
}

impl PendCode {
    /// The code of a reason a scheduler gave as text alone (format 6 had no codes): what a
    /// pending job's code is when it comes from such a record or such a scheduler. Every
    /// reason today's scheduler gives reads back as its own code (the scheduler's tests check
    /// it), so nothing is lost while a cluster still writes format 6.
    pub fn of_v6_text(text: &str) -> PendCode {
        if text.starts_with("queue ") {
            PendCode::QueueInactive
        } else if text.starts_with("waiting behind") {
            PendCode::Priority
        } else if text.starts_with("no host runs")
            || (text.starts_with("no host with") && !text.contains("free"))
        {
            PendCode::TooBig
        } else {
            PendCode::Resources
        }
    }
}

/// Why a pending job waits: a code and the human text that says it with figures.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PendReason {
    pub code: PendCode,
    pub text: String,
    /// The start reserved for the job, which no later job may delay (ms since the epoch).
    pub expected_start_ms: Option<u64>,
}

impl PendReason {
    /// A reason with its code and text.
    pub fn new(code: PendCode, text: impl Into<String>) -> PendReason {
        PendReason {
            code,
            text: text.into(),
            expected_start_ms: None,
        }
    }
}

/// A job as the controller knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    pub id: JobId,
    pub spec: JobSpec,
    pub state: JobState,
    /// Why a pending job waits, in words.
    pub pend_reason: Option<String>,
    /// Why a pending job waits, as a code; `None` unless pending (and until a scheduler
    /// judged it).
    pub pend_code: Option<PendCode>,
    /// Why a job ended as it did ("killed", ...), in words only.
    pub reason: Option<String>,
    /// How it ended; `None` until it has.
    pub result: Option<JobResult>,
    pub host: Option<String>,
    /// Dispatch attempt; fences stale copies of a job so it never runs twice at once.
    pub attempt: u32,
    /// How many of its attempts started (at most `attempt`): an attempt killed before it
    /// started, or sent ahead and ended while it waited on its host, never ran, and
    /// `afternotok` is met only by a job that ran. On clusters before version 12 every
    /// dispatch counted (`attempt`).
    pub runs: u32,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Milliseconds since the Unix epoch, stamped by the primary that proposed the change.
    pub submit_time_ms: u64,
    pub start_time_ms: Option<u64>,
    pub end_time_ms: Option<u64>,
    /// The spool dir on `host` holding the latest attempt's `<id>.<attempt>.out|err`.
    pub output_dir: Option<String>,
    /// Who cancelled it (a pending job at once, a running one once its kill is asked);
    /// `None` if no one did, or the cluster ran without authentication.
    pub cancelled_by: Option<String>,
    /// Where its dependency stands; `None` without one.
    pub dependency_state: Option<DependencyState>,
    /// An array's own record: its tasks not yet split off, and how the others stand.
    pub array: Option<ArrayProgress>,
    /// A task of an array: which, and what its environment says of the array.
    pub array_task: Option<ArrayTask>,
    /// When a pending job is expected to start at the latest: the start the scheduler's
    /// backfill reserved for it (ms since the epoch; from cluster version 13). `None` for a
    /// job with no reservation.
    pub expected_start_ms: Option<u64>,
    /// What its attempts used, as their hosts measured them at their ends (CPU summed, the
    /// largest peak of memory); `None` until an attempt that reported it ended (from cluster
    /// version 13).
    pub usage: Option<Usage>,
    /// Its attempts that started, oldest first, at most [`MAX_ATTEMPT_RUNS`] (the latest);
    /// from cluster version 13.
    pub attempts: Vec<AttemptRun>,
}

/// An array's tasks, as its own record keeps them: those not yet split off (one set of index
/// runs however many), and counts of the others.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ArrayProgress {
    pub pending: crate::array::TaskSet,
    /// Split off, and pending as jobs of their own (requeued).
    pub waiting: u64,
    /// Split off and placed (dispatched, running or suspended).
    pub running: u64,
    /// Ended `completed`.
    pub completed: u64,
    /// Ended otherwise, having run.
    pub failed: u64,
    /// Ended without running (killed while pending in the array).
    pub unrun: u64,
}

/// Where a job stands for what counts jobs by it (a dependency's verdict, an array's
/// counts): the one reading of started, ran and ended. A job *ran* once one of its attempts
/// started (`Job::runs`: a command that could not start did, and failed; one requeued and
/// then cancelled while pending did too; one killed before its attempt started did not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Pending.
    NotStarted,
    /// Dispatched, running or suspended.
    Running,
    /// Ended `completed`.
    Completed,
    /// Ended otherwise, having run.
    Failed,
    /// Ended without having run.
    Unrun,
}

impl Standing {
    /// Where `job` stands.
    pub fn of(job: &Job) -> Standing {
        match job.state {
            JobState::Pending => Standing::NotStarted,
            JobState::Dispatched | JobState::Running | JobState::Suspended => Standing::Running,
            JobState::Done | JobState::Exited => match job.result {
                Some(JobResult::Completed) => Standing::Completed,
                _ if job.runs > 0 => Standing::Failed,
                _ => Standing::Unrun,
            },
        }
    }
}

impl ArrayProgress {
    /// The count of split-off tasks that stand as `s` (waiting ones counted as not started).
    pub fn count_mut(&mut self, s: Standing) -> &mut u64 {
        match s {
            Standing::NotStarted => &mut self.waiting,
            Standing::Running => &mut self.running,
            Standing::Completed => &mut self.completed,
            Standing::Failed => &mut self.failed,
            Standing::Unrun => &mut self.unrun,
        }
    }

    /// Tasks that have ended, however.
    pub fn done(&self) -> u64 {
        self.completed + self.failed + self.unrun
    }

    /// Tasks not started: in the array still, or pending as jobs of their own.
    pub fn not_started(&self) -> u64 {
        self.pending.len() + self.waiting
    }
}

/// What a task knows of its array: its id and index, and the array's shape for its
/// `XCE_ARRAY_*` variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayTask {
    pub array_id: JobId,
    pub index: u32,
    pub count: u64,
    pub min: u32,
    pub max: u32,
    pub step: u32,
}

/// What one attempt of a job used, as its host measured it at its end: from the job's cgroup
/// where it has one, else from the kernel's accounting of the shim's reaped children (`wait4`
/// rusage). The accounting issue's history and fair share are built on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    /// CPU time in user mode, milliseconds.
    pub cpu_user_ms: u64,
    /// CPU time in the kernel on its behalf, milliseconds.
    pub cpu_sys_ms: u64,
    /// The most memory it held resident at once, KiB (0: not measured).
    pub max_rss_kb: u64,
}

/// One attempt of a job that started (an attempt killed before it started is none): where
/// and when it ran, how it ended and what it used, as history lists them (from cluster
/// version 13).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AttemptRun {
    /// Its attempt number (`Job::attempt` while it was the current one).
    pub attempt: u32,
    pub host: String,
    /// When it started (its start report, or its end when no report came first), ms since
    /// the epoch.
    pub start_ms: u64,
    /// When it ended; `None` while it runs.
    pub end_ms: Option<u64>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Why it ended, where no code says: its host was lost, it could not start, it was
    /// requeued.
    pub reason: Option<String>,
    /// What it used, as its host measured it at its end.
    pub usage: Option<Usage>,
}

/// The most attempt records a job keeps (the latest ones); `Job::runs` counts them all.
pub const MAX_ATTEMPT_RUNS: usize = 100;

/// What `xce update` (and hold/release) changes in a job: each field set is changed, the
/// others are kept. A pending job takes every one; a running one only a new time limit.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct JobChanges {
    pub name: Option<String>,
    pub priority: Option<i32>,
    pub queue: Option<String>,
    pub cpus: Option<u32>,
    pub mem_mb: Option<u64>,
    pub time_limit_s: Option<u32>,
    pub hold: Option<bool>,
    /// 0: now (what releases a job waiting for its begin time).
    pub begin_time_ms: Option<u64>,
}

/// What an action on an array's tasks (`xce kill 42_7`, `xce hold 42_[1-5]`, `xce update 42
/// --throttle 4`) does to each task it names: what a plain job's kill, update or signal does
/// to one job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskOp {
    Control {
        action: JobAction,
    },
    /// `throttle`: the array's new limit of tasks running at once (the whole array only).
    Update {
        changes: JobChanges,
        throttle: Option<u32>,
    },
    Signal {
        signal: i32,
        leader_only: bool,
    },
}

named_enum! {
    /// A job control action.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    pub enum JobAction {
        Kill => "kill",
        Suspend => "suspend",
        Resume => "resume",
        Requeue => "requeue",
    }
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
    /// The time limit a job that asks for none gets here (the answering controller's
    /// configuration, as it judges submits); `None`: no default.
    pub default_time_s: Option<u32>,
    /// The longest time limit a job of this queue may ask for; `None`: the cluster's.
    pub max_time_s: Option<u32>,
}

named_enum! {
    /// A queue control action (the CLI/HTTP verb).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    pub enum QueueAction {
        Open => "open",
        Close => "close",
        Activate => "activate",
        Inactivate => "inactivate",
    }
}

named_enum! {
    /// A controller's role as the answering primary sees it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum MemberRole {
        Primary => "primary",
        Standby => "standby",
        Unreachable => "unreachable",
    }
}

/// One controller candidate in a cluster report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub name: String,
    pub addr: String,
    pub role: MemberRole,
    /// The newest cluster version its build runs (its store format); `None` while the
    /// primary has not heard it.
    pub version: Option<u32>,
}

/// A scheduler the primary has heard from recently; `active` is the one holding the lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedulerInfo {
    pub name: String,
    pub active: bool,
}

/// The cluster as the primary sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterInfo {
    pub primary: Option<String>,
    pub term: u64,
    pub members: Vec<Member>,
    pub schedulers: Vec<SchedulerInfo>,
    /// The cluster version in force: what every member can apply. Raised by the primary once
    /// every member runs a build of a newer one, never lowered.
    pub active_version: u32,
    /// The version the primary's configuration holds the cluster at (`hold_version`), if
    /// any: it is not raised past it.
    pub hold_version: Option<u32>,
}

/// One scheduler decision: run the job on the host.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Placement {
    pub id: JobId,
    pub host: String,
}

/// A placement of a batch that was not made, and why (`conflict`: the world changed under
/// the decision; `noEnt`: the job or host is gone).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub id: JobId,
    pub status: xce_proto::Status,
    pub message: String,
}

/// Which jobs a listing returns; empty fields mean "any".
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct JobFilter {
    pub queue: Option<String>,
    pub states: Vec<JobState>,
    pub user: Option<String>,
    /// Only jobs of exactly this name.
    pub name: Option<String>,
    /// Only jobs that ended with one of these results (so only ended jobs, when any).
    pub results: Vec<JobResult>,
    /// Only jobs submitted at or after this time (ms since the epoch).
    pub submitted_since_ms: Option<u64>,
}

impl JobFilter {
    /// Whether `job` passes the filter. Clients apply it again to what a controller returns:
    /// a controller of an older build ignores the fields it does not know.
    pub fn matches(&self, job: &Job) -> bool {
        let JobFilter {
            queue,
            states,
            user,
            name,
            results,
            submitted_since_ms,
        } = self;
        queue.as_ref().is_none_or(|q| *q == job.spec.queue)
            && user.as_ref().is_none_or(|u| *u == job.spec.user)
            && name.as_ref().is_none_or(|n| *n == job.spec.name)
            && (states.is_empty() || states.contains(&job.state))
            && (results.is_empty() || job.result.is_some_and(|r| results.contains(&r)))
            && submitted_since_ms.is_none_or(|since| job.submit_time_ms >= since)
    }
}

/// One page of a job listing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JobPage {
    pub jobs: Vec<Job>,
    /// The `after` of the next page; `None` when this page was the last.
    pub next: Option<JobId>,
}

named_enum! {
    /// Whether a host takes jobs.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum HostState {
        Ok => "ok",
        /// Closed by an operator: no new jobs.
        Closed => "closed",
        /// Its worker stopped heartbeating for longer than the TTL.
        Unavailable => "unavailable",
    }
}

/// A worker host as the controller reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    pub name: String,
    /// What it offers.
    pub capacity: Resources,
    pub state: HostState,
    pub running: u32,
    /// What its placed jobs use.
    pub used: Resources,
    pub job_users: JobUsers,
    /// Its worker holds a start that does not fit until room frees, so jobs may be sent to it
    /// ahead of its free slots (dispatch ahead); as the primary heard at the worker's last
    /// join, not stored.
    #[serde(default)]
    pub queues_starts: bool,
}

/// Whose jobs a host runs, and as whom: what its worker reports at join, so that no job is
/// placed on a host that would refuse it or run it as someone else.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum JobUsers {
    /// Every job as the worker's own account, whoever submitted it: a dev or test cluster
    /// (the worker warns that jobs do not run as their users).
    #[default]
    Any,
    /// Each job as its own user (a worker running as root); root's jobs too only if `root`.
    EachUser { root: bool },
    /// Only the jobs of this account, which the worker runs as (a worker not running as root).
    Only(String),
}

impl std::fmt::Display for JobUsers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobUsers::Any => f.write_str("any user's jobs, as the worker's account"),
            JobUsers::EachUser { root: true } => f.write_str("each job as its user, root's too"),
            JobUsers::EachUser { root: false } => f.write_str("each job as its user, not root's"),
            JobUsers::Only(user) => write!(f, "only {user}'s jobs"),
        }
    }
}

named_enum! {
    /// A host control action.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    pub enum HostAction {
        Open => "open",
        Close => "close",
    }
}

named_enum! {
    /// Who is calling: the role a connection's session holds, which decides what it may do.
    /// A connection that never joined is a `user`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
    pub enum Role {
        User => "user",
        Worker => "worker",
        Scheduler => "scheduler",
        Apiserver => "apiserver",
        Operator => "operator",
        Admin => "admin",
        /// A controller peer: the only role that reaches the Raft interface.
        Controller => "controller",
        /// A login host's certificate, shared by the people who use that host: it lets them
        /// connect and authenticate with their tokens, and nothing else.
        Login => "login",
    }
}

/// A user token as an admin sees it listed: never its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenInfo {
    pub id: String,
    pub user: String,
    pub role: Role,
    pub created_ms: u64,
    /// `None`: it never expires.
    pub expires_ms: Option<u64>,
}

/// Who a token proved the caller to be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Principal {
    pub user: String,
    pub role: Role,
}

/// What a worker reports about its host when it joins.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct HostAttributes {
    pub name: String,
    /// What the host offers to jobs.
    pub resources: Resources,
    /// Where the worker writes job output, so that users can be told where to look.
    pub spool_dir: String,
    pub job_users: JobUsers,
}

/// The reason of a [`JobEnd::Failed`] that says the attempt was killed before its job
/// started (while it waited on its host, or before its shim started it): the worker ends
/// such an attempt with it, and the controller counts no run for it (`Job::runs`).
pub const KILLED_BEFORE_START: &str = "killed before it started";

/// How a job attempt ended, as its worker saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobEnd {
    /// The process exited with this code.
    Exit(i32),
    /// The process was killed by this signal.
    Signal(i32),
    /// It never ran; the reason ("command not found: ...").
    Failed(String),
    /// The kernel killed it (SIGKILL) for going over its memory limit.
    OutOfMemory,
    /// Its shim stopped it at its time limit; how the process then ended.
    TimedOut {
        exit_code: Option<i32>,
        signal: Option<i32>,
    },
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

named_enum! {
    /// The kinds of event a subscription can ask for.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
    pub enum EventKind {
        Job => "job",
        Host => "host",
        Queue => "queue",
    }
}

/// Which events a subscription receives; empty `kinds` means all.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EventFilter {
    pub kinds: Vec<EventKind>,
}

impl EventFilter {
    /// Whether events of `kind` pass.
    pub fn wants(&self, kind: EventKind) -> bool {
        self.kinds.is_empty() || self.kinds.contains(&kind)
    }
}

/// One state change as a subscriber sees it, with the log index of the entry that made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterEvent {
    /// A job was created, or its state, host, attempt or reasons changed.
    Job {
        index: u64,
        id: JobId,
        state: JobState,
        host: Option<String>,
        attempt: u32,
        queue: String,
        /// Whose job it is.
        user: String,
        pend_reason: Option<String>,
        pend_code: Option<PendCode>,
        reason: Option<String>,
        result: Option<JobResult>,
        /// A task of an array: the array's id and the task's index (`ID_IDX`).
        task: Option<(JobId, u32)>,
    },
    /// A host registered, or its state changed.
    Host {
        index: u64,
        name: String,
        state: HostState,
    },
    /// A queue was defined, or its priority or flags changed.
    Queue {
        index: u64,
        name: String,
        priority: i32,
        open: bool,
        active: bool,
    },
}

impl ClusterEvent {
    /// Its kind, for filters.
    pub fn kind(&self) -> EventKind {
        match self {
            ClusterEvent::Job { .. } => EventKind::Job,
            ClusterEvent::Host { .. } => EventKind::Host,
            ClusterEvent::Queue { .. } => EventKind::Queue,
        }
    }
}

/// Whether every character of `name` is one that host, scheduler and user names may hold.
pub fn name_chars_ok(name: &str) -> bool {
    name.chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Checks a host name as a worker gives it (`--name`): the worker refuses to start with it,
/// and the controller refuses a join that carries it.
pub fn validate_host_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty() && name.len() <= 253 && name_chars_ok(name);
    if valid {
        Ok(())
    } else {
        Err(format!(
            "host.name: {name:?} must be letters, digits, '-', '_' or '.'"
        ))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Each field of a filter narrows on its own: a job passes a filter exactly when it
        /// passes each one-field filter the filter is made of.
        #[test]
        fn a_filter_is_the_conjunction_of_its_fields(
            job in crate::testing::job(),
            filter in crate::testing::job_filter(),
        ) {
            let JobFilter { queue, states, user, name, results, submitted_since_ms } = filter.clone();
            let alone = [
                JobFilter { queue, ..JobFilter::default() },
                JobFilter { states, ..JobFilter::default() },
                JobFilter { user, ..JobFilter::default() },
                JobFilter { name: name.clone(), ..JobFilter::default() },
                JobFilter { results: results.clone(), ..JobFilter::default() },
                JobFilter { submitted_since_ms, ..JobFilter::default() },
            ];
            prop_assert_eq!(filter.matches(&job), alone.iter().all(|f| f.matches(&job)));
            // And each means what it says.
            let by_name = JobFilter { name: Some(job.spec.name.clone()), ..JobFilter::default() };
            prop_assert!(by_name.matches(&job));
            let since = JobFilter {
                submitted_since_ms: Some(job.submit_time_ms.saturating_add(1)),
                ..JobFilter::default()
            };
            prop_assert_eq!(since.matches(&job), job.submit_time_ms == u64::MAX);
            let by_result = JobFilter { results: results.clone(), ..JobFilter::default() };
            prop_assert_eq!(
                by_result.matches(&job),
                results.is_empty() || job.result.is_some_and(|r| results.contains(&r))
            );
        }
    }
}
