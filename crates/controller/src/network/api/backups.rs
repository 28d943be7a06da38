//! Backups (admins only, by the session table): save a consistent copy of the state, and
//! start a new cluster from one.

use tracing::{info, warn};
use xce_client::wire::{self, ReplyHeader};
use xce_proto::xce_capnp::controller;
use xce_proto::Status;

use super::{header_of, ControllerService};
use crate::state::Command;
use crate::store::backup;

pub(super) async fn save(
    this: &ControllerService,
    _params: controller::SaveSnapshotParams,
    mut results: controller::SaveSnapshotResults,
) -> Result<(), capnp::Error> {
    let saved = this.node.backup().await;
    let mut r = results.get();
    wire::write_header(r.reborrow().init_header(), &header_of(&saved));
    if let Ok((bytes, index)) = saved {
        info!(index, bytes = bytes.len(), by = ?this.caller(), "backup taken");
        r.set_snapshot(&bytes);
        r.set_index(index);
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
    let header = match backup::decode(p.get_snapshot()?) {
        Err(e) => ReplyHeader::status(Status::Invalid, format!("restore: {e}")),
        Ok(backup) => {
            let (index, jobs) = (backup.index, backup.state.jobs.len());
            let cmd = Command::Restore {
                token,
                state: Box::new(backup.state),
            };
            let header = this.write_for_header(cmd).await;
            match header.status {
                Status::Ok => {
                    info!(index, jobs, by = ?this.caller(), "cluster restored from a backup")
                }
                _ => warn!(index, message = %header.message, "restore refused"),
            }
            header
        }
    };
    wire::write_header(results.get().init_header(), &header);
    Ok(())
}
