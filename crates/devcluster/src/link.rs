//! Network faults without root or kernel modules: a [`Link`] is a TCP proxy on 127.0.0.1
//! that one daemon uses to reach another, so a test can cut it or slow it.
//!
//! - **Cut** (a partition): no byte moves either way and no connection is closed, as when a
//!   network drops packets; the kernel still completes new TCP handshakes, so connects succeed
//!   and then hear nothing, which every timeout must cover. Bytes held during the cut are
//!   delivered once it heals, as TCP's retransmission would.
//! - **Delay** (a slow link): every byte is delivered `delay` after it was read, in order,
//!   in each direction (a round trip grows by twice the delay) without limiting throughput.
//!
//! Each accepted connection has one thread per direction; all of them end when the link is
//! dropped or either side closes.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What a link does to its traffic now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Mode {
    cut: bool,
    delay: Duration,
}

#[derive(Default)]
struct Shared {
    mode: Mutex<Mode>,
    changed: Condvar,
    stop: AtomicBool,
    /// Every accepted stream (both ends), shut down when the link is dropped.
    streams: Mutex<Vec<TcpStream>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Mode> {
        self.mode.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Blocks while the link is cut; `false` once the link is dropped.
    fn wait_open(&self) -> bool {
        let mut mode = self.lock();
        while mode.cut && !self.stop.load(Ordering::Acquire) {
            mode = self
                .changed
                .wait_timeout(mode, Duration::from_millis(100))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        !self.stop.load(Ordering::Acquire)
    }
}

/// A proxy from `from` to `to`: connect to [`Link::addr`] instead of `to`'s own address.
pub struct Link {
    from: String,
    to: String,
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Link({} -> {} via {})", self.from, self.to, self.addr)
    }
}

impl Link {
    /// Opens a link from daemon `from` to daemon `to`, which listens at `target`.
    pub fn open(from: &str, to: &str, target: SocketAddr) -> std::io::Result<Link> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let accept_shared = shared.clone();
        std::thread::Builder::new()
            .name(format!("link {from}->{to}"))
            .spawn(move || accept_loop(listener, target, accept_shared))?;
        Ok(Link {
            from: from.to_string(),
            to: to.to_string(),
            addr,
            shared,
        })
    }

    /// Where `from` connects to reach `to`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The daemon on the connecting side.
    pub fn from(&self) -> &str {
        &self.from
    }

    /// The daemon on the listening side.
    pub fn to(&self) -> &str {
        &self.to
    }

    /// Cuts the link (`true`) or heals it (`false`).
    pub fn set_cut(&self, cut: bool) {
        self.shared.lock().cut = cut;
        self.shared.changed.notify_all();
    }

    /// Delays every byte by `delay` in each direction (zero for none).
    pub fn set_delay(&self, delay: Duration) {
        self.shared.lock().delay = delay;
        self.shared.changed.notify_all();
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.changed.notify_all();
        // Wake the accept loop so that it sees the stop flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        let streams = std::mem::take(
            &mut *self
                .shared
                .streams
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        for s in streams {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

fn accept_loop(listener: TcpListener, target: SocketAddr, shared: Arc<Shared>) {
    for inbound in listener.incoming() {
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        let Ok(inbound) = inbound else { continue };
        // The far side may be down (a killed daemon): then so is this connection, as a
        // refused connect would be.
        let Ok(outbound) = TcpStream::connect_timeout(&target, Duration::from_secs(2)) else {
            continue;
        };
        let _ = inbound.set_nodelay(true);
        let _ = outbound.set_nodelay(true);
        if let Err(e) = splice(inbound, outbound, &shared) {
            tracing::warn!("link to {target}: {e}");
        }
    }
}

/// Starts both directions of one proxied connection.
fn splice(a: TcpStream, b: TcpStream, shared: &Arc<Shared>) -> std::io::Result<()> {
    {
        let mut streams = shared.streams.lock().unwrap_or_else(|p| p.into_inner());
        streams.push(a.try_clone()?);
        streams.push(b.try_clone()?);
    }
    pump(a.try_clone()?, b.try_clone()?, shared.clone())?;
    pump(b, a, shared.clone())
}

/// One direction: a reader thread stamps each chunk with its due time; a writer thread
/// delivers it then, unless the link is cut.
fn pump(from: TcpStream, to: TcpStream, shared: Arc<Shared>) -> std::io::Result<()> {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let reader_shared = shared.clone();
    std::thread::Builder::new()
        .name("link read".into())
        .spawn(move || read_side(from, tx, reader_shared))?;
    std::thread::Builder::new()
        .name("link write".into())
        .spawn(move || write_side(to, rx, shared))?;
    Ok(())
}

fn read_side(mut from: TcpStream, tx: mpsc::Sender<(Instant, Vec<u8>)>, shared: Arc<Shared>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // While cut, read nothing: the sender's buffers fill and its writes block.
        if !shared.wait_open() {
            return;
        }
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let delay = shared.lock().delay;
        if tx
            .send((Instant::now() + delay, buf[..n].to_vec()))
            .is_err()
        {
            return;
        }
    }
}

fn write_side(mut to: TcpStream, rx: mpsc::Receiver<(Instant, Vec<u8>)>, shared: Arc<Shared>) {
    while let Ok((due, bytes)) = rx.recv() {
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        if !shared.wait_open() || to.write_all(&bytes).is_err() {
            let _ = to.shutdown(Shutdown::Both);
            return;
        }
    }
    // The reading side closed: pass the end of stream on.
    let _ = to.shutdown(Shutdown::Write);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// An echo server on 127.0.0.1 for one connection at a time.
    fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in listener.incoming() {
                let Ok(mut s) = s else { return };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf) {
                        if n == 0 || s.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    fn round_trip(s: &mut TcpStream) -> Duration {
        let start = Instant::now();
        s.write_all(b"ping").unwrap();
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping");
        start.elapsed()
    }

    #[test]
    fn a_delayed_link_adds_the_delay_each_way_and_a_cut_one_holds_bytes_until_healed() {
        let link = Link::open("a", "b", echo_server()).unwrap();
        let mut s = TcpStream::connect(link.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        round_trip(&mut s);

        link.set_delay(Duration::from_millis(100));
        let rtt = round_trip(&mut s);
        assert!(rtt >= Duration::from_millis(200), "round trip {rtt:?}");
        link.set_delay(Duration::ZERO);

        link.set_cut(true);
        s.write_all(b"ping").unwrap();
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut buf = [0u8; 4];
        let held = s.read(&mut buf);
        assert!(held.is_err(), "a cut link delivered {held:?}");
        link.set_cut(false);
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping", "bytes held by the cut arrive after it heals");
    }

    #[test]
    fn dropping_a_link_closes_its_connections() {
        let link = Link::open("a", "b", echo_server()).unwrap();
        let mut s = TcpStream::connect(link.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        round_trip(&mut s);
        drop(link);
        let mut buf = [0u8; 4];
        assert!(matches!(s.read(&mut buf), Ok(0) | Err(_)));
    }
}
