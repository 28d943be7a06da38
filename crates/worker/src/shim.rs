//! The shim: one small supervisor process per attempt, the job's parent in place of the
//! worker. It outlives the worker, so what keeps a job from running twice at once does not die,
//! freeze or lose its network with the worker:
//!
//! - it stops the job once the worker's lease ([`crate::fence`]) has run out, whatever became of
//!   the worker;
//! - it records how the job ended, durably, in the worker's outbox, even while no worker runs;
//! - it is found again by a restarted worker through its record ([`crate::procs`]), which adopts
//!   it instead of killing and requeueing the job;
//! - it stops the job when the spool dir is gone, since nothing could report or adopt it.
//!
//! The worker's launcher ([`crate::launcher`]) forks it with the job's spec; run as
//! `xce-worker shim` instead it reads the spec as JSON on stdin. It says on stdout, one line,
//! `started <pid>` or `failed <reason>` (after its launcher's tag), then nothing more. The
//! worker steers it by signals: SIGUSR1 kills the job (SIGTERM, SIGKILL after the kill grace; its end is reported), SIGTERM
//! stops it unreported (the worker is stopping: the primary requeues it), SIGUSR2 kills it at
//! once, unreported (a stale copy). Suspend and resume go to the job's group directly.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};
use signal_hook::consts::{SIGCHLD, SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
use tracing::{info, warn};
use xce_client::types::{JobEnd, JobId};

use crate::cgroup::{self, Cgroups, JobCgroup, Limits};
use crate::fence::{self, LeaseFile};
use crate::outbox::{Outbox, Report};
use crate::procs::{self, AttemptRecord, ProcRecord, Records};

/// The first argument that makes `xce-worker` a shim.
pub const SHIM_ARG: &str = "shim";
/// The shim stopped its job without an end of the job's own: nothing is reported.
pub const EXIT_UNREPORTED: i32 = 3;
/// How often the shim looks at the lease while nothing else happens.
const TICK: Duration = Duration::from_millis(100);

/// What the worker tells a shim about the attempt it is to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShimSpec {
    pub id: JobId,
    pub attempt: u32,
    pub command: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Where the job runs; the spool dir when the job named none.
    pub cwd: PathBuf,
    /// The worker's spool dir, canonical: outbox, records, lease and output live there.
    pub spool: PathBuf,
    pub kill_grace_ms: u64,
    /// The lease deadline when the shim was started (boot-time ms); the lease file has the
    /// current one.
    pub fence_at_ms: Option<u64>,
    /// The worker's cgroups, if the host has them: the job gets one of its own.
    pub cgroups: Option<Cgroups>,
    /// Enforced where there are cgroups.
    pub limits: Limits,
    /// The user the job runs as, when the worker runs each job as its user (as root);
    /// `None`: as the worker's own account.
    pub run_as: Option<RunAs>,
    /// Why this worker may not run the job at all (its user's jobs do not run here): the
    /// worker's own check, behind the controller's.
    pub refused: Option<String>,
    /// An older copy of this job that this attempt fences: the job starts only once that
    /// copy's shim (which kills its copy when told it is stale) is gone, so two attempts of
    /// a job never run at once on this host.
    #[serde(default)]
    pub after: Option<FencedCopy>,
    /// The worker that sent it: an attempt that waits out an older copy does not start once
    /// that worker is gone (a restarted one could not know of it). `None` from older
    /// workers, whose shims were their children: the parent is checked instead.
    #[serde(default)]
    pub worker: Option<ProcRecord>,
    /// A retired report's file to write the attempt's record into, instead of creating one
    /// ([`crate::outbox::Spares`]). `None` from older workers, or when there is no spare.
    #[serde(default)]
    pub spare: Option<PathBuf>,
    /// How long the job may run, in seconds from its start, not counting time suspended:
    /// the shim stops it there and reports it timed out. Its clock is the shim's, so a
    /// controller failover or a worker restart neither resets nor doubles it.
    #[serde(default)]
    pub time_limit_s: Option<u32>,
}

/// The older copy a newer attempt waits out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FencedCopy {
    pub attempt: u32,
    pub shim: ProcRecord,
}

/// Whom a job runs as: looked up in this host's user database when the job starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunAs {
    pub user: String,
    /// Whether a job of root (uid 0) may run; refused otherwise.
    pub allow_root: bool,
}

/// An account a job runs as, resolved from the user database.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Account {
    name: String,
    uid: nix::unistd::Uid,
    gid: nix::unistd::Gid,
    groups: Vec<nix::unistd::Gid>,
    home: PathBuf,
    shell: PathBuf,
}

impl RunAs {
    /// The account, with its supplementary groups; refuses a user this host does not know
    /// and uid 0 unless allowed, with the reason the job's end will carry.
    fn resolve(&self) -> Result<Account, String> {
        if self.user.is_empty() {
            return Err("the job names no user to run as".into());
        }
        let user = nix::unistd::User::from_name(&self.user)
            .map_err(|e| format!("cannot look up user {}: {e}", self.user))?
            .ok_or_else(|| format!("user {} does not exist on this host", self.user))?;
        if user.uid.is_root() && !self.allow_root {
            return Err(format!(
                "user {} is root (uid 0), and this worker does not run root's jobs",
                self.user
            ));
        }
        let name = std::ffi::CString::new(user.name.as_str())
            .map_err(|_| format!("user {}: the name holds a NUL", self.user))?;
        let groups = nix::unistd::getgrouplist(&name, user.gid)
            .map_err(|e| format!("cannot list the groups of user {}: {e}", self.user))?;
        Ok(Account {
            name: user.name,
            uid: user.uid,
            gid: user.gid,
            groups,
            home: user.dir,
            shell: user.shell,
        })
    }
}

/// Where an attempt's output goes.
pub fn output_paths(spool: &Path, id: u64, attempt: u32) -> (PathBuf, PathBuf) {
    (
        spool.join(format!("{id}.{attempt}.out")),
        spool.join(format!("{id}.{attempt}.err")),
    )
}

/// Runs a shim: reads its spec from stdin and supervises the job until it is over. Returns
/// the process exit code (0 once an end is recorded, [`EXIT_UNREPORTED`], 1 on failure).
pub fn main() -> i32 {
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut input) {
        warn!(error = %e, "shim: cannot read its spec");
        return 1;
    }
    let spec: ShimSpec = match serde_json::from_slice(&input) {
        Ok(spec) => spec,
        Err(e) => {
            warn!(error = %e, "shim: malformed spec");
            return 1;
        }
    };
    run_spec(&spec)
}

/// Supervises the attempt `spec` describes until it is over, in this process: an exec'd
/// shim or one the launcher forked ([`crate::launcher`]). Returns the process exit code.
pub fn run_spec(spec: &ShimSpec) -> i32 {
    let span = tracing::info_span!("job", id = spec.id, attempt = spec.attempt);
    let _entered = span.enter();
    match run(spec) {
        Ok(code) => code,
        Err(e) => {
            warn!(error = %e, "shim failed");
            1
        }
    }
}

/// How a forked shim's one line is told apart on its launcher's pipe: `<seq> said `.
static ANNOUNCE_AS: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Makes this (forked) shim's line that of request `seq` of its launcher.
pub fn announce_as(seq: u64) {
    let _ = ANNOUNCE_AS.set(format!("{seq} said "));
}

/// The worker's orders, as signals caught by handlers that only set a flag and wake the
/// shim's poll through a socket pair. Caught, not blocked or ignored: at exec the job gets
/// every one of them back at its default action and nothing masked.
struct Orders {
    /// SIGUSR1.
    kill: Arc<AtomicBool>,
    /// SIGTERM.
    stop: Arc<AtomicBool>,
    /// SIGUSR2.
    stale: Arc<AtomicBool>,
    /// Readable after any of those, or SIGCHLD (the job ended); SIGINT, SIGHUP and SIGQUIT
    /// only wake the shim, which must outlive the terminal the worker was started from.
    wake: UnixStream,
}

impl Orders {
    fn listen() -> std::io::Result<Orders> {
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
            wake,
        };
        signal_hook::flag::register(SIGUSR1, orders.kill.clone())?;
        signal_hook::flag::register(SIGTERM, orders.stop.clone())?;
        signal_hook::flag::register(SIGUSR2, orders.stale.clone())?;
        Ok(orders)
    }

    /// Empties the wake-up socket (the flags say what happened).
    fn drain(&self) {
        let mut buf = [0u8; 64];
        while (&self.wake).read(&mut buf).is_ok_and(|n| n > 0) {}
    }
}

/// Why the shim stops its job: what decides whether its end is reported, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopCause {
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
enum Reporting {
    /// As the job ended.
    End,
    /// As the job ended, marked timed out.
    TimedOut,
    /// Not at all.
    Unreported,
}

impl StopCause {
    fn reporting(self) -> Reporting {
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
    fn grace(self, kill_grace: Duration) -> Duration {
        match self {
            StopCause::Stale => Duration::ZERO,
            _ => kill_grace,
        }
    }
}

/// How a stop the shim was asked for (or decided on) is going.
#[derive(Debug, Clone, Copy)]
struct Stopping {
    /// The first cause, which decides how the end is reported.
    cause: StopCause,
    /// When SIGKILL follows the SIGTERM.
    kill_at: Duration,
    killed: bool,
}

/// The job as the shim holds it: its process group, and its cgroup where there is one.
struct Confined<'a> {
    spec: &'a ShimSpec,
    pgid: i32,
    cgroup: Option<JobCgroup>,
}

impl Confined<'_> {
    /// Whether the job is suspended: its leader stopped (SIGSTOP) or its cgroup frozen, as
    /// the worker leaves it on a suspend order.
    fn suspended(&self) -> bool {
        procs::is_stopped(self.pgid) || self.cgroup.as_ref().is_some_and(JobCgroup::is_frozen)
    }

    /// SIGTERM to the whole job; thawed and continued first, since a suspended job must run
    /// to act on it.
    fn terminate(&self) {
        if let Some(cg) = &self.cgroup {
            cg.thaw();
        }
        procs::signal_group(self.pgid, Signal::SIGTERM);
        procs::signal_group(self.pgid, Signal::SIGCONT);
    }

    /// SIGKILL to everything of the job: its group, and its cgroup or, without one, every
    /// process carrying the attempt's mark (what left the group).
    fn kill_all(&self) {
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

/// The signals that carry the worker's orders; a forked shim has them blocked until it
/// listens.
pub fn order_signals() -> nix::sys::signal::SigSet {
    let mut set = nix::sys::signal::SigSet::empty();
    for signal in [Signal::SIGTERM, Signal::SIGUSR1, Signal::SIGUSR2] {
        set.add(signal);
    }
    set
}

fn run(spec: &ShimSpec) -> std::io::Result<i32> {
    // Listening before the job exists, so no order can kill the shim instead of steering it;
    // an order that came while a forked shim started is delivered now.
    let orders = Orders::listen()?;
    order_signals().thread_unblock()?;
    let outbox = Outbox::open(&spec.spool).map_err(std::io::Error::other)?;
    let records = Records::open(&spec.spool)?;
    let cgroup = spec.cgroups.as_ref().map(|c| c.job(spec.id, spec.attempt));
    if let Some(code) = spec
        .after
        .and_then(|older| wait_for_fenced_copy(spec, older, &orders, &outbox))
    {
        return code;
    }
    // A start that waited out the lease (the worker froze between the order and the spawn,
    // or this shim waited for an older copy) may have been superseded: no user code runs for
    // it. The resync places it again if not.
    let fence_at = LeaseFile::new(&spec.spool)
        .read()
        .unwrap_or(spec.fence_at_ms.map(Duration::from_millis));
    if let Some(late) = fence_at.and_then(|at| fence::now().checked_sub(at)) {
        warn!(?late, "not starting the job: this worker's lease ran out");
        tell_worker("failed the worker's lease ran out");
        return Ok(EXIT_UNREPORTED);
    }
    // An order that came while the shim got ready (a newer attempt fenced this one before
    // its job ran) is carried out without starting the job.
    if let Some(exit) = order_before_start(spec, &orders, &outbox) {
        return exit;
    }
    let mut child = match spawn_confined(spec) {
        Ok(child) => child,
        Err(reason) => {
            warn!(%reason, "job could not start");
            if let Some(cg) = &cgroup {
                cg.remove();
            }
            let end = Report::finished(spec.id, spec.attempt, JobEnd::Failed(reason.clone()));
            outbox.put(&end).map_err(std::io::Error::other)?;
            tell_worker(&format!("failed {reason}"));
            return Ok(0);
        }
    };
    let pid = child.id() as i32;
    let job = Confined {
        spec,
        pgid: pid,
        cgroup,
    };
    let record = AttemptRecord {
        job: ProcRecord::of(pid).unwrap_or(ProcRecord {
            pid,
            start_ticks: 0,
        }),
        shim: ProcRecord::of(std::process::id() as i32),
    };
    if let Err(e) = records.remember(spec.id, spec.attempt, &record, spec.spare.as_deref()) {
        // A restarted worker could not find it: it does not run.
        warn!(error = %e, "cannot record the job's process; killing it");
        job.kill_all();
        let _ = child.wait();
        if let Some(cg) = &job.cgroup {
            cg.remove();
        }
        tell_worker(&format!("failed cannot record the job's process: {e}"));
        return Ok(EXIT_UNREPORTED);
    }
    info!(pid, "job started");
    tell_worker(&format!("started {pid}"));
    let (status, stopping) = supervise(&job, &mut child, &orders)?;
    // The leader is gone; whatever it left behind goes with it: its group always, and what
    // left the group when there is a cgroup to find it or the job was being stopped anyway.
    if job.cgroup.is_some() || stopping.is_some() {
        job.kill_all();
    } else {
        procs::signal_group(pid, Signal::SIGKILL);
    }
    let out_of_memory = job.cgroup.as_ref().is_some_and(JobCgroup::oom_killed);
    if let Some(cg) = &job.cgroup {
        cg.remove();
    }
    let reporting = stopping.map_or(Reporting::End, |s| s.cause.reporting());
    if reporting == Reporting::Unreported {
        info!("job stopped; its end is not reported, so the primary requeues it");
        records.forget(spec.id, spec.attempt);
        return Ok(EXIT_UNREPORTED);
    }
    let end = match end_of(status) {
        JobEnd::Exit(code) if reporting == Reporting::TimedOut => JobEnd::TimedOut {
            exit_code: Some(code),
            signal: None,
        },
        JobEnd::Signal(sig) if reporting == Reporting::TimedOut => JobEnd::TimedOut {
            exit_code: None,
            signal: Some(sig),
        },
        // The kernel killed some process of the job for its memory limit, and the job did not
        // get over it.
        end if out_of_memory && end != JobEnd::Exit(0) => JobEnd::OutOfMemory,
        end => end,
    };
    info!(?end, "job ended");
    let report = Report::finished(spec.id, spec.attempt, end);
    let record = records.path(spec.id, spec.attempt);
    // The record becomes the end report; only when it cannot is the report written apart and
    // the record forgotten.
    if let Err(e) = outbox.put_into_record(&record, &report) {
        warn!(error = %e, "cannot turn the attempt's record into its end report; writing the report apart");
        outbox.put(&report).map_err(std::io::Error::other)?;
        records.forget(spec.id, spec.attempt);
    }
    Ok(0)
}

/// Waits until the shim of the older copy this attempt fences is gone: `None` when the job
/// may start, or the shim's exit when it must not (a kill order: the job's end is that it
/// never ran; a stop or a newer attempt: unreported; its worker gone meanwhile: unreported,
/// since a restarted worker could not know of this shim). Bounded by the kill grace and a
/// margin; past it the older copy is killed here, whatever became of its shim.
fn wait_for_fenced_copy(
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

/// How the end of an attempt killed before its job started reads, wherever it was stopped.
pub const KILLED_BEFORE_START: &str = "killed before it started";

/// The shim's exit if an order came before the job started, which then never starts: a
/// kill is reported (the job's end is that it never ran); a stop or a newer attempt is not.
fn order_before_start(
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
fn kill_older_copy(spec: &ShimSpec, older: FencedCopy) {
    if older.shim.alive() {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(older.shim.pid), Signal::SIGKILL);
    }
    if let Some(cgroups) = &spec.cgroups {
        cgroups.job(spec.id, older.attempt).kill();
    }
    procs::kill_marked(&spec.spool, procs::Marked::Attempt(spec.id, older.attempt));
}

/// Starts the job, inside its cgroup where there is one: the shim enters the job's cgroup,
/// spawns the job (which inherits it) and goes back to the shims' cgroup.
fn spawn_confined(spec: &ShimSpec) -> Result<Child, String> {
    let Some(cgroups) = &spec.cgroups else {
        return spawn_job(spec);
    };
    let cg = cgroups.job(spec.id, spec.attempt);
    cg.create(spec.limits)
        .map_err(|e| format!("cannot create the job's cgroup: {e}"))?;
    let me = std::process::id() as i32;
    cg.enter(me)
        .map_err(|e| format!("cannot enter the job's cgroup: {e}"))?;
    let spawned = spawn_job(spec);
    let homes = cgroups.shims();
    if let Err(e) = cgroup::enter_all(homes.iter().map(PathBuf::as_path), me) {
        // A shim inside its job's cgroup would die with the job, or freeze with it.
        if let Ok(mut child) = spawned {
            procs::signal_group(child.id() as i32, Signal::SIGKILL);
            let _ = child.wait();
        }
        return Err(format!("cannot leave the job's cgroup: {e}"));
    }
    spawned
}

/// Waits for the job's leader to exit, carrying out orders and the lease meanwhile.
fn supervise(
    job: &Confined<'_>,
    child: &mut Child,
    orders: &Orders,
) -> std::io::Result<(ExitStatus, Option<Stopping>)> {
    let spec = job.spec;
    let kill_grace = Duration::from_millis(spec.kill_grace_ms);
    let lease = LeaseFile::new(&spec.spool);
    let mut fence_at = spec.fence_at_ms.map(Duration::from_millis);
    let mut stopping: Option<Stopping> = None;
    let mut clock = spec
        .time_limit_s
        .map(|s| RunClock::new(Duration::from_secs(s.into())));
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
        if let Some(clock) = clock.as_mut() {
            clock.tick(now, job.suspended());
            if stopping.is_none() && clock.reached() {
                info!(limit = ?clock.limit, grace = ?kill_grace, "the job reached its time limit; terminating it");
                begin_stop(job, StopCause::TimeLimit, kill_grace, &mut stopping);
            }
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
fn begin_stop(
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
struct RunClock {
    limit: Duration,
    ran: Duration,
    last: Option<Duration>,
}

impl RunClock {
    fn new(limit: Duration) -> RunClock {
        RunClock {
            limit,
            ran: Duration::ZERO,
            last: None,
        }
    }

    /// Counts the span since the last look, unless the job is found suspended now.
    fn tick(&mut self, now: Duration, suspended: bool) {
        if let Some(last) = self.last {
            if !suspended {
                self.ran += now.saturating_sub(last);
            }
        }
        self.last = Some(now);
    }

    fn reached(&self) -> bool {
        self.ran >= self.limit
    }
}

/// Whether the spool dir no longer exists (not merely unreadable for a moment).
fn spool_gone(spool: &Path) -> bool {
    std::fs::symlink_metadata(spool).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
}

/// How the job's leader ended, as the cluster is told.
fn end_of(status: ExitStatus) -> JobEnd {
    match (status.code(), status.signal()) {
        (Some(code), _) => JobEnd::Exit(code),
        (None, Some(sig)) => JobEnd::Signal(sig),
        (None, None) => JobEnd::Failed("ended without exit code or signal".into()),
    }
}

/// The one line the worker reads; it may be gone, which changes nothing here. A forked shim
/// writes it whole in one call (its launcher's other shims share the pipe), then lets go of
/// the pipe, so that it ends once the launcher and the shims still starting are gone.
fn tell_worker(line: &str) {
    let prefix = ANNOUNCE_AS.get().map_or("", String::as_str);
    let mut out = std::io::stdout().lock();
    let _ = out
        .write_all(format!("{prefix}{}\n", one_line(line, LINE_MAX)).as_bytes())
        .and_then(|()| out.flush());
    if ANNOUNCE_AS.get().is_some() {
        if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
            let _ = nix::unistd::dup2_stdout(&null);
        }
    }
}

/// The most a shim's line carries (bytes), well under `PIPE_BUF` (4096) with its tag: a
/// line written in one call is never interleaved with another shim's.
const LINE_MAX: usize = 3072;

/// `text` as one line of at most `max` bytes: control characters (a newline in a command or
/// a directory a user named, say) escaped, so that no text of a user's can make a line of
/// its own on the pipe a launcher's shims share and speak for another shim.
pub fn one_line(text: &str, max: usize) -> String {
    let mut line = String::with_capacity(text.len().min(max));
    for c in text.chars() {
        let piece: String = if c.is_control() {
            c.escape_default().collect()
        } else {
            c.to_string()
        };
        if line.len() + piece.len() > max {
            break;
        }
        line.push_str(&piece);
    }
    line
}

/// Starts the job in its own process group, with its command, environment and working
/// directory, output to the spool.
fn spawn_job(spec: &ShimSpec) -> Result<Child, String> {
    let Some((program, args)) = spec.command.split_first() else {
        return Err("empty command".into());
    };
    if let Some(why) = &spec.refused {
        return Err(format!("this worker does not run the job: {why}"));
    }
    let account = spec.run_as.as_ref().map(RunAs::resolve).transpose()?;
    let (out, err) = output_paths(&spec.spool, spec.id, spec.attempt);
    let open = |p: &Path| {
        use std::os::unix::fs::OpenOptionsExt;
        // Readable by the job's user alone, and never through a link planted in the spool.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(if account.is_some() { 0o600 } else { 0o644 })
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(p)
            .map_err(|e| format!("cannot create {}: {e}", p.display()))?;
        // The job's output is its user's.
        if let Some(a) = &account {
            nix::unistd::fchown(&file, Some(a.uid), Some(a.gid))
                .map_err(|e| format!("cannot give {} to {}: {e}", p.display(), a.name))?;
        }
        Ok::<_, String>(file)
    };
    let mut command = Command::new(program);
    match &account {
        // As root the directory is checked here; as a user it is entered after the switch
        // (in `become_account`), so a job can never run where its user may not go.
        None => {
            if !spec.cwd.is_dir() {
                return Err(format!(
                    "working directory {} does not exist",
                    spec.cwd.display()
                ));
            }
            command
                .current_dir(&spec.cwd)
                // Its own process group: kill and suspend reach the whole job.
                .process_group(0);
        }
        Some(a) => {
            // A login's environment, not the worker's; the job's own variables, set below,
            // win.
            command
                .env_clear()
                .env("PATH", "/usr/local/bin:/usr/bin:/bin")
                .env("USER", &a.name)
                .env("LOGNAME", &a.name)
                .env("HOME", &a.home)
                .env("SHELL", &a.shell);
            let cwd = if spec.cwd.as_os_str().is_empty() {
                a.home.clone()
            } else {
                spec.cwd.clone()
            };
            become_account(&mut command, a, &cwd)?;
        }
    }
    die_with_this_shim(&mut command);
    let who = account
        .as_ref()
        .map(|a| format!(" as {}", a.name))
        .unwrap_or_default();
    command
        .args(args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        // Who the job is, for the job itself, and a mark that lets a restarted worker find
        // every process its previous run started, even one that left the process group.
        .env(procs::ENV_JOB_ID, spec.id.to_string())
        .env(procs::ENV_ATTEMPT, spec.attempt.to_string())
        .env(procs::ENV_SPOOL_MARK, &spec.spool)
        .stdin(Stdio::null())
        .stdout(open(&out)?)
        .stderr(open(&err)?)
        .spawn()
        .map_err(|e| match e.kind() {
            // As a user, the switch and the directory can fail too: say all of it.
            _ if !who.is_empty() => format!("cannot start {program}{who}: {e}"),
            std::io::ErrorKind::NotFound => format!("command not found: {program}"),
            std::io::ErrorKind::PermissionDenied => format!("permission denied: {program}"),
            _ => format!("cannot start {program}: {e}"),
        })
}

/// Ties the job's life to this shim's: a shim killed (with its worker, say: then nothing
/// would fence the job, report it or adopt it) takes the job's leader with it, by the
/// kernel's parent-death signal. Set after the switch to the job's user (`become_account`
/// runs first), since a change of credentials clears it; a shim gone before it was set is
/// caught by the parent check.
#[allow(unsafe_code)]
fn die_with_this_shim(command: &mut Command) {
    let shim = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child before exec and makes only two system
    // calls (prctl, getppid), both async-signal-safe, allocating nothing.
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            if nix::unistd::getppid() != shim {
                return Err(std::io::Error::other("its shim is gone"));
            }
            Ok(())
        });
    }
}

/// Makes the job's process `account` before it runs the job's program: a session of its
/// own (its own process group, so kill and suspend reach the whole job, and no terminal of
/// the worker's to reach), its supplementary groups, then its group, then its user (in that
/// order: each needs the privilege the next gives up), and only then its working directory.
/// std's `Command::uid` would drop every supplementary group, and setting them is not stable
/// std yet, so the calls are made here.
#[allow(unsafe_code)]
fn become_account(command: &mut Command, account: &Account, cwd: &Path) -> Result<(), String> {
    let (uid, gid, groups) = (account.uid, account.gid, account.groups.clone());
    let cwd = std::ffi::CString::new(cwd.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("working directory {}: holds a NUL", cwd.display()))?;
    // SAFETY: the closure runs in the forked child before exec. It makes only system calls
    // (setsid, setgroups, setgid, setuid, chdir), all async-signal-safe, on data prepared
    // before the fork, and allocates nothing (nix passes the slice and the C string straight
    // to libc).
    unsafe {
        command.pre_exec(move || {
            nix::unistd::setsid()?;
            nix::unistd::setgroups(&groups)?;
            nix::unistd::setgid(gid)?;
            nix::unistd::setuid(uid)?;
            nix::unistd::chdir(cwd.as_c_str())?;
            Ok(())
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_suspended_does_not_count_against_the_limit() {
        let s = Duration::from_secs;
        let mut clock = RunClock::new(s(10));
        clock.tick(s(100), false);
        clock.tick(s(104), false);
        // Suspended from 104 to 110: the job is seen suspended at each look.
        clock.tick(s(107), true);
        clock.tick(s(110), true);
        assert!(!clock.reached());
        clock.tick(s(115), false);
        assert_eq!(clock.ran, s(9));
        assert!(!clock.reached());
        clock.tick(s(116), false);
        assert!(clock.reached());
        // A stop caused by the limit is reported as a timeout, with the kill grace.
        assert_eq!(StopCause::TimeLimit.reporting(), Reporting::TimedOut);
        assert_eq!(StopCause::TimeLimit.grace(s(3)), s(3));
        assert_eq!(StopCause::Stale.grace(s(3)), Duration::ZERO);
        assert_eq!(StopCause::LeaseLost.reporting(), Reporting::Unreported);
    }

    #[test]
    fn a_line_for_the_worker_is_one_line_and_bounded() {
        assert_eq!(one_line("started 12", 64), "started 12");
        let forged = "failed command not found: x\n1 exit 1\r\n2 said started 1";
        let line = one_line(forged, LINE_MAX);
        assert!(!line.contains('\n') && !line.contains('\r'), "{line}");
        assert_eq!(
            line,
            "failed command not found: x\\n1 exit 1\\r\\n2 said started 1"
        );
        let long = "é".repeat(5000);
        let cut = one_line(&long, LINE_MAX);
        assert!(cut.len() <= LINE_MAX && cut.chars().all(|c| c == 'é'));
        assert!(cut.len() > LINE_MAX - 2);
    }
}
