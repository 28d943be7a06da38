//! The hand-over of a primary that no majority has acknowledged within its lease.
//!
//! Such a primary goes silent (`Lease::stepped_down`, enforced by the Raft network) so that
//! the standbys elect one that can commit. Left to their timers, they stand only after
//! openraft's leader lease *plus* a random election timeout of silence: about a second of
//! outage in all when the primary sits behind a slow link (a 150 ms round trip, beyond
//! openraft's 50 ms append timeout), where its standbys keep hearing it until it goes
//! silent. So the primary, as it goes silent, tells them: it asks the standby whose log it
//! last saw furthest ahead to stand as soon as the other voters' leader lease allows
//! ([`StepDown`], answered in `election`). Only the primary a standby follows, in its own
//! term, can ask; a primary cut off from everyone reaches no one, and the usual timers apply.

use std::sync::Arc;
use std::time::Duration;

use openraft::{RaftNetworkFactory, ServerState};
use tracing::{debug, info};

use super::election::StepDown;
use super::Node;
use crate::network::raft_client::Network;
use crate::store::NodeId;

/// The longest a node waits for a metrics change before it looks again.
const IDLE: Duration = Duration::from_secs(1);
/// How often a leader whose lease has run out (and that has handed over, or missed the
/// silent window) looks whether it was renewed.
const STALE_RECHECK: Duration = Duration::from_millis(25);

/// Runs until Raft shuts down: when this node is a leader whose lease ran out, hands over
/// once per term. A leader follows its lease's timer, not every metrics change (one per
/// commit under load); anyone else waits for the metrics to say it leads.
pub(super) async fn run_handover(node: Arc<Node>, mut network: Network) {
    let mut metrics = node.raft.metrics();
    let mut handed_over: Option<u64> = None;
    loop {
        let (leader_term, running) = {
            let m = metrics.borrow_and_update();
            let leader = m.state == ServerState::Leader;
            (leader.then_some(m.current_term), m.running_state.is_ok())
        };
        if !running {
            return;
        }
        match (leader_term, node.lease.left()) {
            (Some(term), Some(left)) => {
                if left.is_zero() && handed_over != Some(term) && node.lease.stepped_down() {
                    handed_over = Some(term);
                    hand_over(&node, &mut network, term).await;
                    continue;
                }
                let wait = if left.is_zero() { STALE_RECHECK } else { left };
                tokio::time::sleep(wait).await;
            }
            // Not leading (or leading before the lease has seen it: look again soon).
            _ => {
                if let Ok(Err(_)) = tokio::time::timeout(IDLE, metrics.changed()).await {
                    return;
                }
            }
        }
    }
}

impl Node {
    /// The term in which this node, as primary, handed over, and to whom: where `gate`
    /// sends its clients while it is silent.
    pub(super) fn handed_to(&self) -> Option<(u64, NodeId)> {
        *self.handed_to_slot()
    }

    fn set_handed_to(&self, to: Option<(u64, NodeId)>) {
        *self.handed_to_slot() = to;
    }

    fn handed_to_slot(&self) -> std::sync::MutexGuard<'_, Option<(u64, NodeId)>> {
        self.handed_to
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Asks every other voter at once, naming the one whose log this leader last saw furthest
/// ahead as the successor (ties go to the lowest id).
async fn hand_over(node: &Node, network: &mut Network, term: u64) {
    let (targets, successor) = {
        let m = node.raft.metrics();
        let m = m.borrow();
        let membership = m.membership_config.membership();
        let mut targets: Vec<(NodeId, openraft::BasicNode, Option<u64>)> = membership
            .voter_ids()
            .filter(|id| *id != node.id)
            .filter_map(|id| {
                let n = membership.get_node(&id)?.clone();
                let matched = m
                    .replication
                    .as_ref()
                    .and_then(|r| r.get(&id).cloned().flatten())
                    .map(|l| l.index);
                Some((id, n, matched))
            })
            .collect();
        targets.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
        let successor = targets.first().map(|t| t.0);
        (targets, successor)
    };
    let Some(successor) = successor else { return };
    // Clients are sent to the successor from now on (it is across the slow link only from
    // here), and no longer once it refuses or cannot be reached.
    node.set_handed_to(Some((term, successor)));
    info!(
        node = %node.name,
        term,
        successor,
        silence_ms = node.lease.silence().as_millis() as u64,
        "no majority acknowledged this primary within its lease: stepping down and handing over"
    );
    let req = StepDown {
        leader: node.id,
        term,
        successor,
    };
    let wait = node.timeouts.election.lease * 2;
    let mut asks = Vec::with_capacity(targets.len());
    for (id, n, _) in targets {
        let mut client = network.new_client(id, &n).await;
        let req = req.clone();
        asks.push(async move { (id, client.step_down(&req, wait).await) });
    }
    for (id, answer) in futures::future::join_all(asks).await {
        let taken = match answer {
            Ok(reply) if reply.accepted => {
                debug!(node = %node.name, peer = id, "hand-over taken");
                true
            }
            Ok(reply) => {
                debug!(node = %node.name, peer = id, reason = %reply.reason, "hand-over refused");
                false
            }
            Err(e) => {
                debug!(node = %node.name, peer = id, error = %e, "hand-over unanswered");
                false
            }
        };
        if id == successor && !taken {
            node.set_handed_to(None);
        }
    }
}
