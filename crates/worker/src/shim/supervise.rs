//! Supervising the running job: its process group and cgroup, the worker's orders, the lease,
//! the spool dir and the time limit, until the job's leader exits; and how it ended.

use super::*;

/// How a stop the shim was asked for (or decided on) is going.
#[derive(Debug, Clone, Copy)]
pub(super) struct Stopping {
    /// The first cause, which decides how the end is reported.
    pub(super) cause: StopCause,
    /// When SIGKILL follows the SIGTERM.
    pub(super) kill_at: Duration,
    pub(super) killed: bool,
}

/// The job as the shim holds it: its process group, and its cgroup where there is one.
pub(super) struct Confined<'a> {
    pub(super) spec: &'a ShimSpec,
    pub(super) pgid: i32,
    pub(super) cgroup: Option<JobCgroup>,
}

impl Confined<'_> {
    /// Whether the job is suspended: its leader stopped (SIGSTOP) or its cgroup frozen, as
    /// the worker leaves it on a suspend order.
    pub(super) fn suspended(&self) -> bool {
        procs::is_stopped(self.pgid) || self.cgroup.as_ref().is_some_and(JobCgroup::is_frozen)
    }

    /// SIGTERM to the whole job; thawed and continued first, since a suspended job must run
    /// to act on it.
    pub(super) fn terminate(&self) {
        if let Some(cg) = &self.cgroup {
            cg.thaw();
        }
        procs::signal_group(self.pgid, Signal::SIGTERM);
        procs::signal_group(self.pgid, Signal::SIGCONT);
    }

    /// SIGKILL to everything of the job: its group, and its cgroup or, without one, every
    /// process carrying the attempt's mark (what left the group).
    pub(super) fn kill_all(&self) {
        procs::signal_group(self.pgid, Signal::SIGKILL);
        match &self.cgroup {
            Some(cg) => cg.kill(),
            None => {
                let marked = procs::Marked::Attempt(self.spec.id, self.spec.attempt);
                procs::kill_marked(&self.spec.spool, marked);
            }
        }
    }
}

/// Waits for the job's leader to exit, carrying out orders and the lease meanwhile.
pub(super) fn supervise(
    job: &Confined<'_>,
    child: &mut Child,
    orders: &Orders,
) -> std::io::Result<(ExitStatus, Option<Stopping>)> {
    let spec = job.spec;
    let kill_grace = Duration::from_millis(spec.kill_grace_ms);
    let lease = LeaseFile::new(&spec.spool);
    let mut fence_at = spec.fence_at_ms.map(Duration::from_millis);
    let mut stopping: Option<Stopping> = None;
    let seconds = |s: u32| Duration::from_secs(s.into());
    let limit_path = limit_file(&spec.spool, spec.id, spec.attempt);
    let mut clock = RunClock::new(spec.time_limit_s.map(seconds));
    // A limit set while the start waited.
    if let Some(limit) = read_limit(&limit_path) {
        clock.limit = limit.map(seconds);
    }
    let mut warned = false;
    loop {
        orders.drain();
        if orders.kill.swap(false, Ordering::SeqCst) {
            info!(grace = ?kill_grace, "kill order: terminating the job");
            begin_stop(job, StopCause::Ordered, kill_grace, &mut stopping);
        }
        if orders.stop.swap(false, Ordering::SeqCst) {
            info!(grace = ?kill_grace, "the worker is stopping: terminating the job");
            begin_stop(job, StopCause::WorkerStopping, kill_grace, &mut stopping);
        }
        if orders.stale.swap(false, Ordering::SeqCst) {
            info!("stale copy: killing the job");
            begin_stop(job, StopCause::Stale, kill_grace, &mut stopping);
        }
        if orders.reload.swap(false, Ordering::SeqCst) {
            if let Some(limit) = read_limit(&limit_path) {
                info!(limit_s = limit, "the job's time limit changed");
                clock.limit = limit.map(seconds);
            }
        }
        if let Some(status) = child.try_wait()? {
            return Ok((status, stopping));
        }
        match lease.read() {
            Some(current) => fence_at = current,
            None if stopping.is_none() && spool_gone(&spec.spool) => {
                // Wiped with everything in it: no worker can report this job or adopt it.
                warn!(spool = %spec.spool.display(), "the worker's spool dir is gone; stopping the job");
                begin_stop(job, StopCause::SpoolGone, kill_grace, &mut stopping);
            }
            None => {}
        }
        let now = fence::now();
        if stopping.is_none() && fence_at.is_some_and(|at| now >= at) {
            warn!(
                "no primary has acknowledged this worker for too long; stopping its job before the cluster requeues it"
            );
            begin_stop(job, StopCause::LeaseLost, kill_grace, &mut stopping);
        }
        // Suspension is looked for only while it can matter (a limit set later counts the
        // time before it whole).
        clock.tick(now, clock.limit.is_some() && job.suspended());
        if let Some(w) = spec.warning.filter(|_| stopping.is_none() && !warned) {
            if clock.within(seconds(w.before_s)) {
                // Once, whatever becomes of the limit: the shim outlives a worker restart,
                // so nothing sends it again.
                let sent = procs::send_signal(job.pgid, w.signal, w.leader_only);
                info!(signal = %w, sent, "the job nears its time limit; warning signal sent");
                warned = true;
            }
        }
        if stopping.is_none() && clock.reached() {
            info!(limit = ?clock.limit, grace = ?kill_grace, "the job reached its time limit; terminating it");
            begin_stop(job, StopCause::TimeLimit, kill_grace, &mut stopping);
        }
        if let Some(s) = stopping.as_mut().filter(|s| !s.killed && now >= s.kill_at) {
            if s.cause.reporting() != Reporting::Unreported {
                warn!("job outlived its grace period; killing it");
            }
            job.kill_all();
            s.killed = true;
        }
        let wait = stopping
            .filter(|s| !s.killed)
            .map_or(TICK, |s| s.kill_at.saturating_sub(now).min(TICK));
        let timeout = PollTimeout::from(wait.as_millis().clamp(1, 1000) as u16);
        let mut fds = [PollFd::new(orders.wake.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, timeout) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Terminates the job, SIGKILL to follow after the cause's grace. The first cause decides
/// how the end is reported; a later one can only bring the SIGKILL forward.
pub(super) fn begin_stop(
    job: &Confined<'_>,
    cause: StopCause,
    kill_grace: Duration,
    stopping: &mut Option<Stopping>,
) {
    let kill_at = fence::now() + cause.grace(kill_grace);
    *stopping = Some(match *stopping {
        Some(s) => Stopping {
            kill_at: s.kill_at.min(kill_at),
            ..s
        },
        None => {
            job.terminate();
            Stopping {
                cause,
                kill_at,
                killed: false,
            }
        }
    });
}

/// How long a job with a time limit has run: boot-time clock (which a clock jump cannot
/// move), counted between the shim's looks at it, leaving out the spans it found the job
/// suspended. As Slurm does (slurmctld's `_job_suspend_op` moves a resumed job's end time
/// on by the time it was suspended), time suspended does not count: a job an operator
/// suspends to make room is not charged for the wait.
#[derive(Debug, Clone, Copy)]
pub(super) struct RunClock {
    /// `None`: no limit (one may be set while the job runs).
    pub(super) limit: Option<Duration>,
    pub(super) ran: Duration,
    pub(super) last: Option<Duration>,
}

impl RunClock {
    pub(super) fn new(limit: Option<Duration>) -> RunClock {
        RunClock {
            limit,
            ran: Duration::ZERO,
            last: None,
        }
    }

    /// Counts the span since the last look, unless the job is found suspended now.
    pub(super) fn tick(&mut self, now: Duration, suspended: bool) {
        if let Some(last) = self.last {
            if !suspended {
                self.ran += now.saturating_sub(last);
            }
        }
        self.last = Some(now);
    }

    pub(super) fn reached(&self) -> bool {
        self.limit.is_some_and(|limit| self.ran >= limit)
    }

    /// Whether the job has `before` or less left of its limit.
    pub(super) fn within(&self, before: Duration) -> bool {
        self.limit.is_some_and(|limit| self.ran + before >= limit)
    }
}

/// Whether the spool dir no longer exists (not merely unreadable for a moment).
pub(super) fn spool_gone(spool: &Path) -> bool {
    std::fs::symlink_metadata(spool).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
}

/// How the job's leader ended, as the cluster is told.
pub(super) fn end_of(status: ExitStatus) -> JobEnd {
    match (status.code(), status.signal()) {
        (Some(code), _) => JobEnd::Exit(code),
        (None, Some(sig)) => JobEnd::Signal(sig),
        (None, None) => JobEnd::Failed("ended without exit code or signal".into()),
    }
}
