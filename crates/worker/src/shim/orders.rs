//! The worker's orders to a shim (signals caught into flags that wake its poll), why the shim
//! stops its job (the cause decides how the end is reported), and the orders that come before
//! the job starts: then it never starts.

use super::*;

/// The worker's orders, as signals caught by handlers that only set a flag and wake the
/// shim's poll through a socket pair. Caught, not blocked or ignored: at exec the job gets
/// every one of them back at its default action and nothing masked.
pub(super) struct Orders {
    /// SIGUSR1.
    pub(super) kill: Arc<AtomicBool>,
    /// SIGTERM.
    pub(super) stop: Arc<AtomicBool>,
    /// SIGUSR2.
    pub(super) stale: Arc<AtomicBool>,
    /// SIGHUP: the worker wrote the attempt a new time limit ([`super::limit_file`]). A
    /// hangup of the terminal the worker was started from only makes the shim read it again.
    pub(super) reload: Arc<AtomicBool>,
    /// Readable after any of those, or SIGCHLD (the job ended); SIGINT and SIGQUIT only wake
    /// the shim, which must outlive the terminal the worker was started from.
    pub(super) wake: UnixStream,
}

impl Orders {
    pub(super) fn listen() -> std::io::Result<Orders> {
        let (wake, waker) = UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        waker.set_nonblocking(true)?;
        for signal in [SIGCHLD, SIGTERM, SIGUSR1, SIGUSR2, SIGINT, SIGHUP, SIGQUIT] {
            signal_hook::low_level::pipe::register(signal, waker.try_clone()?)?;
        }
        let orders = Orders {
            kill: Arc::new(AtomicBool::new(false)),
            stop: Arc::new(AtomicBool::new(false)),
            stale: Arc::new(AtomicBool::new(false)),
            reload: Arc::new(AtomicBool::new(false)),
            wake,
        };
        signal_hook::flag::register(SIGHUP, orders.reload.clone())?;
        signal_hook::flag::register(SIGUSR1, orders.kill.clone())?;
        signal_hook::flag::register(SIGTERM, orders.stop.clone())?;
        signal_hook::flag::register(SIGUSR2, orders.stale.clone())?;
        Ok(orders)
    }

    /// Empties the wake-up socket (the flags say what happened).
    pub(super) fn drain(&self) {
        let mut buf = [0u8; 64];
        while (&self.wake).read(&mut buf).is_ok_and(|n| n > 0) {}
    }
}

/// Why the shim stops its job: what decides whether its end is reported, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StopCause {
    /// The worker's kill order (a person killed or requeued the job): the end is reported,
    /// and the primary knows why.
    Ordered,
    /// The worker is stopping: unreported, so the primary requeues the job.
    WorkerStopping,
    /// A newer attempt fences this one: killed at once, unreported.
    Stale,
    /// No primary acknowledged the worker within its lease: unreported (the cluster will
    /// requeue the job once it declares the host lost).
    LeaseLost,
    /// The worker's spool dir is gone: nothing could report or adopt the job.
    SpoolGone,
    /// The job ran for its time limit: reported as timed out.
    TimeLimit,
}

/// What becomes of the end of a job stopped for a cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reporting {
    /// As the job ended.
    End,
    /// As the job ended, marked timed out.
    TimedOut,
    /// Not at all.
    Unreported,
}

impl StopCause {
    pub(super) fn reporting(self) -> Reporting {
        match self {
            StopCause::Ordered => Reporting::End,
            StopCause::TimeLimit => Reporting::TimedOut,
            StopCause::WorkerStopping
            | StopCause::Stale
            | StopCause::LeaseLost
            | StopCause::SpoolGone => Reporting::Unreported,
        }
    }

    /// How long the job has between SIGTERM and SIGKILL.
    pub(super) fn grace(self, kill_grace: Duration) -> Duration {
        match self {
            StopCause::Stale => Duration::ZERO,
            _ => kill_grace,
        }
    }
}

/// The signals that carry the worker's orders; a forked shim has them blocked until it
/// listens.
pub fn order_signals() -> nix::sys::signal::SigSet {
    let mut set = nix::sys::signal::SigSet::empty();
    for signal in [Signal::SIGTERM, Signal::SIGUSR1, Signal::SIGUSR2] {
        set.add(signal);
    }
    set
}

/// Waits until the shim of the older copy this attempt fences is gone: `None` when the job
/// may start, or the shim's exit when it must not (a kill order: the job's end is that it
/// never ran; a stop or a newer attempt: unreported; its worker gone meanwhile: unreported,
/// since a restarted worker could not know of this shim). Bounded by the kill grace and a
/// margin; past it the older copy is killed here, whatever became of its shim.
pub(super) fn wait_for_fenced_copy(
    spec: &ShimSpec,
    older: FencedCopy,
    orders: &Orders,
    outbox: &Outbox,
) -> Option<std::io::Result<i32>> {
    let parent = nix::unistd::getppid();
    let worker_alive = || match spec.worker {
        Some(worker) => worker.alive(),
        None => nix::unistd::getppid() == parent,
    };
    let patience = Duration::from_millis(spec.kill_grace_ms) + Duration::from_secs(2);
    let deadline = std::time::Instant::now() + patience;
    while older.shim.alive() {
        if let Some(exit) = order_before_start(spec, orders, outbox) {
            return Some(exit);
        }
        if std::time::Instant::now() >= deadline {
            warn!(
                shim = older.shim.pid,
                attempt = older.attempt,
                ?patience,
                "the copy this attempt fences outlived its shim's grace; killing it here"
            );
            kill_older_copy(spec, older);
            break;
        }
        orders.drain();
        std::thread::sleep(Duration::from_millis(5));
    }
    if !worker_alive() {
        warn!("the worker went away while this attempt waited; not starting the job");
        return Some(Ok(EXIT_UNREPORTED));
    }
    None
}

/// The shim's exit if an order came before the job started, which then never starts: a
/// kill is reported (the job's end is that it never ran); a stop or a newer attempt is not.
pub(super) fn order_before_start(
    spec: &ShimSpec,
    orders: &Orders,
    outbox: &Outbox,
) -> Option<std::io::Result<i32>> {
    if orders.kill.load(Ordering::SeqCst) {
        let reason = KILLED_BEFORE_START.to_string();
        let end = Report::finished(spec.id, spec.attempt, JobEnd::Failed(reason.clone()));
        tell_worker(&format!("failed {reason}"));
        return Some(outbox.put(&end).map(|_| 0).map_err(std::io::Error::other));
    }
    if orders.stop.load(Ordering::SeqCst) || orders.stale.load(Ordering::SeqCst) {
        info!("an order came before the job started; not starting it");
        tell_worker("failed stopped before it started");
        return Some(Ok(EXIT_UNREPORTED));
    }
    None
}

/// Kills an older copy of the job whose shim did not end it in time: the shim, the copy's
/// cgroup where there is one, and every process carrying the older attempt's mark.
pub(super) fn kill_older_copy(spec: &ShimSpec, older: FencedCopy) {
    if older.shim.alive() {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(older.shim.pid), Signal::SIGKILL);
    }
    if let Some(cgroups) = &spec.cgroups {
        cgroups.job(spec.id, older.attempt).kill();
    }
    procs::kill_marked(&spec.spool, procs::Marked::Attempt(spec.id, older.attempt));
}
