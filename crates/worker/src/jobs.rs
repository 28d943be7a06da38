//! The attempts this worker holds: starting each under its own shim ([`crate::shim`]),
//! passing the primary's orders on, adopting the shims a previous run of the worker left, and
//! reporting starts (sent again for every adopted attempt) and ends (through the durable
//! outbox). Supervision never waits on the controller: a shim is waited for while its reports
//! are still being delivered.

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

use crate::cgroup::{Cgroups, JobCgroup, Limits};
use crate::ended::Ended;
use crate::fence::Lease;
use crate::join_window::{still_due, JoinWindow, Parked};
use crate::launcher::{Launched, Launcher, ShimEvent};
use crate::outbox::{Outbox, Report, Spares};
use crate::procs::{self, ProcRecord, Records};
use crate::shim::{FencedCopy, RunAs, ShimSpec, KILLED_BEFORE_START};

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
    /// The log settings the shims take on (the shim's default without).
    pub log: Option<xce_daemon::logging::LogSettings>,
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
            settings,
            lease,
            stop,
            held: Mutex::new(HashMap::new()),
            window: Mutex::new(JoinWindow::default()),
            ended: Mutex::new(Ended::default()),
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

    /// Picks up where a previous run of this worker stopped, before it joins: attempts whose
    /// shim still runs are adopted (the resync tells the primary they are still here), what
    /// no live shim vouches for is killed (the resync requeues it), and reports not delivered
    /// are sent again.
    pub fn recover(self: &Arc<Self>) -> anyhow::Result<()> {
        let mut adopted = Vec::new();
        let mut killed = 0;
        let swept = self.records.sweep_unfinished();
        if swept > 0 {
            info!(
                records = swept,
                "removed records the previous run's shims never finished"
            );
        }
        for ((id, attempt), record) in self.records.scan()? {
            let live = record.and_then(|r| Some((r.shim.filter(ProcRecord::alive)?, r.job)));
            let Some((shim, job)) = live else {
                // An end its shim appended but did not move: the outbox has it now.
                self.outbox
                    .take_from_record(&self.records.path(id, attempt));
                self.records.kill_leftover(id, attempt, record.as_ref());
                killed += 1;
                continue;
            };
            let phase = if procs::is_stopped(job.pid) {
                HeldPhase::Suspended
            } else {
                HeldPhase::Running
            };
            info!(
                job = id,
                attempt,
                shim = shim.pid,
                ?phase,
                "adopted an attempt the previous run of this worker started"
            );
            self.table().insert(
                id,
                Held {
                    shim: Some(shim),
                    pgid: Some(job.pid),
                    ..Held::new(attempt, phase)
                },
            );
            adopted.push((id, attempt));
        }
        if let Some(cgroups) = &self.settings.cgroups {
            // Cgroups of attempts nothing vouches for: emptied and removed.
            for (id, attempt) in cgroups.attempts() {
                if !adopted.contains(&(id, attempt)) {
                    cgroups.job(id, attempt).remove();
                }
            }
        }
        let escaped = procs::kill_marked(&self.spool, procs::Marked::AllJobsBut(adopted.clone()));
        if escaped > 0 {
            warn!(
                processes = escaped,
                "killed processes of the previous run's jobs that no live shim vouches for"
            );
        }
        let resent = self.resend_reports(&adopted)?;
        for &(id, attempt) in &adopted {
            let (jobs, span) = (self.clone(), tracing::info_span!("job", id, attempt));
            // Whether its start was acknowledged is not known: it is sent again.
            let start = resent
                .get(&(id, attempt))
                .cloned()
                .unwrap_or_else(|| Report::started(id, attempt));
            tokio::spawn(
                async move { jobs.watch_adopted(id, attempt, start).await }.instrument(span),
            );
        }
        info!(
            adopted = adopted.len(),
            killed,
            resent = resent.len(),
            "recovered the previous run's attempts"
        );
        Ok(())
    }

    /// Sends again what the previous run left in the outbox: the ends of attempts that are
    /// over, and (from older workers) the starts of adopted ones, returned so their ends can
    /// follow them.
    fn resend_reports(
        self: &Arc<Self>,
        adopted: &[(JobId, u32)],
    ) -> anyhow::Result<HashMap<(JobId, u32), Report>> {
        let live: HashSet<(JobId, u32)> = adopted.iter().copied().collect();
        let (reports, bad) = self.outbox.load(&live)?;
        for b in bad {
            warn!(file = %b, "unreadable report left in the outbox");
        }
        // Starts live in memory now: an older worker's start files are read once and go.
        for r in reports.iter().filter(|r| r.end.is_none()) {
            let _ = self.outbox.remove(r);
        }
        let mut by_attempt: HashMap<(JobId, u32), Vec<Report>> = HashMap::new();
        for r in reports {
            by_attempt.entry((r.id, r.attempt)).or_default().push(r);
        }
        let mut starts = HashMap::new();
        for (key, reports) in by_attempt {
            let (id, attempt) = key;
            if live.contains(&key) {
                // Its end, if the shim just wrote it, is the adopted attempt's watcher's.
                if let Some(start) = reports.into_iter().find(|r| r.end.is_none()) {
                    starts.insert(key, start);
                }
                continue;
            }
            if reports.iter().all(|r| r.end.is_none()) {
                // Started but its end was never recorded: the attempt is gone; the resync
                // tells the primary.
                continue;
            }
            self.table()
                .insert(id, Held::new(attempt, HeldPhase::Finished));
            let jobs = self.clone();
            tokio::spawn(async move {
                for r in reports {
                    jobs.deliver(r).await;
                }
                jobs.release(id, attempt);
            });
        }
        Ok(starts)
    }

    /// Starts `attempt` of `job`, as pushed through the agent capability of the last answered
    /// join. For tests: the worker's own pushes go through [`Jobs::start_from`] with the
    /// number they came through.
    pub fn start(self: &Arc<Self>, job: Job, attempt: u32) {
        self.start_from(job, attempt, u64::MAX);
    }

    /// Starts `attempt` of `job` under a shim of its own, unless this worker already holds
    /// it (a start sent again after a failover). A newer attempt fences an older copy still
    /// held here. While a join is unanswered the start waits ([`crate::join_window`]); so
    /// does, until the primary says it is still due here, a start that came through the
    /// agent capability (`generation`) of an older join than the last answered one (over a
    /// connection this worker has left: a deposed primary's late push), or for an attempt no
    /// newer than one this worker let go of ([`crate::ended`]).
    pub fn start_from(self: &Arc<Self>, job: Job, attempt: u32, generation: u64) {
        let id = job.id;
        let table = self.table();
        let mut fenced = None;
        if let Some(old) = table.get(&id).copied() {
            if old.attempt >= attempt {
                debug!(
                    job = id,
                    attempt, "start for an attempt already held; ignored"
                );
                return;
            }
            // A parked older attempt never ran: it is let go, and the copy it was to wait
            // for is this one's to wait for.
            fenced = self.window().forget(id);
            if let Some(shim) = old.shim.filter(|_| old.phase != HeldPhase::Finished) {
                warn!(
                    job = id,
                    attempt = old.attempt,
                    "a newer attempt arrived; killing the old copy"
                );
                signal_shim(shim, Signal::SIGUSR2);
                fenced = Some(FencedCopy {
                    attempt: old.attempt,
                    shim,
                });
            }
        }
        let doubt = if self.window().from_a_left_connection(generation) {
            Some(Doubt::LeftConnection)
        } else if table.contains_key(&id) {
            None
        } else {
            self.ended().covering(id, attempt).map(Doubt::Ended)
        };
        let start = Parked {
            job,
            attempt,
            fenced,
        };
        let parked = match doubt {
            None => self.window().park(start),
            Some(_) => {
                self.window().hold(start);
                None
            }
        };
        let Some(start) = parked else {
            let mut table = table;
            table.insert(id, Held::new(attempt, HeldPhase::Running));
            let Some(doubt) = doubt else {
                info!(
                    job = id,
                    attempt, "start waits for this worker's join to be answered"
                );
                return;
            };
            warn!(
                job = id,
                attempt,
                why = %doubt,
                "a late order? The start waits until the primary says it is still due"
            );
            // While a join is unanswered, its answer has the primary asked.
            if !self.window().is_open() {
                self.ask_about(id, attempt);
            }
            return;
        };
        self.launch(table, start);
    }

    /// Launches the attempt's shim, with the job table held throughout (nothing can start or
    /// fence the job meanwhile).
    fn launch(self: &Arc<Self>, mut table: MutexGuard<'_, HashMap<JobId, Held>>, start: Parked) {
        let Parked {
            job,
            attempt,
            fenced,
        } = start;
        let id = job.id;
        let span = tracing::info_span!("job", id, attempt);
        let spec = ShimSpec {
            after: fenced,
            ..self.shim_spec(&job, attempt)
        };
        match self.launcher.launch(&spec) {
            Err(e) => {
                warn!(job = id, attempt, error = %e, "cannot start the job's shim");
                self.return_spare(&spec);
                table.insert(id, Held::new(attempt, HeldPhase::Finished));
                drop(table);
                let (jobs, end) = (
                    self.clone(),
                    JobEnd::Failed(format!("cannot start the job's supervisor: {e}")),
                );
                tokio::spawn(async move { jobs.finish(id, attempt, end).await }.instrument(span));
            }
            Ok(launched) => {
                table.insert(
                    id,
                    Held {
                        shim: Some(launched.shim),
                        ..Held::new(attempt, HeldPhase::Running)
                    },
                );
                drop(table);
                let jobs = self.clone();
                tokio::spawn(async move { jobs.supervise(launched, spec).await }.instrument(span));
            }
        }
    }

    /// Puts the spare a shim was given back in the pool if it is still there: the launch
    /// failed, or the shim ended before it wrote its record (it started nothing). A shim
    /// that wrote its record renamed the spare away.
    fn return_spare(&self, spec: &ShimSpec) {
        if let Some(spare) = spec.spare.as_deref().filter(|s| s.exists()) {
            let _ = self.spares.keep(spare);
        }
    }

    fn shim_spec(&self, job: &Job, attempt: u32) -> ShimSpec {
        let run_as = match self.settings.job_users {
            xce_client::types::JobUsers::EachUser { root } => Some(RunAs {
                user: job.spec.user.clone(),
                allow_root: root,
            }),
            xce_client::types::JobUsers::Any | xce_client::types::JobUsers::Only(_) => None,
        };
        // A job that names no directory runs in the spool, or, as its user, in their home
        // (empty here: the shim looks it up).
        let cwd = match (job.spec.cwd.is_empty(), &run_as) {
            (false, _) => PathBuf::from(&job.spec.cwd),
            (true, None) => self.spool.clone(),
            (true, Some(_)) => PathBuf::new(),
        };
        ShimSpec {
            id: job.id,
            attempt,
            command: job.spec.command.clone(),
            env: job.spec.env.clone(),
            cwd,
            spool: self.spool.clone(),
            kill_grace_ms: self.settings.kill_grace.as_millis() as u64,
            fence_at_ms: self.lease.deadline().map(|d| d.as_millis() as u64),
            cgroups: self.settings.cgroups.clone(),
            run_as,
            refused: xce_client::fit::may_run(&self.settings.job_users, &job.spec.user).err(),
            limits: Limits {
                cpus: job.spec.resources.cpus,
                mem_mb: job.spec.resources.mem_mb,
            },
            time_limit_s: job.spec.limits.time_limit_s,
            after: None,
            worker: self.me,
            spare: self.spares.take(),
        }
    }

    /// The cgroup of an attempt, where the host has cgroups.
    fn cgroup(&self, id: JobId, attempt: u32) -> Option<JobCgroup> {
        Some(self.settings.cgroups.as_ref()?.job(id, attempt))
    }

    /// Stops a job whole: its group (SIGSTOP, so the job can see it) and its cgroup (frozen,
    /// so nothing that left the group runs on).
    fn suspend(&self, id: JobId, attempt: u32, pgid: i32) {
        procs::signal_group(pgid, Signal::SIGSTOP);
        if let Some(cg) = self.cgroup(id, attempt) {
            cg.freeze();
        }
    }

    /// Reports the start a fresh shim announces, and the end it records once it exits.
    async fn supervise(self: Arc<Self>, launched: Launched, spec: ShimSpec) {
        let (id, attempt) = (spec.id, spec.attempt);
        let Launched { shim, mut events } = launched;
        let mut ended = None;
        let announced = match events.recv().await {
            Some(ShimEvent::Said(line)) => Some(line),
            Some(ShimEvent::Ended { clean, how }) => {
                ended = Some((clean, how));
                None
            }
            None => None,
        };
        let mut start_delivery = None;
        match announced
            .as_deref()
            .and_then(|l| l.strip_prefix("started "))
        {
            Some(pid) => match pid.trim().parse::<i32>() {
                Ok(pgid) => {
                    info!(job = id, attempt, pid = pgid, "job started");
                    self.started(id, attempt, pgid);
                    let start = Report::started(id, attempt);
                    let reporter = self.clone();
                    start_delivery =
                        Some(tokio::spawn(async move { reporter.deliver(start).await }));
                }
                Err(_) => {
                    warn!(job = id, attempt, line = ?announced, "the job's shim said something unexpected")
                }
            },
            None => debug!(job = id, attempt, line = ?announced, "the job's shim started nothing"),
        }
        let ended = match ended {
            Some(ended) => Some(ended),
            None => loop {
                match events.recv().await {
                    Some(ShimEvent::Ended { clean, how }) => break Some((clean, how)),
                    Some(ShimEvent::Said(_)) => {}
                    None => break None,
                }
            },
        };
        let clean = match ended {
            Some((true, _)) => true,
            Some((false, how)) => {
                warn!(job = id, attempt, status = how, "the job's shim failed");
                false
            }
            None => {
                // Its launcher died first: the shim is nobody's child here, so it is watched
                // like an adopted one, and what it may have left is swept.
                warn!(
                    job = id,
                    attempt, "lost the shim's launcher; watching the shim by its pid"
                );
                // As recorded at its start: by now its pid may be another process's.
                while shim.alive() {
                    tokio::time::sleep(ADOPTED_POLL).await;
                }
                false
            }
        };
        self.return_spare(&spec);
        self.shim_ended(id, attempt, clean, start_delivery).await;
    }

    /// Notes the job's process group, and carries out a suspend that came before it.
    fn started(&self, id: JobId, attempt: u32, pgid: i32) {
        let mut table = self.table();
        if let Some(held) = table.get_mut(&id).filter(|h| h.attempt == attempt) {
            held.pgid = Some(pgid);
            if held.phase == HeldPhase::Suspended {
                self.suspend(id, attempt, pgid);
            }
        }
    }

    /// Waits for a shim that is not this process's child, then settles its attempt as for
    /// one of its own; `start` is its start report, sent first.
    async fn watch_adopted(self: Arc<Self>, id: JobId, attempt: u32, start: Report) {
        let reporter = self.clone();
        let start_delivery = Some(tokio::spawn(async move { reporter.deliver(start).await }));
        // Also while the worker stops: stop_all waits for what this sees.
        loop {
            let shim = self
                .table()
                .get(&id)
                .filter(|h| h.attempt == attempt)
                .and_then(|h| h.shim);
            if !shim.is_some_and(|s| s.alive()) {
                break;
            }
            tokio::time::sleep(ADOPTED_POLL).await;
        }
        // Not our child: how it exited is unknown, so what it may have left is swept.
        self.shim_ended(id, attempt, false, start_delivery).await;
    }

    /// Settles an attempt whose shim is gone: reports the end it recorded, or, if it
    /// recorded none, makes sure nothing of the job is left and lets the primary requeue it.
    async fn shim_ended(
        self: &Arc<Self>,
        id: JobId,
        attempt: u32,
        clean: bool,
        start_delivery: Option<tokio::task::JoinHandle<()>>,
    ) {
        let (pgid, stopping) = self.mark_finished(id, attempt);
        // A shim that died between recording its end and moving it left it in its record.
        let end = self.outbox.end_of(id, attempt).or_else(|| {
            self.outbox
                .take_from_record(&self.records.path(id, attempt))
        });
        match end {
            Some(end) => {
                info!(job = id, attempt, end = ?end.end, "job ended");
                self.records.forget(id, attempt);
                if let Some(start) = start_delivery {
                    let _ = start.await;
                }
                self.deliver(end).await;
            }
            None => {
                if !clean {
                    let (jobs, spool) = (self.clone(), self.spool.clone());
                    let _ = tokio::task::spawn_blocking(move || {
                        if let Some(pgid) = pgid {
                            procs::signal_group(pgid, Signal::SIGKILL);
                        }
                        if let Some(cg) = jobs.cgroup(id, attempt) {
                            cg.remove();
                        }
                        procs::kill_marked(&spool, procs::Marked::Attempt(id, attempt));
                        jobs.records.forget(id, attempt);
                    })
                    .await;
                }
                if stopping {
                    debug!(job = id, attempt, "attempt stopped with the worker");
                } else {
                    info!(
                        job = id,
                        attempt, "attempt stopped unreported; the primary requeues it"
                    );
                    self.client.request_rejoin();
                }
            }
        }
        self.release(id, attempt);
    }

    /// Records an end the worker itself decided (the shim never ran) and reports it.
    async fn finish(self: &Arc<Self>, id: JobId, attempt: u32, end: JobEnd) {
        let report = Report::finished(id, attempt, end);
        // The fsync runs off the runtime thread: heartbeats and agent calls never wait on it.
        let (outbox, copy) = (self.outbox.clone(), report.clone());
        let put = tokio::task::spawn_blocking(move || outbox.put(&copy).map_err(|e| e.to_string()))
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
        if let Err(e) = put {
            warn!(job = id, error = %e, "end report not durable; sending it anyway");
        }
        self.deliver(report).await;
        self.release(id, attempt);
    }

    /// Marks the attempt ended; returns its process group and whether the worker's stop
    /// ended it.
    fn mark_finished(&self, id: JobId, attempt: u32) -> (Option<i32>, bool) {
        let mut table = self.table();
        match table.get_mut(&id).filter(|h| h.attempt == attempt) {
            Some(held) => {
                held.phase = HeldPhase::Finished;
                held.shim = None;
                (held.pgid.take(), held.stopping)
            }
            None => (None, false),
        }
    }

    /// Forgets the attempt once it is settled: its end delivered (or refused as stale), or it
    /// ended unreported for the resync to settle, or the worker stops.
    fn release(&self, id: JobId, attempt: u32) {
        self.let_go(&mut self.table(), id, attempt);
    }

    /// Drops the attempt from the table for good: a later start for it, or an older one, is
    /// taken for a late order and runs only if the primary says it is due ([`crate::ended`]).
    fn let_go(&self, table: &mut HashMap<JobId, Held>, id: JobId, attempt: u32) {
        drop_attempt(table, id, attempt);
        self.ended().remember(id, attempt);
    }

    /// Sends one report until the primary acknowledges or refuses it (or the worker stops:
    /// then it stays in the outbox). A refused start means the attempt is stale: it is killed.
    async fn deliver(self: &Arc<Self>, report: Report) {
        let mut stop = self.stop.clone();
        loop {
            let result = match &report.end {
                None => {
                    let op = JobStarted {
                        token: report.token,
                        host: self.host.clone(),
                        id: report.id,
                        attempt: report.attempt,
                    };
                    publish_until_done(&self.client, op, &mut stop).await
                }
                Some(end) => {
                    let op = JobFinished {
                        token: report.token,
                        host: self.host.clone(),
                        id: report.id,
                        attempt: report.attempt,
                        end: end.clone(),
                    };
                    publish_until_done(&self.client, op, &mut stop).await
                }
            };
            let (id, attempt) = (report.id, report.attempt);
            match result {
                // A report sent again after a restart carries its original token: `dupJob`
                // says the primary applied it before.
                Ok(())
                | Err(ClientError::Status {
                    status: Status::DupJob,
                    ..
                }) => break,
                Err(ClientError::Shutdown) => return,
                Err(ClientError::Status { status, message })
                    if matches!(status, Status::Conflict | Status::NoEnt | Status::Invalid) =>
                {
                    warn!(job = id, attempt, %status, %message, "report refused by the primary");
                    if report.end.is_none() {
                        self.signal(JobOrder {
                            id,
                            attempt,
                            signal: JobSignal::Kill,
                        });
                    }
                    break;
                }
                Err(e) => {
                    warn!(job = id, attempt, error = %e, "report not delivered; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_secs(1)) => {}
                        _ = stop.wait_for(|s| *s) => return,
                    }
                }
            }
        }
        // Only ends have a file: starts are sent from memory.
        if report.end.is_none() {
            return;
        }
        if let Err(e) = self.outbox.retire(&report, &self.spares) {
            warn!(job = report.id, error = %e, "cannot retire a delivered report; it will be sent again");
        }
    }

    /// Carries out an order for one attempt; false if this worker does not hold it.
    pub fn signal(self: &Arc<Self>, order: JobOrder) -> bool {
        let mut table = self.table();
        let Some(held) = table
            .get_mut(&order.id)
            .filter(|h| h.attempt == order.attempt)
        else {
            return false;
        };
        if held.phase == HeldPhase::Finished {
            // Already ended: its end report settles it.
            return true;
        }
        let (id, attempt) = (order.id, order.attempt);
        match order.signal {
            JobSignal::Suspend => {
                if let Some(pgid) = held.pgid {
                    self.suspend(id, attempt, pgid);
                }
                held.phase = HeldPhase::Suspended;
                info!(job = id, attempt, "job suspended");
            }
            JobSignal::Resume => {
                if let Some(cg) = self.cgroup(id, attempt) {
                    cg.thaw();
                }
                if let Some(pgid) = held.pgid {
                    procs::signal_group(pgid, Signal::SIGCONT);
                }
                held.phase = HeldPhase::Running;
                info!(job = id, attempt, "job resumed");
            }
            JobSignal::Kill if self.window().take(id, attempt).is_some() => {
                held.phase = HeldPhase::Finished;
                drop(table);
                info!(
                    job = id,
                    attempt, "job killed while its start waited for a join; it never ran"
                );
                let (jobs, span) = (self.clone(), tracing::info_span!("job", id, attempt));
                let end = JobEnd::Failed(KILLED_BEFORE_START.into());
                tokio::spawn(async move { jobs.finish(id, attempt, end).await }.instrument(span));
            }
            JobSignal::Kill => {
                if let Some(shim) = held.shim {
                    signal_shim(shim, Signal::SIGUSR1);
                }
                info!(job = id, attempt, grace = ?self.settings.kill_grace, "job terminated; its shim kills it after the grace period");
            }
        }
        true
    }

    /// Stops every running attempt when the worker stops (SIGTERM, then SIGKILL after the
    /// grace period, by their shims) and waits for them, bounded. Their ends are not
    /// reported: the primary requeues them when this worker rejoins or its host is lost.
    pub async fn stop_all(self: &Arc<Self>) {
        {
            // Starts that wait for a join never ran: they go, unreported.
            let mut table = self.table();
            for (id, attempt) in self.window().clear() {
                drop_attempt(&mut table, id, attempt);
            }
        }
        let shims: Vec<ProcRecord> = self
            .table()
            .values_mut()
            .filter(|h| h.phase != HeldPhase::Finished)
            .filter_map(|h| {
                h.stopping = true;
                h.shim
            })
            .collect();
        if shims.is_empty() {
            return;
        }
        info!(jobs = shims.len(), "stopping the jobs still running");
        for shim in &shims {
            signal_shim(*shim, Signal::SIGTERM);
        }
        // Their own grace, and time for the shims to see their jobs out.
        let deadline =
            tokio::time::Instant::now() + self.settings.kill_grace + Duration::from_secs(2);
        while tokio::time::Instant::now() < deadline
            && self
                .table()
                .values()
                .any(|h| h.phase != HeldPhase::Finished)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let left: Vec<ProcRecord> = shims.into_iter().filter(ProcRecord::alive).collect();
        if left.is_empty() {
            return;
        }
        warn!(
            shims = left.len(),
            "shims did not stop their jobs in time; killing them"
        );
        let spool = self.spool.clone();
        let _ = tokio::task::spawn_blocking(move || {
            for shim in left {
                signal_shim(shim, Signal::SIGKILL);
            }
            procs::kill_marked(&spool, procs::Marked::AllJobsBut(Vec::new()));
        })
        .await;
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
