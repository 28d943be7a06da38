//! Picking up what a previous run of this worker left: the shims still running are
//! adopted, what none vouches for is killed, and undelivered reports are sent again.

use super::*;

impl Jobs {
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
            // Counted as the whole host until its job is read: nothing sent ahead starts
            // beside it before then.
            self.admission().adopt((id, attempt), None);
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
        self.remove_leftover_files(&adopted);
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
                async move { jobs.watch_adopted(id, attempt, start).await }
                    .instrument(span.clone()),
            );
            let jobs = self.clone();
            tokio::spawn(async move { jobs.learn_share(id, attempt).await }.instrument(span));
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
    pub(super) fn resend_reports(
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

    /// Removes the script copies and limit files of attempts no shim runs any more (a shim
    /// removes its own when its job is over; one killed, or a host that went down, leaves
    /// them). Only files a minute old or more: a shim the previous run launched may not have
    /// written its record yet.
    fn remove_leftover_files(&self, adopted: &[(JobId, u32)]) {
        let cutoff = std::time::SystemTime::now() - Duration::from_secs(60);
        let mut removed = 0;
        for dir in ["scripts", "limits"] {
            let Ok(entries) = std::fs::read_dir(self.spool.join(dir)) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let attempt_of = || {
                    let mut parts = name.split('.');
                    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
                };
                let held = attempt_of().is_some_and(|a: (JobId, u32)| adopted.contains(&a));
                let old = entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t < cutoff);
                if !held && old && std::fs::remove_file(entry.path()).is_ok() {
                    removed += 1;
                }
            }
        }
        if removed > 0 {
            info!(
                files = removed,
                "removed script copies and limit files of attempts no shim runs"
            );
        }
    }

    /// Reads what an adopted attempt's job takes, so that admission counts its share instead
    /// of the whole host; until the attempt ends or the read succeeds (retried each second).
    async fn learn_share(self: Arc<Self>, id: JobId, attempt: u32) {
        let mut stop = self.stop.clone();
        while self.admission().unknown((id, attempt)) && !*stop.borrow() {
            let share = match self.client.call(GetJob { id }).await {
                Ok(job) => Some(job.spec.resources),
                // Forgotten by the cluster: the resync kills it; it holds nothing to count.
                Err(ClientError::Status {
                    status: Status::NoEnt,
                    ..
                }) => Some(xce_client::types::Resources::default()),
                Err(e) => {
                    debug!(job = id, attempt, error = %e, "cannot read an adopted job's size yet");
                    None
                }
            };
            if let Some(share) = share {
                let mut table = self.table();
                let admitted = self.admission().learn((id, attempt), share);
                self.run_waited(&mut table, admitted);
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = stop.changed() => {}
            }
        }
    }
}
