//! Self-fencing: a worker cut off from the primary stops its own jobs before the cluster
//! declares them lost and requeues them elsewhere, so a job never runs twice at once even
//! across a network partition.
//!
//! The primary declares a host's jobs lost `lost_after` (heartbeat TTL + lost grace, told at
//! every join) after the last heartbeat it saw. The worker counts from the last heartbeat the
//! primary *acknowledged*, which is later, and kills its jobs (SIGTERM, SIGKILL after the kill
//! grace) at `lost_after - kill_grace - margin`. A new primary restarts its clocks when it
//! becomes ready, so a failover only gives more time. The price: when the whole cluster is
//! down for that long, running jobs are stopped (and requeued once it is back); raise
//! `hosts.lost_grace_ms` to ride out longer outages.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::warn;

use crate::jobs::Jobs;

/// When the worker last heard from a primary, and how long it may go without.
#[derive(Debug)]
pub struct Lease {
    inner: Mutex<LeaseState>,
    kill_grace: Duration,
    margin: Duration,
}

#[derive(Debug)]
struct LeaseState {
    last_ack: Instant,
    /// As the last join said it.
    lost_after: Option<Duration>,
    fence_after: Option<Duration>,
}

impl Lease {
    /// A lease for a worker with this kill grace and heartbeat interval.
    pub fn new(kill_grace: Duration, heartbeat: Duration) -> Arc<Lease> {
        Arc::new(Lease {
            inner: Mutex::new(LeaseState {
                last_ack: Instant::now(),
                lost_after: None,
                fence_after: None,
            }),
            kill_grace,
            margin: (heartbeat * 2).max(Duration::from_secs(1)),
        })
    }

    fn state(&self) -> MutexGuard<'_, LeaseState> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A primary acknowledged a heartbeat or a join.
    pub fn renew(&self) {
        self.state().last_ack = Instant::now();
    }

    /// A join told how long the primary waits before it declares this host's jobs lost.
    pub fn set_lost_after(&self, lost_after: Duration) {
        let mut s = self.state();
        if s.lost_after == Some(lost_after) {
            return;
        }
        let fence_after = fence_after(lost_after, self.kill_grace, self.margin);
        if fence_after.is_none() {
            warn!(
                ?lost_after,
                kill_grace = ?self.kill_grace,
                "the cluster requeues a silent host's jobs too soon for this worker to stop them first; self-fencing is off (raise hosts.lost_grace_ms or lower --kill-grace-ms)"
            );
        }
        s.lost_after = Some(lost_after);
        s.fence_after = fence_after;
    }

    /// How long past its deadline the lease is, if it is.
    fn overdue(&self) -> Option<Duration> {
        let s = self.state();
        let deadline = s.fence_after?;
        s.last_ack.elapsed().checked_sub(deadline)
    }
}

/// When to fence: `lost_after - kill_grace - margin`, if that leaves more than the margin.
pub fn fence_after(
    lost_after: Duration,
    kill_grace: Duration,
    margin: Duration,
) -> Option<Duration> {
    lost_after
        .checked_sub(kill_grace + margin)
        .filter(|d| *d >= margin)
}

/// Watches the lease until `stop`; kills every running job once it has run out.
pub async fn run(jobs: Arc<Jobs>, lease: Arc<Lease>, mut stop: watch::Receiver<bool>) {
    let tick = Duration::from_millis(100);
    loop {
        tokio::select! {
            () = tokio::time::sleep(tick) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        if lease.overdue().is_none() {
            continue;
        }
        let killed = jobs.kill_all_unreported();
        if killed > 0 {
            warn!(jobs = killed, "no primary has acknowledged this worker for too long; stopping its jobs before the cluster requeues them");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_with_room_for_the_kill_grace_and_a_margin_or_not_at_all() {
        let s = Duration::from_secs;
        assert_eq!(fence_after(s(40), s(10), s(1)), Some(s(29)));
        assert_eq!(fence_after(s(12), s(10), s(1)), Some(s(1)));
        assert_eq!(fence_after(s(11), s(10), s(1)), None);
        assert_eq!(fence_after(s(2), s(10), s(1)), None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_lease_runs_out_only_after_its_deadline_without_renewal() {
        // Kill grace 10 s, heartbeat 2 s (margin 4 s): lost after 40 s means fence after 26 s.
        let lease = Lease::new(Duration::from_secs(10), Duration::from_secs(2));
        assert_eq!(lease.overdue(), None, "no deadline before a join says one");
        lease.set_lost_after(Duration::from_secs(40));
        tokio::time::advance(Duration::from_secs(20)).await;
        assert_eq!(lease.overdue(), None);
        lease.renew();
        tokio::time::advance(Duration::from_secs(25)).await;
        assert_eq!(lease.overdue(), None);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(lease.overdue(), Some(Duration::from_secs(1)));
        // A cluster that requeues too soon to fence in time: no deadline at all.
        lease.set_lost_after(Duration::from_secs(12));
        assert_eq!(lease.overdue(), None);
    }
}
