//! The cluster report, and the way to this node's Raft interface.

use tracing::info;
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
    // With a certificate, the one node id it may speak for: its `--peers` position, or the
    // joined id of a controller added since.
    let sender = this
        .session
        .borrow()
        .certified
        .as_ref()
        .map(|id| this.node.id_of(&id.name));
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

/// Admins only (the session table). Not a replicated command of ours: openraft's membership
/// change, made by the primary.
pub(super) async fn add_controller(
    this: &ControllerService,
    params: controller::AddControllerParams,
    mut results: controller::AddControllerResults,
) -> Result<(), capnp::Error> {
    let p = params.get()?;
    let (name, addr) = (p.get_name()?.to_str()?, p.get_addr()?.to_str()?);
    let header = match this.node.admit().await {
        Err(h) => h,
        Ok(()) => match this.node.add_member(name, addr).await {
            Ok(id) => {
                info!(controller = name, %addr, id, by = ?this.caller(), "controller added");
                ReplyHeader::ok()
            }
            Err(h) => h,
        },
    };
    wire::write_header(results.get().init_header(), &header);
    Ok(())
}

pub(super) async fn remove_controller(
    this: &ControllerService,
    params: controller::RemoveControllerParams,
    mut results: controller::RemoveControllerResults,
) -> Result<(), capnp::Error> {
    let name = params.get()?.get_name()?.to_str()?;
    let header = match this.node.admit().await {
        Err(h) => h,
        Ok(()) => match this.node.remove_member(name).await {
            Ok(id) => {
                info!(controller = name, id, by = ?this.caller(), "controller removed");
                ReplyHeader::ok()
            }
            Err(h) => h,
        },
    };
    wire::write_header(results.get().init_header(), &header);
    Ok(())
}
