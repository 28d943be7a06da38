//! Typed controller operations. Each op knows how to send itself over a capnp connection and
//! read its reply; the failover engine in [`crate::client`] decides where and how often.
//! An op is `Clone` because a failover re-sends the same op (with the same request token).

use futures::FutureExt;
use xce_proto::xce_capnp::controller;
use xce_proto::Status;

use crate::agent::AgentHandle;
use crate::connection::LocalFuture;
use crate::types::{
    ClusterInfo, HeldJob, Host, HostAction, HostAttributes, Job, JobAction, JobEnd, JobFilter,
    JobId, JobOrder, JobSpec, Queue, QueueAction, RequestToken, Role,
};
use crate::wire::{self, ReplyHeader};

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
}

fn carries_value(h: &ReplyHeader) -> bool {
    matches!(h.status, Status::Ok | Status::DupJob)
}

/// The reply of an op whose result is just its header.
fn header_only(
    header: xce_proto::xce_capnp::reply_header::Reader<'_>,
) -> Result<Reply<()>, capnp::Error> {
    let header = wire::read_header(header)?;
    let value = carries_value(&header).then_some(());
    Ok(Reply { header, value })
}

/// Submit a job. Output: its id (the original id on a replayed token).
#[derive(Debug, Clone)]
pub struct Submit {
    pub token: RequestToken,
    pub spec: JobSpec,
}

impl Op for Submit {
    type Output = JobId;
    const KIND: OpKind = OpKind::Write;
    const NAME: &'static str = "submit";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<JobId>, capnp::Error>> {
        async move {
            let mut req = client.submit_request();
            wire::write_token(req.get().init_token(), self.token);
            wire::write_spec(req.get().init_spec(), &self.spec);
            let resp = req.send().promise.await?;
            let r = resp.get()?;
            let header = wire::read_header(r.get_header()?)?;
            let value = carries_value(&header).then(|| r.get_job_id());
            Ok(Reply { header, value })
        }
        .boxed_local()
    }
}

/// List jobs matching a filter.
#[derive(Debug, Clone, Default)]
pub struct ListJobs {
    pub filter: JobFilter,
}

impl Op for ListJobs {
    type Output = Vec<Job>;
    const KIND: OpKind = OpKind::Read;
    const NAME: &'static str = "listJobs";
    fn send(
        self,
        client: controller::Client,
    ) -> LocalFuture<Result<Reply<Vec<Job>>, capnp::Error>> {
        async move {
            let mut req = client.list_jobs_request();
            wire::write_filter(req.get().init_filter(), &self.filter);
            let resp = req.send().promise.await?;
            let r = resp.get()?;
            let header = wire::read_header(r.get_header()?)?;
            let value = if carries_value(&header) {
                Some(
                    r.get_jobs()?
                        .iter()
                        .map(wire::read_job)
                        .collect::<Result<_, _>>()?,
                )
            } else {
                None
            };
            Ok(Reply { header, value })
        }
        .boxed_local()
    }
}

/// One job by id.
#[derive(Debug, Clone)]
pub struct GetJob {
    pub id: JobId,
}

impl Op for GetJob {
    type Output = Job;
    const KIND: OpKind = OpKind::Read;
    const NAME: &'static str = "jobInfo";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<Job>, capnp::Error>> {
        async move {
            let mut req = client.job_info_request();
            req.get().set_job_id(self.id);
            let resp = req.send().promise.await?;
            let r = resp.get()?;
            let header = wire::read_header(r.get_header()?)?;
            let value = if carries_value(&header) {
                Some(wire::read_job(r.get_job()?)?)
            } else {
                None
            };
            Ok(Reply { header, value })
        }
        .boxed_local()
    }
}

/// Kill (and later suspend, resume, requeue) a job.
#[derive(Debug, Clone)]
pub struct ControlJob {
    pub token: RequestToken,
    pub id: JobId,
    pub action: JobAction,
}

impl Op for ControlJob {
    type Output = ();
    const KIND: OpKind = OpKind::Write;
    const NAME: &'static str = "jobControl";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<()>, capnp::Error>> {
        async move {
            let mut req = client.job_control_request();
            wire::write_token(req.get().init_token(), self.token);
            req.get().set_job_id(self.id);
            req.get().set_action(self.action.into());
            let resp = req.send().promise.await?;
            header_only(resp.get()?.get_header()?)
        }
        .boxed_local()
    }
}

/// All queues with their job counts.
#[derive(Debug, Clone, Default)]
pub struct ListQueues;

impl Op for ListQueues {
    type Output = Vec<Queue>;
    const KIND: OpKind = OpKind::Read;
    const NAME: &'static str = "listQueues";
    fn send(
        self,
        client: controller::Client,
    ) -> LocalFuture<Result<Reply<Vec<Queue>>, capnp::Error>> {
        async move {
            let resp = client.list_queues_request().send().promise.await?;
            let r = resp.get()?;
            let header = wire::read_header(r.get_header()?)?;
            let value = if carries_value(&header) {
                Some(
                    r.get_queues()?
                        .iter()
                        .map(wire::read_queue)
                        .collect::<Result<_, _>>()?,
                )
            } else {
                None
            };
            Ok(Reply { header, value })
        }
        .boxed_local()
    }
}

/// Open, close, activate or inactivate a queue.
#[derive(Debug, Clone)]
pub struct ControlQueue {
    pub token: RequestToken,
    pub name: String,
    pub action: QueueAction,
}

impl Op for ControlQueue {
    type Output = ();
    const KIND: OpKind = OpKind::Write;
    const NAME: &'static str = "queueControl";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<()>, capnp::Error>> {
        async move {
            let mut req = client.queue_control_request();
            wire::write_token(req.get().init_token(), self.token);
            req.get().set_name(self.name.as_str());
            req.get().set_action(self.action.into());
            let resp = req.send().promise.await?;
            header_only(resp.get()?.get_header()?)
        }
        .boxed_local()
    }
}

/// The cluster as the primary sees it.
#[derive(Debug, Clone, Default)]
pub struct GetCluster;

impl Op for GetCluster {
    type Output = ClusterInfo;
    const KIND: OpKind = OpKind::Read;
    const NAME: &'static str = "clusterInfo";
    fn send(
        self,
        client: controller::Client,
    ) -> LocalFuture<Result<Reply<ClusterInfo>, capnp::Error>> {
        async move {
            let resp = client.cluster_info_request().send().promise.await?;
            let r = resp.get()?;
            let header = wire::read_header(r.get_header()?)?;
            let value = if carries_value(&header) {
                Some(wire::read_cluster(r.get_cluster()?)?)
            } else {
                None
            };
            Ok(Reply { header, value })
        }
        .boxed_local()
    }
}

/// All hosts.
#[derive(Debug, Clone, Default)]
pub struct ListHosts;

impl Op for ListHosts {
    type Output = Vec<Host>;
    const KIND: OpKind = OpKind::Read;
    const NAME: &'static str = "listHosts";
    fn send(
        self,
        client: controller::Client,
    ) -> LocalFuture<Result<Reply<Vec<Host>>, capnp::Error>> {
        async move {
            let resp = client.list_hosts_request().send().promise.await?;
            let r = resp.get()?;
            let header = wire::read_header(r.get_header()?)?;
            let value = if carries_value(&header) {
                Some(
                    r.get_hosts()?
                        .iter()
                        .map(wire::read_host)
                        .collect::<Result<_, _>>()?,
                )
            } else {
                None
            };
            Ok(Reply { header, value })
        }
        .boxed_local()
    }
}

/// Open or close a host.
#[derive(Debug, Clone)]
pub struct ControlHost {
    pub token: RequestToken,
    pub name: String,
    pub action: HostAction,
}

impl Op for ControlHost {
    type Output = ();
    const KIND: OpKind = OpKind::Write;
    const NAME: &'static str = "hostControl";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<()>, capnp::Error>> {
        async move {
            let mut req = client.host_control_request();
            wire::write_token(req.get().init_token(), self.token);
            req.get().set_name(self.name.as_str());
            req.get().set_action(self.action.into());
            let resp = req.send().promise.await?;
            header_only(resp.get()?.get_header()?)
        }
        .boxed_local()
    }
}

/// A daemon announces itself; a worker registers its host and agent.
#[derive(Debug, Clone)]
pub struct Join {
    pub token: RequestToken,
    pub role: Role,
    pub host: HostAttributes,
    pub agent: Option<AgentHandle>,
    /// The attempts a worker holds (resync); empty for other roles.
    pub held: Vec<HeldJob>,
}

/// The primary's answer to a join.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Joined {
    /// What a worker must do with the attempts it holds.
    pub orders: Vec<JobOrder>,
    /// How long after its last heartbeat the primary declares a worker's jobs lost; `None`
    /// when the primary did not say.
    pub lost_after: Option<std::time::Duration>,
}

impl Op for Join {
    type Output = Joined;
    const KIND: OpKind = OpKind::Write;
    const NAME: &'static str = "join";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<Joined>, capnp::Error>> {
        async move {
            let mut req = client.join_request();
            wire::write_token(req.get().init_token(), self.token);
            req.get().set_role(self.role.into());
            wire::write_attributes(req.get().init_host(), &self.host);
            if let Some(agent) = &self.agent {
                req.get().set_agent(agent.capability());
            }
            let mut held = req.get().init_held(self.held.len() as u32);
            for (i, h) in self.held.iter().enumerate() {
                wire::write_held(held.reborrow().get(i as u32), h);
            }
            let resp = req.send().promise.await?;
            let r = resp.get()?;
            let header = wire::read_header(r.get_header()?)?;
            let orders = r
                .get_orders()?
                .iter()
                .map(wire::read_order)
                .collect::<Result<Vec<_>, _>>()?;
            let lost_after = Some(r.get_lost_after_ms())
                .filter(|ms| *ms > 0)
                .map(std::time::Duration::from_millis);
            let value = carries_value(&header).then_some(Joined { orders, lost_after });
            Ok(Reply { header, value })
        }
        .boxed_local()
    }
}

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

/// Place a pending job on a host (operator placement; later the scheduler's decision).
#[derive(Debug, Clone)]
pub struct Dispatch {
    pub token: RequestToken,
    pub id: JobId,
    pub host: String,
}

impl Op for Dispatch {
    type Output = ();
    const KIND: OpKind = OpKind::Write;
    const NAME: &'static str = "dispatch";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<()>, capnp::Error>> {
        async move {
            let mut req = client.dispatch_request();
            wire::write_token(req.get().init_token(), self.token);
            req.get().set_job_id(self.id);
            req.get().set_host(self.host.as_str());
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
            let resp = req.send().promise.await?;
            header_only(resp.get()?.get_header()?)
        }
        .boxed_local()
    }
}
