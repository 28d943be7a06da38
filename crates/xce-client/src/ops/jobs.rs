//! Job operations: submit, list (paged), look up, control, dispatch.

use futures::FutureExt;
use xce_proto::xce_capnp::controller;

use super::{header_only, read_list, reply, Op, OpKind, Reply};
use crate::connection::LocalFuture;
use crate::types::{Job, JobAction, JobChanges, JobFilter, JobId, JobPage, JobSpec, RequestToken};
use crate::wire;

/// Submit a job. Output: its id (the original id on a replayed token).
#[derive(Debug, Clone)]
pub struct Submit {
    pub token: RequestToken,
    pub spec: JobSpec,
    /// The bytes of `spec.script` (whose id is their SHA-256), for a job script.
    pub script: Option<std::sync::Arc<[u8]>>,
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
            if let Some(script) = &self.script {
                req.get().set_script(script);
            }
            let resp = req.send().promise.await?;
            let r = resp.get()?;
            reply(r.get_header()?, || Ok(r.get_job_id()))
        }
        .boxed_local()
    }
}

/// Submit a job and get it back as the primary holds it. A token already applied is not an
/// error here but the original job, marked `replayed`: the caller chose the token (an HTTP
/// `Idempotency-Key`) and asks to be told which submit made the job.
#[derive(Debug, Clone)]
pub struct SubmitJob {
    pub token: RequestToken,
    pub spec: JobSpec,
    /// As [`Submit`]'s.
    pub script: Option<std::sync::Arc<[u8]>>,
}

/// What a [`SubmitJob`] made (or had made before).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitted {
    pub id: JobId,
    /// The job right after the submit; `None` from a controller too old to send it.
    pub job: Option<Job>,
    /// Whether an earlier submit with the same token made it.
    pub replayed: bool,
}

impl Op for SubmitJob {
    type Output = Submitted;
    const KIND: OpKind = OpKind::Write;
    const NAME: &'static str = "submit";
    fn send(
        self,
        client: controller::Client,
    ) -> LocalFuture<Result<Reply<Submitted>, capnp::Error>> {
        async move {
            let mut req = client.submit_request();
            wire::write_token(req.get().init_token(), self.token);
            wire::write_spec(req.get().init_spec(), &self.spec);
            if let Some(script) = &self.script {
                req.get().set_script(script);
            }
            let resp = req.send().promise.await?;
            let r = resp.get()?;
            let mut header = wire::read_header(r.get_header()?)?;
            let replayed = header.status == xce_proto::Status::DupJob;
            if replayed {
                header = wire::ReplyHeader::ok();
            }
            if header.status != xce_proto::Status::Ok {
                return Ok(Reply {
                    header,
                    value: None,
                });
            }
            let job = if r.has_job() {
                Some(wire::read_job(r.get_job()?)?)
            } else {
                None
            };
            let value = Submitted {
                id: r.get_job_id(),
                job,
                replayed,
            };
            Ok(Reply {
                header,
                value: Some(value),
            })
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
                let mut jobs = read_list(r.get_jobs()?, wire::read_job)?;
                // Again here: a controller of an older build ignores the filter fields it
                // does not know, and its page would hold jobs the caller did not ask for.
                jobs.retain(|j| self.filter.matches(j));
                Ok(JobPage {
                    jobs,
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

/// Change a job (`xce update`, `xce hold`, `xce release`).
#[derive(Debug, Clone)]
pub struct UpdateJob {
    pub token: RequestToken,
    pub id: JobId,
    pub changes: JobChanges,
}

impl Op for UpdateJob {
    type Output = ();
    const KIND: OpKind = OpKind::Write;
    const NAME: &'static str = "updateJob";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<()>, capnp::Error>> {
        async move {
            let mut req = client.update_job_request();
            wire::write_token(req.get().init_token(), self.token);
            req.get().set_job_id(self.id);
            wire::write_changes(req.get().init_changes(), &self.changes);
            let resp = req.send().promise.await?;
            header_only(resp.get()?.get_header()?)
        }
        .boxed_local()
    }
}

/// Send a signal to a running job (`xce signal`, `xce kill --signal`).
#[derive(Debug, Clone)]
pub struct SignalJob {
    pub token: RequestToken,
    pub id: JobId,
    pub signal: i32,
    /// To its leading process alone (Slurm's `B:`), not its whole process group.
    pub leader_only: bool,
}

impl Op for SignalJob {
    type Output = ();
    const KIND: OpKind = OpKind::Write;
    const NAME: &'static str = "signalJob";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<()>, capnp::Error>> {
        async move {
            let mut req = client.signal_job_request();
            wire::write_token(req.get().init_token(), self.token);
            req.get().set_job_id(self.id);
            req.get().set_signal(self.signal);
            req.get().set_leader_only(self.leader_only);
            let resp = req.send().promise.await?;
            header_only(resp.get()?.get_header()?)
        }
        .boxed_local()
    }
}

/// An action on tasks of an array, or on a whole array (`xce kill 42_7`, `xce hold
/// 42_[1-5]`, `xce update 42 --throttle 4`): each task takes it as a job of its own would.
#[derive(Debug, Clone)]
pub struct ControlTasks {
    pub token: RequestToken,
    pub array: JobId,
    /// `None`: every task of the array.
    pub tasks: Option<crate::array::TaskSet>,
    pub op: crate::types::TaskOp,
}

impl Op for ControlTasks {
    type Output = ();
    const KIND: OpKind = OpKind::Write;
    const NAME: &'static str = "controlTasks";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<()>, capnp::Error>> {
        async move {
            let mut req = client.control_tasks_request();
            wire::write_token(req.get().init_token(), self.token);
            req.get().set_job_id(self.array);
            if let Some(tasks) = &self.tasks {
                req.get().set_tasks(tasks.to_string());
            }
            wire::write_task_op(req.get().init_op(), &self.op);
            let resp = req.send().promise.await?;
            header_only(resp.get()?.get_header()?)
        }
        .boxed_local()
    }
}

/// Task `index` of an array (`xce job 42_7`): its own record once it was split off, else
/// the array's, in which it still waits.
#[derive(Debug, Clone)]
pub struct GetTask {
    pub array: JobId,
    pub index: u32,
}

impl Op for GetTask {
    type Output = Job;
    const KIND: OpKind = OpKind::Read;
    const NAME: &'static str = "getTask";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<Job>, capnp::Error>> {
        async move {
            let mut req = client.get_task_request();
            req.get().set_job_id(self.array);
            req.get().set_index(self.index);
            let resp = req.send().promise.await?;
            let r = resp.get()?;
            reply(r.get_header()?, || wire::read_job(r.get_job()?))
        }
        .boxed_local()
    }
}

/// The bytes of a job's script (`xce job ID --script`).
#[derive(Debug, Clone)]
pub struct GetScript {
    pub id: JobId,
}

impl Op for GetScript {
    type Output = Vec<u8>;
    const KIND: OpKind = OpKind::Read;
    const NAME: &'static str = "jobScript";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<Vec<u8>>, capnp::Error>> {
        async move {
            let mut req = client.job_script_request();
            req.get().set_job_id(self.id);
            let resp = req.send().promise.await?;
            let r = resp.get()?;
            reply(r.get_header()?, || Ok(r.get_script()?.to_vec()))
        }
        .boxed_local()
    }
}
