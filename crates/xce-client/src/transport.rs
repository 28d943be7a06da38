//! Where the failover loop sends its attempts. Production uses capnp connections
//! ([`CapnpTransport`]); the engine's tests use a scripted in-memory transport, so that every
//! failover rule is proven with a virtual clock and no sockets.

use std::future::Future;
use std::time::Duration;

use crate::connection::{ConnectOptions, Connection, TransportError};
use crate::ops::{Op, Reply};

/// A way to reach controllers.
pub trait Transport: Send + Sync + 'static {
    /// One open connection; cheap to clone.
    type Conn: Clone + Send + Sync + 'static;

    /// Opens a connection to `addr` (`host:port`).
    fn connect(
        &self,
        addr: &str,
    ) -> impl Future<Output = Result<Self::Conn, TransportError>> + Send;

    /// Process-unique id of a connection, to tell a reconnect from the connection it replaced.
    fn id(conn: &Self::Conn) -> u64;

    /// The address a connection was opened to.
    fn addr(conn: &Self::Conn) -> &str;

    /// Whether the connection is known to be dead.
    fn is_closed(conn: &Self::Conn) -> bool;

    /// Sends one op and waits at most `timeout` for its reply.
    fn call<O: Op>(
        &self,
        conn: &Self::Conn,
        op: O,
        timeout: Duration,
    ) -> impl Future<Output = Result<Reply<O::Output>, TransportError>> + Send;
}

/// capnp-rpc over TCP.
#[derive(Debug, Clone, Default)]
pub struct CapnpTransport {
    pub connect: ConnectOptions,
    /// Run each connection on the caller's `LocalSet` ([`Connection::connect_here`]) instead
    /// of a thread of its own: for a one-shot program on a current-thread runtime (the CLI),
    /// whose calls then must run inside that `LocalSet`.
    pub on_caller_thread: bool,
}

impl Transport for CapnpTransport {
    type Conn = Connection;

    async fn connect(&self, addr: &str) -> Result<Connection, TransportError> {
        if self.on_caller_thread {
            Connection::connect_here(addr, self.connect.clone()).await
        } else {
            Connection::connect(addr, self.connect.clone()).await
        }
    }

    fn id(conn: &Connection) -> u64 {
        conn.id()
    }

    fn addr(conn: &Connection) -> &str {
        conn.addr()
    }

    fn is_closed(conn: &Connection) -> bool {
        conn.is_closed()
    }

    async fn call<O: Op>(
        &self,
        conn: &Connection,
        op: O,
        timeout: Duration,
    ) -> Result<Reply<O::Output>, TransportError> {
        conn.call(timeout, move |client| op.send(client)).await
    }
}
