//! The failover classifier: one pure function from a call outcome to what the engine does next,
//! exactly the table of DESIGN §3.

use xce_proto::Status;

use crate::connection::TransportError;
use crate::ops::{OpKind, Reply};

/// What to do after one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action<T> {
    /// Done; hand the value to the caller.
    Success(T),
    /// Move to another controller at once, the redirect hint first when there is one.
    RetryNow { hint: Option<(String, u16)> },
    /// Wait (jittered backoff, one budget attempt), then retry: on the same node when it is the
    /// primary but not ready yet, else on the next candidate.
    RetryBackoff { same_node: bool },
    /// Surface this status to the caller unchanged.
    Terminal { status: Status, message: String },
}

/// Classifies one attempt. `attempt` counts sends of this op, 0 for the first: `dupJob` on a
/// re-sent write is our own earlier write having landed, so it is success with the original
/// result; on a first send it is a genuine duplicate and is surfaced.
pub fn classify<T>(
    outcome: Result<Reply<T>, TransportError>,
    kind: OpKind,
    attempt: u32,
) -> Action<T> {
    let reply = match outcome {
        Ok(reply) => reply,
        // The controller received the request and failed it (a request it could not decode,
        // a method it does not have): every other node would too.
        Err(TransportError::Rpc { reason, .. }) => {
            return Action::Terminal {
                status: Status::Internal,
                message: reason,
            }
        }
        Err(_) => return Action::RetryNow { hint: None },
    };
    let status = reply.header.status;
    match status {
        Status::Ok => match reply.value {
            Some(v) => Action::Success(v),
            None => Action::Terminal {
                status: Status::Internal,
                message: "ok reply without a value".into(),
            },
        },
        Status::DupJob if kind == OpKind::Write && attempt > 0 => match reply.value {
            Some(v) => Action::Success(v),
            None => Action::Terminal {
                status,
                message: reply.header.message,
            },
        },
        Status::Redirect => Action::RetryNow {
            hint: reply.header.redirect,
        },
        Status::Standby => Action::RetryNow { hint: None },
        Status::NoMaster => Action::RetryBackoff { same_node: false },
        Status::NotReady => Action::RetryBackoff { same_node: true },
        Status::DupJob
        | Status::Auth
        | Status::Perm
        | Status::Invalid
        | Status::NoEnt
        | Status::Conflict
        | Status::Internal => Action::Terminal {
            status,
            message: reply.header.message,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ReplyHeader;
    use xce_proto::ALL_STATUSES;

    fn reply(status: Status, value: Option<u64>) -> Result<Reply<u64>, TransportError> {
        let mut header = ReplyHeader::status(status, "m");
        if status == Status::Redirect {
            header.redirect = Some(("h".into(), 1));
        }
        Ok(Reply { header, value })
    }

    fn check(status: Status, kind: OpKind, attempt: u32, expected: Action<u64>) {
        let value = matches!(status, Status::Ok | Status::DupJob).then_some(7);
        assert_eq!(
            classify(reply(status, value), kind, attempt),
            expected,
            "{status} {kind:?} attempt {attempt}"
        );
    }

    #[test]
    fn every_row_of_the_table() {
        use OpKind::*;
        for kind in [Read, Write] {
            for attempt in [0, 1, 5] {
                check(Status::Ok, kind, attempt, Action::Success(7));
                check(
                    Status::Redirect,
                    kind,
                    attempt,
                    Action::RetryNow {
                        hint: Some(("h".into(), 1)),
                    },
                );
                check(
                    Status::Standby,
                    kind,
                    attempt,
                    Action::RetryNow { hint: None },
                );
                check(
                    Status::NoMaster,
                    kind,
                    attempt,
                    Action::RetryBackoff { same_node: false },
                );
                check(
                    Status::NotReady,
                    kind,
                    attempt,
                    Action::RetryBackoff { same_node: true },
                );
                for s in [
                    Status::Auth,
                    Status::Perm,
                    Status::Invalid,
                    Status::NoEnt,
                    Status::Conflict,
                    Status::Internal,
                ] {
                    check(
                        s,
                        kind,
                        attempt,
                        Action::Terminal {
                            status: s,
                            message: "m".into(),
                        },
                    );
                }
            }
        }
        let dup = Action::Terminal {
            status: Status::DupJob,
            message: "m".into(),
        };
        check(Status::DupJob, Write, 0, dup.clone());
        check(Status::DupJob, Read, 3, dup);
        check(Status::DupJob, Write, 1, Action::Success(7));
    }

    use proptest::prelude::*;

    proptest! {
        /// Over every status, op kind, attempt and value presence: only `ok` with a value, or
        /// `dupJob` with a value on a re-sent write, is success; redirect, standby, noMaster
        /// and notReady always retry; the rest are always surfaced.
        #[test]
        fn classification_invariants(
            i in 0usize..ALL_STATUSES.len(),
            write in any::<bool>(),
            attempt in 0u32..5,
            value in proptest::option::of(any::<u64>()),
        ) {
            let status = ALL_STATUSES[i];
            let kind = if write { OpKind::Write } else { OpKind::Read };
            let header = ReplyHeader::status(status, "m");
            let got = classify(Ok(Reply { header, value }), kind, attempt);
            let success = matches!(got, Action::Success(_));
            let expect_success = value.is_some()
                && (status == Status::Ok || (status == Status::DupJob && write && attempt > 0));
            prop_assert_eq!(success, expect_success, "{} {:?} {}", status, kind, attempt);
            let right_kind = match status {
                Status::Redirect | Status::Standby => matches!(got, Action::RetryNow { .. }),
                Status::NoMaster | Status::NotReady => matches!(got, Action::RetryBackoff { .. }),
                Status::Ok | Status::DupJob => true,
                _ => matches!(got, Action::Terminal { status: s, .. } if s == status),
            };
            prop_assert!(right_kind, "{} {:?} {} -> {:?}", status, kind, attempt, got);
        }
    }

    #[test]
    fn a_request_the_controller_failed_is_terminal() {
        let e = TransportError::Rpc {
            addr: "a".into(),
            reason: "unimplemented".into(),
        };
        assert_eq!(
            classify::<u64>(Err(e), OpKind::Read, 0),
            Action::Terminal {
                status: Status::Internal,
                message: "unimplemented".into()
            }
        );
    }

    #[test]
    fn transport_errors_rotate_now() {
        let e = TransportError::Timeout {
            addr: "a".into(),
            after: std::time::Duration::from_secs(1),
        };
        assert_eq!(
            classify::<u64>(Err(e), OpKind::Write, 0),
            Action::RetryNow { hint: None }
        );
    }

    #[test]
    fn redirect_standby_and_no_primary_are_never_success() {
        for s in ALL_STATUSES {
            for attempt in 0..3 {
                let got = classify(reply(s, Some(1)), OpKind::Write, attempt);
                if matches!(
                    s,
                    Status::Redirect | Status::Standby | Status::NoMaster | Status::NotReady
                ) {
                    assert!(!matches!(got, Action::Success(_)), "{s}");
                }
            }
        }
    }
}
