//! The worker's Prometheus metrics (`--metrics-listen`): heartbeats delivered and not, the
//! attempts it holds, and its client's failovers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use prometheus_client::registry::Registry;
use xce_daemon::metrics::{Figure, Live};

/// Heartbeats a primary acknowledged.
pub static HEARTBEATS: AtomicU64 = AtomicU64::new(0);
/// Heartbeats refused or not delivered.
pub static HEARTBEATS_FAILED: AtomicU64 = AtomicU64::new(0);

/// The registry `--metrics-listen` serves, reading `jobs` and `client` at each scrape.
pub fn registry(jobs: Arc<crate::jobs::Jobs>, client: xce_client::Client) -> Registry {
    let mut registry = Registry::with_prefix("xce_worker");
    registry.register_collector(Box::new(Live::new(move || {
        let stats = client.stats();
        vec![
            Figure::Counter(
                "heartbeats",
                "Heartbeats a primary acknowledged",
                HEARTBEATS.load(Ordering::Relaxed),
            ),
            Figure::Counter(
                "heartbeats_failed",
                "Heartbeats refused or not delivered",
                HEARTBEATS_FAILED.load(Ordering::Relaxed),
            ),
            Figure::Gauge(
                "attempts_held",
                "Job attempts this worker holds (running, suspended or finished and not yet acknowledged)",
                jobs.held().len() as i64,
            ),
            Figure::Counter(
                "client_reconnects",
                "Connections the worker's client opened (failovers and restarts)",
                stats.reconnects,
            ),
            Figure::Counter(
                "client_rejoins",
                "Joins of a new primary",
                stats.rejoins,
            ),
        ]
    })));
    registry
}
