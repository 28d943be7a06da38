//! Queries of the history store: one page of the jobs passing a filter, in id order, walked
//! through the index the filter's narrowest field picks (a user's, an account's, an array's,
//! else the records by id within the id range), reading at most [`MAX_SCAN`] records a page.

use redb::ReadableDatabase;
use xce_client::history::{HistoryFilter, HistoryPage};
use xce_client::types::JobId;

use super::{record, History, HistoryError, BY_ACCOUNT, BY_ARRAY, BY_USER, RECORDS};

/// The most records one page reads: a query whose filter passes few of many records stops
/// there and says where to go on (`HistoryPage::next`), so no call walks the whole store.
pub const MAX_SCAN: u64 = 200_000;

/// The most jobs one page holds.
pub const MAX_PAGE: usize = 1_000;

/// About the most bytes of records one page holds, as a page of live jobs (a job's
/// environment may be large): far below the message limit.
pub const MAX_PAGE_BYTES: usize = crate::state::MAX_PAGE_BYTES;

impl History {
    /// One page of the jobs passing `filter` with ids above `after`, at most `limit` (at most
    /// [`MAX_PAGE`]); `behind` is left for the caller, who knows the state's count.
    pub fn query(
        &self,
        filter: &HistoryFilter,
        after: JobId,
        limit: usize,
    ) -> Result<HistoryPage, HistoryError> {
        let limit = limit.clamp(1, MAX_PAGE);
        let from = after.saturating_add(1).max(filter.first_id.unwrap_or(0));
        let to = filter.last_id.unwrap_or(u64::MAX);
        let mut page = HistoryPage::default();
        if from > to {
            return Ok(page);
        }
        let txn = self.db.begin_read().map_err(|e| self.err(e))?;
        let records = txn.open_table(RECORDS).map_err(|e| self.err(e))?;
        let by_user = txn.open_table(BY_USER).map_err(|e| self.err(e))?;
        let by_account = txn.open_table(BY_ACCOUNT).map_err(|e| self.err(e))?;
        let by_array = txn.open_table(BY_ARRAY).map_err(|e| self.err(e))?;
        let ids: Box<dyn Iterator<Item = Result<JobId, HistoryError>> + '_> =
            if let Some(user) = &filter.user {
                let range = by_user
                    .range((user.as_str(), from)..=(user.as_str(), to))
                    .map_err(|e| self.err(e))?;
                Box::new(range.map(|r| r.map(|(k, _)| k.value().1).map_err(|e| self.err(e))))
            } else if let Some(account) = &filter.account {
                let range = by_account
                    .range((account.as_str(), from)..=(account.as_str(), to))
                    .map_err(|e| self.err(e))?;
                Box::new(range.map(|r| r.map(|(k, _)| k.value().1).map_err(|e| self.err(e))))
            } else if let Some(array) = filter.array {
                let range = by_array
                    .range((array, from)..=(array, to))
                    .map_err(|e| self.err(e))?;
                Box::new(range.map(|r| r.map(|(k, _)| k.value().1).map_err(|e| self.err(e))))
            } else {
                let range = records.range(from..=to).map_err(|e| self.err(e))?;
                Box::new(range.map(|r| r.map(|(k, _)| k.value()).map_err(|e| self.err(e))))
            };
        let mut last = after;
        let mut total = 0usize;
        for id in ids {
            let id = id?;
            if page.scanned >= MAX_SCAN {
                page.next = last;
                return Ok(page);
            }
            page.scanned += 1;
            last = id;
            let Some(bytes) = records.get(id).map_err(|e| self.err(e))? else {
                continue;
            };
            let size = bytes.value().len();
            let job = record::decode(bytes.value())
                .map_err(|detail| HistoryError::Record { id, detail })?;
            if filter.passes(&job) {
                page.jobs.push(job);
                total += size;
                if page.jobs.len() == limit || total >= MAX_PAGE_BYTES {
                    page.next = id;
                    return Ok(page);
                }
            }
        }
        Ok(page)
    }
}
