//! The store through openraft's storage conformance suite, plus restart and identity checks.

use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;

use super::*;

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, tempfile::TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachineStore), StorageError<NodeId>> {
        let dir = tempfile::tempdir().map_err(|e| StorageIOError::write(AnyError::new(&e)))?;
        let store = open(dir.path(), &identity("c1"))
            .await
            .map_err(|e| StorageIOError::write(AnyError::error(e.to_string())))?;
        Ok((dir, store.log, store.state_machine))
    }
}

fn identity(name: &str) -> Identity {
    Identity {
        name: name.into(),
        node_id: 1,
        peers: vec!["c1=127.0.0.1:1".into(), "c2=127.0.0.1:2".into()],
        format: STORE_FORMAT,
    }
}

#[tokio::test]
async fn refuses_a_data_dir_of_another_store_format_and_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path(), &identity("c1")).await.unwrap());
    // As written before formats were numbered: no `format` field.
    let path = dir.path().join(IDENTITY_FILE);
    let mut old: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    old.as_object_mut().unwrap().remove("format");
    let old = serde_json::to_vec(&old).unwrap();
    std::fs::write(&path, &old).unwrap();
    let store_before = std::fs::read(dir.path().join("xce.redb")).unwrap();
    let msg = open(dir.path(), &identity("c1"))
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("store format 0")
            && msg.contains(&format!("reads formats {OLDEST_FORMAT} to {STORE_FORMAT}"))
            && msg.contains("older than any format this build converts"),
        "{msg}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), old);
    // A newer build's data dir (its cluster's version raised past this build's) is refused
    // by name too, untouched.
    let mut newer: serde_json::Value = serde_json::from_slice(&old).unwrap();
    newer["format"] = serde_json::json!(STORE_FORMAT + 1);
    let newer = serde_json::to_vec(&newer).unwrap();
    std::fs::write(&path, &newer).unwrap();
    let msg = open(dir.path(), &identity("c1"))
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        msg.contains(&format!("store format {}", STORE_FORMAT + 1))
            && msg.contains("written by a newer build"),
        "{msg}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), newer);
    assert_eq!(
        std::fs::read(dir.path().join("xce.redb")).unwrap(),
        store_before
    );
}

/// A new data dir is at the oldest format this build writes, readable by the older build,
/// until the first record of a newer format is written in it; then its identity says so
/// first, so the older build refuses it.
#[tokio::test]
async fn a_data_dir_names_the_newest_format_written_in_it() {
    use openraft::{CommittedLeaderId, EntryPayload, LogId};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(IDENTITY_FILE);
    let format_of = || -> u32 {
        let id: Identity = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        id.format
    };
    let Store { log, .. } = open(dir.path(), &identity("c1")).await.unwrap();
    assert_eq!(format_of(), OLDEST_FORMAT);
    let entry = |index, format| openraft::Entry::<TypeConfig> {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Batch {
            at_ms: 1,
            format,
            commands: vec![crate::state::Command::HostLost { name: "w1".into() }],
        }),
    };
    log.append_durably(vec![entry(1, OLDEST_FORMAT)])
        .await
        .unwrap();
    assert_eq!(format_of(), OLDEST_FORMAT);
    log.append_durably(vec![entry(2, STORE_FORMAT)])
        .await
        .unwrap();
    assert_eq!(format_of(), STORE_FORMAT);
    drop(log);
    // Both entries read back, each in its own format.
    let Store { mut log, .. } = open(dir.path(), &identity("c1")).await.unwrap();
    use openraft::RaftLogReader;
    let entries = log.try_get_log_entries(1..3).await.unwrap();
    let formats: Vec<u32> = entries
        .iter()
        .map(|e| match &e.payload {
            EntryPayload::Normal(b) => b.format,
            _ => 0,
        })
        .collect();
    assert_eq!(formats, [OLDEST_FORMAT, STORE_FORMAT]);
}

#[test]
fn passes_openraft_storage_suite() -> Result<(), StorageError<NodeId>> {
    Suite::test_all(Builder)
}

#[tokio::test]
async fn refuses_a_foreign_data_dir_and_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path(), &identity("c1")).await.unwrap());
    let err = open(dir.path(), &identity("c2")).await.err().unwrap();
    let msg = err.to_string();
    assert!(msg.contains("belongs to controller c1"), "{msg}");
    assert!(msg.contains("not to controller c2"), "{msg}");
    // Still usable by its owner.
    open(dir.path(), &identity("c1")).await.unwrap();
}

#[tokio::test]
async fn refuses_a_corrupted_store_without_touching_it() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path(), &identity("c1")).await.unwrap());
    let file = dir.path().join("xce.redb");
    std::fs::write(&file, b"this is not a redb file at all, it is garbage").unwrap();
    let err = open(dir.path(), &identity("c1")).await.err().unwrap();
    assert!(matches!(err, OpenError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("xce.redb"), "{err}");
    assert_eq!(
        std::fs::read(&file).unwrap(),
        b"this is not a redb file at all, it is garbage"
    );
}

#[tokio::test]
async fn refuses_an_unwritable_data_dir() {
    // Root ignores permission bits, so use a path under a regular file instead.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain-file");
    std::fs::write(&file, b"x").unwrap();
    let err = open(&file.join("data"), &identity("c1"))
        .await
        .err()
        .unwrap();
    assert!(err.to_string().contains("plain-file"), "{err}");
}

#[tokio::test]
async fn snapshot_round_trips_through_a_restart() {
    use crate::state::Command;
    use openraft::storage::RaftStateMachine;
    use openraft::{CommittedLeaderId, EntryPayload, LogId, RaftSnapshotBuilder};
    use xce_client::types::{JobSpec, RequestToken};

    let dir = tempfile::tempdir().unwrap();
    let Store {
        log,
        state_machine: mut sm,
        ..
    } = open(dir.path(), &identity("c1")).await.unwrap();
    let batch = Batch {
        at_ms: 5,
        format: crate::store::STORE_FORMAT,
        commands: (0..3)
            .map(|i| Command::Submit {
                token: RequestToken(i),
                spec: JobSpec {
                    command: vec!["true".into()],
                    ..JobSpec::default()
                },
                script: None,
            })
            .collect(),
    };
    let log_id = LogId::new(CommittedLeaderId::new(1, 1), 1);
    let mut events = sm.shared().subscribe();
    let out = sm
        .apply(vec![openraft::Entry {
            log_id,
            payload: EntryPayload::Normal(batch),
        }])
        .await
        .unwrap();
    assert_eq!(out[0].outcomes.len(), 3);
    // The entry's events are published with its log index: one per new job.
    let published = events.try_recv().unwrap();
    assert_eq!(published.index, 1);
    assert_eq!(published.events.len(), 3);
    let snap = sm.build_snapshot().await.unwrap();
    assert_eq!(snap.meta.last_log_id, Some(log_id));
    let before = sm.shared().read().state.clone();
    drop((sm, log));

    let mut reopened = open(dir.path(), &identity("c1"))
        .await
        .unwrap()
        .state_machine;
    let (applied, _) = reopened.applied_state().await.unwrap();
    assert_eq!(applied, Some(log_id));
    assert_eq!(reopened.shared().read().state, before);
    assert_eq!(reopened.shared().read().state.job_count(), 3);
}

/// The committed index is never queued to the writer on its own (each one cost a commit and
/// fsync on every replica per Raft round): the next commit something durable needs takes it,
/// and close writes the last one.
#[tokio::test]
async fn the_committed_index_rides_with_the_next_durable_write_and_is_saved_at_close() {
    use openraft::storage::RaftLogStorage;
    use openraft::{CommittedLeaderId, LogId, Vote};

    let dir = tempfile::tempdir().unwrap();
    let Store {
        mut log,
        state_machine,
        ..
    } = open(dir.path(), &identity("c1")).await.unwrap();
    let before = log.queued();
    let first = Some(LogId::new(CommittedLeaderId::new(1, 1), 5));
    log.save_committed(first).await.unwrap();
    assert_eq!(
        log.queued(),
        before,
        "the committed index was sent to the writer"
    );
    assert!(log.committed_waits());
    // A durable write waits for its commit, which took the committed index along.
    log.save_vote(&Vote::new(1, 1)).await.unwrap();
    assert!(
        !log.committed_waits(),
        "the vote's commit left the committed index"
    );
    drop(state_machine);
    drop(log);
    let mut reopened = open(dir.path(), &identity("c1")).await.unwrap().log;
    assert_eq!(reopened.read_committed().await.unwrap(), first);

    // The last one, with nothing durable after it, is written at close.
    let second = Some(LogId::new(CommittedLeaderId::new(1, 1), 9));
    reopened.save_committed(second).await.unwrap();
    drop(reopened);

    let mut reopened = open(dir.path(), &identity("c1")).await.unwrap().log;
    assert_eq!(reopened.read_committed().await.unwrap(), second);
    assert_eq!(reopened.read_vote().await.unwrap(), Some(Vote::new(1, 1)));
}

/// A log entry as stored: openraft's envelope (log id, payload kind) around our `Batch`,
/// whose commands are pinned by the golden test in `state::stored`. This pins the envelope:
/// an openraft upgrade or a change to `Batch` that moves these bytes needs STORE_FORMAT
/// raised.
#[test]
fn a_log_entry_envelope_has_its_golden_bytes() {
    use crate::state::Command;
    use openraft::{CommittedLeaderId, EntryPayload, LogId};

    let entry: openraft::Entry<TypeConfig> = openraft::Entry {
        log_id: LogId::new(CommittedLeaderId::new(7, 2), 42),
        payload: EntryPayload::Normal(Batch {
            at_ms: 1_700_000_000_000,
            // Format 6's bytes are those of the builds before formats were marked.
            format: 6,
            commands: vec![Command::HostLost { name: "w1".into() }],
        }),
    };
    let bytes = encode(&entry).unwrap();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        hex, "07022a0180d095ffbc310109027731",
        "the stored log entry envelope changed: raise store::STORE_FORMAT (now {STORE_FORMAT}) and update this golden value"
    );
    let back: openraft::Entry<TypeConfig> = decode(&bytes).unwrap();
    assert_eq!(back.log_id, entry.log_id);
}
