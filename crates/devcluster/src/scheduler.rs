//! The scheduler kind: its command line and its readiness probe.

use xce_client::ops::GetCluster;
use xce_client::Client;

/// `xce-scheduler`'s arguments, then `extra` flags.
pub(crate) fn args(name: &str, peers: &str, extra: &[String]) -> Vec<String> {
    let mut args = vec![
        "--name".to_string(),
        name.to_string(),
        "--peers".to_string(),
        peers.to_string(),
    ];
    args.extend(extra.iter().cloned());
    args
}

/// The scheduler holding the lease, if any.
pub async fn active(client: &Client) -> Option<String> {
    let info = client.call(GetCluster).await.ok()?;
    info.schedulers
        .into_iter()
        .find(|s| s.active)
        .map(|s| s.name)
}
