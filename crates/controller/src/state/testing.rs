//! Helpers shared by the state's unit tests.

use xce_client::types::{
    HeldJob, HeldPhase, HostAttributes, JobAction, JobEnd, JobId, JobOrder, JobSignal, JobSpec,
    RequestToken,
};
use xce_proto::Status;

use super::{Command, Event, Outcome, Push, State};

pub fn spec(cmd: &[&str]) -> JobSpec {
    JobSpec {
        command: cmd.iter().map(|s| s.to_string()).collect(),
        ..JobSpec::default()
    }
}

pub fn submit(state: &mut State, token: u128, spec: JobSpec) -> Outcome {
    state.apply(
        1000,
        Command::Submit {
            token: RequestToken(token),
            spec,
            script: None,
        },
    )
}

pub fn rejected_with(outcome: &Outcome, status: Status, fragment: &str) {
    match outcome {
        Outcome::Rejected { status: s, message } => {
            assert_eq!(*s, status, "{message}");
            assert!(message.contains(fragment), "{message:?} lacks {fragment:?}");
        }
        other => panic!("expected {status} rejection, got {other:?}"),
    }
}

/// Applies `cmd` and returns its outcome and the worker pushes it emitted.
pub fn apply_pushes(s: &mut State, cmd: Command) -> (Outcome, Vec<Push>) {
    let (outcome, events) = s.apply_emitting(5, cmd);
    let pushes = events
        .into_iter()
        .filter_map(|e| match e {
            Event::Push(p) => Some(p),
            _ => None,
        })
        .collect();
    (outcome, pushes)
}

pub fn join_with(t: u128, host: &str, cpus: u32, mem_mb: u64, held: Vec<HeldJob>) -> Command {
    Command::RegisterHost {
        token: RequestToken(t),
        host: HostAttributes {
            name: host.into(),
            resources: xce_client::types::Resources::new(cpus, mem_mb),
            spool_dir: "/spool".into(),
            job_users: xce_client::types::JobUsers::Any,
        },
        held,
    }
}

/// A join of an 8-cpu host that reports no memory.
pub fn join_cmd(t: u128, host: &str, held: Vec<HeldJob>) -> Command {
    join_with(t, host, 8, 0, held)
}

pub fn dispatch_cmd(t: u128, id: JobId, host: &str) -> Command {
    Command::Dispatch {
        token: RequestToken(t),
        id,
        host: host.into(),
    }
}

pub fn control_cmd(t: u128, id: JobId, action: JobAction) -> Command {
    Command::ControlJob {
        token: RequestToken(t),
        id,
        action,
        by: None,
        actor: None,
    }
}

/// A state with host `w1` (8 cpus) and `n` one-cpu jobs in `normal`, all dispatched to
/// `w1` and reported started (attempt 1).
pub fn running_on_w1(n: u64) -> State {
    let mut s = State::default();
    s.apply(0, join_cmd(900, "w1", vec![]));
    for id in 1..=n {
        submit(&mut s, 1000 + id as u128, spec(&["sleep", "9"]));
        let t = 2000 + id as u128 * 10;
        assert_eq!(s.apply(1, dispatch_cmd(t, id, "w1")), Outcome::Done);
        let started = s.apply(
            2,
            Command::JobStarted {
                token: RequestToken(t + 1),
                id,
                attempt: 1,
                host: "w1".into(),
            },
        );
        assert_eq!(started, Outcome::Done);
    }
    s
}

pub fn control(s: &mut State, t: u128, id: JobId, action: JobAction) -> Outcome {
    s.apply(5, control_cmd(t, id, action))
}

pub fn finish_on(
    s: &mut State,
    t: u128,
    id: JobId,
    attempt: u32,
    host: &str,
    end: JobEnd,
) -> Outcome {
    s.apply(
        9,
        Command::JobFinished {
            token: RequestToken(t),
            id,
            attempt,
            host: host.into(),
            end,
            usage: None,
        },
    )
}

pub fn finish(s: &mut State, t: u128, id: JobId, attempt: u32, end: JobEnd) -> Outcome {
    finish_on(s, t, id, attempt, "w1", end)
}

pub fn order(id: JobId, attempt: u32, signal: JobSignal) -> JobOrder {
    JobOrder {
        id,
        attempt,
        signal,
    }
}

pub fn held(id: JobId, attempt: u32, phase: HeldPhase) -> HeldJob {
    HeldJob { id, attempt, phase }
}
