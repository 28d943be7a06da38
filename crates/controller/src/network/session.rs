//! Who is calling, checked in one place. Every connection has a [`Session`]: a plain `user`
//! until it joins, then the role it joined with and, for a worker, its host. Every method of
//! the `Controller` interface passes [`authorize`] before its handler runs, and handlers take
//! a worker's host from the session, never from the request.
//!
//! With TLS, the session starts with the role its certificate names and a join can neither
//! claim another role nor, for a worker, another host than the certificate's name. Without
//! TLS (loopback only, and with a warning) a role is claimed at join. A person's connection
//! (a certificate of role user, operator or admin, or none) may `authenticate` with a token:
//! the session then has the token's user and role, and every call re-checks the token.

use xce_client::tls::Identity;
use xce_client::tokens::SecretHash;
use xce_client::types::{Principal, Role};
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
    /// Who the caller is, for a person: the token's user, or the certificate's name. Jobs
    /// submitted here are this user's, and a `user` controls only those.
    pub user: Option<String>,
    /// The token that set `user` and `role` (its id and its secret's hash); every call
    /// checks it still holds, so neither a revocation nor a new token under a revoked id
    /// leaves this session acting.
    pub token: Option<(String, SecretHash)>,
    /// Made by `actAs` for the apiserver, which keeps it for that token's later requests:
    /// its token is re-checked by every call, also those [`checks_token`] exempts (they
    /// let a connection's own caller find the primary and prove itself again; here
    /// nothing else would notice a revocation).
    pub acted: bool,
}

impl Default for Session {
    fn default() -> Self {
        Session {
            role: Role::User,
            host: None,
            certified: None,
            joined: false,
            user: None,
            token: None,
            acted: false,
        }
    }
}

impl Session {
    /// A new connection's session: a plain user, or with a certificate the role it names.
    pub fn new(certified: Option<Identity>) -> Session {
        // A person's certificate names its user, when the name is one a job can carry.
        let user = certified
            .as_ref()
            .filter(|id| is_person(id.role))
            .filter(|id| crate::state::validate_user_name(&id.name).is_ok())
            .map(|id| id.name.clone());
        Session {
            role: certified.as_ref().map_or(Role::User, |id| id.role),
            host: None,
            certified,
            joined: false,
            user,
            token: None,
            acted: false,
        }
    }

    /// The user whose own jobs alone this session may control: a `user`'s, when known.
    pub fn own_jobs_only(&self) -> Option<String> {
        if self.role != Role::User {
            return None;
        }
        match (&self.user, &self.certified) {
            (Some(user), _) => Some(user.clone()),
            // Authentication is off (no certificate at all): nothing to restrict by.
            (None, None) => None,
            // Authenticated, but by no name a job can carry: no job is this caller's.
            (None, Some(_)) => Some(String::new()),
        }
    }

    /// Whether this connection may authenticate with a token: a person's may, a daemon's
    /// (by its certificate or its join) may not, so that a worker's connection keeps
    /// speaking for its host alone.
    pub fn may_authenticate(&self) -> Result<(), ReplyHeader> {
        let daemon = self
            .certified
            .as_ref()
            .map(|id| id.role)
            .filter(|r| !takes_tokens(*r))
            .or((self.joined && !takes_tokens(self.role)).then_some(self.role));
        match daemon {
            Some(role) => Err(ReplyHeader::status(
                Status::Perm,
                format!("authenticate: a {role} connection cannot take a user's token"),
            )),
            None => Ok(()),
        }
    }

    /// A token proved the caller: the session takes its user and role.
    pub fn authenticated(&mut self, token_id: &str, hash: SecretHash, who: Principal) {
        self.role = who.role;
        self.user = Some(who.user);
        self.token = Some((token_id.to_string(), hash));
    }

    /// Whether the connection may give way to a new one at the connection limit: a plain
    /// user's, or any that has not joined (a certificate alone pins nothing).
    pub fn evictable(&self) -> bool {
        self.role == Role::User || !self.joined
    }

    /// Whether the connection joined as a daemon with nothing to prove it (no certificate):
    /// such connections may not pin every place at the connection limit, or anyone could
    /// lock clients out by claiming to be a worker.
    pub fn role_is_claimed(&self) -> bool {
        self.joined && self.role != Role::User && self.certified.is_none()
    }

    /// Whether a claimed role's connection may give way beyond its share: never a
    /// controller peer's, whose Raft traffic does not pass the client methods and so never
    /// looks recent.
    pub fn claimed_and_evictable(&self) -> bool {
        self.role_is_claimed() && self.role != Role::Controller
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

/// Whether `role` is a person's (a token may carry it), not a daemon's.
pub fn is_person(role: Role) -> bool {
    crate::state::TOKEN_ROLES.contains(&role)
}

/// Whether a connection of `role` may present a token: a person's, or a login host's.
fn takes_tokens(role: Role) -> bool {
    is_person(role) || role == Role::Login
}

/// Whether a call of `method` re-checks the session's token first. Not the calls that find
/// and reach a primary, nor a new `authenticate`: a caller whose token was revoked may
/// still learn where the primary is and prove itself again.
pub fn checks_token(method: Method) -> bool {
    !matches!(
        method,
        Method::Ping | Method::ClusterInfo | Method::Authenticate
    )
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
    Authenticate,
    CreateToken,
    ListTokens,
    RevokeToken,
    ActAs,
    SaveSnapshot,
    RestoreSnapshot,
    AddController,
    RemoveController,
    UpdateJob,
    SignalJob,
    JobScript,
    ControlTasks,
    GetTask,
    ListHistory,
}

impl Method {
    /// Every method, for the table's tests.
    pub const ALL: [Method; 35] = [
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
        Method::Authenticate,
        Method::CreateToken,
        Method::ListTokens,
        Method::RevokeToken,
        Method::ActAs,
        Method::SaveSnapshot,
        Method::RestoreSnapshot,
        Method::AddController,
        Method::RemoveController,
        Method::UpdateJob,
        Method::SignalJob,
        Method::JobScript,
        Method::ControlTasks,
        Method::GetTask,
        Method::ListHistory,
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
            Method::Authenticate => "authenticate",
            Method::CreateToken => "createToken",
            Method::ListTokens => "listTokens",
            Method::RevokeToken => "revokeToken",
            Method::ActAs => "actAs",
            Method::SaveSnapshot => "saveSnapshot",
            Method::RestoreSnapshot => "restoreSnapshot",
            Method::AddController => "addController",
            Method::RemoveController => "removeController",
            Method::UpdateJob => "updateJob",
            Method::SignalJob => "signalJob",
            Method::JobScript => "jobScript",
            Method::ControlTasks => "controlTasks",
            Method::GetTask => "getTask",
            Method::ListHistory => "listHistory",
        }
    }
}

/// The table: which roles may call a method.
pub fn allowed(method: Method, role: Role) -> bool {
    use Role::*;
    match method {
        // Finding the primary, joining (which is how a connection gets a role at all) and
        // proving who one is.
        Method::ClusterInfo | Method::Ping | Method::Join | Method::Authenticate => true,
        // Reads: for everyone who is someone; a login host's certificate alone is no one.
        Method::ListJobs
        | Method::JobInfo
        | Method::GetTask
        | Method::ListHistory
        | Method::ListQueues
        | Method::ListHosts
        | Method::Subscribe => role != Login,
        Method::CreateToken | Method::ListTokens | Method::RevokeToken => role == Admin,
        // A backup holds every user's jobs and environments; a restore replaces everything.
        Method::SaveSnapshot | Method::RestoreSnapshot => role == Admin,
        Method::AddController | Method::RemoveController => role == Admin,
        // People's own work. The apiserver acts for the person a request's token names
        // (`actAs`); its certificate alone controls no one's jobs.
        // A script is read like the job's environment: its owner's, or an operator's.
        Method::Submit
        | Method::JobControl
        | Method::UpdateJob
        | Method::SignalJob
        | Method::JobScript
        | Method::ControlTasks => matches!(role, User | Operator | Admin),
        Method::ActAs => role == Apiserver,
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
    if session.role == Role::Login {
        return Err(ReplyHeader::status(
            Status::Auth,
            format!(
                "{}: a login host's certificate proves no one: authenticate with a token \
                 (XCE_TOKEN)",
                method.name()
            ),
        ));
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
        let someone: &[Role] = &[
            User, Worker, Scheduler, Apiserver, Operator, Admin, Controller,
        ];
        let expected: [(Method, &[Role]); 35] = [
            (Method::Submit, &[User, Operator, Admin]),
            (Method::ListJobs, someone),
            (Method::JobInfo, someone),
            (Method::JobControl, &[User, Operator, Admin]),
            (Method::ListQueues, someone),
            (Method::QueueControl, &[Operator, Admin]),
            (Method::ClusterInfo, all),
            (Method::Raft, &[Controller]),
            (Method::ListHosts, someone),
            (Method::HostControl, &[Operator, Admin]),
            (Method::Join, all),
            (Method::Heartbeat, &[Worker]),
            (Method::Dispatch, &[Operator, Admin]),
            (Method::JobStarted, &[Worker]),
            (Method::JobFinished, &[Worker]),
            (Method::Subscribe, someone),
            (Method::Ping, all),
            (Method::AcquireScheduler, &[Scheduler]),
            (Method::DispatchBatch, &[Scheduler]),
            (Method::SetPendReasons, &[Scheduler]),
            (Method::Authenticate, all),
            (Method::CreateToken, &[Admin]),
            (Method::ListTokens, &[Admin]),
            (Method::RevokeToken, &[Admin]),
            (Method::ActAs, &[Apiserver]),
            (Method::SaveSnapshot, &[Admin]),
            (Method::RestoreSnapshot, &[Admin]),
            (Method::AddController, &[Admin]),
            (Method::RemoveController, &[Admin]),
            (Method::UpdateJob, &[User, Operator, Admin]),
            (Method::SignalJob, &[User, Operator, Admin]),
            (Method::JobScript, &[User, Operator, Admin]),
            (Method::ControlTasks, &[User, Operator, Admin]),
            (Method::GetTask, someone),
            (Method::ListHistory, someone),
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
                    let expected = if *role == Login {
                        Status::Auth
                    } else {
                        Status::Perm
                    };
                    assert_eq!(h.status, expected);
                    assert!(h.message.contains(method.name()), "{}", h.message);
                }
            }
        }
    }

    fn certified(role: Role, name: &str) -> Session {
        Session::new(Some(Identity {
            role,
            name: name.into(),
        }))
    }

    #[test]
    fn a_persons_certificate_names_its_user_and_a_daemons_names_none() {
        assert_eq!(
            certified(Role::User, "alice").user.as_deref(),
            Some("alice")
        );
        assert_eq!(
            certified(Role::User, "alice").own_jobs_only().as_deref(),
            Some("alice")
        );
        assert_eq!(certified(Role::Operator, "ops").own_jobs_only(), None);
        assert_eq!(certified(Role::Worker, "w1").user, None);
        assert_eq!(Session::default().own_jobs_only(), None);
        // A person's certificate whose name no job can carry controls no job.
        assert_eq!(certified(Role::User, "not a name").user, None);
        assert_eq!(
            certified(Role::User, "not a name")
                .own_jobs_only()
                .as_deref(),
            Some("")
        );
    }

    #[test]
    fn only_a_persons_connection_takes_a_token() {
        for role in Role::ALL {
            let by_cert = certified(*role, "x").may_authenticate();
            let may = is_person(*role) || *role == Role::Login;
            assert_eq!(by_cert.is_ok(), may, "{role}");
            let joined = Session {
                role: *role,
                joined: true,
                ..Session::default()
            };
            let may = is_person(*role) || *role == Role::Login;
            assert_eq!(joined.may_authenticate().is_ok(), may, "{role}");
        }
        let mut s = certified(Role::User, "login1");
        s.authenticated(
            "0123456789abcdef",
            [1; 32],
            Principal {
                user: "alice".into(),
                role: Role::Operator,
            },
        );
        assert_eq!((s.role, s.user.as_deref()), (Role::Operator, Some("alice")));
        assert_eq!(s.token, Some(("0123456789abcdef".to_string(), [1; 32])));
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
