//! The cluster's active version: the store format every member can apply, so the one the
//! cluster writes. Raised by a command the primary proposes once every member reports a build
//! of a newer version (`node::versions`), never lowered, and never past what this build reads.

use xce_proto::Status;

use super::{Outcome, State};
use crate::store::STORE_FORMAT;

impl State {
    /// Raises the active version to `to`. Not a step back or sideways, and not past this
    /// build's own version (an entry of a newer format could not have been decoded here).
    pub(super) fn raise_version(&mut self, to: u32) -> Outcome {
        if to <= self.active_version {
            return Outcome::rejected(
                Status::Conflict,
                format!(
                    "the cluster version is {} already; it is never lowered",
                    self.active_version
                ),
            );
        }
        if to > STORE_FORMAT {
            return Outcome::rejected(
                Status::Invalid,
                format!("cluster version {to} is newer than this build's {STORE_FORMAT}"),
            );
        }
        self.active_version = to;
        Outcome::Done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Command;

    #[test]
    fn the_version_only_goes_up_and_never_past_this_build() {
        let mut s = State::default();
        assert_eq!(s.active_version(), crate::store::OLDEST_FORMAT);
        let raise = |s: &mut State, to| s.apply(1, Command::RaiseVersion { to });
        assert_eq!(raise(&mut s, STORE_FORMAT), Outcome::Done);
        assert_eq!(s.active_version(), STORE_FORMAT);
        assert!(matches!(
            raise(&mut s, STORE_FORMAT),
            Outcome::Rejected {
                status: Status::Conflict,
                ..
            }
        ));
        assert!(matches!(
            raise(&mut s, 6),
            Outcome::Rejected {
                status: Status::Conflict,
                ..
            }
        ));
        assert!(matches!(
            raise(&mut s, STORE_FORMAT + 1),
            Outcome::Rejected {
                status: Status::Invalid,
                ..
            }
        ));
        assert_eq!(s.active_version(), STORE_FORMAT);
    }
}
