//! The step between store formats 6 and 7: format-6 records to format-7 ones (`upgrade_*`,
//! when old data is read) and back (`downgrade_*`, while the cluster's active version is still
//! 6, so that members on the older build can apply what is replicated and a data dir stays
//! readable by both builds). `super::migrate` chains it with the later steps.
//!
//! The step is lossless for everything format 6 can hold: `downgrade(upgrade(x)) == x`
//! (property-tested). What format 7 adds is either derived from format-6 fields on the way
//! up — a job's `result` from its state and reason, a pending job's code from its reason's
//! text — or refused on the way down by [`NotInFormat`], naming the field. A command is
//! proposed in a format-6 cluster only as `upgrade(downgrade(c))` (`fit_format`), so the
//! primary applies exactly what its followers decode, and a result or code computed by
//! `apply` is the one a replica restarting from a format-6 snapshot derives (tested for every
//! way a job ends in `stored::tests`).
//!
//! One limit of deriving: `apply` gives an operator's kill, the OOM killer and a lost host
//! their own reasons ("killed", "out of memory", "host NAME lost"), and a format-6 record's
//! result is read back from those texts. A worker that reported a failure whose text is
//! exactly one of them (no worker does: its failures name the command or the directory)
//! would read back as that kind of end from a format-6 snapshot, while replicas that applied
//! the report say `failed`: only until the cluster's version is raised, after which results
//! are stored.

use xce_client::types::{JobResult, PendCode};

use super::v7::{BackupPart, CommandRecord, JobRecord, SpecRecord, StateRecord};
use super::{v6, EndRecord, HostAttributesRecord, HostStoredRecord};
use super::{JobResultRecord, JobStateRecord, LimitsRecord, PendCodeRecord};
use super::{PendReasonRecord, ResourcesRecord};

/// Something the current records hold that an older format cannot: the request that needs it
/// is refused until the cluster's active version is raised.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} needs cluster version {needs}")]
pub struct NotInFormat {
    /// The field or kind of request, as a user names it (`time_limit_s`, `gres`, ...).
    pub what: &'static str,
    pub needs: u32,
}

pub(super) fn not_in_6(what: &'static str) -> NotInFormat {
    NotInFormat { what, needs: 7 }
}

/// A format-6 record that no format-6 controller ever wrote (its service refused such a
/// request before it reached the log): reading it is refused rather than guessed at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("format-6 record that no format-6 controller wrote: {0}")]
pub struct Unwritten(pub String);

fn count_6(field: &str, value: i64) -> Result<u64, Unwritten> {
    u64::try_from(value).map_err(|_| Unwritten(format!("{field} {value}")))
}

fn upgrade_spec(s: v6::SpecRecord) -> Result<SpecRecord, Unwritten> {
    let v6::SpecRecord {
        name,
        user,
        queue,
        command,
        env,
        cwd,
        cpus,
        mem_mb,
        priority,
    } = s;
    let cpus = u32::try_from(count_6("cpus", cpus.into())?)
        .map_err(|_| Unwritten(format!("cpus {cpus}")))?;
    Ok(SpecRecord {
        name,
        user,
        queue,
        command,
        env,
        cwd,
        resources: ResourcesRecord {
            cpus,
            mem_mb: count_6("mem_mb", mem_mb)?,
            gres: Vec::new(),
        },
        priority,
        limits: LimitsRecord { time_limit_s: None },
    })
}

fn downgrade_spec(s: SpecRecord) -> Result<v6::SpecRecord, NotInFormat> {
    let SpecRecord {
        name,
        user,
        queue,
        command,
        env,
        cwd,
        resources,
        priority,
        limits,
    } = s;
    if limits.time_limit_s.is_some() {
        return Err(not_in_6("time_limit_s"));
    }
    if !resources.gres.is_empty() {
        return Err(not_in_6("gres"));
    }
    Ok(v6::SpecRecord {
        name,
        user,
        queue,
        command,
        env,
        cwd,
        cpus: i32::try_from(resources.cpus).map_err(|_| not_in_6("cpus over 2^31"))?,
        mem_mb: i64::try_from(resources.mem_mb).map_err(|_| not_in_6("mem_mb over 2^63"))?,
        priority,
    })
}

/// The code of a pending job's reason as a format-6 state holds it: the reasons the
/// controller itself sets (a requeue, a host that no longer runs the job) carry none, as
/// `apply` gives them none; every other one is a scheduler's.
pub fn pend_code_of_v6(text: &str) -> Option<PendCode> {
    if text.starts_with("requeued") || text.starts_with("host ") {
        None
    } else {
        Some(PendCode::of_v6_text(text))
    }
}

/// How a format-6 job that ended, ended, from what that format holds: the reasons `apply`
/// gives an operator's kill, the OOM killer and a lost host, else a failure.
pub fn result_of_v6(state: JobStateRecord, reason: Option<&str>) -> Option<JobResult> {
    match (state, reason) {
        (JobStateRecord::Done, _) => Some(JobResult::Completed),
        (JobStateRecord::Exited, Some(crate::state::REASON_KILLED)) => Some(JobResult::Cancelled),
        (JobStateRecord::Exited, Some(crate::state::REASON_OOM)) => Some(JobResult::OutOfMemory),
        (JobStateRecord::Exited, Some(r)) if is_lost_reason(r) => Some(JobResult::NodeFail),
        (JobStateRecord::Exited, _) => Some(JobResult::Failed),
        _ => None,
    }
}

/// Whether a reason is one `apply` gives a job whose host was lost (the queue's policy
/// `exit`): `host NAME lost`, `lost by its worker on NAME`.
fn is_lost_reason(reason: &str) -> bool {
    (reason.starts_with("host ") && reason.ends_with(" lost"))
        || reason.starts_with("lost by its worker on ")
}

/// A format-6 job as a current record.
pub fn upgrade_job(j: v6::JobRecord) -> Result<JobRecord, Unwritten> {
    let v6::JobRecord {
        id,
        spec,
        state,
        pend_reason,
        reason,
        host,
        attempt,
        exit_code,
        signal,
        submit_time_ms,
        start_time_ms,
        end_time_ms,
        output_dir,
    } = j;
    let pend_code = match state {
        JobStateRecord::Pending => pend_reason.as_deref().and_then(pend_code_of_v6),
        _ => None,
    };
    Ok(JobRecord {
        id,
        spec: upgrade_spec(spec)?,
        state,
        result: result_of_v6(state, reason.as_deref()).map(JobResultRecord::from),
        pend_reason,
        pend_code: pend_code.map(PendCodeRecord::from),
        reason,
        host,
        attempt,
        exit_code,
        signal,
        submit_time_ms,
        start_time_ms,
        end_time_ms,
        output_dir,
    })
}

/// A current job record as format 6 holds it: its result and code are dropped (they are
/// derived again on the way up); a timeout, which format 6 cannot derive, is refused.
pub fn downgrade_job(j: JobRecord) -> Result<v6::JobRecord, NotInFormat> {
    let JobRecord {
        id,
        spec,
        state,
        pend_reason,
        pend_code: _,
        reason,
        result,
        host,
        attempt,
        exit_code,
        signal,
        submit_time_ms,
        start_time_ms,
        end_time_ms,
        output_dir,
    } = j;
    if result == Some(JobResultRecord::Timeout) {
        return Err(not_in_6("a timeout"));
    }
    Ok(v6::JobRecord {
        id,
        spec: downgrade_spec(spec)?,
        state,
        pend_reason,
        reason,
        host,
        attempt,
        exit_code,
        signal,
        submit_time_ms,
        start_time_ms,
        end_time_ms,
        output_dir,
    })
}

fn upgrade_resources(cpus: u32, mem_mb: u64) -> ResourcesRecord {
    ResourcesRecord {
        cpus,
        mem_mb,
        gres: Vec::new(),
    }
}

fn downgrade_resources(r: ResourcesRecord) -> Result<(u32, u64), NotInFormat> {
    if !r.gres.is_empty() {
        return Err(not_in_6("gres"));
    }
    Ok((r.cpus, r.mem_mb))
}

fn upgrade_host(h: v6::HostStoredRecord) -> HostStoredRecord {
    HostStoredRecord {
        name: h.name,
        resources: upgrade_resources(h.cpus, h.mem_mb),
        spool_dir: h.spool_dir,
        job_users: h.job_users,
        closed: h.closed,
        available: h.available,
    }
}

/// A current host record as format 6 holds it.
pub fn downgrade_host(h: HostStoredRecord) -> Result<v6::HostStoredRecord, NotInFormat> {
    let (cpus, mem_mb) = downgrade_resources(h.resources)?;
    Ok(v6::HostStoredRecord {
        name: h.name,
        cpus,
        mem_mb,
        spool_dir: h.spool_dir,
        job_users: h.job_users,
        closed: h.closed,
        available: h.available,
    })
}

fn upgrade_end(e: v6::EndRecord) -> EndRecord {
    match e {
        v6::EndRecord::Exit(c) => EndRecord::Exit(c),
        v6::EndRecord::Signal(s) => EndRecord::Signal(s),
        v6::EndRecord::Failed(r) => EndRecord::Failed(r),
        v6::EndRecord::OutOfMemory => EndRecord::OutOfMemory,
    }
}

fn downgrade_end(e: EndRecord) -> Result<v6::EndRecord, NotInFormat> {
    Ok(match e {
        EndRecord::Exit(c) => v6::EndRecord::Exit(c),
        EndRecord::Signal(s) => v6::EndRecord::Signal(s),
        EndRecord::Failed(r) => v6::EndRecord::Failed(r),
        EndRecord::OutOfMemory => v6::EndRecord::OutOfMemory,
        EndRecord::TimedOut { .. } => return Err(not_in_6("a timeout")),
    })
}

/// A format-6 state as a current record, at active version 6.
pub fn upgrade_state(s: v6::StateRecord) -> Result<StateRecord, Unwritten> {
    let v6::StateRecord {
        next_job_id,
        jobs,
        queues,
        hosts,
        intents,
        tokens,
        scheduler,
        user_tokens,
    } = s;
    Ok(StateRecord {
        next_job_id,
        jobs: jobs
            .into_iter()
            .map(upgrade_job)
            .collect::<Result<_, _>>()?,
        queues,
        hosts: hosts.into_iter().map(upgrade_host).collect(),
        intents,
        tokens,
        scheduler,
        user_tokens,
        active_version: 6,
    })
}

/// A current state record as format 6 holds it (its active version is dropped: format 6 is
/// version 6).
pub fn downgrade_state(s: StateRecord) -> Result<v6::StateRecord, NotInFormat> {
    let StateRecord {
        next_job_id,
        jobs,
        queues,
        hosts,
        intents,
        tokens,
        scheduler,
        user_tokens,
        active_version: _,
    } = s;
    Ok(v6::StateRecord {
        next_job_id,
        jobs: jobs
            .into_iter()
            .map(downgrade_job)
            .collect::<Result<_, _>>()?,
        queues,
        hosts: hosts
            .into_iter()
            .map(downgrade_host)
            .collect::<Result<_, _>>()?,
        intents,
        tokens,
        scheduler,
        user_tokens,
    })
}

/// A format-6 backup part as the current one.
pub fn upgrade_backup_part(p: v6::BackupPart) -> Result<BackupPart, Unwritten> {
    Ok(match p {
        v6::BackupPart::Base(state) => BackupPart::Base(upgrade_state(state)?),
        v6::BackupPart::Jobs { jobs, intents } => BackupPart::Jobs {
            jobs: jobs
                .into_iter()
                .map(upgrade_job)
                .collect::<Result<_, _>>()?,
            intents,
        },
    })
}

/// The current backup part as format 6 holds it.
pub fn downgrade_backup_part(p: BackupPart) -> Result<v6::BackupPart, NotInFormat> {
    Ok(match p {
        BackupPart::Base(state) => v6::BackupPart::Base(downgrade_state(state)?),
        BackupPart::Jobs { jobs, intents } => v6::BackupPart::Jobs {
            jobs: jobs
                .into_iter()
                .map(downgrade_job)
                .collect::<Result<_, _>>()?,
            intents,
        },
    })
}

fn upgrade_attributes(h: v6::HostAttributesRecord) -> HostAttributesRecord {
    HostAttributesRecord {
        name: h.name,
        resources: upgrade_resources(h.cpus, h.mem_mb),
        spool_dir: h.spool_dir,
        job_users: h.job_users,
    }
}

fn downgrade_attributes(h: HostAttributesRecord) -> Result<v6::HostAttributesRecord, NotInFormat> {
    let (cpus, mem_mb) = downgrade_resources(h.resources)?;
    Ok(v6::HostAttributesRecord {
        name: h.name,
        cpus,
        mem_mb,
        spool_dir: h.spool_dir,
        job_users: h.job_users,
    })
}

/// A format-6 command as a current record.
pub fn upgrade_command(c: v6::CommandRecord) -> Result<CommandRecord, Unwritten> {
    use v6::CommandRecord as Old;
    Ok(match c {
        Old::Submit { token, spec } => CommandRecord::Submit {
            token,
            spec: upgrade_spec(spec)?,
        },
        Old::ControlJob {
            token,
            id,
            action,
            by,
        } => CommandRecord::ControlJob {
            token,
            id,
            action,
            by,
        },
        Old::ControlQueue {
            token,
            name,
            action,
        } => CommandRecord::ControlQueue {
            token,
            name,
            action,
        },
        Old::RegisterHost { token, host, held } => CommandRecord::RegisterHost {
            token,
            host: upgrade_attributes(host),
            held,
        },
        Old::ControlHost {
            token,
            name,
            action,
        } => CommandRecord::ControlHost {
            token,
            name,
            action,
        },
        Old::SetHostAvailable { name, available } => {
            CommandRecord::SetHostAvailable { name, available }
        }
        Old::Dispatch { token, id, host } => CommandRecord::Dispatch { token, id, host },
        Old::JobStarted {
            token,
            id,
            attempt,
            host,
        } => CommandRecord::JobStarted {
            token,
            id,
            attempt,
            host,
        },
        Old::JobFinished {
            token,
            id,
            attempt,
            host,
            end,
        } => CommandRecord::JobFinished {
            token,
            id,
            attempt,
            host,
            end: upgrade_end(end),
        },
        Old::HostLost { name } => CommandRecord::HostLost { name },
        Old::Barrier { term, queues } => CommandRecord::Barrier { term, queues },
        Old::AcquireScheduler {
            token,
            name,
            instance,
            ttl_ms,
        } => CommandRecord::AcquireScheduler {
            token,
            name,
            instance,
            ttl_ms,
        },
        Old::DispatchBatch {
            token,
            epoch,
            placements,
        } => CommandRecord::DispatchBatch {
            token,
            epoch,
            placements,
        },
        Old::SetPendReasons {
            token,
            epoch,
            reasons,
        } => CommandRecord::SetPendReasons {
            token,
            epoch,
            reasons: reasons
                .into_iter()
                .map(|(id, text)| {
                    let code = PendCode::of_v6_text(&text).into();
                    (id, PendReasonRecord { code, text })
                })
                .collect(),
        },
        Old::CreateToken {
            token,
            id,
            user,
            role,
            hash,
            expires_in_ms,
        } => CommandRecord::CreateToken {
            token,
            id,
            user,
            role,
            hash,
            expires_in_ms,
        },
        Old::RevokeToken { token, id } => CommandRecord::RevokeToken { token, id },
        Old::Restore { token, state } => CommandRecord::Restore {
            token,
            state: Box::new(upgrade_state(*state)?),
        },
        Old::RestoreJobs {
            token,
            base,
            jobs,
            intents,
        } => CommandRecord::RestoreJobs {
            token,
            base,
            jobs: jobs
                .into_iter()
                .map(upgrade_job)
                .collect::<Result<_, _>>()?,
            intents,
        },
    })
}

/// A current command record as format 6 holds it, or what that format cannot hold.
pub fn downgrade_command(c: CommandRecord) -> Result<v6::CommandRecord, NotInFormat> {
    use v6::CommandRecord as Old;
    Ok(match c {
        CommandRecord::Submit { token, spec } => Old::Submit {
            token,
            spec: downgrade_spec(spec)?,
        },
        CommandRecord::ControlJob {
            token,
            id,
            action,
            by,
        } => Old::ControlJob {
            token,
            id,
            action,
            by,
        },
        CommandRecord::ControlQueue {
            token,
            name,
            action,
        } => Old::ControlQueue {
            token,
            name,
            action,
        },
        CommandRecord::RegisterHost { token, host, held } => Old::RegisterHost {
            token,
            host: downgrade_attributes(host)?,
            held,
        },
        CommandRecord::ControlHost {
            token,
            name,
            action,
        } => Old::ControlHost {
            token,
            name,
            action,
        },
        CommandRecord::SetHostAvailable { name, available } => {
            Old::SetHostAvailable { name, available }
        }
        CommandRecord::Dispatch { token, id, host } => Old::Dispatch { token, id, host },
        CommandRecord::JobStarted {
            token,
            id,
            attempt,
            host,
        } => Old::JobStarted {
            token,
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
        } => Old::JobFinished {
            token,
            id,
            attempt,
            host,
            end: downgrade_end(end)?,
        },
        CommandRecord::HostLost { name } => Old::HostLost { name },
        CommandRecord::Barrier { term, queues } => Old::Barrier { term, queues },
        CommandRecord::AcquireScheduler {
            token,
            name,
            instance,
            ttl_ms,
        } => Old::AcquireScheduler {
            token,
            name,
            instance,
            ttl_ms,
        },
        CommandRecord::DispatchBatch {
            token,
            epoch,
            placements,
        } => Old::DispatchBatch {
            token,
            epoch,
            placements,
        },
        // The code is dropped: it is read back from the text as format 6 reads it.
        CommandRecord::SetPendReasons {
            token,
            epoch,
            reasons,
        } => Old::SetPendReasons {
            token,
            epoch,
            reasons: reasons.into_iter().map(|(id, r)| (id, r.text)).collect(),
        },
        CommandRecord::CreateToken {
            token,
            id,
            user,
            role,
            hash,
            expires_in_ms,
        } => Old::CreateToken {
            token,
            id,
            user,
            role,
            hash,
            expires_in_ms,
        },
        CommandRecord::RevokeToken { token, id } => Old::RevokeToken { token, id },
        CommandRecord::Restore { token, state } => Old::Restore {
            token,
            state: Box::new(downgrade_state(*state)?),
        },
        CommandRecord::RestoreJobs {
            token,
            base,
            jobs,
            intents,
        } => Old::RestoreJobs {
            token,
            base,
            jobs: jobs
                .into_iter()
                .map(downgrade_job)
                .collect::<Result<_, _>>()?,
            intents,
        },
        CommandRecord::RaiseVersion { .. } => return Err(not_in_6("raising the version")),
    })
}
