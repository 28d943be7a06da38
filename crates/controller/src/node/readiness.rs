//! The readiness barrier: a new primary commits a `Barrier` entry in its own term and serves
//! only once it is applied (everything before it is applied too).

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use openraft::ServerState;
use tracing::{info, warn};

use super::{now_ms, Node};
use crate::state::{Command, QueueDef};
use crate::store::Batch;

/// Watches for this node becoming primary and proposes the barrier entry of its term; once
/// that entry is applied everything before it is too, and the node starts serving.
pub(super) async fn run_readiness(node: Arc<Node>, queues: Vec<QueueDef>) {
    let mut metrics = node.raft.metrics();
    let mut last_role = None;
    loop {
        let (leader_term, role) = {
            let m = metrics.borrow_and_update();
            (
                (m.state == ServerState::Leader).then_some(m.current_term),
                (m.state, m.current_leader, m.current_term),
            )
        };
        if last_role != Some(role) {
            let (state, leader, term) = role;
            let primary = leader.and_then(|l| node.member(l)).map(|p| p.name);
            info!(node = %node.name, ?state, term, primary, "raft role changed");
            last_role = Some(role);
        }
        if let Some(term) = leader_term {
            if *node.ready_term.borrow() != term {
                let barrier = Batch {
                    at_ms: now_ms(),
                    format: node.active_version(),
                    commands: vec![Command::Barrier {
                        term,
                        queues: queues.clone(),
                    }],
                };
                let Some(_call) = node.raft_call() else {
                    return;
                };
                let mut watch = node.raft.metrics();
                let deposed = async move {
                    // A closed channel (Raft stopped) ends the wait too.
                    let _ = watch
                        .wait_for(|m| m.state != ServerState::Leader || m.current_term != term)
                        .await;
                };
                let write = node.raft.client_write(barrier);
                match barrier_end(write, deposed, node.timeouts.write).await {
                    BarrierEnd::Committed => {
                        node.ready_term.send_replace(term);
                        info!(node = %node.name, term, "primary is ready");
                        continue;
                    }
                    BarrierEnd::Deposed => {
                        info!(node = %node.name, term, "no longer primary of this term; its barrier is given up");
                        continue;
                    }
                    BarrierEnd::Failed(e) => {
                        warn!(node = %node.name, term, error = %e, "barrier not committed")
                    }
                    BarrierEnd::TimedOut => {
                        warn!(node = %node.name, term, "barrier not committed in time")
                    }
                }
                // Still primary? Retry on the next metrics change or shortly.
                let _ = tokio::time::timeout(Duration::from_millis(100), metrics.changed()).await;
                continue;
            }
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// How a barrier proposal ended.
#[derive(Debug, PartialEq, Eq)]
enum BarrierEnd {
    Committed,
    Failed(String),
    TimedOut,
    /// This node stopped leading the barrier's term first: a write openraft accepted while
    /// leader may never be answered after it steps down. A restarted controller that led
    /// before its crash is briefly leader of its old term again at start, until a newer vote
    /// deposes it; waiting out that barrier's write timeout (5 s) delayed its readiness when
    /// it then won an election (failover outages of 4.4 s in `xce-bench failover`).
    Deposed,
}

/// Waits for the barrier's `write`, at most `within`, unless `deposed` comes first.
async fn barrier_end<T, E: Display>(
    write: impl Future<Output = Result<T, E>>,
    deposed: impl Future<Output = ()>,
    within: Duration,
) -> BarrierEnd {
    tokio::select! {
        biased;
        () = deposed => BarrierEnd::Deposed,
        end = tokio::time::timeout(within, write) => match end {
            Ok(Ok(_)) => BarrierEnd::Committed,
            Ok(Err(e)) => BarrierEnd::Failed(e.to_string()),
            Err(_) => BarrierEnd::TimedOut,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(3600);

    #[tokio::test]
    async fn a_barrier_is_given_up_as_soon_as_its_term_ends() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let deposed = async move {
            let _ = rx.await;
        };
        let write = std::future::pending::<Result<(), String>>();
        let end = tokio::spawn(barrier_end(write, deposed, LONG));
        tx.send(()).unwrap();
        let end = tokio::time::timeout(Duration::from_secs(10), end)
            .await
            .expect("the barrier was still awaited after its term ended")
            .unwrap();
        assert_eq!(end, BarrierEnd::Deposed);
    }

    #[tokio::test]
    async fn a_barrier_commits_fails_or_times_out_while_its_term_lasts() {
        let lasts = std::future::pending::<()>;
        let committed = barrier_end(async { Ok::<_, String>(()) }, lasts(), LONG).await;
        assert_eq!(committed, BarrierEnd::Committed);
        let failed = barrier_end(async { Err::<(), _>("no quorum") }, lasts(), LONG).await;
        assert_eq!(failed, BarrierEnd::Failed("no quorum".into()));
        let write = std::future::pending::<Result<(), String>>();
        let late = barrier_end(write, lasts(), Duration::from_millis(10)).await;
        assert_eq!(late, BarrierEnd::TimedOut);
    }
}
