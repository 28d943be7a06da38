//! What the Raft log and the snapshots hold: record types the controller owns, converted at
//! this edge from and to the domain types (`xce-client`'s, and the state's own). A serde
//! attribute added to a client type for the HTTP API can therefore never change what is on
//! disk; changing a record here changes the stored format, which the golden-bytes test below
//! catches ("raise STORE_FORMAT"). Records are encoded with postcard (see `store::encode`).
//!
//! This module holds the records of the current format ([`crate::store::STORE_FORMAT`]), the
//! conversions between them and the domain types, and how a state becomes a snapshot. Older
//! formats are frozen in modules of their own (`v6` to `v12`), read (and, while the cluster's
//! active version is older, written) through `migrate`, which chains one step per format. Which format a batch
//! or snapshot was written in travels with its bytes (`crate::store::format`).

/// Converts the variants that two adjacent formats hold alike, field for field (`step7`
/// to `step9`); the arms after the list handle the rest.
macro_rules! same_variants {
    ($value:expr, $from:ident => $to:ident { $($variant:ident { $($field:ident),* }),+ $(,)? } $($arm:tt)*) => {
        match $value {
            $($from::$variant { $($field),* } => $to::$variant { $($field),* },)+
            $($arm)*
        }
    };
}

pub mod migrate;
mod mirror;
mod step10;
mod step12;
mod step6;
mod step7;
mod step8;
mod step9;
pub mod v10;
pub mod v12;
pub mod v6;
pub mod v7;
pub mod v8;
pub mod v9;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use xce_client::types::{
    HeldJob, HostAttributes, Job, JobEnd, JobResult, JobSpec, Limits, OpenMode, PendCode,
    PendReason, RequestToken, Resources,
};

pub use migrate::{fit_format, NotInFormat};
pub use v6::{
    EndIntentRecord, HeldPhaseRecord, HeldRecord, HostActionRecord, JobActionRecord,
    JobSignalRecord, JobStateRecord, JobUsersRecord, LostPolicyRecord, OrderRecord, OutcomeRecord,
    QueueActionRecord, QueueDefRecord, QueueRecord, RefusalRecord, RoleRecord,
    SchedulerLeaseRecord, StatusRecord, UserTokenRecord,
};

use self::mirror::{mirror_same, mirror_structs, mirror_variants, mirror_via_from};
use super::index::Index;
use super::{
    Command, EndIntent, HostRecord, QueueDef, QueueState, SchedulerLease, State, TokenWindow,
    UserToken,
};
use xce_client::array::{ArraySpec, JobRef, Run, TaskSet};
use xce_client::dependency::{Expr as DepExpr, Kind as DepKind, Term};
use xce_client::types::{ArrayProgress, DependencyState, ScriptId, TaskOp};

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

        mirror_via_from!($record => $domain);
    )+};
}

record_enum! {
    JobResultRecord <=> JobResult { Completed, Failed, Cancelled, Timeout, OutOfMemory, NodeFail }
    PendCodeRecord <=> PendCode {
        Resources, Priority, NoScheduler, QueueInactive, TooBig, Held, BeginTime, Dependency, Limit,
    }
    OpenModeRecord <=> OpenMode { Append, Truncate }
    DependencyStateRecord <=> DependencyState { Waiting, Satisfied, Never }
    DepKindRecord <=> DepKind { After, AfterAny, AfterOk, AfterNotOk, AfterCorr }
}

/// A dependency as stored (format 9 on): its terms, joined by all or any, structured rather
/// than as text, so that no stored dependency can fail to read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum DepExprRecord {
    Term(DepTermRecord),
    All(Vec<DepExprRecord>),
    Any(Vec<DepExprRecord>),
}

/// One term of a stored dependency; `tasks` are an array's task runs (start, end, step).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum DepTermRecord {
    On {
        kind: DepKindRecord,
        id: u64,
        tasks: Option<RunsRecord>,
    },
    Singleton,
}

impl From<DepExpr> for DepExprRecord {
    fn from(e: DepExpr) -> Self {
        let all = |parts: Vec<DepExpr>| parts.into_iter().map(DepExprRecord::from).collect();
        match e {
            DepExpr::Term(Term::On(kind, job)) => DepExprRecord::Term(DepTermRecord::On {
                kind: kind.into(),
                id: job.id,
                tasks: job.tasks.as_ref().map(runs_of),
            }),
            DepExpr::Term(Term::Singleton) => DepExprRecord::Term(DepTermRecord::Singleton),
            DepExpr::All(parts) => DepExprRecord::All(all(parts)),
            DepExpr::Any(parts) => DepExprRecord::Any(all(parts)),
        }
    }
}

impl From<DepExprRecord> for DepExpr {
    fn from(e: DepExprRecord) -> Self {
        let all = |parts: Vec<DepExprRecord>| parts.into_iter().map(DepExpr::from).collect();
        match e {
            DepExprRecord::Term(DepTermRecord::On { kind, id, tasks }) => {
                let tasks = tasks.map(set_of);
                DepExpr::Term(Term::On(kind.into(), JobRef { id, tasks }))
            }
            DepExprRecord::Term(DepTermRecord::Singleton) => DepExpr::Term(Term::Singleton),
            DepExprRecord::All(parts) => DepExpr::All(all(parts)),
            DepExprRecord::Any(parts) => DepExpr::Any(all(parts)),
        }
    }
}

mirror_via_from!(DepExprRecord => DepExpr);

/// Task indices as stored: runs of (start, end, step), by start, each beyond the one before,
/// as `runs_of` writes them (the bytes of a plain list). Read back only in that shape: runs
/// that overlap were never written, and merging them would cost a step per index (a record
/// from a faulty peer could name two billion), so they fail to decode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<(u32, u32, u32)>", into = "Vec<(u32, u32, u32)>")]
pub struct RunsRecord(Vec<(u32, u32, u32)>);

impl TryFrom<Vec<(u32, u32, u32)>> for RunsRecord {
    type Error = String;

    fn try_from(runs: Vec<(u32, u32, u32)>) -> Result<Self, String> {
        let mut last_end: Option<u32> = None;
        for &(start, end, step) in &runs {
            let Some(run) = Run::new(start, end, step) else {
                return Err(format!("task run ({start}, {end}, {step}) is empty"));
            };
            if (run.start, run.end, run.step) != (start, end, step) {
                return Err(format!(
                    "task run ({start}, {end}, {step}) is not as written"
                ));
            }
            if last_end.is_some_and(|last| start <= last) {
                return Err(format!(
                    "task run ({start}, {end}, {step}) overlaps or precedes the one before"
                ));
            }
            last_end = Some(end);
        }
        Ok(RunsRecord(runs))
    }
}

impl From<RunsRecord> for Vec<(u32, u32, u32)> {
    fn from(r: RunsRecord) -> Self {
        r.0
    }
}

fn runs_of(set: &TaskSet) -> RunsRecord {
    RunsRecord(set.runs().map(|r| (r.start, r.end, r.step)).collect())
}

fn set_of(runs: RunsRecord) -> TaskSet {
    let mut set = TaskSet::new();
    for (start, end, step) in runs.0 {
        if let Some(run) = Run::new(start, end, step) {
            set.insert_run(run);
        }
    }
    set
}

/// An array spec as stored (format 9 on).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArraySpecRecord {
    pub tasks: RunsRecord,
    pub throttle: Option<u32>,
}

impl From<ArraySpec> for ArraySpecRecord {
    fn from(a: ArraySpec) -> Self {
        ArraySpecRecord {
            tasks: runs_of(&a.tasks),
            throttle: a.throttle,
        }
    }
}

impl From<ArraySpecRecord> for ArraySpec {
    fn from(a: ArraySpecRecord) -> Self {
        ArraySpec {
            tasks: set_of(a.tasks),
            throttle: a.throttle,
        }
    }
}

/// An array's own record's progress as stored (format 9 on).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayProgressRecord {
    pub pending: RunsRecord,
    pub waiting: u64,
    pub running: u64,
    pub completed: u64,
    pub failed: u64,
    pub unrun: u64,
}

impl From<ArrayProgress> for ArrayProgressRecord {
    fn from(a: ArrayProgress) -> Self {
        ArrayProgressRecord {
            pending: runs_of(&a.pending),
            waiting: a.waiting,
            running: a.running,
            completed: a.completed,
            failed: a.failed,
            unrun: a.unrun,
        }
    }
}

impl From<ArrayProgressRecord> for ArrayProgress {
    fn from(a: ArrayProgressRecord) -> Self {
        ArrayProgress {
            pending: set_of(a.pending),
            waiting: a.waiting,
            running: a.running,
            completed: a.completed,
            failed: a.failed,
            unrun: a.unrun,
        }
    }
}

mirror_via_from!(ArraySpecRecord => ArraySpec, ArrayProgressRecord => ArrayProgress);

/// A task's view of its array as stored (format 9 on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayTaskRecord {
    pub array_id: u64,
    pub index: u32,
    pub count: u64,
    pub min: u32,
    pub max: u32,
    pub step: u32,
}

/// A warning signal as stored (`--signal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarningRecord {
    pub signal: i32,
    pub before_s: u32,
    pub leader_only: bool,
}

/// What `UpdateJob` changes, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobChangesRecord {
    pub name: Option<String>,
    pub priority: Option<i32>,
    pub queue: Option<String>,
    pub cpus: Option<u32>,
    pub mem_mb: Option<u64>,
    pub time_limit_s: Option<u32>,
    pub hold: Option<bool>,
    pub begin_time_ms: Option<u64>,
}

/// An amount of resources as stored: generic resources by name, in name order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourcesRecord {
    pub cpus: u32,
    pub mem_mb: u64,
    pub gres: Vec<(String, u64)>,
}

impl From<Resources> for ResourcesRecord {
    fn from(r: Resources) -> Self {
        let Resources { cpus, mem_mb, gres } = r;
        ResourcesRecord {
            cpus,
            mem_mb,
            gres: gres.into_iter().collect(),
        }
    }
}

impl From<ResourcesRecord> for Resources {
    fn from(r: ResourcesRecord) -> Self {
        let mut resources = Resources::new(r.cpus, r.mem_mb);
        for (name, count) in r.gres {
            resources.set_gres(&name, count);
        }
        resources
    }
}

/// A job's limits as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitsRecord {
    pub time_limit_s: Option<u32>,
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
    /// The account its use is charged to; empty: none (format 13 on).
    pub account: String,
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
    /// The start backfill reserved for it, while pending (format 13 on).
    pub expected_start_ms: Option<u64>,
    /// What its attempts used (format 13 on).
    pub usage: Option<UsageRecord>,
    /// Its attempts that started (format 13 on).
    pub attempts: Vec<AttemptRecord>,
}

/// One attempt of a job that started, as stored (format 13 on).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptRecord {
    pub attempt: u32,
    pub host: String,
    pub start_ms: u64,
    pub end_ms: Option<u64>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub reason: Option<String>,
    pub usage: Option<UsageRecord>,
}

/// What a job's attempts used, as stored (format 13 on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRecord {
    pub cpu_user_ms: u64,
    pub cpu_sys_ms: u64,
    pub max_rss_kb: u64,
}

mirror_structs! {
    LimitsRecord <=> Limits { time_limit_s }
    SpecRecord <=> JobSpec {
        name, user, queue, command, env, cwd, resources, priority, limits, script, stdout, stderr,
        open_mode, hold, begin_time_ms, warn_signal, no_requeue, dependency, kill_on_invalid_dep,
        array, account,
    }
    JobRecord <=> Job {
        id, spec, state, pend_reason, pend_code, reason, result, host, attempt, exit_code, signal,
        submit_time_ms, start_time_ms, end_time_ms, output_dir, cancelled_by, dependency_state,
        array, array_task, runs, expected_start_ms, usage, attempts,
    }
    AttemptRecord <=> xce_client::types::AttemptRun {
        attempt, host, start_ms, end_ms, exit_code, signal, reason, usage,
    }
    UsageRecord <=> xce_client::types::Usage { cpu_user_ms, cpu_sys_ms, max_rss_kb }
    ArrayTaskRecord <=> xce_client::types::ArrayTask { array_id, index, count, min, max, step }
    WarningRecord <=> xce_client::types::Warning { signal, before_s, leader_only }
    JobChangesRecord <=> xce_client::types::JobChanges {
        name, priority, queue, cpus, mem_mb, time_limit_s, hold, begin_time_ms,
    }
    HostAttributesRecord <=> HostAttributes { name, resources, spool_dir, job_users }
    HeldRecord <=> HeldJob { id, attempt, phase }
    ReasonRecord <=> PendReason { code, text, expected_start_ms }
    QueueDefRecord <=> QueueDef { name, priority, on_host_lost }
}

mirror_via_from! {
    ResourcesRecord => Resources,
    EndRecord => JobEnd,
    JobStateRecord => xce_client::types::JobState,
    JobActionRecord => xce_client::types::JobAction,
    QueueActionRecord => xce_client::types::QueueAction,
    HostActionRecord => xce_client::types::HostAction,
    HeldPhaseRecord => xce_client::types::HeldPhase,
    LostPolicyRecord => super::LostPolicy,
    RoleRecord => xce_client::types::Role,
    JobUsersRecord => xce_client::types::JobUsers,
    EndIntentRecord => EndIntent,
}

// Records a command carries as they are.
mirror_same!(JobRecord, StateRecord, EndIntentRecord);

/// A worker's host attributes as stored in a join.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostAttributesRecord {
    pub name: String,
    pub resources: ResourcesRecord,
    pub spool_dir: String,
    pub job_users: JobUsersRecord,
}

/// How an attempt ended, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndRecord {
    Exit(i32),
    Signal(i32),
    Failed(String),
    OutOfMemory,
    TimedOut {
        exit_code: Option<i32>,
        signal: Option<i32>,
    },
}

/// Why a pending job waits, as formats 7 to 12 store it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendReasonRecord {
    pub code: PendCodeRecord,
    pub text: String,
}

/// Why a pending job waits, and the start reserved for it, as stored (format 13 on).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReasonRecord {
    pub code: PendCodeRecord,
    pub text: String,
    pub expected_start_ms: Option<u64>,
}

/// A command as stored in the log, variant for variant with [`Command`]. Append new variants
/// at the end: an inserted one renumbers those after it (and is a new format).
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
        /// What the attempt used (format 13 on).
        usage: Option<UsageRecord>,
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
        reasons: Vec<(u64, ReasonRecord)>,
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
    /// Jobs retired to history (format 13 on).
    RetireJobs {
        ids: Vec<u64>,
    },
}

impl From<JobEnd> for EndRecord {
    fn from(end: JobEnd) -> Self {
        match end {
            JobEnd::Exit(c) => EndRecord::Exit(c),
            JobEnd::Signal(s) => EndRecord::Signal(s),
            JobEnd::Failed(r) => EndRecord::Failed(r),
            JobEnd::OutOfMemory => EndRecord::OutOfMemory,
            JobEnd::TimedOut { exit_code, signal } => EndRecord::TimedOut { exit_code, signal },
        }
    }
}

impl From<EndRecord> for JobEnd {
    fn from(end: EndRecord) -> Self {
        match end {
            EndRecord::Exit(c) => JobEnd::Exit(c),
            EndRecord::Signal(s) => JobEnd::Signal(s),
            EndRecord::Failed(r) => JobEnd::Failed(r),
            EndRecord::OutOfMemory => JobEnd::OutOfMemory,
            EndRecord::TimedOut { exit_code, signal } => JobEnd::TimedOut { exit_code, signal },
        }
    }
}

mirror_variants! {
    CommandRecord <=> Command {
        Submit { token, spec, script },
        ControlJob { token, id, action, by, actor },
        ControlQueue { token, name, action },
        RegisterHost { token, host, held },
        ControlHost { token, name, action },
        SetHostAvailable { name, available },
        Dispatch { token, id, host },
        JobStarted { token, id, attempt, host },
        JobFinished { token, id, attempt, host, end, usage },
        HostLost { name },
        Barrier { term, queues },
        AcquireScheduler { token, name, instance, ttl_ms },
        DispatchBatch { token, epoch, placements },
        SetPendReasons { token, epoch, reasons },
        CreateToken { token, id, user, role, hash, expires_in_ms },
        RevokeToken { token, id },
        Restore { token, state },
        RestoreJobs { token, base, jobs, intents, scripts },
        RaiseVersion { to },
        UpdateJob { token, id, by, changes },
        SignalJob { token, id, by, signal, leader_only },
        ControlTasks { token, array, tasks, by, actor, op },
        RetireJobs { ids },
    }
}

/// What a `ControlTasks` does to each task, as stored (format 10 on).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskOpRecord {
    Control {
        action: JobActionRecord,
    },
    Update {
        changes: JobChangesRecord,
        throttle: Option<u32>,
    },
    Signal {
        signal: i32,
        leader_only: bool,
    },
}

mirror_variants! {
    TaskOpRecord <=> TaskOp {
        Control { action },
        Update { changes, throttle },
        Signal { signal, leader_only },
    }
}

mirror_via_from!(TaskOpRecord => TaskOp);

impl mirror::Mirror<RunsRecord> for TaskSet {
    fn mirror(self) -> RunsRecord {
        runs_of(&self)
    }
}

impl mirror::Mirror<TaskSet> for RunsRecord {
    fn mirror(self) -> TaskSet {
        set_of(self)
    }
}

/// A host as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostStoredRecord {
    pub name: String,
    pub resources: ResourcesRecord,
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
    /// The cluster version in force (format 7 on; a format-6 state is at 6).
    pub active_version: u32,
    /// Job scripts by the SHA-256 of their bytes (format 8 on), each once.
    pub scripts: Vec<([u8; 32], Vec<u8>)>,
    /// How many jobs have retired to history (format 13 on).
    pub retired_seq: u64,
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
        resources: h.resources.clone().into(),
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
            active_version,
            scripts,
            retired_seq,
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
            active_version,
            scripts: scripts
                .into_iter()
                .map(|(id, body)| (id.0, body.to_vec()))
                .collect(),
            retired_seq,
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
                        resources: h.resources.into(),
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
            active_version: rec.active_version,
            scripts: rec
                .scripts
                .into_iter()
                .map(|(id, body)| (ScriptId(id), Arc::from(body)))
                .collect(),
            retired_seq: rec.retired_seq,
            emitted: Vec::new(),
            moved: Vec::new(),
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

/// Serializes a state exactly as its [`StateRecord`] of `format` would be (the same fields in
/// the same order), converting one record at a time.
struct SnapshotView<'a> {
    state: &'a State,
    format: u32,
}

impl Serialize for SnapshotView<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let st = self.state;
        let format = self.format;
        let tokens: Vec<(u128, OutcomeRecord)> = st
            .tokens
            .order
            .iter()
            .filter_map(|t| st.tokens.outcomes.get(t).map(|o| (t.0, o.clone().into())))
            .collect();
        let mut rec = s.serialize_struct("StateRecord", 11)?;
        rec.serialize_field("next_job_id", &st.next_job_id)?;
        let jobs = st.jobs.values().map(|j| JobRecord::from(Job::clone(j)));
        let hosts = st.hosts.iter().map(|(n, h)| host_record(n, h));
        let queues = || Seq::of(st.queues.iter().map(|(n, q)| queue_record(n, q)));
        // Every record of a state whose active version is older is one that format can hold:
        // what it could not was refused before it was proposed (`fit_format`).
        match format {
            6 => {
                let jobs = jobs.map(migrate::downgrade_job_6);
                rec.serialize_field("jobs", &Seq::of(jobs.map(Fallible)))?;
                rec.serialize_field("queues", &queues())?;
                let hosts = hosts.map(migrate::downgrade_host_6);
                rec.serialize_field("hosts", &Seq::of(hosts.map(Fallible)))?;
            }
            7 => {
                let jobs = jobs.map(migrate::downgrade_job_7);
                rec.serialize_field("jobs", &Seq::of(jobs.map(Fallible)))?;
                rec.serialize_field("queues", &queues())?;
                rec.serialize_field("hosts", &Seq::of(hosts))?;
            }
            8 => {
                let jobs = jobs.map(migrate::downgrade_job_8);
                rec.serialize_field("jobs", &Seq::of(jobs.map(Fallible)))?;
                rec.serialize_field("queues", &queues())?;
                rec.serialize_field("hosts", &Seq::of(hosts))?;
            }
            9..=11 => {
                let jobs = jobs.map(migrate::downgrade_job_10);
                rec.serialize_field("jobs", &Seq::of(jobs.map(Fallible)))?;
                rec.serialize_field("queues", &queues())?;
                rec.serialize_field("hosts", &Seq::of(hosts))?;
            }
            12 => {
                let jobs = jobs.map(migrate::downgrade_job_12);
                rec.serialize_field("jobs", &Seq::of(jobs.map(Fallible)))?;
                rec.serialize_field("queues", &queues())?;
                rec.serialize_field("hosts", &Seq::of(hosts))?;
            }
            _ => {
                rec.serialize_field("jobs", &Seq::of(jobs))?;
                rec.serialize_field("queues", &queues())?;
                rec.serialize_field("hosts", &Seq::of(hosts))?;
            }
        }
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
        if format >= 7 {
            rec.serialize_field("active_version", &st.active_version)?;
        }
        if format == 7 && !st.scripts.is_empty() {
            return Err(serde::ser::Error::custom(NotInFormat {
                what: "script",
                needs: 8,
            }));
        }
        if format >= 8 {
            let scripts = st.scripts.iter().map(|(id, body)| (id.0, &**body));
            rec.serialize_field("scripts", &Seq::of(scripts))?;
        }
        if format < 13 && st.retired_seq > 0 {
            return Err(serde::ser::Error::custom(NotInFormat {
                what: "retired job",
                needs: 13,
            }));
        }
        if format >= 13 {
            rec.serialize_field("retired_seq", &st.retired_seq)?;
        }
        rec.end()
    }
}

/// An item whose conversion may fail, serialized as the item or failing the serializer.
struct Fallible<T, E>(Result<T, E>);

impl<T: Serialize, E: std::fmt::Display> Serialize for Fallible<T, E> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            Ok(item) => item.serialize(s),
            Err(e) => Err(serde::ser::Error::custom(e.to_string())),
        }
    }
}

impl State {
    /// The snapshot's bytes in the cluster's active version (so that every member can install
    /// it): the encoding of [`State::into_record`] (or its format-6 form), after the format's
    /// mark, written one record at a time, so that encoding a copy of the state (which
    /// shares its jobs) makes no second copy of every job.
    pub fn snapshot_bytes(&self) -> Result<Vec<u8>, postcard::Error> {
        let encode = |format| {
            let view = SnapshotView {
                state: self,
                format,
            };
            crate::store::format::encode_marked(format, &view)
        };
        // A state of an older version holds nothing that version cannot (what it could not
        // was refused before it was proposed); one that came from a log no primary of this
        // build wrote might, and is then written in the newest format rather than not at all.
        encode(self.active_version).or_else(|e| {
            tracing::warn!(error = %e, version = self.active_version, "the state holds what its cluster version cannot; writing its snapshot in the newest format");
            encode(crate::store::STORE_FORMAT)
        })
    }

    /// The cluster version in force: what every member can apply, so what is written.
    pub fn active_version(&self) -> u32 {
        self.active_version
    }
}

/// Reads a snapshot's bytes of any format this build reads, converted to the current records.
pub fn decode_state(bytes: &[u8]) -> Result<StateRecord, crate::store::format::FormatError> {
    use crate::store::format::{split_mark, FormatError};
    match split_mark(bytes)? {
        (6, body) => {
            let old: v6::StateRecord = postcard::from_bytes(body).map_err(FormatError::decode)?;
            migrate::upgrade_state_6(old).map_err(FormatError::Migrate)
        }
        (7, body) => {
            let old: v7::StateRecord = postcard::from_bytes(body).map_err(FormatError::decode)?;
            Ok(migrate::upgrade_state_7(old))
        }
        (8, body) => {
            let old: v8::StateRecord = postcard::from_bytes(body).map_err(FormatError::decode)?;
            Ok(migrate::upgrade_state_8(old))
        }
        (9..=11, body) => {
            let old: v10::StateRecord = postcard::from_bytes(body).map_err(FormatError::decode)?;
            Ok(migrate::upgrade_state_10(old))
        }
        (12, body) => {
            let old: v12::StateRecord = postcard::from_bytes(body).map_err(FormatError::decode)?;
            Ok(migrate::upgrade_state_12(old))
        }
        (_, body) => postcard::from_bytes(body).map_err(FormatError::decode),
    }
}

#[cfg(test)]
mod tests;
