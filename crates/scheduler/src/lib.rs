//! The xce scheduler: places pending jobs on hosts so that a submitted job runs by itself.
//!
//! Layout: `config` (flags > environment > YAML), `view` (the local view of pending jobs,
//! placed jobs, hosts and queues, and how it is loaded), `place` (placement as pure logic),
//! `lease` (the one-active-scheduler lease and its fencing epoch), `pipeline` (picker →
//! allocator → publisher). [`run`] wires them to two xce-clients: one whose rejoin action
//! joins as a scheduler and re-reads the whole view (its calls: the lease, reads, decisions),
//! and one that carries the event subscription.

pub mod config;
pub mod lease;
pub mod pipeline;
pub mod place;
pub mod view;

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tracing::{info, warn};
use xce_client::events::{EventStream, StreamItem};
use xce_client::ops::Join;
use xce_client::types::{EventFilter, HostAttributes, RequestToken, Role};
use xce_client::{Client, ClientConfig};

pub use config::Config;

/// Resolves once `stop` turns true (or its sender is gone).
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Events buffered between the subscription and the picker.
const EVENTS_BUFFERED: usize = 8192;

/// Runs the scheduler until `shutdown` resolves.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let (stop_tx, stop) = watch::channel(false);
    let mut client_config = ClientConfig::default();
    if let Some(attempts) = config.retry_attempts {
        client_config.retry.max_attempts = attempts;
    }
    let client = Client::new(config.peers.clone(), client_config);
    let (views_tx, views) = watch::channel(None);
    client.set_rejoin(rejoin_action(views_tx));
    let (lease_tx, lease) = watch::channel(None);
    let (events_tx, events) = mpsc::channel(EVENTS_BUFFERED);
    let (rounds_tx, rounds) = mpsc::channel(pipeline::ROUNDS_BUFFERED);
    let (requests_tx, requests) = mpsc::channel(pipeline::REQUESTS_BUFFERED);
    let (feedback_tx, feedback) = mpsc::unbounded_channel();
    info!(scheduler = %config.name, "scheduler starting");
    let tasks = vec![
        tokio::spawn(lease::run_lease(
            client.clone(),
            config.name.clone(),
            config.lease_ttl,
            lease_tx,
            stop.clone(),
        )),
        tokio::spawn(forward_events(
            config.peers.clone(),
            events_tx,
            stop.clone(),
        )),
        tokio::spawn(pipeline::picker(
            client.clone(),
            pipeline::PickerInputs {
                views,
                events,
                feedback,
                lease: lease.clone(),
                stop: stop.clone(),
            },
            rounds_tx,
            config.reread,
        )),
        tokio::spawn(pipeline::allocator(rounds, requests_tx)),
        tokio::spawn(pipeline::publisher(
            client.clone(),
            requests,
            lease,
            feedback_tx,
            stop.clone(),
        )),
    ];
    shutdown.await;
    info!(scheduler = %config.name, "stopping");
    stop_tx.send_replace(true);
    for task in tasks {
        // The allocator ends when the picker's channel closes; give it no say in shutdown.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), task).await;
    }
    info!(scheduler = %config.name, "scheduler stopped");
    Ok(())
}

/// Joins as a scheduler, then reads the whole view and hands it to the picker: run on every
/// new connection, so the needs-rejoin flag clears only once both succeeded.
fn rejoin_action(
    views: watch::Sender<Option<view::View>>,
) -> xce_client::RejoinFn<xce_client::transport::CapnpTransport> {
    let views = Arc::new(views);
    Arc::new(move |client: Client| {
        let views = views.clone();
        Box::pin(async move {
            let join = Join {
                token: RequestToken::random(),
                role: Role::Scheduler,
                host: HostAttributes::default(),
                agent: None,
                held: Vec::new(),
            };
            client.call(join).await?;
            let view = view::load(&client).await?;
            views.send_replace(Some(view));
            Ok(())
        })
    })
}

/// Feeds the picker from an event subscription that survives failover.
async fn forward_events(
    peers: Vec<xce_client::Candidate>,
    items: mpsc::Sender<StreamItem>,
    mut stop: watch::Receiver<bool>,
) {
    let mut stream = loop {
        let client = Client::new(peers.clone(), ClientConfig::default());
        tokio::select! {
            opened = EventStream::open(client, EventFilter::default()) => match opened {
                Ok(stream) => break stream,
                Err(e) => warn!(error = %e, "cannot subscribe to events yet; retrying"),
            },
            () = stopped(&mut stop) => return,
        }
        tokio::select! {
            () = tokio::time::sleep(std::time::Duration::from_millis(500)) => {}
            () = stopped(&mut stop) => return,
        }
    };
    // The first subscription may start after the first view was read: say so.
    let first = StreamItem::Resync {
        reason: "subscribed".into(),
    };
    if items.send(first).await.is_err() {
        return;
    }
    loop {
        tokio::select! {
            item = stream.next() => match item {
                Some(item) => {
                    if items.send(item).await.is_err() {
                        return;
                    }
                }
                None => return,
            },
            () = stopped(&mut stop) => return,
        }
    }
}
