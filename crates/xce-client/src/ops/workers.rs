//! What only a joined worker may call: liveness and its attempts' reports.

use futures::FutureExt;
use xce_proto::xce_capnp::controller;

use super::{header_only, Op, OpKind, Reply};
use crate::connection::LocalFuture;
use crate::types::{JobEnd, JobId, RequestToken};
use crate::wire;

/// A worker's liveness signal; sent with [`crate::Client::notify`].
#[derive(Debug, Clone)]
pub struct Heartbeat {
    pub name: String,
}

impl Op for Heartbeat {
    type Output = ();
    const KIND: OpKind = OpKind::Write;
    const NAME: &'static str = "heartbeat";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<()>, capnp::Error>> {
        async move {
            let mut req = client.heartbeat_request();
            req.get().set_name(self.name.as_str());
            let resp = req.send().promise.await?;
            header_only(resp.get()?.get_header()?)
        }
        .boxed_local()
    }
}

/// A worker reports that an attempt started.
#[derive(Debug, Clone)]
pub struct JobStarted {
    pub token: RequestToken,
    pub host: String,
    pub id: JobId,
    pub attempt: u32,
}

impl Op for JobStarted {
    type Output = ();
    const KIND: OpKind = OpKind::Write;
    const NAME: &'static str = "jobStarted";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<()>, capnp::Error>> {
        async move {
            let mut req = client.job_started_request();
            wire::write_token(req.get().init_token(), self.token);
            req.get().set_host(self.host.as_str());
            req.get().set_job_id(self.id);
            req.get().set_attempt(self.attempt);
            let resp = req.send().promise.await?;
            header_only(resp.get()?.get_header()?)
        }
        .boxed_local()
    }
}

/// A worker reports that an attempt ended.
#[derive(Debug, Clone)]
pub struct JobFinished {
    pub token: RequestToken,
    pub host: String,
    pub id: JobId,
    pub attempt: u32,
    pub end: JobEnd,
    /// What the attempt used, as its shim measured it (`None`: not measured).
    pub usage: Option<crate::types::Usage>,
}

impl Op for JobFinished {
    type Output = ();
    const KIND: OpKind = OpKind::Write;
    const NAME: &'static str = "jobFinished";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<()>, capnp::Error>> {
        async move {
            let mut req = client.job_finished_request();
            wire::write_token(req.get().init_token(), self.token);
            req.get().set_host(self.host.as_str());
            req.get().set_job_id(self.id);
            req.get().set_attempt(self.attempt);
            wire::write_end(req.get().init_end(), &self.end);
            if let Some(u) = &self.usage {
                wire::write_usage(req.get().init_usage(), u);
            }
            let resp = req.send().promise.await?;
            header_only(resp.get()?.get_header()?)
        }
        .boxed_local()
    }
}
