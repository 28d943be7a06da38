//! The attempts this worker holds: starting them (each in its own process group, with its
//! command, environment and working directory, output in `<spool>/<job id>.<attempt>.out|err`),
//! signalling them for the primary, and reporting their start and end through the durable
//! outbox. Supervision never waits on the controller: a process is waited for while its
//! reports are still being delivered.

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::sync::watch;
use tracing::{debug, info, warn, Instrument};
use xce_client::ops::{JobFinished, JobStarted};
use xce_client::publish::publish_until_done;
use xce_client::types::{HeldJob, HeldPhase, Job, JobEnd, JobId, JobOrder, JobSignal};
use xce_client::{Client, ClientError, Status};

use crate::outbox::{Outbox, Report};
use crate::procs::{self, Records};

/// One attempt this worker holds, from its start until its end report is acknowledged.
#[derive(Debug, Clone, Copy)]
struct Held {
    attempt: u32,
    /// The process group; `None` once the attempt's leader has been reaped (or never ran).
    pgid: Option<i32>,
    phase: HeldPhase,
    /// Killed because the worker is stopping: its end is not the job's own and goes
    /// unreported, so the primary requeues it.
    stopping: bool,
}

impl Held {
    fn new(attempt: u32, pgid: Option<i32>, phase: HeldPhase) -> Held {
        Held {
            attempt,
            pgid,
            phase,
            stopping: false,
        }
    }
}

/// Everything the worker's attempts share.
pub struct Jobs {
    client: Client,
    host: String,
    spool: PathBuf,
    outbox: Outbox,
    records: Records,
    kill_grace: Duration,
    stop: watch::Receiver<bool>,
    held: Mutex<HashMap<JobId, Held>>,
}

/// Where an attempt's output goes.
pub fn output_paths(spool: &Path, id: u64, attempt: u32) -> (PathBuf, PathBuf) {
    (
        spool.join(format!("{id}.{attempt}.out")),
        spool.join(format!("{id}.{attempt}.err")),
    )
}

impl Jobs {
    /// The job table of a worker; `stop` turning true ends report delivery (what is not
    /// delivered stays in the outbox for the next run).
    pub fn new(
        client: Client,
        host: String,
        spool: PathBuf,
        kill_grace: Duration,
        stop: watch::Receiver<bool>,
    ) -> anyhow::Result<Arc<Jobs>> {
        // Canonical: it is the mark in every job's environment (the same text run after run),
        // and the cwd of jobs without one.
        let spool = std::fs::canonicalize(&spool)?;
        Ok(Arc::new(Jobs {
            client,
            host,
            outbox: Outbox::open(&spool)?,
            records: Records::open(&spool)?,
            spool,
            kill_grace,
            stop,
            held: Mutex::new(HashMap::new()),
        }))
    }

    /// The spool dir, canonical.
    pub fn spool(&self) -> &Path {
        &self.spool
    }

    fn table(&self) -> MutexGuard<'_, HashMap<JobId, Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What this worker holds, for the resync at every join.
    pub fn held(&self) -> Vec<HeldJob> {
        let mut held: Vec<HeldJob> = self
            .table()
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

    /// Picks up where a previous run of this worker stopped, before it joins: attempts it
    /// left running are killed (the primary's resync requeues them), and end reports it did
    /// not deliver are held and sent again.
    pub fn recover(self: &Arc<Self>) -> anyhow::Result<()> {
        let leftovers = self.records.kill_leftovers()?;
        let escaped = procs::kill_marked(&self.spool, procs::Marked::AllJobs);
        if escaped > 0 {
            warn!(
                processes = escaped,
                "killed processes of the previous run's jobs that no record named"
            );
        }
        let (reports, bad) = self.outbox.load()?;
        for b in bad {
            warn!(file = %b, "unreadable report left in the outbox");
        }
        let mut by_attempt: HashMap<(JobId, u32), Vec<Report>> = HashMap::new();
        for r in reports {
            by_attempt.entry((r.id, r.attempt)).or_default().push(r);
        }
        let mut resent = 0;
        for ((id, attempt), reports) in by_attempt {
            if reports.iter().all(|r| r.end.is_none()) {
                // Started but its end was never recorded: the attempt is gone; the resync
                // tells the primary.
                for r in &reports {
                    let _ = self.outbox.remove(r);
                }
                continue;
            }
            self.table()
                .insert(id, Held::new(attempt, None, HeldPhase::Finished));
            resent += 1;
            let jobs = self.clone();
            tokio::spawn(async move {
                for r in reports {
                    jobs.deliver(r).await;
                }
                jobs.release(id, attempt);
            });
        }
        info!(
            killed = leftovers.len(),
            resent, "recovered the previous run's attempts"
        );
        Ok(())
    }

    /// Starts `attempt` of `job`, unless this worker already holds it (a start sent again
    /// after a failover). A newer attempt fences an older copy still held here.
    pub fn start(self: &Arc<Self>, job: Job, attempt: u32) {
        let id = job.id;
        let mut table = self.table();
        if let Some(old) = table.get(&id).copied() {
            if old.attempt >= attempt {
                debug!(
                    job = id,
                    attempt, "start for an attempt already held; ignored"
                );
                return;
            }
            if let Some(pgid) = old.pgid {
                warn!(
                    job = id,
                    attempt = old.attempt,
                    "a newer attempt arrived; killing the old copy"
                );
                procs::signal_group(pgid, Signal::SIGKILL);
            }
        }
        let span = tracing::info_span!("job", id, attempt);
        match spawn(&self.spool, &job, attempt) {
            Err(reason) => {
                warn!(job = id, attempt, %reason, "job could not start");
                table.insert(id, Held::new(attempt, None, HeldPhase::Finished));
                drop(table);
                let jobs = self.clone();
                tokio::spawn(
                    async move { jobs.finish(id, attempt, JobEnd::Failed(reason), None).await }
                        .instrument(span),
                );
            }
            Ok(child) => {
                let pid = child.id().map(|p| p as i32);
                info!(job = id, attempt, pid, "job started");
                // Recorded before anyone can report it: a restarted worker must be able to
                // find every attempt it started. One it cannot record does not run.
                let recorded = match pid {
                    Some(pid) => self.records.remember(id, attempt, pid),
                    None => Err(std::io::Error::other("the child has no pid")),
                };
                if let Err(e) = recorded {
                    warn!(job = id, attempt, error = %e, "cannot record the process; killing it");
                    if let Some(pid) = pid {
                        procs::signal_group(pid, Signal::SIGKILL);
                    }
                }
                table.insert(id, Held::new(attempt, pid, HeldPhase::Running));
                drop(table);
                let jobs = self.clone();
                tokio::spawn(
                    async move { jobs.supervise(child, id, attempt).await }.instrument(span),
                );
            }
        }
    }

    /// Waits for the attempt's process while its start is reported, then reports its end.
    async fn supervise(self: Arc<Self>, mut child: tokio::process::Child, id: JobId, attempt: u32) {
        let start = Report::started(id, attempt);
        if let Err(e) = self.outbox.put(&start) {
            warn!(job = id, error = %e, "start report not durable; sending it anyway");
        }
        let reporter = self.clone();
        let started = tokio::spawn(async move { reporter.deliver(start).await });
        let status = child.wait().await;
        let (pgid, stopping) = self.mark_finished(id, attempt);
        if let Some(pgid) = pgid {
            // The leader is gone; whatever it left behind in its group goes with it.
            procs::signal_group(pgid, Signal::SIGKILL);
        }
        let end = match status {
            Ok(s) => match (s.code(), s.signal()) {
                (Some(code), _) => JobEnd::Exit(code),
                (None, Some(sig)) => JobEnd::Signal(sig),
                (None, None) => JobEnd::Failed("ended without exit code or signal".into()),
            },
            Err(e) => JobEnd::Failed(format!("lost track of the process: {e}")),
        };
        if stopping {
            // The worker is stopping and killed it: not the job's own end. Left unreported,
            // the attempt is requeued by the primary's resync (or its host's loss).
            info!(
                job = id,
                attempt, "attempt stopped unreported; the primary requeues it"
            );
            self.records.forget(id, attempt);
            self.release(id, attempt);
            return;
        }
        info!(job = id, attempt, ?end, "job ended");
        self.finish(id, attempt, end, Some(started)).await;
    }

    /// Records the end durably (whether or not the start got through yet), then reports it
    /// once the start's delivery, if any, is over.
    async fn finish(
        self: &Arc<Self>,
        id: JobId,
        attempt: u32,
        end: JobEnd,
        start_delivery: Option<tokio::task::JoinHandle<()>>,
    ) {
        let report = Report::finished(id, attempt, end);
        // The fsync runs off the runtime thread: heartbeats and agent calls never wait on it.
        let (outbox, copy) = (self.outbox.clone(), report.clone());
        let put = tokio::task::spawn_blocking(move || outbox.put(&copy).map_err(|e| e.to_string()))
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
        if let Err(e) = put {
            warn!(job = id, error = %e, "end report not durable; sending it anyway");
        }
        // From here on the end is recorded: the process record is not needed.
        self.records.forget(id, attempt);
        if let Some(start) = start_delivery {
            let _ = start.await;
        }
        self.deliver(report).await;
        self.release(id, attempt);
    }

    /// Marks the attempt ended; returns its process group and whether the worker's stop
    /// killed it.
    fn mark_finished(&self, id: JobId, attempt: u32) -> (Option<i32>, bool) {
        let mut table = self.table();
        match table.get_mut(&id).filter(|h| h.attempt == attempt) {
            Some(held) => {
                held.phase = HeldPhase::Finished;
                (held.pgid.take(), held.stopping)
            }
            None => (None, false),
        }
    }

    /// Forgets the attempt once its end is acknowledged.
    fn release(&self, id: JobId, attempt: u32) {
        let mut table = self.table();
        if table.get(&id).is_some_and(|h| h.attempt == attempt) {
            table.remove(&id);
        }
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
        if let Err(e) = self.outbox.remove(&report) {
            warn!(job = report.id, error = %e, "cannot delete a delivered report; it will be sent again");
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
        let Some(pgid) = held.pgid else {
            // Already ended: its end report settles it.
            return true;
        };
        let (id, attempt) = (order.id, order.attempt);
        match order.signal {
            JobSignal::Suspend => {
                procs::signal_group(pgid, Signal::SIGSTOP);
                held.phase = HeldPhase::Suspended;
                info!(job = id, attempt, "job suspended");
            }
            JobSignal::Resume => {
                procs::signal_group(pgid, Signal::SIGCONT);
                held.phase = HeldPhase::Running;
                info!(job = id, attempt, "job resumed");
            }
            JobSignal::Kill => {
                // A stopped group must run to act on SIGTERM.
                procs::signal_group(pgid, Signal::SIGTERM);
                procs::signal_group(pgid, Signal::SIGCONT);
                info!(job = id, attempt, grace = ?self.kill_grace, "job terminated; killing it after the grace period");
                let jobs = self.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(jobs.kill_grace).await;
                    let _ = tokio::task::spawn_blocking(move || jobs.finish_kill(&[(id, attempt)]))
                        .await;
                });
            }
        }
        true
    }

    /// Starts killing every running attempt without reporting its end (the primary requeues
    /// them when it finds them missing, or when it declares the host lost): SIGTERM (and
    /// SIGCONT, for a suspended group) now; [`Jobs::finish_kill`] after the grace period.
    /// An attempt whose leader already exited is left alone: its own end gets reported.
    pub fn terminate_unreported(&self) -> Vec<(JobId, u32)> {
        let mut table = self.table();
        let mut begun = Vec::new();
        for (id, h) in table.iter_mut() {
            let Some(pgid) = h.pgid.filter(|p| procs::start_ticks(*p).is_some()) else {
                continue;
            };
            if h.stopping {
                continue;
            }
            h.stopping = true;
            procs::signal_group(pgid, Signal::SIGTERM);
            procs::signal_group(pgid, Signal::SIGCONT);
            begun.push((*id, h.attempt));
        }
        begun
    }

    /// Ends a kill begun a grace period ago: SIGKILL to each attempt's group if its leader is
    /// still unreaped, then to every process carrying the attempt's mark, wherever it went.
    pub fn finish_kill(&self, attempts: &[(JobId, u32)]) {
        for (id, attempt) in attempts {
            let still = self
                .table()
                .get(id)
                .filter(|h| h.attempt == *attempt)
                .and_then(|h| h.pgid);
            if let Some(pgid) = still {
                warn!(
                    job = id,
                    attempt, "job outlived its grace period; killing it"
                );
                procs::signal_group(pgid, Signal::SIGKILL);
            }
            procs::kill_marked(&self.spool, procs::Marked::Attempt(*id, *attempt));
        }
    }

    /// Asks for a join at the next chance, so the primary learns what this worker dropped.
    pub fn request_resync(&self) {
        self.client.request_rejoin();
    }

    /// The grace period between SIGTERM and SIGKILL.
    pub fn kill_grace(&self) -> Duration {
        self.kill_grace
    }

    /// Kills every running attempt when the worker stops (SIGTERM, then SIGKILL after the
    /// grace period) and waits for them, bounded. Their ends are not reported: the primary
    /// requeues them when this worker rejoins or its host is lost.
    pub async fn stop_all(self: &Arc<Self>) {
        let begun = self.terminate_unreported();
        if begun.is_empty() {
            return;
        }
        info!(jobs = begun.len(), "stopping the jobs still running");
        let deadline = tokio::time::Instant::now() + self.kill_grace;
        while tokio::time::Instant::now() < deadline
            && self.table().values().any(|h| h.pgid.is_some())
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let jobs = self.clone();
        let _ = tokio::task::spawn_blocking(move || jobs.finish_kill(&begun)).await;
    }
}

fn spawn(spool: &Path, job: &Job, attempt: u32) -> Result<tokio::process::Child, String> {
    let Some((program, args)) = job.spec.command.split_first() else {
        return Err("empty command".into());
    };
    let (out, err) = output_paths(spool, job.id, attempt);
    let open = |p: &Path| {
        std::fs::File::create(p).map_err(|e| format!("cannot create {}: {e}", p.display()))
    };
    let cwd = if job.spec.cwd.is_empty() {
        spool.to_path_buf()
    } else {
        PathBuf::from(&job.spec.cwd)
    };
    if !cwd.is_dir() {
        return Err(format!(
            "working directory {} does not exist",
            cwd.display()
        ));
    }
    tokio::process::Command::new(program)
        .args(args)
        .envs(job.spec.env.iter().map(|(k, v)| (k, v)))
        // Who the job is, for the job itself, and a mark that lets a restarted worker find
        // every process its previous run started, even one that left the process group.
        .env(procs::ENV_JOB_ID, job.id.to_string())
        .env(procs::ENV_ATTEMPT, attempt.to_string())
        .env(procs::ENV_SPOOL_MARK, spool)
        .current_dir(&cwd)
        .stdin(Stdio::null())
        .stdout(open(&out)?)
        .stderr(open(&err)?)
        // Its own process group: kill and suspend reach the whole job, not just its leader.
        .process_group(0)
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!("command not found: {program}"),
            std::io::ErrorKind::PermissionDenied => format!("permission denied: {program}"),
            _ => format!("cannot start {program}: {e}"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use xce_client::types::JobSpec;

    /// A job table whose reports go nowhere (no controller listens): enough to exercise
    /// starting, deduplication, fencing and signals without a cluster.
    fn table(spool: &Path) -> (Arc<Jobs>, watch::Sender<bool>) {
        let peers = xce_client::parse_candidates("c1=127.0.0.1:1").unwrap();
        let client = Client::new(peers, xce_client::ClientConfig::default());
        let (stop_tx, stop) = watch::channel(false);
        let jobs = Jobs::new(
            client,
            "w1".into(),
            spool.to_path_buf(),
            Duration::from_millis(200),
            stop,
        )
        .unwrap();
        (jobs, stop_tx)
    }

    fn sleeper(id: JobId) -> Job {
        Job {
            id,
            spec: JobSpec {
                command: vec!["sleep".into(), "30".into()],
                ..JobSpec::default()
            },
            state: xce_client::types::JobState::Dispatched,
            pend_reason: None,
            reason: None,
            host: Some("w1".into()),
            attempt: 0,
            exit_code: None,
            signal: None,
            submit_time_ms: 0,
            start_time_ms: None,
            end_time_ms: None,
            output_dir: None,
        }
    }

    fn pgid_of(jobs: &Jobs, id: JobId) -> Option<i32> {
        jobs.table().get(&id).and_then(|h| h.pgid)
    }

    async fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn starts_once_per_attempt_fences_older_copies_and_signals_only_what_it_holds() {
        let dir = tempfile::tempdir().unwrap();
        let (jobs, stop) = table(dir.path());
        jobs.start(sleeper(1), 2);
        let first = pgid_of(&jobs, 1).unwrap();
        // The same attempt sent again (after a failover) and an older one are ignored.
        jobs.start(sleeper(1), 2);
        jobs.start(sleeper(1), 1);
        assert_eq!(pgid_of(&jobs, 1), Some(first));
        assert_eq!(
            jobs.held(),
            vec![HeldJob {
                id: 1,
                attempt: 2,
                phase: HeldPhase::Running
            }]
        );
        assert!(dir.path().join("running/1.2").exists());

        let order = |attempt, signal| JobOrder {
            id: 1,
            attempt,
            signal,
        };
        assert!(
            !jobs.signal(order(1, JobSignal::Kill)),
            "a stale attempt is not held"
        );
        assert!(!jobs.signal(JobOrder {
            id: 9,
            attempt: 1,
            signal: JobSignal::Kill
        }));
        assert!(jobs.signal(order(2, JobSignal::Suspend)));
        assert_eq!(jobs.held()[0].phase, HeldPhase::Suspended);
        wait_until("the group to stop", || {
            procs::start_ticks(first).is_some() && proc_state(first) == Some('T')
        })
        .await;
        assert!(jobs.signal(order(2, JobSignal::Resume)));
        assert_eq!(jobs.held()[0].phase, HeldPhase::Running);

        // A newer attempt fences the old copy.
        jobs.start(sleeper(1), 3);
        let second = pgid_of(&jobs, 1).unwrap();
        assert_ne!(second, first);
        wait_until("the old copy to die", || {
            procs::start_ticks(first).is_none()
        })
        .await;

        // Kill ends it; its end waits in the outbox (no controller), durable.
        assert!(jobs.signal(order(3, JobSignal::Kill)));
        wait_until("the attempt to finish", || {
            jobs.held()
                .iter()
                .any(|h| h.attempt == 3 && h.phase == HeldPhase::Finished)
        })
        .await;
        wait_until("the end report on disk", || {
            dir.path().join("outbox/1.3.end").exists()
        })
        .await;
        assert!(!dir.path().join("running/1.3").exists());
        stop.send_replace(true);
    }

    #[tokio::test]
    async fn a_command_that_cannot_start_is_held_as_finished_with_its_reason_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let (jobs, stop) = table(dir.path());
        let mut job = sleeper(4);
        job.spec.command = vec!["/no/such/program".into()];
        jobs.start(job, 1);
        assert_eq!(
            jobs.held(),
            vec![HeldJob {
                id: 4,
                attempt: 1,
                phase: HeldPhase::Finished
            }]
        );
        let path = dir.path().join("outbox/4.1.end");
        wait_until("the end report on disk", || path.exists()).await;
        let report = Report::decode(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(
            report.end,
            Some(JobEnd::Failed("command not found: /no/such/program".into()))
        );
        stop.send_replace(true);
    }

    fn proc_state(pid: i32) -> Option<char> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat[stat.rfind(')')? + 1..].trim_start().chars().next()
    }
}
