//! Starting a new cluster from a backup. A backup is a sequence of [`BackupPart`]s: the first
//! (`Restore`) replaces a new cluster's state with everything but the jobs, each later one
//! (`RestoreJobs`) adds jobs. Each is one Raft entry, so a state of any size is restored in
//! entries that fit the log; an interrupted restore resumes, because every part carries a
//! request token derived from the file, and a part already applied is answered from memory.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use xce_client::types::{RequestToken, ScriptId};
use xce_proto::Status;

use super::stored::{EndIntentRecord, JobRecord};
use super::{job_event, queue_flags, Event, Job, Outcome, State, StateRecord};

/// One part of a backup, after its header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum BackupPart {
    /// Everything but the jobs and the intents on them; always the first part.
    Base(StateRecord),
    /// Jobs in id order, with the operators' intents on them and the scripts they run that
    /// no earlier part carried (by SHA-256), so that no part outgrows a message.
    Jobs {
        jobs: Vec<JobRecord>,
        intents: Vec<(u64, EndIntentRecord)>,
        scripts: Vec<([u8; 32], Vec<u8>)>,
    },
}

impl State {
    /// This state as backup parts, handed to `emit` one at a time (a part is built only when
    /// the one before has been taken): the base, then the jobs in parts of about `budget`
    /// encoded bytes each (one job at least, however large).
    pub fn backup_parts<E: From<postcard::Error>>(
        &self,
        budget: usize,
        mut emit: impl FnMut(BackupPart) -> Result<(), E>,
    ) -> Result<(), E> {
        let base = State {
            jobs: BTreeMap::new(),
            intents: BTreeMap::new(),
            scripts: BTreeMap::new(),
            index: super::index::Index::default(),
            emitted: Vec::new(),
            ..self.clone()
        };
        emit(BackupPart::Base(base.into_record()))?;
        let (mut jobs, mut intents, mut scripts, mut size) =
            (Vec::new(), Vec::new(), Vec::new(), 0);
        let mut carried = BTreeSet::new();
        for job in self.jobs.values() {
            let record = JobRecord::from(Job::clone(job));
            let mut bytes =
                postcard::serialize_with_flavor(&record, postcard::ser_flavors::Size::default())?;
            let script = job
                .spec
                .script
                .filter(|id| !carried.contains(id))
                .and_then(|id| self.scripts.get(&id).map(|body| (id, body)));
            if let Some((_, body)) = script {
                bytes += body.len() + 40;
            }
            if !jobs.is_empty() && size + bytes > budget {
                emit(BackupPart::Jobs {
                    jobs: std::mem::take(&mut jobs),
                    intents: std::mem::take(&mut intents),
                    scripts: std::mem::take(&mut scripts),
                })?;
                size = 0;
            }
            if let Some((id, body)) = script {
                carried.insert(id);
                scripts.push((id.0, body.to_vec()));
            }
            if let Some(intent) = self.intents.get(&record.id) {
                intents.push((record.id, EndIntentRecord::from(*intent)));
            }
            size += bytes;
            jobs.push(record);
        }
        if !jobs.is_empty() {
            emit(BackupPart::Jobs {
                jobs,
                intents,
                scripts,
            })?;
        }
        Ok(())
    }
}

impl State {
    /// Whether this state has ever held a job or a user token: a restore replaces only a
    /// state that has not, so that nothing a client was told is undone by it.
    fn restore_refusal(&self) -> Option<String> {
        if self.next_job_id != 1 {
            return Some(format!(
                "this cluster already holds jobs (ids up to {}): restore only into a new cluster",
                self.next_job_id - 1
            ));
        }
        if !self.user_tokens.is_empty() {
            return Some(format!(
                "this cluster already has {} user token(s): restore only into a new cluster",
                self.user_tokens.len()
            ));
        }
        None
    }

    /// Replaces this (new) state with a backup's. Every restored host is unavailable until its
    /// worker joins this cluster (its jobs are then reconciled, or lost after the grace like
    /// any unavailable host's); the scheduler lease has run out, its epoch kept above any this
    /// cluster has granted, so no scheduler's decision from before the restore is taken after
    /// it. Every job, host and queue is emitted, so watchers see the new state.
    pub(super) fn restore(&mut self, record: StateRecord) -> Outcome {
        if let Some(refusal) = self.restore_refusal() {
            return Outcome::rejected(Status::Conflict, refusal);
        }
        let mut restored = match State::try_from_record(record) {
            Ok(state) => state,
            Err(e) => return Outcome::rejected(Status::Invalid, format!("backup: {e}")),
        };
        for host in restored.hosts.values_mut() {
            host.available = false;
        }
        // The version is the cluster's, not the backup's: what its members run. A backup's
        // would lower it, or raise it past a member of an older build.
        restored.active_version = self.active_version;
        // The retired jobs are the backed-up cluster's history, which a backup does not
        // carry: this cluster's history starts empty, numbered from its own.
        restored.retired_seq = self.retired_seq;
        let epoch = [&self.scheduler, &restored.scheduler]
            .into_iter()
            .flatten()
            .map(|l| l.epoch)
            .max();
        if let Some(lease) = restored.scheduler.as_mut().or(self.scheduler.as_mut()) {
            lease.epoch = epoch.unwrap_or(lease.epoch);
            lease.expires_ms = 0;
        }
        if restored.scheduler.is_none() {
            restored.scheduler = self.scheduler.take();
        }
        restored.emitted = std::mem::take(&mut self.emitted);
        restored
            .emitted
            .extend(restored.jobs.values().map(|j| job_event(j)));
        let hosts: Vec<Event> = restored
            .hosts
            .iter()
            .map(|(name, h)| Event::Host {
                name: name.clone(),
                state: h.state(),
            })
            .collect();
        let queues: Vec<Event> = restored
            .queues
            .iter()
            .map(|(name, q)| {
                let (priority, open, active) = queue_flags(q);
                Event::Queue {
                    name: name.clone(),
                    priority,
                    open,
                    active,
                }
            })
            .collect();
        restored.emitted.extend(hosts);
        restored.emitted.extend(queues);
        *self = restored;
        Outcome::Done
    }
}

impl State {
    /// Adds a backup's jobs to the state its first part (applied under `base`) restored.
    /// Taken whole or not at all: every job must be new, below the restored id counter, and
    /// follow the rules every job does; every intent must be on a placed job of this part.
    pub(super) fn restore_jobs(
        &mut self,
        base: RequestToken,
        jobs: Vec<JobRecord>,
        intents: Vec<(u64, EndIntentRecord)>,
        scripts: Vec<([u8; 32], Vec<u8>)>,
    ) -> Outcome {
        if !matches!(self.tokens.get(&base), Some(Outcome::Done)) {
            return Outcome::rejected(
                Status::Conflict,
                "this backup part's restore has not begun in this cluster: restore the whole \
                 file, whose first part replaces the state",
            );
        }
        let jobs: Vec<Job> = jobs.into_iter().map(Job::from).collect();
        let scripts: BTreeMap<ScriptId, Arc<[u8]>> = scripts
            .into_iter()
            .map(|(id, body)| (ScriptId(id), Arc::from(body)))
            .collect();
        if let Err(e) = self.restorable(&jobs, &intents, &scripts) {
            return Outcome::rejected(Status::Invalid, format!("backup: {e}"));
        }
        self.scripts.extend(scripts);
        // A restored array counts its restored tasks already.
        for job in jobs {
            self.insert_job_as_is(job);
        }
        self.intents
            .extend(intents.into_iter().map(|(id, i)| (id, i.into())));
        Outcome::Done
    }

    /// `Err` naming the first job or intent a restore part may not add here.
    fn restorable(
        &self,
        jobs: &[Job],
        intents: &[(u64, EndIntentRecord)],
        scripts: &BTreeMap<ScriptId, Arc<[u8]>>,
    ) -> Result<(), String> {
        for (id, body) in scripts {
            super::scripts::check_bytes(*id, body)?;
        }
        let (mut ids, mut placed) = (BTreeSet::new(), BTreeSet::new());
        for job in jobs {
            if self.jobs.contains_key(&job.id) || !ids.insert(job.id) {
                return Err(format!("job {} is already here", job.id));
            }
            if let Some(id) = job.spec.script {
                if !scripts.contains_key(&id) && !self.scripts.contains_key(&id) {
                    return Err(format!("job {}: its script {id} is in no part", job.id));
                }
            }
            self.check_job(job)?;
            if super::is_placed(job.state) {
                placed.insert(job.id);
            }
        }
        let mut seen = BTreeSet::new();
        for (id, _) in intents {
            if !placed.contains(id) || !seen.insert(*id) {
                return Err(format!(
                    "an intent on job {id} is not on a placed job of its part"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use xce_client::types::{JobState, RequestToken};

    use super::*;
    use crate::state::testing::*;
    use crate::state::{Command, SchedulerLease};

    fn restore(state: &StateRecord) -> Command {
        Command::Restore {
            token: RequestToken(77),
            state: Box::new(state.clone()),
        }
    }

    fn lease(instance: u64, epoch: u64) -> Option<SchedulerLease> {
        Some(SchedulerLease {
            name: "s1".into(),
            instance,
            epoch,
            expires_ms: u64::MAX,
        })
    }

    #[test]
    fn a_restore_keeps_the_cluster_s_version_and_a_backup_of_an_unknown_one_is_refused() {
        use crate::store::{OLDEST_FORMAT, STORE_FORMAT};
        let mut old = running_on_w1(1);
        let backup = old.clone().into_record();
        assert_eq!(backup.active_version, OLDEST_FORMAT);
        // A cluster already raised is not lowered by an older backup.
        let mut new = State::default();
        new.apply(0, Command::RaiseVersion { to: STORE_FORMAT });
        assert_eq!(new.apply(5, restore(&backup)), Outcome::Done);
        assert_eq!(new.active_version(), STORE_FORMAT);
        // Nor is one that is not raised raised by a newer backup: a member may run the older
        // build.
        old.apply(1, Command::RaiseVersion { to: STORE_FORMAT });
        let newer = old.into_record();
        let mut held = State::default();
        assert_eq!(held.apply(5, restore(&newer)), Outcome::Done);
        assert_eq!(held.active_version(), OLDEST_FORMAT);
        // A version this build does not run is no state it could have written.
        let mut unknown = newer;
        unknown.active_version = 85;
        let outcome = State::default().apply(5, restore(&unknown));
        assert!(
            matches!(&outcome, Outcome::Rejected { message, .. } if message.contains("cluster version 85")),
            "{outcome:?}"
        );
    }

    #[test]
    fn a_new_cluster_takes_a_backup_whole_and_its_hosts_wait_for_their_workers() {
        let mut old = running_on_w1(2);
        submit(&mut old, 5000, spec(&["true"]));
        let backup = old.clone().into_record();

        let mut new = State::default();
        new.apply(0, join_cmd(1, "w1", vec![]));
        let (outcome, events) = new.apply_emitting(5, restore(&backup));
        assert_eq!(outcome, Outcome::Done);
        assert_eq!(new.job(1).map(|j| j.state), Some(JobState::Running));
        assert_eq!(new.job(3).map(|j| j.state), Some(JobState::Pending));
        assert_eq!(new.next_job_id, old.next_job_id);
        assert!(
            new.host("w1").is_some_and(|h| !h.available),
            "w1 must join again"
        );
        let jobs = events
            .iter()
            .filter(|e| matches!(e, Event::Job { .. }))
            .count();
        assert_eq!(jobs, 3, "{events:?}");
        assert!(events
            .iter()
            .any(|e| matches!(e, Event::Host { name, .. } if name == "w1")));
        new.check_invariants().unwrap();
        // Its worker joins holding nothing: its running jobs are lost (requeued).
        let joined = new.apply(6, join_cmd(2, "w1", vec![]));
        assert!(matches!(joined, Outcome::Resynced { .. }), "{joined:?}");
        assert_eq!(new.job(1).map(|j| j.state), Some(JobState::Pending));
        // New ids continue after the backup's.
        assert_eq!(
            submit(&mut new, 6000, spec(&["true"])),
            Outcome::Submitted(4)
        );
        // A repeat of the restore answers as the first did.
        assert_eq!(
            new.apply(7, restore(&backup)),
            Outcome::Duplicate(Box::new(Outcome::Done))
        );
    }

    #[test]
    fn a_cluster_that_held_a_job_is_never_replaced() {
        let backup = running_on_w1(1).into_record();
        let mut used = State::default();
        submit(&mut used, 1, spec(&["true"]));
        let before = used.clone();
        let outcome = used.apply(5, restore(&backup));
        rejected_with(&outcome, Status::Conflict, "already holds jobs");
        assert_eq!(used.jobs, before.jobs);
    }

    #[test]
    fn a_backup_that_breaks_the_rules_changes_nothing() {
        let mut bad = running_on_w1(0).into_record();
        let twice = bad.hosts[0].clone();
        bad.hosts.push(twice);
        let mut new = State::default();
        let outcome = new.apply(5, restore(&bad));
        rejected_with(&outcome, Status::Invalid, "appears twice");
        assert!(new.hosts.is_empty());
    }

    #[test]
    fn the_scheduler_epoch_never_goes_back_and_the_lease_has_run_out() {
        for (old, new, epoch) in [(3, 9, 9), (9, 3, 9), (4, 0, 4), (0, 5, 5)] {
            let before = State {
                scheduler: if old > 0 { lease(1, old) } else { None },
                ..State::default()
            };
            let backup = before.into_record();
            let mut state = State {
                scheduler: if new > 0 { lease(2, new) } else { None },
                ..State::default()
            };
            assert_eq!(state.apply(5, restore(&backup)), Outcome::Done);
            let lease = state.scheduler.clone().unwrap();
            assert_eq!((lease.epoch, lease.expires_ms), (epoch, 0), "{old} {new}");
        }
    }
}
