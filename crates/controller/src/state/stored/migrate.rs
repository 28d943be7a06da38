//! Between the current records and every older format this build reads, one step per format
//! chained: format 6 ↔ 7 is `super::step6`; format 7's records (`super::v7`) ↔ the current
//! ones is one-to-one while the current format is 7. `upgrade_*` reads old data as current
//! records; `downgrade_*` writes what a cluster whose active version is older replicates,
//! refusing by [`NotInFormat`] what that format cannot hold.

use super::step6;
use super::{v6, v7, Command, CommandRecord, HostStoredRecord, JobRecord, StateRecord};

pub use step6::{pend_code_of_v6, result_of_v6, NotInFormat, Unwritten};

/// `cmd` as the cluster can replicate it while its active version is `format`: unchanged in
/// the current format; in an older one, converted down and up again, so that what the
/// primary applies is exactly what an older member (or a newer one, decoding the older
/// entry) applies. `RaiseVersion` is never converted: it is proposed only once every member
/// reads the format it raises to.
pub fn fit_format(format: u32, cmd: Command) -> Result<Command, NotInFormat> {
    if format >= 7 || matches!(cmd, Command::RaiseVersion { .. }) {
        return Ok(cmd);
    }
    let down = downgrade_command(CommandRecord::from(cmd))?;
    // A record just made from a current one always reads back.
    upgrade_command(down)
        .map(Command::from)
        .map_err(|_| step6::not_in_6("a request"))
}

/// A format-6 command as a current record.
pub fn upgrade_command(c: v6::CommandRecord) -> Result<CommandRecord, Unwritten> {
    step6::upgrade_command(c).map(CommandRecord::from)
}

/// A current command as format 6 holds it, or what that format cannot hold.
pub fn downgrade_command(c: CommandRecord) -> Result<v6::CommandRecord, NotInFormat> {
    step6::downgrade_command(v7::CommandRecord::from(c))
}

/// A format-6 job as a current record.
pub fn upgrade_job(j: v6::JobRecord) -> Result<JobRecord, Unwritten> {
    step6::upgrade_job(j).map(JobRecord::from)
}

/// A current job as format 6 holds it.
pub fn downgrade_job(j: JobRecord) -> Result<v6::JobRecord, NotInFormat> {
    step6::downgrade_job(v7::JobRecord::from(j))
}

/// A format-6 state as a current record, at active version 6.
pub fn upgrade_state(s: v6::StateRecord) -> Result<StateRecord, Unwritten> {
    step6::upgrade_state(s).map(StateRecord::from)
}

/// A current state as format 6 holds it.
pub fn downgrade_state(s: StateRecord) -> Result<v6::StateRecord, NotInFormat> {
    step6::downgrade_state(v7::StateRecord::from(s))
}

/// A current host as format 6 holds it (format 7 stores hosts as the current format does).
pub fn downgrade_host(h: HostStoredRecord) -> Result<v6::HostStoredRecord, NotInFormat> {
    step6::downgrade_host(h)
}

/// A format-6 backup part as the current one.
pub fn upgrade_backup_part(p: v6::BackupPart) -> Result<crate::state::BackupPart, Unwritten> {
    step6::upgrade_backup_part(p).map(Into::into)
}

/// The current backup part as format 6 holds it.
pub fn downgrade_backup_part(p: crate::state::BackupPart) -> Result<v6::BackupPart, NotInFormat> {
    step6::downgrade_backup_part(v7::BackupPart::from(p))
}
