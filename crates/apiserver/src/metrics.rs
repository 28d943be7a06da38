//! `/metrics` in Prometheus text (prometheus-client): requests by route, method and status
//! with latency histograms, backend calls by operation and outcome, and, read at each scrape,
//! the backend client's failover counters, whether it is degraded, and the SSE clients.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::backend::Backend;
use crate::hub::Hub;

/// Labels of a request.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The route's template (`/v1/jobs/{id}`), never the raw path.
    pub route: String,
    pub method: String,
    pub status: u16,
}

/// Labels of a request's latency.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: String,
    pub method: String,
}

/// Labels of a backend call.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub call: &'static str,
    /// `ok`, or the error code (`noEnt`, `clusterNotReady`, ...).
    pub outcome: &'static str,
}

/// The apiserver's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<RouteLabels, Histogram>,
    calls: Family<CallLabels, Counter>,
}

impl Metrics {
    /// The registry, with the live figures of `backend` and `hub` read at each scrape.
    pub fn new(backend: Arc<dyn Backend>, client: Option<xce_client::Client>, hub: Hub) -> Metrics {
        let mut registry = Registry::with_prefix("xce_apiserver");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP requests answered, by route, method and status",
            requests.clone(),
        );
        let latency = Family::<RouteLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 16))
        });
        registry.register(
            "http_request_duration_seconds",
            "Time to answer an HTTP request, by route and method",
            latency.clone(),
        );
        let calls = Family::<CallLabels, Counter>::default();
        registry.register(
            "backend_calls",
            "Calls to the cluster, by call and outcome",
            calls.clone(),
        );
        registry.register_collector(Box::new(Live {
            backend,
            client,
            hub,
        }));
        Metrics {
            registry,
            requests,
            latency,
            calls,
        }
    }

    /// Counts one answered request.
    pub fn request(&self, route: &str, method: &str, status: u16, took: Duration) {
        self.requests
            .get_or_create(&RequestLabels {
                route: route.to_string(),
                method: method.to_string(),
                status,
            })
            .inc();
        self.latency
            .get_or_create(&RouteLabels {
                route: route.to_string(),
                method: method.to_string(),
            })
            .observe(took.as_secs_f64());
    }

    /// Counts one backend call.
    pub fn call(&self, call: &'static str, outcome: &'static str) {
        self.calls
            .get_or_create(&CallLabels { call, outcome })
            .inc();
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// What is read at scrape time.
#[derive(Debug)]
struct Live {
    backend: Arc<dyn Backend>,
    client: Option<xce_client::Client>,
    hub: Hub,
}

impl Collector for Live {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let health = self.backend.health();
        gauge(
            &mut encoder,
            "backend_degraded",
            "1 while requests fail fast because the backend found no primary",
            i64::from(health.degraded_for.is_some()),
        )?;
        gauge(
            &mut encoder,
            "sse_clients",
            "Clients of /v1/events",
            self.hub.clients() as i64,
        )?;
        if let Some(client) = &self.client {
            let s = client.stats();
            for (name, help, value) in [
                (
                    "backend_reconnects",
                    "Connections the backend client opened",
                    s.reconnects,
                ),
                (
                    "backend_rotations",
                    "Moves of the backend client to another controller (failovers)",
                    s.rotations,
                ),
                (
                    "backend_rejoins",
                    "Joins of a new primary after a failover",
                    s.rejoins,
                ),
                (
                    "backend_cluster_not_ready",
                    "Calls that found no primary within their budget",
                    s.cluster_not_ready,
                ),
            ] {
                let counter = ConstCounter::new(value);
                let metric = encoder.encode_descriptor(name, help, None, counter.metric_type())?;
                counter.encode(metric)?;
            }
        }
        Ok(())
    }
}

fn gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: i64,
) -> Result<(), std::fmt::Error> {
    let gauge = ConstGauge::new(value);
    let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
    gauge.encode(metric)
}
