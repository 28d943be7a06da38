//! The cluster report, and the way to this node's Raft interface.

use xce_client::wire::{self, ReplyHeader};
use xce_proto::xce_capnp::{controller, raft};

use super::{header_of, ControllerService};
use crate::network::raft::RaftService;
use crate::network::raft_input::Peer;

pub(super) async fn info(
    this: &ControllerService,
    _params: controller::ClusterInfoParams,
    mut results: controller::ClusterInfoResults,
) -> Result<(), capnp::Error> {
    let info = this.node.cluster_info().await;
    let mut r = results.get();
    wire::write_header(r.reborrow().init_header(), &header_of(&info));
    if let Ok(info) = info {
        wire::write_cluster(r.init_cluster(), &info);
    }
    Ok(())
}

/// Only a controller session gets here (the session table).
pub(super) async fn raft(
    this: &ControllerService,
    _params: controller::RaftParams,
    mut results: controller::RaftResults,
) -> Result<(), capnp::Error> {
    let peers = &this.node.peers;
    // With a certificate, the one node id it may speak for; 0 (none) for a name not in
    // --peers.
    let sender = this.session.borrow().certified.as_ref().map(|id| {
        peers
            .iter()
            .position(|c| c.name == id.name)
            .map_or(0, crate::node::node_id_of)
    });
    let raft: raft::Client = capnp_rpc::new_client(RaftService {
        node: this.node.clone(),
        peer: Peer {
            members: peers.len() as u64,
            sender,
        },
        snapshots: this.snapshots.clone(),
    });
    let mut r = results.get();
    wire::write_header(r.reborrow().init_header(), &ReplyHeader::ok());
    r.set_raft(raft);
    Ok(())
}
