//! Who the controllers are: the `--peers` given at start, plus those added since
//! (`xce admin members add`), as the Raft membership records them.
//!
//! The first members' node ids are their positions in `--peers` (1, 2, 3, ...), as ever. A
//! controller added later takes an id derived from its name ([`joined_id`]: the high bit set,
//! so it can never be a position), which it and the primary compute alike with nothing to
//! agree on first; its membership entry carries `name@host:port`, so every node can name it
//! and reach it. Ids are never reused: a removed controller's name comes back with its id.

use std::time::Duration;

use openraft::BasicNode;
use xce_client::wire::ReplyHeader;
use xce_client::Candidate;
use xce_proto::Status;

use super::Node;
use crate::store::NodeId;

/// The bit every joined controller's id has, and no position ever will.
const JOINED: NodeId = 1 << 62;

/// How long an added controller has to catch up (a snapshot and the log since) before the
/// addition gives up.
const CATCH_UP: Duration = Duration::from_secs(120);

/// The node id of a controller added at run time: FNV-1a of its name, with [`JOINED`] set.
pub fn joined_id(name: &str) -> NodeId {
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    JOINED | (hash & (JOINED - 1))
}

/// Whether `id` is a joined controller's (not a `--peers` position).
pub fn is_joined(id: NodeId) -> bool {
    id & JOINED != 0
}

/// The membership entry of a joined controller.
pub fn joined_node(name: &str, addr: &str) -> BasicNode {
    BasicNode {
        addr: format!("{name}@{addr}"),
    }
}

/// A joined controller's name and address from its membership entry, when they are well
/// formed and the name is the one its id was made from.
pub fn joined_candidate(id: NodeId, node: &BasicNode) -> Option<Candidate> {
    let (name, addr) = node.addr.split_once('@')?;
    if joined_id(name) != id {
        return None;
    }
    let mut parsed = xce_client::parse_candidates(&format!("{name}={addr}")).ok()?;
    parsed.pop()
}

/// How long the primary tries to reach a controller before adding it.
const PROBE: Duration = Duration::from_secs(2);

/// Refuses to add a controller no one can connect to: a learner that never catches up would
/// hold the addition for [`CATCH_UP`].
async fn reachable(name: &str, addr: &str) -> Result<(), ReplyHeader> {
    let refused = |why: String| {
        ReplyHeader::status(
            Status::NotReady,
            format!("{name} at {addr} is not reachable ({why}): start it with --join first"),
        )
    };
    match tokio::time::timeout(PROBE, tokio::net::TcpStream::connect(addr)).await {
        Err(_) => Err(refused(format!("no connection within {PROBE:?}"))),
        Ok(Err(e)) => Err(refused(e.to_string())),
        Ok(Ok(_)) => Ok(()),
    }
}

impl Node {
    /// Controller `id`: a `--peers` position, or a joined controller of the membership.
    pub fn member(&self, id: NodeId) -> Option<Candidate> {
        if !is_joined(id) {
            return self.peers.get((id as usize).checked_sub(1)?).cloned();
        }
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        let node = m.membership_config.membership().get_node(&id)?.clone();
        joined_candidate(id, &node)
    }

    /// The node id of controller `name`: its joined id when the membership holds it (an
    /// operator may since have listed it in `--peers` too), else its `--peers` position,
    /// else (a controller not yet added) its joined id.
    pub fn id_of(&self, name: &str) -> NodeId {
        let joined = joined_id(name);
        let is_member = {
            let metrics = self.raft.metrics();
            let m = metrics.borrow();
            m.membership_config.membership().get_node(&joined).is_some()
        };
        match self.peers.iter().position(|p| p.name == name) {
            Some(i) if !is_member => super::node_id_of(i),
            _ => joined,
        }
    }

    /// A member's entry in the membership, as openraft dials it.
    pub fn basic_node(&self, id: NodeId) -> Option<openraft::BasicNode> {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        m.membership_config.membership().get_node(&id).cloned()
    }

    /// Every controller of the current membership (voters and learners), by id.
    pub fn members(&self) -> Vec<(NodeId, Candidate)> {
        let metrics = self.raft.metrics();
        let ids: Vec<NodeId> = {
            let m = metrics.borrow();
            m.membership_config
                .membership()
                .nodes()
                .map(|(id, _)| *id)
                .collect()
        };
        ids.into_iter()
            .filter_map(|id| Some((id, self.member(id)?)))
            .collect()
    }

    /// Adds controller `name` at `addr`: as a learner until it has caught up, then as a
    /// voter. Only on the primary (the caller has passed the gate). Adding a voter again at
    /// the same address is done already; at another, a conflict.
    pub async fn add_member(&self, name: &str, addr: &str) -> Result<NodeId, ReplyHeader> {
        let candidate = xce_client::parse_candidates(&format!("{name}={addr}"))
            .map_err(|e| ReplyHeader::status(Status::Invalid, format!("{name}={addr}: {e}")))?;
        let addr = candidate.first().map(Candidate::addr).unwrap_or_default();
        let id = self.id_of(name);
        // Idempotent, so that a client's re-send after a timeout finishes the job: a voter
        // is done, a learner goes on to catch up and vote.
        if self.voters().contains(&id) {
            return match self.member(id) {
                Some(m) if m.addr() == addr => Ok(id),
                _ => Err(ReplyHeader::status(
                    Status::Conflict,
                    format!("{name} is a member already, at another address"),
                )),
            };
        }
        reachable(name, &addr).await?;
        let node = if is_joined(id) {
            joined_node(name, &addr)
        } else {
            BasicNode { addr: addr.clone() }
        };
        self.check_build_of(id, name, &node).await?;
        let _call = self.raft_call().ok_or_else(|| self.shutting_down())?;
        let caught_up = tokio::time::timeout(CATCH_UP, self.raft.add_learner(id, node, true));
        match caught_up.await {
            Err(_) => {
                return Err(ReplyHeader::status(
                    Status::NotReady,
                    format!(
                        "{name} at {addr} did not catch up within {CATCH_UP:?}: is it running \
                         with --join?"
                    ),
                ))
            }
            Ok(Err(e)) => return Err(self.leader_error(&e)),
            Ok(Ok(_)) => {}
        }
        let mut voters = self.voters();
        voters.insert(id);
        self.change_voters(voters).await?;
        Ok(id)
    }

    /// Removes controller `name` from the voters and the membership.
    pub async fn remove_member(&self, name: &str) -> Result<NodeId, ReplyHeader> {
        let id = self.id_of(name);
        let mut voters = self.voters();
        if !voters.remove(&id) {
            return Err(ReplyHeader::status(
                Status::NoEnt,
                format!("{name} is not a voting member (already removed, or never added)"),
            ));
        }
        if voters.is_empty() {
            return Err(ReplyHeader::status(
                Status::Invalid,
                format!("{name} is the last member: a cluster needs one"),
            ));
        }
        self.change_voters(voters).await?;
        Ok(id)
    }

    pub(super) fn voters(&self) -> std::collections::BTreeSet<NodeId> {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        m.membership_config.membership().voter_ids().collect()
    }

    async fn change_voters(
        &self,
        voters: std::collections::BTreeSet<NodeId>,
    ) -> Result<(), ReplyHeader> {
        let _call = self.raft_call().ok_or_else(|| self.shutting_down())?;
        let changed = self.raft.change_membership(voters, false);
        match tokio::time::timeout(self.timeouts.write * 4, changed).await {
            Err(_) => Err(self.lost_majority("membership change")),
            Ok(Err(e)) => Err(self.leader_error(&e)),
            Ok(Ok(_)) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_joined_id_is_never_a_position_and_names_its_entry() {
        let id = joined_id("c4");
        assert!(is_joined(id) && !is_joined(3));
        assert_eq!(id, joined_id("c4"));
        assert_ne!(id, joined_id("c5"));
        let node = joined_node("c4", "10.0.0.4:7101");
        let c = joined_candidate(id, &node).unwrap();
        assert_eq!(
            (c.name.as_str(), c.addr()),
            ("c4", "10.0.0.4:7101".to_string())
        );
        // An entry whose name is not the one its id was made from names no one.
        assert!(joined_candidate(joined_id("c5"), &node).is_none());
        assert!(joined_candidate(
            id,
            &BasicNode {
                addr: "10.0.0.4:7101".into()
            }
        )
        .is_none());
    }
}
