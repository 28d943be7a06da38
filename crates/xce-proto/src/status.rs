//! The one status taxonomy of DESIGN §3, shared by the controller (which answers it), the
//! client library (which classifies it) and the CLI and HTTP API (which print its names).

use std::fmt;

use crate::xce_capnp as wire;

/// A reply status. The names (`Status::name`) are part of the public contract: they are the
/// `code` of JSON errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Status {
    Ok,
    Redirect,
    Standby,
    NoMaster,
    NotReady,
    DupJob,
    Auth,
    Perm,
    Invalid,
    NoEnt,
    Conflict,
    Internal,
}

/// Every status, in wire order; for exhaustive tests.
pub const ALL_STATUSES: [Status; 12] = [
    Status::Ok,
    Status::Redirect,
    Status::Standby,
    Status::NoMaster,
    Status::NotReady,
    Status::DupJob,
    Status::Auth,
    Status::Perm,
    Status::Invalid,
    Status::NoEnt,
    Status::Conflict,
    Status::Internal,
];

impl Status {
    /// The contract name (`noMaster`, `dupJob`, ...), as printed in JSON errors.
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Redirect => "redirect",
            Status::Standby => "standby",
            Status::NoMaster => "noMaster",
            Status::NotReady => "notReady",
            Status::DupJob => "dupJob",
            Status::Auth => "auth",
            Status::Perm => "perm",
            Status::Invalid => "invalid",
            Status::NoEnt => "noEnt",
            Status::Conflict => "conflict",
            Status::Internal => "internal",
        }
    }

    /// Parses a contract name; the inverse of [`Status::name`].
    pub fn from_name(name: &str) -> Option<Status> {
        ALL_STATUSES.into_iter().find(|s| s.name() == name)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl From<Status> for wire::Status {
    fn from(s: Status) -> Self {
        match s {
            Status::Ok => wire::Status::Ok,
            Status::Redirect => wire::Status::Redirect,
            Status::Standby => wire::Status::Standby,
            Status::NoMaster => wire::Status::NoMaster,
            Status::NotReady => wire::Status::NotReady,
            Status::DupJob => wire::Status::DupJob,
            Status::Auth => wire::Status::Auth,
            Status::Perm => wire::Status::Perm,
            Status::Invalid => wire::Status::Invalid,
            Status::NoEnt => wire::Status::NoEnt,
            Status::Conflict => wire::Status::Conflict,
            Status::Internal => wire::Status::Internal,
        }
    }
}

impl From<wire::Status> for Status {
    fn from(s: wire::Status) -> Self {
        match s {
            wire::Status::Ok => Status::Ok,
            wire::Status::Redirect => Status::Redirect,
            wire::Status::Standby => Status::Standby,
            wire::Status::NoMaster => Status::NoMaster,
            wire::Status::NotReady => Status::NotReady,
            wire::Status::DupJob => Status::DupJob,
            wire::Status::Auth => Status::Auth,
            wire::Status::Perm => Status::Perm,
            wire::Status::Invalid => Status::Invalid,
            wire::Status::NoEnt => Status::NoEnt,
            wire::Status::Conflict => Status::Conflict,
            wire::Status::Internal => Status::Internal,
        }
    }
}

/// A status value this build does not know (a newer peer); callers treat it as `internal`.
#[derive(Debug, thiserror::Error)]
#[error("unknown status value {0} on the wire")]
pub struct UnknownStatus(pub u16);

impl From<capnp::NotInSchema> for UnknownStatus {
    fn from(e: capnp::NotInSchema) -> Self {
        UnknownStatus(e.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_match_the_wire_order() {
        for (i, s) in ALL_STATUSES.into_iter().enumerate() {
            assert_eq!(Status::from_name(s.name()), Some(s));
            assert_eq!(wire::Status::from(s) as usize, i);
            assert_eq!(Status::from(wire::Status::from(s)), s);
        }
        assert_eq!(Status::from_name("clusterNotReady"), None);
    }
}
