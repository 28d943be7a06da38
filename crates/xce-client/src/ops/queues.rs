//! Queue operations.

use futures::FutureExt;
use xce_proto::xce_capnp::controller;

use super::{header_only, read_list, reply, Op, OpKind, Reply};
use crate::connection::LocalFuture;
use crate::types::{Queue, QueueAction, RequestToken};
use crate::wire;

/// All queues with their job counts.
#[derive(Debug, Clone, Default)]
pub struct ListQueues;

impl Op for ListQueues {
    type Output = Vec<Queue>;
    const KIND: OpKind = OpKind::Read;
    const NAME: &'static str = "listQueues";
    fn send(
        self,
        client: controller::Client,
    ) -> LocalFuture<Result<Reply<Vec<Queue>>, capnp::Error>> {
        async move {
            let resp = client.list_queues_request().send().promise.await?;
            let r = resp.get()?;
            reply(r.get_header()?, || {
                read_list(r.get_queues()?, wire::read_queue)
            })
        }
        .boxed_local()
    }
}

/// Open, close, activate or inactivate a queue.
#[derive(Debug, Clone)]
pub struct ControlQueue {
    pub token: RequestToken,
    pub name: String,
    pub action: QueueAction,
}

impl Op for ControlQueue {
    type Output = ();
    const KIND: OpKind = OpKind::Write;
    const NAME: &'static str = "queueControl";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<()>, capnp::Error>> {
        async move {
            let mut req = client.queue_control_request();
            wire::write_token(req.get().init_token(), self.token);
            req.get().set_name(self.name.as_str());
            req.get().set_action(self.action.into());
            let resp = req.send().promise.await?;
            header_only(resp.get()?.get_header()?)
        }
        .boxed_local()
    }
}
