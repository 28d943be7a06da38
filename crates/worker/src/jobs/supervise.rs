//! Following an attempt's shim until it ends, and carrying out the primary's orders for
//! it (kill, suspend, resume) and the worker's own stop.

use super::*;

impl Jobs {
    /// The cgroup of an attempt, where the host has cgroups.
    pub(super) fn cgroup(&self, id: JobId, attempt: u32) -> Option<JobCgroup> {
        Some(self.settings.cgroups.as_ref()?.job(id, attempt))
    }

    /// Stops a job whole: its group (SIGSTOP, so the job can see it) and its cgroup (frozen,
    /// so nothing that left the group runs on).
    pub(super) fn suspend(&self, id: JobId, attempt: u32, pgid: i32) {
        procs::signal_group(pgid, Signal::SIGSTOP);
        if let Some(cg) = self.cgroup(id, attempt) {
            cg.freeze();
        }
    }

    /// Reports the start a fresh shim announces, and the end it records once it exits.
    pub(super) async fn supervise(self: Arc<Self>, launched: Launched, spec: ShimSpec) {
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
    pub(super) fn started(&self, id: JobId, attempt: u32, pgid: i32) {
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
    pub(super) async fn watch_adopted(self: Arc<Self>, id: JobId, attempt: u32, start: Report) {
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
    pub(super) async fn shim_ended(
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
                // The shim saw its job out: the next start waiting for room runs now, before
                // this end is delivered.
                self.free(id, attempt);
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
                self.free(id, attempt);
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
            JobSignal::Kill if self.admission().waits((id, attempt)) => {
                held.phase = HeldPhase::Finished;
                let (_, admitted) = self.admission().withdraw(id);
                self.run_waited(&mut table, admitted);
                drop(table);
                info!(
                    job = id,
                    attempt, "job killed while its start waited for room; it never ran"
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

    /// Sends any signal to a running attempt's process group, or its leading process alone
    /// (`xce signal`); false if this worker holds no such attempt running.
    pub fn send_signal(&self, id: JobId, attempt: u32, signal: i32, leader_only: bool) -> bool {
        let table = self.table();
        let Some(pgid) = table
            .get(&id)
            .filter(|h| h.attempt == attempt && h.phase != HeldPhase::Finished)
            .and_then(|h| h.pgid)
        else {
            return false;
        };
        let sent = procs::send_signal(pgid, signal, leader_only);
        info!(
            job = id,
            attempt,
            signal = %xce_client::signals::name(signal),
            leader_only,
            sent,
            "signal sent to the job"
        );
        sent
    }

    /// Gives a running attempt a new time limit, which its shim keeps from then on (counted
    /// from the job's start, as the old one was); false if this worker holds no such attempt.
    pub fn set_time_limit(&self, id: JobId, attempt: u32, time_limit_s: Option<u32>) -> bool {
        let table = self.table();
        let Some(held) = table
            .get(&id)
            .filter(|h| h.attempt == attempt && h.phase != HeldPhase::Finished)
        else {
            return false;
        };
        // Written even while the start waits: the shim reads it when it starts the job.
        if let Err(e) = crate::shim::write_limit(&self.spool, id, attempt, time_limit_s) {
            warn!(job = id, attempt, error = %e, "cannot hand the job's new time limit to its shim");
            return false;
        }
        if let Some(shim) = held.shim {
            signal_shim(shim, Signal::SIGHUP);
        }
        info!(
            job = id,
            attempt,
            limit_s = time_limit_s,
            "the job's time limit changed"
        );
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
            // So do those that waited for room.
            for (id, attempt) in self.admission().clear_waiting() {
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
