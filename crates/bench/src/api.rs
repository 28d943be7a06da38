//! `xce-bench api`: the HTTP API under load from a Rust load generator (hyper, keep-alive
//! connections): `GET /v1/jobs/{id}` and `POST /v1/jobs` throughput and latency with C
//! concurrent connections, then, with the majority of controllers killed, how fast a
//! degraded apiserver answers 503.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::Request;
use hyper_util::rt::TokioIo;
use xce_client::ops::Submit;
use xce_client::types::{JobSpec, RequestToken};

use crate::cluster::{BenchCluster, BenchSpec};
use crate::{metric, quantile};

/// `xce-bench api` options.
#[derive(Debug, clap::Args)]
pub struct ApiArgs {
    /// Concurrent HTTP connections.
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    /// How long each of the GET and POST phases runs, in seconds.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Jobs made before the GET phase (the ids it reads).
    #[arg(long, default_value_t = 1000)]
    pub jobs: u64,
    /// Requests per connection in each round while degraded.
    #[arg(long, default_value_t = 50)]
    pub degraded_requests: usize,
    /// How long the degraded rounds go on (every 100 ms): longer than a few of the breaker's
    /// TTLs (2 s), so that a breaker that lapses between probes shows in the p99.
    #[arg(long, default_value_t = 6)]
    pub degraded_seconds: u64,
}

/// Runs the benchmark.
pub async fn run(args: &ApiArgs) -> anyhow::Result<()> {
    if args.connections == 0 || args.jobs == 0 {
        bail!("--connections and --jobs must be at least 1");
    }
    let mut cluster = BenchCluster::start_spec(BenchSpec {
        controllers: 3,
        apiservers: 1,
        ..BenchSpec::default()
    })
    .await?;
    let addr = cluster.local.apiservers[0].addr();
    let client = cluster.client(Default::default())?;
    let mut first = None;
    for _ in 0..args.jobs {
        let id = client
            .call(Submit {
                token: RequestToken::random(),
                spec: JobSpec {
                    command: vec!["true".into()],
                    ..JobSpec::default()
                },
                script: None,
            })
            .await?;
        first.get_or_insert(id);
    }
    let first = first.unwrap_or(1);
    let duration = Duration::from_secs(args.seconds);

    let jobs = args.jobs;
    let get = phase(&addr, args.connections, Until::Time(duration), move |n| {
        let id = first + n % jobs;
        ("GET", format!("/v1/jobs/{id}"), None)
    })
    .await?;
    report("get", &get, 200)?;

    let post = phase(&addr, args.connections, Until::Time(duration), |_| {
        let body = r#"{"command":["true"]}"#;
        ("POST", "/v1/jobs".to_string(), Some(body))
    })
    .await?;
    report("post", &post, 201)?;

    // The majority down: once a request has found no primary, the rest fail fast.
    for i in [0, 1] {
        cluster.local.kill9(i)?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let probe = phase(&addr, 1, Until::Count(1), |_| {
            ("GET", "/v1/queues".into(), None)
        })
        .await?;
        if probe.statuses.contains(&503) {
            break;
        }
        if Instant::now() > deadline {
            bail!("the apiserver never answered 503 with the majority down");
        }
    }
    let span = Duration::from_secs(args.degraded_seconds);
    let began = Instant::now();
    let (mut ms, mut statuses) = (Vec::new(), Vec::new());
    loop {
        let round = phase(
            &addr,
            args.connections,
            Until::Count(args.degraded_requests),
            |_| ("GET", "/v1/queues".into(), None),
        )
        .await?;
        ms.extend(round.latencies_ms);
        statuses.extend(round.statuses);
        if began.elapsed() >= span {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let not_503 = statuses.iter().filter(|s| **s != 503).count();
    if not_503 > 0 {
        bail!("{not_503} answers while degraded were not 503");
    }
    ms.sort_by(f64::total_cmp);
    eprintln!(
        "api: degraded: {} answers, p50 {:.2} ms, p99 {:.2} ms",
        ms.len(),
        quantile(&ms, 0.5),
        quantile(&ms, 0.99)
    );
    metric("api_degraded_p99_ms", quantile(&ms, 0.99), "ms");
    Ok(())
}

/// When a phase ends.
#[derive(Debug, Clone, Copy)]
enum Until {
    Time(Duration),
    /// Requests per connection.
    Count(usize),
}

/// What a phase measured.
#[derive(Debug, Default)]
struct Phase {
    latencies_ms: Vec<f64>,
    statuses: Vec<u16>,
    elapsed: Duration,
}

fn report(what: &str, phase: &Phase, expected: u16) -> anyhow::Result<()> {
    let wrong = phase.statuses.iter().filter(|s| **s != expected).count();
    if wrong > 0 {
        let sample: Vec<u16> = phase
            .statuses
            .iter()
            .filter(|s| **s != expected)
            .take(5)
            .copied()
            .collect();
        bail!("{what}: {wrong} answers were not {expected} (e.g. {sample:?})");
    }
    let mut ms = phase.latencies_ms.clone();
    ms.sort_by(f64::total_cmp);
    let rps = ms.len() as f64 / phase.elapsed.as_secs_f64();
    eprintln!(
        "api: {what}: {} requests in {:.1} s: {rps:.0}/s, p50 {:.2} ms, p99 {:.2} ms",
        ms.len(),
        phase.elapsed.as_secs_f64(),
        quantile(&ms, 0.5),
        quantile(&ms, 0.99)
    );
    metric(&format!("api_{what}_rps"), rps, "requests/s");
    metric(&format!("api_{what}_p99_ms"), quantile(&ms, 0.99), "ms");
    Ok(())
}

/// Runs `connections` keep-alive connections, each sending the requests `next` describes
/// (given a global request number) one after the other, until `until`.
async fn phase<F>(addr: &str, connections: usize, until: Until, next: F) -> anyhow::Result<Phase>
where
    F: Fn(u64) -> (&'static str, String, Option<&'static str>) + Send + Sync + 'static,
{
    let next = Arc::new(next);
    let counter = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (addr, next, counter) = (addr.to_string(), next.clone(), counter.clone());
        tasks.push(tokio::spawn(async move {
            let stream = tokio::net::TcpStream::connect(&addr)
                .await
                .with_context(|| format!("connect {addr}"))?;
            stream.set_nodelay(true)?;
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
            tokio::spawn(conn);
            let mut out = Phase::default();
            let mut sent = 0usize;
            loop {
                let done = match until {
                    Until::Time(d) => started.elapsed() >= d,
                    Until::Count(n) => sent >= n,
                };
                if done {
                    break;
                }
                let n = counter.fetch_add(1, Ordering::Relaxed);
                let (method, path, body) = next(n);
                let mut req = Request::builder()
                    .method(method)
                    .uri(path)
                    .header("host", &addr);
                if body.is_some() {
                    req = req.header("content-type", "application/json");
                }
                let req = req.body(Full::new(Bytes::from(body.unwrap_or(""))))?;
                let t = Instant::now();
                sender.ready().await?;
                let response = sender.send_request(req).await?;
                let status = response.status().as_u16();
                response.into_body().collect().await?;
                out.latencies_ms.push(t.elapsed().as_secs_f64() * 1000.0);
                out.statuses.push(status);
                sent += 1;
            }
            Ok::<_, anyhow::Error>(out)
        }));
    }
    let mut all = Phase::default();
    for t in tasks {
        let one = t.await??;
        all.latencies_ms.extend(one.latencies_ms);
        all.statuses.extend(one.statuses);
    }
    all.elapsed = started.elapsed();
    Ok(all)
}
