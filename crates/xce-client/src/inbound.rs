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
//! closes. Controller peers do not reserve: Raft appends must never wait behind clients.

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
static WAITING: Mutex<Vec<Waker>> = Mutex::new(Vec::new());

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

/// Takes `bytes` out of the shared budget, or registers `waker` to be woken when some is
/// released and answers `false`.
pub fn reserve(bytes: usize, waker: &Waker) -> bool {
    let taken = PARTIAL_TOTAL.fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
        let total = held.checked_add(bytes)?;
        (total <= MAX_PARTIAL_BYTES_TOTAL).then_some(total)
    });
    if taken.is_ok() {
        return true;
    }
    let mut waiting = WAITING.lock().unwrap_or_else(|e| e.into_inner());
    waiting.push(waker.clone());
    // A release between the attempt and the registration would wake no one: look again.
    drop(waiting);
    if PARTIAL_TOTAL.load(Ordering::Acquire) + bytes <= MAX_PARTIAL_BYTES_TOTAL {
        waker.wake_by_ref();
    }
    false
}

/// Gives `bytes` back to the shared budget and wakes every reader waiting for some.
pub fn release(bytes: usize) {
    if bytes == 0 {
        return;
    }
    PARTIAL_TOTAL.fetch_sub(bytes, Ordering::AcqRel);
    let waiting = std::mem::take(&mut *WAITING.lock().unwrap_or_else(|e| e.into_inner()));
    for waker in waiting {
        waker.wake();
    }
}

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
}
