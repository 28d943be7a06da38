//! `xce admin ...`: an admin's operations on the cluster as a whole: backups
//! (`snapshot save|restore`) and the controllers (`members [add|remove]`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use xce_client::ops::{AddController, GetCluster, RemoveController, RestoreSnapshot, SaveSnapshot};
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
    /// token) takes FILE's jobs, queues, hosts and tokens. Hosts stay unavailable until their
    /// workers join this cluster.
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
