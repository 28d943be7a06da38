//! The Raft log store (openraft storage v2): the live log in memory, made durable in redb by
//! one writer thread that group-commits.
//!
//! `append` returns as soon as the entries are in memory (readable by replication), and the
//! writer thread reports them flushed after the fsync. Everything that reaches the writer
//! thread (appends, truncations, purges, vote) is applied in submission order, as openraft
//! requires, and all operations waiting when a commit starts share that one commit and fsync:
//! under load one fsync covers many batches on every replica. The committed index never wakes
//! the writer: it waits for the next commit that something durable needs (or the store's close).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::RangeBounds;
#[cfg(test)]
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{
    AnyError, Entry, LogId, OptionalSend, RaftLogReader, StorageError, StorageIOError, Vote,
};
use redb::{Database, ReadableDatabase, ReadableTable};
use tokio::sync::oneshot;

use super::{
    decode, encode, get_meta, write_err, DirFormat, NodeId, TypeConfig, KEY_COMMITTED, KEY_PURGED,
    KEY_VOTE, LOG, META,
};

/// The in-memory view: every entry not yet purged, and the log pointers.
#[derive(Default)]
struct LogMem {
    entries: BTreeMap<u64, Entry<TypeConfig>>,
    last_purged: Option<LogId<NodeId>>,
    vote: Option<Vote<NodeId>>,
    committed: Option<LogId<NodeId>>,
}

/// One durable change, in the order it was submitted.
enum Write {
    Entries(Vec<Entry<TypeConfig>>),
    Truncate(u64),
    Purge(LogId<NodeId>),
    Meta(&'static str, Vec<u8>),
}

/// Who to tell when a write is on disk.
enum Done {
    Flushed(LogFlushed<TypeConfig>),
    Notify(oneshot::Sender<Result<(), String>>),
}

struct Op {
    write: Write,
    done: Option<Done>,
}

/// The log, vote and committed index. Clones share the memory and the writer thread; the log
/// reader openraft asks for is just another clone.
#[derive(Clone)]
pub struct LogStore {
    mem: Arc<Mutex<LogMem>>,
    writer: Arc<Writer>,
    /// The encoded committed index not yet written. Its durability is optional (openraft
    /// re-learns it from the leader), so it costs no commit of its own: each commit takes it.
    /// Writing it alone used to cost every replica a second commit and fsync per Raft round.
    unsaved_committed: Arc<Mutex<Option<Vec<u8>>>>,
}

/// The writer thread's queue. Dropping the last handle lets the thread drain the queue and
/// waits for it, so that the database is closed once the store is gone.
struct Writer {
    tx: Option<mpsc::Sender<Op>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Writes sent to the thread so far: what the tests count.
    #[cfg(test)]
    queued: AtomicU64,
}

impl Drop for Writer {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl LogStore {
    /// Loads the log from `db` and starts the writer thread.
    pub(crate) fn open(db: Arc<Database>, dir: Arc<DirFormat>) -> Result<LogStore, redb::Error> {
        let mut mem = LogMem {
            last_purged: get_meta(&db, KEY_PURGED)?,
            vote: get_meta(&db, KEY_VOTE)?,
            committed: get_meta::<Option<LogId<NodeId>>>(&db, KEY_COMMITTED)?.flatten(),
            ..LogMem::default()
        };
        {
            let txn = db.begin_read()?;
            let table = txn.open_table(LOG)?;
            for item in table.iter()? {
                let (k, v) = item?;
                mem.entries.insert(k.value(), decode(v.value())?);
            }
        }
        let (tx, rx) = mpsc::channel();
        let unsaved_committed = Arc::new(Mutex::new(None));
        let unsaved = unsaved_committed.clone();
        let thread = std::thread::Builder::new()
            .name("raft-log-writer".into())
            .spawn(move || writer_thread(&db, &dir, rx, &unsaved))
            .map_err(redb::Error::Io)?;
        Ok(LogStore {
            mem: Arc::new(Mutex::new(mem)),
            writer: Arc::new(Writer {
                tx: Some(tx),
                thread: Some(thread),
                #[cfg(test)]
                queued: AtomicU64::new(0),
            }),
            unsaved_committed,
        })
    }

    /// The highest index openraft has told this node is committed (0 before any): what the
    /// metrics offer as the commit index, which openraft's own metrics do not carry.
    pub fn committed_index(&self) -> u64 {
        self.mem().committed.map_or(0, |c| c.index)
    }

    /// Writes sent to the writer thread since the store was opened.
    #[cfg(test)]
    pub(crate) fn queued(&self) -> u64 {
        self.writer.queued.load(Ordering::Relaxed)
    }

    /// Appends entries and waits until they are on disk (openraft's own append hands a
    /// callback tests cannot make).
    #[cfg(test)]
    pub(crate) async fn append_durably(
        &self,
        entries: Vec<Entry<TypeConfig>>,
    ) -> Result<(), StorageError<NodeId>> {
        self.mem()
            .entries
            .extend(entries.iter().map(|e| (e.log_id.index, e.clone())));
        self.durable(Write::Entries(entries)).await
    }

    /// Whether a committed index waits for a commit to take it.
    #[cfg(test)]
    pub(crate) fn committed_waits(&self) -> bool {
        self.unsaved_committed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    fn mem(&self) -> MutexGuard<'_, LogMem> {
        self.mem.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn submit(&self, write: Write, done: Option<Done>) -> Result<(), StorageError<NodeId>> {
        #[cfg(test)]
        self.writer.queued.fetch_add(1, Ordering::Relaxed);
        let sent = match &self.writer.tx {
            Some(tx) => tx.send(Op { write, done }).is_ok(),
            None => false,
        };
        sent.then_some(()).ok_or_else(|| {
            StorageIOError::write_logs(AnyError::error("the log writer thread has stopped")).into()
        })
    }

    /// Submits a write and waits until it is on disk.
    async fn durable(&self, write: Write) -> Result<(), StorageError<NodeId>> {
        let (tx, rx) = oneshot::channel();
        self.submit(write, Some(Done::Notify(tx)))?;
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(StorageIOError::write(AnyError::error(e)).into()),
            Err(_) => Err(StorageIOError::write(AnyError::error(
                "the log writer thread has stopped",
            ))
            .into()),
        }
    }
}

/// Takes the committed index waiting to be written, if any, as the write that saves it.
fn take_unsaved(unsaved: &Mutex<Option<Vec<u8>>>) -> Option<Op> {
    let bytes = unsaved.lock().unwrap_or_else(|p| p.into_inner()).take()?;
    Some(Op {
        write: Write::Meta(KEY_COMMITTED, bytes),
        done: None,
    })
}

/// Applies queued writes in order, one transaction and one fsync per group; each group also
/// carries the latest committed index waiting, and the last one left is written at close.
fn writer_thread(
    db: &Database,
    dir: &DirFormat,
    rx: mpsc::Receiver<Op>,
    unsaved: &Mutex<Option<Vec<u8>>>,
) {
    // After one failed commit nothing more is written: a lost truncate or purge followed by
    // later writes would leave a log that is wrong after a restart. Every later operation
    // fails, and openraft stops the node.
    let mut failed: Option<String> = None;
    while let Ok(first) = rx.recv() {
        let mut ops = vec![first];
        while let Ok(op) = rx.try_recv() {
            ops.push(op);
        }
        ops.extend(take_unsaved(unsaved));
        let result = match &failed {
            Some(e) => Err(format!("an earlier log write failed: {e}")),
            None => commit_group(db, dir, &ops).map_err(|e| e.to_string()),
        };
        if let (Err(e), None) = (&result, &failed) {
            tracing::error!(error = %e, "raft log write failed; no further writes");
            failed = Some(e.clone());
        }
        for op in ops {
            match op.done {
                Some(Done::Flushed(cb)) => {
                    cb.log_io_completed(result.clone().map_err(std::io::Error::other))
                }
                Some(Done::Notify(tx)) => {
                    let _ = tx.send(result.clone());
                }
                None => {}
            }
        }
    }
    if let (Some(last), None) = (take_unsaved(unsaved), &failed) {
        if let Err(e) = commit_group(db, dir, &[last]) {
            tracing::warn!(error = %e, "the committed index was not saved at close");
        }
    }
}

fn commit_group(db: &Database, dir: &DirFormat, ops: &[Op]) -> Result<(), redb::Error> {
    // The data dir's identity allows every entry's format before the first one is written.
    let newest = ops
        .iter()
        .filter_map(|op| match &op.write {
            Write::Entries(entries) => entries.iter().filter_map(entry_format).max(),
            _ => None,
        })
        .max();
    if let Some(format) = newest {
        dir.allow(format).map_err(redb::Error::Io)?;
    }
    let txn = db.begin_write()?;
    {
        let mut log = txn.open_table(LOG)?;
        let mut meta = txn.open_table(META)?;
        for op in ops {
            match &op.write {
                Write::Entries(entries) => {
                    for e in entries {
                        log.insert(e.log_id.index, encode(e)?.as_slice())?;
                    }
                }
                Write::Truncate(index) => {
                    log.retain_in(*index.., |_, _| false)?;
                }
                Write::Purge(log_id) => {
                    meta.insert(KEY_PURGED, encode(log_id)?.as_slice())?;
                    log.retain_in(..=log_id.index, |_, _| false)?;
                }
                Write::Meta(key, bytes) => {
                    meta.insert(*key, bytes.as_slice())?;
                }
            }
        }
    }
    txn.commit()?;
    Ok(())
}

/// The store format an entry is written in: its batch's (other entries are openraft's own).
fn entry_format(entry: &Entry<TypeConfig>) -> Option<u32> {
    match &entry.payload {
        openraft::EntryPayload::Normal(batch) => Some(batch.format),
        _ => None,
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        let mem = self.mem();
        Ok(mem.entries.range(range).map(|(_, e)| e.clone()).collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let mem = self.mem();
        let last = mem
            .entries
            .last_key_value()
            .map(|(_, e)| e.log_id)
            .or(mem.last_purged);
        Ok(LogState {
            last_purged_log_id: mem.last_purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        let bytes = encode(vote).map_err(write_err)?;
        self.mem().vote = Some(*vote);
        self.durable(Write::Meta(KEY_VOTE, bytes)).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        Ok(self.mem().vote)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<NodeId>>,
    ) -> Result<(), StorageError<NodeId>> {
        // Optional durability (openraft re-learns the commit index from the leader); it rides
        // along with the next group commit instead of costing an fsync of its own.
        let bytes = encode(&committed).map_err(write_err)?;
        // Written by whichever commit takes it, possibly before entries queued earlier are:
        // safe because openraft (0.9) commits only entries this log has reported flushed
        // (it waits for each append's flush before its next command), so every entry the
        // value covers is on disk already. Truncates and purges queued earlier never touch
        // committed entries.
        let mut mem = self.mem();
        mem.committed = committed;
        // Under the memory lock, so that two callers leave the later value to be written.
        *self
            .unsaved_committed
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(bytes);
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        Ok(self.mem().committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<_> = entries.into_iter().collect();
        {
            let mut mem = self.mem();
            for e in &entries {
                mem.entries.insert(e.log_id.index, e.clone());
            }
        }
        self.submit(Write::Entries(entries), Some(Done::Flushed(callback)))
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.mem().entries.split_off(&log_id.index);
        self.submit(Write::Truncate(log_id.index), None)
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        {
            let mut mem = self.mem();
            let keep = mem.entries.split_off(&(log_id.index + 1));
            mem.entries = keep;
            mem.last_purged = Some(log_id);
        }
        self.submit(Write::Purge(log_id), None)
    }
}
