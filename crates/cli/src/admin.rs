//! `xce admin ...`: an admin's operations on the cluster as a whole — backups now.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use xce_client::ops::{RestoreSnapshot, SaveSnapshot};
use xce_client::types::RequestToken;

use crate::commands::{check, client, remember};
use crate::output::{self, fail};
use crate::{Cli, Format};

/// `xce admin ...`.
#[derive(Debug, clap::Subcommand)]
pub enum AdminCommand {
    /// Backups of the whole cluster state (admins only).
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
}

/// `xce admin snapshot save|restore FILE`.
#[derive(Debug, clap::Subcommand)]
pub enum SnapshotCommand {
    /// Save a consistent backup from the primary to FILE (readable by its owner only): every
    /// write acknowledged before the command is in it.
    Save { file: PathBuf },
    /// Start this cluster from a backup: a new cluster (that has never held a job or a user
    /// token) takes FILE's jobs, queues, hosts and tokens. Hosts stay unavailable until their
    /// workers join this cluster.
    Restore { file: PathBuf },
}

/// Runs one `xce admin` command; returns the exit code.
pub async fn run(cli: &Cli, cmd: &AdminCommand) -> i32 {
    let AdminCommand::Snapshot(cmd) = cmd;
    match cmd {
        SnapshotCommand::Save { file } => save(cli, file).await,
        SnapshotCommand::Restore { file } => restore(cli, file).await,
    }
    0
}

async fn save(cli: &Cli, file: &Path) {
    let f = cli.output;
    let (c, hint) = client(cli);
    let saved = check(f, c.call(SaveSnapshot).await);
    write_private(file, &saved.bytes)
        .unwrap_or_else(|e| fail(f, "internal", &format!("write {}: {e}", file.display())));
    match f {
        Format::Json => println!(
            "{}",
            serde_json::json!({
                "file": file.display().to_string(),
                "index": saved.index,
                "bytes": saved.bytes.len(),
            })
        ),
        Format::Text => println!(
            "Saved a backup at log index {} ({} bytes) to {}.",
            saved.index,
            saved.bytes.len(),
            file.display()
        ),
    }
    remember(&c, &hint);
}

async fn restore(cli: &Cli, file: &Path) {
    let f = cli.output;
    // Read before connecting: a bad file is the caller's error, whatever the cluster's state.
    let bytes = read_backup(f, file);
    let (c, hint) = client(cli);
    let op = RestoreSnapshot {
        token: RequestToken::random(),
        bytes,
    };
    check(f, c.call(op).await);
    output::done(
        f,
        &format!("The cluster is restored from {}.", file.display()),
    );
    remember(&c, &hint);
}

/// A backup file's bytes, or the command ends naming the file.
fn read_backup(f: Format, file: &Path) -> Arc<[u8]> {
    match std::fs::read(file) {
        Ok(bytes) => bytes.into(),
        Err(e) => fail(f, "invalid", &format!("read {}: {e}", file.display())),
    }
}

/// Writes `bytes` to `file` through a temporary file beside it, renamed into place once
/// synced: a crash leaves the old backup or the new one, never half of one. Owner-only: a
/// backup holds every job's environment.
fn write_private(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut tmp = file.as_os_str().to_owned();
    tmp.push(".partial");
    let tmp = PathBuf::from(tmp);
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    out.write_all(bytes)?;
    out.sync_all()?;
    std::fs::rename(&tmp, file)
}
