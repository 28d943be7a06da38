//! Every open client connection, so that no client, however it behaves, can lock others out.
//!
//! - **A limit** (`limits.max_connections`, never above what the file-descriptor limit
//!   allows): at the limit, a new connection takes the place of the plain-user connection that
//!   has been idle longest, so idle connections cannot lock out new ones; controllers, workers
//!   and other daemons (joined sessions) proven by their certificate are never evicted for it.
//!   Without TLS a role is only claimed: connections that claimed one may hold at most half
//!   the places, beyond that the longest idle of them (never a controller peer) gives way. When nothing can be
//!   evicted, the new connection is closed.
//! - **An idle timeout** (`limits.idle_timeout_ms`): a connection that has made no call for
//!   that long is closed, unless it is a controller peer (whose Raft calls do not pass the
//!   client interface). Daemons heartbeat or keep their subscriptions alive well within it.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use tokio::task::AbortHandle;
use tokio::time::Instant;
use tracing::{info, warn};
use xce_client::types::Role;

use super::session::Session;

/// One connection as the registry sees it.
struct Entry {
    session: Rc<RefCell<Session>>,
    last_call: Rc<Cell<Instant>>,
    abort: AbortHandle,
}

/// The open connections of one controller (on its `LocalSet`).
pub struct Connections {
    max: usize,
    idle: Duration,
    next: Cell<u64>,
    open: RefCell<HashMap<u64, Entry>>,
}

impl Connections {
    /// A registry allowing `max` connections, closing those idle for `idle`.
    pub fn new(max: usize, idle: Duration) -> Rc<Connections> {
        Rc::new(Connections {
            max,
            idle,
            next: Cell::new(1),
            open: RefCell::new(HashMap::new()),
        })
    }

    /// Whether one more connection may be taken: frees the longest-idle plain connection
    /// when at the limit, or else, while connections with only a claimed role (no
    /// certificate) hold more than half the limit, the longest-idle of those. `false` when
    /// every open connection is a daemon's that may stay.
    pub fn make_room(&self) -> bool {
        let mut open = self.open.borrow_mut();
        if open.len() < self.max {
            return true;
        }
        let longest_idle = |keep: &dyn Fn(&Session) -> bool| {
            open.iter()
                .filter(|(_, e)| keep(&e.session.borrow()))
                .min_by_key(|(_, e)| e.last_call.get())
                .map(|(id, _)| *id)
        };
        let over_share = || {
            let claimed = open
                .values()
                .filter(|e| e.session.borrow().role_is_claimed());
            claimed.count() > self.max / 2
        };
        let victim = longest_idle(&Session::evictable).or_else(|| {
            over_share()
                .then(|| longest_idle(&Session::claimed_and_evictable))
                .flatten()
        });
        match victim {
            Some(id) => {
                if let Some(e) = open.remove(&id) {
                    e.abort.abort();
                }
                true
            }
            None => {
                warn!(
                    max = self.max,
                    "connection limit reached by joined daemons; refusing a connection"
                );
                false
            }
        }
    }

    /// Registers a connection whose RPC task is `abort`; returns its id (see
    /// [`Connections::closed`]).
    pub fn add(
        &self,
        session: Rc<RefCell<Session>>,
        last_call: Rc<Cell<Instant>>,
        abort: AbortHandle,
    ) -> u64 {
        let id = self.next.get();
        self.next.set(id + 1);
        self.open.borrow_mut().insert(
            id,
            Entry {
                session,
                last_call,
                abort,
            },
        );
        id
    }

    /// Forgets a connection that ended.
    pub fn closed(&self, id: u64) {
        self.open.borrow_mut().remove(&id);
    }

    /// How many connections are open.
    pub fn len(&self) -> usize {
        self.open.borrow().len()
    }

    /// Whether none are.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Closes connections idle for longer than the idle timeout, every quarter of it.
    pub async fn run_idle_sweeper(self: Rc<Self>) {
        let every = (self.idle / 4).max(Duration::from_millis(50));
        loop {
            tokio::time::sleep(every).await;
            let mut open = self.open.borrow_mut();
            let idle: Vec<u64> = open
                .iter()
                .filter(|(_, e)| {
                    e.session.borrow().role != Role::Controller
                        && e.last_call.get().elapsed() > self.idle
                })
                .map(|(id, _)| *id)
                .collect();
            if !idle.is_empty() {
                info!(closed = idle.len(), idle_timeout = ?self.idle, "closing idle connections");
            }
            for id in idle {
                if let Some(e) = open.remove(&id) {
                    e.abort.abort();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session of `role`, joined unless a user's, its role proven by a certificate.
    fn session(role: Role) -> Rc<RefCell<Session>> {
        Rc::new(RefCell::new(Session {
            role,
            joined: role != Role::User,
            certified: Some(xce_client::tls::Identity {
                role,
                name: format!("{role}"),
            }),
            ..Session::default()
        }))
    }

    /// A session that claimed `role` at join, with no certificate.
    fn claimed(role: Role) -> Rc<RefCell<Session>> {
        let s = session(role);
        s.borrow_mut().certified = None;
        s
    }

    /// Registers a connection of `session` whose task never ends on its own.
    fn open(c: &Connections, session: Rc<RefCell<Session>>) -> tokio::task::JoinHandle<()> {
        let task = tokio::task::spawn_local(std::future::pending::<()>());
        c.add(
            session,
            Rc::new(Cell::new(Instant::now())),
            task.abort_handle(),
        );
        task
    }

    #[tokio::test(start_paused = true)]
    async fn claimed_roles_hold_at_most_half_the_places_and_then_give_way() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let c = Connections::new(4, Duration::from_secs(60));
                let _open = [session(Role::Worker), session(Role::Scheduler)].map(|s| open(&c, s));
                tokio::time::advance(Duration::from_secs(1)).await;
                let _worker = open(&c, claimed(Role::Worker));
                tokio::time::advance(Duration::from_secs(1)).await;
                let _operator = open(&c, claimed(Role::Operator));
                // Two claimed of four places: half, so nothing gives way.
                assert!(!c.make_room(), "claimed roles within half the places stay");
                assert_eq!(c.len(), 4);
                let c = Connections::new(4, Duration::from_secs(60));
                let certified = open(&c, session(Role::Worker));
                // A controller peer's calls do not pass the client methods: it always looks
                // the longest idle, and must never be the one to go.
                let peer = open(&c, claimed(Role::Controller));
                tokio::time::advance(Duration::from_secs(1)).await;
                let first_claimed = open(&c, claimed(Role::Worker));
                tokio::time::advance(Duration::from_secs(1)).await;
                let _second_claimed = open(&c, claimed(Role::Worker));
                assert!(c.make_room(), "three claimed of four places: one gives way");
                assert_eq!(c.len(), 3);
                // The longest idle claimed worker went, never the certified one or the peer.
                assert!(first_claimed.await.unwrap_err().is_cancelled());
                assert!(!certified.is_finished());
                assert!(!peer.is_finished());
            })
            .await;
    }

    #[tokio::test(start_paused = true)]
    async fn at_the_limit_the_longest_idle_plain_connection_makes_room_and_daemons_never_do() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let c = Connections::new(2, Duration::from_secs(60));
                let old = tokio::task::spawn_local(std::future::pending::<()>());
                let worker = tokio::task::spawn_local(std::future::pending::<()>());
                let old_call = Rc::new(Cell::new(Instant::now()));
                c.add(session(Role::User), old_call, old.abort_handle());
                tokio::time::advance(Duration::from_secs(1)).await;
                c.add(
                    session(Role::Worker),
                    Rc::new(Cell::new(Instant::now())),
                    worker.abort_handle(),
                );
                assert!(c.make_room(), "the idle user connection makes room");
                assert_eq!(c.len(), 1);
                assert!(old.await.unwrap_err().is_cancelled());
                let daemon = tokio::task::spawn_local(std::future::pending::<()>());
                c.add(
                    session(Role::Controller),
                    Rc::new(Cell::new(Instant::now())),
                    daemon.abort_handle(),
                );
                assert!(!c.make_room(), "joined daemons are never evicted");
                assert_eq!(c.len(), 2);
                // A worker's certificate that never joined pins nothing.
                let idle = tokio::task::spawn_local(std::future::pending::<()>());
                let unjoined = session(Role::Worker);
                unjoined.borrow_mut().joined = false;
                let c = Connections::new(1, Duration::from_secs(60));
                c.add(
                    unjoined,
                    Rc::new(Cell::new(Instant::now())),
                    idle.abort_handle(),
                );
                assert!(c.make_room(), "a certificate alone is evicted");
                assert!(idle.await.unwrap_err().is_cancelled());
            })
            .await;
    }

    #[tokio::test(start_paused = true)]
    async fn idle_connections_close_but_controller_peers_stay() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let c = Connections::new(10, Duration::from_secs(4));
                let user = tokio::task::spawn_local(std::future::pending::<()>());
                let peer = tokio::task::spawn_local(std::future::pending::<()>());
                let now = Instant::now();
                c.add(
                    session(Role::User),
                    Rc::new(Cell::new(now)),
                    user.abort_handle(),
                );
                c.add(
                    session(Role::Controller),
                    Rc::new(Cell::new(now)),
                    peer.abort_handle(),
                );
                tokio::task::spawn_local(c.clone().run_idle_sweeper());
                tokio::time::sleep(Duration::from_secs(6)).await;
                assert!(user.await.unwrap_err().is_cancelled());
                assert_eq!(c.len(), 1);
                assert!(!peer.is_finished());
            })
            .await;
    }
}
