//! Store format 7, frozen: the records that hold a job, a command or a whole state as the
//! builds of format 7 (ed5b428 to 7d20e9c) wrote them. **Never edit these types**: data dirs
//! and backups of format 7 are read through them, and format 6 is reached through them
//! (`super::step6`); `super::step7` converts them to and from format 8. Records that no later
//! format changed are the current module's.

use serde::{Deserialize, Serialize};

use super::{
    EndIntentRecord, EndRecord, HeldRecord, HostActionRecord, HostAttributesRecord,
    HostStoredRecord, JobActionRecord, JobResultRecord, JobStateRecord, LimitsRecord,
    OutcomeRecord, PendCodeRecord, PendReasonRecord, QueueActionRecord, QueueDefRecord,
    QueueRecord, ResourcesRecord, RoleRecord, SchedulerLeaseRecord, UserTokenRecord,
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
}

/// A command as stored in the log, variant for variant with `Command`. Append new variants
/// at the end: an inserted one renumbers those after it (and is a new format).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommandRecord {
    Submit {
        token: u128,
        spec: SpecRecord,
    },
    ControlJob {
        token: u128,
        id: u64,
        action: JobActionRecord,
        by: Option<String>,
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
    },
    /// The cluster's active version raised (format 7 on).
    RaiseVersion {
        to: u32,
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
}

/// A part of a backup (a frame after the header), as format 7 writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum BackupPart {
    Base(StateRecord),
    Jobs {
        jobs: Vec<JobRecord>,
        intents: Vec<(u64, EndIntentRecord)>,
    },
}
