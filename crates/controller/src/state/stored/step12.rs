//! The step between store formats 12 and 13: format-12 records to format-13 ones (`upgrade_*`,
//! when old data is read: infallible) and back (`downgrade_*`, while the cluster's active
//! version is still 12). Format 13 adds a job's account (in its spec) and the start backfill
//! reserved for a pending job (on the job, and in the scheduler's reasons), and what a job's
//! attempts used (on the job, and in the end reports), the record of its attempts that
//! started, retirement (`RetireJobs`, and the state's count of retired jobs). The way up has
//! none of them; the way down refuses an account by [`NotInFormat`] (the submit service fills
//! in a default one only from version 13, and `needed_by` names it) and a retirement, and
//! drops a reservation, usage and attempt records: what they say a cluster of version 12 does
//! not show, and nothing is judged by them (an apply at version 12 records none). Lossless for everything format 12 holds:
//! `downgrade(upgrade(x)) == x` (property-tested in `stored::tests`).

use super::step6::NotInFormat;
use super::v12;
use super::{CommandRecord, JobRecord, PendReasonRecord, ReasonRecord, SpecRecord, StateRecord};
use crate::state::BackupPart;

/// A format-12 spec as a format-13 one: charged to no account.
pub fn upgrade_spec(s: v12::SpecRecord) -> SpecRecord {
    let v12::SpecRecord {
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
        dependency,
        kill_on_invalid_dep,
        array,
        account: String::new(),
    }
}

/// A format-13 spec as format 12 holds it: one with an account it cannot.
pub fn downgrade_spec(s: SpecRecord) -> Result<v12::SpecRecord, NotInFormat> {
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
        account,
    } = s;
    if !account.is_empty() {
        return Err(NotInFormat {
            what: "account",
            needs: 13,
        });
    }
    Ok(v12::SpecRecord {
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
    })
}

/// A format-12 job as a format-13 one: no start reserved.
pub fn upgrade_job(j: v12::JobRecord) -> JobRecord {
    let v12::JobRecord {
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
        dependency_state,
        array,
        array_task,
        runs,
        expected_start_ms: None,
        usage: None,
        attempts: Vec::new(),
    }
}

/// A format-13 job as format 12 holds it, without its reserved start.
pub fn downgrade_job(j: JobRecord) -> Result<v12::JobRecord, NotInFormat> {
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
        expected_start_ms: _,
        usage: _,
        attempts: _,
    } = j;
    Ok(v12::JobRecord {
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
        dependency_state,
        array,
        array_task,
        runs,
    })
}

fn upgrade_jobs(jobs: Vec<v12::JobRecord>) -> Vec<JobRecord> {
    jobs.into_iter().map(upgrade_job).collect()
}

fn downgrade_jobs(jobs: Vec<JobRecord>) -> Result<Vec<v12::JobRecord>, NotInFormat> {
    jobs.into_iter().map(downgrade_job).collect()
}

/// A format-12 state as a format-13 one.
pub fn upgrade_state(s: v12::StateRecord) -> StateRecord {
    let v12::StateRecord {
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
        retired_seq: 0,
    }
}

/// A format-13 state as format 12 holds it.
pub fn downgrade_state(s: StateRecord) -> Result<v12::StateRecord, NotInFormat> {
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
        retired_seq,
    } = s;
    // Jobs retire from version 13 on: a state that retired some is of no older format.
    if retired_seq > 0 {
        return Err(NotInFormat {
            what: "retired job",
            needs: 13,
        });
    }
    Ok(v12::StateRecord {
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

/// A format-12 backup part as a format-13 one.
pub fn upgrade_backup_part(p: v12::BackupPart) -> BackupPart {
    match p {
        v12::BackupPart::Base(state) => BackupPart::Base(upgrade_state(state)),
        v12::BackupPart::Jobs {
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

/// A format-13 backup part as format 12 holds it.
pub fn downgrade_backup_part(p: BackupPart) -> Result<v12::BackupPart, NotInFormat> {
    Ok(match p {
        BackupPart::Base(state) => v12::BackupPart::Base(downgrade_state(state)?),
        BackupPart::Jobs {
            jobs,
            intents,
            scripts,
        } => v12::BackupPart::Jobs {
            jobs: downgrade_jobs(jobs)?,
            intents,
            scripts,
        },
    })
}

fn upgrade_reason((id, r): (u64, PendReasonRecord)) -> (u64, ReasonRecord) {
    let PendReasonRecord { code, text } = r;
    (
        id,
        ReasonRecord {
            code,
            text,
            expected_start_ms: None,
        },
    )
}

fn downgrade_reason((id, r): (u64, ReasonRecord)) -> (u64, PendReasonRecord) {
    let ReasonRecord {
        code,
        text,
        expected_start_ms: _,
    } = r;
    (id, PendReasonRecord { code, text })
}

/// Lists every variant both formats hold alike, for [`same_variants!`].
macro_rules! both_ways {
    ($value:expr, $from:ident => $to:ident $($arm:tt)*) => {
        same_variants!($value, $from => $to {
            ControlJob { token, id, action, by, actor },
            ControlQueue { token, name, action },
            RegisterHost { token, host, held },
            ControlHost { token, name, action },
            SetHostAvailable { name, available },
            Dispatch { token, id, host },
            JobStarted { token, id, attempt, host },
            HostLost { name },
            Barrier { term, queues },
            AcquireScheduler { token, name, instance, ttl_ms },
            DispatchBatch { token, epoch, placements },
            CreateToken { token, id, user, role, hash, expires_in_ms },
            RevokeToken { token, id },
            RaiseVersion { to },
            UpdateJob { token, id, by, changes },
            SignalJob { token, id, by, signal, leader_only },
            ControlTasks { token, array, tasks, by, actor, op },
        } $($arm)*)
    };
}

/// A format-12 command as a format-13 one.
pub fn upgrade_command(c: v12::CommandRecord) -> CommandRecord {
    use v12::CommandRecord as Old;
    use CommandRecord as New;
    both_ways!(c, Old => New
        Old::JobFinished { token, id, attempt, host, end } => New::JobFinished {
            token,
            id,
            attempt,
            host,
            end,
            usage: None,
        },
        Old::Submit { token, spec, script } => New::Submit {
            token,
            spec: upgrade_spec(spec),
            script,
        },
        Old::SetPendReasons { token, epoch, reasons } => New::SetPendReasons {
            token,
            epoch,
            reasons: reasons.into_iter().map(upgrade_reason).collect(),
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

/// A format-13 command as format 12 holds it, or what that format cannot hold.
pub fn downgrade_command(c: CommandRecord) -> Result<v12::CommandRecord, NotInFormat> {
    use v12::CommandRecord as Old;
    use CommandRecord as New;
    Ok(both_ways!(c, New => Old
        New::JobFinished { token, id, attempt, host, end, usage: _ } => Old::JobFinished {
            token,
            id,
            attempt,
            host,
            end,
        },
        New::Submit { token, spec, script } => Old::Submit {
            token,
            spec: downgrade_spec(spec)?,
            script,
        },
        New::SetPendReasons { token, epoch, reasons } => Old::SetPendReasons {
            token,
            epoch,
            reasons: reasons.into_iter().map(downgrade_reason).collect(),
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
        New::RetireJobs { .. } => return Err(NotInFormat { what: "job retirement", needs: 13 }),
    ))
}
