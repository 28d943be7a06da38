//! Host operations.

use futures::FutureExt;
use xce_proto::xce_capnp::controller;

use super::{header_only, read_list, reply, Op, OpKind, Reply};
use crate::connection::LocalFuture;
use crate::types::{Host, HostAction, RequestToken};
use crate::wire;

/// All hosts.
#[derive(Debug, Clone, Default)]
pub struct ListHosts;

impl Op for ListHosts {
    type Output = Vec<Host>;
    const KIND: OpKind = OpKind::Read;
    const NAME: &'static str = "listHosts";
    fn send(
        self,
        client: controller::Client,
    ) -> LocalFuture<Result<Reply<Vec<Host>>, capnp::Error>> {
        async move {
            let resp = client.list_hosts_request().send().promise.await?;
            let r = resp.get()?;
            reply(r.get_header()?, || {
                read_list(r.get_hosts()?, wire::read_host)
            })
        }
        .boxed_local()
    }
}

/// Open or close a host.
#[derive(Debug, Clone)]
pub struct ControlHost {
    pub token: RequestToken,
    pub name: String,
    pub action: HostAction,
}

impl Op for ControlHost {
    type Output = ();
    const KIND: OpKind = OpKind::Write;
    const NAME: &'static str = "hostControl";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<()>, capnp::Error>> {
        async move {
            let mut req = client.host_control_request();
            wire::write_token(req.get().init_token(), self.token);
            req.get().set_name(self.name.as_str());
            req.get().set_action(self.action.into());
            let resp = req.send().promise.await?;
            header_only(resp.get()?.get_header()?)
        }
        .boxed_local()
    }
}
