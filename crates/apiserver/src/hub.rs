//! One controller event subscription shared by every HTTP client of `/v1/events`. Each item
//! gets an id (`<boot>-<seq>`: this process's random boot mark and a sequence number), the
//! last [`CAPACITY`] items are kept, and every live client gets each new one. A client that
//! reconnects with `Last-Event-ID` gets what it missed when the hub still holds it, and an
//! explicit resync item when it does not (another apiserver process, or too long away), so a
//! gap is never silent; so does a client that falls behind the live stream.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;
use xce_client::json::EventJson;

/// Items kept for clients that reconnect.
pub const CAPACITY: usize = 4096;

/// One item and its sequence number.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub seq: u64,
    pub event: EventJson,
}

/// Where a client starts.
#[derive(Debug)]
pub struct Start {
    /// What it missed and the hub still holds, oldest first.
    pub replay: Vec<Arc<Item>>,
    /// Why it must re-read state first, when what it missed is gone.
    pub resync: Option<String>,
    /// Everything from here on.
    pub live: broadcast::Receiver<Arc<Item>>,
}

#[derive(Debug)]
struct Ring {
    items: VecDeque<Arc<Item>>,
    next_seq: u64,
}

/// The shared stream.
#[derive(Debug, Clone)]
pub struct Hub {
    boot: Arc<str>,
    ring: Arc<Mutex<Ring>>,
    live: broadcast::Sender<Arc<Item>>,
}

impl Default for Hub {
    fn default() -> Self {
        Hub::new()
    }
}

impl Hub {
    /// An empty hub with a fresh boot mark.
    pub fn new() -> Hub {
        let (live, _) = broadcast::channel(CAPACITY);
        Hub {
            boot: format!("{:08x}", rand::random::<u32>()).into(),
            ring: Arc::new(Mutex::new(Ring {
                items: VecDeque::with_capacity(CAPACITY),
                next_seq: 1,
            })),
            live,
        }
    }

    /// The SSE id of an item.
    pub fn id(&self, item: &Item) -> String {
        format!("{}-{}", self.boot, item.seq)
    }

    /// Adds an item and hands it to every live client.
    pub fn publish(&self, event: EventJson) {
        let mut ring = lock(&self.ring);
        let item = Arc::new(Item {
            seq: ring.next_seq,
            event,
        });
        ring.next_seq += 1;
        if ring.items.len() == CAPACITY {
            ring.items.pop_front();
        }
        ring.items.push_back(item.clone());
        // Sent under the lock: a client that subscribes sees each item once, either in its
        // replay or live.
        let _ = self.live.send(item);
    }

    /// Clients listening now.
    pub fn clients(&self) -> usize {
        self.live.receiver_count()
    }

    /// Where a client that last saw `last_id` (if any) starts.
    pub fn subscribe(&self, last_id: Option<&str>) -> Start {
        let ring = lock(&self.ring);
        let live = self.live.subscribe();
        let Some(last_id) = last_id else {
            return Start {
                replay: Vec::new(),
                resync: None,
                live,
            };
        };
        let last_seq = last_id
            .split_once('-')
            .filter(|(boot, _)| *boot == &*self.boot)
            .and_then(|(_, seq)| seq.parse::<u64>().ok())
            .filter(|seq| *seq < ring.next_seq);
        let oldest = ring.items.front().map_or(ring.next_seq, |i| i.seq);
        match last_seq {
            // Everything after it is still held (or nothing came since).
            Some(seq) if seq + 1 >= oldest => Start {
                replay: ring.items.iter().filter(|i| i.seq > seq).cloned().collect(),
                resync: None,
                live,
            },
            Some(_) => Start {
                replay: Vec::new(),
                resync: Some(format!(
                    "the events after {last_id} are no longer held: re-read state"
                )),
                live,
            },
            None => Start {
                replay: Vec::new(),
                resync: Some(format!(
                    "event id {last_id} is not one of this apiserver's (restarted, or another one): re-read state"
                )),
                live,
            },
        }
    }
}

fn lock(ring: &Mutex<Ring>) -> std::sync::MutexGuard<'_, Ring> {
    ring.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn host(n: u64) -> EventJson {
        EventJson::Host {
            index: n,
            name: format!("w{n}"),
            state: "ok".into(),
        }
    }

    #[test]
    fn a_client_that_reconnects_gets_what_it_missed_then_live_items() {
        let hub = Hub::new();
        let mut first = hub.subscribe(None);
        for n in 1..=3 {
            hub.publish(host(n));
        }
        let seen = first.live.try_recv().unwrap();
        let last = hub.id(&seen);
        // It went away after the first item and comes back.
        let mut again = hub.subscribe(Some(&last));
        assert_eq!(again.resync, None);
        let replayed: Vec<u64> = again.replay.iter().map(|i| i.seq).collect();
        assert_eq!(replayed, vec![2, 3]);
        hub.publish(host(4));
        assert_eq!(again.live.try_recv().unwrap().seq, 4);
    }

    #[test]
    fn a_gap_the_hub_cannot_fill_is_a_resync_never_silence() {
        let hub = Hub::new();
        hub.publish(host(0));
        let first = hub.id(&Item {
            seq: 1,
            event: host(0),
        });
        for n in 1..=(CAPACITY as u64 + 5) {
            hub.publish(host(n));
        }
        let start = hub.subscribe(Some(&first));
        assert!(start.replay.is_empty());
        assert!(start.resync.unwrap().contains("no longer held"));
        // Another process's id, or garbage.
        for other in ["0000beef-3", "nonsense", "x-y"] {
            let start = hub.subscribe(Some(other));
            assert!(start
                .resync
                .unwrap()
                .contains("not one of this apiserver's"));
        }
        // An id from the future is not trusted either.
        let future = format!("{}-999999", hub.boot);
        assert!(hub.subscribe(Some(&future)).resync.is_some());
    }

    #[test]
    fn the_latest_id_replays_nothing_and_misses_nothing() {
        let hub = Hub::new();
        hub.publish(host(1));
        let last = format!("{}-1", hub.boot);
        let mut start = hub.subscribe(Some(&last));
        assert!(start.replay.is_empty() && start.resync.is_none());
        hub.publish(host(2));
        assert_eq!(start.live.try_recv().unwrap().seq, 2);
    }
}
