//! Store format 6, frozen: the record types of the Raft log, the snapshots and the backups as
//! the builds up to 08a8d6b wrote them. **Never edit these types**: data dirs and backups of
//! format 6 exist and are read through them (and, while a cluster's active version is 6,
//! written through them, so that older members can apply what is replicated).
//! `super::migrate` converts them to the current records and back.
//!
//! Records unchanged in later formats (the enums, queues, tokens, outcomes, ...) are defined
//! here once and reused by the current format.

use serde::{Deserialize, Serialize};
use xce_client::types::{
    HeldPhase, HostAction, JobAction, JobOrder, JobSignal, JobState, QueueAction, Refusal, Role,
};
use xce_proto::Status;

use super::super::{EndIntent, JobUsers, LostPolicy, Outcome};

/// `From` both ways between a domain enum and its record, variant for variant.
macro_rules! record_enum {
    ($($record:ident <=> $domain:ident { $($variant:ident),+ $(,)? })+) => {$(
        /// Stored form of the domain enum of the same name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
        pub enum $record { $($variant),+ }

        impl From<$domain> for $record {
            fn from(v: $domain) -> Self {
                match v { $($domain::$variant => $record::$variant),+ }
            }
        }

        impl From<$record> for $domain {
            fn from(v: $record) -> Self {
                match v { $($record::$variant => $domain::$variant),+ }
            }
        }
    )+};
}

record_enum! {
    JobStateRecord <=> JobState { Pending, Dispatched, Running, Suspended, Done, Exited }
    JobActionRecord <=> JobAction { Kill, Suspend, Resume, Requeue }
    QueueActionRecord <=> QueueAction { Open, Close, Activate, Inactivate }
    HostActionRecord <=> HostAction { Open, Close }
    HeldPhaseRecord <=> HeldPhase { Running, Suspended, Finished }
    JobSignalRecord <=> JobSignal { Kill, Suspend, Resume }
    LostPolicyRecord <=> LostPolicy { Requeue, Exit }
    EndIntentRecord <=> EndIntent { Kill, Requeue }
    RoleRecord <=> Role { User, Worker, Scheduler, Apiserver, Operator, Admin, Controller, Login }
    StatusRecord <=> Status {
        Ok, Redirect, Standby, NoMaster, NotReady, DupJob, Auth, Perm, Invalid, NoEnt,
        Conflict, Internal,
    }
}

/// A job spec as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecRecord {
    pub name: String,
    pub user: String,
    pub queue: String,
    pub command: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: String,
    pub cpus: i32,
    pub mem_mb: i64,
    pub priority: i32,
}

/// A job as stored in a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    pub id: u64,
    pub spec: SpecRecord,
    pub state: JobStateRecord,
    pub pend_reason: Option<String>,
    pub reason: Option<String>,
    pub host: Option<String>,
    pub attempt: u32,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub submit_time_ms: u64,
    pub start_time_ms: Option<u64>,
    pub end_time_ms: Option<u64>,
    pub output_dir: Option<String>,
}

/// A worker's host attributes as stored in a join.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostAttributesRecord {
    pub name: String,
    pub cpus: u32,
    pub mem_mb: u64,
    pub spool_dir: String,
    pub job_users: JobUsersRecord,
}

/// Whose jobs a host runs, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobUsersRecord {
    Any,
    EachUser { root: bool },
    Only(String),
}

impl From<JobUsers> for JobUsersRecord {
    fn from(u: JobUsers) -> Self {
        match u {
            JobUsers::Any => JobUsersRecord::Any,
            JobUsers::EachUser { root } => JobUsersRecord::EachUser { root },
            JobUsers::Only(user) => JobUsersRecord::Only(user),
        }
    }
}

impl From<JobUsersRecord> for JobUsers {
    fn from(u: JobUsersRecord) -> Self {
        match u {
            JobUsersRecord::Any => JobUsers::Any,
            JobUsersRecord::EachUser { root } => JobUsers::EachUser { root },
            JobUsersRecord::Only(user) => JobUsers::Only(user),
        }
    }
}

/// An attempt a worker holds, as stored in a join.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldRecord {
    pub id: u64,
    pub attempt: u32,
    pub phase: HeldPhaseRecord,
}

/// How an attempt ended, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndRecord {
    Exit(i32),
    Signal(i32),
    Failed(String),
    // Appended: postcard numbers variants in order, so the ones before keep their bytes.
    OutOfMemory,
}

/// A configured queue, as a barrier entry stores it (the YAML type is `QueueDef`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueDefRecord {
    pub name: String,
    pub priority: i32,
    pub on_host_lost: LostPolicyRecord,
}

/// A command as stored in the log, variant for variant with [`Command`]. Append new variants
/// at the end: an inserted one renumbers those after it (raise STORE_FORMAT if you must).
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
        reasons: Vec<(u64, String)>,
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
    /// A backup's state replacing a new cluster's (appended in format 6: entries written
    /// before read the same).
    Restore {
        token: u128,
        state: Box<StateRecord>,
    },
    /// A later part of a backup: its jobs (appended in format 6 too).
    RestoreJobs {
        token: u128,
        base: u128,
        jobs: Vec<JobRecord>,
        intents: Vec<(u64, EndIntentRecord)>,
    },
}

/// An order for one attempt, as stored in a remembered join outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderRecord {
    pub id: u64,
    pub attempt: u32,
    pub signal: JobSignalRecord,
}

/// A remembered outcome (the token window), as stored in a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OutcomeRecord {
    Submitted(u64),
    Done,
    Rejected {
        status: StatusRecord,
        message: String,
    },
    Duplicate(Box<OutcomeRecord>),
    Resynced {
        orders: Vec<OrderRecord>,
    },
    Leased {
        epoch: u64,
    },
    Placed {
        refused: Vec<RefusalRecord>,
    },
}

/// A refused placement, as stored in a remembered batch outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusalRecord {
    pub id: u64,
    pub status: StatusRecord,
    pub message: String,
}

impl From<Outcome> for OutcomeRecord {
    fn from(o: Outcome) -> Self {
        match o {
            Outcome::Submitted(id) => OutcomeRecord::Submitted(id),
            Outcome::Done => OutcomeRecord::Done,
            Outcome::Rejected { status, message } => OutcomeRecord::Rejected {
                status: status.into(),
                message,
            },
            Outcome::Duplicate(inner) => OutcomeRecord::Duplicate(Box::new((*inner).into())),
            Outcome::Resynced { orders } => OutcomeRecord::Resynced {
                orders: orders
                    .into_iter()
                    .map(|o| OrderRecord {
                        id: o.id,
                        attempt: o.attempt,
                        signal: o.signal.into(),
                    })
                    .collect(),
            },
            Outcome::Leased { epoch } => OutcomeRecord::Leased { epoch },
            Outcome::Placed { refused } => OutcomeRecord::Placed {
                refused: refused
                    .into_iter()
                    .map(|r| RefusalRecord {
                        id: r.id,
                        status: r.status.into(),
                        message: r.message,
                    })
                    .collect(),
            },
        }
    }
}

impl From<OutcomeRecord> for Outcome {
    fn from(o: OutcomeRecord) -> Self {
        match o {
            OutcomeRecord::Submitted(id) => Outcome::Submitted(id),
            OutcomeRecord::Done => Outcome::Done,
            OutcomeRecord::Rejected { status, message } => Outcome::Rejected {
                status: status.into(),
                message,
            },
            OutcomeRecord::Duplicate(inner) => Outcome::Duplicate(Box::new((*inner).into())),
            OutcomeRecord::Resynced { orders } => Outcome::Resynced {
                orders: orders
                    .into_iter()
                    .map(|o| JobOrder {
                        id: o.id,
                        attempt: o.attempt,
                        signal: o.signal.into(),
                    })
                    .collect(),
            },
            OutcomeRecord::Leased { epoch } => Outcome::Leased { epoch },
            OutcomeRecord::Placed { refused } => Outcome::Placed {
                refused: refused
                    .into_iter()
                    .map(|r| Refusal {
                        id: r.id,
                        status: r.status.into(),
                        message: r.message,
                    })
                    .collect(),
            },
        }
    }
}

/// A queue as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueRecord {
    pub name: String,
    pub priority: i32,
    pub open: bool,
    pub active: bool,
    pub on_host_lost: LostPolicyRecord,
}

/// A host as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostStoredRecord {
    pub name: String,
    pub cpus: u32,
    pub mem_mb: u64,
    pub spool_dir: String,
    pub job_users: JobUsersRecord,
    pub closed: bool,
    pub available: bool,
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
}

/// A user's token as stored: its secret's hash, never the secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserTokenRecord {
    pub id: String,
    pub user: String,
    pub role: RoleRecord,
    pub hash: [u8; 32],
    pub created_ms: u64,
    pub expires_ms: Option<u64>,
}

/// The scheduler lease as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedulerLeaseRecord {
    pub name: String,
    pub instance: u64,
    pub epoch: u64,
    pub expires_ms: u64,
}

/// A part of a backup (a frame after the header), as format 6 writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum BackupPart {
    Base(StateRecord),
    Jobs {
        jobs: Vec<JobRecord>,
        intents: Vec<(u64, EndIntentRecord)>,
    },
}
