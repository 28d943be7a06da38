//! What only a scheduler session calls: the lease, batches of placements, pending reasons.
//! The lease and the epoch are judged at apply (`state::schedulers`); these handlers only
//! carry requests in and replies out.

use xce_client::types::Placement;
use xce_client::wire::{self, ReplyHeader};
use xce_proto::xce_capnp::controller;
use xce_proto::Status;

use super::ControllerService;
use crate::node::outcome_reply;
use crate::state::{Command, Outcome};

pub(super) async fn acquire(
    this: &ControllerService,
    params: controller::AcquireSchedulerParams,
    mut results: controller::AcquireSchedulerResults,
) -> Result<(), capnp::Error> {
    let p = params.get()?;
    let name = p.get_name()?.to_str()?.to_string();
    // A scheduler's certificate names the one lease holder it may be.
    let certified = this.session.borrow().certified.clone();
    if let Some(id) = certified.filter(|id| id.name != name) {
        let message =
            format!("acquireScheduler as {name:?}: this connection's certificate is {id}'s");
        let mut r = results.get();
        wire::write_header(
            r.reborrow().init_header(),
            &ReplyHeader::status(Status::Perm, message),
        );
        return Ok(());
    }
    let cmd = Command::AcquireScheduler {
        token: wire::read_token(p.get_token()?),
        name: name.clone(),
        instance: p.get_instance(),
        ttl_ms: p.get_ttl_ms(),
    };
    if this.node.gate().is_ok() {
        this.node.saw_scheduler(&name);
    }
    let (header, epoch) = match this.node.write(cmd).await {
        Ok(outcome) => {
            let epoch = match outcome.original() {
                Outcome::Leased { epoch } => *epoch,
                _ => 0,
            };
            (outcome_reply(outcome).0, epoch)
        }
        Err(h) => (h, 0),
    };
    let mut r = results.get();
    wire::write_header(r.reborrow().init_header(), &header);
    r.set_epoch(epoch);
    Ok(())
}

pub(super) async fn dispatch_batch(
    this: &ControllerService,
    params: controller::DispatchBatchParams,
    mut results: controller::DispatchBatchResults,
) -> Result<(), capnp::Error> {
    let p = params.get()?;
    let placements = p
        .get_placements()?
        .iter()
        .map(wire::read_placement)
        .collect::<Result<Vec<Placement>, capnp::Error>>()?;
    let cmd = Command::DispatchBatch {
        token: wire::read_token(p.get_token()?),
        epoch: p.get_epoch(),
        placements,
    };
    // The start pushes follow from the applied entry's events, without holding the reply.
    let written = match holder_only(this).await {
        Ok(()) => this.node.write(cmd).await,
        Err(h) => Err(h),
    };
    let (header, refused) = match written {
        Ok(outcome) => {
            let refused = match outcome.original() {
                Outcome::Placed { refused } => refused.clone(),
                _ => Vec::new(),
            };
            (outcome_reply(outcome).0, refused)
        }
        Err(h) => (h, Vec::new()),
    };
    let mut r = results.get();
    wire::write_header(r.reborrow().init_header(), &header);
    let mut list = r.init_refused(refused.len() as u32);
    for (i, f) in refused.iter().enumerate() {
        wire::write_refusal(list.reborrow().get(i as u32), f);
    }
    Ok(())
}

pub(super) async fn set_pend_reasons(
    this: &ControllerService,
    params: controller::SetPendReasonsParams,
    mut results: controller::SetPendReasonsResults,
) -> Result<(), capnp::Error> {
    let p = params.get()?;
    let reasons = p
        .get_reasons()?
        .iter()
        .map(wire::read_pend_reason)
        .collect::<Result<Vec<_>, capnp::Error>>()?;
    let cmd = Command::SetPendReasons {
        token: wire::read_token(p.get_token()?),
        epoch: p.get_epoch(),
        reasons,
    };
    let header = match holder_only(this).await {
        Ok(()) => this.write_for_header(cmd).await,
        Err(h) => h,
    };
    wire::write_header(results.get().init_header(), &header);
    Ok(())
}

/// With a certificate, only the scheduler it names may act under the lease, and only while
/// it holds it: another scheduler's certificate cannot borrow the holder's epoch. (The epoch
/// is still judged at apply, which settles a lease that changes meanwhile.)
async fn holder_only(this: &ControllerService) -> Result<(), ReplyHeader> {
    let Some(id) = this.session.borrow().certified.clone() else {
        return Ok(());
    };
    let now = crate::node::now_ms();
    let holder = this
        .node
        .read(move |s| s.scheduler_lease(now).map(|l| l.name.clone()))
        .await?;
    if holder.as_deref() == Some(id.name.as_str()) {
        return Ok(());
    }
    Err(ReplyHeader::status(
        Status::Perm,
        format!(
            "scheduler {} does not hold the scheduler lease (held by {})",
            id.name,
            holder.as_deref().unwrap_or("nobody")
        ),
    ))
}
