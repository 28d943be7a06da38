//! The step between store formats 10 (and 11, which stores alike) and 12: format-10 records to
//! format-12 ones (`super::v12`) (`upgrade_*`, when old data is read: infallible) and back (`downgrade_*`,
//! while the cluster's active version is still 10 or 11). Format 12 adds a job's count of
//! attempts that started (`runs`); before, every dispatch counted as a run, so the way up
//! derives it from the attempt, and the way down refuses a job whose count differs by
//! [`NotInFormat`] (none can: below version 12 the apply keeps the two equal). Lossless for
//! everything format 10 holds: `downgrade(upgrade(x)) == x` (property-tested in
//! `stored::tests`).

use super::step6::NotInFormat;
use super::v10;
use super::v12::{BackupPart, CommandRecord, JobRecord, StateRecord};

/// A format-10 job as a format-12 one: each of its attempts counted as a run.
pub fn upgrade_job(j: v10::JobRecord) -> JobRecord {
    let v10::JobRecord {
        id,
        spec,
        state,
        pend_reason,
        pend_code,
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
        cancelled_by,
        dependency_state,
        array,
        array_task,
    } = j;
    JobRecord {
        id,
        spec,
        state,
        pend_reason,
        pend_code,
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
        cancelled_by,
        dependency_state,
        array,
        array_task,
        runs: attempt,
    }
}

/// A format-12 job as format 10 holds it.
pub fn downgrade_job(j: JobRecord) -> Result<v10::JobRecord, NotInFormat> {
    let JobRecord {
        id,
        spec,
        state,
        pend_reason,
        pend_code,
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
        cancelled_by,
        dependency_state,
        array,
        array_task,
        runs,
    } = j;
    if runs != attempt {
        return Err(NotInFormat {
            what: "a job with an attempt that never started",
            needs: 12,
        });
    }
    Ok(v10::JobRecord {
        id,
        spec,
        state,
        pend_reason,
        pend_code,
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
        cancelled_by,
        dependency_state,
        array,
        array_task,
    })
}

fn upgrade_jobs(jobs: Vec<v10::JobRecord>) -> Vec<JobRecord> {
    jobs.into_iter().map(upgrade_job).collect()
}

fn downgrade_jobs(jobs: Vec<JobRecord>) -> Result<Vec<v10::JobRecord>, NotInFormat> {
    jobs.into_iter().map(downgrade_job).collect()
}

/// A format-10 state as a format-12 one.
pub fn upgrade_state(s: v10::StateRecord) -> StateRecord {
    let v10::StateRecord {
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
    } = s;
    StateRecord {
        next_job_id,
        jobs: upgrade_jobs(jobs),
        queues,
        hosts,
        intents,
        tokens,
        scheduler,
        user_tokens,
        active_version,
        scripts,
    }
}

/// A format-12 state as format 10 holds it.
pub fn downgrade_state(s: StateRecord) -> Result<v10::StateRecord, NotInFormat> {
    let StateRecord {
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
    } = s;
    Ok(v10::StateRecord {
        next_job_id,
        jobs: downgrade_jobs(jobs)?,
        queues,
        hosts,
        intents,
        tokens,
        scheduler,
        user_tokens,
        active_version,
        scripts,
    })
}

/// A format-10 backup part as a format-12 one.
pub fn upgrade_backup_part(p: v10::BackupPart) -> BackupPart {
    match p {
        v10::BackupPart::Base(state) => BackupPart::Base(upgrade_state(state)),
        v10::BackupPart::Jobs {
            jobs,
            intents,
            scripts,
        } => BackupPart::Jobs {
            jobs: upgrade_jobs(jobs),
            intents,
            scripts,
        },
    }
}

/// A format-12 backup part as format 10 holds it.
pub fn downgrade_backup_part(p: BackupPart) -> Result<v10::BackupPart, NotInFormat> {
    Ok(match p {
        BackupPart::Base(state) => v10::BackupPart::Base(downgrade_state(state)?),
        BackupPart::Jobs {
            jobs,
            intents,
            scripts,
        } => v10::BackupPart::Jobs {
            jobs: downgrade_jobs(jobs)?,
            intents,
            scripts,
        },
    })
}

/// Lists every variant both formats hold alike, for [`same_variants!`].
macro_rules! both_ways {
    ($value:expr, $from:ident => $to:ident $($arm:tt)*) => {
        same_variants!($value, $from => $to {
            Submit { token, spec, script },
            ControlJob { token, id, action, by, actor },
            ControlQueue { token, name, action },
            RegisterHost { token, host, held },
            ControlHost { token, name, action },
            SetHostAvailable { name, available },
            Dispatch { token, id, host },
            JobStarted { token, id, attempt, host },
            JobFinished { token, id, attempt, host, end },
            HostLost { name },
            Barrier { term, queues },
            AcquireScheduler { token, name, instance, ttl_ms },
            DispatchBatch { token, epoch, placements },
            SetPendReasons { token, epoch, reasons },
            CreateToken { token, id, user, role, hash, expires_in_ms },
            RevokeToken { token, id },
            RaiseVersion { to },
            UpdateJob { token, id, by, changes },
            SignalJob { token, id, by, signal, leader_only },
            ControlTasks { token, array, tasks, by, actor, op },
        } $($arm)*)
    };
}

/// A format-10 command as a format-12 one.
pub fn upgrade_command(c: v10::CommandRecord) -> CommandRecord {
    use v10::CommandRecord as Old;
    use CommandRecord as New;
    both_ways!(c, Old => New
        Old::Restore { token, state } => New::Restore {
            token,
            state: Box::new(upgrade_state(*state)),
        },
        Old::RestoreJobs { token, base, jobs, intents, scripts } => New::RestoreJobs {
            token,
            base,
            jobs: upgrade_jobs(jobs),
            intents,
            scripts,
        },
    )
}

/// A format-12 command as format 10 holds it, or what that format cannot hold.
pub fn downgrade_command(c: CommandRecord) -> Result<v10::CommandRecord, NotInFormat> {
    use v10::CommandRecord as Old;
    use CommandRecord as New;
    Ok(both_ways!(c, New => Old
        New::Restore { token, state } => Old::Restore {
            token,
            state: Box::new(downgrade_state(*state)?),
        },
        New::RestoreJobs { token, base, jobs, intents, scripts } => Old::RestoreJobs {
            token,
            base,
            jobs: downgrade_jobs(jobs)?,
            intents,
            scripts,
        },
    ))
}
