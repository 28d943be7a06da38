//! Dependencies on jobs that retired to history: the state no longer holds them, so the
//! submit service decides each term on one from its record before it proposes the job
//! (`dependency::settle`), and every controller then applies the same, settled dependency
//! (`docs/design/accounting.md`, "Dependencies on retired jobs").

use redb::ReadableDatabase;
use xce_client::array::JobRef;
use xce_client::dependency::{self, Kind, Progress, StartedAt, Term, Verdict};
use xce_client::types::{Job, JobId};

use super::{record, History, HistoryError, BY_ARRAY, RECORDS};

/// A retired job, and its tasks when it is an array, as a dependency sees them.
struct Retired {
    job: Job,
    tasks: Vec<Job>,
}

impl dependency::Parents for Retired {
    fn progress(&self, of: &JobRef) -> Option<Progress> {
        if of.id != self.job.id {
            return None;
        }
        // Jobs retire from version 13 on, which counts a start once reported.
        let started = StartedAt::at_version(xce_client::version::ACCOUNTING);
        match (&of.tasks, &self.job.array) {
            (None, None) => Some(Progress::of_job(&self.job, started)),
            (None, Some(p)) => Some(Progress::of_array(p)),
            (Some(_), None) => None,
            (Some(named), Some(_)) => {
                let mut sum = Progress::default();
                let mut found = 0u64;
                for task in &self.tasks {
                    if !task.array_task.is_some_and(|t| named.contains(t.index)) {
                        continue;
                    }
                    found += 1;
                    let p = Progress::of_job(task, started);
                    sum.completed += p.completed;
                    sum.failed += p.failed;
                    sum.unrun += p.unrun;
                    sum.running += p.running;
                    sum.not_started += p.not_started;
                }
                // A task never split off ended with its array, never having run.
                sum.unrun += named.len().saturating_sub(found);
                Some(sum)
            }
        }
    }

    fn singleton_busy(&self) -> bool {
        false
    }

    fn own_task(&self) -> Option<u32> {
        None
    }
}

/// Why a dependency on a retired job cannot be settled at submit.
#[derive(Debug, thiserror::Error)]
pub enum ParentError {
    #[error(transparent)]
    History(#[from] HistoryError),
    #[error(
        "aftercorr:{0}: job {0} retired to history, and the tasks of a new array are paired \
         only with an array still in the cluster"
    )]
    PairedWithRetired(JobId),
}

impl History {
    /// The final verdict of `term`, when it names a job this store holds: it ended, so its
    /// verdict never changes. `None` for a term on any other job.
    pub fn decide(&self, term: &Term) -> Result<Option<Verdict>, ParentError> {
        let Term::On(kind, job) = term else {
            return Ok(None);
        };
        let Some(retired) = self.retired(job.id)? else {
            return Ok(None);
        };
        if *kind == Kind::AfterCorr {
            return Err(ParentError::PairedWithRetired(job.id));
        }
        Ok(Some(dependency::term_verdict(term, &retired)))
    }

    /// Task `index` of retired array `array`: its own record once split off, else the
    /// array's (it ended in the array, never split off), as a live array answers; `None`
    /// when history holds no such array, or the array has no such task.
    pub fn task(&self, array: JobId, index: u32) -> Result<Option<Job>, HistoryError> {
        let Some(retired) = self.retired(array)? else {
            return Ok(None);
        };
        if let Some(task) = retired
            .tasks
            .into_iter()
            .find(|t| t.array_task.is_some_and(|a| a.index == index))
        {
            return Ok(Some(task));
        }
        let has = retired
            .job
            .spec
            .array
            .as_ref()
            .is_some_and(|a| a.tasks.contains(index));
        Ok(has.then_some(retired.job))
    }

    /// A retired job with its tasks, read in one transaction.
    fn retired(&self, id: JobId) -> Result<Option<Retired>, HistoryError> {
        // Just retired, not written yet: it and its tasks retired in one apply.
        if let Some(job) = self.kept_job(id) {
            let tasks = self.kept_tasks(id);
            return Ok(Some(Retired { job, tasks }));
        }
        let txn = self.db.begin_read().map_err(|e| self.err(e))?;
        let records = txn.open_table(RECORDS).map_err(|e| self.err(e))?;
        let read = |id: JobId| -> Result<Option<Job>, HistoryError> {
            let Some(bytes) = records.get(id).map_err(|e| self.err(e))? else {
                return Ok(None);
            };
            record::decode(bytes.value())
                .map(Some)
                .map_err(|detail| HistoryError::Record { id, detail })
        };
        let Some(job) = read(id)? else {
            return Ok(None);
        };
        let mut tasks = Vec::new();
        if job.array.is_some() {
            let by_array = txn.open_table(BY_ARRAY).map_err(|e| self.err(e))?;
            for entry in by_array
                .range((id, 0)..=(id, u64::MAX))
                .map_err(|e| self.err(e))?
            {
                let task = entry.map_err(|e| self.err(e))?.0.value().1;
                if task != id {
                    tasks.extend(read(task)?);
                }
            }
        }
        Ok(Some(Retired { job, tasks }))
    }
}
