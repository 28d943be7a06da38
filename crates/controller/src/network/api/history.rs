//! `listHistory`: pages of retired jobs from this controller's history store (`history`).
//! Answered by any controller from its own store, primary or not: history only grows, and a
//! page says how many retired jobs the store lacks (`behind`) while it catches up.

use xce_client::wire::{self, ReplyHeader};
use xce_proto::xce_capnp::controller;
use xce_proto::Status;

use super::{header_of, ControllerService};

/// The jobs a page holds when the caller asks for none in particular.
const DEFAULT_PAGE: usize = 100;

pub(super) async fn list(
    this: &ControllerService,
    params: controller::ListHistoryParams,
    mut results: controller::ListHistoryResults,
) -> Result<(), capnp::Error> {
    let p = params.get()?;
    let filter = wire::read_history_filter(p.get_filter()?);
    let (after, limit) = (p.get_after(), p.get_limit() as usize);
    let limit = if limit == 0 { DEFAULT_PAGE } else { limit };
    let page = match filter {
        Err(e) => Err(ReplyHeader::status(Status::Invalid, e.to_string())),
        Ok(filter) => {
            let history = this.node.history.clone();
            let behind = this.node.history_behind();
            match tokio::task::spawn_blocking(move || history.query(&filter, after, limit)).await {
                Ok(Ok(mut page)) => {
                    page.behind = behind;
                    Ok(page)
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "history: a query failed");
                    Err(ReplyHeader::status(Status::Internal, e.to_string()))
                }
                Err(e) => Err(ReplyHeader::status(Status::Internal, e.to_string())),
            }
        }
    };
    let mut r = results.get();
    wire::write_header(r.reborrow().init_header(), &header_of(&page));
    if let Ok(page) = page {
        r.set_next(page.next);
        r.set_behind(page.behind);
        r.set_scanned(page.scanned);
        let mut list = r.init_jobs(page.jobs.len() as u32);
        for (i, job) in page.jobs.into_iter().enumerate() {
            wire::write_job(list.reborrow().get(i as u32), &this.as_seen(job));
        }
    }
    Ok(())
}
