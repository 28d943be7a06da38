//! Elections with a pre-vote: openraft's own election timer is off (`enable_elect: false`);
//! this task stands for election instead, and only after a majority has agreed that it may.
//!
//! openraft 0.9 has no pre-vote. Without one, a controller that cannot hear the primary (cut
//! off, or behind a link that drops its traffic) raises its term with every election timeout,
//! and when it comes back its higher term deposes a healthy primary: one needless failover.
//! Here a controller whose primary has been silent for openraft's leader lease plus a random
//! election timeout (the same timing openraft uses, so a dead primary is replaced as fast as
//! before) first asks every peer [`PreVote`]; a peer agrees only when it has not heard from a
//! primary within the lease either and its log is not ahead of the candidate's. With a
//! majority (counting itself), it triggers openraft's election; otherwise it waits another
//! random timeout, its term unchanged.

use std::sync::Arc;
use std::time::Duration;

use openraft::{LogId, RaftNetworkFactory, ServerState};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::Node;
use crate::network::raft_client::{Network, PeerClient};
use crate::store::NodeId;

/// "Would you vote for me?", asked before standing for election.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PreVote {
    pub candidate: NodeId,
    pub last_log_id: Option<LogId<NodeId>>,
}

/// The answer to a [`PreVote`], with the reason when refused (for the candidate's log).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PreVoteReply {
    pub granted: bool,
    pub reason: String,
}

/// Election timing, as in openraft's config.
#[derive(Debug, Clone, Copy)]
pub struct ElectionTiming {
    /// openraft's leader lease (`election_timeout_max`): a node that heard from a primary
    /// this recently neither campaigns nor agrees to a pre-vote.
    pub lease: Duration,
    pub timeout_min: Duration,
    pub timeout_max: Duration,
}

impl ElectionTiming {
    /// The lease plus a random election timeout: how long a primary may be silent before
    /// this node asks to stand.
    fn patience(&self) -> Duration {
        let span = self
            .timeout_max
            .saturating_sub(self.timeout_min)
            .as_millis() as u64;
        let jitter = if span == 0 {
            0
        } else {
            rand::random::<u64>() % span
        };
        self.lease + self.timeout_min + Duration::from_millis(jitter)
    }
}

impl Node {
    /// Answers a peer's [`PreVote`].
    pub fn answer_pre_vote(&self, req: &PreVote) -> PreVoteReply {
        let refuse = |reason: String| PreVoteReply {
            granted: false,
            reason,
        };
        let state = self.raft.metrics().borrow().state;
        if state == ServerState::Leader && !self.lease.expired() {
            return refuse(format!("{} is the primary and holds its lease", self.name));
        }
        let heard = self.contact().elapsed();
        if state != ServerState::Leader && heard < self.timeouts.election.lease {
            return refuse(format!(
                "{} heard from the primary {} ms ago",
                self.name,
                heard.as_millis()
            ));
        }
        let mine = self.raft.data_metrics().borrow().last_log;
        if req.last_log_id < mine {
            return refuse(format!(
                "{}'s log is ahead of the candidate's ({mine:?} > {:?})",
                self.name, req.last_log_id
            ));
        }
        PreVoteReply {
            granted: true,
            reason: String::new(),
        }
    }
}

/// Runs until Raft shuts down: waits out the primary's silence, then pre-votes and, when a
/// majority agrees, stands for election.
pub(super) async fn run_elections(node: Arc<Node>, mut network: Network) {
    let timing = node.timeouts.election;
    let mut peers: Vec<(NodeId, PeerClient)> = Vec::new();
    let mut last_attempt = Instant::now();
    loop {
        let patience = timing.patience();
        // Sleep until the primary (or our last attempt) has been silent for `patience`.
        loop {
            let since = (*node.contact()).max(last_attempt);
            let due = since + patience;
            if Instant::now() >= due {
                break;
            }
            tokio::time::sleep_until(due).await;
        }
        last_attempt = Instant::now();
        let (state, voters, nodes) = {
            let m = node.raft.metrics();
            let m = m.borrow();
            if m.running_state.is_err() {
                return;
            }
            let membership = m.membership_config.membership();
            let voters: Vec<NodeId> = membership.voter_ids().collect();
            let nodes: Vec<(NodeId, openraft::BasicNode)> =
                membership.nodes().map(|(id, n)| (*id, n.clone())).collect();
            (m.state, voters, nodes)
        };
        if state == ServerState::Leader || !voters.contains(&node.id) {
            continue;
        }
        // A node no client can reach must not become the primary.
        if node.lease.unreachable_for().is_some() {
            continue;
        }
        for (id, n) in &nodes {
            if *id != node.id && voters.contains(id) && !peers.iter().any(|(p, _)| p == id) {
                peers.push((*id, network.new_client(*id, n).await));
            }
        }
        let round_began = Instant::now();
        let granted = pre_vote(&node, &mut peers, &voters, timing.timeout_min).await;
        let majority = voters.len() / 2 + 1;
        if granted < majority {
            debug!(node = %node.name, granted, majority, "pre-vote lost; not standing");
            continue;
        }
        // Another candidate may have won (or asked for our vote) while we asked around.
        if *node.contact() >= round_began {
            debug!(node = %node.name, "a primary spoke during the pre-vote; not standing");
            continue;
        }
        let Some(_call) = node.raft_call() else {
            return;
        };
        info!(node = %node.name, granted, of = voters.len(), "pre-vote won; standing for election");
        if let Err(e) = node.raft.trigger().elect().await {
            warn!(node = %node.name, error = %e, "could not start an election");
        }
    }
}

/// Asks every other voter at once; returns how many agree, counting this node.
async fn pre_vote(
    node: &Node,
    peers: &mut [(NodeId, PeerClient)],
    voters: &[NodeId],
    wait: Duration,
) -> usize {
    let req = PreVote {
        candidate: node.id,
        last_log_id: node.raft.data_metrics().borrow().last_log,
    };
    let asks = peers
        .iter_mut()
        .filter(|(id, _)| voters.contains(id))
        .map(|(id, client)| {
            let req = req.clone();
            async move { (*id, client.pre_vote(&req, wait).await) }
        });
    let mut granted = 1;
    for (id, answer) in futures::future::join_all(asks).await {
        match answer {
            Ok(reply) if reply.granted => granted += 1,
            Ok(reply) => {
                debug!(node = %node.name, peer = id, reason = %reply.reason, "pre-vote refused")
            }
            Err(e) => debug!(node = %node.name, peer = id, error = %e, "pre-vote unanswered"),
        }
    }
    granted
}
