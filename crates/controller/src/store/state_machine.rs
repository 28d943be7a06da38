//! The state machine adapter: applies committed batches to the in-memory [`State`] and builds,
//! stores and installs snapshots. The state itself is shared read-only with the service, which
//! serves linearizable reads from it, and the events each applied entry emitted are published
//! with that entry's log index (on every node; only the ready primary acts on them).

use std::io::Cursor;
use std::sync::{Arc, RwLock, RwLockReadGuard};

use openraft::storage::{RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{
    AnyError, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, StorageError,
    StorageIOError, StoredMembership,
};
use redb::{Database, ReadableTable};
use tokio::sync::broadcast;

use super::{
    blocking, decode, encode, get_meta, get_raw, read_err, write_err, BatchOutcome, DirFormat,
    NodeId, TypeConfig, KEY_SNAPSHOT_DATA, KEY_SNAPSHOT_META, META,
};
use crate::state::{decode_state, Event, State};

/// How many applied entries' events a slow receiver may fall behind by before it misses some
/// (it is told how many: `RecvError::Lagged`). Also what the stream holds in memory whether
/// or not anyone listens: a full batch (2048 submits) is a few hundred KB of events.
pub const EVENT_BACKLOG: usize = 256;

/// The events one applied log entry emitted.
#[derive(Debug)]
pub struct Published {
    /// The log index of the entry.
    pub index: u64,
    pub events: Vec<Event>,
}

type Membership = StoredMembership<NodeId, openraft::BasicNode>;

/// What has been applied: the state and the log position it reflects.
#[derive(Debug, Clone, Default)]
pub struct Applied {
    pub last_applied: Option<LogId<NodeId>>,
    pub membership: Membership,
    pub state: State,
}

/// Read access to the applied state, and the stream of its events, for the service.
#[derive(Clone)]
pub struct SharedState {
    applied: Arc<RwLock<Applied>>,
    events: broadcast::Sender<Arc<Published>>,
}

impl SharedState {
    fn new(applied: Applied) -> SharedState {
        SharedState {
            applied: Arc::new(RwLock::new(applied)),
            events: broadcast::Sender::new(EVENT_BACKLOG),
        }
    }

    /// Read-locks the applied state. A poisoned lock means an apply panicked half-way; the
    /// process is going down with that panic, so reading the data as it stands is acceptable.
    pub fn read(&self) -> RwLockReadGuard<'_, Applied> {
        self.applied.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Applied> {
        self.applied.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Every entry's events from now on, in log order.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Published>> {
        self.events.subscribe()
    }
}

/// openraft's state machine over [`State`], persisting snapshots in the store.
#[derive(Clone)]
pub struct StateMachineStore {
    db: Arc<Database>,
    /// The data dir's identity: raised before a snapshot of a newer format is stored.
    dir: Arc<DirFormat>,
    applied: SharedState,
    /// Where each entry's apply time goes, when someone watches it.
    apply_seconds: Option<prometheus_client::metrics::histogram::Histogram>,
    /// Where retired jobs go (`history`), once the controller opened it.
    history: Option<crate::history::History>,
}

impl StateMachineStore {
    /// Restores the state from the stored snapshot, if any; openraft re-applies the log after it.
    pub(crate) async fn open(db: Arc<Database>, dir: Arc<DirFormat>) -> Result<Self, redb::Error> {
        let stored = blocking(&db, |db| {
            let meta: Option<SnapshotMeta<NodeId, openraft::BasicNode>> =
                get_meta(db, KEY_SNAPSHOT_META)?;
            let data = get_raw(db, KEY_SNAPSHOT_DATA)?;
            Ok(meta.zip(data))
        })
        .await?;
        let applied = match stored {
            Some((meta, data)) => Applied {
                last_applied: meta.last_log_id,
                membership: meta.last_membership,
                state: State::try_from_record(decode_state(&data)?)
                    .map_err(|e| super::corrupt_snapshot(&e))?,
            },
            None => Applied::default(),
        };
        Ok(StateMachineStore {
            db,
            dir,
            applied: SharedState::new(applied),
            apply_seconds: None,
            history: None,
        })
    }

    /// Records how long each entry takes to apply in `histogram`.
    pub fn observe_apply(&mut self, histogram: prometheus_client::metrics::histogram::Histogram) {
        self.apply_seconds = Some(histogram);
    }

    /// Writes every job the applied entries retire to `history`.
    pub fn keep_history(&mut self, history: crate::history::History) {
        self.history = Some(history);
    }

    /// The state the service reads.
    pub fn shared(&self) -> SharedState {
        self.applied.clone()
    }

    /// Stores a snapshot (unless a newer one is stored) and hands its bytes back, so that a
    /// snapshot being built is never held twice.
    async fn save_snapshot(
        &self,
        meta: &SnapshotMeta<NodeId, openraft::BasicNode>,
        data: Vec<u8>,
    ) -> Result<Vec<u8>, StorageError<NodeId>> {
        let meta_bytes = encode(meta).map_err(write_err)?;
        let last = meta.last_log_id;
        let format = super::format::split_mark(&data)
            .map_err(|e| write_err(e.into()))?
            .0;
        let dir = self.dir.clone();
        blocking(&self.db, move |db| {
            dir.allow(format)?;
            let txn = db.begin_write()?;
            {
                let mut table = txn.open_table(META)?;
                // A snapshot build races with a snapshot install: never let an older snapshot
                // replace a newer one (the log behind the newer one is already purged).
                let stored: Option<SnapshotMeta<NodeId, openraft::BasicNode>> = table
                    .get(KEY_SNAPSHOT_META)?
                    .map(|v| decode(v.value()))
                    .transpose()?;
                if stored.is_some_and(|s| s.last_log_id > last) {
                    return Ok(data);
                }
                table.insert(KEY_SNAPSHOT_META, meta_bytes.as_slice())?;
                table.insert(KEY_SNAPSHOT_DATA, data.as_slice())?;
            }
            txn.commit()?;
            Ok(data)
        })
        .await
        .map_err(write_err)
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachineStore {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let (last_applied, membership, state) = {
            let applied = self.applied.read();
            (
                applied.last_applied,
                applied.membership.clone(),
                applied.state.clone(),
            )
        };
        // The copy shares its jobs with the live state (copied on write), so taking it under
        // the lock is cheap; encoding it runs on the blocking pool.
        let data = tokio::task::spawn_blocking(move || {
            state
                .snapshot_bytes()
                .map_err(|e| redb::Error::Io(std::io::Error::other(e.to_string())))
        })
        .await
        .map_err(|e| StorageIOError::write_state_machine(AnyError::new(&e)))?
        .map_err(write_err)?;
        let snapshot_id = match last_applied {
            Some(id) => format!(
                "{}-{}-{}",
                id.leader_id.term, id.leader_id.node_id, id.index
            ),
            None => "empty".to_string(),
        };
        let meta = SnapshotMeta {
            last_log_id: last_applied,
            last_membership: membership,
            snapshot_id,
        };
        let data = self.save_snapshot(&meta, data).await?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl StateMachineStore {
    /// Applies entries under the state's write lock, handing the jobs they retired to the
    /// history store before the lock is released; returns their outcomes and how many
    /// retired.
    fn apply_entries(
        &self,
        entries: impl IntoIterator<Item = Entry<TypeConfig>>,
    ) -> (Vec<BatchOutcome>, usize) {
        let mut applied = self.applied.write();
        let mut out = Vec::new();
        let mut retired = Vec::new();
        for entry in entries {
            let started = std::time::Instant::now();
            applied.last_applied = Some(entry.log_id);
            let outcome = match entry.payload {
                EntryPayload::Blank => BatchOutcome::default(),
                EntryPayload::Normal(batch) => {
                    let mut events = Vec::new();
                    let outcomes = batch
                        .commands
                        .into_iter()
                        .map(|cmd| applied.state.apply_into(batch.at_ms, cmd, &mut events))
                        .collect();
                    retired.extend(events.iter().filter_map(|e| match e {
                        Event::Retired { seq, job, script } => Some(crate::history::Retired {
                            seq: *seq,
                            id: job.id,
                            job: Some(job.clone()),
                            script: script.clone(),
                        }),
                        _ => None,
                    }));
                    if !events.is_empty() {
                        // No receiver (nobody subscribed yet) is not an error.
                        let _ = self.applied.events.send(Arc::new(Published {
                            index: entry.log_id.index,
                            events,
                        }));
                    }
                    BatchOutcome { outcomes }
                }
                EntryPayload::Membership(m) => {
                    applied.membership = StoredMembership::new(Some(entry.log_id), m);
                    BatchOutcome::default()
                }
            };
            out.push(outcome);
            if let Some(h) = &self.apply_seconds {
                h.observe(started.elapsed().as_secs_f64());
            }
        }
        // Handed to the history store before the state is released, so that a read of a
        // job that just retired finds it there.
        let count = retired.len();
        if let Some(history) = &self.history {
            history.stage(retired);
        }
        (out, count)
    }
}

/// Writes retired jobs to the history store, off the async threads. A failure (a full disk)
/// never fails the apply: the store keeps them to write with the next, and says so.
async fn write_history(history: crate::history::History, jobs: usize) {
    let outcome = tokio::task::spawn_blocking(move || {
        // What the apply staged.
        let written = history.write(Vec::new());
        (written, history.unwritten())
    })
    .await;
    match outcome {
        Ok((Ok(()), _)) => tracing::debug!(jobs, "retired jobs written to history"),
        Ok((Err(e), unwritten)) => {
            tracing::warn!(error = %e, unwritten, "history: retired jobs not written yet; kept to write with the next")
        }
        Err(e) => tracing::warn!(error = %e, "history: the writing thread failed"),
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = StateMachineStore;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, Membership), StorageError<NodeId>> {
        let applied = self.applied.read();
        Ok((applied.last_applied, applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<BatchOutcome>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let (out, retired) = self.apply_entries(entries);
        if let Some(history) = self.history.clone().filter(|_| retired > 0) {
            write_history(history, retired).await;
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, openraft::BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let data = snapshot.into_inner();
        let record = decode_state(&data).map_err(|e| read_err(e.into()))?;
        let state =
            State::try_from_record(record).map_err(|e| read_err(super::corrupt_snapshot(&e)))?;
        self.save_snapshot(meta, data).await?;
        tracing::info!(
            index = meta.last_log_id.map_or(0, |l| l.index),
            jobs = state.job_count(),
            "installed a snapshot from the primary"
        );
        let mut applied = self.applied.write();
        applied.last_applied = meta.last_log_id;
        applied.membership = meta.last_membership.clone();
        applied.state = state;
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        let stored = blocking(&self.db, |db| {
            let meta: Option<SnapshotMeta<NodeId, openraft::BasicNode>> =
                get_meta(db, KEY_SNAPSHOT_META)?;
            let data = get_raw(db, KEY_SNAPSHOT_DATA)?;
            Ok(meta.zip(data))
        })
        .await
        .map_err(read_err)?;
        Ok(stored.map(|(meta, data)| Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        }))
    }
}
