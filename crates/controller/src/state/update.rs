//! `UpdateJob`: changes to one job after its submit (`xce update`, `xce hold`, `xce release`).
//! A pending job takes any change its owner or an operator asks, judged by the same rules as a
//! submit; a placed one only a new time limit, which its worker hands to the shim (the job
//! keeps running). A user may lower, never raise, their job's priority and time limit: what
//! an operator granted is the operator's to raise. The cluster's limits (a queue's maximum
//! time, the largest job) are the service's to check before it proposes, as at submit.

use xce_client::types::{JobChanges, JobId, JobSpec, JobState};
use xce_proto::Status;

use super::jobs::{no_such_job, not_owner};
use super::{is_placed, validate_spec, Outcome, Push, State};

impl State {
    pub(super) fn update(&mut self, id: JobId, by: Option<&str>, changes: JobChanges) -> Outcome {
        let Some(job) = self.jobs.get(&id) else {
            return no_such_job(id);
        };
        if let Some(refused) = not_owner(job, by, "change") {
            return refused;
        }
        if job.state.is_final() {
            return Outcome::rejected(
                Status::Conflict,
                format!("job {id}: already {}", job.state.name()),
            );
        }
        let mut spec = job.spec.clone();
        if let Err(refused) = change(&mut spec, &changes, by.is_some()) {
            return refused;
        }
        if let Err(message) = validate_spec(&spec) {
            return Outcome::rejected(Status::Invalid, message);
        }
        let placed = is_placed(job.state);
        if placed {
            if let Some(field) = pending_only(&changes) {
                return Outcome::rejected(
                    Status::Conflict,
                    format!(
                        "job {id} is {}: only its time limit can change, not its {field}",
                        job.state.name()
                    ),
                );
            }
        } else if let Some(Err(refused)) = changes.queue.as_deref().map(|q| self.admits(q)) {
            return refused;
        }
        let (host, attempt) = (job.host.clone(), job.attempt);
        let limit_changed = spec.limits != job.spec.limits;
        let time_limit_s = spec.limits.time_limit_s;
        self.update_job(id, |job| {
            job.spec = spec;
            if job.state == JobState::Pending {
                // The scheduler says anew why it waits.
                job.pend_reason = None;
                job.pend_code = None;
            }
        });
        if placed && limit_changed {
            self.push(Push::TimeLimit {
                host: host.unwrap_or_default(),
                id,
                attempt,
                time_limit_s,
            });
        }
        Outcome::Done
    }
}

/// The first change a placed job cannot take, by its field name.
fn pending_only(changes: &JobChanges) -> Option<&'static str> {
    let JobChanges {
        name,
        priority,
        queue,
        cpus,
        mem_mb,
        time_limit_s: _,
        hold,
        begin_time_ms,
    } = changes;
    [
        ("name", name.is_some()),
        ("priority", priority.is_some()),
        ("queue", queue.is_some()),
        ("cpus", cpus.is_some()),
        ("memory", mem_mb.is_some()),
        ("hold", hold.is_some()),
        ("begin time", begin_time_ms.is_some()),
    ]
    .into_iter()
    .find_map(|(field, set)| set.then_some(field))
}

/// `spec` with `changes` made; a user (`user_only`) may only lower priority and time.
fn change(spec: &mut JobSpec, changes: &JobChanges, user_only: bool) -> Result<(), Outcome> {
    let JobChanges {
        name,
        priority,
        queue,
        cpus,
        mem_mb,
        time_limit_s,
        hold,
        begin_time_ms,
    } = changes.clone();
    let raise = |what: &str, from: String, to: String| {
        Outcome::rejected(
            Status::Perm,
            format!("{what}: a user may lower their job's, not raise it ({from} to {to}); ask an operator"),
        )
    };
    if let Some(priority) = priority {
        if user_only && priority > spec.priority {
            return Err(raise(
                "priority",
                spec.priority.to_string(),
                priority.to_string(),
            ));
        }
        spec.priority = priority;
    }
    if let Some(limit) = time_limit_s {
        if limit == 0 {
            return Err(Outcome::rejected(
                Status::Invalid,
                "time_limit_s: must be at least 1".to_string(),
            ));
        }
        let now = spec.limits.time_limit_s;
        // No limit is the longest: any limit lowers it.
        if user_only && now.is_some_and(|now| limit > now) {
            let from = now.map_or_else(|| "no limit".to_string(), |s| format!("{s} s"));
            return Err(raise("time limit", from, format!("{limit} s")));
        }
        spec.limits.time_limit_s = Some(limit);
    }
    if let Some(name) = name {
        spec.name = name;
    }
    if let Some(queue) = queue {
        spec.queue = queue;
    }
    if let Some(cpus) = cpus {
        spec.resources.cpus = cpus.max(1);
    }
    if let Some(mem_mb) = mem_mb {
        spec.resources.mem_mb = mem_mb;
    }
    if let Some(hold) = hold {
        spec.hold = hold;
    }
    if let Some(begin) = begin_time_ms {
        spec.begin_time_ms = Some(begin).filter(|b| *b > 0);
    }
    Ok(())
}
