//! The step between store formats 9 and 10: format-9 commands to format-10 ones
//! (`upgrade_command`, when old data is read: infallible, format 10 holds all of format 9) and
//! back (`downgrade_command`, while the cluster's active version is still 9). Format 10 adds
//! one command, an action on an array's tasks or on a whole array (`ControlTasks`: `xce kill
//! 42_7`, `xce hold 42`, `xce update 42 --throttle 4`), refused on the way down by
//! [`NotInFormat`]; jobs, specs and states are stored as format 9 stores them. Lossless for
//! everything format 9 holds: `downgrade(upgrade(x)) == x` (property-tested in
//! `stored::tests`).

use super::step6::NotInFormat;
use super::v10::CommandRecord;
use super::v9;

/// Lists every variant both formats hold, for [`same_variants!`].
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
            Restore { token, state },
            RestoreJobs { token, base, jobs, intents, scripts },
            RaiseVersion { to },
            UpdateJob { token, id, by, changes },
            SignalJob { token, id, by, signal, leader_only },
        } $($arm)*)
    };
}

/// A format-9 command as a format-10 one.
pub fn upgrade_command(c: v9::CommandRecord) -> CommandRecord {
    use v9::CommandRecord as Old;
    use CommandRecord as New;
    both_ways!(c, Old => New)
}

/// A format-10 command as format 9 holds it, or what that format cannot hold.
pub fn downgrade_command(c: CommandRecord) -> Result<v9::CommandRecord, NotInFormat> {
    use v9::CommandRecord as Old;
    use CommandRecord as New;
    Ok(both_ways!(c, New => Old
        New::ControlTasks { .. } => {
            return Err(NotInFormat {
                what: "an action on an array's tasks or on a whole array",
                needs: 10,
            })
        }
    ))
}
