//! One controller node: the Raft handle, the applied state, the proposer that batches writes,
//! and the rules that decide who may answer (primary, standby redirect, not ready).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, Raft, ServerState};
use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use tracing::{info, warn};
use xce_client::types::{ClusterInfo, JobId, Member, MemberRole};
use xce_client::wire::ReplyHeader;
use xce_client::Candidate;
use xce_proto::Status;

use crate::network::raft_client::Reachability;
use crate::state::{Command, Outcome, QueueDef, State};
use crate::store::{Batch, NodeId, SharedState, TypeConfig};

/// Most commands in one Raft entry.
const MAX_BATCH: usize = 2048;
/// Most bytes (approximately) in one Raft entry; with `max_payload_entries` this keeps every
/// append-entries message far below capnp's 64 MiB message limit.
const MAX_BATCH_BYTES: usize = 512 * 1024;
/// How often a held request re-checks whether a primary has emerged.
const RECHECK: Duration = Duration::from_millis(25);
/// Batches in flight at once; while they are, new proposals queue up and form the next batch.
const MAX_INFLIGHT_BATCHES: usize = 4;

/// How long a node waits for a write to commit or a read to be confirmed before telling the
/// client `noMaster` (it lost its majority); the client then backs off and rotates.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub write: Duration,
    pub read: Duration,
    /// How long a request may wait for a primary to emerge (or to pass its barrier) before
    /// this node answers `noMaster` or `notReady`. Holding the request across an election
    /// answers it with the new primary's address the moment there is one, instead of sending
    /// every client into backoff.
    pub hold: Duration,
    /// Leader silence after which a standby treats the primary as gone (a few heartbeats).
    pub leader_silence: Duration,
    /// A host whose worker has not heartbeated for this long is marked unavailable.
    pub host_ttl: Duration,
    /// How much longer an unavailable host may keep its jobs before they are lost.
    pub host_lost_grace: Duration,
}

/// A write waiting to be proposed, with the channel its outcome goes back on.
struct Proposal {
    cmd: Command,
    reply: oneshot::Sender<Result<Outcome, ReplyHeader>>,
}

/// A controller node, shared by the service, the proposer and the readiness task.
pub struct Node {
    pub id: NodeId,
    pub name: String,
    /// The candidates in peers-list order; node id `n` is `peers[n - 1]`.
    pub peers: Vec<Candidate>,
    pub raft: Raft<TypeConfig>,
    state: SharedState,
    proposals: mpsc::Sender<Proposal>,
    /// The term whose barrier entry this node has applied as primary; the node serves only
    /// while it is primary in exactly this term. A watch, so that held requests wake on it.
    ready_term: watch::Sender<u64>,
    reach: Arc<Reachability>,
    timeouts: Timeouts,
    /// When this node last accepted entries or a heartbeat from a leader. A standby whose
    /// leader has been silent for longer than `Timeouts::leader_silence` stops redirecting
    /// clients to it: it is probably dead, and the request is held for the election instead.
    last_leader_contact: std::sync::Mutex<tokio::time::Instant>,
    /// Primary-local liveness: when each host last heartbeated (or joined) here.
    heartbeats: std::sync::Mutex<std::collections::HashMap<String, tokio::time::Instant>>,
}

/// The node id of the candidate at `index` in the peers list.
pub fn node_id_of(index: usize) -> NodeId {
    index as NodeId + 1
}

impl Node {
    /// Creates the node and starts its proposer and readiness tasks.
    pub fn start(
        id: NodeId,
        peers: Vec<Candidate>,
        raft: Raft<TypeConfig>,
        state: SharedState,
        reach: Arc<Reachability>,
        queues: Vec<QueueDef>,
        timeouts: Timeouts,
    ) -> Arc<Node> {
        let (tx, rx) = mpsc::channel(MAX_BATCH * MAX_INFLIGHT_BATCHES);
        let name = peers[(id - 1) as usize].name.clone();
        let node = Arc::new(Node {
            id,
            name,
            peers,
            raft,
            state,
            proposals: tx,
            ready_term: watch::Sender::new(0),
            reach,
            timeouts,
            last_leader_contact: std::sync::Mutex::new(tokio::time::Instant::now()),
            heartbeats: std::sync::Mutex::new(std::collections::HashMap::new()),
        });
        tokio::spawn(run_proposer(node.clone(), rx));
        tokio::spawn(run_liveness(node.clone()));
        tokio::spawn(run_readiness(node.clone(), queues));
        node
    }

    fn peer(&self, id: NodeId) -> Option<&Candidate> {
        self.peers.get((id as usize).checked_sub(1)?)
    }

    /// Whether this node may serve a request now: `Ok` on a ready primary; otherwise the
    /// header to answer with (`redirect` with the primary's client address, `noMaster`, or
    /// `notReady`).
    pub fn gate(&self) -> Result<(), ReplyHeader> {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        if m.state == ServerState::Leader {
            if *self.ready_term.borrow() == m.current_term {
                return Ok(());
            }
            // openraft leaders do not step down without a quorum: a new primary cut off before
            // its barrier committed would answer notReady (stay here) forever.
            let cut_off = quorum_silence(&m) > self.timeouts.leader_silence;
            if cut_off {
                return Err(ReplyHeader::status(
                    Status::NoMaster,
                    format!("{} is primary but has lost its majority", self.name),
                ));
            }
            return Err(ReplyHeader::status(
                Status::NotReady,
                format!(
                    "{} was just elected primary (term {}) and is catching up",
                    self.name, m.current_term
                ),
            ));
        }
        let leader = m.current_leader.filter(|_| !self.leader_is_silent());
        Err(self.not_primary(leader))
    }

    /// A worker's heartbeat: fire-and-forget, so it is answered at once (no hold). `noEnt`
    /// tells a worker it must join again: this primary does not know its host, or marked it
    /// unavailable (a host comes back only through a join, whose resync fences what it ran
    /// while it was away).
    pub fn heartbeat(&self, name: &str) -> ReplyHeader {
        if let Err(h) = self.gate() {
            return h;
        }
        // A heartbeat is answered without touching the log; a primary cut off from its
        // majority must not vouch for a worker that another primary may be declaring lost.
        if quorum_silence(&self.raft.metrics().borrow()) > self.timeouts.leader_silence * 2 {
            return ReplyHeader::status(
                Status::NoMaster,
                format!("{} has not heard from a majority lately", self.name),
            );
        }
        match self.state.read().state.host(name) {
            Some(h) if h.available => {}
            Some(_) => {
                return ReplyHeader::status(
                    Status::NoEnt,
                    format!("host {name:?}: marked unavailable; join again to resync"),
                )
            }
            None => {
                return ReplyHeader::status(
                    Status::NoEnt,
                    format!("host {name:?}: unknown to this primary; join again"),
                )
            }
        }
        self.saw_host(name);
        ReplyHeader::ok()
    }

    /// How long after its last heartbeat a worker's jobs are declared lost (TTL + grace):
    /// told to workers at join so that a cut-off worker stops its jobs before they are
    /// requeued elsewhere.
    pub fn host_lost_after(&self) -> Duration {
        self.timeouts.host_ttl + self.timeouts.host_lost_grace
    }

    /// A job as applied on this node (no linearizability check: for the primary's own use
    /// right after it committed a change to it).
    pub fn applied_job(&self, id: JobId) -> Option<xce_client::types::Job> {
        self.state.read().state.job(id).cloned()
    }

    /// The events of every entry applied from now on (see [`crate::store::Published`]).
    pub fn events(&self) -> tokio::sync::broadcast::Receiver<Arc<crate::store::Published>> {
        self.state.subscribe()
    }

    /// Records that a host is alive (a heartbeat or a join).
    pub fn saw_host(&self, name: &str) {
        self.heartbeats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), tokio::time::Instant::now());
    }

    /// Records a successful append-entries (or heartbeat) from the leader.
    pub fn heard_from_leader(&self) {
        *self.contact() = tokio::time::Instant::now();
    }

    /// A candidate whose log is behind ours asked for our vote: the primary is gone (or the
    /// candidate would not be asking) but that candidate can never win. If our primary is
    /// silent too, stand for election now instead of waiting out our own election timer,
    /// which saves a failed election round.
    pub fn candidate_lags_behind(&self) {
        if self.raft.metrics().borrow().state == ServerState::Leader || !self.leader_is_silent() {
            return;
        }
        let raft = self.raft.clone();
        let name = self.name.clone();
        tokio::spawn(async move {
            info!(node = %name, "a lagging candidate asked for votes; standing for election");
            // The first attempt may land in the lagging candidate's own term, where it has
            // already voted for itself; the next one is a term ahead and wins its vote.
            for _ in 0..3 {
                let term_before = raft.metrics().borrow().current_term;
                if let Err(e) = raft.trigger().elect().await {
                    warn!(node = %name, error = %e, "could not start an election");
                    return;
                }
                let mut metrics = raft.metrics();
                let settled = tokio::time::timeout(
                    Duration::from_millis(50),
                    metrics
                        .wait_for(|m| m.current_term > term_before && m.current_leader.is_some()),
                )
                .await;
                if matches!(settled, Ok(Ok(_))) {
                    return;
                }
            }
        });
    }

    fn leader_is_silent(&self) -> bool {
        self.contact().elapsed() > self.timeouts.leader_silence
    }

    fn contact(&self) -> std::sync::MutexGuard<'_, tokio::time::Instant> {
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
    fn not_primary(&self, leader: Option<NodeId>) -> ReplyHeader {
        match leader.filter(|l| *l != self.id) {
            Some(leader) => match self.peer(leader) {
                Some(p) => ReplyHeader {
                    status: Status::Redirect,
                    message: format!("{} is a standby; the primary is {}", self.name, p.name),
                    redirect: Some((p.host.clone(), p.port)),
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

    fn leader_error<E>(&self, e: &RaftError<NodeId, E>) -> ReplyHeader
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

    /// Commits one write and returns its outcome.
    pub async fn write(&self, cmd: Command) -> Result<Outcome, ReplyHeader> {
        self.admit().await?;
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
        match tokio::time::timeout(self.timeouts.read, self.raft.ensure_linearizable()).await {
            Err(_) => Err(self.lost_majority("read")),
            Ok(Err(e)) => Err(self.leader_error(&e)),
            Ok(Ok(_)) => Ok(f(&self.state.read().state)),
        }
    }

    fn lost_majority(&self, what: &str) -> ReplyHeader {
        warn!(node = %self.name, "{what} not confirmed by a majority in time");
        ReplyHeader::status(
            Status::NoMaster,
            format!("{}: no majority confirmed the {what} in time", self.name),
        )
    }

    /// The cluster as this primary sees it.
    pub async fn cluster_info(&self) -> Result<ClusterInfo, ReplyHeader> {
        self.read(|_| ()).await?;
        let term = self.raft.metrics().borrow().current_term;
        let members = self
            .peers
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let id = node_id_of(i);
                let role = if id == self.id {
                    MemberRole::Primary
                } else if self.reach.is_reachable(id) {
                    MemberRole::Standby
                } else {
                    MemberRole::Unreachable
                };
                Member {
                    name: p.name.clone(),
                    addr: p.addr(),
                    role,
                }
            })
            .collect();
        Ok(ClusterInfo {
            primary: Some(self.name.clone()),
            term,
            members,
        })
    }
}

/// How long since a majority last acknowledged this leader (zero when not leader).
fn quorum_silence(m: &openraft::RaftMetrics<NodeId, openraft::BasicNode>) -> Duration {
    Duration::from_millis(m.millis_since_quorum_ack.unwrap_or(0))
}

/// Turns an outcome into the reply header and, for submits, the job id.
pub fn outcome_reply(outcome: Outcome) -> (ReplyHeader, Option<JobId>) {
    match outcome {
        Outcome::Submitted(id) => (ReplyHeader::ok(), Some(id)),
        Outcome::Done | Outcome::Resynced { .. } => (ReplyHeader::ok(), None),
        Outcome::Rejected { status, message } => (ReplyHeader::status(status, message), None),
        Outcome::Duplicate(original) => match *original {
            // A re-sent write whose original was rejected gets the same rejection: `dupJob`
            // would tell the client its write succeeded.
            rejected @ Outcome::Rejected { .. } => outcome_reply(rejected),
            Outcome::Duplicate(inner) => outcome_reply(Outcome::Duplicate(inner)),
            Outcome::Submitted(id) => (
                ReplyHeader::status(Status::DupJob, "request already applied"),
                Some(id),
            ),
            Outcome::Done | Outcome::Resynced { .. } => (
                ReplyHeader::status(Status::DupJob, "request already applied"),
                None,
            ),
        },
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Collects waiting proposals into batches: each batch is one Raft entry, one append and one
/// fsync per replica. While `MAX_INFLIGHT_BATCHES` are committing, new proposals queue up, so
/// batches grow with load.
async fn run_proposer(node: Arc<Node>, mut rx: mpsc::Receiver<Proposal>) {
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
    let entry = Batch {
        at_ms: now_ms(),
        commands,
    };
    let result = tokio::time::timeout(node.timeouts.write, node.raft.client_write(entry)).await;
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
            // The entry may still commit later; the client's re-send carries the same token,
            // so it is applied at most once either way.
            let header = node.lost_majority("write");
            for reply in replies {
                let _ = reply.send(Err(header.clone()));
            }
        }
    }
}

/// Marks hosts unavailable when their worker has not heartbeated to this primary for the
/// TTL, and loses their jobs when they stay unavailable beyond the grace period. Both clocks
/// start no earlier than when this node became a ready primary, so a new primary gives each
/// worker a whole TTL (and grace) to find it.
async fn run_liveness(node: Arc<Node>) {
    let period = (node.timeouts.host_ttl / 4).max(Duration::from_millis(50));
    let mut ready_term = node.ready_term.subscribe();
    let mut serving_since: Option<(u64, tokio::time::Instant)> = None;
    // When this primary first saw each host unavailable with jobs on it.
    let mut unavailable_since = std::collections::HashMap::<String, tokio::time::Instant>::new();
    loop {
        tokio::select! {
            () = tokio::time::sleep(period) => {}
            r = ready_term.changed() => if r.is_err() { return },
        }
        if node.gate().is_err() {
            serving_since = None;
            continue;
        }
        let term = *node.ready_term.borrow();
        let since = match serving_since {
            Some((t, since)) if t == term => since,
            _ => {
                let now = tokio::time::Instant::now();
                serving_since = Some((term, now));
                now
            }
        };
        let stale: Vec<String> = {
            let available = node.state.read().state.available_hosts();
            let seen = node.heartbeats.lock().unwrap_or_else(|p| p.into_inner());
            available
                .into_iter()
                .filter(|h| {
                    let last = seen.get(h).copied().unwrap_or(since).max(since);
                    last.elapsed() > node.timeouts.host_ttl
                })
                .collect()
        };
        for name in stale {
            warn!(host = %name, ttl = ?node.timeouts.host_ttl, "host stopped heartbeating; marking it unavailable");
            let cmd = Command::SetHostAvailable {
                name,
                available: false,
            };
            if let Err(h) = node.write(cmd).await {
                warn!(message = %h.message, "could not mark the host unavailable");
            }
        }
        let unavailable = node.state.read().state.unavailable_hosts_with_jobs();
        unavailable_since.retain(|h, _| unavailable.contains(h));
        for name in unavailable {
            let first_seen = *unavailable_since
                .entry(name.clone())
                .or_insert_with(tokio::time::Instant::now);
            if first_seen.max(since).elapsed() <= node.timeouts.host_lost_grace {
                continue;
            }
            warn!(host = %name, grace = ?node.timeouts.host_lost_grace, "host stayed unavailable; its jobs are lost");
            match node.write(Command::HostLost { name: name.clone() }).await {
                Ok(_) => {
                    unavailable_since.remove(&name);
                }
                Err(h) => {
                    warn!(host = %name, message = %h.message, "could not mark the host's jobs lost")
                }
            }
        }
    }
}

/// Watches for this node becoming primary and proposes the barrier entry of its term; once
/// that entry is applied everything before it is too, and the node starts serving.
async fn run_readiness(node: Arc<Node>, queues: Vec<QueueDef>) {
    let mut metrics = node.raft.metrics();
    let mut last_role = None;
    loop {
        let (leader_term, role) = {
            let m = metrics.borrow_and_update();
            (
                (m.state == ServerState::Leader).then_some(m.current_term),
                (m.state, m.current_leader, m.current_term),
            )
        };
        if last_role != Some(role) {
            let (state, leader, term) = role;
            let primary = leader.and_then(|l| node.peer(l)).map(|p| p.name.as_str());
            info!(node = %node.name, ?state, term, primary, "raft role changed");
            last_role = Some(role);
        }
        if let Some(term) = leader_term {
            if *node.ready_term.borrow() != term {
                let barrier = Batch {
                    at_ms: now_ms(),
                    commands: vec![Command::Barrier {
                        term,
                        queues: queues.clone(),
                    }],
                };
                match tokio::time::timeout(node.timeouts.write, node.raft.client_write(barrier))
                    .await
                {
                    Ok(Ok(_)) => {
                        node.ready_term.send_replace(term);
                        info!(node = %node.name, term, "primary is ready");
                        continue;
                    }
                    Ok(Err(e)) => {
                        warn!(node = %node.name, term, error = %e, "barrier not committed")
                    }
                    Err(_) => warn!(node = %node.name, term, "barrier not committed in time"),
                }
                // Still primary? Retry on the next metrics change or shortly.
                let _ = tokio::time::timeout(Duration::from_millis(100), metrics.changed()).await;
                continue;
            }
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}
