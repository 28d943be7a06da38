//! `SignalJob`: any signal to a running job's processes (`xce signal`, `xce kill --signal`),
//! carried to its worker like the kill order, once: a signal is an event, not a state, so
//! nothing replays it after a worker restart.

use xce_client::types::{JobId, JobState};
use xce_proto::Status;

use super::jobs::{no_such_job, not_owner};
use super::{Outcome, Push, State};

impl State {
    pub(super) fn signal_job(
        &mut self,
        id: JobId,
        by: Option<&str>,
        signal: i32,
        leader_only: bool,
    ) -> Outcome {
        let Some(job) = self.jobs.get(&id) else {
            return no_such_job(id);
        };
        if let Some(refused) = not_owner(job, by, "signal") {
            return refused;
        }
        if !(1..=xce_client::signals::MAX_SIGNAL).contains(&signal) {
            return Outcome::rejected(
                Status::Invalid,
                format!("signal: {signal} is not a signal number"),
            );
        }
        if !matches!(job.state, JobState::Running | JobState::Suspended) {
            return Outcome::rejected(
                Status::Conflict,
                format!(
                    "job {id} is {}: only a running job can be signalled",
                    job.state.name()
                ),
            );
        }
        let push = Push::SendSignal {
            host: job.host.clone().unwrap_or_default(),
            id,
            attempt: job.attempt,
            signal,
            leader_only,
        };
        self.push(push);
        Outcome::Done
    }
}
