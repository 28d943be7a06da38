//! What an inbound Raft message must be before openraft or the store sees it, even from an
//! authenticated controller (defence in depth, DESIGN §7). openraft trusts its peers: a vote
//! term of 2^64−1 overflows inside it and panics every controller on every restart, a
//! snapshot chunk at a huge offset makes it allocate that much, and a snapshot of garbage is
//! handed to the store. So:
//!
//! - terms and log indexes are bounded far above anything a real cluster reaches, and log
//!   ids must be coherent (entries consecutive after `prev_log_id`, none of a later term than
//!   the sender's vote, a commit no later than what the sender has);
//! - the sender speaks only for itself: with TLS, the node id in its vote is the one its
//!   certificate's name has in `--peers`; and every node id it names is a member;
//! - snapshots are assembled here, contiguously, up to [`MAX_SNAPSHOT_BYTES`], and handed to
//!   openraft in one piece only once the whole of it decodes as a state.

use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use openraft::{EntryPayload, LogId, StoredMembership, Vote};

use crate::node::election::{PreVote, StepDown};
use crate::store::{NodeId, TypeConfig};

/// No real cluster gets near this many elections (one a second for nine million years).
pub const MAX_TERM: u64 = 1 << 48;
/// Nor this many log entries.
pub const MAX_INDEX: u64 = 1 << 62;
/// The largest snapshot a controller accepts (a cluster of millions of jobs stays well
/// below it).
pub const MAX_SNAPSHOT_BYTES: u64 = 2 << 30;

/// Who may be speaking: the members' node ids are `1..=members` (`--peers` positions) or
/// joined controllers' ids (`node::members`); `sender` is the node id the connection's
/// certificate proves (none without TLS).
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    pub members: u64,
    pub sender: Option<NodeId>,
}

impl Peer {
    fn member(&self, id: NodeId, what: &str) -> Result<(), String> {
        if id == 0 || (id > self.members && !crate::node::members::is_joined(id)) {
            return Err(format!(
                "{what} names node {id}, not a member (1..={} or a joined controller's id)",
                self.members
            ));
        }
        Ok(())
    }

    /// The vote is a sane one, and the sender's own.
    fn vote(&self, vote: &Vote<NodeId>) -> Result<(), String> {
        let leader = vote.leader_id;
        if leader.term > MAX_TERM {
            return Err(format!("vote term {} is beyond {MAX_TERM}", leader.term));
        }
        self.member(leader.node_id, "the vote")?;
        match self.sender {
            Some(sender) if sender != leader.node_id => Err(format!(
                "the vote is node {}'s, but the sender's certificate is node {sender}'s",
                leader.node_id
            )),
            _ => Ok(()),
        }
    }

    fn log_id(&self, id: &LogId<NodeId>, vote: &Vote<NodeId>, what: &str) -> Result<(), String> {
        if id.index > MAX_INDEX {
            return Err(format!("{what} index {} is beyond {MAX_INDEX}", id.index));
        }
        if id.leader_id.term > vote.leader_id.term {
            return Err(format!(
                "{what} is of term {}, after the sender's vote (term {})",
                id.leader_id.term, vote.leader_id.term
            ));
        }
        // Node 0 is openraft's own: the log's first entry, written at initialization.
        match id.leader_id.node_id {
            0 => Ok(()),
            node => self.member(node, what),
        }
    }

    fn membership(&self, m: &StoredMembership<NodeId, openraft::BasicNode>) -> Result<(), String> {
        if let Some(id) = m.log_id() {
            if id.index > MAX_INDEX || id.leader_id.term > MAX_TERM {
                return Err(format!("a membership's log id {id} is beyond any real log"));
            }
        }
        members(self, m.membership())
    }
}

/// Every node of a membership, voters (each joint config) and learners alike, is one of
/// `--peers`: openraft looks a voter up among the nodes and panics when it is not there.
fn members(
    peer: &Peer,
    m: &openraft::Membership<NodeId, openraft::BasicNode>,
) -> Result<(), String> {
    let voters = m.get_joint_config().iter().flatten();
    let nodes = m.nodes().map(|(id, _)| id);
    for id in voters.chain(nodes) {
        peer.member(*id, "a membership")?;
    }
    // A joined controller's entry must name it as its id was made (`name@host:port`).
    for (id, node) in m.nodes() {
        if crate::node::members::is_joined(*id)
            && crate::node::members::joined_candidate(*id, node).is_none()
        {
            return Err(format!(
                "a membership's node {id} is no joined controller's entry"
            ));
        }
    }
    if m.get_joint_config()
        .iter()
        .any(|c| c.iter().any(|v| m.get_node(v).is_none()))
    {
        return Err("a membership has a voter without a node".into());
    }
    Ok(())
}

/// Checks what a peer answered: its vote, like any vote it sends (a reply of term 2^64−1
/// would be saved and overflow at the next election).
pub fn reply_vote(vote: &Vote<NodeId>) -> Result<(), String> {
    if vote.leader_id.term > MAX_TERM {
        return Err(format!(
            "a reply's vote term {} is beyond {MAX_TERM}",
            vote.leader_id.term
        ));
    }
    Ok(())
}

/// Checks an append-entries request.
pub fn append(peer: &Peer, req: &AppendEntriesRequest<TypeConfig>) -> Result<(), String> {
    peer.vote(&req.vote)?;
    if let Some(prev) = &req.prev_log_id {
        peer.log_id(prev, &req.vote, "prev_log_id")?;
    }
    let first = req.prev_log_id.map_or(0, |p| p.index + 1);
    let mut term = req.prev_log_id.map_or(0, |p| p.leader_id.term);
    for (next, entry) in (first..).zip(&req.entries) {
        peer.log_id(&entry.log_id, &req.vote, "an entry")?;
        if entry.log_id.index != next {
            return Err(format!(
                "entry {} where {next} was due: entries must follow prev_log_id one by one",
                entry.log_id.index
            ));
        }
        if entry.log_id.leader_id.term < term {
            return Err(format!(
                "entry {} is of term {}, before the entry it follows (term {term})",
                entry.log_id.index, entry.log_id.leader_id.term
            ));
        }
        if let EntryPayload::Membership(m) = &entry.payload {
            members(peer, m)?;
        }
        term = entry.log_id.leader_id.term;
    }
    if let Some(commit) = &req.leader_commit {
        peer.log_id(commit, &req.vote, "leader_commit")?;
    }
    Ok(())
}

/// Checks a vote request.
pub fn vote(peer: &Peer, req: &VoteRequest<NodeId>) -> Result<(), String> {
    peer.vote(&req.vote)?;
    match &req.last_log_id {
        Some(last) => peer.log_id(last, &req.vote, "last_log_id"),
        None => Ok(()),
    }
}

/// Checks a pre-vote.
pub fn pre_vote(peer: &Peer, req: &PreVote) -> Result<(), String> {
    peer.member(req.candidate, "the pre-vote")?;
    if let Some(sender) = peer.sender.filter(|s| *s != req.candidate) {
        return Err(format!(
            "the pre-vote is node {}'s, but the sender's certificate is node {sender}'s",
            req.candidate
        ));
    }
    match &req.last_log_id {
        Some(last) if last.index > MAX_INDEX || last.leader_id.term > MAX_TERM => {
            Err(format!("last_log_id {last} is beyond any real log"))
        }
        _ => Ok(()),
    }
}

/// Checks a primary's step-down: the sender speaks for itself, and names members.
pub fn step_down(peer: &Peer, req: &StepDown) -> Result<(), String> {
    peer.member(req.leader, "the step-down")?;
    peer.member(req.successor, "the step-down's successor")?;
    if let Some(sender) = peer.sender.filter(|s| *s != req.leader) {
        return Err(format!(
            "the step-down is node {}'s, but the sender's certificate is node {sender}'s",
            req.leader
        ));
    }
    if req.term > MAX_TERM {
        return Err(format!("term {} is beyond {MAX_TERM}", req.term));
    }
    Ok(())
}

/// Checks what an install-snapshot chunk says about the snapshot (not its bytes).
pub fn snapshot_meta(peer: &Peer, req: &InstallSnapshotRequest<TypeConfig>) -> Result<(), String> {
    peer.vote(&req.vote)?;
    if let Some(last) = &req.meta.last_log_id {
        peer.log_id(last, &req.vote, "the snapshot's last_log_id")?;
    }
    peer.membership(&req.meta.last_membership)?;
    let end = req.offset.checked_add(req.data.len() as u64);
    if end.is_none_or(|end| end > MAX_SNAPSHOT_BYTES) {
        return Err(format!(
            "a chunk at offset {} of {} bytes goes beyond {MAX_SNAPSHOT_BYTES} bytes",
            req.offset,
            req.data.len()
        ));
    }
    Ok(())
}

/// A snapshot being received, assembled outside the store.
#[derive(Debug, Default)]
pub struct Assembly {
    /// The snapshot id and the bytes so far.
    current: Option<(String, Vec<u8>)>,
}

/// What a chunk did to the [`Assembly`].
#[derive(Debug, PartialEq, Eq)]
pub enum Chunk {
    /// Taken; more are due.
    More,
    /// The last one: the whole snapshot.
    Done(Vec<u8>),
    /// Not the chunk due: the sender must start again from `expect`.
    Mismatch { expect: u64 },
}

impl Assembly {
    /// Adds a chunk (already checked by [`snapshot_meta`]). A chunk at offset 0 starts a
    /// snapshot afresh; any other must continue the current one where it ends or repeat
    /// part of it (a resend), never leave a gap.
    pub fn add(&mut self, id: &str, offset: u64, data: &[u8], done: bool) -> Chunk {
        if offset == 0 {
            self.current = Some((id.to_string(), Vec::new()));
        }
        let Some((current, bytes)) = self.current.as_mut() else {
            return Chunk::Mismatch { expect: 0 };
        };
        // A chunk sent again (its reply was lost or late) rewrites what it covers; a gap or
        // another snapshot's chunk is a mismatch.
        if current != id || offset > bytes.len() as u64 {
            let expect = if current == id { bytes.len() as u64 } else { 0 };
            return Chunk::Mismatch { expect };
        }
        bytes.truncate(offset as usize);
        bytes.extend_from_slice(data);
        if !done {
            return Chunk::More;
        }
        let (_, bytes) = self.current.take().unwrap_or_default();
        Chunk::Done(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, Entry, LeaderId};
    use proptest::prelude::*;

    const PEER: Peer = Peer {
        members: 3,
        sender: Some(1),
    };

    fn vote_of(term: u64, node: NodeId) -> Vote<NodeId> {
        Vote {
            leader_id: LeaderId::new(term, node),
            committed: true,
        }
    }

    fn log_id(term: u64, node: NodeId, index: u64) -> LogId<NodeId> {
        LogId::new(CommittedLeaderId::new(term, node), index)
    }

    fn append_of(
        term: u64,
        prev: Option<LogId<NodeId>>,
        indexes: &[(u64, u64)],
    ) -> AppendEntriesRequest<TypeConfig> {
        AppendEntriesRequest {
            vote: vote_of(term, 1),
            prev_log_id: prev,
            entries: indexes
                .iter()
                .map(|(t, i)| Entry {
                    log_id: log_id(*t, 1, *i),
                    payload: EntryPayload::Blank,
                })
                .collect(),
            leader_commit: prev,
        }
    }

    #[test]
    fn the_overflowing_vote_of_the_attack_is_refused() {
        let req = append_of(u64::MAX, None, &[]);
        let e = append(&PEER, &req).unwrap_err();
        assert!(e.contains("beyond"), "{e}");
        let vote_req = VoteRequest {
            vote: vote_of(u64::MAX, 1),
            last_log_id: None,
        };
        assert!(vote(&PEER, &vote_req).is_err());
    }

    #[test]
    fn a_sender_speaks_only_for_itself_and_names_only_members() {
        let mut req = append_of(3, None, &[]);
        req.vote = vote_of(3, 2);
        let e = append(&PEER, &req).unwrap_err();
        assert!(e.contains("certificate is node 1's"), "{e}");
        // Without a certificate any member may speak, but only a member.
        let open = Peer {
            members: 3,
            sender: None,
        };
        assert_eq!(append(&open, &req), Ok(()));
        req.vote = vote_of(3, 9);
        let e = append(&open, &req).unwrap_err();
        assert!(e.contains("node 9, not a member"), "{e}");
        let pre = PreVote {
            candidate: 2,
            last_log_id: None,
        };
        assert!(pre_vote(&PEER, &pre).is_err());
        assert_eq!(pre_vote(&open, &pre), Ok(()));
        let down = StepDown {
            leader: 2,
            term: 3,
            successor: 1,
        };
        let e = step_down(&PEER, &down).unwrap_err();
        assert!(e.contains("certificate is node 1's"), "{e}");
        assert_eq!(step_down(&open, &down), Ok(()));
        let e = step_down(
            &open,
            &StepDown {
                successor: 9,
                ..down.clone()
            },
        )
        .unwrap_err();
        assert!(e.contains("node 9, not a member"), "{e}");
        let e = step_down(
            &open,
            &StepDown {
                term: u64::MAX,
                ..down
            },
        )
        .unwrap_err();
        assert!(e.contains("beyond"), "{e}");
    }

    #[test]
    fn entries_follow_prev_one_by_one_and_never_outrun_the_vote() {
        let prev = Some(log_id(2, 1, 10));
        assert_eq!(
            append(&PEER, &append_of(3, prev, &[(2, 11), (3, 12)])),
            Ok(())
        );
        let gap = append(&PEER, &append_of(3, prev, &[(3, 12)])).unwrap_err();
        assert!(gap.contains("where 11 was due"), "{gap}");
        let later = append(&PEER, &append_of(3, prev, &[(4, 11)])).unwrap_err();
        assert!(later.contains("after the sender's vote"), "{later}");
        let back = append(&PEER, &append_of(3, prev, &[(3, 11), (2, 12)])).unwrap_err();
        assert!(back.contains("before the entry it follows"), "{back}");
        let huge = append(&PEER, &append_of(3, Some(log_id(2, 1, u64::MAX)), &[])).unwrap_err();
        assert!(huge.contains("beyond"), "{huge}");
        // The log's first entry is openraft's, of node 0.
        let first = Some(log_id(0, 0, 0));
        assert_eq!(append(&PEER, &append_of(3, first, &[(3, 1)])), Ok(()));
    }

    #[test]
    fn a_membership_with_a_voter_beyond_the_peers_is_refused() {
        use std::collections::{BTreeMap, BTreeSet};
        let nodes: BTreeMap<NodeId, openraft::BasicNode> = (1..=3)
            .map(|i| (i, openraft::BasicNode::default()))
            .collect();
        let ok = openraft::Membership::new(vec![BTreeSet::from([1, 2, 3])], nodes.clone());
        assert_eq!(members(&PEER, &ok), Ok(()));
        // A voter 9 without a node: openraft would panic looking it up at the next election.
        let forged: openraft::Membership<NodeId, openraft::BasicNode> = serde_json::from_str(
            r#"{"configs":[[1,2,3,9]],"nodes":{"1":{"addr":""},"2":{"addr":""},"3":{"addr":""}}}"#,
        )
        .unwrap();
        let e = members(&PEER, &forged).unwrap_err();
        assert!(e.contains("node 9"), "{e}");
        assert!(reply_vote(&vote_of(u64::MAX, 2)).is_err());
        assert_eq!(reply_vote(&vote_of(7, 2)), Ok(()));
    }

    #[test]
    fn snapshots_assemble_contiguously_and_restart_on_any_gap() {
        let mut a = Assembly::default();
        assert_eq!(a.add("s", 5, b"x", false), Chunk::Mismatch { expect: 0 });
        assert_eq!(a.add("s", 0, b"ab", false), Chunk::More);
        assert_eq!(a.add("s", 7, b"x", false), Chunk::Mismatch { expect: 2 });
        // A resend of the last chunk replaces it.
        assert_eq!(a.add("s", 1, b"b", false), Chunk::More);
        assert_eq!(a.add("t", 2, b"x", false), Chunk::Mismatch { expect: 0 });
        assert_eq!(a.add("s", 2, b"cd", true), Chunk::Done(b"abcd".to_vec()));
        // Finished: a continuation of it is a mismatch, a new one starts at 0.
        assert_eq!(a.add("s", 4, b"e", true), Chunk::Mismatch { expect: 0 });
        assert_eq!(a.add("u", 0, b"z", true), Chunk::Done(b"z".to_vec()));
    }

    #[test]
    fn a_chunk_beyond_the_snapshot_limit_is_refused_before_any_allocation() {
        let req = InstallSnapshotRequest::<TypeConfig> {
            vote: vote_of(3, 1),
            meta: openraft::SnapshotMeta {
                last_log_id: Some(log_id(3, 1, 5)),
                last_membership: StoredMembership::default(),
                snapshot_id: "s".into(),
            },
            offset: 1 << 40,
            data: vec![1],
            done: false,
        };
        let e = snapshot_meta(&PEER, &req).unwrap_err();
        assert!(e.contains("goes beyond"), "{e}");
        let req = InstallSnapshotRequest {
            offset: u64::MAX,
            ..req
        };
        assert!(snapshot_meta(&PEER, &req).is_err());
    }

    proptest! {
        /// Whatever a peer sends, the checks answer without panicking, and what they pass
        /// stays within the bounds openraft can do arithmetic on.
        #[test]
        fn no_append_passes_with_out_of_bounds_ids(
            term in any::<u64>(),
            node in 0u64..10,
            prev in proptest::option::of((any::<u64>(), 0u64..10, any::<u64>())),
            entries in proptest::collection::vec((any::<u64>(), any::<u64>()), 0..5),
        ) {
            let mut req = append_of(term, prev.map(|(t, n, i)| log_id(t, n, i)), &entries);
            req.vote = vote_of(term, node);
            let open = Peer { members: 3, sender: None };
            if append(&open, &req).is_ok() {
                prop_assert!(term <= MAX_TERM && (1..=3).contains(&node));
                for e in &req.entries {
                    prop_assert!(e.log_id.index <= MAX_INDEX && e.log_id.leader_id.term <= term);
                }
            }
        }
    }
}
