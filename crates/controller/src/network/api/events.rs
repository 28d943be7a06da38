//! Event subscriptions: the ready primary forwards the state machine's events (the same
//! stream that drives the pushes to workers) to each subscriber's listener, one batch in
//! flight at a time. The bounded backlog of the event stream is each subscriber's queue: a
//! listener that falls [`crate::store::EVENT_BACKLOG`] entries behind, or holds a batch for
//! longer than [`LISTENER_TIMEOUT`], is dropped and told why, and never slows the controller.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tracing::{debug, info, warn};
use xce_client::types::{ClusterEvent, EventFilter};
use xce_client::wire::{self, ReplyHeader};
use xce_proto::xce_capnp::{controller, event_listener};

use super::ControllerService;
use crate::node::Node;
use crate::state::Event;
use crate::store::Published;

/// Longest a listener may take to accept one batch.
const LISTENER_TIMEOUT: Duration = Duration::from_secs(10);
/// Most events in one batch.
const MAX_BATCH: usize = 1024;
/// How often an idle subscription checks that this node is still the ready primary.
const PRIMARY_CHECK: Duration = Duration::from_millis(500);

pub(super) async fn subscribe(
    this: &ControllerService,
    params: controller::SubscribeParams,
    mut results: controller::SubscribeResults,
) -> Result<(), capnp::Error> {
    let p = params.get()?;
    let listener = p.get_listener()?;
    let filter = wire::read_event_filter(p.get_filter()?)?;
    let header = match this.node.admit().await {
        Ok(()) => {
            // Taken before the reply, so that no change applied after it is missed.
            let events = this.node.events();
            info!(kinds = ?filter.kinds, "event subscriber added");
            let token = this.session.borrow().token.clone();
            let sub = Subscriber {
                node: this.node.clone(),
                token,
            };
            tokio::task::spawn_local(forward(sub, events, listener, filter));
            ReplyHeader::ok()
        }
        Err(h) => h,
    };
    wire::write_header(results.get().init_header(), &header);
    Ok(())
}

/// The client-facing form of a state machine event (pushes are not for subscribers).
fn client_event(index: u64, e: &Event) -> Option<ClusterEvent> {
    Some(match e {
        Event::Job {
            id,
            state,
            host,
            attempt,
            queue,
            user,
            pend_reason,
            pend_code,
            reason,
            result,
            task,
        } => ClusterEvent::Job {
            index,
            id: *id,
            state: *state,
            host: host.clone(),
            attempt: *attempt,
            queue: queue.clone(),
            user: user.clone(),
            pend_reason: pend_reason.clone(),
            pend_code: *pend_code,
            reason: reason.clone(),
            result: *result,
            task: *task,
        },
        Event::Host { name, state } => ClusterEvent::Host {
            index,
            name: name.clone(),
            state: *state,
        },
        Event::Queue {
            name,
            priority,
            open,
            active,
        } => ClusterEvent::Queue {
            index,
            name: name.clone(),
            priority: *priority,
            open: *open,
            active: *active,
        },
        Event::Push(_) | Event::Retired { .. } => return None,
    })
}

fn add(batch: &mut Vec<ClusterEvent>, published: &Published, filter: &EventFilter) {
    batch.extend(
        published
            .events
            .iter()
            .filter_map(|e| client_event(published.index, e))
            .filter(|e| filter.wants(e.kind())),
    );
}

/// Who a subscription serves: it lasts only while this node is the ready primary and, for
/// a session a token authenticated, while that token holds.
struct Subscriber {
    node: Arc<Node>,
    token: Option<(String, xce_client::tokens::SecretHash)>,
}

impl Subscriber {
    /// Why the subscription must end now, if it must.
    fn must_end(&self) -> Option<String> {
        if self.node.gate().is_err() {
            return Some("this controller is no longer the ready primary".into());
        }
        let (id, hash) = self.token.as_ref()?;
        let why = self.node.token_still_valid(id, hash).err()?;
        Some(format!("{why}; authenticate again"))
    }
}

/// Forwards events until the listener fails, is too slow, this node stops being the ready
/// primary, or the subscriber's token stops holding.
async fn forward(
    sub: Subscriber,
    mut events: tokio::sync::broadcast::Receiver<Arc<Published>>,
    listener: event_listener::Client,
    filter: EventFilter,
) {
    loop {
        let first = tokio::select! {
            r = events.recv() => r,
            () = tokio::time::sleep(PRIMARY_CHECK) => {
                if let Some(why) = sub.must_end() {
                    return close(&listener, &why).await;
                }
                continue;
            }
        };
        let mut batch = Vec::new();
        match first {
            Ok(published) => add(&mut batch, &published, &filter),
            Err(RecvError::Lagged(missed)) => return too_slow(&listener, missed).await,
            Err(RecvError::Closed) => return,
        }
        if let Some(why) = sub.must_end() {
            return close(&listener, &why).await;
        }
        while batch.len() < MAX_BATCH {
            match events.try_recv() {
                Ok(published) => add(&mut batch, &published, &filter),
                Err(TryRecvError::Lagged(missed)) => return too_slow(&listener, missed).await,
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Closed) => return,
            }
        }
        if batch.is_empty() {
            continue;
        }
        let mut req = listener.events_request();
        let mut list = req.get().init_events(batch.len() as u32);
        for (i, e) in batch.iter().enumerate() {
            wire::write_event(list.reborrow().get(i as u32), e);
        }
        match tokio::time::timeout(LISTENER_TIMEOUT, req.send().promise).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                debug!(error = %e, "event subscriber gone");
                return;
            }
            Err(_) => {
                let why = format!("the listener did not take a batch within {LISTENER_TIMEOUT:?}");
                return close(&listener, &why).await;
            }
        }
    }
}

async fn too_slow(listener: &event_listener::Client, missed: u64) {
    let why = format!("too slow: fell {missed} applied entries behind the event stream");
    close(listener, &why).await
}

/// Tells the listener why its subscription ends (bounded: it may be the reason).
async fn close(listener: &event_listener::Client, reason: &str) {
    warn!(%reason, "dropping an event subscriber");
    let mut req = listener.closed_request();
    req.get().set_reason(reason);
    let _ = tokio::time::timeout(Duration::from_secs(2), req.send().promise).await;
}
