//! Socket setup for every capnp connection, client and server side alike: connect with a
//! deadline, `TCP_NODELAY`, buffered writes and the two-party RPC network over them. Kept in
//! one place so that TLS (the security issue) plugs in here once for every daemon.

use std::time::Duration;

use capnp_rpc::rpc_twoparty_capnp::Side;
use capnp_rpc::twoparty::VatNetwork;
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::TcpStream;
use tokio_util::compat::{Compat, TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

use std::rc::Rc;

use crate::backlog::{Backlog, PausingReader, QueuedWriter};
use crate::connection::TransportError;

/// The RPC network of one connection.
pub type Network = VatNetwork<Compat<OwnedReadHalf>>;

/// Opens a TCP connection to `addr` within `timeout`, ready for RPC.
pub async fn connect(addr: &str, timeout: Duration) -> Result<TcpStream, TransportError> {
    let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
        .await
        .map_err(|_| TransportError::ConnectTimeout {
            addr: addr.to_string(),
            after: timeout,
        })?
        .map_err(|e| TransportError::Connect {
            addr: addr.to_string(),
            reason: e.to_string(),
        })?;
    stream
        .set_nodelay(true)
        .map_err(|e| TransportError::Connect {
            addr: addr.to_string(),
            reason: format!("set TCP_NODELAY: {e}"),
        })?;
    Ok(stream)
}

/// Prepares an accepted connection for RPC; a failure is the caller's to log (the
/// connection still works, only slower).
pub fn accepted(stream: &TcpStream) -> std::io::Result<()> {
    stream.set_nodelay(true)
}

/// The largest message a server side reads: appends between controllers stay below 32 MiB
/// (`raft_client`), every client request far below. A larger one is refused from its segment
/// table, before a byte of it is buffered, so a client cannot make a controller hold
/// frames of capnp's default 64 MiB.
pub const MAX_INBOUND_BYTES: u64 = 48 << 20;

/// The client side's two-party RPC network over `stream`. Writes are buffered: capnp writes
/// a segment table and then the segments, flushing after each message; unbuffered that is
/// two syscalls and, with `TCP_NODELAY`, two packets per message.
pub fn network(stream: TcpStream, side: Side) -> Network {
    let (reader, writer) = stream.into_split();
    VatNetwork::new(
        reader.compat(),
        futures::io::BufWriter::with_capacity(64 * 1024, writer.compat_write()),
        side,
        capnp::message::ReaderOptions::new(),
    )
}

/// A server side's network: messages over [`MAX_INBOUND_BYTES`] are refused, and what the
/// connection owes its peer is bounded by its [`Backlog`] (returned, for the service to count
/// its calls in). Must run on a `LocalSet`: its writes drain through a local task.
pub type ServerNetwork = VatNetwork<PausingReader<Compat<OwnedReadHalf>>>;

/// The two-party RPC network of an accepted connection (see [`ServerNetwork`]).
pub fn server_network(stream: TcpStream) -> (ServerNetwork, Rc<Backlog>) {
    let (reader, writer) = stream.into_split();
    let mut options = capnp::message::ReaderOptions::new();
    options.traversal_limit_in_words(Some((MAX_INBOUND_BYTES / 8) as usize));
    let backlog = Rc::new(Backlog::default());
    let network = VatNetwork::new(
        PausingReader::new(reader.compat(), backlog.clone()),
        QueuedWriter::spawn(writer, backlog.clone()),
        Side::Server,
        options,
    );
    (network, backlog)
}
