//! What the Raft log and the snapshots hold: record types the controller owns, converted at
//! this edge from and to the domain types (`xce-client`'s, and the state's own). A serde
//! attribute added to a client type for the HTTP API can therefore never change what is on
//! disk; changing a record here changes the stored format, which the golden-bytes test below
//! catches ("raise STORE_FORMAT"). Records are encoded with postcard (see `store::encode`).
//!
//! `Command` serializes through [`CommandRecord`] (`#[serde(into, from)]`), so log entries and
//! the append-entries messages that carry them use the records; a snapshot is a
//! [`StateRecord`], built from a state by [`State::into_record`].

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use xce_client::types::{
    HeldJob, HeldPhase, HostAction, HostAttributes, Job, JobAction, JobEnd, JobOrder, JobSignal,
    JobSpec, JobState, Placement, QueueAction, Refusal, RequestToken, Role,
};
use xce_proto::Status;

use super::index::Index;
use super::{
    Command, EndIntent, HostRecord, JobUsers, LostPolicy, Outcome, QueueDef, QueueState,
    SchedulerLease, State, TokenWindow, UserToken,
};

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

impl From<JobSpec> for SpecRecord {
    fn from(s: JobSpec) -> Self {
        SpecRecord {
            name: s.name,
            user: s.user,
            queue: s.queue,
            command: s.command,
            env: s.env,
            cwd: s.cwd,
            cpus: s.cpus,
            mem_mb: s.mem_mb,
            priority: s.priority,
        }
    }
}

impl From<SpecRecord> for JobSpec {
    fn from(s: SpecRecord) -> Self {
        JobSpec {
            name: s.name,
            user: s.user,
            queue: s.queue,
            command: s.command,
            env: s.env,
            cwd: s.cwd,
            cpus: s.cpus,
            mem_mb: s.mem_mb,
            priority: s.priority,
        }
    }
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

impl From<Job> for JobRecord {
    fn from(j: Job) -> Self {
        JobRecord {
            id: j.id,
            spec: j.spec.into(),
            state: j.state.into(),
            pend_reason: j.pend_reason,
            reason: j.reason,
            host: j.host,
            attempt: j.attempt,
            exit_code: j.exit_code,
            signal: j.signal,
            submit_time_ms: j.submit_time_ms,
            start_time_ms: j.start_time_ms,
            end_time_ms: j.end_time_ms,
            output_dir: j.output_dir,
        }
    }
}

impl From<JobRecord> for Job {
    fn from(j: JobRecord) -> Self {
        Job {
            id: j.id,
            spec: j.spec.into(),
            state: j.state.into(),
            pend_reason: j.pend_reason,
            reason: j.reason,
            host: j.host,
            attempt: j.attempt,
            exit_code: j.exit_code,
            signal: j.signal,
            submit_time_ms: j.submit_time_ms,
            start_time_ms: j.start_time_ms,
            end_time_ms: j.end_time_ms,
            output_dir: j.output_dir,
        }
    }
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

fn held_record(h: HeldJob) -> HeldRecord {
    HeldRecord {
        id: h.id,
        attempt: h.attempt,
        phase: h.phase.into(),
    }
}

fn end_record(end: JobEnd) -> EndRecord {
    match end {
        JobEnd::Exit(c) => EndRecord::Exit(c),
        JobEnd::Signal(s) => EndRecord::Signal(s),
        JobEnd::Failed(r) => EndRecord::Failed(r),
        JobEnd::OutOfMemory => EndRecord::OutOfMemory,
    }
}

impl From<Command> for CommandRecord {
    fn from(cmd: Command) -> Self {
        match cmd {
            Command::Submit { token, spec } => CommandRecord::Submit {
                token: token.0,
                spec: spec.into(),
            },
            Command::ControlJob {
                token,
                id,
                action,
                by,
            } => CommandRecord::ControlJob {
                token: token.0,
                id,
                action: action.into(),
                by,
            },
            Command::CreateToken {
                token,
                id,
                user,
                role,
                hash,
                expires_in_ms,
            } => CommandRecord::CreateToken {
                token: token.0,
                id,
                user,
                role: role.into(),
                hash,
                expires_in_ms,
            },
            Command::RevokeToken { token, id } => CommandRecord::RevokeToken { token: token.0, id },
            Command::Restore { token, state } => CommandRecord::Restore {
                token: token.0,
                state,
            },
            Command::RestoreJobs {
                token,
                base,
                jobs,
                intents,
            } => CommandRecord::RestoreJobs {
                token: token.0,
                base: base.0,
                jobs,
                intents,
            },
            Command::ControlQueue {
                token,
                name,
                action,
            } => CommandRecord::ControlQueue {
                token: token.0,
                name,
                action: action.into(),
            },
            Command::RegisterHost { token, host, held } => CommandRecord::RegisterHost {
                token: token.0,
                host: HostAttributesRecord {
                    name: host.name,
                    cpus: host.cpus,
                    mem_mb: host.mem_mb,
                    spool_dir: host.spool_dir,
                    job_users: host.job_users.into(),
                },
                held: held.into_iter().map(held_record).collect(),
            },
            Command::ControlHost {
                token,
                name,
                action,
            } => CommandRecord::ControlHost {
                token: token.0,
                name,
                action: action.into(),
            },
            Command::SetHostAvailable { name, available } => {
                CommandRecord::SetHostAvailable { name, available }
            }
            Command::Dispatch { token, id, host } => CommandRecord::Dispatch {
                token: token.0,
                id,
                host,
            },
            Command::JobStarted {
                token,
                id,
                attempt,
                host,
            } => CommandRecord::JobStarted {
                token: token.0,
                id,
                attempt,
                host,
            },
            Command::JobFinished {
                token,
                id,
                attempt,
                host,
                end,
            } => CommandRecord::JobFinished {
                token: token.0,
                id,
                attempt,
                host,
                end: end_record(end),
            },
            Command::HostLost { name } => CommandRecord::HostLost { name },
            Command::AcquireScheduler {
                token,
                name,
                instance,
                ttl_ms,
            } => CommandRecord::AcquireScheduler {
                token: token.0,
                name,
                instance,
                ttl_ms,
            },
            Command::DispatchBatch {
                token,
                epoch,
                placements,
            } => CommandRecord::DispatchBatch {
                token: token.0,
                epoch,
                placements: placements.into_iter().map(|p| (p.id, p.host)).collect(),
            },
            Command::SetPendReasons {
                token,
                epoch,
                reasons,
            } => CommandRecord::SetPendReasons {
                token: token.0,
                epoch,
                reasons,
            },
            Command::Barrier { term, queues } => CommandRecord::Barrier {
                term,
                queues: queues
                    .into_iter()
                    .map(|q| QueueDefRecord {
                        name: q.name,
                        priority: q.priority,
                        on_host_lost: q.on_host_lost.into(),
                    })
                    .collect(),
            },
        }
    }
}

impl From<CommandRecord> for Command {
    fn from(rec: CommandRecord) -> Self {
        let t = RequestToken;
        match rec {
            CommandRecord::Submit { token, spec } => Command::Submit {
                token: t(token),
                spec: spec.into(),
            },
            CommandRecord::ControlJob {
                token,
                id,
                action,
                by,
            } => Command::ControlJob {
                token: t(token),
                id,
                action: action.into(),
                by,
            },
            CommandRecord::CreateToken {
                token,
                id,
                user,
                role,
                hash,
                expires_in_ms,
            } => Command::CreateToken {
                token: t(token),
                id,
                user,
                role: role.into(),
                hash,
                expires_in_ms,
            },
            CommandRecord::RevokeToken { token, id } => Command::RevokeToken {
                token: t(token),
                id,
            },
            CommandRecord::Restore { token, state } => Command::Restore {
                token: t(token),
                state,
            },
            CommandRecord::RestoreJobs {
                token,
                base,
                jobs,
                intents,
            } => Command::RestoreJobs {
                token: t(token),
                base: t(base),
                jobs,
                intents,
            },
            CommandRecord::ControlQueue {
                token,
                name,
                action,
            } => Command::ControlQueue {
                token: t(token),
                name,
                action: action.into(),
            },
            CommandRecord::RegisterHost { token, host, held } => Command::RegisterHost {
                token: t(token),
                host: HostAttributes {
                    name: host.name,
                    cpus: host.cpus,
                    mem_mb: host.mem_mb,
                    spool_dir: host.spool_dir,
                    job_users: host.job_users.into(),
                },
                held: held
                    .into_iter()
                    .map(|h| HeldJob {
                        id: h.id,
                        attempt: h.attempt,
                        phase: h.phase.into(),
                    })
                    .collect(),
            },
            CommandRecord::ControlHost {
                token,
                name,
                action,
            } => Command::ControlHost {
                token: t(token),
                name,
                action: action.into(),
            },
            CommandRecord::SetHostAvailable { name, available } => {
                Command::SetHostAvailable { name, available }
            }
            CommandRecord::Dispatch { token, id, host } => Command::Dispatch {
                token: t(token),
                id,
                host,
            },
            CommandRecord::JobStarted {
                token,
                id,
                attempt,
                host,
            } => Command::JobStarted {
                token: t(token),
                id,
                attempt,
                host,
            },
            CommandRecord::JobFinished {
                token,
                id,
                attempt,
                host,
                end,
            } => Command::JobFinished {
                token: t(token),
                id,
                attempt,
                host,
                end: match end {
                    EndRecord::Exit(c) => JobEnd::Exit(c),
                    EndRecord::Signal(s) => JobEnd::Signal(s),
                    EndRecord::Failed(r) => JobEnd::Failed(r),
                    EndRecord::OutOfMemory => JobEnd::OutOfMemory,
                },
            },
            CommandRecord::HostLost { name } => Command::HostLost { name },
            CommandRecord::AcquireScheduler {
                token,
                name,
                instance,
                ttl_ms,
            } => Command::AcquireScheduler {
                token: t(token),
                name,
                instance,
                ttl_ms,
            },
            CommandRecord::DispatchBatch {
                token,
                epoch,
                placements,
            } => Command::DispatchBatch {
                token: t(token),
                epoch,
                placements: placements
                    .into_iter()
                    .map(|(id, host)| Placement { id, host })
                    .collect(),
            },
            CommandRecord::SetPendReasons {
                token,
                epoch,
                reasons,
            } => Command::SetPendReasons {
                token: t(token),
                epoch,
                reasons,
            },
            CommandRecord::Barrier { term, queues } => Command::Barrier {
                term,
                queues: queues
                    .into_iter()
                    .map(|q| QueueDef {
                        name: q.name,
                        priority: q.priority,
                        on_host_lost: q.on_host_lost.into(),
                    })
                    .collect(),
            },
        }
    }
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

fn user_token_record(id: &str, t: &UserToken) -> UserTokenRecord {
    UserTokenRecord {
        id: id.to_string(),
        user: t.user.clone(),
        role: t.role.into(),
        hash: t.hash,
        created_ms: t.created_ms,
        expires_ms: t.expires_ms,
    }
}

/// The scheduler lease as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedulerLeaseRecord {
    pub name: String,
    pub instance: u64,
    pub epoch: u64,
    pub expires_ms: u64,
}

fn lease_record(l: &SchedulerLease) -> SchedulerLeaseRecord {
    SchedulerLeaseRecord {
        name: l.name.clone(),
        instance: l.instance,
        epoch: l.epoch,
        expires_ms: l.expires_ms,
    }
}

fn queue_record(name: &str, q: &QueueState) -> QueueRecord {
    QueueRecord {
        name: name.to_string(),
        priority: q.priority,
        open: q.open,
        active: q.active,
        on_host_lost: q.on_host_lost.into(),
    }
}

fn host_record(name: &str, h: &HostRecord) -> HostStoredRecord {
    HostStoredRecord {
        name: name.to_string(),
        cpus: h.cpus,
        mem_mb: h.mem_mb,
        spool_dir: h.spool_dir.clone(),
        job_users: h.job_users.clone().into(),
        closed: h.closed,
        available: h.available,
    }
}

impl State {
    /// The state as a snapshot stores it (consumed: a snapshot is built from a copy).
    pub fn into_record(self) -> StateRecord {
        let State {
            next_job_id,
            jobs,
            queues,
            hosts,
            intents,
            tokens,
            scheduler,
            user_tokens,
            ..
        } = self;
        let TokenWindow {
            mut outcomes,
            order,
        } = tokens;
        StateRecord {
            next_job_id,
            jobs: jobs
                .into_values()
                .map(|j| JobRecord::from(Arc::unwrap_or_clone(j)))
                .collect(),
            queues: queues.iter().map(|(n, q)| queue_record(n, q)).collect(),
            hosts: hosts.iter().map(|(n, h)| host_record(n, h)).collect(),
            intents: intents.into_iter().map(|(id, i)| (id, i.into())).collect(),
            tokens: order
                .into_iter()
                .filter_map(|t| outcomes.remove(&t).map(|o| (t.0, o.into())))
                .collect(),
            scheduler: scheduler.as_ref().map(lease_record),
            user_tokens: user_tokens
                .iter()
                .map(|(id, t)| user_token_record(id, t))
                .collect(),
        }
    }

    /// The state a snapshot holds, with its indexes rebuilt; unchecked (callers go through
    /// [`State::try_from_record`]).
    pub(super) fn from_record(rec: StateRecord) -> State {
        let mut window = TokenWindow::default();
        for (token, outcome) in rec.tokens {
            window.remember(RequestToken(token), outcome.into());
        }
        let jobs: BTreeMap<u64, Arc<Job>> = rec
            .jobs
            .into_iter()
            .map(|j| (j.id, Arc::new(Job::from(j))))
            .collect();
        State {
            next_job_id: rec.next_job_id,
            index: Index::build(jobs.values().map(|j| &**j)),
            jobs,
            queues: rec
                .queues
                .into_iter()
                .map(|q| {
                    let state = QueueState {
                        priority: q.priority,
                        open: q.open,
                        active: q.active,
                        on_host_lost: q.on_host_lost.into(),
                    };
                    (q.name, state)
                })
                .collect(),
            hosts: rec
                .hosts
                .into_iter()
                .map(|h| {
                    let record = HostRecord {
                        cpus: h.cpus,
                        mem_mb: h.mem_mb,
                        spool_dir: h.spool_dir,
                        job_users: h.job_users.into(),
                        closed: h.closed,
                        available: h.available,
                    };
                    (h.name, record)
                })
                .collect(),
            intents: rec
                .intents
                .into_iter()
                .map(|(id, i)| (id, i.into()))
                .collect(),
            tokens: window,
            scheduler: rec.scheduler.map(|l| SchedulerLease {
                name: l.name,
                instance: l.instance,
                epoch: l.epoch,
                expires_ms: l.expires_ms,
            }),
            user_tokens: rec
                .user_tokens
                .into_iter()
                .map(|t| {
                    let token = UserToken {
                        user: t.user,
                        role: t.role.into(),
                        hash: t.hash,
                        created_ms: t.created_ms,
                        expires_ms: t.expires_ms,
                    };
                    (t.id, token)
                })
                .collect(),
            emitted: Vec::new(),
        }
    }
}

/// A sequence serialized from an iterator, taken on the one call to `serialize`.
struct Seq<I>(std::cell::RefCell<Option<I>>);

impl<I> Seq<I> {
    fn of(items: I) -> Seq<I> {
        Seq(std::cell::RefCell::new(Some(items)))
    }
}

impl<I, T> Serialize for Seq<I>
where
    I: ExactSizeIterator<Item = T>,
    T: Serialize,
{
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let items = self
            .0
            .borrow_mut()
            .take()
            .ok_or_else(|| serde::ser::Error::custom("a sequence is serialized once"))?;
        s.collect_seq(items)
    }
}

/// Serializes a state exactly as its [`StateRecord`] (the same fields in the same order),
/// converting one record at a time.
struct SnapshotView<'a>(&'a State);

impl Serialize for SnapshotView<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let st = self.0;
        let tokens: Vec<(u128, OutcomeRecord)> = st
            .tokens
            .order
            .iter()
            .filter_map(|t| st.tokens.outcomes.get(t).map(|o| (t.0, o.clone().into())))
            .collect();
        let mut rec = s.serialize_struct("StateRecord", 8)?;
        rec.serialize_field("next_job_id", &st.next_job_id)?;
        rec.serialize_field(
            "jobs",
            &Seq::of(st.jobs.values().map(|j| JobRecord::from(Job::clone(j)))),
        )?;
        let queues = st.queues.iter().map(|(n, q)| queue_record(n, q));
        rec.serialize_field("queues", &Seq::of(queues))?;
        let hosts = st.hosts.iter().map(|(n, h)| host_record(n, h));
        rec.serialize_field("hosts", &Seq::of(hosts))?;
        rec.serialize_field(
            "intents",
            &Seq::of(
                st.intents
                    .iter()
                    .map(|(id, i)| (*id, EndIntentRecord::from(*i))),
            ),
        )?;
        rec.serialize_field("tokens", &tokens)?;
        rec.serialize_field("scheduler", &st.scheduler.as_ref().map(lease_record))?;
        let user_tokens = st
            .user_tokens
            .iter()
            .map(|(id, t)| user_token_record(id, t));
        rec.serialize_field("user_tokens", &Seq::of(user_tokens))?;
        rec.end()
    }
}

impl State {
    /// The snapshot's bytes: the encoding of [`State::into_record`], written one record at a
    /// time, so that encoding a copy of the state (which shares its jobs) makes no second
    /// copy of every job.
    pub fn snapshot_bytes(&self) -> Result<Vec<u8>, postcard::Error> {
        postcard::to_stdvec(&SnapshotView(self))
    }
}

#[cfg(test)]
mod tests {
    use xce_client::types::{HeldJob, HeldPhase, HostAttributes, JobAction, JobEnd, JobSpec};

    use super::*;
    use crate::store::STORE_FORMAT;

    /// One command of every kind, with every field set.
    fn every_command() -> Vec<Command> {
        let t = RequestToken;
        vec![
            Command::Barrier {
                term: 7,
                queues: vec![QueueDef {
                    name: "high".into(),
                    priority: 50,
                    on_host_lost: LostPolicy::Exit,
                }],
            },
            Command::RegisterHost {
                token: t(1),
                host: HostAttributes {
                    name: "w1".into(),
                    cpus: 4,
                    mem_mb: 2048,
                    spool_dir: "/spool".into(),
                    job_users: JobUsers::EachUser { root: false },
                },
                held: vec![HeldJob {
                    id: 9,
                    attempt: 2,
                    phase: HeldPhase::Suspended,
                }],
            },
            Command::Submit {
                token: t(u128::MAX - 1),
                spec: JobSpec {
                    name: "sim".into(),
                    user: "alice".into(),
                    queue: "high".into(),
                    command: vec!["sh".into(), "-c".into(), "echo hi".into()],
                    env: vec![("A".into(), "1".into())],
                    cwd: "/home/alice".into(),
                    cpus: 2,
                    mem_mb: 512,
                    priority: -3,
                },
            },
            Command::Dispatch {
                token: t(3),
                id: 1,
                host: "w1".into(),
            },
            Command::JobStarted {
                token: t(4),
                id: 1,
                attempt: 1,
                host: "w1".into(),
            },
            Command::ControlJob {
                token: t(5),
                id: 1,
                action: JobAction::Kill,
                by: Some("alice".into()),
            },
            Command::JobFinished {
                token: t(6),
                id: 1,
                attempt: 1,
                host: "w1".into(),
                end: JobEnd::Failed("no such file".into()),
            },
            Command::ControlQueue {
                token: t(7),
                name: "high".into(),
                action: QueueAction::Inactivate,
            },
            Command::ControlHost {
                token: t(8),
                name: "w1".into(),
                action: HostAction::Close,
            },
            Command::SetHostAvailable {
                name: "w1".into(),
                available: false,
            },
            Command::HostLost { name: "w1".into() },
            Command::AcquireScheduler {
                token: t(9),
                name: "s1".into(),
                instance: 42,
                ttl_ms: 3000,
            },
            Command::DispatchBatch {
                token: t(10),
                epoch: 1,
                placements: vec![Placement {
                    id: 1,
                    host: "w1".into(),
                }],
            },
            Command::SetPendReasons {
                token: t(11),
                epoch: 1,
                reasons: vec![(1, "queue normal is inactive".into())],
            },
            Command::CreateToken {
                token: t(12),
                id: "00112233445566ff".into(),
                user: "alice".into(),
                role: Role::Operator,
                hash: [7; 32],
                expires_in_ms: Some(86_400_000),
            },
            Command::CreateToken {
                token: t(13),
                id: "ffeeddccbbaa9988".into(),
                user: "bob".into(),
                role: Role::User,
                hash: [9; 32],
                expires_in_ms: None,
            },
            Command::RevokeToken {
                token: t(14),
                id: "ffeeddccbbaa9988".into(),
            },
            // Refused here (the state holds jobs); appended to format 6, which left every
            // earlier command's bytes as they were.
            Command::Restore {
                token: t(15),
                state: Box::new(State::default().into_record()),
            },
            // Refused here (no restore under token 15 was applied); appended to format 6.
            Command::RestoreJobs {
                token: t(16),
                base: t(15),
                jobs: vec![JobRecord::from(Job {
                    id: 9,
                    spec: JobSpec {
                        command: vec!["true".into()],
                        ..JobSpec::default()
                    },
                    state: JobState::Running,
                    pend_reason: None,
                    reason: None,
                    host: Some("w1".into()),
                    attempt: 1,
                    exit_code: None,
                    signal: None,
                    submit_time_ms: 5,
                    start_time_ms: Some(6),
                    end_time_ms: None,
                    output_dir: None,
                })],
                intents: vec![(9, EndIntentRecord::Kill)],
            },
        ]
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The bytes of [`every_command`] and of the state they leave, in store format
    /// [`STORE_FORMAT`]. They must never change within a format.
    const GOLDEN_FORMAT: u32 = 6;
    const GOLDEN_LOG: &str = "130a0701046869676864010301027731048010062f73706f6f6c01000109020100feffffffffffffffffffffffffffffffffff030373696d05616c696365046869676803027368022d63076563686f20686901014101310b2f686f6d652f616c6963650480080506030102773107040101027731010501000105616c69636508060101027731020c6e6f20737563682066696c6502070468696768030408027731010502773100090277310b090273312ab8170c0a0101010277310d0b010101187175657565206e6f726d616c20697320696e6163746976650e0c103030313132323333343435353636666605616c6963650407070707070707070707070707070707070707070707070707070707070707070180b899290e0d106666656564646363626261613939383803626f62000909090909090909090909090909090909090909090909090909090909090909000f0e1066666565646463636262616139393838100f010001066e6f726d616c3c010100000000000011100f01090000000104747275650000000000020000010277310100000501060000010900";
    const GOLDEN_SNAPSHOT: &str = "0201010373696d05616c696365046869676803027368022d63076563686f20686901014101310b2f686f6d652f616c69636504800805050001066b696c6c65640102773101000080d095ffbc310180d095ffbc310180d095ffbc3101062f73706f6f6c02046869676864010001066e6f726d616c3c01010001027731048010062f73706f6f6c010001000010010401090200feffffffffffffffffffffffffffffffffff0300010301040105010601070108010905010a0601010a167175657565206869676820697320696e6163746976650b010c010d010e010f020a4e7468697320636c757374657220616c726561647920686f6c6473206a6f6273202869647320757020746f2031293a20726573746f7265206f6e6c7920696e746f2061206e657720636c757374657210020a7574686973206261636b75702070617274277320726573746f726520686173206e6f7420626567756e20696e207468697320636c75737465723a20726573746f7265207468652077686f6c652066696c652c2077686f73652066697273742070617274207265706c6163657320746865207374617465010273312a01b8e795ffbc3101103030313132323333343435353636666605616c69636504070707070707070707070707070707070707070707070707070707070707070780d095ffbc31018088afa8bd31";

    #[test]
    fn the_stored_encoding_is_the_golden_one_of_its_format() {
        let commands = every_command();
        let log = crate::store::encode(&commands).unwrap();
        let mut state = State::default();
        for cmd in commands.clone() {
            state.apply(1_700_000_000_000, cmd);
        }
        let snapshot = state.snapshot_bytes().unwrap();
        // The streamed encoding is exactly the record's.
        assert_eq!(
            snapshot,
            crate::store::encode(&state.clone().into_record()).unwrap()
        );
        let raise = "the stored encoding of commands or state changed: raise store::STORE_FORMAT \
                     and set GOLDEN_FORMAT, GOLDEN_LOG and GOLDEN_SNAPSHOT to the new values";
        assert_eq!(STORE_FORMAT, GOLDEN_FORMAT, "{raise}");
        assert_eq!(hex(&log), GOLDEN_LOG, "{raise} (log)");
        assert_eq!(hex(&snapshot), GOLDEN_SNAPSHOT, "{raise} (snapshot)");
        // And they read back as what was written.
        assert_eq!(
            crate::store::decode::<Vec<Command>>(&log).unwrap(),
            commands
        );
        let back = State::from_record(crate::store::decode(&snapshot).unwrap());
        assert_eq!(back, state);
    }
}
