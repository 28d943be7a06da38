//! Store format 12, frozen: the records that hold a spec, a job, a command, a whole state or a
//! backup part as the builds of format 12 (ef49703 to ec31d8f; `runs` from 39b1944) wrote them. **Never edit these
//! types**: data dirs, logs and backups of format 12 are read through them, and formats 6 to
//! 11 are reached through them (`super::step8`, `super::step10`); `super::step12` converts
//! them to and from format 13. Records that no later format changed (a host, a queue, a pending
//! reason as formats 7 to 12 keep it) are the current module's.

use serde::{Deserialize, Serialize};

use super::{
    ArrayProgressRecord, ArraySpecRecord, ArrayTaskRecord, DepExprRecord, DependencyStateRecord,
    EndIntentRecord, EndRecord, HeldRecord, HostActionRecord, HostAttributesRecord,
    HostStoredRecord, JobActionRecord, JobChangesRecord, JobResultRecord, JobStateRecord,
    LimitsRecord, OpenModeRecord, OutcomeRecord, PendCodeRecord, PendReasonRecord,
    QueueActionRecord, QueueDefRecord, QueueRecord, ResourcesRecord, RoleRecord, RunsRecord,
    SchedulerLeaseRecord, TaskOpRecord, UserTokenRecord, WarningRecord,
};

/// A job spec as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecRecord {
    pub name: String,
    pub user: String,
    pub queue: String,
    pub command: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: String,
    pub resources: ResourcesRecord,
    pub priority: i32,
    pub limits: LimitsRecord,
    /// The SHA-256 of the job's script, whose bytes are in the state's script table.
    pub script: Option<[u8; 32]>,
    pub stdout: Option<String>,
    pub stderr: Option<String>,
    pub open_mode: Option<OpenModeRecord>,
    pub hold: bool,
    pub begin_time_ms: Option<u64>,
    pub warn_signal: Option<WarningRecord>,
    pub no_requeue: bool,
    /// What it waits for (format 9 on).
    pub dependency: Option<DepExprRecord>,
    pub kill_on_invalid_dep: Option<bool>,
    /// Its tasks, when it is an array (format 9 on).
    pub array: Option<ArraySpecRecord>,
}

/// A job as stored in a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    pub id: u64,
    pub spec: SpecRecord,
    pub state: JobStateRecord,
    pub pend_reason: Option<String>,
    pub pend_code: Option<PendCodeRecord>,
    pub reason: Option<String>,
    pub result: Option<JobResultRecord>,
    pub host: Option<String>,
    pub attempt: u32,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub submit_time_ms: u64,
    pub start_time_ms: Option<u64>,
    pub end_time_ms: Option<u64>,
    pub output_dir: Option<String>,
    pub cancelled_by: Option<String>,
    /// Where its dependency stands (format 9 on).
    pub dependency_state: Option<DependencyStateRecord>,
    /// An array's own record's tasks (format 9 on).
    pub array: Option<ArrayProgressRecord>,
    /// A task's array (format 9 on).
    pub array_task: Option<ArrayTaskRecord>,
    /// How many of its attempts started (format 12 on; before, every attempt counted).
    pub runs: u32,
}

/// A command as stored in the log in format 12.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
// As `Command`: submits are most of the log.
#[allow(clippy::large_enum_variant)]
pub enum CommandRecord {
    Submit {
        token: u128,
        spec: SpecRecord,
        script: Option<Vec<u8>>,
    },
    ControlJob {
        token: u128,
        id: u64,
        action: JobActionRecord,
        by: Option<String>,
        actor: Option<String>,
    },
    ControlQueue {
        token: u128,
        name: String,
        action: QueueActionRecord,
    },
    RegisterHost {
        token: u128,
        host: HostAttributesRecord,
        held: Vec<HeldRecord>,
    },
    ControlHost {
        token: u128,
        name: String,
        action: HostActionRecord,
    },
    SetHostAvailable {
        name: String,
        available: bool,
    },
    Dispatch {
        token: u128,
        id: u64,
        host: String,
    },
    JobStarted {
        token: u128,
        id: u64,
        attempt: u32,
        host: String,
    },
    JobFinished {
        token: u128,
        id: u64,
        attempt: u32,
        host: String,
        end: EndRecord,
    },
    HostLost {
        name: String,
    },
    Barrier {
        term: u64,
        queues: Vec<QueueDefRecord>,
    },
    AcquireScheduler {
        token: u128,
        name: String,
        instance: u64,
        ttl_ms: u32,
    },
    DispatchBatch {
        token: u128,
        epoch: u64,
        /// Job id and host, in the order decided.
        placements: Vec<(u64, String)>,
    },
    SetPendReasons {
        token: u128,
        epoch: u64,
        reasons: Vec<(u64, PendReasonRecord)>,
    },
    CreateToken {
        token: u128,
        id: String,
        user: String,
        role: RoleRecord,
        hash: [u8; 32],
        expires_in_ms: Option<u64>,
    },
    RevokeToken {
        token: u128,
        id: String,
    },
    /// A backup's state replacing a new cluster's.
    Restore {
        token: u128,
        state: Box<StateRecord>,
    },
    /// A later part of a backup: its jobs.
    RestoreJobs {
        token: u128,
        base: u128,
        jobs: Vec<JobRecord>,
        intents: Vec<(u64, EndIntentRecord)>,
        scripts: Vec<([u8; 32], Vec<u8>)>,
    },
    /// The cluster's active version raised (format 7 on).
    RaiseVersion {
        to: u32,
    },
    /// Changes to one job (format 8 on).
    UpdateJob {
        token: u128,
        id: u64,
        by: Option<String>,
        changes: JobChangesRecord,
    },
    /// A signal to one running job (format 8 on).
    SignalJob {
        token: u128,
        id: u64,
        by: Option<String>,
        signal: i32,
        leader_only: bool,
    },
    /// An action on tasks of an array, or on the whole array (format 10 on).
    ControlTasks {
        token: u128,
        array: u64,
        tasks: Option<RunsRecord>,
        by: Option<String>,
        actor: Option<String>,
        op: TaskOpRecord,
    },
}

/// The whole state as a snapshot stores it. Every collection is a list in a fixed order (ids,
/// names, the token window's age), so the same state always encodes to the same bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateRecord {
    pub next_job_id: u64,
    pub jobs: Vec<JobRecord>,
    pub queues: Vec<QueueRecord>,
    pub hosts: Vec<HostStoredRecord>,
    pub intents: Vec<(u64, EndIntentRecord)>,
    /// Remembered tokens and their outcomes, oldest first.
    pub tokens: Vec<(u128, OutcomeRecord)>,
    /// The scheduler lease, held or run out (its epoch must survive either way).
    pub scheduler: Option<SchedulerLeaseRecord>,
    /// Users' tokens, by id.
    pub user_tokens: Vec<UserTokenRecord>,
    /// The cluster version in force (format 7 on; a format-6 state is at 6).
    pub active_version: u32,
    /// Job scripts by the SHA-256 of their bytes (format 8 on), each once.
    pub scripts: Vec<([u8; 32], Vec<u8>)>,
}

/// One part of a backup, after its header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum BackupPart {
    /// Everything but the jobs and the intents on them; always the first part.
    Base(StateRecord),
    /// Jobs in id order, with the operators' intents on them and the scripts they run that
    /// no earlier part carried (by SHA-256), so that no part outgrows a message.
    Jobs {
        jobs: Vec<JobRecord>,
        intents: Vec<(u64, EndIntentRecord)>,
        scripts: Vec<([u8; 32], Vec<u8>)>,
    },
}
