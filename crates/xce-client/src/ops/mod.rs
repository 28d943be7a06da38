//! Typed controller operations. Each op knows how to send itself over a capnp connection and
//! read its reply; the failover engine in [`crate::client`] decides where and how often.
//! An op is `Clone` because a failover re-sends the same op (with the same request token).

use xce_proto::xce_capnp::controller;

use xce_proto::Status;

use crate::connection::LocalFuture;
use crate::wire::{self, ReplyHeader};

mod backups;
mod cluster;
mod events;
mod history;
mod hosts;
mod jobs;
mod queues;
mod schedulers;
mod sessions;
mod tokens;
mod workers;

pub use backups::{RestoreSnapshot, SaveSnapshot, SavedFrame};
pub use cluster::{AddController, GetCluster, RemoveController};
pub use events::Subscribe;
pub use history::{list_history, HistoryListed, ListHistory};
pub use hosts::{ControlHost, ListHosts};
pub use jobs::{
    all_jobs, list_jobs, ControlJob, ControlTasks, Dispatch, GetJob, GetScript, GetTask, ListJobs,
    SignalJob, Submit, SubmitJob, Submitted, UpdateJob,
};
pub use queues::{ControlQueue, ListQueues};
pub use schedulers::{AcquireScheduler, DispatchBatch, SetPendReasons};
pub use sessions::{claim_role, ActAs, Join, Joined};
pub use tokens::{Authenticate, CreateToken, ListTokens, RevokeToken};
pub use workers::{Heartbeat, JobFinished, JobStarted};

/// A reply: the header, and the value when the status carries one (`ok`, or `dupJob` with the
/// original result).
#[derive(Debug, Clone)]
pub struct Reply<T> {
    pub header: ReplyHeader,
    pub value: Option<T>,
}

/// Whether an op changes state; decides how `dupJob` on a re-send is classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Read,
    Write,
}

/// One reply-bearing controller operation.
pub trait Op: Clone + Send + Sync + 'static {
    type Output: Send + 'static;
    /// Read or write.
    const KIND: OpKind;
    /// Name for logs.
    const NAME: &'static str;
    /// Sends the op on `client` (on the connection's thread) and reads the reply.
    fn send(
        self,
        client: controller::Client,
    ) -> LocalFuture<Result<Reply<Self::Output>, capnp::Error>>;
    /// The cluster's own list of controllers, when this op's answer carries one (the cluster
    /// info): the client takes it as its candidates from then on.
    fn candidates_of(_output: &Self::Output) -> Option<Vec<crate::Candidate>> {
        None
    }
}

/// Reads a reply: the header, then the value, read only when the status carries one (`ok`,
/// or `dupJob` with the original result). Every op's reply is read through here.
pub(crate) fn reply<T>(
    header: xce_proto::xce_capnp::reply_header::Reader<'_>,
    value: impl FnOnce() -> Result<T, capnp::Error>,
) -> Result<Reply<T>, capnp::Error> {
    let header = wire::read_header(header)?;
    let value = if matches!(header.status, Status::Ok | Status::DupJob) {
        Some(value()?)
    } else {
        None
    };
    Ok(Reply { header, value })
}

/// The reply of an op whose result is just its header.
pub(crate) fn header_only(
    header: xce_proto::xce_capnp::reply_header::Reader<'_>,
) -> Result<Reply<()>, capnp::Error> {
    reply(header, || Ok(()))
}

/// Reads every element of a capnp list with `read`.
pub(crate) fn read_list<'a, R, T>(
    list: capnp::struct_list::Reader<'a, R>,
    read: impl Fn(<R as capnp::traits::OwnedStruct>::Reader<'a>) -> Result<T, capnp::Error>,
) -> Result<Vec<T>, capnp::Error>
where
    R: capnp::traits::OwnedStruct,
{
    list.iter().map(read).collect()
}
