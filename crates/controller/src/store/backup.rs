//! What is in a backup file's frames (`xce admin snapshot save|restore`; the framing is
//! `xce_client::backup_file`). The first frame is a header — the store format first, so a
//! backup of a format this build does not read is refused naming why before anything else is
//! read, then the log index and time it was taken at — and each later frame is one
//! [`BackupPart`] in that format, restored as one Raft entry. A backup is written in the
//! cluster's active version (what every member, and the older build, reads) and read in any
//! format from `store::OLDEST_FORMAT` on, converted as the log is.

use serde::{Deserialize, Serialize};

use super::{OLDEST_FORMAT, STORE_FORMAT};
use crate::state::stored::{self, migrate, v10, v12, v6, v7, v8};
use crate::state::{BackupPart, State};

/// About how large a part of jobs is: one Raft entry far below the 32 MiB append limit
/// (`network::raft_client`), and a message far below the largest inbound one.
pub const PART_BYTES: usize = 4 << 20;

/// The largest part a restore takes, in bytes. A part is one Raft entry, which may share its
/// batch with half a MiB of other writes: it must stay far enough below the follower's
/// 48 MiB inbound limit (`xce_client::socket::MAX_INBOUND_BYTES`) that the entry always
/// replicates. Parts this build writes are about [`PART_BYTES`].
pub const MAX_PART_BYTES: usize = 24 << 20;

/// Why bytes are not a backup this build can restore.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("a backup of store format {found}; this controller reads formats {OLDEST_FORMAT} to {STORE_FORMAT}{}", if *found > STORE_FORMAT { " (it was taken by a newer build: restore it with that build)" } else { "" })]
    Format { found: u32 },
    #[error("the backup is damaged: {0}")]
    Corrupt(String),
    #[error("a part of {bytes} bytes; a restore takes parts of at most {MAX_PART_BYTES} bytes")]
    PartTooLarge { bytes: usize },
}

impl From<postcard::Error> for BackupError {
    fn from(e: postcard::Error) -> Self {
        BackupError::Corrupt(e.to_string())
    }
}

/// The first frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub format: u32,
    /// The Raft log index the state had applied.
    pub index: u64,
    /// When it was taken (the primary's clock, ms since the epoch).
    pub taken_ms: u64,
}

/// A backup of `state` (applied up to `index`) as frames: its header, then its parts of
/// about `part_bytes` each.
pub fn encode(
    state: &State,
    index: u64,
    taken_ms: u64,
    part_bytes: usize,
) -> Result<Vec<Vec<u8>>, BackupError> {
    let format = state.active_version();
    let header = Header {
        format,
        index,
        taken_ms,
    };
    let mut frames = vec![postcard::to_stdvec(&header)?];
    state.backup_parts(part_bytes, |part| {
        // Everything a state of an older version holds fits its format (`stored::fit_format`).
        let refused = |e: stored::NotInFormat| BackupError::Corrupt(e.to_string());
        let frame = match format {
            6 => postcard::to_stdvec(&migrate::downgrade_backup_part_6(part).map_err(refused)?)?,
            7 => postcard::to_stdvec(&migrate::downgrade_backup_part_7(part).map_err(refused)?)?,
            8 => postcard::to_stdvec(&migrate::downgrade_backup_part_8(part).map_err(refused)?)?,
            9..=11 => {
                postcard::to_stdvec(&migrate::downgrade_backup_part_10(part).map_err(refused)?)?
            }
            12 => postcard::to_stdvec(&migrate::downgrade_backup_part_12(part).map_err(refused)?)?,
            _ => postcard::to_stdvec(&part)?,
        };
        frames.push(frame);
        Ok::<_, BackupError>(())
    })?;
    Ok(frames)
}

/// Reads a header frame, refusing another store format before anything else.
pub fn decode_header(frame: &[u8]) -> Result<Header, BackupError> {
    let (format, _) = postcard::take_from_bytes::<u32>(frame)
        .map_err(|e| BackupError::Corrupt(format!("header: {e}")))?;
    if !(OLDEST_FORMAT..=STORE_FORMAT).contains(&format) {
        return Err(BackupError::Format { found: format });
    }
    postcard::from_bytes(frame).map_err(|e| BackupError::Corrupt(format!("header: {e}")))
}

/// Reads a part frame of a backup of `format` (its header's), as the current record. Its
/// rules are checked where every restore is: when its command is validated and when it is
/// applied.
pub fn decode_part(format: u32, frame: &[u8]) -> Result<BackupPart, BackupError> {
    if frame.len() > MAX_PART_BYTES {
        return Err(BackupError::PartTooLarge { bytes: frame.len() });
    }
    let corrupt = |e: String| BackupError::Corrupt(format!("part: {e}"));
    match format {
        6 => {
            let old: v6::BackupPart =
                postcard::from_bytes(frame).map_err(|e| corrupt(e.to_string()))?;
            migrate::upgrade_backup_part_6(old).map_err(|e| corrupt(e.to_string()))
        }
        7 => {
            let old: v7::BackupPart =
                postcard::from_bytes(frame).map_err(|e| corrupt(e.to_string()))?;
            Ok(migrate::upgrade_backup_part_7(old))
        }
        8 => {
            let old: v8::BackupPart =
                postcard::from_bytes(frame).map_err(|e| corrupt(e.to_string()))?;
            Ok(migrate::upgrade_backup_part_8(old))
        }
        9..=11 => {
            let old: v10::BackupPart =
                postcard::from_bytes(frame).map_err(|e| corrupt(e.to_string()))?;
            Ok(migrate::upgrade_backup_part_10(old))
        }
        12 => {
            let old: v12::BackupPart =
                postcard::from_bytes(frame).map_err(|e| corrupt(e.to_string()))?;
            Ok(migrate::upgrade_backup_part_12(old))
        }
        _ => postcard::from_bytes(frame).map_err(|e| corrupt(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use xce_client::types::{JobAction, JobSpec, RequestToken};

    use super::*;
    // The states here are new clusters', at the oldest version: their backups are in it.
    use crate::state::{testing, Command, Outcome, StateRecord};

    /// The restores' tokens, far from any the states were built with.
    const RESTORE: u128 = 1 << 100;

    /// What a restore carries over unchanged (hosts wait for their workers, and the token
    /// memory holds the restore's own tokens too).
    fn carried(state: State) -> StateRecord {
        let rec = state.into_record();
        StateRecord {
            hosts: Vec::new(),
            tokens: Vec::new(),
            ..rec
        }
    }

    /// A state with two jobs running on w1 (a kill intent on the first), then `n` pending
    /// jobs whose commands are `size` bytes long.
    fn state_with(n: u64, size: usize) -> State {
        let mut state = testing::running_on_w1(2);
        let killed = testing::control(&mut state, 950, 1, JobAction::Kill);
        assert_eq!(killed, Outcome::Done);
        for i in 0..n {
            let spec = JobSpec {
                command: vec!["x".repeat(size)],
                ..Default::default()
            };
            state.apply(
                1,
                Command::Submit {
                    token: RequestToken(u128::from(i) + 5000),
                    spec,
                    script: None,
                },
            );
        }
        state
    }

    /// Restores `frames` into a new state the way the CLI and the controller do.
    fn restore(frames: &[Vec<u8>]) -> (State, Vec<Outcome>) {
        let mut new = State::default();
        decode_header(&frames[0]).unwrap();
        let base = RequestToken(RESTORE);
        let outcomes = frames[1..]
            .iter()
            .enumerate()
            .map(|(i, frame)| new.apply(2, part_command(frame, i, base)))
            .collect();
        (new, outcomes)
    }

    /// The command of part frame `frame`, the `i`th after the header (its token `RESTORE + i`).
    fn part_command(frame: &[u8], i: usize, base: RequestToken) -> Command {
        let token = RequestToken(RESTORE + i as u128);
        match decode_part(OLDEST_FORMAT, frame).unwrap() {
            BackupPart::Base(state) => Command::Restore {
                token,
                state: Box::new(state),
            },
            BackupPart::Jobs {
                jobs,
                intents,
                scripts,
            } => Command::RestoreJobs {
                token,
                base,
                jobs,
                intents,
                scripts,
            },
        }
    }

    #[test]
    fn a_backup_in_many_parts_restores_the_state_it_was_made_from() {
        // 40 jobs of ~1 KB in parts of ~8 KB: about 5 jobs parts, each within its budget
        // (one job may go over it).
        let state = state_with(40, 1000);
        let frames = encode(&state, 42, 7, 8 << 10).unwrap();
        let header = decode_header(&frames[0]).unwrap();
        assert_eq!((header.index, header.taken_ms), (42, 7));
        assert!(frames.len() >= 6, "{} frames", frames.len());
        assert!(frames[2..].iter().all(|f| f.len() < 9 << 10));
        let (restored, outcomes) = restore(&frames);
        assert!(outcomes.iter().all(|o| *o == Outcome::Done), "{outcomes:?}");
        let restored = carried(restored);
        assert_eq!(restored.intents.len(), 1, "the kill intent on job 1");
        assert_eq!(restored, carried(state));
    }

    #[test]
    fn a_restore_run_again_resumes_and_applies_nothing_twice() {
        let state = state_with(20, 1000);
        let frames = encode(&state, 1, 1, 4 << 10).unwrap();
        let (restored, outcomes) = restore(&frames);
        assert!(outcomes.iter().all(|o| *o == Outcome::Done), "{outcomes:?}");
        // The same parts again, under the same tokens: each answered from memory.
        let mut again = restored.clone();
        for (i, frame) in frames[1..].iter().enumerate() {
            let cmd = part_command(frame, i, RequestToken(RESTORE));
            assert!(matches!(again.apply(3, cmd), Outcome::Duplicate(_)));
        }
        assert_eq!(again, restored);
    }

    #[test]
    fn a_part_without_its_first_or_with_jobs_already_here_changes_nothing() {
        let state = state_with(1, 10);
        let frames = encode(&state, 1, 1, PART_BYTES).unwrap();
        assert_eq!(frames.len(), 3, "header, base, one part of jobs");
        let BackupPart::Jobs { jobs, intents, .. } =
            decode_part(OLDEST_FORMAT, &frames[2]).unwrap()
        else {
            panic!("the third frame holds jobs");
        };
        let part = |token, base| Command::RestoreJobs {
            token: RequestToken(token),
            base: RequestToken(base),
            jobs: jobs.clone(),
            intents: intents.clone(),
            scripts: Vec::new(),
        };
        // Into a cluster whose restore never began.
        let mut fresh = State::default();
        let outcome = fresh.apply(1, part(5, 4));
        assert!(
            matches!(&outcome, Outcome::Rejected { message, .. } if message.contains("has not begun")),
            "{outcome:?}"
        );
        assert_eq!(carried(fresh), carried(State::default()));
        // Twice under different tokens: the second would add jobs that are here.
        let (mut restored, _) = restore(&frames);
        let before = restored.clone();
        let outcome = restored.apply(1, part(7, RESTORE));
        assert!(
            matches!(&outcome, Outcome::Rejected { message, .. } if message.contains("already here")),
            "{outcome:?}"
        );
        assert_eq!(carried(restored), carried(before));
    }

    #[test]
    fn a_header_of_another_format_or_damaged_bytes_are_refused_naming_why() {
        let frames = encode(&State::default(), 1, 1, PART_BYTES).unwrap();
        let mut other = postcard::to_stdvec(&(STORE_FORMAT + 1)).unwrap();
        other.extend_from_slice(&frames[0][1..]);
        let err = decode_header(&other).unwrap_err().to_string();
        assert!(
            err.contains(&format!("store format {}", STORE_FORMAT + 1)),
            "{err}"
        );
        let err = decode_part(OLDEST_FORMAT, &frames[1][..frames[1].len() / 2])
            .unwrap_err()
            .to_string();
        assert!(err.contains("damaged"), "{err}");
        let err = decode_header(b"").unwrap_err().to_string();
        assert!(err.contains("damaged"), "{err}");
    }

    /// A part is one Raft entry: one over the limit is refused before it is decoded, naming
    /// the limit, and never reaches the log (where no follower might take it).
    #[test]
    fn a_part_over_the_limit_is_refused_naming_it() {
        let state = state_with(500, 60_000);
        let frames = encode(&state, 1, 1, MAX_PART_BYTES * 2).unwrap();
        assert!(frames[2].len() > MAX_PART_BYTES);
        let err = decode_part(OLDEST_FORMAT, &frames[2])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("at most {MAX_PART_BYTES} bytes")),
            "{err}"
        );
        // Parts this build writes are well within it.
        let frames = encode(&state, 1, 1, PART_BYTES).unwrap();
        assert!(frames[1..]
            .iter()
            .all(|f| decode_part(OLDEST_FORMAT, f).is_ok()));
    }
}
