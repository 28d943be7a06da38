//! The scheduler's Prometheus metrics (`--metrics-listen`): placements made (their rate is
//! placements per second), pending reasons published, decisions that needed extended
//! retry, whether this scheduler holds the lease, the jobs it sees pending, and the starts
//! backfill reserved.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use prometheus_client::registry::Registry;
use xce_daemon::metrics::{Figure, Live};

/// Placements the cluster accepted.
pub static PLACEMENTS: AtomicU64 = AtomicU64::new(0);
/// Placements the cluster refused (the world changed under them).
pub static REFUSED: AtomicU64 = AtomicU64::new(0);
/// Pending jobs in the view at the last round.
pub static PENDING: AtomicI64 = AtomicI64::new(0);
/// 1 while this scheduler holds the lease.
pub static ACTIVE: AtomicI64 = AtomicI64::new(0);
/// Starts backfill reserved in the last round.
pub static RESERVATIONS: AtomicI64 = AtomicI64::new(0);

/// The registry `--metrics-listen` serves.
pub fn registry() -> Registry {
    let mut registry = Registry::with_prefix("xce_scheduler");
    registry.register_collector(Box::new(Live::new(|| {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        vec![
            Figure::Counter(
                "placements",
                "Placements the cluster accepted",
                get(&PLACEMENTS),
            ),
            Figure::Counter(
                "placements_refused",
                "Placements the cluster refused because the world changed",
                get(&REFUSED),
            ),
            Figure::Counter(
                "publish_retries",
                "Decision rounds published again with a fresh budget (an outage outlasted one)",
                get(&xce_client::publish::EXTENDED_ROUNDS),
            ),
            Figure::Gauge(
                "active",
                "1 while this scheduler holds the lease",
                ACTIVE.load(Ordering::Relaxed),
            ),
            Figure::Gauge(
                "pending_jobs",
                "Pending jobs in this scheduler's view",
                PENDING.load(Ordering::Relaxed),
            ),
            Figure::Gauge(
                "reservations",
                "Starts backfill reserved for blocked jobs in the last round",
                RESERVATIONS.load(Ordering::Relaxed),
            ),
        ]
    })));
    registry
}
