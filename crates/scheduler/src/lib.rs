//! The xce scheduler: places pending jobs on hosts so that a submitted job runs by itself.
//!
//! Layout: `config` (flags > environment > YAML), `view` (the local view of pending jobs,
//! placed jobs, hosts and queues, and how it is loaded), `place` (placement as pure logic),
//! `lease` (the one-active-scheduler lease and its fencing epoch), `pipeline` (picker →
//! allocator → publisher). [`run`] wires them to two xce-clients: one whose rejoin action
//! joins as a scheduler and re-reads the whole view (its calls: the lease, reads, decisions),
//! and one that carries the event subscription.

pub mod backfill;
pub mod config;
pub mod lease;
pub mod metrics;
pub mod pipeline;
pub mod place;
pub mod view;

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{error, info, warn};
use xce_client::events::{EventStream, StreamItem};
use xce_client::ops::{claim_role, Join};
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
    if let Some(paths) = &config.tls {
        client_config.connect.tls = Some(xce_client::tls::Tls::load(paths.clone())?);
    }
    tokio::spawn(xce_client::tls::reload_on_hangup(
        client_config.connect.tls.clone(),
    ));
    let client = Client::new(config.peers.clone(), client_config.clone());
    let (views_tx, views) = watch::channel(None);
    let events_seen = Arc::new(std::sync::atomic::AtomicU64::new(0));
    client.set_rejoin(rejoin_action(
        views_tx,
        events_seen.clone(),
        config.dispatch_ahead,
        (config.backfill_depth, config.backfill_slack_ms),
    ));
    // The lease has a client of its own: its renewals never wait behind a full re-read
    // (which runs inside the main client's rejoin, and may take seconds on a big cluster).
    let lease_client = Client::new(config.peers.clone(), client_config.clone());
    claim_role(&lease_client, Role::Scheduler);
    let (lease_tx, lease) = watch::channel(None);
    let (events_tx, events) = mpsc::channel(EVENTS_BUFFERED);
    let (rounds_tx, rounds) = mpsc::channel(pipeline::ROUNDS_BUFFERED);
    let (requests_tx, requests) = mpsc::channel(pipeline::REQUESTS_BUFFERED);
    let (feedback_tx, feedback) = mpsc::unbounded_channel();
    if let Some(addr) = config.metrics_listen {
        let listener = xce_daemon::metrics::bind(addr).await?;
        tokio::spawn(xce_daemon::metrics::serve(
            listener,
            Arc::new(metrics::registry()),
        ));
    }
    info!(
        scheduler = %config.name,
        dispatch_ahead = config.dispatch_ahead,
        backfill_depth = config.backfill_depth,
        "scheduler starting"
    );
    let mut tasks: Vec<(&str, JoinHandle<()>)> = vec![
        (
            "lease",
            tokio::spawn(lease::run_lease(
                lease_client,
                lease::Holder::new(&config.name),
                config.lease_ttl,
                lease_tx,
                stop.clone(),
            )),
        ),
        (
            "events",
            tokio::spawn(forward_events(
                config.peers.clone(),
                client_config,
                events_tx,
                stop.clone(),
            )),
        ),
        (
            "picker",
            tokio::spawn(pipeline::picker(
                client.clone(),
                pipeline::PickerInputs {
                    views,
                    events,
                    feedback,
                    lease: lease.clone(),
                    stop: stop.clone(),
                    events_seen,
                },
                rounds_tx,
                config.reread,
            )),
        ),
        (
            "allocator",
            tokio::spawn(pipeline::allocator(rounds, requests_tx)),
        ),
        (
            "publisher",
            tokio::spawn(pipeline::publisher(
                client.clone(),
                requests,
                lease,
                feedback_tx,
                stop.clone(),
            )),
        ),
    ];
    xce_daemon::systemd::ready(&format!("scheduler {} running", config.name));
    // Every task's end stops the scheduler (below); the pings prove this loop still turns.
    tokio::spawn(xce_daemon::systemd::keep_alive(|| true));
    // Every task runs until shutdown: one that ends before it (or panics) would leave a
    // scheduler that holds the lease and places nothing, locking its standby out. Exit
    // instead, so that the standby (or the service manager) takes over.
    let ended = tokio::select! {
        () = shutdown => None,
        (which, index) = first_to_end(&mut tasks) => {
            // Its handle is spent: awaiting it again would panic.
            drop(tasks.swap_remove(index));
            Some(which)
        }
    };
    xce_daemon::systemd::stopping();
    stop_tx.send_replace(true);
    match ended {
        None => info!(scheduler = %config.name, "stopping"),
        Some(which) => {
            error!(scheduler = %config.name, task = which, "a scheduler task ended on its own; stopping")
        }
    }
    for (_, task) in tasks {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), task).await;
    }
    match ended {
        None => {
            info!(scheduler = %config.name, "scheduler stopped");
            Ok(())
        }
        Some(which) => anyhow::bail!("the scheduler's {which} task ended unexpectedly"),
    }
}

/// Waits for the first of `tasks` to end; returns its name and index.
async fn first_to_end(tasks: &mut [(&'static str, JoinHandle<()>)]) -> (&'static str, usize) {
    let handles = tasks.iter_mut().map(|(_, t)| t);
    let (_, index, _) = futures::future::select_all(handles).await;
    (tasks[index].0, index)
}

/// Joins as a scheduler, then reads the whole view and hands it to the picker: run on every
/// new connection, so the needs-rejoin flag clears only once both succeeded.
fn rejoin_action(
    views: watch::Sender<Option<view::Loaded>>,
    events_seen: Arc<std::sync::atomic::AtomicU64>,
    dispatch_ahead: u32,
    (backfill_depth, backfill_slack_ms): (u32, u64),
) -> xce_client::RejoinFn<xce_client::transport::CapnpTransport> {
    let views = Arc::new(views);
    Arc::new(move |client: Client| {
        let (views, events_seen) = (views.clone(), events_seen.clone());
        Box::pin(async move {
            let events_before = events_seen.load(std::sync::atomic::Ordering::Acquire);
            let began = std::time::Instant::now();
            let join = Join {
                token: RequestToken::random(),
                role: Role::Scheduler,
                host: HostAttributes::default(),
                agent: None,
                held: Vec::new(),
                queues_starts: false,
            };
            client.call(join).await?;
            let mut view = view::load(&client).await?;
            view.dispatch_ahead = dispatch_ahead;
            view.backfill_depth = backfill_depth;
            view.backfill_slack_ms = backfill_slack_ms;
            views.send_replace(Some(view::Loaded {
                view,
                events_before,
                began,
            }));
            Ok(())
        })
    })
}

/// Feeds the picker from an event subscription that survives failover.
async fn forward_events(
    peers: Vec<xce_client::Candidate>,
    config: ClientConfig,
    items: mpsc::Sender<StreamItem>,
    mut stop: watch::Receiver<bool>,
) {
    let mut stream = loop {
        let client = Client::new(peers.clone(), config.clone());
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
