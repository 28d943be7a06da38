//! Joining: the one method that changes a connection's session. A worker's join also
//! registers its host and agent and resyncs what it holds; a controller peer's join opens the
//! Raft interface to it; every other role's join checks that this node is the ready primary,
//! so a daemon's rejoin lands where its calls will.

use tracing::info;
use xce_client::types::{HeldJob, HostAttributes, JobOrder, RequestToken, Role};
use xce_client::wire::{self, ReplyHeader};
use xce_proto::xce_capnp::{agent, controller};
use xce_proto::Status;

use super::ControllerService;
use crate::node::outcome_reply;
use crate::state::{Command, Outcome};

/// Most attempts a worker may list at join: far above any host's job slots.
const MAX_HELD: usize = 100_000;

pub(super) async fn join(
    this: &ControllerService,
    params: controller::JoinParams,
    mut results: controller::JoinResults,
) -> Result<(), capnp::Error> {
    let p = params.get()?;
    let role = Role::from(p.get_role()?);
    let host_name = match role {
        Role::Worker => wire::read_attributes(p.get_host()?)?.name,
        _ => String::new(),
    };
    // Bound first: no borrow of the session may live across the awaits below.
    let allowed = this.session.borrow().may_join(role, &host_name);
    let (header, orders) = match allowed {
        Err(refused) => (refused, Vec::new()),
        Ok(()) => match role {
            Role::Worker => {
                this.backlog.set_peer();
                let held = p.get_held()?;
                if held.len() as usize > MAX_HELD {
                    let message = format!("held: {} attempts, at most {MAX_HELD}", held.len());
                    (ReplyHeader::status(Status::Invalid, message), Vec::new())
                } else {
                    let held = held.iter().map(wire::read_held).collect::<Result<_, _>>()?;
                    let token = wire::read_token(p.get_token()?);
                    let host = wire::read_attributes(p.get_host()?)?;
                    this.agents
                        .set_queues_starts(&host.name, p.get_queues_starts());
                    join_worker(this, token, host, held, p.get_agent().ok()).await
                }
            }
            // A standby must take Raft messages from its leader: no primary check here.
            Role::Controller => {
                this.set_session(role, None);
                this.backlog.set_peer();
                (ReplyHeader::ok(), Vec::new())
            }
            Role::User
            | Role::Scheduler
            | Role::Apiserver
            | Role::Operator
            | Role::Admin
            | Role::Login => match this.node.admit().await {
                Ok(()) => {
                    this.set_session(role, None);
                    (ReplyHeader::ok(), Vec::new())
                }
                Err(h) => (h, Vec::new()),
            },
        },
    };
    let mut r = results.get();
    wire::write_header(r.reborrow().init_header(), &header);
    r.set_lost_after_ms(this.node.host_lost_after().as_millis() as u64);
    let mut list = r.init_orders(orders.len() as u32);
    for (i, o) in orders.iter().enumerate() {
        wire::write_order(list.reborrow().get(i as u32), o);
    }
    Ok(())
}

impl ControllerService {
    /// The role (and worker host) a join established; a certificate, if any, stays.
    fn set_session(&self, role: Role, host: Option<String>) {
        let mut session = self.session.borrow_mut();
        session.role = role;
        session.host = host;
        session.joined = true;
    }
}

/// Registers a worker's host, reconciles the attempts it holds and keeps its agent; the
/// session speaks for that host once the join is applied. Returns the reply and the worker's
/// orders.
async fn join_worker(
    this: &ControllerService,
    token: RequestToken,
    host: HostAttributes,
    held: Vec<HeldJob>,
    agent: Option<agent::Client>,
) -> (ReplyHeader, Vec<JobOrder>) {
    let name = host.name.clone();
    // Before the write: a start pushed for this join's resync must find this agent, and the
    // liveness task must not judge the host by a heartbeat older than its join. (A rejected
    // join leaves an agent no push can reach: no job is placed on such a host.)
    if let Some(agent) = agent {
        this.agents.set(&name, agent);
    }
    this.node.saw_host(&name);
    let cmd = Command::RegisterHost { token, host, held };
    let outcome = match this.node.write(cmd).await {
        Ok(outcome) => outcome,
        Err(h) => return (h, Vec::new()),
    };
    // A re-sent join answers with its original resync.
    let orders = match outcome.original() {
        Outcome::Resynced { orders } => orders.clone(),
        _ => Vec::new(),
    };
    let (header, _) = outcome_reply(outcome);
    if !matches!(header.status, Status::Ok | Status::DupJob) {
        return (header, Vec::new());
    }
    this.set_session(Role::Worker, Some(name.clone()));
    info!(host = %name, fenced = orders.len(), "worker joined");
    // What no resync carries: the new time limits of its running jobs, which it may have
    // missed.
    this.agents.resend_limits(&name);
    (header, orders)
}

/// Answers at once: a new connection's liveness round trip.
pub(super) async fn ping(
    _this: &ControllerService,
    _params: controller::PingParams,
    mut results: controller::PingResults,
) -> Result<(), capnp::Error> {
    wire::write_header(results.get().init_header(), &ReplyHeader::ok());
    Ok(())
}
