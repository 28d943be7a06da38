//! xce-controller: the Raft-replicated cluster state and the client RPC service.
//!
//! [`run`] is the whole daemon given an already-bound listener, so tests can bind port 0 and
//! run controllers in-process; `main` only parses flags and installs logging.

// openraft's error types are large by design; boxing them at every storage boundary buys nothing.
#![allow(clippy::result_large_err)]

/// This build, as it names itself to its peers (`buildInfo`).
pub const BUILD: &str = concat!("xce-controller ", env!("CARGO_PKG_VERSION"));

pub mod config;
pub mod history;
pub mod metrics;
pub mod network;
pub mod node;
pub mod state;
pub mod store;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use openraft::{BasicNode, Raft};
use tokio::net::TcpListener;
use tracing::info;

pub use config::Config;

use crate::network::raft_client::{Network, Reachability};
use crate::node::{node_id_of, Lease, Node, Timeouts};

/// Runs a controller on `listener` until `shutdown` resolves. Must be called inside a
/// `LocalSet` (the capnp service is `!Send`); [`run_local`] provides one.
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let tls = match &config.tls {
        Some(paths) => {
            let tls = xce_client::tls::Tls::load(paths.clone())?;
            info!(node = %config.name, identity = %tls.identity(), "TLS on: peers must present a certificate of the cluster's CA");
            Some(tls)
        }
        None => None,
    };
    tokio::spawn(xce_client::tls::reload_on_hangup(tls.clone()));
    let mut store = store::open(&config.data_dir, &config.identity()).await?;
    let metrics = metrics::Metrics::default();
    store
        .state_machine
        .observe_apply(metrics.apply_seconds.clone());
    let history = history::History::open_or_replace(&config.data_dir)?;
    store.state_machine.keep_history(history.clone());
    let state = store.state_machine.shared();
    let reach = Arc::new(Reachability::default());
    let lease = Arc::new(Lease::new(config.primary_lease()));
    let raft_config = Arc::new(config.openraft()?);
    let network = Network {
        reach,
        routes: Arc::new(config.raft_addrs.clone()),
        budget: config.peer_budget(),
        lease,
        tls: tls.clone(),
        links: Default::default(),
    };
    let log = store.log.clone();
    let raft = Raft::new(
        config.node_id,
        raft_config,
        network.clone(),
        store.log,
        store.state_machine,
    )
    .await
    .context("start raft")?;
    initialize(&raft, &config).await?;
    let node = Node::start(
        config.node_id,
        config.name.clone(),
        config.peers.clone(),
        raft.clone(),
        state,
        config.queues.clone(),
        config.jobs.clone(),
        config.hold_version,
        Timeouts {
            write: config.write_timeout,
            read: config.read_timeout,
            hold: config.hold,
            leader_silence: Duration::from_millis((config.raft.heartbeat_ms * 3).max(150)),
            election: config.election_timing(),
            host_ttl: Duration::from_millis(config.hosts.heartbeat_ttl_ms),
            host_lost_grace: Duration::from_millis(config.hosts.lost_grace_ms),
        },
        network,
        metrics.clone(),
        history,
        config.history,
    );
    if let Some(addr) = config.metrics_listen {
        let listener = xce_daemon::metrics::bind(addr).await?;
        let registry = Arc::new(metrics.registry(node.clone(), log));
        tokio::spawn(xce_daemon::metrics::serve(listener, registry));
    }
    tokio::spawn(metrics.watch_leader(raft.clone()));
    info!(
        node = %config.name,
        addr = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        peers = config.peers.len(),
        "controller started"
    );
    xce_daemon::systemd::ready(&format!("controller {} serving", config.name));
    // Pinged from this LocalSet, which serves every request: a stuck loop, or a Raft core
    // that has ended, stops the pings.
    let core = raft.metrics();
    tokio::task::spawn_local(xce_daemon::systemd::keep_alive(move || {
        core.has_changed().is_ok()
    }));
    tokio::select! {
        () = network::serve(listener, node.clone(), config.limits, tls) => {}
        () = shutdown => {}
    }
    xce_daemon::systemd::stopping();
    info!(node = %config.name, "controller shutting down");
    node.stop_raft_calls(Duration::from_secs(1)).await;
    raft.shutdown().await.ok();
    Ok(())
}

/// [`run`] inside its own `LocalSet`.
pub async fn run_local(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    tokio::task::LocalSet::new()
        .run_until(run(listener, config, shutdown))
        .await
}

/// Forms the cluster on first start. Every candidate proposes the same membership (all peers
/// as voters), which openraft accepts from any number of nodes; a node that already has state
/// keeps it.
async fn initialize(raft: &Raft<store::TypeConfig>, config: &Config) -> anyhow::Result<()> {
    if raft.is_initialized().await.context("read raft state")? {
        return Ok(());
    }
    if config.join {
        info!(node = %config.name, "joining: waiting to be added (xce admin members add)");
        return Ok(());
    }
    let members: BTreeMap<_, _> = config
        .peers
        .iter()
        .enumerate()
        .map(|(i, p)| (node_id_of(i), BasicNode { addr: p.addr() }))
        .collect();
    match raft.initialize(members).await {
        Ok(()) => info!(node = %config.name, "initialized a new cluster"),
        Err(e) => info!(node = %config.name, reason = %e, "cluster already initialized"),
    }
    Ok(())
}
