//! History operations: pages of retired jobs (`xce history`, `GET /v1/history`).

use futures::FutureExt;
use xce_proto::xce_capnp::controller;

use super::{read_list, reply, Op, OpKind, Reply};
use crate::connection::LocalFuture;
use crate::history::{HistoryFilter, HistoryPage};
use crate::types::{Job, JobId};
use crate::wire;

/// One page of the retired jobs passing a filter (see [`list_history`] for more).
#[derive(Debug, Clone, Default)]
pub struct ListHistory {
    pub filter: HistoryFilter,
    /// Only jobs with ids above this; the `next` of the previous page.
    pub after: JobId,
    /// Most jobs in the page; 0 for the controller's default.
    pub limit: u32,
}

impl Op for ListHistory {
    type Output = HistoryPage;
    const KIND: OpKind = OpKind::Read;
    const NAME: &'static str = "listHistory";
    fn send(
        self,
        client: controller::Client,
    ) -> LocalFuture<Result<Reply<HistoryPage>, capnp::Error>> {
        async move {
            let mut req = client.list_history_request();
            wire::write_history_filter(req.get().init_filter(), &self.filter);
            req.get().set_after(self.after);
            req.get().set_limit(self.limit);
            let resp = req.send().promise.await?;
            let r = resp.get()?;
            reply(r.get_header()?, || {
                Ok(HistoryPage {
                    jobs: read_list(r.get_jobs()?, wire::read_job)?,
                    next: r.get_next(),
                    behind: r.get_behind(),
                    scanned: r.get_scanned(),
                })
            })
        }
        .boxed_local()
    }
}

/// What a whole history listing read, beside the jobs it handed over.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HistoryListed {
    pub jobs: usize,
    /// The most retired jobs an answering controller lacked (0: its history was complete).
    pub behind: u64,
    /// Records read in all.
    pub scanned: u64,
    /// Stopped at `max_scan` records read with jobs left to look at: the listing is partial.
    pub scan_capped: bool,
    /// Where a further listing goes on from (`after`): the last id read.
    pub next: JobId,
}

/// The retired jobs passing `filter` after `after`, page by page, up to `max` jobs; reading
/// at most `max_scan` records in all, so a filter that passes few of millions of records
/// stops and says so. `each` gets every page as it arrives.
pub async fn list_history<T: crate::transport::Transport>(
    client: &crate::Client<T>,
    filter: HistoryFilter,
    mut after: JobId,
    max: usize,
    max_scan: u64,
    mut each: impl FnMut(&[Job]),
) -> Result<HistoryListed, crate::ClientError> {
    let mut listed = HistoryListed::default();
    while listed.jobs < max {
        let limit = (max - listed.jobs).min(1_000) as u32;
        let page = client
            .call(ListHistory {
                filter: filter.clone(),
                after,
                limit,
            })
            .await?;
        let take = page.jobs.len().min(max - listed.jobs);
        each(&page.jobs[..take]);
        listed.jobs += take;
        listed.behind = listed.behind.max(page.behind);
        listed.scanned += page.scanned;
        if page.next <= after {
            break;
        }
        after = page.next;
        listed.next = after;
        if listed.scanned >= max_scan && listed.jobs < max {
            listed.scan_capped = true;
            break;
        }
    }
    Ok(listed)
}
