//! The inbound side of the Raft transport: hands each message from a peer controller to the
//! local openraft node, once it has passed [`raft_input`]'s checks. Reached only through
//! `Controller.raft`, which the session table opens to controller sessions alone.

use std::cell::RefCell;
use std::sync::Arc;

use capnp::capability::Rc;
use openraft::error::{InstallSnapshotError, RaftError, SnapshotMismatch};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest,
};
use openraft::SnapshotSegmentId;
use tracing::warn;
use xce_proto::xce_capnp::raft;

use super::codec;
use super::raft_input::{self, Assembly, Chunk, Peer};
use crate::node::election::{PreVote, PreVoteReply, StepDown, StepDownReply};
use crate::node::Node;
use crate::store::{NodeId, TypeConfig};

/// The inbound side of the Raft transport: hands each message to the local openraft node.
pub struct RaftService {
    pub node: Arc<Node>,
    /// Who may be speaking on this connection.
    pub peer: Peer,
    /// The snapshot being received, shared by this controller's connections (a sender that
    /// reconnects continues it).
    pub snapshots: std::rc::Rc<RefCell<Assembly>>,
}

/// The answer to a message that arrives while this controller shuts down.
fn stopping() -> capnp::Error {
    capnp::Error::failed("this controller is shutting down".into())
}

/// Refuses a message that failed its checks: the sender sees a failed call and retries, and
/// nothing reached openraft.
fn refuse(what: &str, reason: String) -> capnp::Error {
    warn!(%reason, "refused a Raft {what} from a peer");
    capnp::Error::failed(format!("{what} refused: {reason}"))
}

impl raft::Server for RaftService {
    /// This build's version, for the primary that decides when to raise the cluster's.
    async fn build_info(
        self: Rc<Self>,
        _: raft::BuildInfoParams,
        mut results: raft::BuildInfoResults,
    ) -> Result<(), capnp::Error> {
        let mut r = results.get();
        r.set_version(crate::store::STORE_FORMAT);
        r.set_build(crate::BUILD);
        Ok(())
    }

    /// Retired jobs from this controller's history store, for a peer catching up
    /// (`node::history_sync`).
    async fn history_range(
        self: Rc<Self>,
        params: raft::HistoryRangeParams,
        mut results: raft::HistoryRangeResults,
    ) -> Result<(), capnp::Error> {
        let p = params.get()?;
        let from = p.get_from_seq();
        let limit = (p.get_limit() as usize).min(crate::node::HISTORY_PULL_PAGE);
        let history = self.node.history.clone();
        let records = tokio::task::spawn_blocking(move || {
            history.range(from, limit, crate::node::HISTORY_PULL_BYTES)
        })
        .await
        .map_err(|e| capnp::Error::failed(e.to_string()))?
        .map_err(|e| capnp::Error::failed(e.to_string()))?;
        let mut list = results.get().init_records(records.len() as u32);
        for (i, r) in records.iter().enumerate() {
            let mut b = list.reborrow().get(i as u32);
            b.set_seq(r.seq);
            b.set_id(r.id);
            b.set_job(&r.job);
            b.set_script(r.script.as_deref().unwrap_or(&[]));
        }
        Ok(())
    }

    async fn append_entries(
        self: Rc<Self>,
        params: raft::AppendEntriesParams,
        mut results: raft::AppendEntriesResults,
    ) -> Result<(), capnp::Error> {
        let req: AppendEntriesRequest<TypeConfig> = codec::from_bin(params.get()?.get_request()?)?;
        raft_input::append(&self.peer, &req).map_err(|e| refuse("append", e))?;
        let _inbound = self.node.raft_call().ok_or_else(stopping)?;
        let reply = self.node.raft.append_entries(req).await;
        // A conflict is still a current primary speaking (it is finding where our logs
        // agree); only a higher vote of ours means the sender is not our primary.
        let from_our_primary = reply
            .as_ref()
            .is_ok_and(|r| !matches!(r, AppendEntriesResponse::HigherVote(_)));
        if from_our_primary {
            self.node.heard_from_leader();
        }
        results.get().set_reply(&codec::to_json(&reply)?);
        Ok(())
    }

    async fn vote(
        self: Rc<Self>,
        params: raft::VoteParams,
        mut results: raft::VoteResults,
    ) -> Result<(), capnp::Error> {
        let req: VoteRequest<NodeId> = codec::from_json(params.get()?.get_request()?)?;
        raft_input::vote(&self.peer, &req).map_err(|e| refuse("vote", e))?;
        let _inbound = self.node.raft_call().ok_or_else(stopping)?;
        let candidate_log = req.last_log_id;
        let reply = self.node.raft.vote(req).await;
        if let Ok(resp) = &reply {
            // Having just voted, give that candidate its election before standing ourselves.
            if resp.vote_granted {
                self.node.heard_from_leader();
            }
            if !resp.vote_granted && resp.last_log_id > candidate_log {
                self.node.candidate_lags_behind();
            }
        }
        results.get().set_reply(&codec::to_json(&reply)?);
        Ok(())
    }

    async fn pre_vote(
        self: Rc<Self>,
        params: raft::PreVoteParams,
        mut results: raft::PreVoteResults,
    ) -> Result<(), capnp::Error> {
        let req: PreVote = codec::from_json(params.get()?.get_request()?)?;
        raft_input::pre_vote(&self.peer, &req).map_err(|e| refuse("pre-vote", e))?;
        let reply: Result<PreVoteReply, RaftError<NodeId>> = Ok(self.node.answer_pre_vote(&req));
        results.get().set_reply(&codec::to_json(&reply)?);
        Ok(())
    }

    async fn step_down(
        self: Rc<Self>,
        params: raft::StepDownParams,
        mut results: raft::StepDownResults,
    ) -> Result<(), capnp::Error> {
        let req: StepDown = codec::from_json(params.get()?.get_request()?)?;
        raft_input::step_down(&self.peer, &req).map_err(|e| refuse("step-down", e))?;
        let reply: Result<StepDownReply, RaftError<NodeId>> = Ok(self.node.answer_step_down(&req));
        results.get().set_reply(&codec::to_json(&reply)?);
        Ok(())
    }

    async fn install_snapshot(
        self: Rc<Self>,
        params: raft::InstallSnapshotParams,
        mut results: raft::InstallSnapshotResults,
    ) -> Result<(), capnp::Error> {
        let p = params.get()?;
        let mut req: InstallSnapshotRequest<TypeConfig> = codec::from_json(p.get_request()?)?;
        req.data = p.get_chunk()?.to_vec();
        raft_input::snapshot_meta(&self.peer, &req).map_err(|e| refuse("snapshot", e))?;
        let added =
            self.snapshots
                .borrow_mut()
                .add(&req.meta.snapshot_id, req.offset, &req.data, req.done);
        let reply: Result<_, RaftError<NodeId, InstallSnapshotError>> = match added {
            Chunk::More => Ok(InstallSnapshotResponse {
                vote: self.node.raft.metrics().borrow().vote,
            }),
            Chunk::Mismatch { expect } => Err(RaftError::APIError(
                InstallSnapshotError::SnapshotMismatch(SnapshotMismatch {
                    expect: SnapshotSegmentId {
                        id: req.meta.snapshot_id.clone(),
                        offset: expect,
                    },
                    got: SnapshotSegmentId {
                        id: req.meta.snapshot_id.clone(),
                        offset: req.offset,
                    },
                }),
            )),
            Chunk::Done(whole) => {
                // Whole and decodable, or it never reaches openraft and the store; decoded
                // off this thread, which serves every client.
                let checked = tokio::task::spawn_blocking(move || {
                    crate::store::check_snapshot(&whole).map(|()| whole)
                })
                .await
                .map_err(|e| refuse("snapshot", e.to_string()))?;
                let whole = checked.map_err(|e| refuse("snapshot", e))?;
                req.offset = 0;
                req.data = whole;
                let _inbound = self.node.raft_call().ok_or_else(stopping)?;
                self.node.raft.install_snapshot(req).await
            }
        };
        results.get().set_reply(&codec::to_json(&reply)?);
        Ok(())
    }
}
