//! What is stored in the Raft log (`Command`) and what applying it answers (`Outcome`).

use serde::{Deserialize, Serialize};
use xce_client::array::TaskSet;
use xce_client::tokens::SecretHash;
use xce_client::types::{
    HeldJob, HostAction, HostAttributes, JobAction, JobChanges, JobEnd, JobId, JobOrder, JobSpec,
    PendReason, Placement, QueueAction, Refusal, RequestToken, Role, TaskOp,
};
use xce_proto::Status;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndIntent {
    /// The job ends `exited` with reason "killed".
    Kill,
    /// The job goes back to pending once its current attempt is gone.
    Requeue,
}

/// One state change, as proposed and applied. The Raft log (and the append-entries messages
/// that replicate it) hold it as a [`super::CommandRecord`] of the batch's store format
/// (`store::format`).
#[derive(Debug, Clone, PartialEq, Eq)]
// Submits are most of what the log holds, so boxing their spec would cost an allocation per
// submit and save no memory in a batch.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    Submit {
        token: RequestToken,
        spec: JobSpec,
        /// The bytes of `spec.script`, when the primary did not hold them yet (else `None`:
        /// the log holds each script once).
        script: Option<std::sync::Arc<[u8]>>,
    },
    ControlJob {
        token: RequestToken,
        id: JobId,
        action: JobAction,
        /// The user whose own jobs alone this caller may control (a `user`'s session);
        /// `None` for an operator, an admin, or with authentication off.
        by: Option<String>,
        /// Who asked, for the record (`cancelled by alice`); `None` without authentication.
        actor: Option<String>,
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
    SetHostAvailable { name: String, available: bool },
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
        /// What the attempt used, as its shim measured it (from version 13).
        usage: Option<xce_client::types::Usage>,
    },
    /// The primary's liveness tracking: a host stayed unavailable beyond the grace period;
    /// its placed jobs are lost (requeued or exited, per queue policy).
    HostLost { name: String },
    /// Proposed by every new primary: once applied, the primary has committed an entry of its
    /// own term and applied everything before it (the readiness barrier). It also brings the
    /// configured queues into the replicated state.
    Barrier { term: u64, queues: Vec<QueueDef> },
    /// A scheduler asks for, or renews, the scheduler lease.
    AcquireScheduler {
        token: RequestToken,
        name: String,
        instance: u64,
        ttl_ms: u32,
    },
    /// The lease holder's placements; each validated on its own, like a `Dispatch`.
    DispatchBatch {
        token: RequestToken,
        epoch: u64,
        placements: Vec<Placement>,
    },
    /// The lease holder's word on why jobs still pend.
    SetPendReasons {
        token: RequestToken,
        epoch: u64,
        reasons: Vec<(JobId, PendReason)>,
    },
    /// An admin registers a user's token (its secret's hash only); it expires
    /// `expires_in_ms` after it is applied, or never.
    CreateToken {
        token: RequestToken,
        id: String,
        user: String,
        role: Role,
        hash: SecretHash,
        expires_in_ms: Option<u64>,
    },
    /// An admin revokes a token: every session it authenticated is refused from then on.
    RevokeToken { token: RequestToken, id: String },
    /// An admin starts this cluster from a backup: its state replaces the state of a cluster
    /// that has never held a job or a user token (`xce admin snapshot restore`).
    Restore {
        token: RequestToken,
        state: Box<super::StateRecord>,
    },
    /// A later part of that backup: its jobs, added once the part whose token is `base` (the
    /// first, a `Restore`) has been applied.
    RestoreJobs {
        token: RequestToken,
        base: RequestToken,
        jobs: Vec<super::stored::JobRecord>,
        intents: Vec<(u64, super::stored::EndIntentRecord)>,
        /// The scripts of these jobs that no earlier part carried, by id.
        scripts: Vec<([u8; 32], Vec<u8>)>,
    },
    /// Proposed by the primary once every member runs a build of version `to`: from this
    /// entry on, what the cluster writes may be in that format.
    RaiseVersion { to: u32 },
    /// The primary retires jobs that ended long enough ago to history (`state::retire`;
    /// from version 13). A repeat retires nothing more, so it needs no token.
    RetireJobs { ids: Vec<JobId> },
    /// `xce update`, `xce hold`, `xce release`: changes to one job (format 8 on).
    UpdateJob {
        token: RequestToken,
        id: JobId,
        /// As `ControlJob`'s: the user whose own jobs alone this caller may change.
        by: Option<String>,
        changes: JobChanges,
    },
    /// `xce signal`: a signal to one running job's processes (format 8 on).
    SignalJob {
        token: RequestToken,
        id: JobId,
        by: Option<String>,
        signal: i32,
        /// The job's leading process (its batch shell) alone, not its process group.
        leader_only: bool,
    },
    /// An action on tasks of array `array` (`ID_7`, `ID_[1-5]`; `tasks` `None`: the whole
    /// array), each task taking it as a job would (format 10 on).
    ControlTasks {
        token: RequestToken,
        array: JobId,
        tasks: Option<TaskSet>,
        /// As `ControlJob`'s.
        by: Option<String>,
        actor: Option<String>,
        op: TaskOp,
    },
}

impl Command {
    /// The request token of a client's write; liveness and barrier entries carry none (the
    /// primary proposes them from fresh state, so a repeat is harmless).
    pub fn token(&self) -> Option<RequestToken> {
        match self {
            Command::Submit { token, .. }
            | Command::ControlJob { token, .. }
            | Command::ControlQueue { token, .. }
            | Command::RegisterHost { token, .. }
            | Command::ControlHost { token, .. }
            | Command::Dispatch { token, .. }
            | Command::JobStarted { token, .. }
            | Command::JobFinished { token, .. }
            | Command::AcquireScheduler { token, .. }
            | Command::DispatchBatch { token, .. }
            | Command::SetPendReasons { token, .. }
            | Command::CreateToken { token, .. }
            | Command::RevokeToken { token, .. }
            | Command::Restore { token, .. }
            | Command::RestoreJobs { token, .. }
            | Command::UpdateJob { token, .. }
            | Command::SignalJob { token, .. }
            | Command::ControlTasks { token, .. } => Some(*token),
            Command::Barrier { .. }
            | Command::SetHostAvailable { .. }
            | Command::HostLost { .. }
            | Command::RaiseVersion { .. }
            | Command::RetireJobs { .. } => None,
        }
    }

    /// Approximate encoded size, for bounding Raft batches.
    pub fn approx_size(&self) -> usize {
        match self {
            Command::Submit { spec, script, .. } => {
                120 + script.as_ref().map_or(0, |s| s.len() + 48)
                    + spec.stdout.as_ref().map_or(0, String::len)
                    + spec.stderr.as_ref().map_or(0, String::len)
                    + spec.name.len()
                    + spec.user.len()
                    + spec.queue.len()
                    + spec.cwd.len()
                    + spec
                        .resources
                        .gres
                        .keys()
                        .map(|k| k.len() + 16)
                        .sum::<usize>()
                    + spec.command.iter().map(|a| a.len() + 8).sum::<usize>()
                    + spec
                        .env
                        .iter()
                        .map(|(k, v)| k.len() + v.len() + 16)
                        .sum::<usize>()
            }
            Command::ControlQueue { name, .. } | Command::ControlHost { name, .. } => {
                64 + name.len()
            }
            Command::RegisterHost { host, held, .. } => 64 + host.name.len() + 24 * held.len(),
            Command::SetHostAvailable { name, .. } | Command::HostLost { name } => 32 + name.len(),
            Command::ControlJob { by, actor, .. } => {
                48 + by.as_ref().map_or(0, String::len) + actor.as_ref().map_or(0, String::len)
            }
            Command::UpdateJob { by, changes, .. } => {
                96 + by.as_ref().map_or(0, String::len)
                    + changes.name.as_ref().map_or(0, String::len)
                    + changes.queue.as_ref().map_or(0, String::len)
            }
            Command::SignalJob { by, .. } => 48 + by.as_ref().map_or(0, String::len),
            Command::ControlTasks {
                tasks,
                by,
                actor,
                op,
                ..
            } => {
                let changes = match op {
                    TaskOp::Update { changes, .. } => {
                        changes.name.as_ref().map_or(0, String::len)
                            + changes.queue.as_ref().map_or(0, String::len)
                    }
                    _ => 0,
                };
                128 + tasks.as_ref().map_or(0, |t| 16 * t.runs().count())
                    + by.as_ref().map_or(0, String::len)
                    + actor.as_ref().map_or(0, String::len)
                    + changes
            }
            Command::CreateToken { id, user, .. } => 96 + id.len() + user.len(),
            Command::RevokeToken { id, .. } => 48 + id.len(),
            // Counted as the largest part a restore takes (its bytes are bounded when it is
            // read, `store::backup::decode_part`): nothing joins a batch after it, so no
            // batch ever holds two.
            Command::Restore { .. } | Command::RestoreJobs { .. } => {
                crate::store::backup::MAX_PART_BYTES
            }
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
            Command::AcquireScheduler { name, .. } => 48 + name.len(),
            Command::DispatchBatch { placements, .. } => {
                48 + placements.iter().map(|p| 16 + p.host.len()).sum::<usize>()
            }
            Command::SetPendReasons { reasons, .. } => {
                48 + reasons
                    .iter()
                    .map(|(_, r)| 17 + r.text.len())
                    .sum::<usize>()
            }
            Command::RaiseVersion { .. } => 16,
            Command::RetireJobs { ids } => 16 + 9 * ids.len(),
        }
    }
}

/// The result of applying one command. Side effects for workers are not here: they are
/// [`crate::state::Event`]s, emitted by the same apply. Snapshots store the remembered ones
/// (the token window) as records; this type's own serde is only openraft's in-process reply.
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
    /// A worker's join was applied: `orders` go back to it in the join's reply.
    Resynced { orders: Vec<JobOrder> },
    /// The scheduler lease is the caller's, at this fencing epoch.
    Leased { epoch: u64 },
    /// A batch of placements was judged: all were made but the `refused` ones.
    Placed { refused: Vec<Refusal> },
}

impl Outcome {
    pub(super) fn rejected(status: Status, message: impl Into<String>) -> Outcome {
        Outcome::Rejected {
            status,
            message: message.into(),
        }
    }

    /// The outcome as first applied: a repeat answers with its original.
    pub fn original(&self) -> &Outcome {
        match self {
            Outcome::Duplicate(o) => o.original(),
            other => other,
        }
    }
}
