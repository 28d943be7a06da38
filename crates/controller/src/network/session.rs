//! Who is calling, checked in one place. Every connection has a [`Session`]: a plain `user`
//! until it joins, then the role it joined with and, for a worker, its host. Every method of
//! the `Controller` interface passes [`authorize`] before its handler runs, and handlers take
//! a worker's host from the session, never from the request.
//!
//! With TLS, the session starts with the role its certificate names and a join can neither
//! claim another role nor, for a worker, another host than the certificate's name. Without
//! TLS (loopback only, and with a warning) a role is claimed at join.

use xce_client::tls::Identity;
use xce_client::types::Role;
use xce_client::wire::ReplyHeader;
use xce_proto::Status;

/// What a connection has established about its caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub role: Role,
    /// The host a worker joined as: its reports and heartbeats speak for this host only.
    pub host: Option<String>,
    /// Who the connection's certificate proves the caller is, with TLS.
    pub certified: Option<Identity>,
    /// Whether a join set the role: a daemon that joined is never evicted for a new
    /// connection, while one that only holds a daemon's certificate is.
    pub joined: bool,
}

impl Default for Session {
    fn default() -> Self {
        Session {
            role: Role::User,
            host: None,
            certified: None,
            joined: false,
        }
    }
}

impl Session {
    /// A new connection's session: a plain user, or with a certificate the role it names.
    pub fn new(certified: Option<Identity>) -> Session {
        Session {
            role: certified.as_ref().map_or(Role::User, |id| id.role),
            host: None,
            certified,
            joined: false,
        }
    }

    /// Whether the connection may give way to a new one at the connection limit: a plain
    /// user's, or any that has not joined (a certificate alone pins nothing).
    pub fn evictable(&self) -> bool {
        self.role == Role::User || !self.joined
    }

    /// Whether this connection may join as `role` (and, for a worker, as host `host`):
    /// always without a certificate; with one, only as what it names.
    pub fn may_join(&self, role: Role, host: &str) -> Result<(), ReplyHeader> {
        let Some(id) = &self.certified else {
            return Ok(());
        };
        let refuse = |what: String| {
            Err(ReplyHeader::status(
                Status::Perm,
                format!("join as {what}: this connection's certificate is {id}'s"),
            ))
        };
        if role != id.role {
            return refuse(format!("a {role}"));
        }
        if role == Role::Worker && host != id.name {
            return refuse(format!("host {host:?}"));
        }
        Ok(())
    }
}

/// Every method of the `Controller` interface, by its schema name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    Submit,
    ListJobs,
    JobInfo,
    JobControl,
    ListQueues,
    QueueControl,
    ClusterInfo,
    Raft,
    ListHosts,
    HostControl,
    Join,
    Heartbeat,
    Dispatch,
    JobStarted,
    JobFinished,
    Subscribe,
    Ping,
    AcquireScheduler,
    DispatchBatch,
    SetPendReasons,
}

impl Method {
    /// Every method, for the table's tests.
    pub const ALL: [Method; 20] = [
        Method::Submit,
        Method::ListJobs,
        Method::JobInfo,
        Method::JobControl,
        Method::ListQueues,
        Method::QueueControl,
        Method::ClusterInfo,
        Method::Raft,
        Method::ListHosts,
        Method::HostControl,
        Method::Join,
        Method::Heartbeat,
        Method::Dispatch,
        Method::JobStarted,
        Method::JobFinished,
        Method::Subscribe,
        Method::Ping,
        Method::AcquireScheduler,
        Method::DispatchBatch,
        Method::SetPendReasons,
    ];

    /// The schema name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Method::Submit => "submit",
            Method::ListJobs => "listJobs",
            Method::JobInfo => "jobInfo",
            Method::JobControl => "jobControl",
            Method::ListQueues => "listQueues",
            Method::QueueControl => "queueControl",
            Method::ClusterInfo => "clusterInfo",
            Method::Raft => "raft",
            Method::ListHosts => "listHosts",
            Method::HostControl => "hostControl",
            Method::Join => "join",
            Method::Heartbeat => "heartbeat",
            Method::Dispatch => "dispatch",
            Method::JobStarted => "jobStarted",
            Method::JobFinished => "jobFinished",
            Method::Subscribe => "subscribe",
            Method::Ping => "ping",
            Method::AcquireScheduler => "acquireScheduler",
            Method::DispatchBatch => "dispatchBatch",
            Method::SetPendReasons => "setPendReasons",
        }
    }
}

/// The table: which roles may call a method.
pub fn allowed(method: Method, role: Role) -> bool {
    use Role::*;
    match method {
        // Reads, and joining (which is how a connection gets a role at all).
        Method::ListJobs
        | Method::JobInfo
        | Method::ListQueues
        | Method::ClusterInfo
        | Method::ListHosts
        | Method::Subscribe
        | Method::Ping
        | Method::Join => true,
        // Users' own work; the apiserver acts for users.
        Method::Submit | Method::JobControl => matches!(role, User | Operator | Admin | Apiserver),
        Method::QueueControl | Method::HostControl => matches!(role, Operator | Admin),
        // Placement by hand: an operator's. A scheduler places through `dispatchBatch`, whose
        // lease epoch fences a deposed scheduler; a plain dispatch carries none.
        Method::Dispatch => matches!(role, Operator | Admin),
        Method::AcquireScheduler | Method::DispatchBatch | Method::SetPendReasons => {
            role == Scheduler
        }
        Method::Heartbeat | Method::JobStarted | Method::JobFinished => role == Worker,
        Method::Raft => role == Controller,
    }
}

/// `Ok` when the session may call `method`; otherwise the `perm` header to answer with.
pub fn authorize(method: Method, session: &Session) -> Result<(), ReplyHeader> {
    if allowed(method, session.role) {
        return Ok(());
    }
    Err(ReplyHeader::status(
        Status::Perm,
        format!(
            "{}: not allowed for a {} connection{}",
            method.name(),
            session.role.name(),
            if session.role == Role::User {
                " (it has not joined with a role that may)"
            } else {
                ""
            }
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole table, every method against every role, written out so that a change to it
    /// is a change to this test.
    #[test]
    fn every_method_against_every_role() {
        use Role::*;
        let all = Role::ALL;
        let expected: [(Method, &[Role]); 20] = [
            (Method::Submit, &[User, Operator, Admin, Apiserver]),
            (Method::ListJobs, all),
            (Method::JobInfo, all),
            (Method::JobControl, &[User, Operator, Admin, Apiserver]),
            (Method::ListQueues, all),
            (Method::QueueControl, &[Operator, Admin]),
            (Method::ClusterInfo, all),
            (Method::Raft, &[Controller]),
            (Method::ListHosts, all),
            (Method::HostControl, &[Operator, Admin]),
            (Method::Join, all),
            (Method::Heartbeat, &[Worker]),
            (Method::Dispatch, &[Operator, Admin]),
            (Method::JobStarted, &[Worker]),
            (Method::JobFinished, &[Worker]),
            (Method::Subscribe, all),
            (Method::Ping, all),
            (Method::AcquireScheduler, &[Scheduler]),
            (Method::DispatchBatch, &[Scheduler]),
            (Method::SetPendReasons, &[Scheduler]),
        ];
        assert_eq!(
            expected.iter().map(|(m, _)| *m).collect::<Vec<_>>(),
            Method::ALL.to_vec()
        );
        for (method, roles) in expected {
            for role in Role::ALL {
                let session = Session {
                    role: *role,
                    ..Session::default()
                };
                let got = authorize(method, &session);
                assert_eq!(
                    got.is_ok(),
                    roles.contains(role),
                    "{} as {}",
                    method.name(),
                    role.name()
                );
                if let Err(h) = got {
                    assert_eq!(h.status, Status::Perm);
                    assert!(h.message.contains(method.name()), "{}", h.message);
                }
            }
        }
    }

    #[test]
    fn a_connection_that_never_joined_is_a_plain_user() {
        let plain = Session::default();
        for method in [
            Method::Dispatch,
            Method::JobStarted,
            Method::JobFinished,
            Method::Heartbeat,
            Method::Raft,
            Method::DispatchBatch,
        ] {
            let refused = authorize(method, &plain).unwrap_err();
            assert_eq!(refused.status, Status::Perm);
            assert!(
                refused.message.contains("not joined"),
                "{}",
                refused.message
            );
        }
    }
}
