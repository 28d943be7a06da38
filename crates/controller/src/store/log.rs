//! The Raft log store (openraft storage v2) over redb.

use std::fmt::Debug;
use std::ops::RangeBounds;
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{Entry, LogId, OptionalSend, RaftLogReader, StorageError, Vote};
use redb::{Database, ReadableDatabase, ReadableTable};

use super::{
    blocking, decode, encode, get_meta, read_err, write_err, NodeId, TypeConfig, KEY_COMMITTED,
    KEY_PURGED, KEY_VOTE, LOG, META,
};

/// The log, vote and committed index. Clones share the database; the log reader openraft asks
/// for is just another clone.
#[derive(Clone)]
pub struct LogStore {
    db: Arc<Database>,
}

impl LogStore {
    pub(crate) fn new(db: Arc<Database>) -> Self {
        LogStore { db }
    }

    async fn put_meta<T: serde::Serialize>(
        &self,
        key: &'static str,
        value: &T,
    ) -> Result<(), StorageError<NodeId>> {
        let bytes = encode(value).map_err(write_err)?;
        blocking(&self.db, move |db| {
            let txn = db.begin_write()?;
            txn.open_table(META)?.insert(key, bytes.as_slice())?;
            txn.commit()?;
            Ok(())
        })
        .await
        .map_err(write_err)
    }

    async fn meta<T>(&self, key: &'static str) -> Result<Option<T>, StorageError<NodeId>>
    where
        T: serde::de::DeserializeOwned + Send + 'static,
    {
        blocking(&self.db, move |db| get_meta(db, key))
            .await
            .map_err(read_err)
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        let start = range.start_bound().cloned();
        let end = range.end_bound().cloned();
        blocking(&self.db, move |db| {
            let txn = db.begin_read()?;
            let table = txn.open_table(LOG)?;
            let mut out = Vec::new();
            for item in table.range::<u64>((start, end))? {
                let (_, v) = item?;
                out.push(decode(v.value())?);
            }
            Ok(out)
        })
        .await
        .map_err(read_err)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        blocking(&self.db, |db| {
            let last_purged: Option<LogId<NodeId>> = get_meta(db, KEY_PURGED)?;
            let txn = db.begin_read()?;
            let table = txn.open_table(LOG)?;
            let last = match table.last()? {
                Some((_, v)) => Some(decode::<Entry<TypeConfig>>(v.value())?.log_id),
                None => last_purged,
            };
            Ok(LogState {
                last_purged_log_id: last_purged,
                last_log_id: last,
            })
        })
        .await
        .map_err(read_err)
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.put_meta(KEY_VOTE, vote).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        self.meta(KEY_VOTE).await
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<NodeId>>,
    ) -> Result<(), StorageError<NodeId>> {
        self.put_meta(KEY_COMMITTED, &committed).await
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        Ok(self
            .meta::<Option<LogId<NodeId>>>(KEY_COMMITTED)
            .await?
            .flatten())
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
        let encoded = entries
            .into_iter()
            .map(|e| Ok((e.log_id.index, encode(&e)?)))
            .collect::<Result<Vec<_>, redb::Error>>()
            .map_err(write_err)?;
        // One transaction for the whole batch; redb's commit fsyncs before it returns, and only
        // then is the append reported complete.
        let result = blocking(&self.db, move |db| {
            let txn = db.begin_write()?;
            {
                let mut table = txn.open_table(LOG)?;
                for (index, bytes) in &encoded {
                    table.insert(*index, bytes.as_slice())?;
                }
            }
            txn.commit()?;
            Ok(())
        })
        .await;
        match result {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(write_err(e))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        blocking(&self.db, move |db| {
            let txn = db.begin_write()?;
            txn.open_table(LOG)?
                .retain_in(log_id.index.., |_, _| false)?;
            txn.commit()?;
            Ok(())
        })
        .await
        .map_err(write_err)
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let purged = encode(&log_id).map_err(write_err)?;
        blocking(&self.db, move |db| {
            let txn = db.begin_write()?;
            txn.open_table(META)?
                .insert(KEY_PURGED, purged.as_slice())?;
            txn.open_table(LOG)?
                .retain_in(..=log_id.index, |_, _| false)?;
            txn.commit()?;
            Ok(())
        })
        .await
        .map_err(write_err)
    }
}
