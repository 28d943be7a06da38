//! Self-fencing: a worker cut off from the primary has its jobs stopped before the cluster
//! declares them lost and requeues them elsewhere, so a job never runs twice at once even
//! across a network partition, a frozen worker or a dead one.
//!
//! The primary declares a host's jobs lost `lost_after` (heartbeat TTL + lost grace, told at
//! every join) after the last heartbeat it saw. The worker counts from when it *sent* the
//! last heartbeat (or join) a primary acknowledged, which is no later than when the primary
//! saw it: the jobs are stopped from `lost_after - kill_grace - margin` on, so SIGKILL lands a
//! margin before the primary may requeue. A primary cut off from its majority does not
//! acknowledge heartbeats, and a new primary restarts its clocks when it becomes ready, so a
//! failover only gives more time.
//!
//! The worker only *renews* the lease: it writes the deadline to `<spool>/lease` on every
//! acknowledgement. Each job's shim ([`crate::shim`]) reads that file and stops its job once
//! the deadline has passed, so the fence holds whether the worker is alive, frozen or dead.
//! Deadlines are on `CLOCK_BOOTTIME`, which every process on the host shares and which keeps
//! counting while the machine is suspended.
//!
//! The price: when the whole cluster is down for that long, running jobs are stopped (and
//! requeued once it is back); raise `hosts.lost_grace_ms` to ride out longer outages.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nix::time::{clock_gettime, ClockId};
use serde::{Deserialize, Serialize};
use tracing::warn;

/// Time since boot, suspend included.
pub fn now() -> Duration {
    clock_gettime(ClockId::CLOCK_BOOTTIME)
        .map(Duration::from)
        .unwrap_or_default()
}

/// The lease deadline as the shims read it: `<spool>/lease`, JSON
/// `{"fence_at_ms": N}` (boot-time milliseconds) or `{"fence_at_ms": null}` when the cluster's
/// timing leaves no room to fence. Replaced whole by a rename, so a reader never sees half.
#[derive(Debug, Clone)]
pub struct LeaseFile {
    path: PathBuf,
}

#[derive(Debug, Serialize, Deserialize)]
struct LeaseRecord {
    fence_at_ms: Option<u64>,
}

impl LeaseFile {
    /// The lease file of the worker whose spool is `spool`.
    pub fn new(spool: &Path) -> LeaseFile {
        LeaseFile {
            path: spool.join("lease"),
        }
    }

    /// Publishes a new deadline. Not synced: the file only matters while this boot lasts.
    pub fn write(&self, fence_at: Option<Duration>) -> std::io::Result<()> {
        let record = LeaseRecord {
            fence_at_ms: fence_at.map(|d| d.as_millis() as u64),
        };
        let bytes = serde_json::to_vec(&record).map_err(std::io::Error::other)?;
        let tmp = self.path.with_extension("tmp");
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, &self.path)
    }

    /// The deadline last published; `None` when there is no readable file.
    pub fn read(&self) -> Option<Option<Duration>> {
        let bytes = std::fs::read(&self.path).ok()?;
        let record: LeaseRecord = serde_json::from_slice(&bytes).ok()?;
        Some(record.fence_at_ms.map(Duration::from_millis))
    }
}

/// When the worker last heard from a primary, and how long it may go without.
#[derive(Debug)]
pub struct Lease {
    inner: Mutex<LeaseState>,
    kill_grace: Duration,
    margin: Duration,
    file: Option<LeaseFile>,
}

#[derive(Debug)]
struct LeaseState {
    /// When the last acknowledged heartbeat or join was sent.
    last_ack: Duration,
    /// As the last join said it.
    lost_after: Option<Duration>,
    fence_after: Option<Duration>,
}

impl LeaseState {
    fn deadline(&self) -> Option<Duration> {
        Some(self.last_ack + self.fence_after?)
    }
}

impl Lease {
    /// A lease for a worker with this kill grace and heartbeat interval, starting `at`,
    /// published to `file` (if any) once a join has told how long it lasts.
    pub fn new(
        kill_grace: Duration,
        heartbeat: Duration,
        at: Duration,
        file: Option<LeaseFile>,
    ) -> Arc<Lease> {
        Arc::new(Lease {
            inner: Mutex::new(LeaseState {
                last_ack: at,
                lost_after: None,
                fence_after: None,
            }),
            kill_grace,
            margin: (heartbeat * 2).max(Duration::from_secs(1)),
            file,
        })
    }

    fn state(&self) -> MutexGuard<'_, LeaseState> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes the deadline for the shims; under the lock, so files never go back in time.
    /// Nothing before the first join: a restarted worker must not lift the deadline its
    /// previous run published for the shims it is about to adopt.
    fn publish(&self, s: &LeaseState) {
        let (Some(file), Some(_)) = (&self.file, s.lost_after) else {
            return;
        };
        if let Err(e) = file.write(s.deadline()) {
            warn!(error = %e, "cannot publish the lease to this worker's jobs");
        }
    }

    /// A primary acknowledged a heartbeat or join sent at `sent` (from [`now`]).
    pub fn renew_from(&self, sent: Duration) {
        let mut s = self.state();
        if sent > s.last_ack {
            s.last_ack = sent;
            self.publish(&s);
        }
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
        self.publish(&s);
    }

    /// The deadline after which jobs are stopped; `None` before a join or without fencing.
    pub fn deadline(&self) -> Option<Duration> {
        self.state().deadline()
    }

    /// How far past its deadline the lease is at `at`, if it is.
    pub fn overdue(&self, at: Duration) -> Option<Duration> {
        at.checked_sub(self.deadline()?)
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
        let lease = Lease::new(s(10), s(2), s(100), None);
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
