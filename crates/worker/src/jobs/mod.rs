//! The attempts this worker holds: starting each under its own shim ([`crate::shim`]),
//! passing the primary's orders on, adopting the shims a previous run of the worker left, and
//! reporting starts (sent again for every adopted attempt) and ends (through the durable
//! outbox). Supervision never waits on the controller: a shim is waited for while its reports
//! are still being delivered.
//!
//! By concern: this file holds the table of held attempts and the join's view of it;
//! `launch` starts an attempt under its shim, `supervise` follows a shim and carries out the
//! primary's orders, `report` delivers starts and ends through the outbox, and `recover`
//! picks up what a previous run of the worker left.

mod launch;
mod recover;
mod report;
mod supervise;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::sync::watch;
use tracing::{debug, info, warn, Instrument};
use xce_client::ops::{GetJob, JobFinished, JobStarted};
use xce_client::publish::publish_until_done;
use xce_client::types::{HeldJob, HeldPhase, Job, JobEnd, JobId, JobOrder, JobSignal};
use xce_client::{Client, ClientError, Status};

use crate::admission::Admission;
use crate::cgroup::{Cgroups, JobCgroup, Limits};
use crate::ended::Ended;
use crate::fence::Lease;
use crate::join_window::{still_due, JoinWindow, Parked};
use crate::launcher::{Launched, Launcher, ShimEvent};
use crate::outbox::{Outbox, Report, Spares};
use crate::procs::{self, ProcRecord, Records};
use crate::shim::{FencedCopy, Output, RunAs, ShimSpec, KILLED_BEFORE_START};

/// How often an adopted shim (not this process's child, so it cannot be waited for) is
/// looked at.
const ADOPTED_POLL: Duration = Duration::from_millis(100);

/// One attempt this worker holds, from its start until its end report is acknowledged.
#[derive(Debug, Clone, Copy)]
struct Held {
    attempt: u32,
    phase: HeldPhase,
    /// The shim supervising the attempt, while it may still run.
    shim: Option<ProcRecord>,
    /// The job's process group, once its shim has said it started.
    pgid: Option<i32>,
    /// Stopped because the worker is stopping: its end is not the job's own and goes
    /// unreported, so the primary requeues it.
    stopping: bool,
}

impl Held {
    fn new(attempt: u32, phase: HeldPhase) -> Held {
        Held {
            attempt,
            phase,
            shim: None,
            pgid: None,
            stopping: false,
        }
    }
}

/// How the worker runs the attempts it is sent.
#[derive(Debug, Clone)]
pub struct JobSettings {
    /// How long a killed job has between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
    /// The program that runs as each attempt's shim: this worker's own executable.
    pub shim_exe: PathBuf,
    /// Where the host has cgroups, each job runs in one of its own.
    pub cgroups: Option<Cgroups>,
    /// Whose jobs run here and as whom: with `EachUser`, each job as its own user.
    pub job_users: xce_client::types::JobUsers,
    /// The home of the worker's own account: a job run as that account that names no
    /// working directory runs there, with it as its `HOME`.
    pub own_home: PathBuf,
    /// The log settings the shims take on (the shim's default without).
    pub log: Option<xce_daemon::logging::LogSettings>,
    /// What the host offers, as its join says: never more than this runs at once, whatever
    /// the primary sent ([`crate::admission`]).
    pub capacity: xce_client::types::Resources,
}

/// Everything the worker's attempts share.
pub struct Jobs {
    client: Client,
    host: String,
    spool: PathBuf,
    outbox: Outbox,
    /// Retired report files, each handed to a new shim for its record.
    spares: Spares,
    records: Records,
    settings: JobSettings,
    lease: Arc<Lease>,
    stop: watch::Receiver<bool>,
    held: Mutex<HashMap<JobId, Held>>,
    /// Starts that wait for a join's answer (locked after `held`, never before).
    window: Mutex<JoinWindow>,
    /// Attempts let go of, so that a late start for one is not run (locked after `held`,
    /// never before).
    ended: Mutex<Ended>,
    /// What runs and what waits for room (locked after `held`, never before).
    admission: Mutex<Admission<Parked>>,
    /// Forks each attempt's shim.
    launcher: Launcher,
    /// This worker process, as its shims tell whether it is still there.
    me: Option<ProcRecord>,
}

impl Jobs {
    /// The job table of a worker; `stop` turning true ends report delivery (what is not
    /// delivered stays in the outbox for the next run).
    pub fn new(
        client: Client,
        host: String,
        spool: PathBuf,
        settings: JobSettings,
        lease: Arc<Lease>,
        stop: watch::Receiver<bool>,
    ) -> anyhow::Result<Arc<Jobs>> {
        // Canonical: it is the mark in every job's environment (the same text run after run),
        // and the cwd of jobs without one.
        let spool = std::fs::canonicalize(&spool)?;
        let launcher = Launcher::new(settings.shim_exe.clone(), settings.log.clone());
        launcher.warm_up();
        Ok(Arc::new(Jobs {
            client,
            host,
            outbox: Outbox::open(&spool)?,
            spares: Spares::open(&spool)?,
            records: Records::open(&spool)?,
            spool,
            launcher,
            me: ProcRecord::of(std::process::id() as i32),
            lease,
            stop,
            held: Mutex::new(HashMap::new()),
            window: Mutex::new(JoinWindow::default()),
            ended: Mutex::new(Ended::default()),
            admission: Mutex::new(Admission::new(settings.capacity.clone())),
            settings,
        }))
    }

    /// The spool dir, canonical.
    pub fn spool(&self) -> &Path {
        &self.spool
    }

    fn table(&self) -> MutexGuard<'_, HashMap<JobId, Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn window(&self) -> MutexGuard<'_, JoinWindow> {
        self.window.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn ended(&self) -> MutexGuard<'_, Ended> {
        self.ended.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn admission(&self) -> MutexGuard<'_, Admission<Parked>> {
        self.admission.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What this worker holds (parked starts included).
    pub fn held(&self) -> Vec<HeldJob> {
        held_list(&self.table())
    }

    /// What this worker holds, for a join's resync; starts that arrive from now until
    /// [`Jobs::join_answered`] wait for it ([`crate::join_window`]).
    pub fn join_begins(&self) -> Vec<HeldJob> {
        let table = self.table();
        self.window().open();
        held_list(&table)
    }

    /// A join was answered (its orders carried out); it passed agent capability number
    /// `generation` (`Joined::agent_generation`; 0 for none): each parked start is checked
    /// against the primary, then run or let go.
    pub fn join_answered(self: &Arc<Self>, generation: u64) {
        let due = {
            let _table = self.table();
            self.window().close(generation)
        };
        for (id, attempt) in due {
            self.ask_about(id, attempt);
        }
    }

    /// Has the primary asked, in a task of its own, whether a parked attempt is still due.
    fn ask_about(self: &Arc<Self>, id: JobId, attempt: u32) {
        let jobs = self.clone();
        tokio::spawn(
            async move { jobs.check_parked(id, attempt).await }
                .instrument(tracing::info_span!("job", id, attempt)),
        );
    }

    /// Asks the primary whether a parked attempt is still due here; a failed read leaves it
    /// parked for the next join (which this asks for) to settle.
    async fn check_parked(self: Arc<Self>, id: JobId, attempt: u32) {
        match self.client.call(GetJob { id }).await {
            Ok(job) => self.settle_parked(id, attempt, Some(&job)),
            Err(ClientError::Status {
                status: Status::NoEnt,
                ..
            }) => self.settle_parked(id, attempt, None),
            Err(e) => {
                warn!(job = id, attempt, error = %e, "cannot ask the primary about a start that waits; joining again");
                self.client.request_rejoin();
            }
        }
    }

    /// Runs a parked attempt if `current` (the primary's view, read after the join was
    /// answered or the start arrived) still wants it here; otherwise lets it go without
    /// running it.
    pub fn settle_parked(self: &Arc<Self>, id: JobId, attempt: u32, current: Option<&Job>) {
        let mut table = self.table();
        let Some(start) = self.window().take(id, attempt) else {
            return;
        };
        // A worker that stops runs nothing new: the primary sends it again after a rejoin.
        let stopping = *self.stop.borrow();
        if !stopping && current.is_some_and(|c| still_due(c, attempt, &self.host)) {
            info!(
                job = id,
                attempt, "the start that waited is still due; starting it"
            );
            self.launch(table, start);
            return;
        }
        info!(
            job = id,
            attempt,
            now = current.map(|c| c.attempt),
            "the start that waited is not due (superseded by the resync, or a late order); not run"
        );
        self.let_go(&mut table, id, attempt);
    }

    /// Whether the attempt's start waits for the primary's word (parked, not run yet).
    pub fn waits(&self, id: JobId, attempt: u32) -> bool {
        let _table = self.table();
        self.window().holds(id, attempt)
    }

    /// The process group of an attempt this worker holds, once it started.
    pub fn pgid(&self, id: JobId) -> Option<i32> {
        self.table().get(&id).and_then(|h| h.pgid)
    }
}

/// Signals a shim, if it is still the process that was recorded.
fn signal_shim(shim: ProcRecord, signal: Signal) {
    if shim.alive() {
        let _ = nix::sys::signal::kill(Pid::from_raw(shim.pid), signal);
    }
}

/// Why a start may be a late order, and so waits for the primary's word.
#[derive(Debug, Clone, Copy)]
enum Doubt {
    /// It came through the agent capability of a join older than the last answered one.
    LeftConnection,
    /// This attempt, or a newer one (the attempt given), ended here already.
    Ended(u32),
}

impl std::fmt::Display for Doubt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Doubt::LeftConnection => f.write_str("it came over a connection this worker has left"),
            Doubt::Ended(last) => write!(f, "attempt {last} of the job already ended here"),
        }
    }
}

/// Takes `attempt` of job `id` out of the table, unless a newer one has replaced it.
fn drop_attempt(table: &mut HashMap<JobId, Held>, id: JobId, attempt: u32) {
    if table.get(&id).is_some_and(|h| h.attempt == attempt) {
        table.remove(&id);
    }
}

/// The attempts of a job table, by job id.
fn held_list(table: &HashMap<JobId, Held>) -> Vec<HeldJob> {
    let mut held: Vec<HeldJob> = table
        .iter()
        .map(|(id, h)| HeldJob {
            id: *id,
            attempt: h.attempt,
            phase: h.phase,
        })
        .collect();
    held.sort_by_key(|h| h.id);
    held
}
