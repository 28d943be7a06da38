//! `--metrics-listen`: the Prometheus endpoint every daemon serves (`GET /metrics`, the text
//! exposition of a prometheus-client registry), and the live figures a daemon reads at each
//! scrape. One small HTTP/1.1 server (hyper), so that daemons need no web framework.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tracing::{debug, info, warn};

/// The content type of the text exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The metrics address a daemon was given (`key` names the flag or YAML key that gave it),
/// checked the same way by every daemon.
pub fn listen_addr(key: &str, addr: &str) -> Result<SocketAddr, String> {
    addr.parse().map_err(|e| {
        format!("{key}: {addr:?} is not an address (host:port, e.g. 127.0.0.1:9101): {e}")
    })
}

/// The text exposition of `registry`.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

/// Binds `addr` for [`serve`], naming the address when it cannot.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("--metrics-listen {addr}: {e}")))
}

/// Serves `GET /metrics` from `registry` on `listener` until the future is dropped. Any
/// other path is 404; a connection that sends no request within 10 s is closed.
pub async fn serve(listener: TcpListener, registry: Arc<Registry>) {
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, "metrics at http://{addr}/metrics");
    }
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                warn!(error = %e, "metrics: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let registry = registry.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                let registry = registry.clone();
                async move { Ok::<_, Infallible>(answer(&req, &registry)) }
            });
            let served = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(std::time::Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(e) = served {
                debug!(%peer, error = %e, "metrics connection ended");
            }
        });
    }
}

fn answer(req: &Request<hyper::body::Incoming>, registry: &Registry) -> Response<Full<Bytes>> {
    let (status, content_type, body) = if req.uri().path() == "/metrics" {
        (StatusCode::OK, CONTENT_TYPE, encode(registry))
    } else {
        (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "metrics are at /metrics\n".to_string(),
        )
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = content_type.parse() {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}

/// Figures read at each scrape, as gauges and counters.
pub struct Live<F> {
    read: F,
}

impl<F> std::fmt::Debug for Live<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Live")
    }
}

/// One figure read at a scrape.
#[derive(Debug, Clone)]
pub enum Figure {
    /// A value that goes up and down: (name, help, value).
    Gauge(&'static str, &'static str, i64),
    /// A value that only goes up: (name, help, value).
    Counter(&'static str, &'static str, u64),
    /// A gauge per label value: (name, help, label name, [(label value, value)]).
    Labelled(&'static str, &'static str, &'static str, Vec<(String, i64)>),
}

impl<F> Live<F>
where
    F: Fn() -> Vec<Figure> + Send + Sync + 'static,
{
    /// A collector whose figures `read` gives at each scrape.
    pub fn new(read: F) -> Live<F> {
        Live { read }
    }
}

impl<F> Collector for Live<F>
where
    F: Fn() -> Vec<Figure> + Send + Sync + 'static,
{
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        for figure in (self.read)() {
            match figure {
                Figure::Gauge(name, help, value) => {
                    let gauge = ConstGauge::new(value);
                    let metric =
                        encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
                    gauge.encode(metric)?;
                }
                Figure::Counter(name, help, value) => {
                    let counter = ConstCounter::new(value);
                    let metric =
                        encoder.encode_descriptor(name, help, None, counter.metric_type())?;
                    counter.encode(metric)?;
                }
                Figure::Labelled(name, help, label, values) => {
                    let kind = ConstGauge::new(0i64).metric_type();
                    let mut family = encoder.encode_descriptor(name, help, None, kind)?;
                    for (value_label, value) in values {
                        let labels = [(label, value_label.as_str())];
                        let metric = family.encode_family(&labels)?;
                        ConstGauge::new(value).encode(metric)?;
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn serves_the_registry_and_its_live_figures() {
        let mut registry = Registry::with_prefix("xce_test");
        registry.register_collector(Box::new(Live::new(|| {
            vec![
                Figure::Gauge("answer", "the answer", 42),
                Figure::Counter("calls", "calls made", 7),
                Figure::Labelled(
                    "jobs",
                    "jobs by state",
                    "state",
                    vec![("running".into(), 3), ("done".into(), 9)],
                ),
            ]
        })));
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(serve(listener, Arc::new(registry)));
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).await.unwrap();
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        assert!(text.contains("xce_test_answer 42"), "{text}");
        assert!(text.contains("xce_test_calls_total 7"), "{text}");
        assert!(
            text.contains(r#"xce_test_jobs{state="running"} 3"#),
            "{text}"
        );
        server.abort();
    }
}
