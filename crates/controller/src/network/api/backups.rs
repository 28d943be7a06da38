//! Backups (admins only, by the session table): read a consistent copy of the state out in
//! frames, and start a new cluster from one, a part at a time.

use tracing::{info, warn};
use xce_client::wire::{self, ReplyHeader};
use xce_proto::xce_capnp::controller;
use xce_proto::Status;

use super::{header_of, ControllerService};
use crate::state::{BackupPart, Command};
use crate::store::backup;

pub(super) async fn save(
    this: &ControllerService,
    params: controller::SaveSnapshotParams,
    mut results: controller::SaveSnapshotResults,
) -> Result<(), capnp::Error> {
    let p = params.get()?;
    let (backup, frame) = (p.get_backup(), p.get_frame());
    let saved = this.node.backup_frame(backup, frame).await;
    let mut r = results.get();
    wire::write_header(r.reborrow().init_header(), &header_of(&saved));
    if let Ok(saved) = saved {
        if backup == 0 {
            info!(index = saved.index, frames = saved.frames, by = ?this.caller(), "backup taken");
        }
        r.set_snapshot(&saved.bytes);
        r.set_index(saved.index);
        r.set_backup(saved.backup);
        r.set_frames(saved.frames);
    }
    Ok(())
}

pub(super) async fn restore(
    this: &ControllerService,
    params: controller::RestoreSnapshotParams,
    mut results: controller::RestoreSnapshotResults,
) -> Result<(), capnp::Error> {
    let p = params.get()?;
    let token = wire::read_token(p.get_token()?);
    let base = wire::read_token(p.get_base()?);
    let (header_bytes, part_bytes) = (p.get_backup_header()?, p.get_snapshot()?);
    let read = backup::decode_header(header_bytes)
        .and_then(|header| Ok((header, backup::decode_part(header.format, part_bytes)?)));
    let header = match read {
        Err(e) => ReplyHeader::status(Status::Invalid, format!("restore: {e}")),
        Ok((header, part)) => {
            let (what, jobs, cmd) = match part {
                BackupPart::Base(state) => (
                    "the cluster state",
                    state.jobs.len(),
                    Command::Restore {
                        token,
                        state: Box::new(state),
                    },
                ),
                BackupPart::Jobs {
                    jobs,
                    intents,
                    scripts,
                } => (
                    "jobs",
                    jobs.len(),
                    Command::RestoreJobs {
                        token,
                        base,
                        jobs,
                        intents,
                        scripts,
                    },
                ),
            };
            let reply = this.write_for_header(cmd).await;
            match reply.status {
                Status::Ok => info!(
                    index = header.index,
                    jobs,
                    by = ?this.caller(),
                    "restored {what} from a backup part"
                ),
                _ => warn!(index = header.index, message = %reply.message, "restore part refused"),
            }
            reply
        }
    };
    wire::write_header(results.get().init_header(), &header);
    Ok(())
}
