//! The proposer: concurrent writes batched into one Raft entry (one append and one fsync per
//! replica for many writes), and linearizable reads, which likewise share one check: every
//! read waiting when a check starts is served by it, so many concurrent reads cost one round
//! to the standbys instead of one each (which, under load, kept the primary from hearing its
//! majority within its lease).

use std::sync::Arc;

use openraft::error::{ClientWriteError, RaftError};
use tokio::sync::{mpsc, oneshot, Semaphore};
use xce_client::wire::ReplyHeader;
use xce_proto::Status;

use super::{now_ms, Node, Proposal, ReadWaiter, MAX_BATCH, MAX_BATCH_BYTES, MAX_INFLIGHT_BATCHES};
use crate::state::{Command, Outcome, State};
use crate::store::Batch;

impl Node {
    /// Commits one write and returns its outcome.
    pub async fn write(&self, cmd: Command) -> Result<Outcome, ReplyHeader> {
        // Every field is bounded before anything can reach the log.
        crate::state::validate_command(&cmd)
            .map_err(|e| ReplyHeader::status(Status::Invalid, e))?;
        self.admit().await?;
        // What the cluster can replicate now: while its version is older than this build's,
        // the command as that format holds it, or refused, naming who holds the version back.
        let cmd = crate::state::fit_format(self.active_version(), cmd)
            .map_err(|e| self.needs_version(&e))?;
        let (tx, rx) = oneshot::channel();
        self.proposals
            .send(Proposal { cmd, reply: tx })
            .await
            .map_err(|_| ReplyHeader::status(Status::Internal, "controller is shutting down"))?;
        rx.await
            .unwrap_or_else(|_| Err(ReplyHeader::status(Status::Internal, "proposal dropped")))
    }

    /// Runs `f` on the applied state after confirming this node is still the primary and has
    /// applied everything committed before the read (linearizable read).
    pub async fn read<T>(&self, f: impl FnOnce(&State) -> T) -> Result<T, ReplyHeader> {
        self.admit().await?;
        let (tx, rx) = oneshot::channel();
        self.reads
            .send(tx)
            .await
            .map_err(|_| ReplyHeader::status(Status::Internal, "controller is shutting down"))?;
        rx.await
            .unwrap_or_else(|_| Err(ReplyHeader::status(Status::Internal, "read dropped")))?;
        Ok(f(&self.state.read().state))
    }

    /// One linearizability check: this node is still the primary, and has applied
    /// everything committed before the check began.
    async fn confirm_linearizable(&self) -> Result<(), ReplyHeader> {
        let _call = self.raft_call().ok_or_else(|| self.shutting_down())?;
        let confirmed = tokio::select! {
            r = tokio::time::timeout(self.timeouts.read, self.raft.ensure_linearizable()) => r,
            () = self.lease_lost() => return Err(self.stale_primary()),
        };
        match confirmed {
            Err(_) => Err(self.lost_majority("read")),
            Ok(Err(e)) => Err(self.leader_error(&e)),
            Ok(Ok(_)) => Ok(()),
        }
    }
}

/// Serves waiting reads in rounds: each round takes every read queued when it starts and
/// runs one check for all of them. A read that arrives during a round waits for the next, so
/// its check always begins after it arrived, as linearizability needs.
pub(super) async fn run_reads(node: Arc<Node>, mut rx: mpsc::Receiver<ReadWaiter>) {
    while let Some(first) = rx.recv().await {
        let mut round = vec![first];
        while let Ok(more) = rx.try_recv() {
            round.push(more);
        }
        let result = node.confirm_linearizable().await;
        for waiter in round {
            let _ = waiter.send(result.clone());
        }
    }
}

/// Collects waiting proposals into batches: each batch is one Raft entry, one append and one
/// fsync per replica. While `MAX_INFLIGHT_BATCHES` are committing, new proposals queue up, so
/// batches grow with load.
pub(super) async fn run_proposer(node: Arc<Node>, mut rx: mpsc::Receiver<Proposal>) {
    let inflight = Arc::new(Semaphore::new(MAX_INFLIGHT_BATCHES));
    while let Some(first) = rx.recv().await {
        let Ok(permit) = inflight.clone().acquire_owned().await else {
            return;
        };
        let mut bytes = first.cmd.approx_size();
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH && bytes < MAX_BATCH_BYTES {
            match rx.try_recv() {
                Ok(p) => {
                    bytes += p.cmd.approx_size();
                    batch.push(p);
                }
                Err(_) => break,
            }
        }
        let node = node.clone();
        tokio::spawn(async move {
            commit_batch(&node, batch).await;
            drop(permit);
        });
    }
}

async fn commit_batch(node: &Node, batch: Vec<Proposal>) {
    let (commands, replies): (Vec<_>, Vec<_>) = batch.into_iter().map(|p| (p.cmd, p.reply)).unzip();
    // Written in the cluster's version (every command fits it: `Node::write`), or in the one
    // a raise in it raises to, which every member reads.
    let raised = commands.iter().filter_map(|c| match c {
        Command::RaiseVersion { to } => Some(*to),
        _ => None,
    });
    let format = raised.fold(node.active_version(), u32::max);
    let entry = Batch {
        at_ms: now_ms(),
        format,
        commands,
    };
    // The entry may still commit after either give-up below; the client's re-send carries
    // the same token, so it is applied at most once either way.
    let Some(_call) = node.raft_call() else {
        for reply in replies {
            let _ = reply.send(Err(node.shutting_down()));
        }
        return;
    };
    let result = tokio::select! {
        r = tokio::time::timeout(node.timeouts.write, node.raft.client_write(entry)) => r,
        () = node.lease_lost() => {
            let header = node.stale_primary();
            for reply in replies {
                let _ = reply.send(Err(header.clone()));
            }
            return;
        }
    };
    match result {
        Ok(Ok(resp)) => {
            for (reply, outcome) in replies.into_iter().zip(resp.data.outcomes) {
                let _ = reply.send(Ok(outcome));
            }
        }
        Ok(Err(e)) => {
            let header = match &e {
                RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => {
                    node.not_primary(f.leader_id)
                }
                other => node.leader_error(other),
            };
            for reply in replies {
                let _ = reply.send(Err(header.clone()));
            }
        }
        Err(_) => {
            let header = node.lost_majority("write");
            for reply in replies {
                let _ = reply.send(Err(header.clone()));
            }
        }
    }
}
