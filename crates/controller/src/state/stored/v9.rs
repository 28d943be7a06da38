//! Store format 9, frozen: the log's commands as the builds of format 9 (87ae76c to 82d66bf)
//! wrote them. **Never edit these types**: logs of format 9 are read through them, and
//! formats 6 to 8 are reached through them (`super::step8`); `super::step9` converts them to
//! and from format 10. Its jobs and states are format 10's (`super::v10`); records that no
//! later format changed are the current module's; its specs are format 12's (`super::v12`).

use serde::{Deserialize, Serialize};

use super::v10::{JobRecord, StateRecord};
use super::v12::SpecRecord;
use super::EndIntentRecord;
use super::{
    EndRecord, HeldRecord, HostActionRecord, HostAttributesRecord, JobActionRecord,
    JobChangesRecord, PendReasonRecord, QueueActionRecord, QueueDefRecord, RoleRecord,
};

/// A command as stored in the log in format 9.
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
}
