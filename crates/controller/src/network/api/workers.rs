//! What only a joined worker calls: heartbeats and its attempts' reports. The host is the one
//! the session joined as, never one named in the request.

use tracing::warn;
use xce_client::wire::{self, ReplyHeader};
use xce_proto::xce_capnp::controller;
use xce_proto::Status;

use super::ControllerService;
use crate::state::Command;

impl ControllerService {
    /// The host this worker session joined as (the session table lets only workers here, and
    /// a worker session always has its host).
    fn worker_host(&self) -> Result<String, ReplyHeader> {
        self.session.borrow().host.clone().ok_or_else(|| {
            ReplyHeader::status(Status::Perm, "this connection has not joined as a worker")
        })
    }
}

pub(super) async fn heartbeat(
    this: &ControllerService,
    _params: controller::HeartbeatParams,
    mut results: controller::HeartbeatResults,
) -> Result<(), capnp::Error> {
    let header = match this.worker_host() {
        Ok(host) => this.node.heartbeat(&host),
        Err(h) => h,
    };
    wire::write_header(results.get().init_header(), &header);
    Ok(())
}

pub(super) async fn started(
    this: &ControllerService,
    params: controller::JobStartedParams,
    mut results: controller::JobStartedResults,
) -> Result<(), capnp::Error> {
    let p = params.get()?;
    let (id, attempt, token) = (p.get_job_id(), p.get_attempt(), p.get_token()?);
    let header = report(this, "start", id, attempt, |host| {
        Ok(Command::JobStarted {
            token: wire::read_token(token),
            id,
            attempt,
            host,
        })
    })
    .await?;
    wire::write_header(results.get().init_header(), &header);
    Ok(())
}

pub(super) async fn finished(
    this: &ControllerService,
    params: controller::JobFinishedParams,
    mut results: controller::JobFinishedResults,
) -> Result<(), capnp::Error> {
    let p = params.get()?;
    let (id, attempt, token) = (p.get_job_id(), p.get_attempt(), p.get_token()?);
    let end = wire::read_end(p.get_end()?)?;
    // An older worker measures nothing; a cluster below version 13 stores nothing of it
    // (`stored::fit_format` drops it).
    let usage = if p.has_usage() {
        Some(wire::read_usage(p.get_usage()?))
    } else {
        None
    };
    let header = report(this, "end", id, attempt, |host| {
        Ok(Command::JobFinished {
            token: wire::read_token(token),
            id,
            attempt,
            host,
            end,
            usage,
        })
    })
    .await?;
    wire::write_header(results.get().init_header(), &header);
    Ok(())
}

/// Commits a worker's report for the session's host, made by `command`, and logs a refusal.
async fn report(
    this: &ControllerService,
    kind: &str,
    id: u64,
    attempt: u32,
    command: impl FnOnce(String) -> Result<Command, capnp::Error>,
) -> Result<ReplyHeader, capnp::Error> {
    let host = match this.worker_host() {
        Ok(host) => host,
        Err(refused) => return Ok(refused),
    };
    let header = this.write_for_header(command(host.clone())?).await;
    log_refused_report(kind, id, attempt, &host, &header);
    Ok(header)
}

/// A worker's report that changed nothing (unknown job, stale attempt) is worth an operator's
/// attention: it means a copy ran where it should not have.
fn log_refused_report(kind: &str, id: u64, attempt: u32, host: &str, header: &ReplyHeader) {
    if matches!(
        header.status,
        Status::Conflict | Status::NoEnt | Status::Invalid
    ) {
        warn!(job = id, attempt, %host, report = kind, message = %header.message, "worker report refused");
    }
}
