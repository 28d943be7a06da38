//! One controller node: the Raft handle and the applied state, and the tasks around them, one
//! file each: the serving gate (`gate`: who may answer), the proposer that batches writes and
//! serves linearizable reads (`proposer`), the readiness barrier (`readiness`) and host
//! liveness (`liveness`), the primary's lease (`lease`: when a cut-off primary stops
//! answering), elections behind a pre-vote (`election`), and the hand-over of a primary whose
//! lease ran out to a standby that can commit (`handover`).

mod backup;
pub mod election;
mod gate;
mod handover;
mod history_sync;
pub mod lease;
mod liveness;
pub mod members;
mod proposer;
mod readiness;
mod retirement;
mod versions;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use openraft::{Raft, ServerState};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{info, warn};
use xce_client::types::{ClusterInfo, JobId, Member, MemberRole, SchedulerInfo};
use xce_client::wire::ReplyHeader;
use xce_client::Candidate;
use xce_proto::Status;

pub use self::history_sync::{HISTORY_PULL_BYTES, HISTORY_PULL_PAGE};
pub use self::lease::Lease;
use crate::network::raft_client::{Network, Reachability};
use crate::state::{Command, Outcome, QueueDef};
use crate::store::{NodeId, SharedState, TypeConfig};

/// Most commands in one Raft entry.
const MAX_BATCH: usize = 2048;
/// Most bytes (approximately) in one Raft entry; with `max_payload_entries` this keeps every
/// append-entries message far below capnp's 64 MiB message limit.
pub(crate) const MAX_BATCH_BYTES: usize = 512 * 1024;
/// How often a held request re-checks whether a primary has emerged.
const RECHECK: Duration = Duration::from_millis(25);
/// Batches in flight at once; while they are, new proposals queue up and form the next batch.
const MAX_INFLIGHT_BATCHES: usize = 4;
/// Reads queued for the next linearizability check; more wait to be queued (each has its
/// caller's connection behind it, which bounds them).
const MAX_WAITING_READS: usize = 8192;

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
    /// When to stand for election (see `election`).
    pub election: election::ElectionTiming,
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

/// A read waiting for its linearizability check (see `proposer::run_reads`).
type ReadWaiter = oneshot::Sender<Result<(), ReplyHeader>>;

/// A controller node, shared by the service, the proposer and the readiness task.
pub struct Node {
    pub id: NodeId,
    pub name: String,
    /// The candidates in peers-list order; node id `n` is `peers[n - 1]`.
    pub peers: Vec<Candidate>,
    pub raft: Raft<TypeConfig>,
    state: SharedState,
    proposals: mpsc::Sender<Proposal>,
    /// Reads waiting to share one linearizability check.
    reads: mpsc::Sender<ReadWaiter>,
    /// The term whose barrier entry this node has applied as primary; the node serves only
    /// while it is primary in exactly this term. A watch, so that held requests wake on it.
    ready_term: watch::Sender<u64>,
    reach: Arc<Reachability>,
    /// What a submitted job may ask for (the cluster's maximum time limit).
    pub job_rules: crate::config::JobRules,
    /// The version the cluster is held at by configuration (`hold_version`), if any.
    hold_version: Option<u32>,
    timeouts: Timeouts,
    lease: Arc<Lease>,
    /// When this node last accepted entries or a heartbeat from a leader. A standby whose
    /// leader has been silent for longer than `Timeouts::leader_silence` stops redirecting
    /// clients to it: it is probably dead, and the request is held for the election instead.
    last_leader_contact: std::sync::Mutex<tokio::time::Instant>,
    /// The term whose primary stepped down and handed over to this node (`election`).
    handed_over: std::sync::Mutex<Option<election::HandOver>>,
    /// Wakes the election loop early: a hand-over just arrived.
    wake_election: tokio::sync::Notify,
    /// When this node last began asking for pre-votes, and last granted one to another
    /// candidate: what keeps two standbys whose timers fire together from splitting the vote.
    campaigns: std::sync::Mutex<election::Campaigns>,
    /// The term in which this node, as primary, handed over, and the successor it named:
    /// its clients are sent there (`gate`).
    handed_to: std::sync::Mutex<Option<(u64, NodeId)>>,
    /// Primary-local liveness: when each host last heartbeated (or joined) here.
    heartbeats: std::sync::Mutex<std::collections::HashMap<String, tokio::time::Instant>>,
    /// When each scheduler last asked this node for the lease (standbys ask too), for the
    /// cluster report.
    schedulers_seen: std::sync::Mutex<std::collections::HashMap<String, tokio::time::Instant>>,
    /// The cluster version each member's build runs, as this primary last heard it
    /// (`versions`).
    member_versions: std::sync::Mutex<std::collections::HashMap<NodeId, u32>>,
    /// For one-off questions to a controller that is not a member yet (the build a controller
    /// being added runs).
    network: Network,
    /// The backup being read out in frames, if any (see [`Node::backup_frame`]).
    held_backup: backup::BackupSlot,
    metrics: crate::metrics::Metrics,
    /// Calls into openraft under way (inbound Raft messages, proposals, reads, elections);
    /// none start once `stopping` is set.
    raft_calls: std::sync::atomic::AtomicUsize,
    stopping: std::sync::atomic::AtomicBool,
    /// This controller's history store (`history`): retired jobs, written by the apply.
    pub history: crate::history::History,
    /// When ended jobs retire, and how long history keeps them.
    pub history_rules: crate::config::HistoryRules,
}

/// One call into openraft under way (see [`Node::raft_call`]).
pub struct RaftCall<'a>(&'a Node);

impl Drop for RaftCall<'_> {
    fn drop(&mut self) {
        self.0
            .raft_calls
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// How long a scheduler that stopped asking for the lease is still listed.
const SCHEDULER_LISTED_FOR: Duration = Duration::from_secs(10);

/// The node id of the candidate at `index` in the peers list.
pub fn node_id_of(index: usize) -> NodeId {
    index as NodeId + 1
}

impl Node {
    /// Creates the node and starts its tasks (lease, elections, proposer, liveness,
    /// readiness). `network` is the one Raft was given: the node shares its reachability and
    /// lease, and asks pre-votes through it.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        id: NodeId,
        name: String,
        peers: Vec<Candidate>,
        raft: Raft<TypeConfig>,
        state: SharedState,
        queues: Vec<QueueDef>,
        job_rules: crate::config::JobRules,
        hold_version: Option<u32>,
        timeouts: Timeouts,
        network: Network,
        metrics: crate::metrics::Metrics,
        history: crate::history::History,
        history_rules: crate::config::HistoryRules,
    ) -> Arc<Node> {
        let (tx, rx) = mpsc::channel(MAX_BATCH * MAX_INFLIGHT_BATCHES);
        let (reads, reads_rx) = mpsc::channel(MAX_WAITING_READS);
        let node = Arc::new(Node {
            id,
            name,
            peers,
            raft,
            state,
            proposals: tx,
            reads,
            ready_term: watch::Sender::new(0),
            reach: network.reach.clone(),
            job_rules,
            hold_version,
            timeouts,
            lease: network.lease.clone(),
            last_leader_contact: std::sync::Mutex::new(tokio::time::Instant::now()),
            handed_over: std::sync::Mutex::new(None),
            wake_election: tokio::sync::Notify::new(),
            campaigns: std::sync::Mutex::default(),
            handed_to: std::sync::Mutex::new(None),
            heartbeats: std::sync::Mutex::new(std::collections::HashMap::new()),
            schedulers_seen: std::sync::Mutex::new(std::collections::HashMap::new()),
            member_versions: std::sync::Mutex::new(std::collections::HashMap::new()),
            network: network.clone(),
            held_backup: std::sync::Arc::new(std::sync::Mutex::new(None)),
            metrics,
            raft_calls: std::sync::atomic::AtomicUsize::new(0),
            stopping: std::sync::atomic::AtomicBool::new(false),
            history,
            history_rules,
        });
        tokio::spawn(lease::run_lease(node.clone()));
        tokio::spawn(handover::run_handover(node.clone(), network.clone()));
        tokio::spawn(versions::run_versions(node.clone(), network.clone()));
        tokio::spawn(election::run_elections(node.clone(), network));
        tokio::spawn(proposer::run_proposer(node.clone(), rx));
        tokio::spawn(proposer::run_reads(node.clone(), reads_rx));
        tokio::spawn(liveness::run_liveness(node.clone()));
        tokio::spawn(readiness::run_readiness(node.clone(), queues));
        tokio::spawn(retirement::run_retirement(node.clone()));
        tokio::spawn(history_sync::run_history_sync(node.clone()));
        node
    }

    /// How many retired jobs this node's history store lacks: those retired beyond its mark.
    pub fn history_behind(&self) -> u64 {
        let retired = self.state.read().state.retired_seq();
        let written = self.history.written_seq().unwrap_or(0);
        retired.saturating_sub(written)
    }

    /// A job as applied on this node (no linearizability check: for the primary's own use
    /// right after it committed a change to it).
    pub fn applied_job(&self, id: JobId) -> Option<xce_client::types::Job> {
        self.state.read().state.job(id).cloned()
    }

    /// A job script's bytes, as applied here.
    pub fn applied_script(&self, id: &xce_client::types::ScriptId) -> Option<std::sync::Arc<[u8]>> {
        self.state.read().state.script(id)
    }

    /// Whether job `id` is an array's own record, as applied here (what it is never changes).
    pub fn applied_is_array(&self, id: JobId) -> bool {
        self.state
            .read()
            .state
            .job(id)
            .is_some_and(|j| j.array.is_some())
    }

    /// How many jobs `user` has submitted and not yet ended, as applied here.
    pub fn applied_submits(&self, user: &str) -> u64 {
        self.state.read().state.submits_of(user)
    }

    /// How many jobs are in each state (`JobState::ALL` order), as applied here.
    pub fn jobs_by_state(&self) -> Vec<usize> {
        let applied = self.state.read();
        xce_client::types::JobState::ALL
            .iter()
            .map(|s| applied.state.count_in_state(*s))
            .collect()
    }

    /// A job as applied on this node and as readers see it at `now_ms` (no linearizability
    /// check: for the primary's answer to a change it just committed).
    pub fn applied_job_shown(&self, id: JobId, now_ms: u64) -> Option<xce_client::types::Job> {
        let applied = self.state.read();
        let job = applied.state.job(id)?.clone();
        Some(applied.state.shown(job, now_ms))
    }

    /// Who a presented token proves its caller to be, by the state as applied here: on the
    /// ready primary that holds every creation and revocation it has answered, so a check
    /// costs no Raft round.
    pub fn authenticate(
        &self,
        id: &str,
        hash: &xce_client::tokens::SecretHash,
    ) -> Result<xce_client::types::Principal, String> {
        self.state.read().state.authenticate(id, hash, now_ms())
    }

    /// Whether the token a session authenticated with still holds (see [`Node::authenticate`]).
    pub fn token_still_valid(
        &self,
        id: &str,
        hash: &xce_client::tokens::SecretHash,
    ) -> Result<(), String> {
        self.state
            .read()
            .state
            .token_still_valid(id, hash, now_ms())
    }

    /// The events of every entry applied from now on (see [`crate::store::Published`]).
    pub fn events(&self) -> tokio::sync::broadcast::Receiver<Arc<crate::store::Published>> {
        self.state.subscribe()
    }

    /// Records a successful append-entries (or heartbeat) from the leader.
    /// Admits one call into openraft, or `None` once the node is stopping: a call that
    /// meets a stopped Raft core fails with an error openraft logs as such.
    pub fn raft_call(&self) -> Option<RaftCall<'_>> {
        use std::sync::atomic::Ordering::SeqCst;
        self.raft_calls.fetch_add(1, SeqCst);
        if self.stopping.load(SeqCst) {
            self.raft_calls.fetch_sub(1, SeqCst);
            return None;
        }
        Some(RaftCall(self))
    }

    /// Starts no more calls into openraft and waits (up to `grace`) for those under way:
    /// what a clean shutdown does before it stops the Raft core.
    pub async fn stop_raft_calls(&self, grace: Duration) {
        use std::sync::atomic::Ordering::SeqCst;
        self.stopping.store(true, SeqCst);
        let deadline = tokio::time::Instant::now() + grace;
        while self.raft_calls.load(SeqCst) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The answer to a request that meets a controller shutting down: clients try another.
    pub fn shutting_down(&self) -> ReplyHeader {
        ReplyHeader::status(Status::NoMaster, format!("{} is shutting down", self.name))
    }

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

    /// A scheduler asked for the lease: list it in the cluster report for a while.
    pub fn saw_scheduler(&self, name: &str) {
        let mut seen = self
            .schedulers_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        seen.retain(|_, at| at.elapsed() < SCHEDULER_LISTED_FOR);
        seen.insert(name.to_string(), tokio::time::Instant::now());
    }

    /// The schedulers heard from recently, and the lease holder, by name.
    fn schedulers(&self, active: Option<String>) -> Vec<SchedulerInfo> {
        let seen = self
            .schedulers_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut names: Vec<String> = seen
            .iter()
            .filter(|(_, at)| at.elapsed() < SCHEDULER_LISTED_FOR)
            .map(|(n, _)| n.clone())
            .chain(active.clone())
            .collect();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .map(|name| SchedulerInfo {
                active: active.as_deref() == Some(name.as_str()),
                name,
            })
            .collect()
    }

    /// The cluster as this primary sees it.
    pub async fn cluster_info(&self) -> Result<ClusterInfo, ReplyHeader> {
        let now = now_ms();
        let active = self
            .read(move |s| s.scheduler_lease(now).map(|l| l.name.clone()))
            .await?;
        let term = self.raft.metrics().borrow().current_term;
        let members = self
            .members()
            .into_iter()
            .map(|(id, p)| {
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
                    version: self.member_version(id),
                }
            })
            .collect();
        Ok(ClusterInfo {
            primary: Some(self.name.clone()),
            term,
            members,
            schedulers: self.schedulers(active),
            active_version: self.active_version(),
            hold_version: self.hold_version,
        })
    }
}

/// Turns an outcome into the reply header and, for submits, the job id.
pub fn outcome_reply(outcome: Outcome) -> (ReplyHeader, Option<JobId>) {
    match outcome {
        Outcome::Submitted(id) => (ReplyHeader::ok(), Some(id)),
        Outcome::Done
        | Outcome::Resynced { .. }
        | Outcome::Leased { .. }
        | Outcome::Placed { .. } => (ReplyHeader::ok(), None),
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
            Outcome::Done
            | Outcome::Resynced { .. }
            | Outcome::Leased { .. }
            | Outcome::Placed { .. } => (
                ReplyHeader::status(Status::DupJob, "request already applied"),
                None,
            ),
        },
    }
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
