//! The controller's Prometheus metrics (`--metrics-listen`): jobs by state, the Raft term,
//! log, commit and applied indexes, leader changes, whether this node is the ready primary, apply
//! latency and the heartbeats it answered. Counters are updated where things happen; the
//! rest is read from the node at each scrape.

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use xce_client::types::JobState;
use xce_daemon::metrics::{Figure, Live};

use crate::node::Node;
use crate::store::LogStore;

/// What the controller counts as it goes.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// Worker heartbeats this node answered as primary.
    pub heartbeats: Counter,
    /// Times the known leader changed.
    pub leader_changes: Counter,
    /// Time to apply one Raft entry to the state.
    pub apply_seconds: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            heartbeats: Counter::default(),
            leader_changes: Counter::default(),
            apply_seconds: Histogram::new(exponential_buckets(0.000_01, 2.0, 18)),
        }
    }
}

impl Metrics {
    /// The registry `--metrics-listen` serves: these counters, and the live figures of `node`
    /// and of its Raft `log` (the commit index).
    pub fn registry(&self, node: Arc<Node>, log: LogStore) -> Registry {
        let mut registry = Registry::with_prefix("xce_controller");
        registry.register(
            "heartbeats",
            "Worker heartbeats answered as primary",
            self.heartbeats.clone(),
        );
        registry.register(
            "raft_leader_changes",
            "Times the known Raft leader changed",
            self.leader_changes.clone(),
        );
        registry.register(
            "apply_duration_seconds",
            "Time to apply one Raft entry to the cluster state",
            self.apply_seconds.clone(),
        );
        registry.register_collector(Box::new(Live::new(move || live(&node, &log))));
        registry
    }

    /// Counts leader changes as openraft reports them, until the node stops.
    pub async fn watch_leader(self, raft: openraft::Raft<crate::store::TypeConfig>) {
        let mut metrics = raft.metrics();
        let mut leader = metrics.borrow().current_leader;
        while metrics.changed().await.is_ok() {
            let now = metrics.borrow().current_leader;
            if now != leader {
                leader = now;
                self.leader_changes.inc();
            }
        }
    }
}

fn live(node: &Node, log: &LogStore) -> Vec<Figure> {
    let raft = node.raft.metrics().borrow().clone();
    let jobs = node.jobs_by_state();
    vec![
        Figure::Gauge(
            "raft_term",
            "The Raft term this node is in",
            raft.current_term as i64,
        ),
        Figure::Gauge(
            "raft_last_log_index",
            "The index of the last entry in this node's log",
            raft.last_log_index.unwrap_or(0) as i64,
        ),
        Figure::Gauge(
            "raft_commit_index",
            "The highest log index this node knows committed",
            log.committed_index() as i64,
        ),
        Figure::Gauge(
            "raft_applied_index",
            "The index of the last entry this node applied (committed)",
            raft.last_applied.map_or(0, |l| l.index) as i64,
        ),
        Figure::Gauge(
            "primary",
            "1 while this node is the ready primary",
            i64::from(node.gate().is_ok()),
        ),
        Figure::Gauge(
            "history_behind",
            "Retired jobs this node's history store does not hold yet",
            node.history_behind() as i64,
        ),
        Figure::Gauge(
            "history_unwritten",
            "Retired jobs whose write to this node's history store failed, kept to write again (retiring stops while any are)",
            node.history.unwritten() as i64,
        ),
        Figure::Labelled(
            "jobs",
            "Jobs by state, as this node has applied them",
            "state",
            JobState::ALL
                .iter()
                .zip(jobs)
                .map(|(s, n)| (s.name().to_string(), n as i64))
                .collect(),
        ),
    ]
}
