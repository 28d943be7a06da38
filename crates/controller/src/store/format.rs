//! Which store format stored bytes are in, and the one place that decides it.
//!
//! A build reads every format from [`OLDEST_FORMAT`] to [`STORE_FORMAT`] and writes the one
//! the cluster's *active version* names, so that every member, on whichever build, can apply
//! what is replicated, and a data dir stays readable by the older build until the version is
//! raised (`state::stored::migrate`). The format travels with the bytes: from format 7 on a
//! batch (a Raft entry's payload) and a snapshot begin with a varint of `2^63 + format`; a
//! format-6 batch begins with its stamp (wall-clock milliseconds) and a format-6 snapshot with
//! its next job id, neither of which ever reaches 2^63, so the two never meet. Each batch keeps
//! the format its primary proposed it in, through replication, storage and restarts: a
//! follower that has not yet applied the raise still stores what a newer primary sent as it
//! came.
//!
//! A data dir's `identity.json` names the newest format any of its records may be in
//! ([`DirFormat`]): it is raised before the first record of a newer format is written, so an
//! older build refuses a data dir it could not read before it touches a byte.

use std::path::PathBuf;
use std::sync::Mutex;

use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Batch, Identity};
use crate::state::stored::{self, migrate, v10, v12, v6, v7, v8, v9, CommandRecord};
use crate::state::Command;

/// The newest store format (and cluster version) this build reads and writes. Raised with
/// every change of a stored record; the golden-bytes tests in `state::stored` fail until it is.
pub const STORE_FORMAT: u32 = 13;

/// The oldest store format this build reads (and writes while a cluster's active version is
/// still that old). Data of an older one is refused by name.
pub const OLDEST_FORMAT: u32 = 6;

/// The high bit that marks the first varint of a record of format 7 or later.
const MARK: u64 = 1 << 63;

/// Why stored bytes cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error(
        "store format {found} is newer than this build reads (formats {OLDEST_FORMAT} to {STORE_FORMAT}): run a newer build"
    )]
    Newer { found: u64 },
    #[error("corrupt record: {0}")]
    Decode(String),
    #[error(transparent)]
    Migrate(#[from] stored::migrate::Unwritten),
}

impl FormatError {
    /// A postcard error as a corrupt record.
    pub fn decode(e: postcard::Error) -> FormatError {
        FormatError::Decode(e.to_string())
    }
}

impl From<FormatError> for redb::Error {
    fn from(e: FormatError) -> redb::Error {
        redb::Error::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            e.to_string(),
        ))
    }
}

/// Checks a marked format: one this build knows.
fn known(format: u64) -> Result<u32, FormatError> {
    match u32::try_from(format) {
        Ok(f) if (7..=STORE_FORMAT).contains(&f) => Ok(f),
        _ if format > u64::from(STORE_FORMAT) => Err(FormatError::Newer { found: format }),
        _ => Err(FormatError::Decode(format!(
            "format mark {format}: formats before 7 carry no mark"
        ))),
    }
}

/// `body` encoded in `format`: as it is in format 6, after the format's mark from 7 on.
pub fn encode_marked<T: Serialize>(format: u32, body: &T) -> Result<Vec<u8>, postcard::Error> {
    if format <= 6 {
        postcard::to_stdvec(body)
    } else {
        postcard::to_stdvec(&(MARK | u64::from(format), body))
    }
}

/// The format of marked bytes and their body after the mark; unmarked bytes are format 6.
pub fn split_mark(bytes: &[u8]) -> Result<(u32, &[u8]), FormatError> {
    match postcard::take_from_bytes::<u64>(bytes) {
        Ok((first, rest)) if first >= MARK => Ok((known(first - MARK)?, rest)),
        _ => Ok((6, bytes)),
    }
}

impl Serialize for Batch {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let records = self.commands.iter().cloned().map(CommandRecord::from);
        // Every command of an older format's batch fits that format: what does not is refused
        // before it is proposed (`stored::fit_format`).
        let mark = MARK | u64::from(self.format);
        match self.format {
            ..=6 => {
                let old: Vec<v6::CommandRecord> = records
                    .map(migrate::downgrade_command_6)
                    .collect::<Result<_, _>>()
                    .map_err(serde::ser::Error::custom)?;
                (self.at_ms, old).serialize(s)
            }
            7 => {
                let old: Vec<v7::CommandRecord> = records
                    .map(migrate::downgrade_command_7)
                    .collect::<Result<_, _>>()
                    .map_err(serde::ser::Error::custom)?;
                (mark, self.at_ms, old).serialize(s)
            }
            8 => {
                let old: Vec<v8::CommandRecord> = records
                    .map(migrate::downgrade_command_8)
                    .collect::<Result<_, _>>()
                    .map_err(serde::ser::Error::custom)?;
                (mark, self.at_ms, old).serialize(s)
            }
            9 => {
                let old: Vec<v9::CommandRecord> = records
                    .map(migrate::downgrade_command_9)
                    .collect::<Result<_, _>>()
                    .map_err(serde::ser::Error::custom)?;
                (mark, self.at_ms, old).serialize(s)
            }
            10 | 11 => {
                let old: Vec<v10::CommandRecord> = records
                    .map(migrate::downgrade_command_10)
                    .collect::<Result<_, _>>()
                    .map_err(serde::ser::Error::custom)?;
                (mark, self.at_ms, old).serialize(s)
            }
            12 => {
                let old: Vec<v12::CommandRecord> = records
                    .map(migrate::downgrade_command_12)
                    .collect::<Result<_, _>>()
                    .map_err(serde::ser::Error::custom)?;
                (mark, self.at_ms, old).serialize(s)
            }
            _ => {
                let records: Vec<CommandRecord> = records.collect();
                (mark, self.at_ms, records).serialize(s)
            }
        }
    }
}

impl<'de> Deserialize<'de> for Batch {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Batch, D::Error> {
        struct BatchVisitor;

        impl<'de> Visitor<'de> for BatchVisitor {
            type Value = Batch;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a batch of commands of a known store format")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Batch, A::Error> {
                let missing = || de::Error::custom("a batch ends early");
                let first: u64 = seq.next_element()?.ok_or_else(missing)?;
                if first < MARK {
                    let old: Vec<v6::CommandRecord> = seq.next_element()?.ok_or_else(missing)?;
                    let commands = old
                        .into_iter()
                        .map(|c| migrate::upgrade_command_6(c).map(Command::from))
                        .collect::<Result<_, _>>()
                        .map_err(de::Error::custom)?;
                    return Ok(Batch {
                        at_ms: first,
                        format: 6,
                        commands,
                    });
                }
                let format = known(first - MARK).map_err(de::Error::custom)?;
                let at_ms: u64 = seq.next_element()?.ok_or_else(missing)?;
                let records: Vec<CommandRecord> = match format {
                    7 => {
                        let old: Vec<v7::CommandRecord> =
                            seq.next_element()?.ok_or_else(missing)?;
                        old.into_iter().map(migrate::upgrade_command_7).collect()
                    }
                    8 => {
                        let old: Vec<v8::CommandRecord> =
                            seq.next_element()?.ok_or_else(missing)?;
                        old.into_iter().map(migrate::upgrade_command_8).collect()
                    }
                    9 => {
                        let old: Vec<v9::CommandRecord> =
                            seq.next_element()?.ok_or_else(missing)?;
                        old.into_iter().map(migrate::upgrade_command_9).collect()
                    }
                    10 | 11 => {
                        let old: Vec<v10::CommandRecord> =
                            seq.next_element()?.ok_or_else(missing)?;
                        old.into_iter().map(migrate::upgrade_command_10).collect()
                    }
                    12 => {
                        let old: Vec<v12::CommandRecord> =
                            seq.next_element()?.ok_or_else(missing)?;
                        old.into_iter().map(migrate::upgrade_command_12).collect()
                    }
                    _ => seq.next_element()?.ok_or_else(missing)?,
                };
                Ok(Batch {
                    at_ms,
                    format,
                    commands: records.into_iter().map(Command::from).collect(),
                })
            }
        }

        d.deserialize_tuple(3, BatchVisitor)
    }
}

/// A data dir's `identity.json`, whose `format` is raised before the first record of a newer
/// format is written in the dir (by the log writer or a snapshot), so that an older build
/// refuses the dir instead of misreading it.
#[derive(Debug)]
pub struct DirFormat {
    path: PathBuf,
    identity: Mutex<Identity>,
}

impl DirFormat {
    /// The identity as read (or just written) at `path`.
    pub fn new(path: PathBuf, identity: Identity) -> DirFormat {
        DirFormat {
            path,
            identity: Mutex::new(identity),
        }
    }

    /// The newest format the dir's records may be in.
    pub fn current(&self) -> u32 {
        self.identity
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .format
    }

    /// Makes sure the identity allows records of `format`, rewriting it durably (a temporary
    /// file, fsync, rename, fsync of the dir) if it names an older one.
    pub fn allow(&self, format: u32) -> std::io::Result<()> {
        let mut identity = self.identity.lock().unwrap_or_else(|p| p.into_inner());
        if identity.format >= format {
            return Ok(());
        }
        let raised = Identity {
            format,
            ..identity.clone()
        };
        super::write_identity(&self.path, &raised)?;
        tracing::info!(
            from = identity.format,
            to = format,
            "the data dir now holds records of a newer store format; older builds will refuse it"
        );
        *identity = raised;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_is_never_the_first_varint_of_a_format_6_record() {
        // A format-6 batch begins with its stamp, a snapshot with its next job id: both far
        // below 2^63. Their bytes read as format 6.
        let old =
            postcard::to_stdvec(&(1_700_000_000_000u64, Vec::<v6::CommandRecord>::new())).unwrap();
        assert_eq!(split_mark(&old).unwrap().0, 6);
        let new = encode_marked(7, &5u8).unwrap();
        let (format, body) = split_mark(&new).unwrap();
        assert_eq!((format, body), (7, &[5u8][..]));
        // A newer format is refused by name, not misread.
        let newer = postcard::to_stdvec(&(MARK | u64::from(STORE_FORMAT + 1), 5u8)).unwrap();
        let e = split_mark(&newer).unwrap_err().to_string();
        let said = format!("store format {} is newer", STORE_FORMAT + 1);
        assert!(e.contains(&said), "{e}");
        // Empty bytes are format 6 (and then fail to decode as what they are not).
        assert_eq!(split_mark(&[]).unwrap().0, 6);
    }

    #[test]
    fn a_batch_keeps_its_format_through_its_bytes() {
        for format in [6, 7, 8] {
            let batch = Batch {
                at_ms: 1_700_000_000_123,
                format,
                commands: vec![Command::HostLost { name: "w1".into() }],
            };
            let bytes = postcard::to_stdvec(&batch).unwrap();
            assert_eq!(postcard::from_bytes::<Batch>(&bytes).unwrap(), batch);
        }
        // Format 6 is the old layout, byte for byte: the stamp, then the records.
        let six = Batch {
            at_ms: 9,
            format: 6,
            commands: vec![Command::HostLost { name: "w".into() }],
        };
        let old =
            postcard::to_stdvec(&(9u64, vec![v6::CommandRecord::HostLost { name: "w".into() }]))
                .unwrap();
        assert_eq!(postcard::to_stdvec(&six).unwrap(), old);
    }

    #[test]
    fn a_command_format_6_cannot_hold_is_not_written_in_it() {
        let batch = Batch {
            at_ms: 1,
            format: 6,
            commands: vec![Command::RaiseVersion { to: 7 }],
        };
        assert!(postcard::to_stdvec(&batch).is_err());
    }
}
