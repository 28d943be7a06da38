//! Outbound Raft RPCs to the other controllers, over the same capnp Send bridge the client
//! library uses (openraft's network futures must be `Send`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
use xce_client::types::{RequestToken, Role};
use xce_client::{ConnectOptions, Connection, TransportError};
use xce_proto::xce_capnp::controller;

use super::codec;
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
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerClient {
        PeerClient {
            target,
            addr: node.addr.clone(),
            conn: None,
            reach: self.reach.clone(),
        }
    }
}

/// The connection to one peer, re-opened after any transport failure.
pub struct PeerClient {
    target: NodeId,
    addr: String,
    conn: Option<Connection>,
    reach: Arc<Reachability>,
}

type RpcResult<T, E> = Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>;

impl PeerClient {
    /// Sends one request and decodes the peer's `Result<T, RaftError<E>>` reply.
    async fn rpc<T, E, F>(&mut self, timeout: Duration, send: F) -> RpcResult<T, E>
    where
        T: DeserializeOwned + Send + 'static,
        E: std::error::Error + DeserializeOwned + Send + 'static,
        F: FnOnce(controller::Client) -> LocalFuture<Result<Vec<u8>, capnp::Error>>
            + Send
            + 'static,
    {
        let conn = match &self.conn {
            Some(c) if !c.is_closed() => c.clone(),
            _ => {
                let opts = ConnectOptions {
                    connect_timeout: timeout,
                };
                let c = Connection::connect(&self.addr, opts).await.map_err(|e| {
                    self.reach.mark(self.target, false);
                    RPCError::Unreachable(Unreachable::new(&e))
                })?;
                join_as_controller(&c, timeout).await.map_err(|e| {
                    self.reach.mark(self.target, false);
                    RPCError::Unreachable(Unreachable::new(&e))
                })?;
                self.conn = Some(c.clone());
                c
            }
        };
        let bytes = match conn.call(timeout, send).await {
            Ok(bytes) => bytes,
            Err(e) => {
                self.conn = None;
                self.reach.mark(self.target, false);
                return Err(match e {
                    TransportError::Disconnected { .. } | TransportError::Connect { .. } => {
                        RPCError::Unreachable(Unreachable::new(&e))
                    }
                    _ => RPCError::Network(NetworkError::new(&e)),
                });
            }
        };
        let reply: Result<T, RaftError<NodeId, E>> =
            codec::from_json(&bytes).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        self.reach.mark(self.target, true);
        reply.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
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
        let request = codec::to_bin(&rpc).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
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
    }
}
