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

/// The primary's name, once one is elected and serves.
pub(crate) async fn primary(client: &Client) -> Option<String> {
    client.call(GetCluster).await.ok()?.primary
}
