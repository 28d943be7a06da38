//! The readiness barrier: a new primary commits a `Barrier` entry in its own term and serves
//! only once it is applied (everything before it is applied too).

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
                    commands: vec![Command::Barrier {
                        term,
                        queues: queues.clone(),
                    }],
                };
                let Some(_call) = node.raft_call() else {
                    return;
                };
                match tokio::time::timeout(node.timeouts.write, node.raft.client_write(barrier))
                    .await
                {
                    Ok(Ok(_)) => {
                        node.ready_term.send_replace(term);
                        info!(node = %node.name, term, "primary is ready");
                        continue;
                    }
                    Ok(Err(e)) => {
                        warn!(node = %node.name, term, error = %e, "barrier not committed")
                    }
                    Err(_) => warn!(node = %node.name, term, "barrier not committed in time"),
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
