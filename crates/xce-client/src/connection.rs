//! The Send bridge over capnp-rpc.
//!
//! capnp-rpc is `!Send`: its connection and capabilities must stay on one thread. Every
//! [`Connection`] therefore owns a dedicated thread running a current-thread runtime and a
//! `LocalSet` that holds the RPC system; callers on any runtime send it closures over an mpsc
//! channel and get each answer back on a oneshot of its own. Because every call has its own
//! reply channel, a late reply from a connection that was given up can never be taken as the
//! answer to a newer call. A one-shot program that already runs a current-thread runtime can
//! have the RPC system on its own `LocalSet` instead ([`Connection::connect_here`]); callers
//! use either kind the same way.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use capnp_rpc::{rpc_twoparty_capnp, RpcSystem};
use futures::FutureExt;
use tokio::sync::{mpsc, oneshot};
use xce_proto::xce_capnp::controller;

use crate::tls::Tls;

/// A future that runs on a connection's own thread.
pub type LocalFuture<T> = Pin<Box<dyn Future<Output = T> + 'static>>;

type Task = Box<dyn FnOnce(controller::Client) -> LocalFuture<()> + Send>;

/// Why a call did not produce a reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    #[error("connect to {addr}: {reason}")]
    Connect { addr: String, reason: String },
    #[error("connect to {addr}: no answer within {after:?}")]
    ConnectTimeout { addr: String, after: Duration },
    #[error("call to {addr}: no reply within {after:?}")]
    Timeout { addr: String, after: Duration },
    #[error("call to {addr}: connection lost: {reason}")]
    Disconnected { addr: String, reason: String },
    #[error("call to {addr}: {reason}")]
    Rpc { addr: String, reason: String },
}

/// Connection settings.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Upper bound on a TCP connect (with its TLS handshake), and on how long an unanswered
    /// call waits before the connection must prove it is alive (half of it of silence, half
    /// of it for a ping).
    pub connect_timeout: Duration,
    /// TLS for every connection, when the process has it: the server's certificate is
    /// checked against the CA and the dialled host, and this process's is presented.
    pub tls: Option<Arc<Tls>>,
}

impl Default for ConnectOptions {
    /// Half a second: a controller that cannot answer a bootstrap within that on a LAN is
    /// frozen or overloaded, and the next candidate is worth trying.
    fn default() -> Self {
        ConnectOptions {
            connect_timeout: Duration::from_millis(500),
            tls: None,
        }
    }
}

static NEXT_CONNECTION_ID: AtomicU64 = AtomicU64::new(1);

/// A live capnp-rpc connection to one controller, usable from `Send` code. Cloning shares the
/// connection; the thread and socket close when the last clone is dropped.
#[derive(Clone)]
pub struct Connection {
    tasks: mpsc::UnboundedSender<Task>,
    closed: Arc<AtomicBool>,
    addr: Arc<str>,
    /// Process-unique id; tells a reconnect apart from the connection it replaced.
    id: u64,
    /// A call unanswered this long makes the connection ping (see `call`).
    probe_after: Duration,
    /// How long that ping may take before the controller counts as frozen.
    ping_within: Duration,
    /// Whether it runs over TLS, and whether any call has had a reply: a plaintext
    /// connection lost before its first reply was likely refused by a controller that
    /// requires TLS, and says so.
    tls: bool,
    answered: Arc<AtomicBool>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Connection#{}({})", self.id, self.addr)
    }
}

impl Connection {
    /// Connects to `addr` (`host:port`) and bootstraps the controller capability.
    pub async fn connect(addr: &str, opts: ConnectOptions) -> Result<Connection, TransportError> {
        let (tasks, task_rx) = mpsc::unbounded_channel::<Task>();
        let (ready_tx, ready_rx) = oneshot::channel();
        let closed = Arc::new(AtomicBool::new(false));
        let thread_addr = addr.to_string();
        let thread_closed = closed.clone();
        let (connect_timeout, tls) = (opts.connect_timeout, opts.tls.is_some());
        std::thread::Builder::new()
            .name(format!("capnp {addr}"))
            .spawn(move || connection_thread(thread_addr, opts, task_rx, ready_tx, thread_closed))
            .map_err(|e| TransportError::Connect {
                addr: addr.to_string(),
                reason: format!("spawn connection thread: {e}"),
            })?;
        Self::when_ready(addr, (connect_timeout, tls), tasks, closed, ready_rx).await
    }

    /// Connects like [`Connection::connect`], but runs the RPC system on the caller's
    /// `LocalSet` instead of on a thread of its own. For a one-shot program on a current-thread
    /// runtime (the CLI): there, the thread, its runtime and its malloc arena cost more CPU
    /// than the call itself, and a redirect would pay for them twice. Must be called inside a
    /// `LocalSet` (it panics otherwise, as `spawn_local` does); the connection makes progress
    /// while that `LocalSet` is driven, and closes when the last clone is dropped.
    pub async fn connect_here(
        addr: &str,
        opts: ConnectOptions,
    ) -> Result<Connection, TransportError> {
        let (tasks, task_rx) = mpsc::unbounded_channel::<Task>();
        let (ready_tx, ready_rx) = oneshot::channel();
        let closed = Arc::new(AtomicBool::new(false));
        let (connect_timeout, tls) = (opts.connect_timeout, opts.tls.is_some());
        tokio::task::spawn_local(drive(
            addr.to_string(),
            opts,
            task_rx,
            ready_tx,
            closed.clone(),
        ));
        Self::when_ready(addr, (connect_timeout, tls), tasks, closed, ready_rx).await
    }

    async fn when_ready(
        addr: &str,
        (connect_timeout, tls): (Duration, bool),
        tasks: mpsc::UnboundedSender<Task>,
        closed: Arc<AtomicBool>,
        ready: oneshot::Receiver<Result<(), TransportError>>,
    ) -> Result<Connection, TransportError> {
        let connected = ready.await.unwrap_or_else(|_| {
            Err(TransportError::Connect {
                addr: addr.to_string(),
                reason: "connection thread ended".into(),
            })
        });
        connected?;
        Ok(Connection {
            tasks,
            closed,
            addr: addr.into(),
            id: NEXT_CONNECTION_ID.fetch_add(1, Ordering::Relaxed),
            // Half the connect timeout of silence, then a whole one for the ping: a frozen
            // controller is left within 1.5 connect timeouts, while a busy one (a runtime
            // stalled for a few hundred milliseconds under load) is not mistaken for it.
            probe_after: connect_timeout / 2,
            ping_within: connect_timeout,
            tls,
            answered: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The address this connection was opened to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Process-unique id of this connection.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Whether the peer has gone away (the RPC system ended).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.tasks.is_closed()
    }

    /// Runs `call` against the controller capability on the connection's thread and returns
    /// its result, or a transport error if no reply arrives within `timeout`.
    ///
    /// A call may legitimately take seconds (a write held across an election), but a frozen
    /// controller, whose kernel keeps the connection open, would cost the whole `timeout`.
    /// So while a call is unanswered, the connection pings the controller every half connect
    /// timeout; a ping unanswered for a connect timeout fails the call at once as a lost connection
    /// (a write is re-sent elsewhere with its token, so it still applies at most once).
    pub async fn call<T, F>(&self, timeout: Duration, call: F) -> Result<T, TransportError>
    where
        T: Send + 'static,
        F: FnOnce(controller::Client) -> LocalFuture<Result<T, capnp::Error>> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let task: Task = Box::new(move |client| {
            async move {
                let _ = tx.send(call(client).await);
            }
            .boxed_local()
        });
        if self.tasks.send(task).is_err() {
            return Err(self.disconnected("connection thread ended"));
        }
        let reply = tokio::time::timeout(timeout, rx);
        tokio::select! {
            r = reply => match r {
                Err(_) => Err(TransportError::Timeout {
                    addr: self.addr.to_string(),
                    after: timeout,
                }),
                Ok(Err(_)) => Err(self.disconnected("connection thread ended")),
                Ok(Ok(Ok(value))) => {
                    self.answered.store(true, Ordering::Relaxed);
                    Ok(value)
                }
                Ok(Ok(Err(e))) => Err(self.rpc_error(e)),
            },
            () = self.unresponsive() => {
                self.closed.store(true, Ordering::Release);
                Err(self.disconnected(&format!(
                    "the controller stopped answering (a ping got no reply within {:?})",
                    self.ping_within
                )))
            }
        }
    }

    /// Completes once the controller fails to answer a ping within `ping_within`; pings
    /// every `probe_after` until then (never, while it answers).
    async fn unresponsive(&self) {
        loop {
            tokio::time::sleep(self.probe_after).await;
            let (tx, rx) = oneshot::channel();
            let ping: Task = Box::new(move |client| {
                async move {
                    let ok = client.ping_request().send().promise.await.is_ok();
                    let _ = tx.send(ok);
                }
                .boxed_local()
            });
            if self.tasks.send(ping).is_err() {
                return;
            }
            match tokio::time::timeout(self.ping_within, rx).await {
                Ok(Ok(true)) => continue,
                // No answer in time, or the connection failed the ping: not a live peer.
                _ => return,
            }
        }
    }

    fn disconnected(&self, reason: &str) -> TransportError {
        let hint = if self.tls || self.answered.load(Ordering::Relaxed) {
            ""
        } else {
            " (before any reply: if the controller requires TLS, give --tls-ca, --tls-cert and --tls-key)"
        };
        TransportError::Disconnected {
            addr: self.addr.to_string(),
            reason: format!("{reason}{hint}"),
        }
    }

    /// Maps a capnp error: a lost or overloaded connection is a transport failure (retry
    /// elsewhere); anything else means the controller received the call and failed it.
    fn rpc_error(&self, e: capnp::Error) -> TransportError {
        match e.kind {
            capnp::ErrorKind::Disconnected => {
                self.closed.store(true, Ordering::Release);
                self.disconnected(&e.extra)
            }
            capnp::ErrorKind::Overloaded => self.disconnected(&e.to_string()),
            // The stream ended mid-message: a killed peer (over TLS, no close_notify), or, to
            // a plaintext reader, a TLS server's alert. Lost either way.
            capnp::ErrorKind::PrematureEndOfFile => {
                self.closed.store(true, Ordering::Release);
                self.disconnected(&format!("the connection ended mid-message: {}", e.extra))
            }
            _ => TransportError::Rpc {
                addr: self.addr.to_string(),
                reason: e.to_string(),
            },
        }
    }
}

fn connection_thread(
    addr: String,
    opts: ConnectOptions,
    tasks: mpsc::UnboundedReceiver<Task>,
    ready: oneshot::Sender<Result<(), TransportError>>,
    closed: Arc<AtomicBool>,
) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(TransportError::Connect {
                addr,
                reason: format!("start runtime: {e}"),
            }));
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, drive(addr, opts, tasks, ready, closed));
    // Dropping the LocalSet and runtime here closes the socket and fails any call in flight.
}

/// Opens the connection, reports the outcome on `ready`, then runs each task sent until
/// every sender (every clone of the [`Connection`]) is gone, and closes the RPC system.
async fn drive(
    addr: String,
    opts: ConnectOptions,
    mut tasks: mpsc::UnboundedReceiver<Task>,
    ready: oneshot::Sender<Result<(), TransportError>>,
    closed: Arc<AtomicBool>,
) {
    let (client, rpc) = match open(&addr, &opts, closed.clone()).await {
        Ok(opened) => opened,
        Err(e) => {
            closed.store(true, Ordering::Release);
            let _ = ready.send(Err(e));
            return;
        }
    };
    if ready.send(Ok(())).is_ok() {
        while let Some(task) = tasks.recv().await {
            tokio::task::spawn_local(task(client.clone()));
        }
    }
    // On a connection thread the LocalSet's drop would end it anyway; on the caller's
    // LocalSet (`connect_here`) this is what closes the socket.
    rpc.abort();
}

/// Connects and bootstraps; returns the controller capability and the task running the RPC
/// system. The bootstrap costs no round trip of its own: a frozen controller, whose kernel
/// still completes the TCP handshake, is found out by the first call's liveness probe (see
/// [`Connection::call`]) within one connect timeout.
async fn open(
    addr: &str,
    opts: &ConnectOptions,
    closed: Arc<AtomicBool>,
) -> Result<(controller::Client, tokio::task::JoinHandle<()>), TransportError> {
    let stream = crate::socket::connect(addr, opts.connect_timeout, opts.tls.as_ref()).await?;
    let network = crate::socket::network(stream, rpc_twoparty_capnp::Side::Client);
    let mut rpc = RpcSystem::new(Box::new(network), None);
    let client: controller::Client = rpc.bootstrap(rpc_twoparty_capnp::Side::Server);
    let rpc = tokio::task::spawn_local(async move {
        let _ = rpc.await;
        closed.store(true, Ordering::Release);
    });
    Ok((client, rpc))
}
