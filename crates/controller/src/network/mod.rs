//! The controller's network surfaces, one file each: the client-facing API (`api/`, one file
//! per resource), the inbound Raft interface (`raft`), the pushes to workers (`push`), the
//! outbound Raft client to the other controllers (`raft_client`, with `codec`), and the
//! session table every method passes (`session`). [`serve`] accepts connections and gives
//! each its own session.

pub mod api;
pub mod codec;
pub mod connections;
pub mod push;
pub mod raft;
pub mod raft_client;
pub mod raft_input;
pub mod session;

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use capnp_rpc::RpcSystem;
use tokio::net::TcpListener;
use tracing::{debug, warn};
use xce_client::tls::Tls;
use xce_proto::xce_capnp::controller;

use crate::config::LimitsConfig;
use crate::node::Node;
use api::ControllerService;
use connections::Connections;
use push::Agents;
use std::time::Duration;

/// Accepts connections until the future is dropped; each connection gets the `Controller`
/// bootstrap capability with a fresh session (a plain user until it joins, or with `tls` the
/// role its certificate names; without a valid certificate it is refused), within the
/// limits of `connections`. Runs on a `LocalSet`: capnp-rpc is `!Send`.
pub async fn serve(
    listener: TcpListener,
    node: Arc<Node>,
    limits: LimitsConfig,
    tls: Option<Arc<Tls>>,
) {
    let agents = Agents::default();
    let snapshots = Rc::new(RefCell::new(raft_input::Assembly::default()));
    tokio::task::spawn_local(push::run(node.clone(), agents.clone()));
    let max = limits.max_connections.min(fd_room());
    let connections = Connections::new(max, Duration::from_millis(limits.idle_timeout_ms));
    tokio::task::spawn_local(connections.clone().run_idle_sweeper());
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(conn) => {
                node.accepted(true);
                conn
            }
            Err(e) => {
                node.accepted(false);
                warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        if !connections.make_room() {
            continue;
        }
        let session = Rc::new(RefCell::new(session::Session::default()));
        let last_call = Rc::new(Cell::new(tokio::time::Instant::now()));
        let (id_tx, id_rx) = tokio::sync::oneshot::channel::<u64>();
        let registry = connections.clone();
        let (node, agents, tls) = (node.clone(), agents.clone(), tls.clone());
        let snapshots = snapshots.clone();
        let (conn_session, conn_last_call) = (session.clone(), last_call.clone());
        // The handshake runs in the connection's own task, so a slow or silent peer holds up
        // no other; until it is done the connection counts as a plain user's (evictable).
        let task = tokio::task::spawn_local(async move {
            match xce_client::socket::accept(stream, tls.as_ref()).await {
                Ok((stream, identity)) => {
                    *conn_session.borrow_mut() = session::Session::new(identity);
                    let (network, backlog) = xce_client::socket::server_network(stream);
                    let service: controller::Client = capnp_rpc::new_client(ControllerService {
                        node,
                        agents,
                        session: conn_session,
                        last_call: conn_last_call,
                        backlog,
                        snapshots,
                    });
                    let rpc = RpcSystem::new(Box::new(network), Some(service.client));
                    if let Err(e) = rpc.await {
                        debug!(%peer, error = %e, "connection closed");
                    }
                }
                Err(reason) => warn!(%peer, %reason, "refused a connection"),
            }
            if let Ok(id) = id_rx.await {
                registry.closed(id);
            }
        });
        let _ = id_tx.send(connections.add(session, last_call, task.abort_handle()));
    }
}

/// How many connections the file-descriptor limit leaves room for, keeping some for the
/// store, peers' outbound connections and logs.
fn fd_room() -> usize {
    const KEPT: u64 = 128;
    match nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE) {
        Ok((soft, _)) => soft.saturating_sub(KEPT).max(16) as usize,
        Err(_) => usize::MAX,
    }
}
