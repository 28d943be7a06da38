//! The backup file (`xce admin snapshot save FILE`, `restore FILE`): a snapshot's bytes in an
//! envelope of their own — a magic, the store format, the log index it was taken at — so that
//! some other file, a truncated copy or a backup from a build that stores state differently is
//! refused with a message naming why, before anything is replaced.

use serde::{Deserialize, Serialize};

use super::STORE_FORMAT;
use crate::state::StateRecord;

/// The first bytes of every backup file.
pub const MAGIC: &[u8; 8] = b"XCEBKUP\n";

/// The largest backup: a restore travels as one Raft entry, and appends between controllers
/// stay below 32 MiB (`network::raft_client`).
pub const MAX_BACKUP_BYTES: usize = 24 << 20;

/// Why bytes are not a backup this build can restore.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("not an xce backup (it does not start with the backup magic)")]
    NotABackup,
    #[error("a backup of store format {found}; this controller reads format {reads}")]
    Format { found: u32, reads: u32 },
    #[error("the backup is {size} bytes; at most {max} bytes can be saved or restored")]
    TooLarge { size: usize, max: usize },
    #[error("the backup is damaged: {0}")]
    Corrupt(String),
}

/// The envelope after the magic; `format` first, so a backup of another format is told
/// apart before the rest is read.
#[derive(Debug, Serialize, Deserialize)]
struct Envelope {
    format: u32,
    /// The Raft log index the state had applied.
    index: u64,
    /// When it was taken (the primary's clock, ms since the epoch).
    taken_ms: u64,
    /// The snapshot's bytes (`State::snapshot_bytes`).
    state: Vec<u8>,
}

/// A backup as read: the state to restore and where it came from.
#[derive(Debug)]
pub struct Backup {
    pub index: u64,
    pub taken_ms: u64,
    pub state: StateRecord,
}

/// The file for a snapshot's bytes taken at `index`.
pub fn encode(index: u64, taken_ms: u64, state: Vec<u8>) -> Result<Vec<u8>, BackupError> {
    let envelope = Envelope {
        format: STORE_FORMAT,
        index,
        taken_ms,
        state,
    };
    let bytes = MAGIC.to_vec();
    postcard::to_extend(&envelope, bytes).map_or_else(
        |e| Err(BackupError::Corrupt(e.to_string())),
        |bytes| check_size(bytes.len()).map(|()| bytes),
    )
}

fn check_size(size: usize) -> Result<(), BackupError> {
    if size > MAX_BACKUP_BYTES {
        return Err(BackupError::TooLarge {
            size,
            max: MAX_BACKUP_BYTES,
        });
    }
    Ok(())
}

/// Reads a backup file. Its state's rules are checked where every restore is, whatever its
/// source: when the `Restore` command is validated and again when it is applied.
pub fn decode(bytes: &[u8]) -> Result<Backup, BackupError> {
    check_size(bytes.len())?;
    let rest = bytes.strip_prefix(MAGIC).ok_or(BackupError::NotABackup)?;
    let (format, _) = postcard::take_from_bytes::<u32>(rest)
        .map_err(|e| BackupError::Corrupt(format!("format: {e}")))?;
    if format != STORE_FORMAT {
        return Err(BackupError::Format {
            found: format,
            reads: STORE_FORMAT,
        });
    }
    let envelope: Envelope =
        postcard::from_bytes(rest).map_err(|e| BackupError::Corrupt(e.to_string()))?;
    let state: StateRecord = postcard::from_bytes(&envelope.state)
        .map_err(|e| BackupError::Corrupt(format!("state: {e}")))?;
    Ok(Backup {
        index: envelope.index,
        taken_ms: envelope.taken_ms,
        state,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::State;

    fn backup_of(state: &State) -> Vec<u8> {
        encode(42, 7, state.snapshot_bytes().unwrap()).unwrap()
    }

    #[test]
    fn a_backup_reads_back_as_the_state_it_was_made_from() {
        let mut state = State::default();
        let spec = xce_client::types::JobSpec {
            command: vec!["true".into()],
            ..Default::default()
        };
        let token = xce_client::types::RequestToken(1);
        state.apply(1, crate::state::Command::Submit { token, spec });
        let back = decode(&backup_of(&state)).unwrap();
        assert_eq!((back.index, back.taken_ms), (42, 7));
        assert_eq!(back.state, state.into_record());
    }

    #[test]
    fn anything_else_is_refused_naming_why() {
        let good = backup_of(&State::default());
        let other_format = format!("store format {}", STORE_FORMAT + 1);
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"hello world".to_vec(), "not an xce backup"),
            (good[..good.len() - 3].to_vec(), "damaged"),
            (vec![0; MAX_BACKUP_BYTES + 1], "at most"),
            (
                {
                    let other = MAGIC.to_vec();
                    postcard::to_extend(&(STORE_FORMAT + 1), other).unwrap()
                },
                &other_format,
            ),
        ];
        for (bytes, why) in cases {
            let err = decode(&bytes).unwrap_err().to_string();
            assert!(err.contains(why), "{err:?} lacks {why:?}");
        }
    }
}
