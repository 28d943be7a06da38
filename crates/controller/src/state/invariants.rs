//! What every state the controller holds must satisfy, and the check a snapshot passes
//! before it replaces anything. The property tests and the fuzz targets hold `State::apply`
//! to [`State::check_invariants`] after every command; [`State::try_from_record`] holds a
//! snapshot to it, plus the bounds that keep later arithmetic from overflowing, so a forged or
//! corrupt snapshot is refused instead of becoming a state that misbehaves later.

use std::collections::BTreeSet;

use xce_client::types::{JobId, JobState};

use super::index::{is_placed, Index};
use super::{State, StateRecord};

/// The largest job id a state may hold; a real cluster never gets near it, and a counter at
/// it can still grow without wrapping.
pub const MAX_JOB_ID: JobId = 1 << 62;
/// The largest attempt number a job may have reached.
pub const MAX_ATTEMPT: u32 = 1 << 30;
/// The largest scheduler epoch (one per change of scheduler).
pub const MAX_EPOCH: u64 = 1 << 62;

impl State {
    /// `Err` naming the first rule broken: a placed job has a host and an attempt, a pending
    /// one has no host, an operator's intent is on a placed job, job ids are below the counter
    /// and within bounds, and the indexes are exactly what a full recount gives.
    pub fn check_invariants(&self) -> Result<(), String> {
        if self.next_job_id == 0 || self.next_job_id > MAX_JOB_ID {
            return Err(format!("next job id {} is out of range", self.next_job_id));
        }
        for (id, job) in &self.jobs {
            if *id != job.id {
                return Err(format!("job {} is filed under id {id}", job.id));
            }
            self.check_job(job)?;
        }
        for id in self.intents.keys() {
            let state = self.jobs.get(id).map(|j| j.state);
            if !state.is_some_and(is_placed) {
                return Err(format!("an intent is left on job {id} ({state:?})"));
            }
        }
        if let Some(lease) = &self.scheduler {
            if lease.epoch > MAX_EPOCH {
                return Err(format!("scheduler epoch {} is out of range", lease.epoch));
            }
        }
        if self.index != Index::build(self.jobs.values().map(|j| &**j)) {
            return Err("the indexes differ from a recount of the jobs".into());
        }
        for job in self.jobs.values().filter(|j| j.array.is_some()) {
            self.check_array(job)?;
        }
        Ok(())
    }

    /// An array's counts are its tasks' (each task counted once, by where it stands), and
    /// every task of its spec is in exactly one place: waiting in it, a job of its own, or
    /// ended unrun while it waited.
    fn check_array(&self, array: &super::Job) -> Result<(), String> {
        let (Some(spec), Some(p)) = (&array.spec.array, &array.array) else {
            return Err(format!("array {} has progress but no spec", array.id));
        };
        let mut counted = xce_client::types::ArrayProgress::default();
        let mut indices = BTreeSet::new();
        for id in self.index.tasks_of(array.id) {
            let Some(task) = self.jobs.get(&id) else {
                return Err(format!("array {}: task {id} is indexed but gone", array.id));
            };
            let index = task.array_task.map_or(u32::MAX, |t| t.index);
            if p.pending.contains(index) || !indices.insert(index) || !spec.tasks.contains(index) {
                return Err(format!(
                    "array {}: task {id} (index {index}) is not a task of its own",
                    array.id
                ));
            }
            *counted.count_mut(xce_client::types::Standing::of(task)) += 1;
        }
        let unrun_waiting = p.unrun.checked_sub(counted.unrun);
        let counts = (p.waiting, p.running, p.completed, p.failed);
        let recount = (
            counted.waiting,
            counted.running,
            counted.completed,
            counted.failed,
        );
        let total = unrun_waiting.map(|u| p.pending.len() + indices.len() as u64 + u);
        if counts != recount || total != Some(spec.tasks.len()) {
            return Err(format!(
                "array {}: counts {counts:?} (unrun {}) but its tasks {recount:?} (unrun {}), \
                 {} tasks of {} placed",
                array.id,
                p.unrun,
                counted.unrun,
                total.unwrap_or(0),
                spec.tasks.len()
            ));
        }
        Ok(())
    }

    /// `Err` naming the rule `job` breaks here: its id is within bounds and below the
    /// counter, a placed job has a host and an attempt, a pending one has no host.
    pub(super) fn check_job(&self, job: &super::Job) -> Result<(), String> {
        let id = job.id;
        if id == 0 || id >= self.next_job_id {
            return Err(format!(
                "job {id} is outside 1..{} (the next id)",
                self.next_job_id
            ));
        }
        if job.attempt > MAX_ATTEMPT {
            return Err(format!("job {id} has attempt {}", job.attempt));
        }
        if job.runs > job.attempt {
            return Err(format!(
                "job {id} has {} runs but attempt {}",
                job.runs, job.attempt
            ));
        }
        // An array's own record runs on no host: it is `running` while only its tasks (jobs
        // of their own) do.
        if is_placed(job.state) && job.array.is_none() && (job.host.is_none() || job.attempt == 0) {
            return Err(format!(
                "job {id} is {} without a host or an attempt",
                job.state
            ));
        }
        if job.state == JobState::Pending && job.host.is_some() {
            return Err(format!("job {id} is pending on a host"));
        }
        Ok(())
    }

    /// The state a snapshot holds, once it passes every check: no name or id twice, names
    /// and tokens as a command could have made them, and [`State::check_invariants`].
    pub fn try_from_record(rec: StateRecord) -> Result<State, String> {
        unique("job id", rec.jobs.iter().map(|j| j.id))?;
        unique("queue", rec.queues.iter().map(|q| q.name.as_str()))?;
        unique("host", rec.hosts.iter().map(|h| h.name.as_str()))?;
        unique("intent", rec.intents.iter().map(|(id, _)| *id))?;
        unique("user token", rec.user_tokens.iter().map(|t| t.id.as_str()))?;
        unique("script", rec.scripts.iter().map(|(id, _)| *id))?;
        for (id, body) in &rec.scripts {
            super::scripts::check_bytes(xce_client::script::ScriptId(*id), body)?;
        }
        let held: std::collections::BTreeSet<[u8; 32]> =
            rec.scripts.iter().map(|(id, _)| *id).collect();
        if let Some(job) = rec
            .jobs
            .iter()
            .find(|j| j.spec.script.is_some_and(|id| !held.contains(&id)))
        {
            return Err(format!("job {}: its script is not in the state", job.id));
        }
        // A dependency and its verdict go together (the verdict is what the apply decided).
        if let Some(job) = rec
            .jobs
            .iter()
            .find(|j| j.spec.dependency.is_some() != j.dependency_state.is_some())
        {
            return Err(format!(
                "job {}: a dependency without its state, or a state without one",
                job.id
            ));
        }
        for host in &rec.hosts {
            xce_client::types::validate_host_name(&host.name)?;
        }
        let versions = crate::store::OLDEST_FORMAT..=crate::store::STORE_FORMAT;
        if !versions.contains(&rec.active_version) {
            return Err(format!(
                "cluster version {} is not one this build runs ({} to {})",
                rec.active_version,
                versions.start(),
                versions.end()
            ));
        }
        if rec.user_tokens.len() > super::MAX_TOKENS {
            return Err(format!("{} user tokens", rec.user_tokens.len()));
        }
        let state = State::from_record(rec);
        for (id, token) in &state.user_tokens {
            super::users::check_token(id, token).map_err(|e| format!("user token {id}: {e}"))?;
        }
        state.check_invariants()?;
        Ok(state)
    }
}

/// `Err` naming the first key seen twice.
fn unique<K: Ord + std::fmt::Debug>(
    what: &str,
    keys: impl Iterator<Item = K>,
) -> Result<(), String> {
    let mut seen = BTreeSet::new();
    for key in keys {
        if let Some(dup) = seen.replace(key) {
            return Err(format!("{what} {dup:?} appears twice"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::stored::DependencyStateRecord;
    use crate::state::testing::{dispatch_cmd, join_cmd, spec, submit};
    use crate::state::Command;
    use xce_client::types::RequestToken;

    /// A state with a host, a placed job and a scheduler lease.
    fn busy() -> State {
        let mut s = State::default();
        s.apply(5, join_cmd(1, "w1", Vec::new()));
        submit(&mut s, 2, spec(&["true"]));
        s.apply(5, dispatch_cmd(3, 1, "w1"));
        s.apply(
            5,
            Command::AcquireScheduler {
                token: RequestToken(4),
                name: "s1".into(),
                instance: 1,
                ttl_ms: 1000,
            },
        );
        s
    }

    #[test]
    fn an_applied_state_passes_and_reads_back() {
        let s = busy();
        s.check_invariants().unwrap();
        assert_eq!(State::try_from_record(s.clone().into_record()).unwrap(), s);
    }

    /// What a forged snapshot could hold to overflow later arithmetic, or to confuse maps
    /// that would silently keep one of two entries, is refused by name.
    #[test]
    fn a_snapshot_that_breaks_a_rule_is_refused_by_name() {
        type Forge = Box<dyn Fn(&mut StateRecord)>;
        let cases: Vec<(&str, Forge)> = vec![
            (
                "epoch",
                Box::new(|r| r.scheduler.as_mut().unwrap().epoch = u64::MAX),
            ),
            ("next job id", Box::new(|r| r.next_job_id = u64::MAX)),
            ("attempt", Box::new(|r| r.jobs[0].attempt = u32::MAX)),
            ("outside 1..", Box::new(|r| r.jobs[0].id = 0)),
            ("twice", Box::new(|r| r.hosts.push(r.hosts[0].clone()))),
            ("host.name", Box::new(|r| r.hosts[0].name = "w 1".into())),
            ("without a host", Box::new(|r| r.jobs[0].host = None)),
            (
                "a dependency without its state",
                Box::new(|r| r.jobs[0].dependency_state = Some(DependencyStateRecord::Waiting)),
            ),
        ];
        for (fragment, forge) in cases {
            let mut record = busy().into_record();
            forge(&mut record);
            let e = State::try_from_record(record).unwrap_err();
            assert!(e.contains(fragment), "{fragment}: {e}");
        }
    }

    #[test]
    fn exhausted_epochs_and_attempts_are_refused_at_apply_not_wrapped() {
        let mut record = busy().into_record();
        record.scheduler.as_mut().unwrap().epoch = MAX_EPOCH;
        record.scheduler.as_mut().unwrap().expires_ms = 0;
        let mut s = State::try_from_record(record).unwrap();
        let acquire = Command::AcquireScheduler {
            token: RequestToken(9),
            name: "s2".into(),
            instance: 2,
            ttl_ms: 1000,
        };
        crate::state::testing::rejected_with(
            &s.apply(10, acquire),
            xce_proto::Status::Conflict,
            "exhausted",
        );
        s.check_invariants().unwrap();
    }
}
