//! What a server-side connection owes its peer, bounded: the calls it is still answering and
//! the reply bytes the peer has not taken yet. A peer that pipelines calls and never reads
//! its replies must not make a server hold them without end.
//!
//! Writes go through [`QueuedWriter`], which never blocks capnp: each message lands in a
//! queue drained by a task of its own, so every unsent byte is counted here rather than in
//! capnp's unbounded write queue. [`PausingReader`] stops reading new calls while too many
//! are being answered or too many reply bytes are unsent, which pushes back on the peer
//! through TCP. A connection whose unsent replies pass [`MAX_UNSENT_BYTES`] is closed, and so is
//! one already paused for its own unread replies that would take the unsent bytes of every
//! connection past [`MAX_UNSENT_BYTES_TOTAL`].
//!
//! Single-threaded (`Rc`): server connections run on the controller's `LocalSet`.

use std::cell::{Cell, RefCell};
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};

use futures::io::{AsyncRead, AsyncWrite};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

use crate::inbound::{self, Framing};

/// Call weight a connection may have in flight before it stops reading calls.
pub const MAX_CALL_WEIGHT: usize = 128;
/// Call weight all connections together may have in flight; past it every connection waits.
pub const MAX_CALL_WEIGHT_TOTAL: usize = 1024;
/// Unsent reply bytes at which a connection stops reading calls.
pub const PAUSE_READING_BYTES: usize = 16 << 20;
/// Unsent reply bytes at which a connection is closed: its peer is not reading.
pub const MAX_UNSENT_BYTES: usize = 64 << 20;
/// Unsent reply bytes all connections together may hold.
pub const MAX_UNSENT_BYTES_TOTAL: usize = 512 << 20;
/// The most bytes the drain task writes in one go.
const BATCH_BYTES: usize = 256 << 10;

static UNSENT_TOTAL: AtomicUsize = AtomicUsize::new(0);
static CALL_WEIGHT_TOTAL: AtomicUsize = AtomicUsize::new(0);

/// One connection's debts to its peer.
#[derive(Debug, Default)]
pub struct Backlog {
    unsent: Cell<usize>,
    calls: Cell<usize>,
    reader: RefCell<Option<Waker>>,
    failed: Cell<bool>,
    /// Reading is paused for unread replies, and that has been logged.
    stalled: Cell<bool>,
    /// A controller peer: the calls of other connections never pause it.
    peer: Cell<bool>,
}

impl Backlog {
    /// A call of this weight is being answered until the guard drops. Heavy calls (pages of
    /// a listing) weigh more, so fewer of their replies are ever built at once.
    pub fn call_started(self: &Rc<Self>, weight: usize) -> CallGuard {
        self.calls.set(self.calls.get() + weight);
        CALL_WEIGHT_TOTAL.fetch_add(weight, Ordering::Relaxed);
        CallGuard {
            backlog: self.clone(),
            weight,
        }
    }

    /// Unsent reply bytes of every server connection in this process.
    pub fn unsent_total() -> usize {
        UNSENT_TOTAL.load(Ordering::Relaxed)
    }

    /// Unsent reply bytes of this connection.
    pub fn unsent(&self) -> usize {
        self.unsent.get()
    }

    /// Marks the connection as a controller peer's or a worker's: Raft traffic and
    /// heartbeats must not wait behind clients' listings, or a loaded primary would lose its
    /// leadership and its workers.
    pub fn set_peer(&self) {
        self.peer.set(true);
    }

    fn paused(&self) -> bool {
        let crowded =
            !self.peer.get() && CALL_WEIGHT_TOTAL.load(Ordering::Relaxed) >= MAX_CALL_WEIGHT_TOTAL;
        crowded || self.calls.get() >= MAX_CALL_WEIGHT || self.unsent.get() >= PAUSE_READING_BYTES
    }

    fn wake_reader(&self) {
        if !self.paused() {
            if let Some(waker) = self.reader.borrow_mut().take() {
                waker.wake();
            }
        }
    }

    fn queued(&self, n: usize) {
        self.unsent.set(self.unsent.get() + n);
        UNSENT_TOTAL.fetch_add(n, Ordering::Relaxed);
    }

    fn sent(&self, n: usize) {
        self.unsent.set(self.unsent.get().saturating_sub(n));
        UNSENT_TOTAL.fetch_sub(n, Ordering::Relaxed);
        self.wake_reader();
    }
}

impl Drop for Backlog {
    fn drop(&mut self) {
        UNSENT_TOTAL.fetch_sub(self.unsent.get(), Ordering::Relaxed);
    }
}

/// Counts one call as in flight until dropped.
#[derive(Debug)]
pub struct CallGuard {
    backlog: Rc<Backlog>,
    weight: usize,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        let b = &self.backlog;
        b.calls.set(b.calls.get().saturating_sub(self.weight));
        CALL_WEIGHT_TOTAL.fetch_sub(self.weight, Ordering::Relaxed);
        b.wake_reader();
    }
}

/// Reads calls only while the connection's backlog allows, and hands capnp a large frame's
/// segment table (after which it allocates the whole body) only once the bytes of every
/// connection's partly read frames leave room for it ([`crate::inbound`]).
pub struct PausingReader<R> {
    inner: R,
    backlog: Rc<Backlog>,
    framing: Framing,
    /// A complete segment table not yet handed to capnp, and how much of it has been.
    table: Vec<u8>,
    table_given: usize,
    /// Bytes of the shared inbound budget this connection holds for the body it is reading.
    reserved: usize,
    /// Its place in line for the budget while it waits.
    place: inbound::Place,
    /// Waiting for the inbound budget, and that has been logged.
    starved: bool,
}

impl<R> PausingReader<R> {
    pub fn new(inner: R, backlog: Rc<Backlog>) -> Self {
        PausingReader {
            inner,
            backlog,
            framing: Framing::default(),
            table: Vec::new(),
            table_given: 0,
            reserved: 0,
            place: inbound::Place::default(),
            starved: false,
        }
    }

    /// Whether the body whose table is held has the budget it needs; otherwise the reader
    /// is woken when some is released.
    fn body_admitted(&mut self, cx: &Context<'_>) -> io::Result<bool> {
        let Some(left) = self.framing.body_left() else {
            return Ok(true);
        };
        let left = usize::try_from(left).unwrap_or(usize::MAX);
        if self.reserved > 0 || left < inbound::RESERVE_FROM || self.backlog.peer.get() {
            // A connection that became a controller peer while it waited reads without a
            // reservation: it must not keep a place that would hold up everyone behind it.
            inbound::leave(&mut self.place);
            return Ok(true);
        }
        if left > crate::socket::MAX_INBOUND_BYTES as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a frame of {} MiB is over the inbound limit", left >> 20),
            ));
        }
        if !inbound::reserve(left, cx.waker(), &mut self.place) {
            if !std::mem::replace(&mut self.starved, true) {
                warn!(
                    frame_bytes = left,
                    held_bytes = inbound::partial_total(),
                    "connections hold too many partly read frames: this one waits to read its next"
                );
            }
            return Ok(false);
        }
        self.starved = false;
        self.reserved = left;
        Ok(true)
    }

    /// Copies what is left of a held table into `buf`.
    fn give_table(&mut self, buf: &mut [u8]) -> usize {
        let rest = &self.table[self.table_given..];
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        self.table_given += n;
        if self.table_given == self.table.len() {
            self.table.clear();
            self.table_given = 0;
        }
        n
    }
}

impl<R> Drop for PausingReader<R> {
    fn drop(&mut self) {
        inbound::leave(&mut self.place);
        inbound::release(std::mem::take(&mut self.reserved));
    }
}

impl<R: AsyncRead + Unpin> PausingReader<R> {
    /// Reads a segment table whole into `self.table`; `Ready(false)` at the end of the
    /// stream.
    fn poll_table(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<bool>> {
        let mut chunk = [0u8; 64];
        loop {
            let limit = chunk.len().min(self.framing.next_read_limit());
            let n =
                std::task::ready!(Pin::new(&mut self.inner).poll_read(cx, &mut chunk[..limit]))?;
            if n == 0 {
                return Poll::Ready(Ok(false));
            }
            if let Some(table) = self.framing.consumed(&chunk[..n])? {
                self.table = table;
                return Poll::Ready(Ok(true));
            }
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for PausingReader<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let backlog = &self.backlog;
        let unread = backlog.unsent.get() >= PAUSE_READING_BYTES;
        if unread != backlog.stalled.replace(unread) && unread {
            warn!(
                unsent_bytes = backlog.unsent.get(),
                "a peer is not reading its replies: none of its calls are read until it does"
            );
        }
        if backlog.paused() {
            *backlog.reader.borrow_mut() = Some(cx.waker().clone());
            // Paused for its own calls, it could not take the budget if woken for it: it
            // gives up its place rather than hold up the line, and takes a new one later.
            let this = &mut *self;
            inbound::leave(&mut this.place);
            // Calls elsewhere end without touching this connection: look again soon.
            if CALL_WEIGHT_TOTAL.load(Ordering::Relaxed) >= MAX_CALL_WEIGHT_TOTAL {
                let waker = cx.waker().clone();
                tokio::task::spawn_local(async move {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                    waker.wake();
                });
            }
            return Poll::Pending;
        }
        let this = &mut *self;
        let between_frames = this.table.is_empty() && this.framing.body_left().is_none();
        if between_frames && !std::task::ready!(this.poll_table(cx))? {
            return Poll::Ready(Ok(0));
        }
        if !this.table.is_empty() {
            if !this.body_admitted(cx)? {
                return Poll::Pending;
            }
            return Poll::Ready(Ok(this.give_table(buf)));
        }
        let limit = buf.len().min(this.framing.next_read_limit());
        let n = std::task::ready!(Pin::new(&mut this.inner).poll_read(cx, &mut buf[..limit]))?;
        this.framing.consumed(&buf[..n])?;
        if this.framing.body_left().is_none() {
            inbound::release(std::mem::take(&mut this.reserved));
        }
        Poll::Ready(Ok(n))
    }
}

/// Takes whatever capnp writes at once and hands each flushed message to the drain task,
/// which writes every message queued meanwhile in one go: capnp flushes after each message,
/// and one syscall (and, with `TCP_NODELAY`, one packet) per message is most of what a busy
/// connection costs.
pub struct QueuedWriter {
    buf: Vec<u8>,
    tx: mpsc::UnboundedSender<Vec<u8>>,
    /// A server connection's debts, bounded; none on a client's (its callers bound it).
    backlog: Option<Rc<Backlog>>,
    /// Dropped with the writer: stops the drain task, however stuck its peer is.
    _stop: oneshot::Sender<()>,
}

impl QueuedWriter {
    /// A writer whose bytes reach `socket` through a task spawned on the current `LocalSet`.
    pub fn spawn<W>(socket: W, backlog: Rc<Backlog>) -> QueuedWriter
    where
        W: tokio::io::AsyncWrite + Unpin + 'static,
    {
        Self::spawn_with(socket, Some(backlog))
    }

    /// A client connection's writer: batched the same way, with no server-side accounting.
    pub fn spawn_client<W>(socket: W) -> QueuedWriter
    where
        W: tokio::io::AsyncWrite + Unpin + 'static,
    {
        Self::spawn_with(socket, None)
    }

    fn spawn_with<W>(socket: W, backlog: Option<Rc<Backlog>>) -> QueuedWriter
    where
        W: tokio::io::AsyncWrite + Unpin + 'static,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        let (stop_tx, stop_rx) = oneshot::channel();
        tokio::task::spawn_local(drain(socket, rx, stop_rx, backlog.clone()));
        QueuedWriter {
            buf: Vec::new(),
            tx,
            backlog,
            _stop: stop_tx,
        }
    }

    fn refuse(backlog: &Backlog, why: String) -> io::Error {
        if !backlog.failed.replace(true) {
            warn!(
                unsent_bytes = backlog.unsent(),
                "closing a connection: {why}"
            );
        }
        io::Error::other(why)
    }

    /// Counts `len` more unsent bytes, or refuses them when this connection's peer, or every
    /// peer together, has left too many replies unread.
    fn admit(backlog: &Backlog, len: usize) -> io::Result<()> {
        if backlog.failed.get() {
            return Err(io::Error::from(io::ErrorKind::BrokenPipe));
        }
        let mine = backlog.unsent() + len;
        if mine > MAX_UNSENT_BYTES {
            let why = format!(
                "its peer has left {} MiB of replies unread (the limit is {} MiB)",
                mine >> 20,
                MAX_UNSENT_BYTES >> 20
            );
            return Err(Self::refuse(backlog, why));
        }
        // Over the total, only a laggard (one that has stopped being read itself) is closed:
        // a client that reads its replies never pays for others that do not.
        let all = Backlog::unsent_total() + len;
        if all > MAX_UNSENT_BYTES_TOTAL && backlog.unsent() >= PAUSE_READING_BYTES {
            let why = format!(
                "peers have left {} MiB of replies unread in all (the limit is {} MiB)",
                all >> 20,
                MAX_UNSENT_BYTES_TOTAL >> 20
            );
            return Err(Self::refuse(backlog, why));
        }
        backlog.queued(len);
        Ok(())
    }
}

impl AsyncWrite for QueuedWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        if let Some(backlog) = &self.backlog {
            if let Err(e) = Self::admit(backlog, data.len()) {
                return Poll::Ready(Err(e));
            }
        }
        self.buf.extend_from_slice(data);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.buf.is_empty() {
            return Poll::Ready(Ok(()));
        }
        let message = std::mem::take(&mut self.buf);
        Poll::Ready(
            self.tx
                .send(message)
                .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe)),
        )
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_flush(cx)
    }
}

/// Writes queued messages to the socket, several at once when they pile up, until the
/// writer is dropped or the socket fails.
async fn drain<W: tokio::io::AsyncWrite + Unpin>(
    mut socket: W,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    mut stop: oneshot::Receiver<()>,
    backlog: Option<Rc<Backlog>>,
) {
    loop {
        let mut batch = tokio::select! {
            message = rx.recv() => match message {
                Some(m) => m,
                None => break,
            },
            _ = &mut stop => break,
        };
        while batch.len() < BATCH_BYTES {
            match rx.try_recv() {
                Ok(more) => batch.extend_from_slice(&more),
                Err(_) => break,
            }
        }
        // Flushed too: a TLS stream holds records back until then.
        let written = tokio::select! {
            r = async { socket.write_all(&batch).await?; socket.flush().await } => r.is_ok(),
            _ = &mut stop => break,
        };
        if !written {
            if let Some(backlog) = &backlog {
                backlog.failed.set(true);
            }
            break;
        }
        if let Some(backlog) = &backlog {
            backlog.sent(batch.len());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::io::AsyncWriteExt as _;

    #[tokio::test]
    async fn a_peer_that_reads_nothing_pauses_reading_then_is_refused_and_nothing_stays_counted() {
        let _alone = inbound::BUDGET_TESTS.lock().await;
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let before = Backlog::unsent_total();
                // A socket whose peer never reads: a duplex pipe with a small buffer.
                let (ours, _theirs) = tokio::io::duplex(64 * 1024);
                let backlog = Rc::new(Backlog::default());
                let mut writer = QueuedWriter::spawn(ours, backlog.clone());
                let message = vec![7u8; 1 << 20];
                let mut refused = None;
                for i in 0..100 {
                    match writer.write_all(&message).await {
                        Ok(()) => writer.flush().await.unwrap(),
                        Err(e) => {
                            refused = Some((i, e));
                            break;
                        }
                    }
                    if i == 20 {
                        assert!(backlog.paused(), "20 MiB unsent and still reading calls");
                    }
                }
                let (at, error) = refused.expect("never refused");
                assert_eq!(at, MAX_UNSENT_BYTES >> 20, "{error}");
                assert!(error.to_string().contains("the limit is 64 MiB"), "{error}");
                drop(writer);
                drop(backlog);
                // The drain task lets go of the backlog once it sees the writer gone.
                for _ in 0..100 {
                    if Backlog::unsent_total() <= before {
                        break;
                    }
                    tokio::task::yield_now().await;
                }
                assert!(Backlog::unsent_total() <= before);
            })
            .await;
    }

    #[test]
    fn heavy_calls_pause_reading_sooner() {
        let _alone = inbound::BUDGET_TESTS.blocking_lock();
        let backlog = Rc::new(Backlog::default());
        let light: Vec<CallGuard> = (0..MAX_CALL_WEIGHT - 1)
            .map(|_| backlog.call_started(1))
            .collect();
        assert!(!backlog.paused());
        let heavy = backlog.call_started(16);
        assert!(backlog.paused());
        drop(heavy);
        assert!(!backlog.paused());
        drop(light);
        assert_eq!(backlog.calls.get(), 0);
    }

    #[test]
    fn past_the_total_only_connections_whose_peers_read_nothing_are_closed() {
        let _alone = inbound::BUDGET_TESTS.blocking_lock();
        let before = Backlog::unsent_total();
        // Enough laggards, each paused for its own unread replies, to hold the total.
        let laggards: Vec<Rc<Backlog>> = (0..MAX_UNSENT_BYTES_TOTAL / PAUSE_READING_BYTES)
            .map(|_| {
                let b = Rc::new(Backlog::default());
                QueuedWriter::admit(&b, PAUSE_READING_BYTES).unwrap();
                assert!(b.paused());
                b
            })
            .collect();
        assert!(Backlog::unsent_total() >= before + MAX_UNSENT_BYTES_TOTAL);
        // A connection whose peer reads its replies still gets its reply queued.
        let reader = Rc::new(Backlog::default());
        QueuedWriter::admit(&reader, 1 << 20).unwrap();
        assert!(!reader.paused());
        // A laggard that would add more is closed, and stays closed.
        let error = QueuedWriter::admit(&laggards[0], 1 << 20).unwrap_err();
        let limit = format!("the limit is {} MiB", MAX_UNSENT_BYTES_TOTAL >> 20);
        assert!(error.to_string().contains(&limit), "{error}");
        assert!(QueuedWriter::admit(&laggards[0], 1).is_err());
        // The others' replies are sent: room again, for everyone.
        for b in &laggards[1..] {
            b.sent(PAUSE_READING_BYTES);
            assert!(!b.paused());
        }
        drop(laggards);
        drop(reader);
        assert_eq!(Backlog::unsent_total(), before);
    }

    #[tokio::test]
    async fn calls_of_every_connection_together_pause_clients_but_never_peers() {
        let _alone = inbound::BUDGET_TESTS.lock().await;
        use tokio::io::AsyncWriteExt as _;

        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                // Eight busy connections, each under its own limit, just under the total.
                let each = MAX_CALL_WEIGHT_TOTAL / 8 - 1;
                assert!(each < MAX_CALL_WEIGHT);
                let busy: Vec<Rc<Backlog>> = (0..8).map(|_| Rc::new(Backlog::default())).collect();
                let mut calls: Vec<CallGuard> = busy.iter().map(|b| b.call_started(each)).collect();
                let (mut client, _, mut client_w) = open_reader();
                let (mut peer, peer_backlog, mut peer_w) = open_reader();
                peer_backlog.set_peer();
                let mut buf = [0u8; 64];
                client_w.write_all(&table(8)).await.unwrap();
                peer_w.write_all(&table(8)).await.unwrap();
                assert!(!busy[0].paused());
                assert_eq!(read(&mut client, &mut buf).await, Ok(8));

                // One more call anywhere reaches the total: every client connection waits,
                // a controller peer reads on.
                calls.push(busy[0].call_started(8));
                assert!(busy[1].paused(), "the total did not pause the others");
                client_w.write_all(&[1; 8]).await.unwrap();
                assert!(
                    read(&mut client, &mut buf).await.is_err(),
                    "a client read past the total"
                );
                assert_eq!(read(&mut peer, &mut buf).await, Ok(8));

                // Once calls elsewhere end, the client reads on.
                calls.truncate(4);
                assert_eq!(read(&mut client, &mut buf).await, Ok(8));
                drop(calls);
                assert!(busy.iter().all(|b| b.calls.get() == 0));
            })
            .await;
    }

    /// A server-side reader on a pipe, its backlog, and the pipe's other end (the peer).
    fn open_reader() -> (
        PausingReader<tokio_util::compat::Compat<tokio::io::DuplexStream>>,
        Rc<Backlog>,
        tokio::io::DuplexStream,
    ) {
        use tokio_util::compat::TokioAsyncReadCompatExt as _;
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let backlog = Rc::new(Backlog::default());
        (
            PausingReader::new(ours.compat(), backlog.clone()),
            backlog,
            theirs,
        )
    }

    /// The framing of a one-segment frame of `bytes` (a multiple of 8) declared, not sent.
    fn table(bytes: usize) -> Vec<u8> {
        let mut t = 0u32.to_le_bytes().to_vec();
        t.extend_from_slice(&((bytes / 8) as u32).to_le_bytes());
        t
    }

    /// One read, or `Err` when it is still waiting after 200 ms.
    async fn read<R: AsyncRead + Unpin>(r: &mut R, buf: &mut [u8]) -> Result<usize, ()> {
        use futures::io::AsyncReadExt as _;
        match tokio::time::timeout(std::time::Duration::from_millis(200), r.read(buf)).await {
            Ok(n) => Ok(n.unwrap()),
            Err(_) => Err(()),
        }
    }

    #[tokio::test]
    async fn large_frames_of_every_connection_together_wait_for_the_shared_budget() {
        let _alone = inbound::BUDGET_TESTS.lock().await;
        use futures::io::AsyncReadExt as _;
        use tokio::io::AsyncWriteExt as _;
        use tokio_util::compat::TokioAsyncReadCompatExt as _;

        // Frames as large as a connection may send: the budget holds four of them.
        let frame = crate::socket::MAX_INBOUND_BYTES as usize;
        assert_eq!(inbound::MAX_PARTIAL_BYTES_TOTAL / frame, 4);
        let before = inbound::partial_total();
        let mut readers = Vec::new();
        let mut writers = Vec::new();
        for _ in 0..5 {
            let (ours, mut theirs) = tokio::io::duplex(1 << 16);
            theirs.write_all(&table(frame)).await.unwrap();
            theirs.write_all(&[1; 100]).await.unwrap();
            readers.push(PausingReader::new(
                ours.compat(),
                Rc::new(Backlog::default()),
            ));
            writers.push(theirs);
        }
        let mut buf = [0u8; 64];
        // Four connections have their tables handed on and read into their bodies.
        for r in &mut readers[..4] {
            assert_eq!(read(r, &mut buf).await, Ok(8));
            assert_eq!(read(r, &mut buf).await, Ok(64));
        }
        assert!(inbound::partial_total() >= before + 4 * frame);
        // The fifth's table is held back (capnp would allocate its body on reading it).
        let mut fifth = readers.pop().unwrap();
        assert!(
            read(&mut fifth, &mut buf).await.is_err(),
            "read past the budget"
        );
        // One connection closing gives its share back, and the fifth reads on.
        let first = readers.remove(0);
        let mut fifth_buf = [0u8; 64];
        let closing = async move {
            tokio::task::yield_now().await;
            drop(first);
        };
        let (n, ()) = tokio::time::timeout(std::time::Duration::from_secs(5), async {
            tokio::join!(fifth.read(&mut fifth_buf), closing)
        })
        .await
        .expect("the fifth was never woken");
        assert_eq!(n.unwrap(), 8);
        assert_eq!(read(&mut fifth, &mut buf).await, Ok(64));
        drop(fifth);
        drop(readers);
        assert!(
            inbound::partial_total() <= before,
            "closed connections kept their share"
        );
        // A frame over what one connection may send is refused, not waited for.
        let (ours, mut theirs) = tokio::io::duplex(1 << 16);
        theirs.write_all(&table(frame + 8)).await.unwrap();
        let mut over = PausingReader::new(ours.compat(), Rc::new(Backlog::default()));
        let refused = over.read(&mut buf).await.unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::InvalidData, "{refused}");
    }

    #[tokio::test]
    async fn a_reader_that_becomes_a_peer_while_waiting_leaves_the_line() {
        let _alone = inbound::BUDGET_TESTS.lock().await;
        use tokio::io::AsyncWriteExt as _;

        let frame = crate::socket::MAX_INBOUND_BYTES as usize;
        let mut buf = [0u8; 64];
        let mut holders = Vec::new();
        for _ in 0..4 {
            let (mut r, _, mut w) = open_reader();
            w.write_all(&table(frame)).await.unwrap();
            assert_eq!(read(&mut r, &mut buf).await, Ok(8));
            holders.push((r, w));
        }
        // Two readers wait in line: a large frame, then a smaller one behind it.
        let (mut first, first_backlog, mut first_w) = open_reader();
        first_w.write_all(&table(frame)).await.unwrap();
        assert!(
            read(&mut first, &mut buf).await.is_err(),
            "read past the budget"
        );
        let small = 2 * inbound::RESERVE_FROM;
        let (mut second, _, mut second_w) = open_reader();
        second_w.write_all(&table(small)).await.unwrap();
        assert!(
            read(&mut second, &mut buf).await.is_err(),
            "went ahead of the line"
        );

        // The first turns out to be a controller peer (its join is read): it reads on
        // without the budget, and must not keep its place at the head of the line.
        first_backlog.peer.set(true);
        assert_eq!(read(&mut first, &mut buf).await, Ok(8));
        drop(holders.pop());
        assert_eq!(
            read(&mut second, &mut buf).await,
            Ok(8),
            "the line stayed stuck behind a reader that left it"
        );
    }
}
