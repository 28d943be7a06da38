//! xce-apiserver: the cluster over HTTP/JSON (DESIGN §6), server-sent events and a web view,
//! through one shared xce-client.
//!
//! Layout: `config` (flags > `XCE_*` > YAML), `backend` (the one way to the cluster, acting
//! for each request's caller; health and the degraded breaker), `hub` (the one event
//! subscription every `/v1/events` client shares), `routes/` (one file per resource, with
//! their OpenAPI operations), `shapes` (the API's own request and response types), `extract`
//! and `error` (bad input and failures in the API's error shape), `metrics`, and `server`
//! (the listener and its limits).

pub mod backend;
pub mod config;
pub mod error;
pub mod extract;
pub mod hub;
pub mod metrics;
pub mod routes;
pub mod server;
pub mod shapes;

use anyhow::Context;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tracing::{info, warn};
use xce_client::events::EventStream;
use xce_client::json::EventJson;
use xce_client::types::EventFilter;
use xce_client::{Client, ClientConfig, ConnectOptions};

use crate::backend::ClusterBackend;
use crate::config::Config;
use crate::hub::Hub;
use crate::metrics::Metrics;
use crate::routes::AppState;
use crate::server::HttpsAcceptor;

/// How often the backend is probed: how soon an idle apiserver notices a failover or the
/// cluster's return.
const PROBE_EVERY: Duration = Duration::from_millis(500);

/// The pause between probes: at most half the degraded breaker's TTL, so that the TTL a
/// failed probe sets outlasts the pause and the breaker never lapses between two probes
/// (while one is out, it holds anyway).
fn probe_pause(degraded_ttl: Duration) -> Duration {
    PROBE_EVERY.min(degraded_ttl / 2)
}

/// Runs the apiserver on `listener` until `shutdown` resolves.
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let tls = match &config.tls {
        Some(paths) => {
            let tls = xce_client::tls::Tls::load(paths.clone())?;
            info!(identity = %tls.identity(), "TLS to the cluster: requests need a user token");
            Some(tls)
        }
        None => {
            warn!("{}", routes::AUTH_OFF);
            None
        }
    };
    tokio::spawn(xce_client::tls::reload_on_hangup(tls.clone()));
    let https = match config.https.clone() {
        Some(files) => {
            let acceptor = HttpsAcceptor::load(files)?;
            tokio::spawn(acceptor.clone().reload_on_hangup());
            Some(acceptor)
        }
        None => None,
    };
    let backend = ClusterBackend::new(&config, tls.clone());
    tokio::spawn(backend.clone().watch(probe_pause(config.degraded_ttl)));
    let hub = Hub::new();
    tokio::spawn(feed(hub.clone(), config.peers.clone(), tls));
    let client = backend.client().clone();
    let backend: Arc<dyn backend::Backend> = Arc::new(backend);
    let metrics = Arc::new(Metrics::new(backend.clone(), Some(client), hub.clone()));
    let state = AppState {
        backend,
        hub,
        metrics,
        request_timeout: config.request_timeout,
        openapi: Arc::new(routes::openapi()),
    };
    let app = routes::router(state, config.limits.max_body_bytes);
    let scheme = if https.is_some() { "https" } else { "http" };
    info!(
        url = %format!("{scheme}://{}", listener.local_addr()?),
        controllers = config.peers.len(),
        "apiserver listening"
    );
    xce_daemon::systemd::ready("apiserver serving");
    // Pinged while every thread of the runtime that serves the requests makes progress.
    xce_daemon::systemd::keep_alive_threads(tokio::runtime::Handle::current(), || true)
        .context("start the watchdog thread")?;
    let shutdown = async {
        shutdown.await;
        xce_daemon::systemd::stopping();
    };
    server::serve(listener, app, config.limits, https, shutdown).await;
    info!("apiserver stopped");
    Ok(())
}

/// Keeps the hub fed from one event subscription that follows the primary. Events are not
/// replayed across primaries, so every renewal reaches clients as a resync item.
async fn feed(hub: Hub, peers: Vec<xce_client::Candidate>, tls: Option<Arc<xce_client::tls::Tls>>) {
    let client = Client::new(
        peers,
        ClientConfig {
            connect: ConnectOptions {
                tls,
                ..ConnectOptions::default()
            },
            ..ClientConfig::default()
        },
    );
    let mut first = true;
    loop {
        match EventStream::open(client.clone(), EventFilter::default()).await {
            Ok(mut stream) => {
                if !first {
                    hub.publish(EventJson::Resync {
                        reason: "the apiserver subscribed again: re-read state".into(),
                    });
                }
                first = false;
                while let Some(item) = stream.next().await {
                    hub.publish(EventJson::from(&item));
                }
                warn!("the event subscription ended; subscribing again");
            }
            Err(e) => {
                warn!(error = %e, "cannot subscribe to the cluster's events yet; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_pause_less_than_the_breaker_holds() {
        assert_eq!(probe_pause(Duration::from_secs(2)), PROBE_EVERY);
        for ttl_ms in [100, 300, 999, 1000] {
            let ttl = Duration::from_millis(ttl_ms);
            assert!(probe_pause(ttl) < ttl, "{ttl:?}");
        }
    }
}
