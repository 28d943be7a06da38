//! Self-fencing: a worker cut off from the primary stops its own jobs before the cluster
//! declares them lost and requeues them elsewhere, so a job never runs twice at once even
//! across a network partition.
//!
//! The primary declares a host's jobs lost `lost_after` (heartbeat TTL + lost grace, told at
//! every join) after the last heartbeat it saw. The worker counts from when it *sent* the
//! last heartbeat (or join) a primary acknowledged, which is no later than when the primary
//! saw it, and starts killing its jobs at `lost_after - kill_grace - margin`, so SIGKILL lands
//! a margin before the primary may requeue. A primary cut off from its majority does not
//! acknowledge heartbeats, and a new primary restarts its clocks when it becomes ready, so a
//! failover only gives more time.
//!
//! The lease is kept on `CLOCK_BOOTTIME` (it keeps counting while the machine is suspended)
//! and watched from a thread of its own, so a stalled runtime cannot hold the fence back.
//!
//! The price: when the whole cluster is down for that long, running jobs are stopped (and
//! requeued once it is back); raise `hosts.lost_grace_ms` to ride out longer outages.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nix::time::{clock_gettime, ClockId};
use tokio::sync::watch;
use tracing::warn;

use crate::jobs::Jobs;

/// Time since boot, suspend included.
pub fn now() -> Duration {
    clock_gettime(ClockId::CLOCK_BOOTTIME)
        .map(Duration::from)
        .unwrap_or_default()
}

/// When the worker last heard from a primary, and how long it may go without.
#[derive(Debug)]
pub struct Lease {
    inner: Mutex<LeaseState>,
    kill_grace: Duration,
    margin: Duration,
}

#[derive(Debug)]
struct LeaseState {
    /// When the last acknowledged heartbeat or join was sent.
    last_ack: Duration,
    /// As the last join said it.
    lost_after: Option<Duration>,
    fence_after: Option<Duration>,
}

impl Lease {
    /// A lease for a worker with this kill grace and heartbeat interval, starting `at`.
    pub fn new(kill_grace: Duration, heartbeat: Duration, at: Duration) -> Arc<Lease> {
        Arc::new(Lease {
            inner: Mutex::new(LeaseState {
                last_ack: at,
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

    /// A primary acknowledged a heartbeat or join sent at `sent` (from [`now`]).
    pub fn renew_from(&self, sent: Duration) {
        let mut s = self.state();
        s.last_ack = s.last_ack.max(sent);
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

    /// How far past its deadline the lease is at `at`, if it is.
    pub fn overdue(&self, at: Duration) -> Option<Duration> {
        let s = self.state();
        let deadline = s.last_ack + s.fence_after?;
        at.checked_sub(deadline)
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

/// Watches the lease on a thread of its own until `stop`; once it has run out, stops every
/// running job (SIGTERM, SIGKILL after the grace period), unreported, and asks for a resync.
pub fn spawn(
    jobs: Arc<Jobs>,
    lease: Arc<Lease>,
    stop: watch::Receiver<bool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("xce-fence".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_millis(100));
            if *stop.borrow() {
                return;
            }
            if lease.overdue(now()).is_none() {
                continue;
            }
            let begun = jobs.terminate_unreported();
            if begun.is_empty() {
                continue;
            }
            warn!(jobs = begun.len(), "no primary has acknowledged this worker for too long; stopping its jobs before the cluster requeues them");
            std::thread::sleep(jobs.kill_grace());
            jobs.finish_kill(&begun);
            jobs.request_resync();
        })
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

    #[test]
    fn the_lease_runs_out_only_after_its_deadline_without_renewal() {
        let s = Duration::from_secs;
        // Kill grace 10 s, heartbeat 2 s (margin 4 s): lost after 40 s means fence after 26 s.
        let lease = Lease::new(s(10), s(2), s(100));
        assert_eq!(
            lease.overdue(s(1000)),
            None,
            "no deadline before a join says one"
        );
        lease.set_lost_after(s(40));
        assert_eq!(lease.overdue(s(126)), Some(s(0)));
        lease.renew_from(s(120));
        assert_eq!(lease.overdue(s(145)), None);
        assert_eq!(lease.overdue(s(147)), Some(s(1)));
        // A late reply to an older heartbeat never moves the lease back.
        lease.renew_from(s(110));
        assert_eq!(lease.overdue(s(147)), Some(s(1)));
        // A cluster that requeues too soon to fence in time: no deadline at all.
        lease.set_lost_after(s(12));
        assert_eq!(lease.overdue(s(1000)), None);
    }

    #[test]
    fn boot_time_moves_forward() {
        let a = now();
        std::thread::sleep(Duration::from_millis(5));
        assert!(now() > a && a > Duration::ZERO);
    }
}
