//! Event subscriptions that survive failover.
//!
//! [`EventStream::open`] takes a client of its own and registers a rejoin action that
//! subscribes on every new connection, passing a listener capability served on the
//! connection's thread. Events are not replayed across primaries: every subscription after
//! the first is announced by a [`StreamItem::Resync`] item, after which the caller re-reads
//! whatever state it keeps. A driver task keeps the subscription alive: a cheap call every
//! [`KEEPALIVE`] finds a dead primary (the failover loop then reconnects and the rejoin
//! subscribes again), and a subscription the controller ended (`closed`) is renewed at once.

use std::time::Duration;

use capnp::capability::Rc;
use tokio::sync::mpsc;
use tracing::{debug, info};
use xce_proto::xce_capnp::event_listener;

use crate::client::{Client, ClientError};
use crate::ops::{GetCluster, Subscribe};
use crate::transport::Transport;
use crate::types::{ClusterEvent, EventFilter};
use crate::wire;

/// How often the driver checks that the subscription's primary is still there.
pub const KEEPALIVE: Duration = Duration::from_millis(500);

/// Items buffered between the listener and the caller; when the caller does not keep up, the
/// listener stops taking batches and the controller drops the subscription (then it is
/// renewed, with a resync item).
const BUFFER: usize = 4096;

/// What a subscriber reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamItem {
    /// A change, in log order.
    Event(ClusterEvent),
    /// The subscription was renewed (a failover, or the controller dropped it): events in
    /// between are lost, so re-read the state you keep. It is sent once the new subscription
    /// is in place, so a few events just before it may already come from the new one; the
    /// re-read covers them.
    Resync { reason: String },
}

/// What the listener capability forwards to the stream: `Send`, cheap to clone; every
/// subscription (one per connection) gets a capability feeding the same channels.
#[derive(Debug, Clone)]
pub struct ListenerHandle {
    items: mpsc::Sender<StreamItem>,
    ended: mpsc::UnboundedSender<String>,
}

impl ListenerHandle {
    /// The capnp capability for this handle; call it on a connection's thread.
    pub fn capability(&self) -> event_listener::Client {
        capnp_rpc::new_client(ListenerServer {
            handle: self.clone(),
        })
    }
}

struct ListenerServer {
    handle: ListenerHandle,
}

impl event_listener::Server for ListenerServer {
    async fn events(
        self: Rc<Self>,
        params: event_listener::EventsParams,
        _results: event_listener::EventsResults,
    ) -> Result<(), capnp::Error> {
        let events = params.get()?.get_events()?;
        for e in events.iter() {
            let event = wire::read_event(e)?;
            // Waiting here is the flow control: the controller sends the next batch only
            // when this one is taken.
            self.handle
                .items
                .send(StreamItem::Event(event))
                .await
                .map_err(|_| capnp::Error::disconnected("the subscriber is gone".into()))?;
        }
        Ok(())
    }

    async fn closed(
        self: Rc<Self>,
        params: event_listener::ClosedParams,
        _results: event_listener::ClosedResults,
    ) -> Result<(), capnp::Error> {
        let reason = params.get()?.get_reason()?.to_str()?.to_string();
        let _ = self.handle.ended.send(reason);
        Ok(())
    }
}

/// A stream of events that follows the primary; dropping it ends the subscription.
#[derive(Debug)]
pub struct EventStream {
    items: mpsc::Receiver<StreamItem>,
    driver: tokio::task::JoinHandle<()>,
}

impl Drop for EventStream {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl EventStream {
    /// Subscribes through `client` (which the stream takes over: its rejoin action becomes
    /// the subscription) and returns once the first subscription is in place, or with the
    /// error that kept it from being made.
    pub async fn open<T: Transport>(
        client: Client<T>,
        filter: EventFilter,
    ) -> Result<EventStream, ClientError> {
        let (items_tx, items) = mpsc::channel(BUFFER);
        let (ended_tx, mut ended) = mpsc::unbounded_channel();
        let handle = ListenerHandle {
            items: items_tx.clone(),
            ended: ended_tx,
        };
        let subscriptions = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let count = subscriptions.clone();
        client.set_rejoin(std::sync::Arc::new(move |c: Client<T>| {
            let op = Subscribe {
                listener: handle.clone(),
                filter: filter.clone(),
            };
            let (items, count) = (items_tx.clone(), count.clone());
            Box::pin(async move {
                c.call(op).await?;
                let n = count.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                if n > 0 {
                    info!("event subscription renewed; events in between are not replayed");
                    let reason = "subscribed again (a new primary, or the subscription was dropped): re-read state".to_string();
                    let _ = items.send(StreamItem::Resync { reason }).await;
                }
                Ok(())
            })
        }));
        // The first call runs the rejoin, which subscribes.
        client.call(GetCluster).await?;
        let driver = tokio::spawn(async move {
            loop {
                tokio::select! {
                    reason = ended.recv() => {
                        let Some(reason) = reason else { return };
                        info!(%reason, "the controller ended the event subscription; subscribing again");
                        client.request_rejoin();
                    }
                    () = tokio::time::sleep(KEEPALIVE) => {}
                }
                if let Err(e) = client.call(GetCluster).await {
                    debug!(error = %e, "event subscription keepalive failed; retrying");
                }
            }
        });
        Ok(EventStream { items, driver })
    }

    /// The next item; `None` only if the stream's driver ended.
    pub async fn next(&mut self) -> Option<StreamItem> {
        self.items.recv().await
    }
}
