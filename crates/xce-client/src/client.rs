//! The failover engine: every reply-bearing call goes through one loop that connects,
//! classifies the outcome ([`crate::classify`]), rotates over the candidates (redirect hint
//! first), backs off on no-primary, keeps the primary it found sticky, runs the registered
//! rejoin after every new connection, and returns `ClusterNotReady` when the budget is spent.
//!
//! Concurrency: many calls may be in flight on one client. Each attempt has its own reply
//! channel, so a late reply from a connection that was given up is never taken for a newer
//! attempt. Reconnects are serialised so that calls failing together share one reconnect; no
//! lock is held while a request is in flight.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, info, warn};
use xce_proto::Status;

use crate::backoff::RetryPolicy;
use crate::candidates::{format_addr, Candidate};
use crate::classify::{classify, Action};
use crate::connection::{ConnectOptions, TransportError};
use crate::ops::{Op, Reply};
use crate::transport::{CapnpTransport, Transport};
use crate::wire::ReplyHeader;

/// Client settings. A daemon, the CLI and the apiserver want different budgets.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub connect: ConnectOptions,
    /// Upper bound on one request/reply round trip; a hung primary costs at most this.
    pub call_timeout: Duration,
    pub retry: RetryPolicy,
    /// How long the client counts as degraded after a call ended in `ClusterNotReady`
    /// (unless a rejoin succeeds first).
    pub degraded_ttl: Duration,
    /// While degraded, fail calls at once with [`ClientError::Degraded`] instead of spending
    /// a whole retry budget (the apiserver answers 503 fast with this).
    pub fail_fast_when_degraded: bool,
    /// A person's token: every connection presents it before any other call goes out on it
    /// (the rejoin action's too), so a failover never turns the caller into someone else.
    /// It is sent only over TLS or to a loopback address.
    pub token: Option<crate::tokens::Token>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            connect: ConnectOptions::default(),
            call_timeout: Duration::from_secs(5),
            retry: RetryPolicy::default(),
            degraded_ttl: Duration::from_secs(5),
            fail_fast_when_degraded: false,
            token: None,
        }
    }
}

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The controller answered with a terminal status (`invalid`, `noEnt`, ...).
    #[error("{status}: {message}")]
    Status { status: Status, message: String },
    /// No primary could serve the call within the retry budget.
    #[error(
        "cluster not ready: no primary served the request after {attempts} attempts (last: {last})"
    )]
    ClusterNotReady { attempts: u32, last: String },
    /// The client is degraded (a recent call found no primary) and was asked to fail fast.
    #[error("cluster not ready: degraded for another {remaining:?} after the last failed call")]
    Degraded { remaining: Duration },
    /// A fire-and-forget call could not be delivered (one bounded attempt).
    #[error("not delivered: {0}")]
    Unreachable(TransportError),
    /// Shutdown was requested before the call completed.
    #[error("shutting down")]
    Shutdown,
}

impl ClientError {
    /// The contract code of a JSON error: a status name, or `clusterNotReady`.
    pub fn code(&self) -> &'static str {
        match self {
            ClientError::Status { status, .. } => status.name(),
            ClientError::ClusterNotReady { .. } | ClientError::Degraded { .. } => "clusterNotReady",
            ClientError::Unreachable(_) => "unreachable",
            ClientError::Shutdown => "shutdown",
        }
    }

    /// The human message without the code, for JSON errors that carry the code beside it.
    pub fn message(&self) -> String {
        match self {
            ClientError::Status { message, .. } => message.clone(),
            other => other.to_string(),
        }
    }
}

/// A boxed, sendable future: what a rejoin action returns.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What a stateful component does on a new primary (join with its role and attributes; the
/// worker also re-syncs its jobs). It receives a client whose calls skip the rejoin step, so a
/// rejoin that makes client calls cannot wait on itself.
pub type RejoinFn<T> = Arc<dyn Fn(Client<T>) -> BoxFuture<Result<(), ClientError>> + Send + Sync>;

/// Counters a daemon can export.
#[derive(Debug, Default)]
struct Stats {
    calls: AtomicU64,
    sends: AtomicU64,
    rotations: AtomicU64,
    reconnects: AtomicU64,
    backoffs: AtomicU64,
    cluster_not_ready: AtomicU64,
    rejoins: AtomicU64,
}

/// A snapshot of the client's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClientStats {
    pub calls: u64,
    pub sends: u64,
    pub rotations: u64,
    pub reconnects: u64,
    pub backoffs: u64,
    pub cluster_not_ready: u64,
    pub rejoins: u64,
}

/// Where calls go: the sticky connection, the candidate cursor and a pending redirect hint.
struct Route<C> {
    conn: Option<C>,
    /// Index of the candidate to use next; after a success, the primary's (stickiness).
    cursor: usize,
    /// The controllers to rotate over: as given, then as the cluster reports its members
    /// (see [`Client::learn_candidates`]).
    candidates: Vec<Candidate>,
    /// A redirect address to try once before the cursor.
    hint: Option<String>,
    /// Counts connections opened; the rejoin is due while it differs from the generation of
    /// the last successful rejoin.
    generation: u64,
}

struct Inner<T: Transport> {
    config: ClientConfig,
    transport: T,
    route: Mutex<Route<T::Conn>>,
    /// Serialises reconnects so that calls failing together share one reconnect; it guards
    /// the outcome of the latest attempt, which callers that queued behind it take as their
    /// own (a dead host costs one connect timeout, not one per waiting call).
    reconnecting: tokio::sync::Mutex<Option<TransportError>>,
    /// Counts finished connect attempts.
    connect_attempts: AtomicU64,
    rejoin: Mutex<Option<RejoinFn<T>>>,
    /// The connection the token was last presented on (its id).
    authenticated: Mutex<Option<u64>>,
    /// Serialises rejoins; never taken by the rejoin's own calls.
    rejoining: tokio::sync::Mutex<()>,
    /// The generation of the connection the running rejoin's calls last succeeded on.
    rejoin_generation: AtomicU64,
    /// Connection generation at which the last rejoin succeeded (needs-rejoin is
    /// `generation != rejoined`; it clears only when a rejoin succeeds).
    rejoined: AtomicU64,
    /// The degraded circuit breaker: set by `ClusterNotReady`, cleared by a successful rejoin
    /// or when it expires. Independent of needs-rejoin.
    degraded_until: Mutex<Option<Instant>>,
    /// Half-open probes in flight ([`Client::probe`]): while one is, a set breaker holds past
    /// its expiry, since the probe (which may spend a whole budget) decides, not the clock.
    probing: AtomicU64,
    stats: Stats,
}

/// What a request refused by a breaker held only by a probe in flight is told to wait.
const PROBE_RETRY_AFTER: Duration = Duration::from_secs(1);

/// One probe in flight, counted until it ends or is dropped (cancelled).
struct Probing<'a>(&'a AtomicU64);

impl<'a> Probing<'a> {
    fn start(count: &'a AtomicU64) -> Probing<'a> {
        count.fetch_add(1, Ordering::AcqRel);
        Probing(count)
    }
}

impl Drop for Probing<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A failover-aware controller client. Cheap to clone; clones share connections and route.
pub struct Client<T: Transport = CapnpTransport> {
    inner: Arc<Inner<T>>,
    /// Set on the handle given to the rejoin action: its calls skip the rejoin step.
    in_rejoin: bool,
    /// Set on the handle a probe runs on, and so on its rejoin's: its calls pass the degraded
    /// breaker, which they are there to test.
    half_open: bool,
}

impl<T: Transport> Clone for Client<T> {
    fn clone(&self) -> Self {
        Client {
            inner: self.inner.clone(),
            in_rejoin: self.in_rejoin,
            half_open: self.half_open,
        }
    }
}

impl<T: Transport> std::fmt::Debug for Client<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("candidates", &self.candidates())
            .finish()
    }
}

impl Client<CapnpTransport> {
    /// A capnp client over a validated, non-empty candidate list. Connects lazily.
    pub fn new(candidates: Vec<Candidate>, config: ClientConfig) -> Client {
        let transport = CapnpTransport {
            connect: config.connect.clone(),
            on_caller_thread: false,
        };
        Client::with_transport(candidates, config, transport)
    }
}

impl<T: Transport> Client<T> {
    /// A client over any transport.
    pub fn with_transport(candidates: Vec<Candidate>, config: ClientConfig, transport: T) -> Self {
        assert!(
            !candidates.is_empty(),
            "parse_candidates never returns an empty list"
        );
        Client {
            inner: Arc::new(Inner {
                config,
                transport,
                route: Mutex::new(Route {
                    candidates,
                    conn: None,
                    cursor: 0,
                    hint: None,
                    generation: 0,
                }),
                reconnecting: tokio::sync::Mutex::new(None),
                connect_attempts: AtomicU64::new(0),
                rejoin: Mutex::new(None),
                authenticated: Mutex::new(None),
                rejoining: tokio::sync::Mutex::new(()),
                rejoined: AtomicU64::new(0),
                rejoin_generation: AtomicU64::new(0),
                degraded_until: Mutex::new(None),
                probing: AtomicU64::new(0),
                stats: Stats::default(),
            }),
            in_rejoin: false,
            half_open: false,
        }
    }

    /// The candidates this client rotates over.
    pub fn candidates(&self) -> Vec<Candidate> {
        lock(&self.inner.route).candidates.clone()
    }

    /// Takes the cluster's own list of controllers (its members, as the primary reports them
    /// in the cluster info) as the candidates from now on: a controller added since this
    /// client was given its list is tried too, and one removed is no longer. A member this
    /// client already knows by name keeps this client's address for it (the two may reach it
    /// by different ways: a proxy, NAT, another interface). The rotation stays on the
    /// candidate it was on where that one is still listed. An empty list is ignored.
    pub fn learn_candidates(&self, members: Vec<Candidate>) {
        let mut route = lock(&self.inner.route);
        let list: Vec<Candidate> = members
            .into_iter()
            .map(|m| {
                let own = route.candidates.iter().find(|c| c.name == m.name);
                own.cloned().unwrap_or(m)
            })
            .collect();
        if list.is_empty() || list == route.candidates {
            return;
        }
        let current = route.candidates.get(route.cursor).map(Candidate::addr);
        route.cursor = current
            .and_then(|addr| list.iter().position(|c| c.addr() == addr))
            .unwrap_or(0);
        let names: Vec<String> = list.iter().map(ToString::to_string).collect();
        info!(candidates = %names.join(","), "candidate list updated from the cluster's members");
        route.candidates = list;
    }

    /// Starts the rotation at the candidate whose address is `addr` (e.g. the primary an
    /// earlier process found), so a caller that remembers it skips the redirect a standby
    /// listed first would cost. A hint only: it is taken only while no connection is open and
    /// only if it names one of the candidates, and a wrong one costs one attempt of the normal
    /// rotation (a standby redirects, a dead node is passed over). Returns whether it was taken.
    pub fn set_hint(&self, addr: &str) -> bool {
        let mut route = lock(&self.inner.route);
        let Some(i) = route.candidates.iter().position(|c| c.addr() == addr) else {
            return false;
        };
        if route.conn.is_some() {
            return false;
        }
        route.cursor = i;
        true
    }

    /// The address of the open connection: after a call that got an answer, the controller
    /// that gave it (the primary, unless the answer was a failure). What a caller that wants
    /// to pass a hint to a later process ([`Client::set_hint`]) remembers.
    pub fn connected_to(&self) -> Option<String> {
        self.current().map(|c| T::addr(&c).to_string())
    }

    /// Registers what to do after every new connection, before any call resumes.
    pub fn set_rejoin(&self, rejoin: RejoinFn<T>) {
        *lock(&self.inner.rejoin) = Some(rejoin);
    }

    /// Whether a rejoin is due (a rejoin is registered and the current connection has not
    /// been rejoined).
    pub fn needs_rejoin(&self) -> bool {
        let generation = lock(&self.inner.route).generation;
        lock(&self.inner.rejoin).is_some()
            && generation != 0
            && self.inner.rejoined.load(Ordering::Acquire) != generation
    }

    /// Marks the rejoin as due (the primary said it does not know us, e.g. a heartbeat
    /// answered `noEnt`); the next reply-bearing call runs it first.
    pub fn request_rejoin(&self) {
        self.inner.rejoined.store(u64::MAX, Ordering::Release);
    }

    /// Whether the degraded breaker is set and not yet expired.
    pub fn is_degraded(&self) -> bool {
        self.degraded_remaining().is_some()
    }

    /// The client's counters.
    pub fn stats(&self) -> ClientStats {
        let s = &self.inner.stats;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ClientStats {
            calls: get(&s.calls),
            sends: get(&s.sends),
            rotations: get(&s.rotations),
            reconnects: get(&s.reconnects),
            backoffs: get(&s.backoffs),
            cluster_not_ready: get(&s.cluster_not_ready),
            rejoins: get(&s.rejoins),
        }
    }

    /// How long the breaker still holds. Past its expiry it still holds while a probe is
    /// out: otherwise a probe slower than the TTL (a whole budget against a cluster with no
    /// majority) left a window in which every request spent its own budget before failing.
    fn degraded_remaining(&self) -> Option<Duration> {
        let until = (*lock(&self.inner.degraded_until))?;
        let now = Instant::now();
        if until > now {
            return Some(until - now);
        }
        (self.inner.probing.load(Ordering::Acquire) > 0).then_some(PROBE_RETRY_AFTER)
    }

    /// Runs one reply-bearing op through the failover loop.
    pub async fn call<O: Op>(&self, op: O) -> Result<O::Output, ClientError> {
        self.call_from(op, 0).await
    }

    /// Re-sends an op (same request token) that an earlier call may have applied before its
    /// reply was lost: `dupJob` counts as success from the first send.
    pub async fn call_again<O: Op>(&self, op: O) -> Result<O::Output, ClientError> {
        self.call_from(op, 1).await
    }

    /// The degraded breaker's half-open probe: runs `op` through the failover loop even while
    /// degraded and fail-fast (running the rejoin first when one is due), and clears the
    /// breaker when it succeeds, since a primary has just served. A background health check
    /// calls this, so that an idle client that fails fast notices recovery (and rejoins) with
    /// no request to trigger it.
    pub async fn probe<O: Op>(&self, op: O) -> Result<O::Output, ClientError> {
        self.inner.stats.calls.fetch_add(1, Ordering::Relaxed);
        let _out = Probing::start(&self.inner.probing);
        let half_open = Client {
            half_open: true,
            ..self.clone()
        };
        let result = half_open.failover_loop(op, 0).await;
        match &result {
            Ok(output) => {
                *lock(&self.inner.degraded_until) = None;
                self.learn_from::<O>(output);
            }
            Err(ClientError::ClusterNotReady { .. }) => self.set_degraded(),
            Err(_) => {}
        }
        result
    }

    fn set_degraded(&self) {
        self.inner
            .stats
            .cluster_not_ready
            .fetch_add(1, Ordering::Relaxed);
        *lock(&self.inner.degraded_until) = Some(Instant::now() + self.inner.config.degraded_ttl);
    }

    /// How much longer the degraded breaker holds, if it is set.
    pub fn degraded_for(&self) -> Option<Duration> {
        self.degraded_remaining()
    }

    async fn call_from<O: Op>(&self, op: O, earlier_sends: u32) -> Result<O::Output, ClientError> {
        self.inner.stats.calls.fetch_add(1, Ordering::Relaxed);
        if self.inner.config.fail_fast_when_degraded && !self.half_open {
            if let Some(remaining) = self.degraded_remaining() {
                return Err(ClientError::Degraded { remaining });
            }
        }
        let result = self.failover_loop(op, earlier_sends).await;
        match &result {
            Err(ClientError::ClusterNotReady { .. }) => self.set_degraded(),
            Ok(output) => self.learn_from::<O>(output),
            Err(_) => {}
        }
        result
    }

    /// Takes the cluster's list of controllers from an answer that carries one.
    fn learn_from<O: Op>(&self, output: &O::Output) {
        if let Some(list) = O::candidates_of(output) {
            self.learn_candidates(list);
        }
    }

    async fn failover_loop<O: Op>(
        &self,
        op: O,
        earlier_sends: u32,
    ) -> Result<O::Output, ClientError> {
        let policy = self.inner.config.retry;
        let n = lock(&self.inner.route).candidates.len() as u32;
        let mut sends = earlier_sends;
        let mut backoffs = 0u32;
        let mut failures_in_rotation = 0u32;
        let mut followed_hint = false;
        'attempts: loop {
            let (conn, outcome) = match self.connection().await {
                Ok(conn) => 'sent: {
                    if let Some(refused) = self.present_token::<O>(&conn).await {
                        break 'sent (Some(conn), refused);
                    }
                    if !self.in_rejoin && self.needs_rejoin() {
                        self.run_rejoin().await?;
                        // The rejoin may have moved to another connection (it followed a
                        // redirect): send the call where the rejoin ended, not on `conn`.
                        if self.current().is_none_or(|c| T::id(&c) != T::id(&conn)) {
                            continue 'attempts;
                        }
                    }
                    let out = self
                        .inner
                        .transport
                        .call(&conn, op.clone(), self.inner.config.call_timeout)
                        .await
                        .map(|reply| self.localize(reply));
                    sends += 1;
                    self.inner.stats.sends.fetch_add(1, Ordering::Relaxed);
                    (Some(conn), out)
                }
                Err(e) => (None, Err(e)),
            };
            let last = match &outcome {
                Ok(reply) => reply.header.status.name().to_string(),
                Err(e) => e.to_string(),
            };
            let action = classify(outcome, O::KIND, sends.saturating_sub(1));
            let backoff = match action {
                Action::Success(value) => {
                    if self.in_rejoin {
                        self.rejoin_landed_on(conn.as_ref());
                    }
                    return Ok(value);
                }
                Action::Terminal { status, message } => {
                    return Err(ClientError::Status { status, message })
                }
                Action::RetryNow { hint } => {
                    debug!(op = O::NAME, %last, "attempt failed");
                    // Following a fresh redirect is progress, not a failure; a redirect that
                    // answers a redirect we just followed counts, so no chain loops forever.
                    let progress = hint.is_some() && !followed_hint;
                    followed_hint = hint.is_some();
                    self.abandon(conn.as_ref(), hint.map(|(h, p)| format_addr(&h, p)));
                    if !progress {
                        failures_in_rotation += 1;
                    }
                    // A full rotation of failures is one no-primary attempt: never a hot loop.
                    failures_in_rotation >= n
                }
                Action::RetryBackoff { same_node } => {
                    followed_hint = false;
                    if !same_node {
                        self.abandon(conn.as_ref(), None);
                    }
                    true
                }
            };
            if backoff {
                failures_in_rotation = 0;
                if backoffs >= policy.max_attempts {
                    warn!(op = O::NAME, attempts = backoffs, %last, "retry budget exhausted: cluster not ready");
                    return Err(ClientError::ClusterNotReady {
                        attempts: backoffs,
                        last,
                    });
                }
                self.inner.stats.backoffs.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(policy.delay(backoffs)).await;
                backoffs += 1;
            }
        }
    }

    /// Sends a fire-and-forget op (heartbeat, wakeup): at most one bounded reconnect and one
    /// send, never the retry budget. A reconnect it makes sets needs-rejoin like any other.
    pub async fn notify<O: Op>(&self, op: O) -> Result<(), ClientError> {
        let conn = self.connection().await.map_err(ClientError::Unreachable)?;
        let sent = self
            .inner
            .transport
            .call(&conn, op, self.inner.config.call_timeout)
            .await
            .map(|reply| self.localize(reply));
        self.inner.stats.sends.fetch_add(1, Ordering::Relaxed);
        match sent {
            Ok(reply) if reply.header.status == Status::Ok => Ok(()),
            Ok(reply) => {
                // A node that cannot serve (a standby, or a primary cut off from its
                // majority) is left, so the next fire-and-forget call finds the primary.
                if matches!(
                    reply.header.status,
                    Status::Redirect | Status::Standby | Status::NoMaster
                ) {
                    self.abandon(
                        Some(&conn),
                        reply.header.redirect.map(|(h, p)| format_addr(&h, p)),
                    );
                }
                Err(ClientError::Status {
                    status: reply.header.status,
                    message: reply.header.message,
                })
            }
            Err(e) => {
                self.abandon(Some(&conn), None);
                Err(ClientError::Unreachable(e))
            }
        }
    }

    /// Presents the configured token on `conn` unless it was already presented there: `None`
    /// when the call may go out on it, else the outcome to judge in the call's place (a
    /// refused token, a redirect, a lost connection). A token never goes out in plaintext
    /// beyond this host.
    async fn present_token<O: Op>(
        &self,
        conn: &T::Conn,
    ) -> Option<Result<Reply<O::Output>, TransportError>> {
        let token = self.inner.config.token.as_ref()?;
        if *lock(&self.inner.authenticated) == Some(T::id(conn)) {
            return None;
        }
        let addr = T::addr(conn);
        let refuse = |status, message: String| {
            Some(Ok(Reply {
                header: ReplyHeader::status(status, message),
                value: None,
            }))
        };
        if self.inner.config.connect.tls.is_none() && !crate::tls::is_loopback(addr) {
            let why = format!(
                "refusing to send a token in plaintext to {addr}: configure TLS (--tls-ca, \
                 --tls-cert, --tls-key or XCE_TLS_*)"
            );
            return refuse(Status::Auth, why);
        }
        let op = crate::ops::Authenticate {
            token: token.clone(),
        };
        match self
            .inner
            .transport
            .call(conn, op, self.inner.config.call_timeout)
            .await
        {
            Ok(reply) if reply.header.status == Status::Ok => {
                *lock(&self.inner.authenticated) = Some(T::id(conn));
                None
            }
            Ok(reply) => Some(Ok(self.localize(Reply {
                header: reply.header,
                value: None,
            }))),
            Err(e) => Some(Err(e)),
        }
    }

    /// Runs the registered rejoin once for the current connection generation. Concurrent
    /// callers wait for one rejoin instead of running their own.
    async fn run_rejoin(&self) -> Result<(), ClientError> {
        let _one = self.inner.rejoining.lock().await;
        let generation = lock(&self.inner.route).generation;
        if self.inner.rejoined.load(Ordering::Acquire) == generation {
            return Ok(());
        }
        let Some(rejoin) = lock(&self.inner.rejoin).clone() else {
            return Ok(());
        };
        let handle = Client {
            inner: self.inner.clone(),
            in_rejoin: true,
            half_open: self.half_open,
        };
        self.inner
            .rejoin_generation
            .store(generation, Ordering::Release);
        rejoin(handle).await?;
        // The connection the rejoin's calls last succeeded on is the one that has joined;
        // when it followed a redirect, that is a newer connection than the one it began on.
        let generation = self.inner.rejoin_generation.load(Ordering::Acquire);
        self.inner.rejoined.store(generation, Ordering::Release);
        *lock(&self.inner.degraded_until) = None;
        self.inner.stats.rejoins.fetch_add(1, Ordering::Relaxed);
        info!(generation, "rejoined the primary");
        Ok(())
    }

    /// Records that a call of the rejoin succeeded on `conn`: if it is still the current
    /// connection, its generation is the one the rejoin covers.
    fn rejoin_landed_on(&self, conn: Option<&T::Conn>) {
        let route = lock(&self.inner.route);
        if let (Some(cur), Some(conn)) = (&route.conn, conn) {
            if T::id(cur) == T::id(conn) {
                self.inner
                    .rejoin_generation
                    .store(route.generation, Ordering::Release);
            }
        }
    }

    /// The current connection, or a new one: to the pending hint if any (used once), else to
    /// the candidate under the cursor.
    async fn connection(&self) -> Result<T::Conn, TransportError> {
        if let Some(conn) = self.current() {
            return Ok(conn);
        }
        let attempts_before = self.inner.connect_attempts.load(Ordering::Acquire);
        let mut last_failure = self.inner.reconnecting.lock().await;
        if let Some(conn) = self.current() {
            return Ok(conn);
        }
        if self.inner.connect_attempts.load(Ordering::Acquire) != attempts_before {
            if let Some(e) = last_failure.clone() {
                // An attempt finished (and failed) while this call waited: share its outcome.
                return Err(e);
            }
        }
        let (target, from_hint) = {
            let mut route = lock(&self.inner.route);
            match route.hint.take() {
                Some(hint) => (hint, true),
                None => (route.candidates[route.cursor].addr(), false),
            }
        };
        let connected = self.inner.transport.connect(&target).await;
        self.inner.connect_attempts.fetch_add(1, Ordering::AcqRel);
        *last_failure = connected.as_ref().err().cloned();
        match connected {
            Ok(conn) => {
                info!(target = %target, "connected to controller");
                self.inner.stats.reconnects.fetch_add(1, Ordering::Relaxed);
                let mut route = lock(&self.inner.route);
                if from_hint {
                    if let Some(i) = route.candidates.iter().position(|c| c.addr() == target) {
                        route.cursor = i;
                    }
                }
                route.conn = Some(conn.clone());
                route.generation += 1;
                Ok(conn)
            }
            Err(e) => {
                debug!(target = %target, error = %e, "connect failed");
                if !from_hint {
                    let mut route = lock(&self.inner.route);
                    route.cursor = (route.cursor + 1) % route.candidates.len();
                }
                Err(e)
            }
        }
    }

    fn current(&self) -> Option<T::Conn> {
        let route = lock(&self.inner.route);
        route.conn.as_ref().filter(|c| !T::is_closed(c)).cloned()
    }

    /// A redirect to a primary this client has a candidate for (by name) goes to this
    /// client's address for it, not the answering node's: the two may reach the primary by
    /// different ways (a proxy, NAT, another interface).
    fn localize<V>(&self, mut reply: crate::ops::Reply<V>) -> crate::ops::Reply<V> {
        let own = reply.header.redirect_name.as_ref().and_then(|name| {
            let route = lock(&self.inner.route);
            route.candidates.iter().find(|c| &c.name == name).cloned()
        });
        if let (Some(c), Some(_)) = (own, &reply.header.redirect) {
            reply.header.redirect = Some((c.host, c.port));
        }
        reply
    }

    /// Gives up on `failed` (unless another call already replaced it): the next attempt goes
    /// to the hint if given, else to the next candidate.
    fn abandon(&self, failed: Option<&T::Conn>, hint: Option<String>) {
        let mut route = lock(&self.inner.route);
        let same = match (&route.conn, failed) {
            (Some(cur), Some(failed)) => T::id(cur) == T::id(failed),
            (None, _) => true,
            (Some(_), None) => false,
        };
        if !same {
            return;
        }
        self.inner.stats.rotations.fetch_add(1, Ordering::Relaxed);
        let from = route.conn.take().map(|c| T::addr(&c).to_string());
        if from.is_some() {
            route.cursor = (route.cursor + 1) % route.candidates.len();
        }
        match hint {
            Some(hint) => {
                info!(from = from.as_deref(), target = %hint, "rotating: following the redirect to the primary");
                route.hint = Some(hint);
            }
            None => {
                let target = route.candidates[route.cursor].addr();
                info!(from = from.as_deref(), %target, "rotating to the next candidate");
            }
        }
    }
}

/// Locks one of the client's mutexes. Every update under them is a plain field store, so a
/// panic elsewhere never leaves them inconsistent and a poisoned lock is safe to use.
fn lock<V>(m: &Mutex<V>) -> MutexGuard<'_, V> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests;
