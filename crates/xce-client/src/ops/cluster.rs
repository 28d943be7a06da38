//! The cluster report.

use futures::FutureExt;
use xce_proto::xce_capnp::controller;

use super::{reply, Op, OpKind, Reply};
use crate::connection::LocalFuture;
use crate::types::ClusterInfo;
use crate::wire;

/// The cluster as the primary sees it.
#[derive(Debug, Clone, Default)]
pub struct GetCluster;

impl Op for GetCluster {
    type Output = ClusterInfo;
    const KIND: OpKind = OpKind::Read;
    const NAME: &'static str = "clusterInfo";
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
