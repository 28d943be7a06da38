//! `xce-bench`: benchmarks against a cluster it starts itself from the binaries built beside
//! it (`cargo build --release --workspace`, then `target/release/xce-bench ...`). Every metric
//! is one JSON line on stdout: `{"metric": NAME, "value": NUMBER, "unit": UNIT}`; progress and
//! context go to stderr.

mod api;
mod arrays;
mod cli;
mod cluster;
mod cpu;
mod failover;
mod finished;
mod jobs;
mod replay;
mod scale;
mod sched;
mod submit;
mod swf;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "xce-bench", version)]
struct Cli {
    #[command(subcommand)]
    command: Bench,
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// Acknowledged submit throughput and latency.
    Submit(submit::SubmitArgs),
    /// Client-visible outage when the primary is killed under load.
    Failover(failover::FailoverArgs),
    /// Jobs run end to end on two workers: dispatch-to-start latency and jobs/s.
    Jobs(jobs::JobsArgs),
    /// One-shot `xce submit` processes: submits/s and CPU per submit in the client and the
    /// controllers.
    Cli(cli::CliArgs),
    /// N jobs in the controllers: RSS, snapshot size, full-restart time to a ready primary,
    /// listing the first page and every page.
    Scale(scale::ScaleArgs),
    /// The scheduler: placement throughput over many pending jobs and hosts, submit-to-running
    /// latency on an idle cluster, and the drain of many jobs on two workers.
    Sched(sched::SchedArgs),
    /// The HTTP API: GET and POST throughput and latency with concurrent connections, and
    /// how fast a degraded apiserver answers 503.
    Api(api::ApiArgs),
    /// Job arrays and dependencies: what a million-task array costs to submit, in the
    /// primary's memory and in the first page of `xce jobs`; how soon a dependent job is
    /// dispatched once its parent ends; the drain of single jobs and of an array.
    Arrays(arrays::ArraysArgs),
    /// A workload trace (Standard Workload Format) replayed through the scheduler's own
    /// placement code on a virtual clock: utilisation, mean wait and bounded slowdown, FCFS or
    /// backfill.
    Replay(replay::ReplayArgs),
}

/// Prints one metric line.
pub fn metric(name: &str, value: f64, unit: &str) {
    metric_with(name, value, unit, &[]);
}

/// Whether a benchmark runs with TLS, without, or both in one run for comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TlsMode {
    Off,
    On,
    Both,
}

impl TlsMode {
    /// The runs it asks for, in order: `false` is without TLS.
    pub fn runs(self) -> Vec<bool> {
        match self {
            TlsMode::Off => vec![false],
            TlsMode::On => vec![true],
            TlsMode::Both => vec![false, true],
        }
    }
}

/// [`metric`] with extra string fields on the line (e.g. `"fault": "partition"`).
pub fn metric_with(name: &str, value: f64, unit: &str, extra: &[(&str, &str)]) {
    let mut line = serde_json::json!({"metric": name, "value": (value * 1000.0).round() / 1000.0, "unit": unit});
    for (k, v) in extra {
        line[*k] = serde_json::Value::from(*v);
    }
    println!("{line}");
}

/// The `q` quantile (0..=1) of sorted samples.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        match cli.command {
            Bench::Submit(args) => submit::run(args).await,
            Bench::Failover(args) => failover::run(args).await,
            Bench::Jobs(args) => jobs::run(args).await,
            Bench::Cli(args) => cli::run(args).await,
            Bench::Scale(args) => scale::run(args).await,
            Bench::Sched(args) => sched::run(args).await,
            Bench::Api(args) => api::run(&args).await,
            Bench::Arrays(args) => arrays::run(&args).await,
            Bench::Replay(args) => replay::run(&args).await,
        }
    })
}
