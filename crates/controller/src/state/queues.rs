//! Queue transitions: operator open/close/activate/inactivate and the configured definitions
//! each new primary brings in with its barrier. Each change goes through `State::update_queue`.

use xce_client::types::QueueAction;
use xce_proto::Status;

use super::{Outcome, QueueDef, QueueState, State};

impl State {
    pub(super) fn control_queue(&mut self, name: &str, action: QueueAction) -> Outcome {
        let changed = self.update_queue(name, None, |q| match action {
            QueueAction::Open => q.open = true,
            QueueAction::Close => q.open = false,
            QueueAction::Activate => q.active = true,
            QueueAction::Inactivate => q.active = false,
        });
        match changed {
            Some(()) => Outcome::Done,
            None => Outcome::rejected(Status::NoEnt, format!("queue {name:?}: no such queue")),
        }
    }

    /// Refuses a job into queue `name` unless it exists and is open: what a submit and a
    /// pending job's move to another queue both need.
    pub(super) fn admits(&self, name: &str) -> Result<(), Outcome> {
        match self.queues.get(name) {
            None => Err(Outcome::rejected(
                Status::NoEnt,
                format!("queue: no such queue {name:?}"),
            )),
            Some(q) if !q.open => Err(Outcome::rejected(
                Status::Conflict,
                format!("queue: {name:?} is closed to new jobs"),
            )),
            Some(_) => Ok(()),
        }
    }

    /// Adds configured queues that are missing and updates the priority and policy of known
    /// ones; their open/active state is operator state and stays as it is.
    pub(super) fn define_queues(&mut self, queues: Vec<QueueDef>) -> Outcome {
        for def in queues {
            let fresh = QueueState {
                priority: def.priority,
                open: true,
                active: true,
                on_host_lost: def.on_host_lost,
            };
            self.update_queue(&def.name, Some(fresh), |q| {
                q.priority = def.priority;
                q.on_host_lost = def.on_host_lost;
            });
        }
        Outcome::Done
    }
}

#[cfg(test)]
mod tests {
    use xce_client::types::RequestToken;

    use super::super::testing::*;
    use super::super::{Command, Event, LostPolicy};
    use super::*;

    fn ctl(s: &mut State, t: u128, name: &str, action: QueueAction) -> (Outcome, Vec<Event>) {
        s.apply_emitting(
            1,
            Command::ControlQueue {
                token: RequestToken(t),
                name: name.into(),
                action,
            },
        )
    }

    #[test]
    fn queue_controls_and_closed_queues() {
        let mut s = State::default();
        let (outcome, events) = ctl(&mut s, 1, "normal", QueueAction::Close);
        assert_eq!(outcome, Outcome::Done);
        assert_eq!(
            events,
            vec![Event::Queue {
                name: "normal".into(),
                priority: 30,
                open: false,
                active: true
            }]
        );
        // Closing a closed queue changes nothing, so it emits nothing.
        assert_eq!(ctl(&mut s, 11, "normal", QueueAction::Close).1, vec![]);
        rejected_with(&submit(&mut s, 2, spec(&["x"])), Status::Conflict, "closed");
        assert_eq!(
            ctl(&mut s, 3, "normal", QueueAction::Inactivate).0,
            Outcome::Done
        );
        let q = &s.queues()[0];
        assert!(!q.open && !q.active);
        assert_eq!(ctl(&mut s, 4, "normal", QueueAction::Open).0, Outcome::Done);
        assert_eq!(
            ctl(&mut s, 5, "normal", QueueAction::Activate).0,
            Outcome::Done
        );
        assert_eq!(submit(&mut s, 6, spec(&["x"])), Outcome::Submitted(1));
        rejected_with(
            &ctl(&mut s, 7, "gpu", QueueAction::Open).0,
            Status::NoEnt,
            "gpu",
        );
    }

    #[test]
    fn barrier_defines_queues_and_keeps_operator_state() {
        let mut s = State::default();
        ctl(&mut s, 1, "normal", QueueAction::Close);
        let defs = vec![
            QueueDef {
                name: "normal".into(),
                priority: 10,
                on_host_lost: LostPolicy::Requeue,
            },
            QueueDef {
                name: "high".into(),
                priority: 50,
                on_host_lost: LostPolicy::Exit,
            },
        ];
        let (_, events) = s.apply_emitting(
            2,
            Command::Barrier {
                term: 3,
                queues: defs.clone(),
            },
        );
        assert_eq!(events.len(), 2, "{events:?}");
        let qs = s.queues();
        assert_eq!(qs[0].name, "high");
        assert_eq!(
            (qs[1].name.as_str(), qs[1].priority, qs[1].open),
            ("normal", 10, false)
        );
        // The next primary's barrier with the same definitions changes nothing.
        let (_, again) = s.apply_emitting(
            3,
            Command::Barrier {
                term: 4,
                queues: defs,
            },
        );
        assert_eq!(again, vec![]);
    }
}
