//! The openraft messages a controller receives from a peer, decoded as `network::raft` does
//! and judged by `raft_input`: the first byte picks the message. Any bytes are refused or
//! accepted without a panic; what is accepted keeps the promises the checks make (bounded
//! terms and indexes, entries one after another), and the commands an accepted append carries
//! are applied to a state that keeps its invariants.

use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, VoteRequest, VoteResponse,
};
use openraft::{EntryPayload, LogId};
use xce_controller::network::codec;
use xce_controller::network::raft_input::{self, Assembly, Chunk, Peer, MAX_INDEX, MAX_TERM};
use xce_controller::node::election::{PreVote, StepDown};
use xce_controller::state::State;
use xce_controller::store::{NodeId, TypeConfig};

/// The cluster the messages arrive at: three members, the sender proven to be node 1 (TLS)
/// or not proven at all.
const PEERS: [Peer; 2] = [
    Peer {
        members: 3,
        sender: Some(1),
    },
    Peer {
        members: 3,
        sender: None,
    },
];

/// Fuzzes the decoding and checking of every inbound Raft message.
pub fn run(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 6 {
        0 => append(rest),
        1 => vote(rest),
        2 => pre_vote(rest),
        3 => snapshot(rest),
        4 => replies(rest),
        _ => step_down(rest),
    }
}

fn bounded(id: &LogId<NodeId>) {
    assert!(
        id.index <= MAX_INDEX && id.leader_id.term <= MAX_TERM,
        "{id}"
    );
}

fn append(bytes: &[u8]) {
    let Ok(req) = codec::from_bin::<AppendEntriesRequest<TypeConfig>>(bytes) else {
        return;
    };
    for peer in &PEERS {
        if raft_input::append(peer, &req).is_err() {
            continue;
        }
        assert!(req.vote.leader_id.term <= MAX_TERM);
        let first = req.prev_log_id.map_or(0, |p| p.index + 1);
        for (next, entry) in (first..).zip(&req.entries) {
            bounded(&entry.log_id);
            assert_eq!(entry.log_id.index, next, "entries follow one by one");
        }
        let mut state = State::default();
        for entry in &req.entries {
            if let EntryPayload::Normal(batch) = &entry.payload {
                for cmd in &batch.commands {
                    state.apply(batch.at_ms, cmd.clone());
                    if let Err(e) = state.check_invariants() {
                        panic!("after {cmd:?}: {e}");
                    }
                }
            }
        }
    }
}

fn vote(bytes: &[u8]) {
    let Ok(req) = codec::from_json::<VoteRequest<NodeId>>(bytes) else {
        return;
    };
    for peer in &PEERS {
        if raft_input::vote(peer, &req).is_ok() {
            assert!(req.vote.leader_id.term <= MAX_TERM);
            if let Some(last) = &req.last_log_id {
                bounded(last);
            }
        }
    }
}

fn pre_vote(bytes: &[u8]) {
    let Ok(req) = codec::from_json::<PreVote>(bytes) else {
        return;
    };
    for peer in &PEERS {
        if raft_input::pre_vote(peer, &req).is_ok() {
            assert!((1..=peer.members).contains(&req.candidate));
            if let Some(last) = &req.last_log_id {
                bounded(last);
            }
        }
    }
}

fn step_down(bytes: &[u8]) {
    let Ok(req) = codec::from_json::<StepDown>(bytes) else {
        return;
    };
    for peer in &PEERS {
        if raft_input::step_down(peer, &req).is_ok() {
            let member = |id: NodeId| {
                (1..=peer.members).contains(&id) || xce_controller::node::members::is_joined(id)
            };
            assert!(member(req.leader) && member(req.successor), "{req:?}");
            assert!(req.term <= MAX_TERM);
            if let Some(sender) = peer.sender {
                assert_eq!(sender, req.leader, "a step-down speaks for its sender only");
            }
        }
    }
}

/// A run of install-snapshot chunks: a JSON request per line, its chunk the line's bytes
/// after a tab. The assembly never holds more than the checks allow, and a whole snapshot
/// is handed on only once `check_snapshot` accepts it.
fn snapshot(bytes: &[u8]) {
    let mut assembly = Assembly::default();
    for line in bytes.split(|b| *b == b'\n') {
        let (head, chunk) = match line.iter().position(|b| *b == b'\t') {
            Some(at) => (&line[..at], &line[at + 1..]),
            None => (line, &[][..]),
        };
        let Ok(mut req) = codec::from_json::<InstallSnapshotRequest<TypeConfig>>(head) else {
            continue;
        };
        req.data = chunk.to_vec();
        if raft_input::snapshot_meta(&PEERS[0], &req).is_err() {
            continue;
        }
        if let Chunk::Done(whole) =
            assembly.add(&req.meta.snapshot_id, req.offset, &req.data, req.done)
        {
            assert!(whole.len() as u64 <= raft_input::MAX_SNAPSHOT_BYTES);
            let _ = xce_controller::store::check_snapshot(&whole);
        }
    }
}

/// What a peer answers: decoded like `raft_client` does, the votes in them judged.
fn replies(bytes: &[u8]) {
    type Reply<T> = Result<T, openraft::error::RaftError<NodeId>>;
    if let Ok(Ok(reply)) = codec::from_json::<Reply<VoteResponse<NodeId>>>(bytes) {
        if raft_input::reply_vote(&reply.vote).is_ok() {
            assert!(reply.vote.leader_id.term <= MAX_TERM);
        }
    }
    if let Ok(Ok(AppendEntriesResponse::HigherVote(vote))) =
        codec::from_json::<Reply<AppendEntriesResponse<NodeId>>>(bytes)
    {
        if raft_input::reply_vote(&vote).is_ok() {
            assert!(vote.leader_id.term <= MAX_TERM);
        }
    }
}
