//! Backups (admins only): a consistent copy of the cluster state, and a new cluster started
//! from one, moved in frames (`crate::backup_file`) whose contents this side never reads.

use std::sync::Arc;

use futures::FutureExt;
use xce_proto::xce_capnp::controller;

use super::{header_only, reply, Op, OpKind, Reply};
use crate::connection::LocalFuture;
use crate::types::RequestToken;
use crate::wire;

/// One frame of a backup the primary holds (see [`crate::backup_file`]).
#[derive(Debug, Clone)]
pub struct SavedFrame {
    pub bytes: Vec<u8>,
    /// The Raft log index the backup was taken at.
    pub index: u64,
    /// The held backup, for reading its other frames.
    pub backup: u64,
    /// How many frames it has, its header included.
    pub frames: u32,
}

/// Reads frame `frame` of held backup `backup`; `backup` 0 takes a new backup of everything
/// acknowledged before the call (read its frame `frame`, usually 0, the header).
#[derive(Debug, Clone, Default)]
pub struct SaveSnapshot {
    pub backup: u64,
    pub frame: u32,
}

impl Op for SaveSnapshot {
    type Output = SavedFrame;
    const KIND: OpKind = OpKind::Read;
    const NAME: &'static str = "saveSnapshot";
    fn send(
        self,
        client: controller::Client,
    ) -> LocalFuture<Result<Reply<SavedFrame>, capnp::Error>> {
        async move {
            let mut req = client.save_snapshot_request();
            req.get().set_backup(self.backup);
            req.get().set_frame(self.frame);
            let resp = req.send().promise.await?;
            let r = resp.get()?;
            reply(r.get_header()?, || {
                Ok(SavedFrame {
                    bytes: r.get_snapshot()?.to_vec(),
                    index: r.get_index(),
                    backup: r.get_backup(),
                    frames: r.get_frames(),
                })
            })
        }
        .boxed_local()
    }
}

/// Restores one part of a backup: `part` beside the file's `header` frame. `base` is the
/// token of the file's first part (the one that replaces the state); tokens come from
/// [`crate::backup_file::part_token`], so a re-run resumes. Shared bytes: a re-send after a
/// failover copies nothing.
#[derive(Debug, Clone)]
pub struct RestoreSnapshot {
    pub token: RequestToken,
    pub base: RequestToken,
    pub header: Arc<[u8]>,
    pub part: Arc<[u8]>,
}

impl Op for RestoreSnapshot {
    type Output = ();
    const KIND: OpKind = OpKind::Write;
    const NAME: &'static str = "restoreSnapshot";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<()>, capnp::Error>> {
        async move {
            let mut req = client.restore_snapshot_request();
            wire::write_token(req.get().init_token(), self.token);
            wire::write_token(req.get().init_base(), self.base);
            req.get().set_backup_header(&self.header);
            req.get().set_snapshot(&self.part);
            let resp = req.send().promise.await?;
            header_only(resp.get()?.get_header()?)
        }
        .boxed_local()
    }
}
