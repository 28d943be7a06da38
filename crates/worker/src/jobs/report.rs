//! Reporting an attempt's start and end through the durable outbox, until the primary
//! acknowledges them, and letting the attempt go once it has.

use super::*;

impl Jobs {
    /// Records an end the worker itself decided (the shim never ran) and reports it.
    pub(super) async fn finish(self: &Arc<Self>, id: JobId, attempt: u32, end: JobEnd) {
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
    pub(super) fn mark_finished(&self, id: JobId, attempt: u32) -> (Option<i32>, bool) {
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
    pub(super) fn release(&self, id: JobId, attempt: u32) {
        self.let_go(&mut self.table(), id, attempt);
    }

    /// Drops the attempt from the table for good: a later start for it, or an older one, is
    /// taken for a late order and runs only if the primary says it is due ([`crate::ended`]).
    pub(super) fn let_go(&self, table: &mut HashMap<JobId, Held>, id: JobId, attempt: u32) {
        drop_attempt(table, id, attempt);
        self.ended().remember(id, attempt);
    }

    /// Sends one report until the primary acknowledges or refuses it (or the worker stops:
    /// then it stays in the outbox). A refused start means the attempt is stale: it is killed.
    pub(super) async fn deliver(self: &Arc<Self>, report: Report) {
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
                        usage: report.usage,
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
}
