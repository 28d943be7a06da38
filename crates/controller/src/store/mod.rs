//! Durable storage: the Raft log, vote and snapshots in one redb file per controller, and the
//! in-memory state machine restored from the latest snapshot.
//!
//! redb commits fsync before they return, and its calls block: every storage call runs on the
//! blocking pool with a whole batch in one transaction, never on the async threads.

pub mod backup;
pub mod format;
mod log;
mod state_machine;

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::{AnyError, StorageError, StorageIOError};
use redb::{Database, ReadableDatabase, TableDefinition};
use serde::{Deserialize, Serialize};

pub use format::{DirFormat, OLDEST_FORMAT, STORE_FORMAT};
pub use log::LogStore;
pub use state_machine::{Published, SharedState, StateMachineStore, EVENT_BACKLOG};

use crate::state::{Command, Outcome};

/// A batch of commands proposed as one Raft entry: batching is what lets many concurrent
/// submits share one log append and one fsync on every replica. Encoded in its `format`
/// ([`format`]: the serde impls are there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// Wall-clock milliseconds stamped by the proposing primary.
    pub at_ms: u64,
    /// The store format it is written in: the cluster's active version when it was proposed
    /// (or the version a `RaiseVersion` in it raises to), kept wherever it goes.
    pub format: u32,
    pub commands: Vec<Command>,
}

/// The outcomes of a batch, one per command, in order.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BatchOutcome {
    pub outcomes: Vec<Outcome>,
}

openraft::declare_raft_types!(
    /// openraft's type configuration for xce.
    pub TypeConfig:
        D = Batch,
        R = BatchOutcome,
        SnapshotData = Cursor<Vec<u8>>,
);

/// Raft node ids: 1 + the position of the controller in the peers list.
pub type NodeId = u64;

pub(crate) const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("raft_log");
pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

/// The file, beside the store, that names the controller a data dir belongs to.
pub const IDENTITY_FILE: &str = "identity.json";
pub(crate) const KEY_VOTE: &str = "vote";
pub(crate) const KEY_COMMITTED: &str = "committed";
pub(crate) const KEY_PURGED: &str = "last_purged";
pub(crate) const KEY_SNAPSHOT_META: &str = "snapshot_meta";
pub(crate) const KEY_SNAPSHOT_DATA: &str = "snapshot_data";

/// Who a data directory belongs to. Written on first start (as `identity.json`) and checked on every start, so a
/// controller never runs on another controller's (or another cluster's) data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub name: String,
    pub node_id: NodeId,
    /// `name=host:port` of every candidate, in order.
    pub peers: Vec<String>,
    /// The newest store format any record in this data dir may be in (raised before the
    /// first record of a newer one is written, [`DirFormat`]; absent, so 0, in data dirs from
    /// before formats were numbered). A build refuses a dir of a format it does not read.
    #[serde(default)]
    pub format: u32,
}

/// Why the store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("create data dir {path}: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("data dir {path} is not writable: {source}")]
    NotWritable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("open store {path}: {detail} (the file is kept as it is; restore it or move it away)")]
    Corrupt { path: PathBuf, detail: String },
    #[error("data dir {path} is in use by another running controller")]
    InUse { path: PathBuf },
    #[error("data dir {path} belongs to {found}, not to {expected}; refusing to use it")]
    Foreign {
        path: PathBuf,
        found: String,
        expected: String,
    },
    #[error("data dir {path} holds store format {found}, and this xce-controller reads formats {OLDEST_FORMAT} to {STORE_FORMAT}: {}", format_advice(*found))]
    Format { path: PathBuf, found: u32 },
}

/// What to do about a data dir of a format this build does not read.
fn format_advice(found: u32) -> &'static str {
    if found > STORE_FORMAT {
        "it was written by a newer build, after its cluster's version was raised; run that build (or newer) on it"
    } else {
        "it is older than any format this build converts; upgrade through an intermediate release, or move the data dir away to start this controller afresh"
    }
}

/// The opened store: the log store and the state machine over one database.
pub struct Store {
    pub log: LogStore,
    pub state_machine: StateMachineStore,
    /// The data dir's identity, whose format the two raise before writing a newer one.
    pub dir_format: Arc<DirFormat>,
}

/// Opens (or creates) the store in `dir` and checks that it belongs to `identity`.
pub async fn open(dir: &Path, identity: &Identity) -> Result<Store, OpenError> {
    let dir = dir.to_path_buf();
    let identity = identity.clone();
    let (db, dir_format) = tokio::task::spawn_blocking(move || open_db(&dir, &identity))
        .await
        .map_err(|e| OpenError::Corrupt {
            path: PathBuf::new(),
            detail: format!("storage thread failed: {e}"),
        })??;
    let db = Arc::new(db);
    let dir_format = Arc::new(dir_format);
    let state_machine = StateMachineStore::open(db.clone(), dir_format.clone())
        .await
        .map_err(|e| OpenError::Corrupt {
            path: PathBuf::from("snapshot"),
            detail: e.to_string(),
        })?;
    let log_db = db.clone();
    let log_format = dir_format.clone();
    let log = tokio::task::spawn_blocking(move || LogStore::open(log_db, log_format))
        .await
        .map_err(|e| OpenError::Corrupt {
            path: PathBuf::new(),
            detail: format!("storage thread failed: {e}"),
        })?
        .map_err(|e| OpenError::Corrupt {
            path: PathBuf::from("raft log"),
            detail: e.to_string(),
        })?;
    Ok(Store {
        log,
        state_machine,
        dir_format,
    })
}

fn open_db(dir: &Path, identity: &Identity) -> Result<(Database, DirFormat), OpenError> {
    std::fs::create_dir_all(dir).map_err(|source| OpenError::CreateDir {
        path: dir.to_path_buf(),
        source,
    })?;
    let probe = dir.join(".xce-write-probe");
    std::fs::write(&probe, b"probe")
        .and_then(|()| std::fs::remove_file(&probe))
        .map_err(|source| OpenError::NotWritable {
            path: dir.to_path_buf(),
            source,
        })?;
    let found = check_identity(dir, identity)?;
    let dir_format = DirFormat::new(dir.join(IDENTITY_FILE), found);
    let path = dir.join("xce.redb");
    let corrupt = |detail: String| OpenError::Corrupt {
        path: path.clone(),
        detail,
    };
    let db = match open_or_create(&path) {
        Ok(db) => db,
        Err(redb::DatabaseError::DatabaseAlreadyOpen) => {
            return Err(OpenError::InUse {
                path: dir.to_path_buf(),
            })
        }
        Err(e) => return Err(corrupt(e.to_string())),
    };
    let txn = db.begin_write().map_err(|e| corrupt(e.to_string()))?;
    txn.open_table(LOG).map_err(|e| corrupt(e.to_string()))?;
    txn.open_table(META).map_err(|e| corrupt(e.to_string()))?;
    txn.commit().map_err(|e| corrupt(e.to_string()))?;
    Ok((db, dir_format))
}

/// Checks (or, in a new data dir, writes) `identity.json` before the store is opened at all, so
/// that a foreign data dir, or one of a format this build does not read, is refused without a
/// single byte of it changing. Returns the identity as it stands in the dir. A new data dir
/// is written at the oldest format this build writes: what is written in it later raises it.
fn check_identity(dir: &Path, identity: &Identity) -> Result<Identity, OpenError> {
    let path = dir.join(IDENTITY_FILE);
    let corrupt = |detail: String| OpenError::Corrupt {
        path: path.clone(),
        detail,
    };
    match std::fs::read(&path) {
        Ok(bytes) => {
            let found: Identity =
                serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
            if !(OLDEST_FORMAT..=STORE_FORMAT).contains(&found.format) {
                return Err(OpenError::Format {
                    path: dir.to_path_buf(),
                    found: found.format,
                });
            }
            if !same_controller(&found, identity) {
                return Err(OpenError::Foreign {
                    path: dir.to_path_buf(),
                    found: describe(&found),
                    expected: describe(identity),
                });
            }
            Ok(found)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if dir.join("xce.redb").exists() {
                return Err(corrupt(
                    "missing, but the data dir holds a store (xce.redb) of an unknown controller"
                        .into(),
                ));
            }
            let new = Identity {
                format: OLDEST_FORMAT,
                ..identity.clone()
            };
            write_identity(&path, &new).map_err(|e| corrupt(e.to_string()))?;
            Ok(new)
        }
        Err(e) => Err(corrupt(e.to_string())),
    }
}

/// Writes `identity.json` durably: a temporary file beside it, fsynced, renamed over it, and
/// the dir fsynced, so a crash leaves the old identity or the new one, never neither.
pub(crate) fn write_identity(path: &Path, identity: &Identity) -> std::io::Result<()> {
    let bytes = serde_json::to_vec_pretty(identity).map_err(std::io::Error::other)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(".identity.json.tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

/// redb's page cache. The live log is served from memory and the snapshot is read once at
/// start, so a large cache only holds a copy of the snapshot: its default (1 GiB) cost a
/// controller with 1,000,000 jobs 256 MiB of RSS.
const CACHE_BYTES: usize = 32 * 1024 * 1024;

fn open_or_create(path: &Path) -> Result<Database, redb::DatabaseError> {
    let mut builder = Database::builder();
    builder.set_cache_size(CACHE_BYTES);
    if path.exists() {
        builder.open(path)
    } else {
        builder.create(path)
    }
}

/// Reads one META value stored as raw bytes (the snapshot: already encoded).
pub(crate) fn get_raw(db: &Database, key: &str) -> Result<Option<Vec<u8>>, redb::Error> {
    let txn = db.begin_read()?;
    let table = txn.open_table(META)?;
    let value = table.get(key)?;
    Ok(value.map(|v| v.value().to_vec()))
}

/// Whether a data dir's identity is this controller's: the same name and node id, of the same
/// cluster. The candidate list may have changed (controllers added and removed since), but
/// one at a time, so the lists still share another member.
fn same_controller(found: &Identity, me: &Identity) -> bool {
    let others = |id: &Identity| -> std::collections::BTreeSet<String> {
        let me = format!("{}=", id.name);
        id.peers
            .iter()
            .filter(|p| !p.starts_with(&me))
            .cloned()
            .collect()
    };
    let shared = others(found).intersection(&others(me)).count();
    found.name == me.name && found.node_id == me.node_id && (shared > 0 || found.peers == me.peers)
}

fn describe(id: &Identity) -> String {
    format!("controller {} of cluster [{}]", id.name, id.peers.join(","))
}

/// Runs a blocking redb call on the blocking pool.
pub(crate) async fn blocking<T, F>(db: &Arc<Database>, f: F) -> Result<T, redb::Error>
where
    T: Send + 'static,
    F: FnOnce(&Database) -> Result<T, redb::Error> + Send + 'static,
{
    let db = db.clone();
    tokio::task::spawn_blocking(move || f(&db))
        .await
        .map_err(|e| redb::Error::Io(std::io::Error::other(e.to_string())))?
}

/// Encodes a value for storage (log entries, vote, snapshots) with postcard: maintained, a
/// stable documented wire format (1.0), compact (varints, no field names), and it needs no
/// schema beside the serde types, which for our own data are the record types of
/// `state::stored`. (bincode 1, used before, is unmaintained.)
pub(crate) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, redb::Error> {
    postcard::to_stdvec(value).map_err(|e| redb::Error::Io(std::io::Error::other(e.to_string())))
}

/// Decodes a stored value.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, redb::Error> {
    postcard::from_bytes(bytes).map_err(|e| {
        redb::Error::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("corrupt record: {e}"),
        ))
    })
}

/// Whether `bytes` decode as a snapshot of a state that keeps its rules: what a received snapshot must pass
/// before anything is replaced by it.
pub fn check_snapshot(bytes: &[u8]) -> Result<(), String> {
    let record = crate::state::decode_state(bytes).map_err(|e| e.to_string())?;
    crate::state::State::try_from_record(record).map(drop)
}

/// A snapshot that decodes but breaks the state's rules, as a storage error.
pub(crate) fn corrupt_snapshot(reason: &str) -> redb::Error {
    redb::Error::Io(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("snapshot breaks the state's rules: {reason}"),
    ))
}

/// Maps a storage failure into openraft's error for a read.
pub(crate) fn read_err(e: redb::Error) -> StorageError<NodeId> {
    StorageIOError::read(AnyError::new(&e)).into()
}

/// Maps a storage failure into openraft's error for a write.
pub(crate) fn write_err(e: redb::Error) -> StorageError<NodeId> {
    StorageIOError::write(AnyError::new(&e)).into()
}

/// Reads one META value.
pub(crate) fn get_meta<T: serde::de::DeserializeOwned>(
    db: &Database,
    key: &str,
) -> Result<Option<T>, redb::Error> {
    let txn = db.begin_read()?;
    let table = txn.open_table(META)?;
    let value = table.get(key)?;
    value.map(|v| decode(v.value())).transpose()
}

#[cfg(test)]
mod tests;
