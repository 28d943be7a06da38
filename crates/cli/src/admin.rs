//! `xce admin ...`: an admin's operations on the cluster as a whole: backups
//! (`snapshot save|restore`) and the controllers (`members [add|remove]`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use xce_client::backup_file::{self, FrameError, FrameReader, FrameWriter};
use xce_client::ops::{
    AddController, GetCluster, RemoveController, RestoreSnapshot, SaveSnapshot, SavedFrame,
};
use xce_client::types::RequestToken;
use xce_client::Status;
use xce_client::{Client, ClientError};

use crate::commands::{check, client, remember};
use crate::output::{self, fail};
use crate::{Cli, Format};

/// `xce admin ...`.
#[derive(Debug, clap::Subcommand)]
pub enum AdminCommand {
    /// Backups of the whole cluster state (admins only).
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
    /// The controllers: list them, add one (running with --join), remove one.
    Members {
        #[command(subcommand)]
        change: Option<MembersCommand>,
    },
}

/// `xce admin members add NAME=HOST:PORT | remove NAME`.
#[derive(Debug, clap::Subcommand)]
pub enum MembersCommand {
    /// Add a controller started with --join at HOST:PORT: it catches up (from a snapshot when
    /// the log has moved on), then votes. Give it, and then every client, the new --peers.
    Add {
        /// NAME=HOST:PORT, as in --peers.
        member: String,
    },
    /// Remove a controller from the members (then stop it).
    Remove { name: String },
}

/// `xce admin snapshot save|restore FILE`.
#[derive(Debug, clap::Subcommand)]
pub enum SnapshotCommand {
    /// Save a consistent backup from the primary to FILE (readable by its owner only): every
    /// write acknowledged before the command is in it.
    Save { file: PathBuf },
    /// Start this cluster from a backup: a new cluster (that has never held a job or a user
    /// token) takes FILE's jobs, queues, hosts and tokens, a part at a time. Hosts stay
    /// unavailable until their workers join this cluster. An interrupted restore resumes
    /// when run again with the same file.
    Restore { file: PathBuf },
}

/// Runs one `xce admin` command; returns the exit code.
pub async fn run(cli: &Cli, cmd: &AdminCommand) -> i32 {
    match cmd {
        AdminCommand::Snapshot(SnapshotCommand::Save { file }) => save(cli, file).await,
        AdminCommand::Snapshot(SnapshotCommand::Restore { file }) => restore(cli, file).await,
        AdminCommand::Members { change } => members(cli, change.as_ref()).await,
    }
    0
}

async fn members(cli: &Cli, change: Option<&MembersCommand>) {
    let f = cli.output;
    let (c, hint) = client(cli);
    match change {
        None => output::cluster(f, &check(f, c.call(GetCluster).await)),
        Some(MembersCommand::Add { member }) => {
            let Some((name, addr)) = member.split_once('=') else {
                fail(
                    f,
                    "invalid",
                    &format!("{member:?}: expected NAME=HOST:PORT"),
                )
            };
            let op = AddController {
                token: RequestToken::random(),
                name: name.to_string(),
                addr: addr.to_string(),
            };
            check(f, c.call(op).await);
            output::done(f, &format!("Controller <{name}> at {addr} is a member."));
        }
        Some(MembersCommand::Remove { name }) => {
            let op = RemoveController {
                token: RequestToken::random(),
                name: name.clone(),
            };
            check(f, c.call(op).await);
            output::done(f, &format!("Controller <{name}> is no longer a member."));
        }
    }
    remember(&c, &hint);
}

/// Times a save starts again from a new backup after the one it was reading went away (a
/// failover, or a newer backup taken by someone else).
const SAVE_TRIES: u32 = 3;

async fn save(cli: &Cli, file: &Path) {
    let f = cli.output;
    let (c, hint) = client(cli);
    let mut tries = 0;
    let (first, bytes) = loop {
        tries += 1;
        let first = check(f, c.call(SaveSnapshot::default()).await);
        match save_frames(&c, &first, file).await {
            Ok(bytes) => break (first, bytes),
            Err(SaveError::Lost(e)) if tries < SAVE_TRIES => {
                eprintln!("xce: {}; taking a new backup", e.message());
            }
            Err(SaveError::Lost(e)) => check(f, Err::<(), _>(e)),
            Err(SaveError::Write(e)) => {
                fail(f, "internal", &format!("write {}: {e}", file.display()))
            }
        }
    };
    match f {
        Format::Json => println!(
            "{}",
            serde_json::json!({
                "file": file.display().to_string(),
                "index": first.index,
                "bytes": bytes,
                "frames": first.frames,
            })
        ),
        Format::Text => println!(
            "Saved a backup at log index {} ({bytes} bytes in {} frames) to {}.",
            first.index,
            first.frames,
            file.display()
        ),
    }
    remember(&c, &hint);
}

/// Why reading a backup's frames into a file stopped.
enum SaveError {
    /// The cluster's answer (`noEnt`: the held backup went away; start again).
    Lost(ClientError),
    Write(std::io::Error),
}

/// Reads every frame of the backup `first` began into `file` (through a temporary file beside
/// it, renamed into place once synced: a crash leaves the old backup or the new one, never
/// half of one; owner-only: a backup holds every job's environment). Returns its size.
async fn save_frames(c: &Client, first: &SavedFrame, file: &Path) -> Result<u64, SaveError> {
    let mut tmp = file.as_os_str().to_owned();
    tmp.push(".partial");
    let tmp = PathBuf::from(tmp);
    let out = private_file(&tmp).map_err(SaveError::Write)?;
    let mut w =
        FrameWriter::new(std::io::BufWriter::new(out), first.frames).map_err(SaveError::Write)?;
    w.frame(&first.bytes).map_err(SaveError::Write)?;
    for frame in 1..first.frames {
        let op = SaveSnapshot {
            backup: first.backup,
            frame,
        };
        let next = match c.call(op).await {
            Ok(next) => next,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(SaveError::Lost(e));
            }
        };
        w.frame(&next.bytes).map_err(SaveError::Write)?;
    }
    let out = w
        .into_inner()
        .into_inner()
        .map_err(|e| SaveError::Write(e.into_error()))?;
    out.sync_all().map_err(SaveError::Write)?;
    let bytes = out.metadata().map_err(SaveError::Write)?.len();
    std::fs::rename(&tmp, file).map_err(SaveError::Write)?;
    Ok(bytes)
}

async fn restore(cli: &Cli, file: &Path) {
    let f = cli.output;
    // Read before connecting: a bad file is the caller's error, whatever the cluster's state.
    let bad = |e: &dyn std::fmt::Display| -> ! {
        fail(f, "invalid", &format!("{}: {e}", file.display()))
    };
    let checked = backup_file::check_file(file).unwrap_or_else(|e| bad(&e));
    let digest = checked.digest;
    let mut frames = std::fs::File::open(file)
        .map_err(FrameError::from)
        .and_then(|r| FrameReader::new(std::io::BufReader::new(r)))
        .unwrap_or_else(|e| bad(&e));
    let parts = checked.frames - 1;
    let header: Arc<[u8]> = match frames.next_frame() {
        Ok(Some(header)) => header.into(),
        Ok(None) => bad(&"the backup has no header"),
        Err(e) => bad(&e),
    };
    let (c, hint) = client(cli);
    let base = backup_file::part_token(&digest, 1);
    let mut resumed = 0;
    for part in 1..=parts {
        let bytes = match frames.next_frame() {
            Ok(Some(bytes)) => bytes,
            Ok(None) => bad(&format!("the backup ends before part {part}")),
            Err(e) => bad(&e),
        };
        let op = RestoreSnapshot {
            token: backup_file::part_token(&digest, part),
            base,
            header: header.clone(),
            part: bytes.into(),
        };
        match c.call(op).await {
            // Applied by an earlier run of this command (or before a failover): resumed.
            Ok(()) => {}
            Err(ClientError::Status {
                status: Status::DupJob,
                ..
            }) => resumed += 1,
            Err(e) => restore_failed(f, &e, part, parts),
        }
    }
    let note = match resumed {
        0 => String::new(),
        n => format!("; {n} of them had been restored before"),
    };
    output::done(
        f,
        &format!(
            "The cluster is restored from {} ({parts} parts{note}).",
            file.display()
        ),
    );
    remember(&c, &hint);
}

/// Ends a restore that failed at part `part` of `parts`, saying how to go on.
fn restore_failed(f: Format, e: &ClientError, part: u32, parts: u32) -> ! {
    let resume = match part {
        1 => String::new(),
        _ => format!(
            " ({} of {parts} parts restored: run the same command again to resume)",
            part - 1
        ),
    };
    fail(
        f,
        e.code(),
        &format!("part {part}: {}{resume}", e.message()),
    )
}

/// A new file only its owner can read, replacing any of that name.
fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}
