//! The step between store formats 8 and 9: format-8 records to format-9 ones (`upgrade_*`,
//! when old data is read: infallible, format 9 holds all of format 8) and back
//! (`downgrade_*`, while the cluster's active version is still 8). Format 9 adds a job's
//! dependency (`--dependency`, `--kill-on-invalid-dep`) and where it stands; each is refused
//! on the way down by [`NotInFormat`] naming it. Lossless for everything format 8 holds:
//! `downgrade(upgrade(x)) == x` (property-tested in `stored::tests`). Format 10 stores
//! jobs and states as format 9 does, so those are `super::v10`'s here (and specs the
//! current module's); its commands are `super::v9`'s.

use super::step6::NotInFormat;
use super::v10::{BackupPart, JobRecord, StateRecord};
use super::v12::SpecRecord;
use super::v8;
use super::v9::CommandRecord;

/// What format 8 cannot hold, by the name a user knows it by.
fn not_in_8(what: &'static str) -> NotInFormat {
    NotInFormat { what, needs: 9 }
}

fn upgrade_spec(s: v8::SpecRecord) -> SpecRecord {
    let v8::SpecRecord {
        name,
        user,
        queue,
        command,
        env,
        cwd,
        resources,
        priority,
        limits,
        script,
        stdout,
        stderr,
        open_mode,
        hold,
        begin_time_ms,
        warn_signal,
        no_requeue,
    } = s;
    SpecRecord {
        name,
        user,
        queue,
        command,
        env,
        cwd,
        resources,
        priority,
        limits,
        script,
        stdout,
        stderr,
        open_mode,
        hold,
        begin_time_ms,
        warn_signal,
        no_requeue,
        dependency: None,
        kill_on_invalid_dep: None,
        array: None,
    }
}

fn downgrade_spec(s: SpecRecord) -> Result<v8::SpecRecord, NotInFormat> {
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
        script,
        stdout,
        stderr,
        open_mode,
        hold,
        begin_time_ms,
        warn_signal,
        no_requeue,
        dependency,
        kill_on_invalid_dep,
        array,
    } = s;
    if array.is_some() {
        return Err(not_in_8("array"));
    }
    if dependency.is_some() {
        return Err(not_in_8("dependency"));
    }
    if kill_on_invalid_dep.is_some() {
        return Err(not_in_8("kill_on_invalid_dep"));
    }
    Ok(v8::SpecRecord {
        name,
        user,
        queue,
        command,
        env,
        cwd,
        resources,
        priority,
        limits,
        script,
        stdout,
        stderr,
        open_mode,
        hold,
        begin_time_ms,
        warn_signal,
        no_requeue,
    })
}

/// A format-8 job as a format-9 one.
pub fn upgrade_job(j: v8::JobRecord) -> JobRecord {
    let v8::JobRecord {
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
    } = j;
    JobRecord {
        id,
        spec: upgrade_spec(spec),
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
        dependency_state: None,
        array: None,
        array_task: None,
    }
}

/// A format-9 job as format 8 holds it.
pub fn downgrade_job(j: JobRecord) -> Result<v8::JobRecord, NotInFormat> {
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
    } = j;
    if array.is_some() || array_task.is_some() {
        return Err(not_in_8("array"));
    }
    if dependency_state.is_some() {
        return Err(not_in_8("dependency"));
    }
    Ok(v8::JobRecord {
        id,
        spec: downgrade_spec(spec)?,
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
    })
}

fn upgrade_jobs(jobs: Vec<v8::JobRecord>) -> Vec<JobRecord> {
    jobs.into_iter().map(upgrade_job).collect()
}

fn downgrade_jobs(jobs: Vec<JobRecord>) -> Result<Vec<v8::JobRecord>, NotInFormat> {
    jobs.into_iter().map(downgrade_job).collect()
}

/// A format-8 state as a format-9 one.
pub fn upgrade_state(s: v8::StateRecord) -> StateRecord {
    let v8::StateRecord {
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

/// A format-9 state as format 8 holds it.
pub fn downgrade_state(s: StateRecord) -> Result<v8::StateRecord, NotInFormat> {
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
    Ok(v8::StateRecord {
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

/// A format-8 backup part as a format-9 one.
pub fn upgrade_backup_part(p: v8::BackupPart) -> BackupPart {
    match p {
        v8::BackupPart::Base(state) => BackupPart::Base(upgrade_state(state)),
        v8::BackupPart::Jobs {
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

/// A format-9 backup part as format 8 holds it.
pub fn downgrade_backup_part(p: BackupPart) -> Result<v8::BackupPart, NotInFormat> {
    Ok(match p {
        BackupPart::Base(state) => v8::BackupPart::Base(downgrade_state(state)?),
        BackupPart::Jobs {
            jobs,
            intents,
            scripts,
        } => v8::BackupPart::Jobs {
            jobs: downgrade_jobs(jobs)?,
            intents,
            scripts,
        },
    })
}

/// A format-8 command as a format-9 one.
pub fn upgrade_command(c: v8::CommandRecord) -> CommandRecord {
    use v8::CommandRecord as Old;
    use CommandRecord as New;
    same_variants!(c, Old => New {
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
    }
        Old::Submit { token, spec, script } => New::Submit {
            token,
            spec: upgrade_spec(spec),
            script,
        },
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

/// A format-9 command as format 8 holds it, or what that format cannot hold.
pub fn downgrade_command(c: CommandRecord) -> Result<v8::CommandRecord, NotInFormat> {
    use v8::CommandRecord as Old;
    use CommandRecord as New;
    Ok(same_variants!(c, New => Old {
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
    }
        New::Submit { token, spec, script } => Old::Submit {
            token,
            spec: downgrade_spec(spec)?,
            script,
        },
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
