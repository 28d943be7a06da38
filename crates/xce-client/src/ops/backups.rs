//! Backups (admins only): a consistent copy of the cluster state, and a new cluster started
//! from one. The bytes are the controller's backup file format; this side never reads them.

use std::sync::Arc;

use futures::FutureExt;
use xce_proto::xce_capnp::controller;

use super::{header_only, reply, Op, OpKind, Reply};
use crate::connection::LocalFuture;
use crate::types::RequestToken;
use crate::wire;

/// A backup taken by the primary: the file's bytes and the Raft log index it holds.
#[derive(Debug, Clone)]
pub struct Saved {
    pub bytes: Vec<u8>,
    pub index: u64,
}

/// Takes a backup of everything acknowledged before the call.
#[derive(Debug, Clone, Default)]
pub struct SaveSnapshot;

impl Op for SaveSnapshot {
    type Output = Saved;
    const KIND: OpKind = OpKind::Read;
    const NAME: &'static str = "saveSnapshot";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<Saved>, capnp::Error>> {
        async move {
            let resp = client.save_snapshot_request().send().promise.await?;
            let r = resp.get()?;
            reply(r.get_header()?, || {
                Ok(Saved {
                    bytes: r.get_snapshot()?.to_vec(),
                    index: r.get_index(),
                })
            })
        }
        .boxed_local()
    }
}

/// Replaces a new cluster's state with a backup's (shared bytes: a re-send after a failover
/// copies nothing).
#[derive(Debug, Clone)]
pub struct RestoreSnapshot {
    pub token: RequestToken,
    pub bytes: Arc<[u8]>,
}

impl Op for RestoreSnapshot {
    type Output = ();
    const KIND: OpKind = OpKind::Write;
    const NAME: &'static str = "restoreSnapshot";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<()>, capnp::Error>> {
        async move {
            let mut req = client.restore_snapshot_request();
            wire::write_token(req.get().init_token(), self.token);
            req.get().set_snapshot(&self.bytes);
            let resp = req.send().promise.await?;
            header_only(resp.get()?.get_header()?)
        }
        .boxed_local()
    }
}
