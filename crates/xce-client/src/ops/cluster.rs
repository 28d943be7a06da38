//! The cluster report.

use futures::FutureExt;
use xce_proto::xce_capnp::controller;

use super::{header_only, reply, Op, OpKind, Reply};
use crate::connection::LocalFuture;
use crate::types::{ClusterInfo, RequestToken};
use crate::wire;

/// The cluster as the primary sees it.
#[derive(Debug, Clone, Default)]
pub struct GetCluster;

impl Op for GetCluster {
    type Output = ClusterInfo;
    const KIND: OpKind = OpKind::Read;
    const NAME: &'static str = "clusterInfo";
    fn candidates_of(info: &ClusterInfo) -> Option<Vec<crate::Candidate>> {
        let spec: Vec<String> = info
            .members
            .iter()
            .map(|m| format!("{}={}", m.name, m.addr))
            .collect();
        crate::parse_candidates(&spec.join(",")).ok()
    }
    fn send(
        self,
        client: controller::Client,
    ) -> LocalFuture<Result<Reply<ClusterInfo>, capnp::Error>> {
        async move {
            let resp = client.cluster_info_request().send().promise.await?;
            let r = resp.get()?;
            reply(r.get_header()?, || wire::read_cluster(r.get_cluster()?))
        }
        .boxed_local()
    }
}

/// Adds a controller (running with `--join`) to the members (admins only).
#[derive(Debug, Clone)]
pub struct AddController {
    pub token: RequestToken,
    pub name: String,
    /// `host:port`.
    pub addr: String,
}

impl Op for AddController {
    type Output = ();
    const KIND: OpKind = OpKind::Write;
    const NAME: &'static str = "addController";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<()>, capnp::Error>> {
        async move {
            let mut req = client.add_controller_request();
            wire::write_token(req.get().init_token(), self.token);
            req.get().set_name(self.name.as_str());
            req.get().set_addr(self.addr.as_str());
            let resp = req.send().promise.await?;
            header_only(resp.get()?.get_header()?)
        }
        .boxed_local()
    }
}

/// Removes a controller from the members (admins only).
#[derive(Debug, Clone)]
pub struct RemoveController {
    pub token: RequestToken,
    pub name: String,
}

impl Op for RemoveController {
    type Output = ();
    const KIND: OpKind = OpKind::Write;
    const NAME: &'static str = "removeController";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<()>, capnp::Error>> {
        async move {
            let mut req = client.remove_controller_request();
            wire::write_token(req.get().init_token(), self.token);
            req.get().set_name(self.name.as_str());
            let resp = req.send().promise.await?;
            header_only(resp.get()?.get_header()?)
        }
        .boxed_local()
    }
}
