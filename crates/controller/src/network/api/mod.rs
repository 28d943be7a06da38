//! The client-facing `Controller` interface: one thin dispatch that passes every method
//! through the session's [`authorize`] check, then to the handler in the file of its resource
//! (`jobs`, `queues`, `hosts`, `cluster`, `sessions` for joining, `users` for tokens, `backups`,
//! `workers` for what only a joined worker calls, `schedulers` for what only a scheduler calls), which live beside the client ops of the same names in xce-client.
//!
//! Runs on the service's `LocalSet` (capnp-rpc is `!Send`); handlers hand their work to the
//! `Send` [`Node`] and always answer a header: a domain error is never a capnp exception.

mod backups;
mod cluster;
mod events;
mod history;
mod hosts;
mod jobs;
mod queues;
mod schedulers;
mod sessions;
mod users;
mod workers;

use std::cell::RefCell;
use std::rc::Rc as StdRc;
use std::sync::Arc;

use capnp::capability::Rc;
use xce_client::backlog::Backlog;
use xce_client::wire::{self, ReplyHeader};
use xce_proto::xce_capnp::controller;

use super::push::Agents;
use super::session::{authorize, checks_token, Method, Session};
use crate::node::{outcome_reply, Node};
use crate::state::Command;

/// One connection's view of the controller: the node, the agents of joined workers, and this
/// connection's session.
pub struct ControllerService {
    pub node: Arc<Node>,
    pub agents: Agents,
    /// Set by `join`; read by every method's authorization and by the worker's reports.
    pub session: StdRc<RefCell<Session>>,
    /// When this connection last called a method (its idle timeout counts from here).
    pub last_call: StdRc<std::cell::Cell<tokio::time::Instant>>,
    /// What the connection owes its peer; every call counts in it while it is answered.
    pub backlog: StdRc<Backlog>,
    /// The snapshot being received from a peer, shared by every connection of this node.
    pub snapshots: StdRc<RefCell<crate::network::raft_input::Assembly>>,
}

/// How much a call of `method` counts towards its connection's calls in flight: a page of a
/// listing can be megabytes, so few of those are built at once.
fn weight(method: Method) -> usize {
    match method {
        Method::ListJobs | Method::ListHosts | Method::ListQueues | Method::ListHistory => 16,
        _ => 1,
    }
}

impl ControllerService {
    /// This connection's service with another session: what `actAs` hands the apiserver.
    /// It shares the connection's idle clock and calls in flight.
    fn acting_as(&self, session: Session) -> ControllerService {
        ControllerService {
            node: self.node.clone(),
            agents: self.agents.clone(),
            session: StdRc::new(RefCell::new(Session {
                acted: true,
                ..session
            })),
            last_call: self.last_call.clone(),
            backlog: self.backlog.clone(),
            snapshots: self.snapshots.clone(),
        }
    }

    /// Commits a write whose reply is just a header.
    async fn write_for_header(&self, cmd: Command) -> ReplyHeader {
        match self.node.write(cmd).await {
            Ok(outcome) => outcome_reply(outcome).0,
            Err(h) => h,
        }
    }
}

impl ControllerService {
    /// What a refused call is answered. A node that is not the ready primary answers a call
    /// only the primary serves as it would answer an allowed one (`redirect`, `noMaster`,
    /// ...): the caller's rejoin on the primary may well give its session the role.
    fn refusal(&self, method: Method, perm: ReplyHeader) -> ReplyHeader {
        if !matches!(method, Method::Raft | Method::Join) {
            if let Err(not_primary) = self.node.gate() {
                return not_primary;
            }
        }
        perm
    }
}

impl ControllerService {
    /// `Ok` when the call may go ahead: the session may call `method` and, if a token
    /// authenticated it, that token still holds (a revocation is felt on the next call).
    fn admitted(&self, method: Method) -> Result<(), ReplyHeader> {
        let session = self.session.borrow();
        authorize(method, &session)?;
        match &session.token {
            Some((id, hash)) if session.acted || checks_token(method) => {
                self.node.token_still_valid(id, hash).map_err(|why| {
                    ReplyHeader::status(
                        xce_proto::Status::Auth,
                        format!("{}: {why}; authenticate again", method.name()),
                    )
                })
            }
            _ => Ok(()),
        }
    }

    /// Who is calling, for an audit log line: the person, or the certificate.
    fn caller(&self) -> Option<String> {
        let session = self.session.borrow();
        let certified = session.certified.as_ref().map(|id| id.to_string());
        session.user.clone().or(certified)
    }

    /// A job as this connection may see it: a user sees another user's job without its
    /// environment, which may hold that user's secrets.
    fn as_seen(&self, mut job: xce_client::types::Job) -> xce_client::types::Job {
        if self.own_jobs_only().is_some_and(|me| me != job.spec.user) {
            job.spec.env.clear();
        }
        job
    }

    /// The user whose own jobs alone this connection may control (see [`Session`]).
    fn own_jobs_only(&self) -> Option<String> {
        self.session.borrow().own_jobs_only()
    }
}

/// The header of a result: `ok`, or the error header.
fn header_of<T>(r: &Result<T, ReplyHeader>) -> ReplyHeader {
    match r {
        Ok(_) => ReplyHeader::ok(),
        Err(h) => h.clone(),
    }
}

/// Each method: authorize against the session (answering `perm` in the reply's header when
/// refused), then the resource's handler.
macro_rules! methods {
    ($($name:ident($params:ident, $results:ident) => $method:ident: $handler:path;)+) => {
        impl controller::Server for ControllerService {
            $(
                async fn $name(
                    self: Rc<Self>,
                    params: controller::$params,
                    mut results: controller::$results,
                ) -> Result<(), capnp::Error> {
                    self.last_call.set(tokio::time::Instant::now());
                    let _in_flight = self.backlog.call_started(weight(Method::$method));
                    let acted = self.session.borrow().acted;
                    if acted {
                        // In `actAs`'s order: the ready primary (every revocation committed
                        // before it was elected applied) before the token is checked.
                        if let Err(not_primary) = self.node.admit().await {
                            wire::write_header(results.get().init_header(), &not_primary);
                            return Ok(());
                        }
                    }
                    let admitted = self.admitted(Method::$method);
                    if let Err(refused) = admitted {
                        let header = self.refusal(Method::$method, refused);
                        wire::write_header(results.get().init_header(), &header);
                        return Ok(());
                    }
                    $handler(&self, params, results).await
                }
            )+
        }
    };
}

methods! {
    submit(SubmitParams, SubmitResults) => Submit: jobs::submit;
    list_jobs(ListJobsParams, ListJobsResults) => ListJobs: jobs::list;
    job_info(JobInfoParams, JobInfoResults) => JobInfo: jobs::info;
    job_control(JobControlParams, JobControlResults) => JobControl: jobs::control;
    dispatch(DispatchParams, DispatchResults) => Dispatch: jobs::dispatch;
    list_queues(ListQueuesParams, ListQueuesResults) => ListQueues: queues::list;
    queue_control(QueueControlParams, QueueControlResults) => QueueControl: queues::control;
    list_hosts(ListHostsParams, ListHostsResults) => ListHosts: hosts::list;
    host_control(HostControlParams, HostControlResults) => HostControl: hosts::control;
    cluster_info(ClusterInfoParams, ClusterInfoResults) => ClusterInfo: cluster::info;
    raft(RaftParams, RaftResults) => Raft: cluster::raft;
    join(JoinParams, JoinResults) => Join: sessions::join;
    heartbeat(HeartbeatParams, HeartbeatResults) => Heartbeat: workers::heartbeat;
    job_started(JobStartedParams, JobStartedResults) => JobStarted: workers::started;
    job_finished(JobFinishedParams, JobFinishedResults) => JobFinished: workers::finished;
    subscribe(SubscribeParams, SubscribeResults) => Subscribe: events::subscribe;
    ping(PingParams, PingResults) => Ping: sessions::ping;
    acquire_scheduler(AcquireSchedulerParams, AcquireSchedulerResults) => AcquireScheduler: schedulers::acquire;
    dispatch_batch(DispatchBatchParams, DispatchBatchResults) => DispatchBatch: schedulers::dispatch_batch;
    set_pend_reasons(SetPendReasonsParams, SetPendReasonsResults) => SetPendReasons: schedulers::set_pend_reasons;
    authenticate(AuthenticateParams, AuthenticateResults) => Authenticate: users::authenticate;
    create_token(CreateTokenParams, CreateTokenResults) => CreateToken: users::create_token;
    list_tokens(ListTokensParams, ListTokensResults) => ListTokens: users::list_tokens;
    revoke_token(RevokeTokenParams, RevokeTokenResults) => RevokeToken: users::revoke_token;
    act_as(ActAsParams, ActAsResults) => ActAs: users::act_as;
    save_snapshot(SaveSnapshotParams, SaveSnapshotResults) => SaveSnapshot: backups::save;
    restore_snapshot(RestoreSnapshotParams, RestoreSnapshotResults) => RestoreSnapshot: backups::restore;
    add_controller(AddControllerParams, AddControllerResults) => AddController: cluster::add_controller;
    remove_controller(RemoveControllerParams, RemoveControllerResults) => RemoveController: cluster::remove_controller;
    update_job(UpdateJobParams, UpdateJobResults) => UpdateJob: jobs::update;
    signal_job(SignalJobParams, SignalJobResults) => SignalJob: jobs::signal;
    job_script(JobScriptParams, JobScriptResults) => JobScript: jobs::script;
    control_tasks(ControlTasksParams, ControlTasksResults) => ControlTasks: jobs::control_tasks;
    get_task(GetTaskParams, GetTaskResults) => GetTask: jobs::get_task;
    list_history(ListHistoryParams, ListHistoryResults) => ListHistory: history::list;
}
