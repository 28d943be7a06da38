//! The capnp service: the client-facing `Controller` interface and the inbound `Raft`
//! interface, served on one port. Runs on a `LocalSet` (capnp-rpc is `!Send`); every handler
//! hands its work to the `Send` [`Node`].

use std::sync::Arc;

use capnp::capability::Rc;
use capnp_rpc::{rpc_twoparty_capnp, twoparty, RpcSystem};
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use tokio::net::TcpListener;
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};
use tracing::{debug, info, warn};
use xce_client::types::{HeldJob, HostAttributes, JobOrder, RequestToken, Role};
use xce_client::wire::{self, ReplyHeader};
use xce_proto::xce_capnp::{agent, controller, raft};
use xce_proto::Status;

use super::codec;
use super::push::{self, Agents};
use crate::node::{outcome_reply, Node};
use crate::state::{validate_spec, Command, Outcome};
use crate::store::{NodeId, TypeConfig};

/// Most attempts a worker may list at join: far above any host's job slots.
const MAX_HELD: usize = 100_000;

/// Accepts connections until the future is dropped; each connection gets the `Controller`
/// bootstrap capability.
pub async fn serve(listener: TcpListener, node: Arc<Node>) {
    let agents = Agents::default();
    tokio::task::spawn_local(push::run(node.clone(), agents.clone()));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        if let Err(e) = stream.set_nodelay(true) {
            debug!(%peer, error = %e, "set TCP_NODELAY failed");
        }
        let (reader, writer) = stream.into_split();
        let network = twoparty::VatNetwork::new(
            reader.compat(),
            xce_client::connection::buffered(writer.compat_write()),
            rpc_twoparty_capnp::Side::Server,
            Default::default(),
        );
        let service: controller::Client = capnp_rpc::new_client(ControllerService {
            node: node.clone(),
            agents: agents.clone(),
        });
        let rpc = RpcSystem::new(Box::new(network), Some(service.client));
        tokio::task::spawn_local(async move {
            if let Err(e) = rpc.await {
                debug!(%peer, error = %e, "connection closed");
            }
        });
    }
}

struct ControllerService {
    node: Arc<Node>,
    agents: Agents,
}

fn header_of<T>(r: &Result<T, ReplyHeader>) -> ReplyHeader {
    match r {
        Ok(_) => ReplyHeader::ok(),
        Err(h) => h.clone(),
    }
}

impl ControllerService {
    /// Registers a worker's host, reconciles the attempts it holds, keeps its agent and sends
    /// it again what it was dispatched but never got. Returns the reply and the worker's orders.
    async fn join_worker(
        &self,
        token: RequestToken,
        host: HostAttributes,
        held: Vec<HeldJob>,
        agent: Option<agent::Client>,
    ) -> (ReplyHeader, Vec<JobOrder>) {
        let name = host.name.clone();
        // Before the write: a dispatch applied right after the join must find this agent, and
        // the liveness task must not judge the host by a heartbeat older than its join.
        // (A rejected join leaves an agent no dispatch can reach: no such host is placed.)
        if let Some(agent) = agent {
            self.agents.set(&name, agent);
        }
        self.node.saw_host(&name);
        let cmd = Command::RegisterHost { token, host, held };
        let outcome = match self.node.write(cmd).await {
            Ok(outcome) => outcome,
            Err(h) => return (h, Vec::new()),
        };
        // A re-sent join answers with its original resync.
        let applied = match &outcome {
            Outcome::Duplicate(original) => original.as_ref(),
            other => other,
        };
        let orders = match applied {
            Outcome::Resynced { orders } => orders.clone(),
            _ => Vec::new(),
        };
        let (header, _) = outcome_reply(outcome);
        if !matches!(header.status, Status::Ok | Status::DupJob) {
            return (header, Vec::new());
        }
        info!(host = %name, fenced = orders.len(), "worker joined");
        (header, orders)
    }

    /// Commits a write whose reply is just a header.
    async fn write_for_header(&self, cmd: Command) -> ReplyHeader {
        match self.node.write(cmd).await {
            Ok(outcome) => outcome_reply(outcome).0,
            Err(h) => h,
        }
    }
}

impl controller::Server for ControllerService {
    async fn submit(
        self: Rc<Self>,
        params: controller::SubmitParams,
        mut results: controller::SubmitResults,
    ) -> Result<(), capnp::Error> {
        let p = params.get()?;
        let token = wire::read_token(p.get_token()?);
        let spec = wire::read_spec(p.get_spec()?)?;
        // Only the ready primary judges requests: a standby redirects even a bad one.
        let checked = self.node.admit().await.and_then(|()| {
            validate_spec(&spec).map_err(|message| ReplyHeader::status(Status::Invalid, message))
        });
        let (header, id) = match checked {
            Err(h) => (h, None),
            Ok(()) => match self.node.write(Command::Submit { token, spec }).await {
                Ok(outcome) => outcome_reply(outcome),
                Err(h) => (h, None),
            },
        };
        let mut r = results.get();
        wire::write_header(r.reborrow().init_header(), &header);
        r.set_job_id(id.unwrap_or(0));
        Ok(())
    }

    async fn list_jobs(
        self: Rc<Self>,
        params: controller::ListJobsParams,
        mut results: controller::ListJobsResults,
    ) -> Result<(), capnp::Error> {
        let p = params.get()?;
        let filter = wire::read_filter(p.get_filter()?)?;
        let (after, limit) = (p.get_after(), p.get_limit() as usize);
        let page = self.node.read(|s| s.jobs_page(&filter, after, limit)).await;
        let mut r = results.get();
        wire::write_header(r.reborrow().init_header(), &header_of(&page));
        if let Ok(page) = page {
            r.set_next(page.next.unwrap_or(0));
            let mut list = r.init_jobs(page.jobs.len() as u32);
            for (i, job) in page.jobs.iter().enumerate() {
                wire::write_job(list.reborrow().get(i as u32), job);
            }
        }
        Ok(())
    }

    async fn job_info(
        self: Rc<Self>,
        params: controller::JobInfoParams,
        mut results: controller::JobInfoResults,
    ) -> Result<(), capnp::Error> {
        let id = params.get()?.get_job_id();
        let job = match self.node.read(|s| s.job(id).cloned()).await {
            Ok(Some(job)) => Ok(job),
            Ok(None) => Err(ReplyHeader::status(
                Status::NoEnt,
                format!("job {id}: no such job"),
            )),
            Err(h) => Err(h),
        };
        let mut r = results.get();
        wire::write_header(r.reborrow().init_header(), &header_of(&job));
        if let Ok(job) = job {
            wire::write_job(r.init_job(), &job);
        }
        Ok(())
    }

    async fn job_control(
        self: Rc<Self>,
        params: controller::JobControlParams,
        mut results: controller::JobControlResults,
    ) -> Result<(), capnp::Error> {
        let p = params.get()?;
        let cmd = Command::ControlJob {
            token: wire::read_token(p.get_token()?),
            id: p.get_job_id(),
            action: p.get_action()?.into(),
        };
        // The signal to the worker, if any, follows from the applied entry's events.
        let header = self.write_for_header(cmd).await;
        wire::write_header(results.get().init_header(), &header);
        Ok(())
    }

    async fn list_queues(
        self: Rc<Self>,
        _params: controller::ListQueuesParams,
        mut results: controller::ListQueuesResults,
    ) -> Result<(), capnp::Error> {
        let queues = self.node.read(|s| s.queues()).await;
        let mut r = results.get();
        wire::write_header(r.reborrow().init_header(), &header_of(&queues));
        if let Ok(queues) = queues {
            let mut list = r.init_queues(queues.len() as u32);
            for (i, q) in queues.iter().enumerate() {
                wire::write_queue(list.reborrow().get(i as u32), q);
            }
        }
        Ok(())
    }

    async fn queue_control(
        self: Rc<Self>,
        params: controller::QueueControlParams,
        mut results: controller::QueueControlResults,
    ) -> Result<(), capnp::Error> {
        let p = params.get()?;
        let cmd = Command::ControlQueue {
            token: wire::read_token(p.get_token()?),
            name: p.get_name()?.to_str()?.to_string(),
            action: p.get_action()?.into(),
        };
        let header = self.write_for_header(cmd).await;
        wire::write_header(results.get().init_header(), &header);
        Ok(())
    }

    async fn cluster_info(
        self: Rc<Self>,
        _params: controller::ClusterInfoParams,
        mut results: controller::ClusterInfoResults,
    ) -> Result<(), capnp::Error> {
        let info = self.node.cluster_info().await;
        let mut r = results.get();
        wire::write_header(r.reborrow().init_header(), &header_of(&info));
        if let Ok(info) = info {
            wire::write_cluster(r.init_cluster(), &info);
        }
        Ok(())
    }

    async fn list_hosts(
        self: Rc<Self>,
        _params: controller::ListHostsParams,
        mut results: controller::ListHostsResults,
    ) -> Result<(), capnp::Error> {
        let hosts = self.node.read(|s| s.hosts()).await;
        let mut r = results.get();
        wire::write_header(r.reborrow().init_header(), &header_of(&hosts));
        if let Ok(hosts) = hosts {
            let mut list = r.init_hosts(hosts.len() as u32);
            for (i, h) in hosts.iter().enumerate() {
                wire::write_host(list.reborrow().get(i as u32), h);
            }
        }
        Ok(())
    }

    async fn host_control(
        self: Rc<Self>,
        params: controller::HostControlParams,
        mut results: controller::HostControlResults,
    ) -> Result<(), capnp::Error> {
        let p = params.get()?;
        let cmd = Command::ControlHost {
            token: wire::read_token(p.get_token()?),
            name: p.get_name()?.to_str()?.to_string(),
            action: p.get_action()?.into(),
        };
        let header = self.write_for_header(cmd).await;
        wire::write_header(results.get().init_header(), &header);
        Ok(())
    }

    async fn join(
        self: Rc<Self>,
        params: controller::JoinParams,
        mut results: controller::JoinResults,
    ) -> Result<(), capnp::Error> {
        let p = params.get()?;
        let role = Role::from(p.get_role()?);
        let (header, orders) = match role {
            Role::Worker => {
                let held = p.get_held()?;
                if held.len() as usize > MAX_HELD {
                    let message = format!("held: {} attempts, at most {MAX_HELD}", held.len());
                    (ReplyHeader::status(Status::Invalid, message), Vec::new())
                } else {
                    let held = held.iter().map(wire::read_held).collect::<Result<_, _>>()?;
                    let token = wire::read_token(p.get_token()?);
                    let host = wire::read_attributes(p.get_host()?)?;
                    self.join_worker(token, host, held, p.get_agent().ok())
                        .await
                }
            }
            // Other roles hold no controller-side session yet: joining checks that this
            // node is the ready primary, so a daemon's rejoin lands where its calls will.
            Role::User
            | Role::Scheduler
            | Role::Apiserver
            | Role::Operator
            | Role::Admin
            | Role::Controller => match self.node.admit().await {
                Ok(()) => (ReplyHeader::ok(), Vec::new()),
                Err(h) => (h, Vec::new()),
            },
        };
        let mut r = results.get();
        wire::write_header(r.reborrow().init_header(), &header);
        r.set_lost_after_ms(self.node.host_lost_after().as_millis() as u64);
        let mut list = r.init_orders(orders.len() as u32);
        for (i, o) in orders.iter().enumerate() {
            wire::write_order(list.reborrow().get(i as u32), o);
        }
        Ok(())
    }

    async fn heartbeat(
        self: Rc<Self>,
        params: controller::HeartbeatParams,
        mut results: controller::HeartbeatResults,
    ) -> Result<(), capnp::Error> {
        let name = params.get()?.get_name()?.to_str()?.to_string();
        let header = self.node.heartbeat(&name);
        wire::write_header(results.get().init_header(), &header);
        Ok(())
    }

    async fn dispatch(
        self: Rc<Self>,
        params: controller::DispatchParams,
        mut results: controller::DispatchResults,
    ) -> Result<(), capnp::Error> {
        let p = params.get()?;
        let id = p.get_job_id();
        let host = p.get_host()?.to_str()?.to_string();
        let cmd = Command::Dispatch {
            token: wire::read_token(p.get_token()?),
            id,
            host: host.clone(),
        };
        // The dispatch is decided once committed; the start push follows from the applied
        // entry's events without holding up the reply (a slow worker must not slow its
        // scheduler).
        let header = self.write_for_header(cmd).await;
        wire::write_header(results.get().init_header(), &header);
        Ok(())
    }

    async fn job_started(
        self: Rc<Self>,
        params: controller::JobStartedParams,
        mut results: controller::JobStartedResults,
    ) -> Result<(), capnp::Error> {
        let p = params.get()?;
        let (id, attempt) = (p.get_job_id(), p.get_attempt());
        let host = p.get_host()?.to_str()?.to_string();
        let cmd = Command::JobStarted {
            token: wire::read_token(p.get_token()?),
            id,
            attempt,
            host: host.clone(),
        };
        let header = self.write_for_header(cmd).await;
        log_refused_report("start", id, attempt, &host, &header);
        wire::write_header(results.get().init_header(), &header);
        Ok(())
    }

    async fn job_finished(
        self: Rc<Self>,
        params: controller::JobFinishedParams,
        mut results: controller::JobFinishedResults,
    ) -> Result<(), capnp::Error> {
        let p = params.get()?;
        let (id, attempt) = (p.get_job_id(), p.get_attempt());
        let host = p.get_host()?.to_str()?.to_string();
        let cmd = Command::JobFinished {
            token: wire::read_token(p.get_token()?),
            id,
            attempt,
            host: host.clone(),
            end: wire::read_end(p.get_end()?)?,
        };
        let header = self.write_for_header(cmd).await;
        log_refused_report("end", id, attempt, &host, &header);
        wire::write_header(results.get().init_header(), &header);
        Ok(())
    }

    async fn raft(
        self: Rc<Self>,
        _params: controller::RaftParams,
        mut results: controller::RaftResults,
    ) -> Result<(), capnp::Error> {
        let raft: raft::Client = capnp_rpc::new_client(RaftService {
            node: self.node.clone(),
        });
        results.get().set_raft(raft);
        Ok(())
    }
}

/// A worker's report that changed nothing (unknown job, stale attempt) is worth an operator's
/// attention: it means a copy ran where it should not have.
fn log_refused_report(kind: &str, id: u64, attempt: u32, host: &str, header: &ReplyHeader) {
    if matches!(
        header.status,
        Status::Conflict | Status::NoEnt | Status::Invalid
    ) {
        warn!(job = id, attempt, %host, report = kind, message = %header.message, "worker report refused");
    }
}

/// The inbound side of the Raft transport: hands each message to the local openraft node.
struct RaftService {
    node: Arc<Node>,
}

impl raft::Server for RaftService {
    async fn append_entries(
        self: Rc<Self>,
        params: raft::AppendEntriesParams,
        mut results: raft::AppendEntriesResults,
    ) -> Result<(), capnp::Error> {
        let req: AppendEntriesRequest<TypeConfig> = codec::from_bin(params.get()?.get_request()?)?;
        let reply = self.node.raft.append_entries(req).await;
        if reply.as_ref().is_ok_and(|r| r.is_success()) {
            self.node.heard_from_leader();
        }
        results.get().set_reply(&codec::to_json(&reply)?);
        Ok(())
    }

    async fn vote(
        self: Rc<Self>,
        params: raft::VoteParams,
        mut results: raft::VoteResults,
    ) -> Result<(), capnp::Error> {
        let req: VoteRequest<NodeId> = codec::from_json(params.get()?.get_request()?)?;
        let candidate_log = req.last_log_id;
        let reply = self.node.raft.vote(req).await;
        if let Ok(resp) = &reply {
            if !resp.vote_granted && resp.last_log_id > candidate_log {
                self.node.candidate_lags_behind();
            }
        }
        results.get().set_reply(&codec::to_json(&reply)?);
        Ok(())
    }

    async fn install_snapshot(
        self: Rc<Self>,
        params: raft::InstallSnapshotParams,
        mut results: raft::InstallSnapshotResults,
    ) -> Result<(), capnp::Error> {
        let p = params.get()?;
        let mut req: InstallSnapshotRequest<TypeConfig> = codec::from_json(p.get_request()?)?;
        req.data = p.get_chunk()?.to_vec();
        let reply: Result<_, RaftError<NodeId, InstallSnapshotError>> =
            self.node.raft.install_snapshot(req).await;
        results.get().set_reply(&codec::to_json(&reply)?);
        Ok(())
    }
}
