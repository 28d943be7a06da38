//! The worker kind: its command line and its readiness probe.

use std::path::Path;

use xce_client::ops::ListHosts;
use xce_client::types::HostState;
use xce_client::Client;

/// `xce-worker`'s arguments, then `extra` flags (`--run-jobs-as any` unless they say).
pub(crate) fn args(name: &str, peers: &str, spool_dir: &Path, extra: &[String]) -> Vec<String> {
    let mut args = vec![
        "--name".to_string(),
        name.to_string(),
        "--peers".to_string(),
        peers.to_string(),
        "--spool-dir".to_string(),
        spool_dir.display().to_string(),
    ];
    // A local cluster runs every job as the worker's own account (jobs are submitted by the
    // tests and `xce dev` under any name), unless the caller says otherwise.
    if !extra.iter().any(|a| a.starts_with("--run-jobs-as")) {
        args.extend(["--run-jobs-as", "any", "--allow-root-jobs"].map(String::from));
    }
    args.extend(extra.iter().cloned());
    args
}

/// The home worker `name` runs with (`HOME`): `<cluster>/home/<name>`.
pub fn home_of(cluster_dir: &Path, name: &str) -> std::path::PathBuf {
    cluster_dir.join("home").join(name)
}

/// Whether every one of `names` has registered and is `ok`.
pub(crate) async fn all_up(client: &Client, names: &[String]) -> bool {
    let Ok(hosts) = client.call(ListHosts).await else {
        return false;
    };
    names.iter().all(|n| {
        hosts
            .iter()
            .any(|h| &h.name == n && h.state == HostState::Ok)
    })
}
