//! Backups: a consistent copy of the state from the primary, taken once and read out in
//! frames (`xce_client::backup_file`), so a state of any size leaves in messages that fit.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use xce_client::wire::ReplyHeader;
use xce_proto::Status;

use super::Node;
use crate::store::backup;

/// How long a backup nobody reads stays held.
const HELD_FOR: Duration = Duration::from_secs(60);

/// A backup taken: its id, the log index it holds, its frames (shared with the slot).
#[derive(Clone)]
struct Taken {
    id: u64,
    index: u64,
    frames: Arc<Vec<Vec<u8>>>,
}

/// A backup being read out.
pub(super) struct HeldBackup {
    taken: Taken,
    last_read: Instant,
}

/// The slot for the one backup a controller holds at a time.
pub(super) type BackupSlot = Arc<Mutex<Option<HeldBackup>>>;

/// One frame of a held backup, and what the caller needs to read the rest.
#[derive(Debug)]
pub struct BackupFrame {
    pub bytes: Vec<u8>,
    pub index: u64,
    pub backup: u64,
    pub frames: u32,
}

impl Node {
    /// Frame `frame` of held backup `backup`; `backup` 0 takes a new one (replacing any
    /// held), after a linearizability check, so it holds every write acknowledged before the
    /// call. `noEnt` for a backup this controller no longer holds.
    pub async fn backup_frame(&self, backup: u64, frame: u32) -> Result<BackupFrame, ReplyHeader> {
        let Taken { id, index, frames } = match backup {
            0 => self.take_backup().await?,
            id => self.held_backup(id)?,
        };
        let count = u32::try_from(frames.len()).unwrap_or(u32::MAX);
        let bytes = frames.get(frame as usize).cloned().ok_or_else(|| {
            ReplyHeader::status(
                Status::Invalid,
                format!("frame {frame}: backup {id} has frames 0..{count}"),
            )
        })?;
        Ok(BackupFrame {
            bytes,
            index,
            backup: id,
            frames: count,
        })
    }

    /// Takes a backup and holds it. The state is copied under the lock (its jobs are shared,
    /// not copied) and encoded off this thread.
    async fn take_backup(&self) -> Result<Taken, ReplyHeader> {
        self.read(|_| ()).await?;
        let (state, index) = {
            let applied = self.state.read();
            let index = applied.last_applied.map_or(0, |l| l.index);
            (applied.state.clone(), index)
        };
        let internal = |e: String| ReplyHeader::status(Status::Internal, format!("backup: {e}"));
        let frames = tokio::task::spawn_blocking(move || {
            backup::encode(&state, index, super::now_ms(), backup::PART_BYTES)
        })
        .await
        .map_err(|e| internal(e.to_string()))?
        .map_err(|e| internal(e.to_string()))?;
        let taken = Taken {
            id: rand::random::<u64>().max(1),
            index,
            frames: Arc::new(frames),
        };
        *lock(&self.held_backup) = Some(HeldBackup {
            taken: taken.clone(),
            last_read: Instant::now(),
        });
        tokio::spawn(drop_when_idle(self.held_backup.clone(), taken.id));
        Ok(taken)
    }

    /// The held backup `id`, marked as read now.
    fn held_backup(&self, id: u64) -> Result<Taken, ReplyHeader> {
        let mut slot = lock(&self.held_backup);
        match slot.as_mut() {
            Some(held) if held.taken.id == id => {
                held.last_read = Instant::now();
                Ok(held.taken.clone())
            }
            _ => Err(ReplyHeader::status(
                Status::NoEnt,
                format!(
                    "backup {id} is not held here (a newer one was taken, it was unread for \
                     {} s, or it was taken on another controller): save again",
                    HELD_FOR.as_secs()
                ),
            )),
        }
    }
}

/// Frees backup `id` once nobody has read it for [`HELD_FOR`] (or once another replaced it).
async fn drop_when_idle(slot: BackupSlot, id: u64) {
    loop {
        tokio::time::sleep(HELD_FOR / 4).await;
        let mut held = lock(&slot);
        match held.as_ref() {
            Some(h) if h.taken.id == id => {
                if h.last_read.elapsed() >= HELD_FOR {
                    *held = None;
                    return;
                }
            }
            _ => return,
        }
    }
}

fn lock(slot: &Mutex<Option<HeldBackup>>) -> std::sync::MutexGuard<'_, Option<HeldBackup>> {
    slot.lock().unwrap_or_else(|e| e.into_inner())
}
