//! The controller's network surfaces, one file each: the client-facing API (`api/`, one file
//! per resource), the inbound Raft interface (`raft`), the pushes to workers (`push`), the
//! outbound Raft client to the other controllers (`raft_client`, with `codec`), and the
//! session table every method passes (`session`). [`serve`] accepts connections and gives
//! each its own session.

pub mod api;
pub mod codec;
pub mod push;
pub mod raft;
pub mod raft_client;
pub mod session;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use capnp_rpc::{rpc_twoparty_capnp::Side, RpcSystem};
use tokio::net::TcpListener;
use tracing::{debug, warn};
use xce_proto::xce_capnp::controller;

use crate::node::Node;
use api::ControllerService;
use push::Agents;

/// Accepts connections until the future is dropped; each connection gets the `Controller`
/// bootstrap capability with a fresh session (a plain user until it joins). Runs on a
/// `LocalSet`: capnp-rpc is `!Send`.
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
        if let Err(e) = xce_client::socket::accepted(&stream) {
            debug!(%peer, error = %e, "set TCP_NODELAY failed");
        }
        let network = xce_client::socket::network(stream, Side::Server);
        let service: controller::Client = capnp_rpc::new_client(ControllerService {
            node: node.clone(),
            agents: agents.clone(),
            session: Rc::new(RefCell::new(session::Session::default())),
        });
        let rpc = RpcSystem::new(Box::new(network), Some(service.client));
        tokio::task::spawn_local(async move {
            if let Err(e) = rpc.await {
                debug!(%peer, error = %e, "connection closed");
            }
        });
    }
}
