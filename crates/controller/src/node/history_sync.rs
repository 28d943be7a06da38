//! Every controller's catch-up of its history store: when its records stop short of the
//! retirements the state counts (`retired_seq`: it installed a snapshot past retirements it
//! never applied, it was added by `xce admin members add` with an empty store, or its store
//! was lost), it pulls the missing sequence numbers from its peers, a page at a time, until
//! its store holds every retired job (`docs/design/accounting.md`, "History").

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use openraft::RaftNetworkFactory;
use tracing::{debug, info, warn};

use super::Node;
use crate::network::raft_client::PeerClient;
use crate::store::NodeId;

/// The most records one `historyRange` answers.
pub const HISTORY_PULL_PAGE: usize = 512;

/// About the most bytes of records one `historyRange` answers.
pub const HISTORY_PULL_BYTES: usize = 4 << 20;

/// How often a controller compares its store with the state's count.
const PERIOD: Duration = Duration::from_secs(2);

/// How long a peer may take to answer one page.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

pub(super) async fn run_history_sync(node: Arc<Node>) {
    let mut network = node.network.clone();
    let mut peers: BTreeMap<NodeId, PeerClient> = BTreeMap::new();
    let mut was_behind = false;
    // Whether this episode of being behind was warned about (once is enough).
    let mut warned = false;
    let mut last_purge = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(PERIOD).await;
        if last_purge.elapsed() >= PURGE_PERIOD {
            purge(&node).await;
            last_purge = tokio::time::Instant::now();
        }
        let behind = node.history_behind();
        if behind == 0 {
            if was_behind {
                info!("history: this controller's store holds every retired job again");
                was_behind = false;
                warned = false;
            }
            continue;
        }
        if !was_behind {
            info!(
                behind,
                "history: this controller's store lacks retired jobs; pulling them from its peers"
            );
            was_behind = true;
        }
        let members = node.members();
        peers.retain(|id, _| members.iter().any(|(m, _)| m == id));
        for (id, _) in &members {
            if *id == node.id || peers.contains_key(id) {
                continue;
            }
            if let Some(basic) = node.basic_node(*id) {
                peers.insert(*id, network.new_client(*id, &basic).await);
            }
        }
        for (id, peer) in peers.iter_mut() {
            if pull_from(&node, *id, peer).await {
                break;
            }
        }
        let left = node.history_behind();
        if left > 0 && !warned {
            warn!(behind = left, "history: no peer had the retired jobs this controller's store lacks yet; trying again every 2 s");
            warned = true;
        }
    }
}

/// How often a controller purges its history of jobs older than `history.retention`.
const PURGE_PERIOD: Duration = Duration::from_secs(60);

/// The most records one purge removes (one write transaction).
const PURGE_BATCH: usize = 10_000;

/// Purges the records of jobs that ended longer than `history.retention` ago: every
/// controller applies the same rule to the same records, so their answers agree.
async fn purge(node: &Node) {
    let before = xce_client::when::now_ms().saturating_sub(node.history_rules.retention_ms);
    let history = node.history.clone();
    match tokio::task::spawn_blocking(move || history.purge(before, PURGE_BATCH)).await {
        Ok(Ok(0)) => {}
        Ok(Ok(n)) => info!(
            records = n,
            "history: purged jobs older than history.retention"
        ),
        Ok(Err(e)) => warn!(error = %e, "history: purging old jobs failed; trying again"),
        Err(_) => {}
    }
}

/// Pulls pages from one peer until this store is complete or the peer has no more; whether
/// the store is complete.
async fn pull_from(node: &Node, id: NodeId, peer: &mut PeerClient) -> bool {
    loop {
        let history = node.history.clone();
        let mark = match tokio::task::spawn_blocking(move || history.written_seq()).await {
            Ok(Ok(mark)) => mark,
            _ => return false,
        };
        let retired = node.state.read().state.retired_seq();
        if mark >= retired {
            return true;
        }
        // Only what this controller's state has retired: a peer ahead of it holds jobs its
        // state still shows live, which its history would then list twice.
        let want = (retired - mark).min(HISTORY_PULL_PAGE as u64) as u32;
        let records = match peer.history_range(mark + 1, want, ANSWER_WITHIN).await {
            Ok(records) if !records.is_empty() => records,
            Ok(_) => return false,
            Err(e) => {
                debug!(peer = id, error = %e, "history: a peer did not answer a pull");
                return false;
            }
        };
        let count = records.len();
        let history = node.history.clone();
        let written = tokio::task::spawn_blocking(move || {
            let retired = records
                .into_iter()
                .map(crate::history::RawRecord::retired)
                .collect::<Result<Vec<_>, _>>()?;
            history.write(retired)
        })
        .await;
        match written {
            Ok(Ok(())) => debug!(peer = id, records = count, "history: pulled retired jobs"),
            Ok(Err(e)) => {
                warn!(peer = id, error = %e, "history: pulled retired jobs not written");
                return false;
            }
            Err(_) => return false,
        }
    }
}
