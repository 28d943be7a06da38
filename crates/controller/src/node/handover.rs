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

/// The longest a leader sleeps between looks at its lease when nothing else wakes it.
const IDLE: Duration = Duration::from_secs(1);
/// The shortest sleep, so that a lease that is just running out is not spun on.
const MIN_WAIT: Duration = Duration::from_millis(2);

/// Runs until Raft shuts down: when this node is a leader whose lease ran out, hands over
/// once per term.
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
        let wait = match (leader_term, node.lease.left()) {
            (Some(term), Some(left)) if handed_over != Some(term) => {
                if left.is_zero() && node.lease.stepped_down() {
                    handed_over = Some(term);
                    hand_over(&node, &mut network, term).await;
                    continue;
                }
                if left.is_zero() && node.lease.silence() > node.lease.limit {
                    // Past the silent window (it began before this task could act): nothing
                    // to hand over until the lease is renewed, which changes the metrics.
                    IDLE
                } else {
                    left.max(MIN_WAIT)
                }
            }
            _ => IDLE,
        };
        tokio::select! {
            changed = metrics.changed() => if changed.is_err() { return },
            () = tokio::time::sleep(wait) => {}
        }
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
    let set_handed_to = |to: Option<(u64, NodeId)>| {
        *node
            .handed_to
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = to;
    };
    set_handed_to(Some((term, successor)));
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
            set_handed_to(None);
        }
    }
}
