//! The cluster report, and the way to this node's Raft interface.

use xce_client::wire::{self, ReplyHeader};
use xce_proto::xce_capnp::{controller, raft};

use super::{header_of, ControllerService};
use crate::network::raft::RaftService;

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
    let raft: raft::Client = capnp_rpc::new_client(RaftService {
        node: this.node.clone(),
    });
    let mut r = results.get();
    wire::write_header(r.reborrow().init_header(), &ReplyHeader::ok());
    r.set_raft(raft);
    Ok(())
}
