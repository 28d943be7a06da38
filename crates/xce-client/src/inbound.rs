//! Frames a server connection has begun and not finished reading, bounded across every
//! connection together. capnp allocates a frame's whole body as soon as it has read the
//! segment table and fills it as bytes arrive, so a peer that declares large frames and sends
//! them slowly makes a server hold them: each connection is bounded by
//! [`crate::socket::MAX_INBOUND_BYTES`], but many connections together were not (eight
//! connections each holding a 63 MiB frame added 504 MiB to a primary).
//!
//! [`Framing`] follows capnp's stream framing (segment table, then body) byte by byte, so
//! that a reader knows, before capnp sees a table (and allocates its body), how large the
//! body is. A body of
//! [`RESERVE_FROM`] bytes or more is read only once [`reserve`] has taken its size out of
//! [`MAX_PARTIAL_BYTES_TOTAL`]; the reservation is released when the body has been read (the
//! call it carries is then bounded by the connection's call weight) or the connection
//! closes. Readers that must wait are served in the order they first asked. Controller peers
//! do not reserve: Raft appends must never wait behind clients.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::task::Waker;

use thiserror::Error;

/// Bytes of partly read frames all connections may hold together.
pub const MAX_PARTIAL_BYTES_TOTAL: usize = 192 << 20;
/// Bodies smaller than this are read without a reservation: ordinary calls never wait, and
/// what they can hold is bounded by the connection limit times this.
pub const RESERVE_FROM: usize = 64 << 10;
/// capnp refuses a message of this many segments or more; so does [`Framing`], before it
/// buffers a table that large.
const MAX_SEGMENTS: u64 = 512;

static PARTIAL_TOTAL: AtomicUsize = AtomicUsize::new(0);
static QUEUE: Mutex<Queue> = Mutex::new(Queue {
    last_ticket: 0,
    waiting: BTreeMap::new(),
});

/// Readers waiting for the budget, served first come first served: a large frame is not
/// passed over for as long as smaller ones keep fitting in what is released.
struct Queue {
    last_ticket: u64,
    waiting: BTreeMap<u64, Waker>,
}

impl Queue {
    /// Wakes the reader first in line, if any: it may fit now.
    fn wake_first(&self) {
        if let Some(waker) = self.waiting.values().next() {
            waker.wake_by_ref();
        }
    }
}

fn queue() -> std::sync::MutexGuard<'static, Queue> {
    QUEUE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A reader's place in line for the budget, taken at its first refusal and kept until it is
/// served; a reader that goes away while waiting gives it up with [`leave`].
#[derive(Debug, Default)]
pub struct Place(Option<u64>);

/// A stream that is not capnp framing.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum FramingError {
    #[error("a frame declares {0} segments; at most {max} are allowed", max = MAX_SEGMENTS - 1)]
    Segments(u64),
}

impl From<FramingError> for std::io::Error {
    fn from(e: FramingError) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e)
    }
}

/// Where a connection is in capnp's stream framing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Framing {
    state: State,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// The segment table: its bytes so far, and how many it has in all (8 until the first
    /// word says how many segments follow).
    Table { bytes: Vec<u8>, len: usize },
    /// A body: the bytes still to come.
    Body { left: u64 },
}

impl Default for Framing {
    fn default() -> Self {
        Framing {
            state: State::Table {
                bytes: Vec::with_capacity(8),
                len: 8,
            },
        }
    }
}

impl Framing {
    /// The most bytes the next read may take: never past the end of the current table or
    /// body, so that a body's size is known before its first byte is read.
    pub fn next_read_limit(&self) -> usize {
        match &self.state {
            State::Table { bytes, len } => len - bytes.len(),
            State::Body { left } => usize::try_from(*left).unwrap_or(usize::MAX),
        }
    }

    /// The bytes of the body being read still to come; `None` while reading a table.
    pub fn body_left(&self) -> Option<u64> {
        match self.state {
            State::Body { left } => Some(left),
            State::Table { .. } => None,
        }
    }

    /// Takes `data`, just read (at most [`Framing::next_read_limit`] bytes). When `data`
    /// completes a segment table, answers the whole table: a reader holds it back from capnp
    /// (which allocates the body as soon as it has the table) until the body may be read.
    pub fn consumed(&mut self, data: &[u8]) -> Result<Option<Vec<u8>>, FramingError> {
        match &mut self.state {
            State::Body { left } => {
                *left = left.saturating_sub(data.len() as u64);
                if *left == 0 {
                    *self = Framing::default();
                }
                Ok(None)
            }
            State::Table { bytes, len } => {
                bytes.extend_from_slice(data);
                if bytes.len() == 8 && *len == 8 {
                    *len = table_len(bytes)?;
                }
                if bytes.len() < *len {
                    return Ok(None);
                }
                let table = std::mem::take(bytes);
                let body = body_len(&table);
                *self = Framing::default();
                if body > 0 {
                    self.state = State::Body { left: body };
                }
                Ok(Some(table))
            }
        }
    }
}

/// The whole table's length, from its first word: a count, then that many 4-byte sizes,
/// padded to a whole word.
fn table_len(first_word: &[u8]) -> Result<usize, FramingError> {
    let count = u64::from(le_u32(&first_word[0..4])) + 1;
    if count >= MAX_SEGMENTS {
        return Err(FramingError::Segments(count));
    }
    Ok((4 + 4 * count as usize).next_multiple_of(8))
}

/// The body's length: the sum of the table's segment sizes, in words.
fn body_len(table: &[u8]) -> u64 {
    let count = u64::from(le_u32(&table[0..4])) + 1;
    (0..count as usize)
        .map(|i| u64::from(le_u32(&table[4 + 4 * i..8 + 4 * i])))
        .sum::<u64>()
        * 8
}

fn le_u32(bytes: &[u8]) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(bytes);
    u32::from_le_bytes(word)
}

/// Takes `bytes` out of the shared budget when there is room and no reader that asked before
/// is still waiting; otherwise keeps (or takes) `place` in line with `waker`, to be woken when
/// it is first and some budget is released, and answers `false`.
pub fn reserve(bytes: usize, waker: &Waker, place: &mut Place) -> bool {
    let mut q = queue();
    let first = q.waiting.keys().next().copied();
    if first.is_none() || first == place.0 {
        let taken = PARTIAL_TOTAL.fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
            let total = held.checked_add(bytes)?;
            (total <= MAX_PARTIAL_BYTES_TOTAL).then_some(total)
        });
        if taken.is_ok() {
            if let Some(ticket) = place.0.take() {
                q.waiting.remove(&ticket);
            }
            // The next in line may fit as well.
            q.wake_first();
            return true;
        }
    }
    let ticket = match place.0 {
        Some(ticket) => ticket,
        None => {
            q.last_ticket += 1;
            place.0 = Some(q.last_ticket);
            q.last_ticket
        }
    };
    q.waiting.insert(ticket, waker.clone());
    false
}

/// Gives `bytes` back to the shared budget and wakes the reader first in line.
pub fn release(bytes: usize) {
    if bytes == 0 {
        return;
    }
    let q = queue();
    PARTIAL_TOTAL.fetch_sub(bytes, Ordering::AcqRel);
    q.wake_first();
}

/// Gives up a place in line (the reader is going away): the next in line is woken if this
/// one was first.
pub fn leave(place: &mut Place) {
    let Some(ticket) = place.0.take() else { return };
    let mut q = queue();
    let was_first = q.waiting.keys().next() == Some(&ticket);
    q.waiting.remove(&ticket);
    if was_first {
        q.wake_first();
    }
}

/// Held by the tests that use the process-wide budget, so that they do not share it.
#[cfg(test)]
pub(crate) static BUDGET_TESTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Bytes of partly read frames every connection of this process holds now.
pub fn partial_total() -> usize {
    PARTIAL_TOTAL.load(Ordering::Acquire)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// capnp's framing of a message with these segment sizes (in words), bodies zeroed.
    fn frame(sizes: &[u32]) -> Vec<u8> {
        let mut out = ((sizes.len() - 1) as u32).to_le_bytes().to_vec();
        for s in sizes {
            out.extend_from_slice(&s.to_le_bytes());
        }
        if !out.len().is_multiple_of(8) {
            out.extend_from_slice(&[0; 4]);
        }
        let words: u32 = sizes.iter().sum();
        out.resize(out.len() + words as usize * 8, 0);
        out
    }

    proptest! {
        /// However the stream is cut into reads, each body is seen whole, with its size
        /// known before its first byte, and no read crosses a table or a body.
        #[test]
        fn bodies_are_known_before_they_are_read(
            messages in prop::collection::vec(prop::collection::vec(0u32..40, 1..12), 1..8),
            cuts in prop::collection::vec(1usize..64, 1..64),
        ) {
            let stream: Vec<u8> = messages.iter().flat_map(|m| frame(m)).collect();
            let mut framing = Framing::default();
            let mut announced = Vec::new();
            let mut in_body = false;
            let mut at = 0;
            let mut i = 0;
            while at < stream.len() {
                let limit = framing.next_read_limit();
                prop_assert!(limit > 0);
                let n = cuts[i % cuts.len()].min(limit).min(stream.len() - at);
                i += 1;
                let left = framing.body_left();
                if let (Some(left), false) = (left, in_body) {
                    announced.push(left);
                }
                in_body = left.is_some();
                framing.consumed(&stream[at..at + n]).unwrap();
                at += n;
            }
            prop_assert_eq!(&framing, &Framing::default());
            let bodies: Vec<u64> = messages
                .iter()
                .map(|m| m.iter().map(|&w| u64::from(w) * 8).sum::<u64>())
                .filter(|&b| b > 0)
                .collect();
            // Every body was announced in full when its first byte was due.
            prop_assert_eq!(announced, bodies);
        }
    }

    #[test]
    fn a_table_of_too_many_segments_is_refused_before_it_is_buffered() {
        let mut framing = Framing::default();
        let mut word = 600u32.to_le_bytes().to_vec();
        word.extend_from_slice(&1u32.to_le_bytes());
        assert_eq!(framing.consumed(&word), Err(FramingError::Segments(601)));
    }

    /// A waker that counts how often it was woken.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl std::task::Wake for Count {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn waker() -> (std::sync::Arc<Count>, Waker) {
        let count = std::sync::Arc::new(Count::default());
        (count.clone(), Waker::from(count))
    }

    #[test]
    fn readers_that_wait_are_served_in_the_order_they_asked() {
        let _alone = BUDGET_TESTS.blocking_lock();
        let (_, idle) = waker();
        let held = MAX_PARTIAL_BYTES_TOTAL / 4 * 3;
        let large = MAX_PARTIAL_BYTES_TOTAL / 2;
        let mut holder = Place::default();
        assert!(reserve(held, &idle, &mut holder));

        // A large frame that does not fit waits; a small one that would fit, asking after
        // it, waits behind it instead of going ahead.
        let (large_woken, large_waker) = waker();
        let mut large_place = Place::default();
        assert!(!reserve(large, &large_waker, &mut large_place));
        let (small_woken, small_waker) = waker();
        let mut small_place = Place::default();
        assert!(
            !reserve(RESERVE_FROM, &small_waker, &mut small_place),
            "a later, smaller frame went ahead of one waiting"
        );
        // A third that leaves while waiting does not keep anyone waiting.
        let (_, gone_waker) = waker();
        let mut gone = Place::default();
        assert!(!reserve(RESERVE_FROM, &gone_waker, &mut gone));
        leave(&mut gone);

        release(held);
        assert!(
            large_woken.0.load(Ordering::SeqCst) > 0,
            "the first in line was not woken"
        );
        assert_eq!(small_woken.0.load(Ordering::SeqCst), 0);
        assert!(
            !reserve(RESERVE_FROM, &small_waker, &mut small_place),
            "the second in line was served before the first"
        );
        assert!(reserve(large, &large_waker, &mut large_place));
        assert!(
            small_woken.0.load(Ordering::SeqCst) > 0,
            "the next in line was not woken"
        );
        assert!(reserve(RESERVE_FROM, &small_waker, &mut small_place));

        // The first in line leaving wakes the next.
        let rest = MAX_PARTIAL_BYTES_TOTAL - large - RESERVE_FROM;
        let mut filler = Place::default();
        assert!(reserve(rest, &idle, &mut filler));
        let (_, first_waker) = waker();
        let mut first = Place::default();
        assert!(!reserve(large, &first_waker, &mut first));
        let (next_woken, next_waker) = waker();
        let mut next = Place::default();
        assert!(!reserve(RESERVE_FROM, &next_waker, &mut next));
        release(RESERVE_FROM);
        assert_eq!(next_woken.0.load(Ordering::SeqCst), 0);
        leave(&mut first);
        assert!(
            next_woken.0.load(Ordering::SeqCst) > 0,
            "a departure left the line stuck"
        );
        assert!(reserve(RESERVE_FROM, &next_waker, &mut next));

        release(large + rest + RESERVE_FROM);
        assert_eq!(partial_total(), 0);
        assert!(queue().waiting.is_empty());
    }
}
