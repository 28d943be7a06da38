//! Subscribing to events (see [`crate::events::EventStream`], which does it on every
//! connection and survives failover).

use futures::FutureExt;
use xce_proto::xce_capnp::controller;

use super::{header_only, Op, OpKind, Reply};
use crate::connection::LocalFuture;
use crate::events::ListenerHandle;
use crate::types::EventFilter;
use crate::wire;

/// Subscribe the listener to the events passing `filter`, on this connection's primary.
#[derive(Debug, Clone)]
pub struct Subscribe {
    pub listener: ListenerHandle,
    pub filter: EventFilter,
}

impl Op for Subscribe {
    type Output = ();
    // Not a change of state; a repeat subscribes again, which the stream's resync covers.
    const KIND: OpKind = OpKind::Read;
    const NAME: &'static str = "subscribe";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<()>, capnp::Error>> {
        async move {
            let mut req = client.subscribe_request();
            req.get().set_listener(self.listener.capability());
            wire::write_event_filter(req.get().init_filter(), &self.filter);
            let resp = req.send().promise.await?;
            header_only(resp.get()?.get_header()?)
        }
        .boxed_local()
    }
}
