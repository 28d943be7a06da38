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

/// "I have stepped down; stand now": sent by a primary that no majority acknowledged within
/// its lease (see `node::handover`) to the standbys it follows up with, naming the one it
/// chose (the one whose log it last saw furthest ahead).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepDown {
    /// The primary handing over, and its term: only its own followers in that term act on it.
    pub leader: NodeId,
    pub term: u64,
    /// Who should stand first; the others keep their usual timers.
    pub successor: NodeId,
}

/// The answer to a [`StepDown`], with the reason when not taken.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepDownReply {
    pub accepted: bool,
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

    /// How long a standby its primary handed over to waits after that primary's last
    /// message: the other voters refuse any vote until openraft's leader lease has passed
    /// since they last heard it (received at about the same moment), so stand just after.
    fn handover_patience(&self) -> Duration {
        self.lease + HANDOVER_MARGIN + Duration::from_millis(rand::random::<u64>() % 10)
    }
}

/// How long after the other voters' leader lease a successor stands: room for their last
/// message from the old primary having arrived a little after ours.
const HANDOVER_MARGIN: Duration = Duration::from_millis(25);
/// A hand-over is void once its primary is heard this long after it: messages it sent just
/// before going silent may still be arriving, a heartbeat a healthy primary sends is not.
const HANDOVER_VOID_AFTER: Duration = Duration::from_millis(50);

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
        let window = self.timeouts.election.timeout_min;
        let mut campaigns = self.campaigns();
        // Two standbys whose timers fired together would each agree to the other, both
        // stand, and split the vote: a whole election timeout more of outage. Between equal
        // logs, the lower id goes first.
        if campaigns.standing_within(window) && req.last_log_id == mine && req.candidate > self.id {
            return refuse(format!(
                "{} is standing too, with the same log, and the lower id goes first",
                self.name
            ));
        }
        campaigns.granted = Some(Instant::now());
        PreVoteReply {
            granted: true,
            reason: String::new(),
        }
    }
}

impl Node {
    /// Answers a primary's [`StepDown`]: taken only from the primary this node follows, in
    /// that primary's term; when this node is the successor, its election loop stands as
    /// soon as the other voters' leader lease allows.
    pub fn answer_step_down(&self, req: &StepDown) -> StepDownReply {
        let (state, vote) = {
            let m = self.raft.metrics();
            let m = m.borrow();
            (m.state, m.vote)
        };
        let follows = vote.committed
            && vote.leader_id.node_id == req.leader
            && vote.leader_id.term == req.term;
        if state == ServerState::Leader || !follows {
            return StepDownReply {
                accepted: false,
                reason: format!(
                    "{} follows {vote} as {state:?}, not node {} in term {}",
                    self.name, req.leader, req.term
                ),
            };
        }
        if req.successor == self.id {
            let silent_ms = self.contact().elapsed().as_millis() as u64;
            info!(node = %self.name, leader = req.leader, term = req.term, silent_ms, "the primary stepped down and handed over to this node: standing for election once the leader lease has passed");
            *self.hand_over_received() = Some(HandOver {
                term: req.term,
                at: Instant::now(),
                tried: false,
            });
            self.wake_election.notify_one();
        }
        StepDownReply {
            accepted: true,
            reason: String::new(),
        }
    }

    /// The hand-over the primary of the current term made to this node, if it has been
    /// silent since: a primary heard again after it (a hand-over forged without TLS, say)
    /// voids it.
    fn hand_over_to_me(&self) -> Option<HandOver> {
        let term = self.raft.metrics().borrow().vote.leader_id.term;
        self.hand_over_to_me_in(term)
    }

    /// [`Node::hand_over_to_me`], for the primary of `term`. The gate keeps holding clients
    /// for as long as it lasts, early election attempt or not.
    pub(super) fn hand_over_to_me_in(&self, term: u64) -> Option<HandOver> {
        let h = (*self.hand_over_received())?;
        (h.term == term && *self.contact() <= h.at + HANDOVER_VOID_AFTER).then_some(h)
    }

    fn hand_over_received(&self) -> std::sync::MutexGuard<'_, Option<HandOver>> {
        self.handed_over
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// When this node last began a pre-vote round of its own, and last agreed to another
/// candidate's.
#[derive(Debug, Default)]
pub struct Campaigns {
    began: Option<Instant>,
    granted: Option<Instant>,
}

impl Campaigns {
    /// Whether this node began standing within `window`.
    fn standing_within(&self, window: Duration) -> bool {
        self.began.is_some_and(|t| t.elapsed() < window)
    }

    /// Whether this node agreed to another candidate at or after `since`: that one is
    /// likely standing now, and standing too would split the vote.
    fn granted_since(&self, since: Instant) -> bool {
        self.granted.is_some_and(|t| t >= since)
    }
}

impl Node {
    fn campaigns(&self) -> std::sync::MutexGuard<'_, Campaigns> {
        self.campaigns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A hand-over to this node: its term, when it arrived, and whether the early election it
/// allows has been tried.
#[derive(Debug, Clone, Copy)]
pub struct HandOver {
    term: u64,
    at: Instant,
    tried: bool,
}

/// Runs until Raft shuts down: waits out the primary's silence, then pre-votes and, when a
/// majority agrees, stands for election.
pub(super) async fn run_elections(node: Arc<Node>, mut network: Network) {
    let timing = node.timeouts.election;
    let mut peers: Vec<(NodeId, PeerClient)> = Vec::new();
    let mut last_attempt = Instant::now();
    loop {
        let patience = timing.patience();
        // Sleep until the primary (or our last attempt) has been silent for `patience`, or
        // for less when the primary handed over to this node.
        loop {
            let contact = *node.contact();
            let due = if node.hand_over_to_me().is_some_and(|h| !h.tried) {
                contact + timing.handover_patience()
            } else {
                contact.max(last_attempt) + patience
            };
            if Instant::now() >= due {
                break;
            }
            tokio::select! {
                () = tokio::time::sleep_until(due) => {}
                () = node.wake_election.notified() => {}
            }
        }
        // One early attempt per hand-over: if it fails, the usual timers take over, counted
        // from the primary's silence as if there had been no hand-over.
        let early = match node.hand_over_received().as_mut() {
            Some(h) if !h.tried => {
                h.tried = true;
                true
            }
            _ => false,
        };
        if !early {
            last_attempt = Instant::now();
        }
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
        {
            let mut campaigns = node.campaigns();
            // Agreed to another candidate a moment ago: give it its election first.
            let recently = round_began
                .checked_sub(timing.timeout_min)
                .unwrap_or(round_began);
            if campaigns.granted_since(recently) {
                debug!(node = %node.name, "agreed to another candidate's pre-vote just now; not standing");
                continue;
            }
            campaigns.began = Some(round_began);
        }
        let majority = voters.len() / 2 + 1;
        let granted = pre_vote(&node, &mut peers, &voters, majority, timing.timeout_min).await;
        if granted < majority {
            debug!(node = %node.name, granted, majority, "pre-vote lost; not standing");
            continue;
        }
        // Another candidate may have won (or asked for our vote) while we asked around.
        if *node.contact() >= round_began {
            debug!(node = %node.name, "a primary spoke during the pre-vote; not standing");
            continue;
        }
        if node.campaigns().granted_since(round_began) {
            debug!(node = %node.name, "agreed to another candidate during the pre-vote; not standing");
            continue;
        }
        let Some(_call) = node.raft_call() else {
            return;
        };
        let silent_ms = node.contact().elapsed().as_millis() as u64;
        info!(node = %node.name, granted, of = voters.len(), silent_ms, "pre-vote won; standing for election");
        if let Err(e) = node.raft.trigger().elect().await {
            warn!(node = %node.name, error = %e, "could not start an election");
        }
    }
}

/// Asks every other voter at once; returns how many agree, counting this node, as soon as
/// `majority` do (a voter behind a slow link, the old primary say, is not waited for).
async fn pre_vote(
    node: &Node,
    peers: &mut [(NodeId, PeerClient)],
    voters: &[NodeId],
    majority: usize,
    wait: Duration,
) -> usize {
    let req = PreVote {
        candidate: node.id,
        last_log_id: node.raft.data_metrics().borrow().last_log,
    };
    let mut asks: futures::stream::FuturesUnordered<_> = peers
        .iter_mut()
        .filter(|(id, _)| voters.contains(id))
        .map(|(id, client)| {
            let req = req.clone();
            async move { (*id, client.pre_vote(&req, wait).await) }
        })
        .collect();
    let mut granted = 1;
    while granted < majority {
        let Some((id, answer)) = futures::StreamExt::next(&mut asks).await else {
            break;
        };
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
