//! The controller kind: its command line and its readiness probe.

use std::path::Path;

use xce_client::ops::GetCluster;
use xce_client::Client;

/// `xce-controller`'s arguments. `raft_addrs` (`name=host:port,...`) routes this controller's
/// Raft traffic to its peers through fault links instead of their client addresses.
pub(crate) fn args(
    name: &str,
    peers: &str,
    data_dir: &Path,
    config: Option<&Path>,
    raft_addrs: Option<String>,
) -> Vec<String> {
    let mut args = vec![
        "--name".to_string(),
        name.to_string(),
        "--peers".to_string(),
        peers.to_string(),
        "--data-dir".to_string(),
        data_dir.display().to_string(),
    ];
    if let Some(config) = config {
        args.push("--config".to_string());
        args.push(config.display().to_string());
    }
    if let Some(addrs) = raft_addrs {
        args.push("--raft-addrs".to_string());
        args.push(addrs);
    }
    args
}

/// The primary's name once one serves and the cluster runs the newest version its members'
/// builds do, or the one it is held at (the primary raises it within a moment of hearing them
/// all), so that what needs it (a time limit) is taken at once. A primary of a build from
/// before versions says 0: it is ready as soon as it serves.
pub(crate) async fn primary_at_newest_version(client: &Client) -> Option<String> {
    let info = client.call(GetCluster).await.ok()?;
    let primary = info.primary.clone()?;
    if info.active_version == 0 {
        return Some(primary);
    }
    let newest = info
        .members
        .iter()
        .map(|m| m.version)
        .collect::<Option<Vec<u32>>>()?;
    let target = newest
        .into_iter()
        .max()?
        .min(info.hold_version.unwrap_or(u32::MAX));
    (info.active_version >= target).then_some(primary)
}
