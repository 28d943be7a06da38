//! Between the current records (format 13) and every older format this build reads, one step
//! per format, chained: format 6 ↔ 7 is `super::step6`, 7 ↔ 8 is `super::step7`, 8 ↔ 9 is
//! `super::step8`, 9 ↔ 10 (commands only: formats 9 and 10 store jobs and states alike) is
//! `super::step9`; format 11 stores every record as format 10 does (it changed what the
//! apply judges: dependencies on tasks and `aftercorr`), 10/11 ↔ 12 (a job's count of
//! attempts that started) is `super::step10`, and 12 ↔ 13 (accounts, reserved starts) is
//! `super::step12`. `upgrade_*` reads old
//! data as current records; `downgrade_*` writes what a cluster whose active version is older
//! replicates, refusing by [`NotInFormat`] what that format cannot hold.

use super::{step10, step12, step6, step7, step8, step9};
use super::{
    v10, v12, v6, v7, v8, v9, Command, CommandRecord, HostStoredRecord, JobRecord, StateRecord,
};
use crate::state::BackupPart;

pub use step6::{pend_code_of_v6, result_of_v6, NotInFormat, Unwritten};

/// `cmd` as the cluster can replicate it while its active version is `format`: unchanged in
/// the current format; in an older one, converted down and up again, so that what the
/// primary applies is exactly what an older member (or a newer one, decoding the older
/// entry) applies. `RaiseVersion` is never converted: it is proposed only once every member
/// reads the format it raises to.
pub fn fit_format(format: u32, cmd: Command) -> Result<Command, NotInFormat> {
    use xce_client::version::{needed_by, ACCOUNTING, TASK_DEPENDENCIES};
    if format >= ACCOUNTING || matches!(cmd, Command::RaiseVersion { .. }) {
        return Ok(cmd);
    }
    // Stored alike, but judged only from version 11 on (refused by the apply before).
    if let (Command::Submit { spec, .. }, true) = (&cmd, format < TASK_DEPENDENCIES) {
        if let Some((needs @ TASK_DEPENDENCIES, what)) = needed_by(spec) {
            return Err(NotInFormat { what, needs });
        }
    }
    let record = CommandRecord::from(cmd);
    let up = match format {
        12 => upgrade_command_12(downgrade_command_12(record)?),
        10 | 11 => upgrade_command_10(downgrade_command_10(record)?),
        9 => upgrade_command_9(downgrade_command_9(record)?),
        8 => upgrade_command_8(downgrade_command_8(record)?),
        7 => upgrade_command_7(downgrade_command_7(record)?),
        // A record just made from a current one always reads back.
        _ => upgrade_command_6(downgrade_command_6(record)?)
            .map_err(|_| step6::not_in_6("a request"))?,
    };
    Ok(Command::from(up))
}

/// A format-6 command as a current record.
pub fn upgrade_command_6(c: v6::CommandRecord) -> Result<CommandRecord, Unwritten> {
    step6::upgrade_command(c).map(upgrade_command_7)
}

/// A format-7 command as a current record.
pub fn upgrade_command_7(c: v7::CommandRecord) -> CommandRecord {
    upgrade_command_8(step7::upgrade_command(c))
}

/// A format-8 command as a current record.
pub fn upgrade_command_8(c: v8::CommandRecord) -> CommandRecord {
    upgrade_command_9(step8::upgrade_command(c))
}

/// A format-9 command as a current record.
pub fn upgrade_command_9(c: v9::CommandRecord) -> CommandRecord {
    upgrade_command_10(step9::upgrade_command(c))
}

/// A format-10 (or 11) command as a current record.
pub fn upgrade_command_10(c: v10::CommandRecord) -> CommandRecord {
    upgrade_command_12(step10::upgrade_command(c))
}

/// A format-12 command as a current record.
pub fn upgrade_command_12(c: v12::CommandRecord) -> CommandRecord {
    step12::upgrade_command(c)
}

/// A current command as format 6 holds it, or what that format cannot hold.
pub fn downgrade_command_6(c: CommandRecord) -> Result<v6::CommandRecord, NotInFormat> {
    step6::downgrade_command(downgrade_command_7(c)?)
}

/// A current command as format 7 holds it, or what that format cannot hold.
pub fn downgrade_command_7(c: CommandRecord) -> Result<v7::CommandRecord, NotInFormat> {
    step7::downgrade_command(downgrade_command_8(c)?)
}

/// A current command as format 8 holds it, or what that format cannot hold.
pub fn downgrade_command_8(c: CommandRecord) -> Result<v8::CommandRecord, NotInFormat> {
    step8::downgrade_command(downgrade_command_9(c)?)
}

/// A current command as format 9 holds it, or what that format cannot hold.
pub fn downgrade_command_9(c: CommandRecord) -> Result<v9::CommandRecord, NotInFormat> {
    step9::downgrade_command(downgrade_command_10(c)?)
}

/// A current command as formats 10 and 11 hold it, or what they cannot hold.
pub fn downgrade_command_10(c: CommandRecord) -> Result<v10::CommandRecord, NotInFormat> {
    step10::downgrade_command(downgrade_command_12(c)?)
}

/// A current command as format 12 holds it, or what it cannot hold.
pub fn downgrade_command_12(c: CommandRecord) -> Result<v12::CommandRecord, NotInFormat> {
    step12::downgrade_command(c)
}

/// A format-6 job as a current record.
pub fn upgrade_job_6(j: v6::JobRecord) -> Result<JobRecord, Unwritten> {
    step6::upgrade_job(j)
        .map(step7::upgrade_job)
        .map(step8::upgrade_job)
        .map(step10::upgrade_job)
        .map(step12::upgrade_job)
}

/// A current job as format 6 holds it.
pub fn downgrade_job_6(j: JobRecord) -> Result<v6::JobRecord, NotInFormat> {
    step6::downgrade_job(downgrade_job_7(j)?)
}

/// A current job as format 7 holds it.
pub fn downgrade_job_7(j: JobRecord) -> Result<v7::JobRecord, NotInFormat> {
    step7::downgrade_job(downgrade_job_8(j)?)
}

/// A current job as format 8 holds it.
pub fn downgrade_job_8(j: JobRecord) -> Result<v8::JobRecord, NotInFormat> {
    step8::downgrade_job(downgrade_job_10(j)?)
}

/// A current job as formats 9 to 11 hold it.
pub fn downgrade_job_10(j: JobRecord) -> Result<v10::JobRecord, NotInFormat> {
    step10::downgrade_job(downgrade_job_12(j)?)
}

/// A current job as format 12 holds it.
pub fn downgrade_job_12(j: JobRecord) -> Result<v12::JobRecord, NotInFormat> {
    step12::downgrade_job(j)
}

/// A format-6 state as a current record, at active version 6.
pub fn upgrade_state_6(s: v6::StateRecord) -> Result<StateRecord, Unwritten> {
    step6::upgrade_state(s).map(upgrade_state_7)
}

/// A format-7 state as a current record.
pub fn upgrade_state_7(s: v7::StateRecord) -> StateRecord {
    upgrade_state_8(step7::upgrade_state(s))
}

/// A format-8 state as a current record.
pub fn upgrade_state_8(s: v8::StateRecord) -> StateRecord {
    upgrade_state_10(step8::upgrade_state(s))
}

/// A format-9, 10 or 11 state as a current record.
pub fn upgrade_state_10(s: v10::StateRecord) -> StateRecord {
    upgrade_state_12(step10::upgrade_state(s))
}

/// A format-12 state as a current record.
pub fn upgrade_state_12(s: v12::StateRecord) -> StateRecord {
    step12::upgrade_state(s)
}

/// A current state as format 6 holds it.
pub fn downgrade_state_6(s: StateRecord) -> Result<v6::StateRecord, NotInFormat> {
    step6::downgrade_state(downgrade_state_7(s)?)
}

/// A current state as format 7 holds it.
pub fn downgrade_state_7(s: StateRecord) -> Result<v7::StateRecord, NotInFormat> {
    step7::downgrade_state(downgrade_state_8(s)?)
}

/// A current state as format 8 holds it.
pub fn downgrade_state_8(s: StateRecord) -> Result<v8::StateRecord, NotInFormat> {
    step8::downgrade_state(downgrade_state_10(s)?)
}

/// A current state as formats 9 to 11 hold it.
pub fn downgrade_state_10(s: StateRecord) -> Result<v10::StateRecord, NotInFormat> {
    step10::downgrade_state(downgrade_state_12(s)?)
}

/// A current state as format 12 holds it.
pub fn downgrade_state_12(s: StateRecord) -> Result<v12::StateRecord, NotInFormat> {
    step12::downgrade_state(s)
}

/// A current host as format 6 holds it (formats 7 to 13 store hosts as the current one does).
pub fn downgrade_host_6(h: HostStoredRecord) -> Result<v6::HostStoredRecord, NotInFormat> {
    step6::downgrade_host(h)
}

/// A format-6 backup part as the current one.
pub fn upgrade_backup_part_6(p: v6::BackupPart) -> Result<BackupPart, Unwritten> {
    step6::upgrade_backup_part(p).map(upgrade_backup_part_7)
}

/// A format-7 backup part as the current one.
pub fn upgrade_backup_part_7(p: v7::BackupPart) -> BackupPart {
    upgrade_backup_part_8(step7::upgrade_backup_part(p))
}

/// A format-8 backup part as the current one.
pub fn upgrade_backup_part_8(p: v8::BackupPart) -> BackupPart {
    upgrade_backup_part_10(step8::upgrade_backup_part(p))
}

/// A format-9, 10 or 11 backup part as the current one.
pub fn upgrade_backup_part_10(p: v10::BackupPart) -> BackupPart {
    upgrade_backup_part_12(step10::upgrade_backup_part(p))
}

/// A format-12 backup part as the current one.
pub fn upgrade_backup_part_12(p: v12::BackupPart) -> BackupPart {
    step12::upgrade_backup_part(p)
}

/// The current backup part as format 6 holds it.
pub fn downgrade_backup_part_6(p: BackupPart) -> Result<v6::BackupPart, NotInFormat> {
    step6::downgrade_backup_part(downgrade_backup_part_7(p)?)
}

/// The current backup part as format 7 holds it.
pub fn downgrade_backup_part_7(p: BackupPart) -> Result<v7::BackupPart, NotInFormat> {
    step7::downgrade_backup_part(downgrade_backup_part_8(p)?)
}

/// The current backup part as format 8 holds it.
pub fn downgrade_backup_part_8(p: BackupPart) -> Result<v8::BackupPart, NotInFormat> {
    step8::downgrade_backup_part(downgrade_backup_part_10(p)?)
}

/// The current backup part as formats 9 to 11 hold it.
pub fn downgrade_backup_part_10(p: BackupPart) -> Result<v10::BackupPart, NotInFormat> {
    step10::downgrade_backup_part(downgrade_backup_part_12(p)?)
}

/// The current backup part as format 12 holds it.
pub fn downgrade_backup_part_12(p: BackupPart) -> Result<v12::BackupPart, NotInFormat> {
    step12::downgrade_backup_part(p)
}
