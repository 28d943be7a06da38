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
        if job.array.is_some() {
            return Outcome::rejected(
                Status::Conflict,
                format!("job {id} is an array: signal each task by its own id"),
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

#[cfg(test)]
mod tests {
    use xce_client::types::RequestToken;
    use xce_proto::Status;

    use crate::state::testing::*;
    use crate::state::{Command, Outcome, Push};

    fn signal(t: u128, by: Option<&str>, signal: i32) -> Command {
        Command::SignalJob {
            token: RequestToken(t),
            id: 1,
            by: by.map(str::to_string),
            signal,
            leader_only: true,
        }
    }

    #[test]
    fn a_running_job_is_signalled_once_through_its_worker() {
        let mut s = running_on_w1(1);
        let (outcome, pushes) = apply_pushes(&mut s, signal(7, None, 10));
        assert_eq!(outcome, Outcome::Done);
        assert_eq!(
            pushes,
            vec![Push::SendSignal {
                host: "w1".into(),
                id: 1,
                attempt: 1,
                signal: 10,
                leader_only: true,
            }]
        );
        // The same request again is answered from memory and sends nothing.
        let (again, pushes) = apply_pushes(&mut s, signal(7, None, 10));
        assert!(matches!(again, Outcome::Duplicate(_)), "{again:?}");
        assert_eq!(pushes, vec![]);
        rejected_with(
            &s.apply(5, signal(8, Some("bob"), 10)),
            Status::Perm,
            "only their own jobs",
        );
        rejected_with(
            &s.apply(5, signal(9, None, 65)),
            Status::Invalid,
            "not a signal",
        );
    }

    #[test]
    fn a_pending_job_is_not_signalled() {
        let mut s = crate::state::State::default();
        submit(&mut s, 1, spec(&["true"]));
        rejected_with(
            &s.apply(5, signal(2, None, 10)),
            Status::Conflict,
            "only a running job",
        );
    }
}
