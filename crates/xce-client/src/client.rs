//! The client: every reply-bearing call goes through one loop that connects, classifies the
//! outcome ([`crate::classify`]), rotates over the candidates (redirect hint first), backs off
//! on no-primary, keeps the primary it found sticky, and returns `ClusterNotReady` when the
//! budget is spent.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::{debug, info, warn};
use xce_proto::Status;

use crate::backoff::RetryPolicy;
use crate::candidates::{format_addr, Candidate};
use crate::classify::{classify, Action};
use crate::connection::{ConnectOptions, Connection, TransportError};
use crate::ops::Op;

/// Client settings.
#[derive(Debug, Clone, Copy)]
pub struct ClientConfig {
    pub connect: ConnectOptions,
    /// Upper bound on one request/reply round trip; a hung primary costs at most this.
    pub call_timeout: Duration,
    pub retry: RetryPolicy,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            connect: ConnectOptions::default(),
            call_timeout: Duration::from_secs(5),
            retry: RetryPolicy::default(),
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
}

impl ClientError {
    /// The contract code of a JSON error: a status name, or `clusterNotReady`.
    pub fn code(&self) -> &'static str {
        match self {
            ClientError::Status { status, .. } => status.name(),
            ClientError::ClusterNotReady { .. } => "clusterNotReady",
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

/// Where calls go: the sticky connection, the candidate cursor and a pending redirect hint.
struct Route {
    conn: Option<Connection>,
    /// Index of the candidate to use next; after a success, the primary's (stickiness).
    cursor: usize,
    /// A redirect address to try once before the cursor.
    hint: Option<String>,
}

/// A failover-aware controller client. Cheap to clone; clones share connections and route.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    candidates: Vec<Candidate>,
    config: ClientConfig,
    route: Mutex<Route>,
    /// Serialises reconnects so that calls failing together share one reconnect.
    reconnecting: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("candidates", &self.inner.candidates)
            .finish()
    }
}

impl Client {
    /// A client over a validated, non-empty candidate list. Connects lazily.
    pub fn new(candidates: Vec<Candidate>, config: ClientConfig) -> Client {
        assert!(
            !candidates.is_empty(),
            "parse_candidates never returns an empty list"
        );
        Client {
            inner: Arc::new(Inner {
                candidates,
                config,
                route: Mutex::new(Route {
                    conn: None,
                    cursor: 0,
                    hint: None,
                }),
                reconnecting: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// The candidates this client rotates over.
    pub fn candidates(&self) -> &[Candidate] {
        &self.inner.candidates
    }

    /// Runs one op through the failover loop.
    pub async fn call<O: Op>(&self, op: O) -> Result<O::Output, ClientError> {
        let policy = self.inner.config.retry;
        let n = self.inner.candidates.len() as u32;
        let mut sends = 0u32;
        let mut backoffs = 0u32;
        let mut failures_in_rotation = 0u32;
        loop {
            let (conn, outcome) = match self.connection().await {
                Ok(conn) => {
                    let out = conn
                        .call(self.inner.config.call_timeout, {
                            let op = op.clone();
                            move |client| op.send(client)
                        })
                        .await;
                    sends += 1;
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
                Action::Success(value) => return Ok(value),
                Action::Terminal { status, message } => {
                    return Err(ClientError::Status { status, message })
                }
                Action::RetryNow { hint } => {
                    debug!(op = O::NAME, %last, "rotating");
                    self.abandon(conn.as_ref(), hint.map(|(h, p)| format_addr(&h, p)), true);
                    failures_in_rotation += 1;
                    // A full rotation of failures is one no-primary attempt: never a hot loop.
                    failures_in_rotation >= n
                }
                Action::RetryBackoff { same_node } => {
                    if !same_node {
                        self.abandon(conn.as_ref(), None, true);
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
                tokio::time::sleep(policy.delay(backoffs)).await;
                backoffs += 1;
            }
        }
    }

    /// The current connection, or a new one: to the pending hint if any (used once), else to
    /// the candidate under the cursor.
    async fn connection(&self) -> Result<Connection, TransportError> {
        if let Some(conn) = self.current() {
            return Ok(conn);
        }
        let _one_reconnect = self.inner.reconnecting.lock().await;
        if let Some(conn) = self.current() {
            return Ok(conn);
        }
        let (target, from_hint) = {
            let mut route = lock(&self.inner.route);
            match route.hint.take() {
                Some(hint) => (hint, true),
                None => (self.inner.candidates[route.cursor].addr(), false),
            }
        };
        match Connection::connect(&target, self.inner.config.connect).await {
            Ok(conn) => {
                info!(target = %target, "connected to controller");
                let mut route = lock(&self.inner.route);
                if from_hint {
                    if let Some(i) = self
                        .inner
                        .candidates
                        .iter()
                        .position(|c| c.addr() == target)
                    {
                        route.cursor = i;
                    }
                }
                route.conn = Some(conn.clone());
                Ok(conn)
            }
            Err(e) => {
                debug!(target = %target, error = %e, "connect failed");
                if !from_hint {
                    let mut route = lock(&self.inner.route);
                    route.cursor = (route.cursor + 1) % self.inner.candidates.len();
                }
                Err(e)
            }
        }
    }

    fn current(&self) -> Option<Connection> {
        let route = lock(&self.inner.route);
        route.conn.as_ref().filter(|c| !c.is_closed()).cloned()
    }

    /// Gives up on `failed` (unless another call already replaced it): the next call goes to
    /// the hint if given, else to the next candidate.
    fn abandon(&self, failed: Option<&Connection>, hint: Option<String>, advance: bool) {
        let mut route = lock(&self.inner.route);
        let same = match (&route.conn, failed) {
            (Some(cur), Some(failed)) => cur.id() == failed.id(),
            (None, _) => true,
            (Some(_), None) => false,
        };
        if !same {
            return;
        }
        if route.conn.take().is_some() && advance {
            route.cursor = (route.cursor + 1) % self.inner.candidates.len();
        }
        if let Some(hint) = hint {
            info!(target = %hint, "following redirect to the primary");
            route.hint = Some(hint);
        }
    }
}

/// Locks a route mutex; a panic elsewhere never leaves the route inconsistent (every update
/// is a plain field store), so a poisoned lock is safe to use.
fn lock(m: &Mutex<Route>) -> std::sync::MutexGuard<'_, Route> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
