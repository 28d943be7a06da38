//! The primary's lease: how long since a majority last acknowledged this node as leader.
//!
//! openraft's leaders never step down on their own: a primary cut off from both standbys
//! still *is* the leader, and every request it admits waits for a commit or a read
//! confirmation that cannot come. So a primary that has not heard from a majority within its
//! lease stops answering as primary at once (`noMaster`, or while it is silent a `redirect`
//! to the standby it handed over to: `handover`), for reads and writes alike, and fails what
//! it already holds, so that clients move on to the side that can elect.
//!
//! The lease is shorter than the time the standbys need to elect a new primary after the
//! last acknowledgement (openraft's leader lease plus the shortest election timeout), so the
//! stale side goes quiet before the new side starts serving. Reads stay linearizable on their
//! own (they are still confirmed by a quorum); the lease only bounds how long a stale
//! primary keeps clients waiting.
//!
//! openraft reports the silence (`millis_since_quorum_ack`) only when it publishes metrics;
//! a task turns each report into an instant, so that the silence keeps growing between
//! reports, when a partitioned leader has nothing left to report.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use openraft::ServerState;
use tokio::time::Instant;
use tracing::warn;

use super::{Node, RECHECK};
use crate::store::NodeId;

/// How many leases a leader whose lease ran out stays silent (the first is the lease itself).
const STEP_DOWN_LEASES: u32 = 4;

/// When a majority last acknowledged this node as leader (`None` while not leader), and how
/// long that may be ago. Shared with the Raft network, which stops replicating for a
/// primary whose lease ran out (see `raft_client`).
#[derive(Debug)]
pub struct Lease {
    held: Mutex<Option<Held>>,
    pub(super) limit: Duration,
    /// Since when this node has failed to accept client connections (out of file
    /// descriptors, say): a primary no new client can reach must not go on posing as one.
    unreachable_since: Mutex<Option<Instant>>,
}

/// A leadership this node holds: its term, when it was won, and the latest majority ack.
#[derive(Debug, Clone, Copy)]
struct Held {
    term: u64,
    acked_at: Instant,
}

impl Lease {
    /// A lease of `limit` (see `Config::primary_lease`).
    pub fn new(limit: Duration) -> Lease {
        Lease {
            held: Mutex::new(None),
            limit,
            unreachable_since: Mutex::new(None),
        }
    }

    /// Whether this node is a leader that no majority has acknowledged within the lease.
    pub fn expired(&self) -> bool {
        self.silence() > self.limit
    }

    /// Whether this leader should stay silent now: from the end of its lease for three more
    /// leases, long enough for the others to elect one that can commit. After that it speaks
    /// again, since no one else could win (the only voter it reaches was behind it, say, and
    /// needs it to catch up): silent for good, it would leave the cluster with no primary.
    pub fn stepped_down(&self) -> bool {
        let silence = self.silence();
        silence > self.limit && silence <= self.limit * STEP_DOWN_LEASES
    }

    fn lock(&self) -> MutexGuard<'_, Option<Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes in one metrics report. Winning the election counts as the first
    /// acknowledgement: what openraft reports before its first quorum ack of a new term may
    /// date from earlier terms.
    fn observe(&self, m: &openraft::RaftMetrics<NodeId, openraft::BasicNode>) {
        let mut held = self.lock();
        if m.state != ServerState::Leader {
            *held = None;
            return;
        }
        let now = Instant::now();
        let won_at = match *held {
            Some(h) if h.term == m.current_term => h.acked_at,
            _ => now,
        };
        let reported = m
            .millis_since_quorum_ack
            .and_then(|ms| now.checked_sub(Duration::from_millis(ms)));
        *held = Some(Held {
            term: m.current_term,
            acked_at: reported.map_or(won_at, |r| r.max(won_at)),
        });
    }

    /// How long since a majority acknowledged this leader (zero when not leader).
    /// A node that cannot accept clients counts as silent for as long as that lasts.
    pub fn silence(&self) -> Duration {
        let Some(acked) = self.lock().map(|h| h.acked_at.elapsed()) else {
            return Duration::ZERO;
        };
        acked.max(self.unreachable_for().unwrap_or_default())
    }

    /// How long until this leader's lease runs out (zero once it has; `None` while not
    /// leader).
    pub fn left(&self) -> Option<Duration> {
        let held = *self.lock();
        held.map(|_| self.limit.saturating_sub(self.silence()))
    }

    /// Whether accepting a client connection just worked; a failure that lasts a lease
    /// makes a primary step down and keeps this node from standing.
    pub fn accepted(&self, ok: bool) {
        let mut since = self
            .unreachable_since
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match (ok, *since) {
            (true, _) => *since = None,
            (false, None) => *since = Some(Instant::now()),
            (false, Some(_)) => {}
        }
    }

    /// How long accepting clients has been failing, if it is.
    pub fn unreachable_for(&self) -> Option<Duration> {
        self.unreachable_since
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map(|t| t.elapsed())
    }
}

/// Keeps [`Lease`] current from openraft's metrics until Raft shuts down.
pub(super) async fn run_lease(node: Arc<Node>) {
    let mut metrics = node.raft.metrics();
    loop {
        node.lease.observe(&metrics.borrow_and_update());
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

impl Node {
    /// Completes when this node's lease runs out (never while it is renewed): raced against
    /// a commit or a read confirmation, so that nothing waits on a stale primary.
    pub(super) async fn lease_lost(&self) {
        loop {
            let silence = self.lease.silence();
            if silence > self.lease.limit {
                return;
            }
            let left = self.lease.limit - silence;
            tokio::time::sleep(left.min(RECHECK) + Duration::from_millis(1)).await;
        }
    }
}

impl Node {
    /// Tells the lease whether accepting a client connection worked (see
    /// [`Lease::accepted`]).
    pub fn accepted(&self, ok: bool) {
        if !ok && self.lease.unreachable_for().is_none() {
            warn!(node = %self.name, "cannot accept client connections: stepping down as primary, and not standing, until it can");
        }
        self.lease.accepted(ok);
    }
}
