//! What only the scheduler calls: its lease, batches of placements, and pending reasons.

use futures::FutureExt;
use xce_proto::xce_capnp::controller;

use super::{header_only, read_list, reply, Op, OpKind, Reply};
use crate::connection::LocalFuture;
use crate::types::{JobId, PendReason, Placement, Refusal, RequestToken};
use crate::wire;

/// Ask for (or renew) the scheduler lease for `name`. Output: the lease's fencing epoch, to
/// be carried on every decision.
#[derive(Debug, Clone)]
pub struct AcquireScheduler {
    pub token: RequestToken,
    pub name: String,
    /// This scheduler process, so that two started under one name are never both active.
    pub instance: u64,
    pub ttl_ms: u32,
}

impl Op for AcquireScheduler {
    type Output = u64;
    const KIND: OpKind = OpKind::Write;
    const NAME: &'static str = "acquireScheduler";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<u64>, capnp::Error>> {
        async move {
            let mut req = client.acquire_scheduler_request();
            wire::write_token(req.get().init_token(), self.token);
            req.get().set_name(self.name.as_str());
            req.get().set_ttl_ms(self.ttl_ms);
            req.get().set_instance(self.instance);
            let resp = req.send().promise.await?;
            let r = resp.get()?;
            reply(r.get_header()?, || Ok(r.get_epoch()))
        }
        .boxed_local()
    }
}

/// Many placements under one lease epoch, in one replicated request. Output: the placements
/// that were refused, and why (the rest were made).
#[derive(Debug, Clone)]
pub struct DispatchBatch {
    pub token: RequestToken,
    pub epoch: u64,
    pub placements: Vec<Placement>,
}

impl Op for DispatchBatch {
    type Output = Vec<Refusal>;
    const KIND: OpKind = OpKind::Write;
    const NAME: &'static str = "dispatchBatch";
    fn send(
        self,
        client: controller::Client,
    ) -> LocalFuture<Result<Reply<Vec<Refusal>>, capnp::Error>> {
        async move {
            let mut req = client.dispatch_batch_request();
            wire::write_token(req.get().init_token(), self.token);
            req.get().set_epoch(self.epoch);
            let mut list = req.get().init_placements(self.placements.len() as u32);
            for (i, p) in self.placements.iter().enumerate() {
                wire::write_placement(list.reborrow().get(i as u32), p);
            }
            let resp = req.send().promise.await?;
            let r = resp.get()?;
            reply(r.get_header()?, || {
                read_list(r.get_refused()?, wire::read_refusal)
            })
        }
        .boxed_local()
    }
}

/// Why jobs still pend, under one lease epoch.
#[derive(Debug, Clone)]
pub struct SetPendReasons {
    pub token: RequestToken,
    pub epoch: u64,
    pub reasons: Vec<(JobId, PendReason)>,
}

impl Op for SetPendReasons {
    type Output = ();
    const KIND: OpKind = OpKind::Write;
    const NAME: &'static str = "setPendReasons";
    fn send(self, client: controller::Client) -> LocalFuture<Result<Reply<()>, capnp::Error>> {
        async move {
            let mut req = client.set_pend_reasons_request();
            wire::write_token(req.get().init_token(), self.token);
            req.get().set_epoch(self.epoch);
            let mut list = req.get().init_reasons(self.reasons.len() as u32);
            for (i, (id, reason)) in self.reasons.iter().enumerate() {
                wire::write_pend_reason(list.reborrow().get(i as u32), *id, reason);
            }
            let resp = req.send().promise.await?;
            header_only(resp.get()?.get_header()?)
        }
        .boxed_local()
    }
}
