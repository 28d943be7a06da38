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
    JobId, JobOrder, JobPage, JobSpec, Queue, QueueAction, RequestToken, Role,
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

/// Reads a reply: the header, then the value, read only when the status carries one (`ok`,
/// or `dupJob` with the original result). Every op's reply is read through here.
fn reply<T>(
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
fn header_only(
    header: xce_proto::xce_capnp::reply_header::Reader<'_>,
) -> Result<Reply<()>, capnp::Error> {
    reply(header, || Ok(()))
}

/// Reads every element of a capnp list with `read`.
fn read_list<'a, R, T>(
    list: capnp::struct_list::Reader<'a, R>,
    read: impl Fn(<R as capnp::traits::OwnedStruct>::Reader<'a>) -> Result<T, capnp::Error>,
) -> Result<Vec<T>, capnp::Error>
where
    R: capnp::traits::OwnedStruct,
{
    list.iter().map(read).collect()
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
            reply(r.get_header()?, || Ok(r.get_job_id()))
        }
        .boxed_local()
    }
}

/// One page of the jobs matching a filter (see [`list_jobs`] for all of them).
#[derive(Debug, Clone, Default)]
pub struct ListJobs {
    pub filter: JobFilter,
    /// Only jobs with ids above this (0: from the start); the `next` of the previous page.
    pub after: JobId,
    /// Most jobs in the page; 0 for the controller's default (it caps any value).
    pub limit: u32,
}

impl Op for ListJobs {
    type Output = JobPage;
    const KIND: OpKind = OpKind::Read;
    const NAME: &'static str = "listJobs";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<JobPage>, capnp::Error>> {
        async move {
            let mut req = client.list_jobs_request();
            wire::write_filter(req.get().init_filter(), &self.filter);
            req.get().set_after(self.after);
            req.get().set_limit(self.limit);
            let resp = req.send().promise.await?;
            let r = resp.get()?;
            reply(r.get_header()?, || {
                Ok(JobPage {
                    jobs: read_list(r.get_jobs()?, wire::read_job)?,
                    next: Some(r.get_next()).filter(|n| *n != 0),
                })
            })
        }
        .boxed_local()
    }
}

/// Every job matching `filter`, page by page (each page one call through the failover loop),
/// up to `max` jobs when given; `each` gets every page as it arrives, so a caller can print a
/// long listing without holding it all.
pub async fn list_jobs<T: crate::transport::Transport>(
    client: &crate::Client<T>,
    filter: JobFilter,
    max: Option<usize>,
    mut each: impl FnMut(&[Job]),
) -> Result<usize, crate::ClientError> {
    let mut after = 0;
    let mut seen = 0usize;
    loop {
        let remaining = max.map(|m| m.saturating_sub(seen));
        if remaining == Some(0) {
            return Ok(seen);
        }
        let limit = remaining.map_or(0, |r| r.min(u32::MAX as usize) as u32);
        let page = client
            .call(ListJobs {
                filter: filter.clone(),
                after,
                limit,
            })
            .await?;
        let take = remaining.map_or(page.jobs.len(), |r| r.min(page.jobs.len()));
        each(&page.jobs[..take]);
        seen += take;
        match page.next {
            Some(next) if next > after => after = next,
            _ => return Ok(seen),
        }
    }
}

/// Every job matching `filter`, gathered from all its pages.
pub async fn all_jobs<T: crate::transport::Transport>(
    client: &crate::Client<T>,
    filter: JobFilter,
) -> Result<Vec<Job>, crate::ClientError> {
    let mut jobs = Vec::new();
    list_jobs(client, filter, None, |page| jobs.extend_from_slice(page)).await?;
    Ok(jobs)
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
            reply(r.get_header()?, || wire::read_job(r.get_job()?))
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
            reply(r.get_header()?, || {
                read_list(r.get_queues()?, wire::read_queue)
            })
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
            reply(r.get_header()?, || wire::read_cluster(r.get_cluster()?))
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
            reply(r.get_header()?, || {
                read_list(r.get_hosts()?, wire::read_host)
            })
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
            reply(r.get_header()?, || {
                Ok(Joined {
                    orders: read_list(r.get_orders()?, wire::read_order)?,
                    lost_after: Some(r.get_lost_after_ms())
                        .filter(|ms| *ms > 0)
                        .map(std::time::Duration::from_millis),
                })
            })
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
