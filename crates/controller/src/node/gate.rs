//! The serving gate: who may answer a request now (a ready primary), and what everyone else
//! answers (`redirect` with the primary's client address, `noMaster`, `notReady`), including
//! holding a request across an election instead of sending the client into backoff.

use openraft::error::RaftError;
use openraft::{BasicNode, ServerState};
use tracing::warn;
use xce_client::wire::ReplyHeader;
use xce_proto::Status;

use super::{Node, RECHECK};
use crate::store::NodeId;

impl Node {
    /// Whether this node may serve a request now: `Ok` on a ready primary; otherwise the
    /// header to answer with (`redirect` with the primary's client address, `noMaster`, or
    /// `notReady`).
    pub fn gate(&self) -> Result<(), ReplyHeader> {
        // Read what is needed and let go of the metrics first: the answers below read them
        // again, and a second read lock could wait behind a writer forever.
        let (state, term, vote_term, leader) = {
            let metrics = self.raft.metrics();
            let m = metrics.borrow();
            (
                m.state,
                m.current_term,
                m.vote.leader_id.term,
                m.current_leader,
            )
        };
        if state == ServerState::Leader {
            // openraft leaders do not step down without a quorum: a primary cut off from its
            // majority would hold every request (or, before its barrier, answer notReady)
            // for as long as the partition lasts.
            if self.lease.expired() {
                return Err(self.stale_primary_in(term));
            }
            if *self.ready_term.borrow() == term {
                return Ok(());
            }
            return Err(ReplyHeader::status(
                Status::NotReady,
                format!(
                    "{} was just elected primary (term {term}) and is catching up",
                    self.name
                ),
            ));
        }
        // A primary that handed over to this node has gone silent: hold the request for
        // the election rather than send the client back to it.
        let handed_over = self.hand_over_to_me_in(vote_term).is_some();
        let leader = leader.filter(|_| !self.leader_is_silent() && !handed_over);
        Err(self.not_primary(leader))
    }

    /// The answer of a primary whose lease has run out: a redirect to the standby it handed
    /// over to (see `handover`), which holds the request until it is elected, or else
    /// `noMaster`.
    pub(super) fn stale_primary(&self) -> ReplyHeader {
        let term = self.raft.metrics().borrow().current_term;
        self.stale_primary_in(term)
    }

    /// [`Node::stale_primary`] in `term`.
    fn stale_primary_in(&self, term: u64) -> ReplyHeader {
        let why = format!(
            "{} was primary but no majority has answered it for {} ms (lease {} ms)",
            self.name,
            self.lease.silence().as_millis(),
            self.lease.limit.as_millis()
        );
        // Only while it is silent (after that it speaks again, and the successor, hearing
        // it, would send the client back), and only to a voter still.
        let successor = self
            .handed_to()
            .filter(|(t, id)| *t == term && self.lease.stepped_down() && self.voters().contains(id))
            .and_then(|(_, id)| self.member(id));
        match successor {
            Some(p) => ReplyHeader {
                status: Status::Redirect,
                message: format!("{why}; it handed over to {}", p.name),
                redirect: Some((p.host.clone(), p.port)),
                redirect_name: Some(p.name),
            },
            None => ReplyHeader::status(
                Status::NoMaster,
                format!("{why}; another controller may be primary now"),
            ),
        }
    }

    pub(super) fn leader_is_silent(&self) -> bool {
        self.contact().elapsed() > self.timeouts.leader_silence
    }

    pub(super) fn contact(&self) -> std::sync::MutexGuard<'_, tokio::time::Instant> {
        self.last_leader_contact
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// [`Node::gate`], but while there is no primary (or it is not ready yet) the request
    /// waits up to `Timeouts::hold` for that to change.
    pub async fn admit(&self) -> Result<(), ReplyHeader> {
        let deadline = tokio::time::Instant::now() + self.timeouts.hold;
        let mut metrics = self.raft.metrics();
        let mut ready = self.ready_term.subscribe();
        loop {
            match self.gate() {
                // Holding helps only where a primary may emerge: not on a stale primary,
                // whose clients must go to the side that can elect.
                Err(h) if self.lease.expired() => return Err(h),
                Err(h) if matches!(h.status, Status::NoMaster | Status::NotReady) => {
                    if tokio::time::Instant::now() >= deadline {
                        return Err(h);
                    }
                    // Re-check on any Raft or readiness change, and every few milliseconds
                    // (a silent leader may speak again without any metrics change).
                    let recheck = (tokio::time::Instant::now() + RECHECK).min(deadline);
                    let changed = async {
                        tokio::select! {
                            r = metrics.changed() => r.is_ok(),
                            r = ready.changed() => r.is_ok(),
                        }
                    };
                    if let Ok(false) = tokio::time::timeout_at(recheck, changed).await {
                        return self.gate();
                    }
                }
                other => return other,
            }
        }
    }

    /// The answer of a node that is not the primary.
    pub(super) fn not_primary(&self, leader: Option<NodeId>) -> ReplyHeader {
        match leader.filter(|l| *l != self.id) {
            Some(leader) => match self.member(leader) {
                Some(p) => ReplyHeader {
                    status: Status::Redirect,
                    message: format!("{} is a standby; the primary is {}", self.name, p.name),
                    redirect: Some((p.host.clone(), p.port)),
                    redirect_name: Some(p.name),
                },
                None => ReplyHeader::status(
                    Status::Standby,
                    format!(
                        "{} is a standby; primary node {leader} is unknown",
                        self.name
                    ),
                ),
            },
            None => ReplyHeader::status(
                Status::NoMaster,
                format!("{}: no primary is elected right now", self.name),
            ),
        }
    }

    pub(super) fn leader_error<E>(&self, e: &RaftError<NodeId, E>) -> ReplyHeader
    where
        E: std::error::Error
            + openraft::TryAsRef<openraft::error::ForwardToLeader<NodeId, BasicNode>>,
    {
        use openraft::error::Fatal;
        if let Some(f) = e.forward_to_leader() {
            return self.not_primary(f.leader_id);
        }
        match e {
            // Storage failures and panics are ours to fix: surface them.
            RaftError::Fatal(Fatal::StorageError(_) | Fatal::Panicked) => {
                ReplyHeader::status(Status::Internal, format!("{}: {e}", self.name))
            }
            // Stopping, or no quorum confirmed this primary (QuorumNotEnough): another node
            // may serve, so the client must back off and rotate, never give up.
            _ => ReplyHeader::status(Status::NoMaster, format!("{}: {e}", self.name)),
        }
    }

    pub(super) fn lost_majority(&self, what: &str) -> ReplyHeader {
        warn!(node = %self.name, "{what} not confirmed by a majority in time");
        ReplyHeader::status(
            Status::NoMaster,
            format!("{}: no majority confirmed the {what} in time", self.name),
        )
    }
}
