//! The step between store formats 7 and 8: format-7 records to format-8 ones (`upgrade_*`,
//! when old data is read: infallible, format 8 holds all of format 7) and back (`downgrade_*`,
//! while the cluster's active version is still 7). Format 8 adds the batch fields of a job
//! spec (a script, output patterns, a hold, a begin time, a warning signal, no-requeue), who
//! cancelled a job, the script table, and the `UpdateJob` and `SignalJob` commands; each is
//! refused on the way down by [`NotInFormat`] naming it, except the actor of a `ControlJob`,
//! which is only for the record and is dropped (a format-7 member records no one, and so,
//! through `fit_format`, does the primary). Lossless for everything format 7 holds:
//! `downgrade(upgrade(x)) == x` (property-tested in `stored::tests`).

use super::step6::NotInFormat;
use super::v7;
use super::v8::{BackupPart, CommandRecord, JobRecord, SpecRecord, StateRecord};

/// What format 7 cannot hold, by the name a user knows it by.
fn not_in_7(what: &'static str) -> NotInFormat {
    NotInFormat { what, needs: 8 }
}

fn upgrade_spec(s: v7::SpecRecord) -> SpecRecord {
    let v7::SpecRecord {
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
        script: None,
        stdout: None,
        stderr: None,
        open_mode: None,
        hold: false,
        begin_time_ms: None,
        warn_signal: None,
        no_requeue: false,
    }
}

fn downgrade_spec(s: SpecRecord) -> Result<v7::SpecRecord, NotInFormat> {
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
    } = s;
    let added = [
        ("script", script.is_some()),
        ("stdout", stdout.is_some()),
        ("stderr", stderr.is_some()),
        ("open_mode", open_mode.is_some()),
        ("hold", hold),
        ("begin_time", begin_time_ms.is_some()),
        ("signal", warn_signal.is_some()),
        ("no_requeue", no_requeue),
        (
            xce_client::version::BIG_ENV,
            xce_client::export::size(&env) > xce_client::export::MAX_ENV_BYTES,
        ),
    ];
    if let Some((what, _)) = added.into_iter().find(|(_, set)| *set) {
        return Err(not_in_7(what));
    }
    Ok(v7::SpecRecord {
        name,
        user,
        queue,
        command,
        env,
        cwd,
        resources,
        priority,
        limits,
    })
}

/// A format-7 job as a format-8 one.
pub fn upgrade_job(j: v7::JobRecord) -> JobRecord {
    let v7::JobRecord {
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
        cancelled_by: None,
    }
}

/// A format-8 job as format 7 holds it.
pub fn downgrade_job(j: JobRecord) -> Result<v7::JobRecord, NotInFormat> {
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
    } = j;
    if cancelled_by.is_some() {
        return Err(not_in_7("cancelled_by"));
    }
    Ok(v7::JobRecord {
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
    })
}

fn upgrade_jobs(jobs: Vec<v7::JobRecord>) -> Vec<JobRecord> {
    jobs.into_iter().map(upgrade_job).collect()
}

fn downgrade_jobs(jobs: Vec<JobRecord>) -> Result<Vec<v7::JobRecord>, NotInFormat> {
    jobs.into_iter().map(downgrade_job).collect()
}

/// A format-7 state as a format-8 one (no scripts).
pub fn upgrade_state(s: v7::StateRecord) -> StateRecord {
    let v7::StateRecord {
        next_job_id,
        jobs,
        queues,
        hosts,
        intents,
        tokens,
        scheduler,
        user_tokens,
        active_version,
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
        scripts: Vec::new(),
    }
}

/// A format-8 state as format 7 holds it.
pub fn downgrade_state(s: StateRecord) -> Result<v7::StateRecord, NotInFormat> {
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
    if !scripts.is_empty() {
        return Err(not_in_7("script"));
    }
    Ok(v7::StateRecord {
        next_job_id,
        jobs: downgrade_jobs(jobs)?,
        queues,
        hosts,
        intents,
        tokens,
        scheduler,
        user_tokens,
        active_version,
    })
}

/// A format-7 backup part as a format-8 one.
pub fn upgrade_backup_part(p: v7::BackupPart) -> BackupPart {
    match p {
        v7::BackupPart::Base(state) => BackupPart::Base(upgrade_state(state)),
        v7::BackupPart::Jobs { jobs, intents } => BackupPart::Jobs {
            jobs: upgrade_jobs(jobs),
            intents,
            scripts: Vec::new(),
        },
    }
}

/// A format-8 backup part as format 7 holds it.
pub fn downgrade_backup_part(p: BackupPart) -> Result<v7::BackupPart, NotInFormat> {
    Ok(match p {
        BackupPart::Base(state) => v7::BackupPart::Base(downgrade_state(state)?),
        BackupPart::Jobs {
            jobs,
            intents,
            scripts,
        } => {
            if !scripts.is_empty() {
                return Err(not_in_7("script"));
            }
            v7::BackupPart::Jobs {
                jobs: downgrade_jobs(jobs)?,
                intents,
            }
        }
    })
}

/// A format-7 command as a format-8 one.
pub fn upgrade_command(c: v7::CommandRecord) -> CommandRecord {
    use v7::CommandRecord as Old;
    use CommandRecord as New;
    same_variants!(c, Old => New {
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
    }
        Old::Submit { token, spec } => New::Submit {
            token,
            spec: upgrade_spec(spec),
            script: None,
        },
        Old::ControlJob { token, id, action, by } => New::ControlJob {
            token,
            id,
            action,
            by,
            actor: None,
        },
        Old::Restore { token, state } => New::Restore {
            token,
            state: Box::new(upgrade_state(*state)),
        },
        Old::RestoreJobs { token, base, jobs, intents } => New::RestoreJobs {
            token,
            base,
            jobs: upgrade_jobs(jobs),
            intents,
            scripts: Vec::new(),
        },
    )
}

/// A format-8 command as format 7 holds it, or what that format cannot hold.
pub fn downgrade_command(c: CommandRecord) -> Result<v7::CommandRecord, NotInFormat> {
    use v7::CommandRecord as Old;
    use CommandRecord as New;
    Ok(same_variants!(c, New => Old {
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
    }
        New::Submit { token, spec, script } => {
            if script.is_some() {
                return Err(not_in_7("script"));
            }
            Old::Submit {
                token,
                spec: downgrade_spec(spec)?,
            }
        }
        // Who asked is for the record only: format 7 records no one.
        New::ControlJob { token, id, action, by, actor: _ } => Old::ControlJob {
            token,
            id,
            action,
            by,
        },
        New::Restore { token, state } => Old::Restore {
            token,
            state: Box::new(downgrade_state(*state)?),
        },
        New::RestoreJobs { token, base, jobs, intents, scripts } => {
            if !scripts.is_empty() {
                return Err(not_in_7("script"));
            }
            Old::RestoreJobs {
                token,
                base,
                jobs: downgrade_jobs(jobs)?,
                intents,
            }
        }
        New::UpdateJob { .. } => return Err(not_in_7("xce update, hold and release")),
        New::SignalJob { .. } => return Err(not_in_7("xce signal")),
    ))
}
