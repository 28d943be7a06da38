//! Socket setup for every capnp connection, client and server side alike: connect with a
//! deadline, `TCP_NODELAY`, TLS when the process has it ([`crate::tls`]), buffered writes and
//! the two-party RPC network over them. Kept in one place so that every daemon's connections
//! are set up alike.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use capnp_rpc::rpc_twoparty_capnp::Side;
use capnp_rpc::twoparty::VatNetwork;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf, ReadHalf};
use tokio::net::TcpStream;
use tokio_util::compat::{Compat, TokioAsyncReadCompatExt};

use std::rc::Rc;

use crate::backlog::{Backlog, PausingReader, QueuedWriter};
use crate::connection::TransportError;
use crate::tls::{self, Identity, Tls};
use crate::types::Role;

/// One connection's byte stream: plain TCP, or TLS over it.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, data),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, data),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The RPC network of one connection.
pub type Network = VatNetwork<Compat<ReadHalf<Stream>>>;

/// Opens a TCP connection to `addr` within `timeout`, with TLS when `tls` is given (the
/// handshake within the same timeout), ready for RPC.
pub async fn connect(
    addr: &str,
    timeout: Duration,
    tls: Option<&Arc<Tls>>,
) -> Result<Stream, TransportError> {
    let failed = |reason: String| TransportError::Connect {
        addr: addr.to_string(),
        reason,
    };
    let open = async {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|e| failed(e.to_string()))?;
        tcp.set_nodelay(true)
            .map_err(|e| failed(format!("set TCP_NODELAY: {e}")))?;
        let Some(tls) = tls else {
            return Ok(Stream::Plain(tcp));
        };
        let name = tls::server_name(addr).map_err(|e| failed(e.to_string()))?;
        let stream = tls
            .connector()
            .connect(name, tcp)
            .await
            .map_err(|e| failed(format!("TLS: {e}")))?;
        // Every server this process dials is a controller: a worker's certificate, valid
        // for the same host, must not pass for one.
        let server = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .ok_or_else(|| failed("TLS: the server sent no certificate".into()))?;
        match tls::identity_of(server) {
            Ok(id) if id.role == Role::Controller => {}
            Ok(id) => return Err(failed(format!("TLS: the server is {id}, not a controller"))),
            Err(e) => return Err(failed(format!("TLS: server certificate: {e}"))),
        }
        Ok(Stream::Tls(Box::new(stream.into())))
    };
    tokio::time::timeout(timeout, open)
        .await
        .map_err(|_| TransportError::ConnectTimeout {
            addr: addr.to_string(),
            after: timeout,
        })?
}

/// How long an accepted connection may take over its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Prepares an accepted connection for RPC: `TCP_NODELAY`, and with `tls` the handshake
/// (within [`HANDSHAKE_TIMEOUT`]) and the peer's identity from its certificate. An error says
/// why the peer is refused, for the caller to log.
pub async fn accept(
    tcp: TcpStream,
    tls: Option<&Arc<Tls>>,
) -> Result<(Stream, Option<Identity>), String> {
    // A failure here costs speed, not correctness.
    let _ = tcp.set_nodelay(true);
    let Some(tls) = tls else {
        return Ok((Stream::Plain(tcp), None));
    };
    let stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.acceptor().accept(tcp))
        .await
        .map_err(|_| format!("no TLS handshake within {HANDSHAKE_TIMEOUT:?}"))?
        .map_err(|e| format!("TLS handshake: {e}"))?;
    let cert = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .ok_or("no client certificate")?;
    let identity = tls::identity_of(cert).map_err(|e| format!("client certificate: {e}"))?;
    Ok((Stream::Tls(Box::new(stream.into())), Some(identity)))
}

/// The largest message a server side reads: appends between controllers stay below 32 MiB
/// (`raft_client`), every client request far below. A larger one is refused from its segment
/// table, before a byte of it is buffered, so a client cannot make a controller hold
/// frames of capnp's default 64 MiB.
pub const MAX_INBOUND_BYTES: u64 = 48 << 20;

/// The client side's two-party RPC network over `stream`. Writes are queued and written in
/// batches ([`QueuedWriter`]): capnp flushes after every message, and a connection shared by
/// many callers (an apiserver's) would otherwise pay a syscall and a packet for each. Must
/// run on a `LocalSet`: its writes drain through a local task.
pub fn network(stream: Stream, side: Side) -> Network {
    let (reader, writer) = tokio::io::split(stream);
    VatNetwork::new(
        reader.compat(),
        QueuedWriter::spawn_client(writer),
        side,
        capnp::message::ReaderOptions::new(),
    )
}

/// A server side's network: messages over [`MAX_INBOUND_BYTES`] are refused, and what the
/// connection owes its peer is bounded by its [`Backlog`] (returned, for the service to count
/// its calls in). Must run on a `LocalSet`: its writes drain through a local task.
pub type ServerNetwork = VatNetwork<PausingReader<Compat<ReadHalf<Stream>>>>;

/// The two-party RPC network of an accepted connection (see [`ServerNetwork`]).
pub fn server_network(stream: Stream) -> (ServerNetwork, Rc<Backlog>) {
    let (reader, writer) = tokio::io::split(stream);
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
