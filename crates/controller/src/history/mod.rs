//! Each controller's history store: the jobs that retired from the replicated state
//! (`state::retire`), in `history.redb` beside the Raft store, so that its size, corruption or
//! loss never touches the Raft store (`docs/design/accounting.md`, "History").
//!
//! Written from the applied stream (the state machine hands over every `Retired` event), so
//! every controller holds the same records under the same sequence numbers; writing is
//! idempotent by id, so a log replayed after a restart writes the same records again. The
//! mark `written_seq` says how far the records are complete: every sequence number up to it
//! is held. Read by any controller's queries, in id order, through the index the narrowest
//! field of the filter picks.

mod parents;
mod query;
mod record;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use xce_client::types::{Job, JobId, ScriptId};

pub use parents::ParentError;
pub use query::MAX_SCAN;

/// Records by job id: the record's format and its bytes (`record`).
const RECORDS: TableDefinition<u64, &[u8]> = TableDefinition::new("records");
/// Job ids by retirement sequence number: what a controller catching up asks a peer for.
const BY_SEQ: TableDefinition<u64, u64> = TableDefinition::new("by_seq");
/// Job ids by user, in id order: the query of one user's jobs.
const BY_USER: TableDefinition<(&str, u64), ()> = TableDefinition::new("by_user");
/// Job ids by account, in id order.
const BY_ACCOUNT: TableDefinition<(&str, u64), ()> = TableDefinition::new("by_account");
/// An array's own id and its tasks', by the array's id.
const BY_ARRAY: TableDefinition<(u64, u64), ()> = TableDefinition::new("by_array");
/// Job ids by end time: what purging by age walks.
const BY_END: TableDefinition<(u64, u64), ()> = TableDefinition::new("by_end");
/// Scripts of retired jobs, by their id (the SHA-256 of their bytes), each once.
const SCRIPTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("scripts");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const KEY_WRITTEN: &str = "written_seq";

/// The file of the history store in a controller's data dir.
pub const FILE: &str = "history.redb";

/// redb's page cache for the history: queries walk indexes, and the records they read are
/// read once; the default (1 GiB) would be RSS a controller does not need.
const CACHE_BYTES: usize = 16 * 1024 * 1024;

/// Why the history store failed.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("history store {path}: {detail}")]
    Store { path: PathBuf, detail: String },
    #[error("history record of job {id}: {detail}")]
    Record { id: JobId, detail: String },
}

/// One retired job as the apply (or a peer) hands it over.
#[derive(Debug, Clone)]
pub struct Retired {
    pub seq: u64,
    pub id: JobId,
    /// `None`: purged by age where it came from; only its number is kept.
    pub job: Option<Arc<Job>>,
    pub script: Option<Arc<[u8]>>,
}

/// A retired job as one controller's store hands it to another: its sequence number, its
/// stored record, and its script's bytes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RawRecord {
    pub seq: u64,
    pub id: JobId,
    /// The stored record; empty: purged by age (a tombstone).
    pub job: Vec<u8>,
    pub script: Option<Vec<u8>>,
}

impl RawRecord {
    /// The retired job it holds, to write.
    pub fn retired(self) -> Result<Retired, HistoryError> {
        let job = if self.job.is_empty() {
            None
        } else {
            let job = record::decode(&self.job).map_err(|detail| HistoryError::Record {
                id: self.id,
                detail: format!("sequence number {}: {detail}", self.seq),
            })?;
            Some(Arc::new(job))
        };
        Ok(Retired {
            seq: self.seq,
            id: self.id,
            job,
            script: self.script.map(Arc::from),
        })
    }
}

/// The history store of one controller. Cheap to clone; every call blocks on the disk, so
/// async callers run it on the blocking pool.
#[derive(Clone)]
pub struct History {
    db: Arc<Database>,
    path: PathBuf,
    /// Records whose write failed (a full disk), kept to write first next time, so that the
    /// apply never fails for history and nothing it handed over is dropped while it runs.
    unwritten: Arc<Mutex<Vec<Retired>>>,
    /// Their count, read without waiting on a write.
    unwritten_count: Arc<std::sync::atomic::AtomicUsize>,
}

impl History {
    /// Opens (or creates) `history.redb` in `dir`.
    pub fn open(dir: &Path) -> Result<History, HistoryError> {
        let path = dir.join(FILE);
        let store = |e: &dyn std::fmt::Display| HistoryError::Store {
            path: path.clone(),
            detail: e.to_string(),
        };
        let mut builder = Database::builder();
        builder.set_cache_size(CACHE_BYTES);
        let db = if path.exists() {
            builder.open(&path)
        } else {
            builder.create(&path)
        }
        .map_err(|e| store(&e))?;
        let txn = db.begin_write().map_err(|e| store(&e))?;
        {
            txn.open_table(RECORDS).map_err(|e| store(&e))?;
            txn.open_table(BY_SEQ).map_err(|e| store(&e))?;
            txn.open_table(BY_USER).map_err(|e| store(&e))?;
            txn.open_table(BY_ACCOUNT).map_err(|e| store(&e))?;
            txn.open_table(BY_ARRAY).map_err(|e| store(&e))?;
            txn.open_table(BY_END).map_err(|e| store(&e))?;
            txn.open_table(SCRIPTS).map_err(|e| store(&e))?;
            txn.open_table(META).map_err(|e| store(&e))?;
        }
        txn.commit().map_err(|e| store(&e))?;
        Ok(History {
            db: Arc::new(db),
            path,
            unwritten: Arc::default(),
            unwritten_count: Arc::default(),
        })
    }

    /// Opens the store in `dir`; one that does not open (corrupt) is moved aside, named in a
    /// WARN, and a new one takes its place, which the controller fills from its peers
    /// (`node::history_sync`): history never stops a controller.
    pub fn open_or_replace(dir: &Path) -> Result<History, HistoryError> {
        match History::open(dir) {
            Ok(history) => Ok(history),
            Err(e) => {
                let path = dir.join(FILE);
                let aside = dir.join(format!("{FILE}.corrupt-{}", xce_client::when::now_ms()));
                std::fs::rename(&path, &aside).map_err(|moved| HistoryError::Store {
                    path: path.clone(),
                    detail: format!("{e}; moving it aside failed too: {moved}"),
                })?;
                tracing::warn!(error = %e, moved_to = %aside.display(), "history: this controller's history store did not open; a new one is filled from the other controllers");
                History::open(dir)
            }
        }
    }

    fn err(&self, e: impl std::fmt::Display) -> HistoryError {
        HistoryError::Store {
            path: self.path.clone(),
            detail: e.to_string(),
        }
    }

    /// Writes retired jobs (and those an earlier failed write kept) in one transaction, and
    /// moves the mark over every sequence number now held without a gap. A failure keeps
    /// them all for the next call.
    pub fn write(&self, retired: Vec<Retired>) -> Result<(), HistoryError> {
        self.stage(retired);
        // What is written now is taken out of the kept list first, so that the list's lock
        // is never held across the disk's write (reads look in the list, then the store).
        let batch = std::mem::take(&mut *self.kept());
        if batch.is_empty() {
            return Ok(());
        }
        let written = self.write_now(&batch);
        let mut kept = self.kept();
        if written.is_err() {
            let newer = std::mem::replace(&mut *kept, batch);
            kept.extend(newer);
        }
        self.unwritten_count
            .store(kept.len(), std::sync::atomic::Ordering::Relaxed);
        written
    }

    /// Keeps retired jobs to write with the next [`History::write`]: the apply hands them
    /// over while it still holds the state, so that a job read between its retirement and
    /// the write is found here.
    pub fn stage(&self, retired: Vec<Retired>) {
        if retired.is_empty() {
            return;
        }
        let mut kept = self.kept();
        kept.extend(retired);
        self.unwritten_count
            .store(kept.len(), std::sync::atomic::Ordering::Relaxed);
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Vec<Retired>> {
        self.unwritten.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A kept (not yet written) retired job, by id.
    fn kept_job(&self, id: JobId) -> Option<Job> {
        self.kept()
            .iter()
            .rev()
            .find(|r| r.id == id)
            .and_then(|r| r.job.as_deref().cloned())
    }

    /// The kept (not yet written) tasks of array `id`.
    fn kept_tasks(&self, id: JobId) -> Vec<Job> {
        self.kept()
            .iter()
            .filter_map(|r| r.job.as_deref())
            .filter(|j| j.array_task.is_some_and(|t| t.array_id == id))
            .cloned()
            .collect()
    }

    /// How many retired jobs are kept to write (one is due, or an earlier write failed).
    pub fn unwritten(&self) -> usize {
        self.unwritten_count
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn write_now(&self, retired: &[Retired]) -> Result<(), HistoryError> {
        let txn = self.db.begin_write().map_err(|e| self.err(e))?;
        {
            let mut records = txn.open_table(RECORDS).map_err(|e| self.err(e))?;
            let mut by_seq = txn.open_table(BY_SEQ).map_err(|e| self.err(e))?;
            let mut by_user = txn.open_table(BY_USER).map_err(|e| self.err(e))?;
            let mut by_account = txn.open_table(BY_ACCOUNT).map_err(|e| self.err(e))?;
            let mut by_array = txn.open_table(BY_ARRAY).map_err(|e| self.err(e))?;
            let mut by_end = txn.open_table(BY_END).map_err(|e| self.err(e))?;
            let mut scripts = txn.open_table(SCRIPTS).map_err(|e| self.err(e))?;
            let mut meta = txn.open_table(META).map_err(|e| self.err(e))?;
            for r in retired {
                let Some(job) = &r.job else {
                    // Purged where it came from: its number alone, as a tombstone.
                    by_seq.insert(r.seq, r.id).map_err(|e| self.err(e))?;
                    continue;
                };
                let bytes = record::encode(job)
                    .map_err(|detail| HistoryError::Record { id: job.id, detail })?;
                records
                    .insert(job.id, bytes.as_slice())
                    .map_err(|e| self.err(e))?;
                by_seq.insert(r.seq, job.id).map_err(|e| self.err(e))?;
                by_user
                    .insert((job.spec.user.as_str(), job.id), ())
                    .map_err(|e| self.err(e))?;
                by_account
                    .insert((job.spec.account.as_str(), job.id), ())
                    .map_err(|e| self.err(e))?;
                let array = job
                    .array_task
                    .map(|t| t.array_id)
                    .or(job.array.as_ref().map(|_| job.id));
                if let Some(array) = array {
                    by_array
                        .insert((array, job.id), ())
                        .map_err(|e| self.err(e))?;
                }
                by_end
                    .insert((job.end_time_ms.unwrap_or(0), job.id), ())
                    .map_err(|e| self.err(e))?;
                if let (Some(id), Some(body)) = (job.spec.script, &r.script) {
                    scripts
                        .insert(id.0.as_slice(), &**body)
                        .map_err(|e| self.err(e))?;
                }
            }
            let mut mark = meta
                .get(KEY_WRITTEN)
                .map_err(|e| self.err(e))?
                .map_or(0, |v| v.value());
            while by_seq.get(mark + 1).map_err(|e| self.err(e))?.is_some() {
                mark += 1;
            }
            meta.insert(KEY_WRITTEN, mark).map_err(|e| self.err(e))?;
        }
        txn.commit().map_err(|e| self.err(e))
    }

    /// Every sequence number up to this one is held.
    pub fn written_seq(&self) -> Result<u64, HistoryError> {
        let txn = self.db.begin_read().map_err(|e| self.err(e))?;
        let meta = txn.open_table(META).map_err(|e| self.err(e))?;
        Ok(meta
            .get(KEY_WRITTEN)
            .map_err(|e| self.err(e))?
            .map_or(0, |v| v.value()))
    }

    /// One retired job, by id.
    pub fn job(&self, id: JobId) -> Result<Option<Job>, HistoryError> {
        if let Some(job) = self.kept_job(id) {
            return Ok(Some(job));
        }
        let txn = self.db.begin_read().map_err(|e| self.err(e))?;
        let records = txn.open_table(RECORDS).map_err(|e| self.err(e))?;
        let Some(bytes) = records.get(id).map_err(|e| self.err(e))? else {
            return Ok(None);
        };
        record::decode(bytes.value())
            .map(Some)
            .map_err(|detail| HistoryError::Record { id, detail })
    }

    /// A retired job's script bytes, by the script's id.
    pub fn script(&self, id: &ScriptId) -> Result<Option<Vec<u8>>, HistoryError> {
        let txn = self.db.begin_read().map_err(|e| self.err(e))?;
        let scripts = txn.open_table(SCRIPTS).map_err(|e| self.err(e))?;
        Ok(scripts
            .get(id.0.as_slice())
            .map_err(|e| self.err(e))?
            .map(|v| v.value().to_vec()))
    }

    /// The records from sequence number `from` on, in order, at most `limit` and about
    /// `max_bytes`, stopping at the first this store lacks: what a peer catching up pulls
    /// (`historyRange`).
    pub fn range(
        &self,
        from: u64,
        limit: usize,
        max_bytes: usize,
    ) -> Result<Vec<RawRecord>, HistoryError> {
        let txn = self.db.begin_read().map_err(|e| self.err(e))?;
        let by_seq = txn.open_table(BY_SEQ).map_err(|e| self.err(e))?;
        let records = txn.open_table(RECORDS).map_err(|e| self.err(e))?;
        let scripts = txn.open_table(SCRIPTS).map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        let mut bytes_out = 0usize;
        let entries = by_seq.range(from..).map_err(|e| self.err(e))?;
        for (next, entry) in (from..).zip(entries) {
            let (seq, id) = entry.map_err(|e| self.err(e))?;
            let (seq, id) = (seq.value(), id.value());
            if seq != next || out.len() >= limit || (bytes_out >= max_bytes && !out.is_empty()) {
                break;
            }
            let Some(bytes) = records.get(id).map_err(|e| self.err(e))? else {
                // Purged by age: its number goes on as a tombstone.
                out.push(RawRecord {
                    seq,
                    id,
                    job: Vec::new(),
                    script: None,
                });
                continue;
            };
            let job = bytes.value().to_vec();
            let script = match record::decode(&job)
                .map_err(|detail| HistoryError::Record { id, detail })?
                .spec
                .script
            {
                Some(sid) => scripts
                    .get(sid.0.as_slice())
                    .map_err(|e| self.err(e))?
                    .map(|v| v.value().to_vec()),
                None => None,
            };
            bytes_out += job.len() + script.as_ref().map_or(0, Vec::len);
            out.push(RawRecord {
                seq,
                id,
                job,
                script,
            });
        }
        Ok(out)
    }

    /// Purges the records of jobs that ended before `ended_before_ms`, at most `max` at a
    /// time; their sequence numbers stay (tombstones), so the mark and a peer's pull still
    /// count them. Returns how many it purged.
    pub fn purge(&self, ended_before_ms: u64, max: usize) -> Result<usize, HistoryError> {
        let txn = self.db.begin_write().map_err(|e| self.err(e))?;
        let mut purged = 0;
        {
            let mut records = txn.open_table(RECORDS).map_err(|e| self.err(e))?;
            let mut by_user = txn.open_table(BY_USER).map_err(|e| self.err(e))?;
            let mut by_account = txn.open_table(BY_ACCOUNT).map_err(|e| self.err(e))?;
            let mut by_array = txn.open_table(BY_ARRAY).map_err(|e| self.err(e))?;
            let mut by_end = txn.open_table(BY_END).map_err(|e| self.err(e))?;
            let old: Vec<(u64, u64)> = by_end
                .range((0, 0)..(ended_before_ms, 0))
                .map_err(|e| self.err(e))?
                .take(max)
                .map(|r| r.map(|(k, _)| k.value()).map_err(|e| self.err(e)))
                .collect::<Result<_, _>>()?;
            for (end, id) in old {
                by_end.remove((end, id)).map_err(|e| self.err(e))?;
                let Some(bytes) = records.remove(id).map_err(|e| self.err(e))? else {
                    continue;
                };
                let job = record::decode(bytes.value())
                    .map_err(|detail| HistoryError::Record { id, detail })?;
                drop(bytes);
                by_user
                    .remove((job.spec.user.as_str(), id))
                    .map_err(|e| self.err(e))?;
                by_account
                    .remove((job.spec.account.as_str(), id))
                    .map_err(|e| self.err(e))?;
                let array = job
                    .array_task
                    .map(|t| t.array_id)
                    .or(job.array.as_ref().map(|_| id));
                if let Some(array) = array {
                    by_array.remove((array, id)).map_err(|e| self.err(e))?;
                }
                purged += 1;
            }
        }
        txn.commit().map_err(|e| self.err(e))?;
        Ok(purged)
    }

    /// How many records the store holds.
    pub fn len(&self) -> Result<u64, HistoryError> {
        let txn = self.db.begin_read().map_err(|e| self.err(e))?;
        let records = txn.open_table(RECORDS).map_err(|e| self.err(e))?;
        records.len().map_err(|e| self.err(e))
    }

    /// Whether the store holds no record.
    pub fn is_empty(&self) -> Result<bool, HistoryError> {
        Ok(self.len()? == 0)
    }
}

#[cfg(test)]
mod tests;
