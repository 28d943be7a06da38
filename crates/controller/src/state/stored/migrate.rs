//! Between the current records (format 8) and every older format this build reads, one step
//! per format, chained: format 6 ↔ 7 is `super::step6`, 7 ↔ 8 is `super::step7`.
//! `upgrade_*` reads old data as current records; `downgrade_*` writes what a cluster whose
//! active version is older replicates, refusing by [`NotInFormat`] what that format cannot
//! hold.

use super::{step6, step7};
use super::{v6, v7, Command, CommandRecord, HostStoredRecord, JobRecord, StateRecord};
use crate::state::BackupPart;

pub use step6::{pend_code_of_v6, result_of_v6, NotInFormat, Unwritten};

/// `cmd` as the cluster can replicate it while its active version is `format`: unchanged in
/// the current format; in an older one, converted down and up again, so that what the
/// primary applies is exactly what an older member (or a newer one, decoding the older
/// entry) applies. `RaiseVersion` is never converted: it is proposed only once every member
/// reads the format it raises to.
pub fn fit_format(format: u32, cmd: Command) -> Result<Command, NotInFormat> {
    if format >= 8 || matches!(cmd, Command::RaiseVersion { .. }) {
        return Ok(cmd);
    }
    let record = CommandRecord::from(cmd);
    let up = if format == 7 {
        step7::upgrade_command(step7::downgrade_command(record)?)
    } else {
        // A record just made from a current one always reads back.
        upgrade_command_6(downgrade_command_6(record)?).map_err(|_| step6::not_in_6("a request"))?
    };
    Ok(Command::from(up))
}

/// A format-6 command as a current record.
pub fn upgrade_command_6(c: v6::CommandRecord) -> Result<CommandRecord, Unwritten> {
    step6::upgrade_command(c).map(step7::upgrade_command)
}

/// A format-7 command as a current record.
pub fn upgrade_command_7(c: v7::CommandRecord) -> CommandRecord {
    step7::upgrade_command(c)
}

/// A current command as format 6 holds it, or what that format cannot hold.
pub fn downgrade_command_6(c: CommandRecord) -> Result<v6::CommandRecord, NotInFormat> {
    step6::downgrade_command(step7::downgrade_command(c)?)
}

/// A current command as format 7 holds it, or what that format cannot hold.
pub fn downgrade_command_7(c: CommandRecord) -> Result<v7::CommandRecord, NotInFormat> {
    step7::downgrade_command(c)
}

/// A format-6 job as a current record.
pub fn upgrade_job_6(j: v6::JobRecord) -> Result<JobRecord, Unwritten> {
    step6::upgrade_job(j).map(step7::upgrade_job)
}

/// A current job as format 6 holds it.
pub fn downgrade_job_6(j: JobRecord) -> Result<v6::JobRecord, NotInFormat> {
    step6::downgrade_job(step7::downgrade_job(j)?)
}

/// A current job as format 7 holds it.
pub fn downgrade_job_7(j: JobRecord) -> Result<v7::JobRecord, NotInFormat> {
    step7::downgrade_job(j)
}

/// A format-6 state as a current record, at active version 6.
pub fn upgrade_state_6(s: v6::StateRecord) -> Result<StateRecord, Unwritten> {
    step6::upgrade_state(s).map(step7::upgrade_state)
}

/// A format-7 state as a current record.
pub fn upgrade_state_7(s: v7::StateRecord) -> StateRecord {
    step7::upgrade_state(s)
}

/// A current state as format 6 holds it.
pub fn downgrade_state_6(s: StateRecord) -> Result<v6::StateRecord, NotInFormat> {
    step6::downgrade_state(step7::downgrade_state(s)?)
}

/// A current state as format 7 holds it.
pub fn downgrade_state_7(s: StateRecord) -> Result<v7::StateRecord, NotInFormat> {
    step7::downgrade_state(s)
}

/// A current host as format 6 holds it (formats 7 and 8 store hosts as the current one does).
pub fn downgrade_host_6(h: HostStoredRecord) -> Result<v6::HostStoredRecord, NotInFormat> {
    step6::downgrade_host(h)
}

/// A format-6 backup part as the current one.
pub fn upgrade_backup_part_6(p: v6::BackupPart) -> Result<BackupPart, Unwritten> {
    step6::upgrade_backup_part(p).map(step7::upgrade_backup_part)
}

/// A format-7 backup part as the current one.
pub fn upgrade_backup_part_7(p: v7::BackupPart) -> BackupPart {
    step7::upgrade_backup_part(p)
}

/// The current backup part as format 6 holds it.
pub fn downgrade_backup_part_6(p: BackupPart) -> Result<v6::BackupPart, NotInFormat> {
    step6::downgrade_backup_part(step7::downgrade_backup_part(p)?)
}

/// The current backup part as format 7 holds it.
pub fn downgrade_backup_part_7(p: BackupPart) -> Result<v7::BackupPart, NotInFormat> {
    step7::downgrade_backup_part(p)
}
