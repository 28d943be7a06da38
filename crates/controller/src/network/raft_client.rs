//! Outbound Raft RPCs to the other controllers, over the same capnp Send bridge the client
//! library uses (openraft's network futures must be `Send`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, FutureExt, Shared};

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::de::DeserializeOwned;
use xce_client::connection::LocalFuture;
use xce_client::ops::{Join, Op};
use xce_client::tls::Tls;
use xce_client::types::{RequestToken, Role};
use xce_client::{ConnectOptions, Connection, TransportError};
use xce_proto::xce_capnp::controller;

use super::codec;
use crate::node::election::{PreVote, PreVoteReply, StepDown, StepDownReply};
use crate::node::Lease;
use crate::store::{NodeId, TypeConfig};

/// How each peer answered its latest Raft RPC. The primary reports a peer as unreachable when
/// that RPC failed, or when it has been silent for longer than [`Reachability::STALE`].
#[derive(Default)]
pub struct Reachability {
    /// Per peer: when the latest RPC ended, and whether it succeeded.
    latest: Mutex<HashMap<NodeId, (Instant, bool)>>,
}

impl Reachability {
    /// Heartbeats go out every few tens of milliseconds; seconds of silence is a real outage.
    pub const STALE: Duration = Duration::from_secs(2);

    fn mark(&self, id: NodeId, ok: bool) {
        self.lock().insert(id, (Instant::now(), ok));
    }

    /// Whether `id` answered its latest RPC, recently.
    pub fn is_reachable(&self, id: NodeId) -> bool {
        self.lock()
            .get(&id)
            .is_some_and(|(t, ok)| *ok && t.elapsed() < Self::STALE)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<NodeId, (Instant, bool)>> {
        self.latest.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Creates one [`PeerClient`] per replication target.
#[derive(Clone)]
pub struct Network {
    pub reach: Arc<Reachability>,
    /// Peers reached at another address than the membership's (`--raft-addrs`).
    pub routes: Arc<BTreeMap<NodeId, String>>,
    /// How long a connect (TCP, first round trip and join) and a call may take in the
    /// background, whatever openraft's own per-RPC timeout: see [`PeerClient`].
    pub budget: Duration,
    /// This node's primary lease: a primary whose lease ran out stops replicating.
    pub lease: Arc<Lease>,
    /// TLS to the other controllers, when the cluster has it.
    pub tls: Option<Arc<Tls>>,
    /// One connection per peer address, shared by every [`PeerClient`] made for it.
    pub links: Links,
}

/// The connections to the peers, by address. openraft makes a new client for every
/// leadership check (each linearizable read round) besides the one of each replication
/// stream; a connection of its own each time cost a thread, a TCP (and TLS) handshake and a
/// join per peer per round, hundreds a second under reads.
pub type Links = Arc<std::sync::Mutex<BTreeMap<String, Arc<std::sync::Mutex<Link>>>>>;

/// One peer's connection, or the connect under way.
#[derive(Default)]
pub struct Link {
    conn: Option<Connection>,
    connecting: Option<Connecting>,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerClient {
        // A joined controller's entry is `name@host:port` (`node::members`).
        let addr = self.routes.get(&target).cloned().unwrap_or_else(|| {
            let dial = node.addr.rsplit_once('@').map_or(&*node.addr, |(_, a)| a);
            dial.to_string()
        });
        let link = self
            .links
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(addr.clone())
            .or_default()
            .clone();
        PeerClient {
            target,
            addr,
            link,
            budget: self.budget,
            reach: self.reach.clone(),
            lease: self.lease.clone(),
            tls: self.tls.clone(),
        }
    }
}

/// Largest append-entries message sent with more than one entry: well below capnp's 64 MiB
/// message limit on the follower.
pub(crate) const MAX_APPEND_BYTES: usize = 32 << 20;

/// A connect running in the background; every RPC waiting for it shares its outcome.
type Connecting = Shared<BoxFuture<'static, Result<Connection, String>>>;

/// The connection to one peer.
///
/// openraft gives each append-entries one heartbeat interval (50 ms) and drops the future
/// then. A slow link (a 150 ms round trip) must not turn that into a lost member, so neither
/// the connection nor the call dies with the future: connects and calls run as tasks of their
/// own with [`Network::budget`], the connection is kept across timeouts (only a closed one is
/// replaced), and a request that openraft gave up on is still delivered: the peer hears the
/// leader (and does not campaign), and its late answer still marks it reachable.
pub struct PeerClient {
    target: NodeId,
    addr: String,
    link: Arc<std::sync::Mutex<Link>>,
    budget: Duration,
    reach: Arc<Reachability>,
    lease: Arc<Lease>,
    tls: Option<Arc<Tls>>,
}

type RpcResult<T, E> = Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>;

impl PeerClient {
    fn link(&self) -> std::sync::MutexGuard<'_, Link> {
        self.link
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records how `connect` ended, unless the link has moved on since (another caller saw
    /// it end first and started a newer connect, or stored a connection).
    fn settle(&self, connect: &Connecting, conn: Option<Connection>) {
        let mut link = self.link();
        if link.connecting.as_ref().is_some_and(|c| c.ptr_eq(connect)) {
            link.connecting = None;
            if conn.is_some() {
                link.conn = conn;
            }
        }
    }

    /// The open connection, or the outcome of the background connect within `wait`.
    async fn connection<E: std::error::Error>(
        &mut self,
        wait: Duration,
    ) -> Result<Connection, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>> {
        let connecting = {
            let mut link = self.link();
            if let Some(c) = link.conn.as_ref().filter(|c| !c.is_closed()) {
                return Ok(c.clone());
            }
            link.conn = None;
            link.connecting
                .get_or_insert_with(|| {
                    connect_in_background(self.addr.clone(), self.budget, self.tls.clone())
                })
                .clone()
        };
        let unreachable = |e: String| {
            RPCError::Unreachable(Unreachable::new(&TransportError::Connect {
                addr: self.addr.clone(),
                reason: e,
            }))
        };
        match tokio::time::timeout(wait, connecting.clone()).await {
            Err(_) => Err(unreachable(format!(
                "still connecting (budget {:?})",
                self.budget
            ))),
            Ok(Ok(c)) if c.is_closed() => {
                self.settle(&connecting, None);
                Err(unreachable("closed as soon as it opened".into()))
            }
            Ok(Ok(c)) => {
                self.settle(&connecting, Some(c.clone()));
                Ok(c)
            }
            Ok(Err(e)) => {
                self.settle(&connecting, None);
                self.reach.mark(self.target, false);
                Err(unreachable(e))
            }
        }
    }

    /// Sends one request and decodes the peer's `Result<T, RaftError<E>>` reply, waiting at
    /// most `wait` for it (the call itself goes on for the whole budget).
    async fn rpc<T, E, F>(&mut self, wait: Duration, send: F) -> RpcResult<T, E>
    where
        T: DeserializeOwned + Send + 'static,
        E: std::error::Error + DeserializeOwned + Send + 'static,
        F: FnOnce(controller::Client) -> LocalFuture<Result<Vec<u8>, capnp::Error>>
            + Send
            + 'static,
    {
        let started = tokio::time::Instant::now();
        let conn = self.connection(wait).await?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (reach, target, budget) = (self.reach.clone(), self.target, self.budget);
        tokio::spawn(async move {
            let result = conn.call(budget, send).await;
            reach.mark(target, result.is_ok());
            let _ = tx.send(result);
        });
        let left = wait.saturating_sub(started.elapsed());
        let bytes = match tokio::time::timeout(left, rx).await {
            Err(_) => {
                return Err(RPCError::Network(NetworkError::new(
                    &TransportError::Timeout {
                        addr: self.addr.clone(),
                        after: wait,
                    },
                )))
            }
            Ok(Err(_)) => {
                return Err(RPCError::Unreachable(Unreachable::new(
                    &TransportError::Disconnected {
                        addr: self.addr.clone(),
                        reason: "call task ended".into(),
                    },
                )))
            }
            Ok(Ok(Err(e))) => {
                return Err(match e {
                    TransportError::Disconnected { .. } | TransportError::Connect { .. } => {
                        RPCError::Unreachable(Unreachable::new(&e))
                    }
                    _ => RPCError::Network(NetworkError::new(&e)),
                })
            }
            Ok(Ok(Ok(bytes))) => bytes,
        };
        let reply: Result<T, RaftError<NodeId, E>> =
            codec::from_json(&bytes).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        reply.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl PeerClient {
    /// A reply's vote must be sane before openraft saves it (see `raft_input::reply_vote`);
    /// an insane one counts as a failed call.
    fn checked_reply<E: std::error::Error>(
        &self,
        vote: &openraft::Vote<NodeId>,
    ) -> Result<(), RPCError<NodeId, BasicNode, RaftError<NodeId, E>>> {
        super::raft_input::reply_vote(vote).map_err(|reason| {
            tracing::warn!(peer = %self.addr, %reason, "refused a Raft reply");
            RPCError::Network(NetworkError::new(&TransportError::Rpc {
                addr: self.addr.clone(),
                reason,
            }))
        })
    }

    /// Asks the peer whether it would vote for this node (see `node::election`), waiting at
    /// most `wait`.
    pub async fn pre_vote(
        &mut self,
        req: &PreVote,
        wait: Duration,
    ) -> Result<PreVoteReply, String> {
        let request = codec::to_json(req).map_err(|e| e.to_string())?;
        let reply: RpcResult<PreVoteReply, openraft::error::Infallible> = self
            .rpc(wait, move |client| {
                Box::pin(async move {
                    let raft = client.raft_request().send().pipeline.get_raft();
                    let mut req = raft.pre_vote_request();
                    req.get().set_request(&request);
                    let resp = req.send().promise.await?;
                    Ok(resp.get()?.get_reply()?.to_vec())
                })
            })
            .await;
        reply.map_err(|e| e.to_string())
    }
}

impl PeerClient {
    /// Tells the peer this primary stepped down (see `node::handover`), waiting at most
    /// `wait` for its answer.
    pub async fn step_down(
        &mut self,
        req: &StepDown,
        wait: Duration,
    ) -> Result<StepDownReply, String> {
        let request = codec::to_json(req).map_err(|e| e.to_string())?;
        let reply: RpcResult<StepDownReply, openraft::error::Infallible> = self
            .rpc(wait, move |client| {
                Box::pin(async move {
                    let raft = client.raft_request().send().pipeline.get_raft();
                    let mut req = raft.step_down_request();
                    req.get().set_request(&request);
                    let resp = req.send().promise.await?;
                    Ok(resp.get()?.get_reply()?.to_vec())
                })
            })
            .await;
        reply.map_err(|e| e.to_string())
    }
}

/// What a peer's build runs (see `node::versions`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BuildInfo {
    /// The newest cluster version (store format) it reads and writes.
    pub version: u32,
    pub build: String,
}

/// What a build from before `buildInfo` existed runs: it answers the call `unimplemented`.
const UNNUMBERED_BUILD_VERSION: u32 = 6;

impl PeerClient {
    /// Asks the peer which cluster version its build runs, waiting at most `wait`. A build
    /// from before the question existed answers `unimplemented`: it runs version 6.
    pub async fn build_info(&mut self, wait: Duration) -> Result<BuildInfo, String> {
        let reply: RpcResult<BuildInfo, openraft::error::Infallible> = self
            .rpc(wait, move |client| {
                Box::pin(async move {
                    let raft = client.raft_request().send().pipeline.get_raft();
                    let info = match raft.build_info_request().send().promise.await {
                        Ok(resp) => {
                            let r = resp.get()?;
                            BuildInfo {
                                version: r.get_version(),
                                build: r.get_build()?.to_str()?.to_string(),
                            }
                        }
                        Err(e) if e.kind == capnp::ErrorKind::Unimplemented => BuildInfo {
                            version: UNNUMBERED_BUILD_VERSION,
                            build: "a build from before cluster versions".into(),
                        },
                        Err(e) => return Err(e),
                    };
                    let reply: Result<BuildInfo, RaftError<NodeId, openraft::error::Infallible>> =
                        Ok(info);
                    codec::to_json(&reply)
                })
            })
            .await;
        reply.map_err(|e| e.to_string())
    }
}

impl PeerClient {
    /// Retired jobs the peer's history store holds from sequence number `from` on (see
    /// `node::history_sync`), waiting at most `wait`.
    pub async fn history_range(
        &mut self,
        from: u64,
        limit: u32,
        wait: Duration,
    ) -> Result<Vec<crate::history::RawRecord>, String> {
        let reply: RpcResult<Vec<crate::history::RawRecord>, openraft::error::Infallible> = self
            .rpc(wait, move |client| {
                Box::pin(async move {
                    let raft = client.raft_request().send().pipeline.get_raft();
                    let mut req = raft.history_range_request();
                    req.get().set_from_seq(from);
                    req.get().set_limit(limit);
                    let resp = req.send().promise.await?;
                    let mut records = Vec::new();
                    for r in resp.get()?.get_records()?.iter() {
                        let script = r.get_script()?;
                        records.push(crate::history::RawRecord {
                            seq: r.get_seq(),
                            id: r.get_id(),
                            job: r.get_job()?.to_vec(),
                            script: (!script.is_empty()).then(|| script.to_vec()),
                        });
                    }
                    let reply: Result<_, RaftError<NodeId, openraft::error::Infallible>> =
                        Ok(records);
                    codec::to_json(&reply)
                })
            })
            .await;
        reply.map_err(|e| e.to_string())
    }
}

/// Connects, pings and joins as a controller within `budget`, as a task of its own.
fn connect_in_background(addr: String, budget: Duration, tls: Option<Arc<Tls>>) -> Connecting {
    let task = tokio::spawn(async move {
        let opened = tokio::time::timeout(budget, async {
            let opts = ConnectOptions {
                connect_timeout: budget,
                tls,
            };
            let conn = Connection::connect(&addr, opts).await?;
            join_as_controller(&conn, budget).await?;
            Ok::<_, TransportError>(conn)
        })
        .await;
        match opened {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("connect to {addr}: not done within {budget:?}")),
        }
    });
    async move {
        task.await
            .unwrap_or_else(|e| Err(format!("connect task ended: {e}")))
    }
    .boxed()
    .shared()
}

/// Joins a new connection as a controller peer: the session table opens the Raft interface
/// to controller sessions only.
async fn join_as_controller(conn: &Connection, timeout: Duration) -> Result<(), TransportError> {
    let join = Join {
        token: RequestToken::random(),
        role: Role::Controller,
        host: Default::default(),
        agent: None,
        held: Vec::new(),
        queues_starts: false,
    };
    let reply = conn.call(timeout, move |client| join.send(client)).await?;
    if reply.header.status == xce_proto::Status::Ok {
        return Ok(());
    }
    Err(TransportError::Rpc {
        addr: conn.addr().to_string(),
        reason: format!(
            "join as a controller: {}: {}",
            reply.header.status, reply.header.message
        ),
    })
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>, openraft::error::Infallible> {
        // A primary no majority has acknowledged within its lease steps down in effect: it
        // goes silent, so that the standbys elect a primary that can commit, and follows
        // that one once it hears from it. openraft has no step-down of its own, and a
        // primary whose every link is slower than its 50 ms append timeout would otherwise
        // keep the standbys from electing while committing nothing. Silent for a while only
        // (`Lease::stepped_down`): if no one else can be elected (the only voter it reaches
        // was behind it and needs it to catch up), staying silent would leave no primary.
        if self.lease.stepped_down() {
            return Err(RPCError::Unreachable(Unreachable::new(
                &TransportError::Rpc {
                    addr: self.addr.clone(),
                    reason: format!(
                        "not replicating: no majority acknowledged this primary for {} ms",
                        self.lease.silence().as_millis()
                    ),
                },
            )));
        }
        let entries = rpc.entries.len() as u64;
        let request = codec::to_bin(&rpc).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        // Never build a message the follower's capnp reader would refuse: openraft sends
        // fewer entries when told the payload is too large (a log written before requests
        // were bounded may hold entries of tens of MiB).
        if request.len() > MAX_APPEND_BYTES && entries > 1 {
            return Err(RPCError::PayloadTooLarge(
                openraft::error::PayloadTooLarge::new_entries_hint(entries / 2),
            ));
        }
        self.rpc(option.hard_ttl(), move |client| {
            Box::pin(async move {
                let raft = client.raft_request().send().pipeline.get_raft();
                let mut req = raft.append_entries_request();
                req.get().set_request(&request);
                let resp = req.send().promise.await?;
                Ok(resp.get()?.get_reply()?.to_vec())
            })
        })
        .await
        .and_then(|r| {
            if let AppendEntriesResponse::HigherVote(v) = &r {
                self.checked_reply(v)?;
            }
            Ok(r)
        })
    }

    async fn install_snapshot(
        &mut self,
        mut rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        let chunk = std::mem::take(&mut rpc.data);
        let request = codec::to_json(&rpc).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        self.rpc(option.hard_ttl(), move |client| {
            Box::pin(async move {
                let raft = client.raft_request().send().pipeline.get_raft();
                let mut req = raft.install_snapshot_request();
                req.get().set_request(&request);
                req.get().set_chunk(&chunk);
                let resp = req.send().promise.await?;
                Ok(resp.get()?.get_reply()?.to_vec())
            })
        })
        .await
        .and_then(|r: InstallSnapshotResponse<NodeId>| self.checked_reply(&r.vote).map(|()| r))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>, openraft::error::Infallible> {
        let request = codec::to_json(&rpc).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        self.rpc(option.hard_ttl(), move |client| {
            Box::pin(async move {
                let raft = client.raft_request().send().pipeline.get_raft();
                let mut req = raft.vote_request();
                req.get().set_request(&request);
                let resp = req.send().promise.await?;
                Ok(resp.get()?.get_reply()?.to_vec())
            })
        })
        .await
        .and_then(|r: VoteResponse<NodeId>| self.checked_reply(&r.vote).map(|()| r))
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use capnp::capability::Rc;
    use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Vote};
    use xce_client::types::QueueAction;
    use xce_proto::xce_capnp::raft;

    use super::*;
    use crate::state::Command;
    use crate::store::Batch;

    /// An entry of about `bytes` (what a log written before requests were bounded may hold).
    fn entry(index: u64, bytes: usize) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(Batch {
                at_ms: 0,
                format: crate::store::STORE_FORMAT,
                commands: vec![Command::ControlQueue {
                    token: RequestToken::random(),
                    name: "q".repeat(bytes),
                    action: QueueAction::Close,
                }],
            }),
        }
    }

    fn append(entries: Vec<Entry<TypeConfig>>) -> AppendEntriesRequest<TypeConfig> {
        AppendEntriesRequest {
            vote: Vote::new_committed(1, 1),
            prev_log_id: None,
            entries,
            leader_commit: None,
        }
    }

    /// A follower that takes every join and records the entries of each append it decodes.
    #[derive(Clone, Default)]
    struct Follower {
        appends: std::rc::Rc<RefCell<Vec<usize>>>,
    }

    impl controller::Server for Follower {
        async fn join(
            self: Rc<Self>,
            _: controller::JoinParams,
            mut results: controller::JoinResults,
        ) -> Result<(), capnp::Error> {
            results
                .get()
                .init_header()
                .set_status(xce_proto::Status::Ok.into());
            Ok(())
        }

        async fn raft(
            self: Rc<Self>,
            _: controller::RaftParams,
            mut results: controller::RaftResults,
        ) -> Result<(), capnp::Error> {
            let raft: raft::Client = capnp_rpc::new_client((*self).clone());
            results.get().set_raft(raft);
            results
                .get()
                .init_header()
                .set_status(xce_proto::Status::Ok.into());
            Ok(())
        }
    }

    impl raft::Server for Follower {
        async fn append_entries(
            self: Rc<Self>,
            params: raft::AppendEntriesParams,
            mut results: raft::AppendEntriesResults,
        ) -> Result<(), capnp::Error> {
            let req: AppendEntriesRequest<TypeConfig> =
                codec::from_bin(params.get()?.get_request()?)?;
            self.appends.borrow_mut().push(req.entries.len());
            let reply: Result<_, RaftError<NodeId>> = Ok(AppendEntriesResponse::<NodeId>::Success);
            results.get().set_reply(&codec::to_json(&reply)?);
            Ok(())
        }
    }

    /// Serves `follower` on `listener` through a server's own network (its inbound limit).
    async fn serve(listener: tokio::net::TcpListener, follower: Follower) {
        use capnp_rpc::RpcSystem;
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let Ok((stream, _)) = xce_client::socket::accept(tcp, None).await else {
                continue;
            };
            let (network, _backlog) = xce_client::socket::server_network(stream);
            let client: controller::Client = capnp_rpc::new_client(follower.clone());
            tokio::task::spawn_local(RpcSystem::new(Box::new(network), Some(client.client)));
        }
    }

    /// A log holding entries of tens of MiB still replicates: more than one of them is never
    /// put in one message (openraft is told to send fewer), and one alone reaches the
    /// follower, whose reader takes it.
    #[tokio::test]
    async fn large_entries_go_one_message_at_a_time_and_the_follower_takes_each() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let addr = listener.local_addr().unwrap().to_string();
                let follower = Follower::default();
                tokio::task::spawn_local(serve(listener, follower.clone()));
                let mut network = Network {
                    reach: Arc::default(),
                    routes: Arc::new(BTreeMap::from([(2, addr.clone())])),
                    budget: Duration::from_secs(10),
                    lease: Arc::new(Lease::new(Duration::from_secs(1))),
                    tls: None,
                    links: Links::default(),
                };
                let mut peer = network.new_client(2, &BasicNode { addr }).await;
                let option = || RPCOption::new(Duration::from_secs(10));

                let two = append(vec![entry(1, 30 << 20), entry(2, 30 << 20)]);
                match peer.append_entries(two, option()).await {
                    Err(RPCError::PayloadTooLarge(hint)) => assert_eq!(hint.entries_hint(), 1),
                    other => panic!("two 30 MiB entries (over the follower's limit together) in one message: {other:?}"),
                }
                assert!(follower.appends.borrow().is_empty());

                for index in [1, 2] {
                    let one = append(vec![entry(index, 40 << 20)]);
                    let sent = peer.append_entries(one, option()).await;
                    assert!(
                        matches!(sent, Ok(AppendEntriesResponse::Success)),
                        "a 40 MiB entry alone: {sent:?}"
                    );
                }
                assert_eq!(*follower.appends.borrow(), vec![1, 1]);
            })
            .await;
    }

    /// Which kind of request `cmd` is. No wildcard: a new kind does not compile here until
    /// [`largest_of_every_kind`] has it too.
    fn kind(cmd: &Command) -> &'static str {
        match cmd {
            Command::Submit { .. } => "submit",
            Command::ControlJob { .. } => "control job",
            Command::ControlQueue { .. } => "control queue",
            Command::RegisterHost { .. } => "register host",
            Command::ControlHost { .. } => "control host",
            Command::SetHostAvailable { .. } => "host available",
            Command::Dispatch { .. } => "dispatch",
            Command::JobStarted { .. } => "job started",
            Command::JobFinished { .. } => "job finished",
            Command::HostLost { .. } => "host lost",
            Command::Barrier { .. } => "barrier",
            Command::AcquireScheduler { .. } => "acquire scheduler",
            Command::DispatchBatch { .. } => "dispatch batch",
            Command::SetPendReasons { .. } => "pend reasons",
            Command::CreateToken { .. } => "create token",
            Command::RevokeToken { .. } => "revoke token",
            Command::Restore { .. } => "restore",
            Command::RestoreJobs { .. } => "restore jobs",
            Command::RaiseVersion { .. } => "raise version",
            Command::UpdateJob { .. } => "update job",
            Command::SignalJob { .. } => "signal job",
            Command::ControlTasks { .. } => "control tasks",
            Command::RetireJobs { .. } => "retire jobs",
        }
    }
    const KINDS: usize = 23;

    /// The largest request of every kind that passes validation (a restore part at the
    /// byte limit `decode_part` enforces).
    fn largest_of_every_kind() -> Vec<Command> {
        use crate::state::{validate, QueueDef};
        use crate::store::backup;
        use xce_client::types::{
            HeldJob, HeldPhase, HostAction, HostAttributes, JobAction, JobEnd, JobSpec, Limits,
            PendCode, PendReason, Placement, Resources, Role,
        };
        let t = RequestToken::random;
        let name = || "h".repeat(63);
        let long = || "n".repeat(validate::MAX_NAME_BYTES);
        let mut most = Resources::new(u32::MAX, u64::MAX);
        for i in 0..validate::MAX_GRES {
            most.set_gres(
                &format!("{i}{}", "g".repeat(validate::MAX_NAME_BYTES - 3)),
                u64::MAX,
            );
        }
        let spec = JobSpec {
            name: long(),
            user: "u".repeat(64),
            queue: long(),
            cwd: format!("/{}", "d".repeat(validate::MAX_PATH_BYTES - 1)),
            command: vec!["a".repeat(validate::MAX_LIST_BYTES - validate::LIST_ELEMENT_BYTES)],
            env: vec![(
                "K".into(),
                "v".repeat(validate::MAX_LIST_BYTES - 1 - 2 * validate::LIST_ELEMENT_BYTES),
            )],
            resources: most.clone(),
            priority: i32::MIN,
            limits: Limits {
                time_limit_s: Some(u32::MAX),
            },
            script: Some(xce_client::types::ScriptId([0xff; 32])),
            stdout: Some("o".repeat(validate::MAX_PATH_BYTES)),
            stderr: Some("e".repeat(validate::MAX_PATH_BYTES)),
            open_mode: Some(xce_client::types::OpenMode::Truncate),
            hold: true,
            begin_time_ms: Some(u64::MAX),
            warn_signal: Some(xce_client::types::Warning {
                signal: xce_client::signals::MAX_SIGNAL,
                before_s: xce_client::signals::MAX_WARNING_S,
                leader_only: true,
            }),
            no_requeue: true,
            dependency: Some(xce_client::dependency::Expr::All(
                (0..validate::MAX_DEPENDENCY_TERMS)
                    .map(|_| {
                        xce_client::dependency::Expr::Term(xce_client::dependency::Term::On(
                            xce_client::dependency::Kind::AfterNotOk,
                            xce_client::array::JobRef {
                                id: u64::MAX,
                                tasks: None,
                            },
                        ))
                    })
                    .collect(),
            )),
            kill_on_invalid_dep: Some(true),
            // An array spec as long as one may be: single indices, a step apart.
            array: Some({
                let mut tasks = xce_client::array::TaskSet::new();
                let mut i = 0;
                while tasks.to_string().len() + 12 < validate::MAX_PATH_BYTES {
                    tasks.insert(i);
                    i += 2;
                }
                xce_client::array::ArraySpec {
                    tasks,
                    throttle: Some(u32::MAX),
                }
            }),
            account: "a".repeat(64),
        };
        // The script and the environment share one budget.
        let body = validate::MAX_SCRIPT_BYTES - xce_client::export::size(&spec.env);
        let script: std::sync::Arc<[u8]> = vec![b's'; body].into();
        // A restore part at the limit: jobs as large as they come, as many as fit.
        let mut state = crate::state::State::default();
        // Each waits for job 1 (a dependency names only jobs that exist), as often as it may.
        let first = JobSpec {
            command: vec!["true".into()],
            ..JobSpec::default()
        };
        crate::state::testing::submit(&mut state, 1 << 91, first);
        let stored = JobSpec {
            queue: String::new(),
            script: None,
            dependency: spec.dependency.clone().map(|d| {
                d.to_string()
                    .replace(&u64::MAX.to_string(), "1")
                    .parse()
                    .unwrap()
            }),
            ..spec.clone()
        };
        for i in 0..400 {
            let outcome = crate::state::testing::submit(&mut state, 1 << 90 | i, stored.clone());
            assert!(
                matches!(outcome, crate::state::Outcome::Submitted(_)),
                "{outcome:?}"
            );
        }
        let mut part = None;
        state
            .backup_parts(backup::MAX_PART_BYTES - (256 << 10), |p| {
                if part.is_none() && matches!(p, crate::state::BackupPart::Jobs { .. }) {
                    part = Some(postcard::to_stdvec(&p)?);
                }
                Ok::<_, postcard::Error>(())
            })
            .unwrap();
        let part = part.unwrap();
        assert!(
            part.len() > backup::MAX_PART_BYTES - (512 << 10)
                && part.len() <= backup::MAX_PART_BYTES,
            "a part of {} bytes",
            part.len()
        );
        let crate::state::BackupPart::Jobs {
            jobs,
            intents,
            scripts,
        } = backup::decode_part(crate::store::STORE_FORMAT, &part).unwrap()
        else {
            unreachable!()
        };
        let mut base = crate::state::State::default().into_record();
        base.queues = Vec::new();
        vec![
            Command::Submit {
                token: t(),
                spec,
                script: Some(script),
            },
            Command::ControlJob {
                token: t(),
                id: u64::MAX,
                action: JobAction::Kill,
                by: Some("u".repeat(64)),
                actor: Some("u".repeat(validate::MAX_NAME_BYTES)),
            },
            Command::ControlQueue {
                token: t(),
                name: long(),
                action: QueueAction::Close,
            },
            Command::RegisterHost {
                token: t(),
                host: HostAttributes {
                    name: name(),
                    resources: most.clone(),
                    spool_dir: format!("/{}", "s".repeat(validate::MAX_PATH_BYTES - 1)),
                    ..HostAttributes::default()
                },
                held: (0..validate::MAX_HELD as u64)
                    .map(|i| HeldJob {
                        id: u64::MAX - i,
                        attempt: u32::MAX,
                        phase: HeldPhase::Running,
                    })
                    .collect(),
            },
            Command::ControlHost {
                token: t(),
                name: long(),
                action: HostAction::Close,
            },
            Command::SetHostAvailable {
                name: long(),
                available: false,
            },
            Command::Dispatch {
                token: t(),
                id: u64::MAX,
                host: long(),
            },
            Command::JobStarted {
                token: t(),
                id: u64::MAX,
                attempt: u32::MAX,
                host: long(),
            },
            Command::JobFinished {
                token: t(),
                id: u64::MAX,
                attempt: u32::MAX,
                host: long(),
                end: JobEnd::Failed("r".repeat(validate::MAX_REASON_BYTES)),
                usage: None,
            },
            Command::HostLost { name: long() },
            Command::Barrier {
                term: u64::MAX,
                queues: (0..64)
                    .map(|i| QueueDef {
                        name: format!("{i}{}", "q".repeat(200)),
                        priority: i32::MAX,
                        on_host_lost: Default::default(),
                    })
                    .collect(),
            },
            Command::AcquireScheduler {
                token: t(),
                name: name(),
                instance: u64::MAX,
                ttl_ms: *validate::SCHEDULER_TTL_MS.end(),
            },
            Command::DispatchBatch {
                token: t(),
                epoch: u64::MAX,
                placements: (0..validate::MAX_BATCH as u64)
                    .map(|i| Placement {
                        id: u64::MAX - i,
                        host: long(),
                    })
                    .collect(),
            },
            Command::SetPendReasons {
                token: t(),
                epoch: u64::MAX,
                reasons: (0..validate::MAX_BATCH as u64)
                    .map(|i| {
                        let text = "p".repeat(validate::MAX_PEND_REASON_BYTES);
                        (u64::MAX - i, PendReason::new(PendCode::Limit, text))
                    })
                    .collect(),
            },
            Command::CreateToken {
                token: t(),
                id: "0123456789abcdef".into(),
                user: "u".repeat(64),
                role: Role::Admin,
                hash: [0xff; 32],
                expires_in_ms: Some(1),
            },
            Command::RevokeToken {
                token: t(),
                id: "0123456789abcdef".into(),
            },
            Command::Restore {
                token: t(),
                state: Box::new(base),
            },
            Command::RestoreJobs {
                token: t(),
                base: t(),
                jobs,
                intents,
                scripts,
            },
            Command::RaiseVersion { to: u32::MAX },
            Command::RetireJobs {
                ids: (0..crate::state::retire::MAX_RETIRE_BATCH as u64)
                    .map(|i| u64::MAX - i)
                    .collect(),
            },
            Command::UpdateJob {
                token: t(),
                id: u64::MAX,
                by: Some("u".repeat(64)),
                changes: xce_client::types::JobChanges {
                    name: Some(long()),
                    priority: Some(i32::MIN),
                    queue: Some(long()),
                    cpus: Some(u32::MAX),
                    mem_mb: Some(u64::MAX),
                    time_limit_s: Some(u32::MAX),
                    hold: Some(true),
                    begin_time_ms: Some(u64::MAX),
                },
            },
            Command::SignalJob {
                token: t(),
                id: u64::MAX,
                by: Some("u".repeat(64)),
                signal: xce_client::signals::MAX_SIGNAL,
                leader_only: true,
            },
            Command::ControlTasks {
                token: t(),
                array: u64::MAX,
                // The most runs a task list may hold, each as long as a run prints.
                tasks: Some(
                    (0..validate::MAX_TASK_RUNS as u32)
                        .map(|i| {
                            let start = xce_client::array::MAX_INDEX - 2_000_000 * (i + 1);
                            format!("{start}-{}:3", start + 1_999_998)
                        })
                        .collect::<Vec<_>>()
                        .join(",")
                        .parse()
                        .unwrap(),
                ),
                by: Some("u".repeat(64)),
                actor: Some("u".repeat(validate::MAX_NAME_BYTES)),
                op: xce_client::types::TaskOp::Update {
                    changes: xce_client::types::JobChanges {
                        name: Some(long()),
                        priority: Some(i32::MIN),
                        queue: Some(long()),
                        cpus: Some(u32::MAX),
                        mem_mb: Some(u64::MAX),
                        time_limit_s: Some(u32::MAX),
                        hold: Some(true),
                        begin_time_ms: Some(u64::MAX),
                    },
                    throttle: Some(u32::MAX),
                },
            },
        ]
    }

    /// Every request is bounded before it can reach the log, and however the proposer batches
    /// them, one entry never makes an append a follower refuses: the largest request of every
    /// kind, behind a batch the proposer filled with the largest of any kind, is an entry
    /// below the 32 MiB under which appends carry more than one entry.
    #[test]
    fn the_largest_request_of_every_kind_fits_one_append_behind_a_full_batch() {
        let largest = largest_of_every_kind();
        let kinds: std::collections::BTreeSet<_> = largest.iter().map(kind).collect();
        assert_eq!(
            kinds.len(),
            KINDS,
            "a kind of request is missing: {kinds:?}"
        );
        for cmd in &largest {
            crate::state::validate_command(cmd)
                .unwrap_or_else(|e| panic!("the largest {} is refused: {e}", kind(cmd)));
        }
        let mut worst = (0, "", "");
        for filler in &largest {
            for last in &largest {
                // As the proposer batches (one more while under its byte budget): fillers
                // up to just under the budget, then `last`.
                let (mut commands, mut bytes) = (Vec::new(), 0);
                while bytes + filler.approx_size() < crate::node::MAX_BATCH_BYTES {
                    bytes += filler.approx_size();
                    commands.push(filler.clone());
                }
                commands.push(last.clone());
                let entry = Entry {
                    log_id: LogId::new(CommittedLeaderId::new(u64::MAX, u64::MAX), u64::MAX),
                    payload: EntryPayload::Normal(Batch {
                        at_ms: u64::MAX,
                        format: crate::store::STORE_FORMAT,
                        commands,
                    }),
                };
                let size = codec::to_bin(&append(vec![entry])).unwrap().len();
                if size > worst.0 {
                    worst = (size, kind(filler), kind(last));
                }
            }
        }
        let (size, filler, last) = worst;
        eprintln!("largest entry: {size} bytes (a batch of {filler}, then a {last})");
        assert!(
            size < MAX_APPEND_BYTES,
            "a batch of {filler} then a {last} makes an entry of {} MiB",
            size >> 20
        );
    }
}
