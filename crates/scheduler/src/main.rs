//! `xce-scheduler`: flags, logging, signals; the daemon itself is `xce_scheduler::run`.

use clap::Parser;
use xce_scheduler::config::{self, FileConfig, Overrides};

/// The xce scheduler: places pending jobs on hosts. Run two for a hot standby.
#[derive(Debug, Parser)]
#[command(name = "xce-scheduler", version)]
struct Args {
    /// Controller candidates: name=host:port,...
    #[arg(long, env = "XCE_PEERS")]
    peers: Option<String>,
    /// This scheduler's name (default s1).
    #[arg(long, env = "XCE_NAME")]
    name: Option<String>,
    /// How long the scheduler lease lasts unless renewed, in milliseconds.
    #[arg(long, env = "XCE_LEASE_TTL_MS")]
    lease_ttl_ms: Option<u64>,
    /// Full re-read of the cluster this often, in milliseconds (a safety net under events).
    #[arg(long, env = "XCE_REREAD_MS")]
    reread_ms: Option<u64>,
    /// Attempts in one retry budget (decisions are retried with fresh budgets regardless).
    #[arg(long, env = "XCE_RETRY_ATTEMPTS")]
    retry_attempts: Option<u32>,
    /// Serve Prometheus metrics at http://ADDR/metrics (host:port).
    #[arg(long, env = "XCE_METRICS_LISTEN")]
    metrics_listen: Option<String>,
    /// Once a host's free room is taken, send it up to ROUNDS more rounds of its resources
    /// (at most 3), which its worker starts as its jobs end: slots never idle between short
    /// jobs, but a job sent ahead waits behind the host's jobs however long they run. 0 (the
    /// default) sends nothing ahead.
    #[arg(long, env = "XCE_DISPATCH_AHEAD", value_name = "ROUNDS")]
    dispatch_ahead: Option<u32>,
    /// Backfill: reserve a start for up to N of the highest-priority jobs that do not fit yet,
    /// and start a later job only where it delays none of them (1 is EASY backfill). 0 is
    /// strict priority: nothing passes a job that does not fit. Default 100.
    #[arg(long, env = "XCE_BACKFILL_DEPTH", value_name = "N")]
    backfill_depth: Option<u32>,
    /// How long past its time limit backfill counts a job as holding its room: at least the
    /// workers' kill grace (a job at its limit is killed only that long after SIGTERM).
    /// Default 12000.
    #[arg(long, env = "XCE_BACKFILL_SLACK_MS", value_name = "MS")]
    backfill_slack_ms: Option<u64>,
    #[command(flatten)]
    daemon: xce_daemon::DaemonArgs,
}

fn main() {
    xce_daemon::main("xce-scheduler", real_main);
}

fn real_main() -> anyhow::Result<()> {
    let args = Args::parse();
    let d = args.daemon;
    let file: FileConfig = xce_daemon::config::read_optional(d.config.as_deref())?;
    d.log.resolve(&file.log, "info").install()?;
    let over = Overrides {
        peers: args.peers,
        name: args.name,
        lease_ttl_ms: args.lease_ttl_ms,
        reread_ms: args.reread_ms,
        retry_attempts: args.retry_attempts,
        metrics_listen: args.metrics_listen,
        dispatch_ahead: args.dispatch_ahead,
        backfill_depth: args.backfill_depth,
        backfill_slack_ms: args.backfill_slack_ms,
        tls: d.tls,
    };
    let config = config::resolve(over, file)?;
    let addrs: Vec<String> = config.peers.iter().map(|c| c.addr()).collect();
    xce_daemon::check_transport(
        "xce-scheduler",
        config.tls.as_ref(),
        addrs.iter().map(String::as_str),
        d.insecure,
        d.check_config,
    )?;
    if d.check_config {
        println!("configuration ok: scheduler {}", config.name);
        return Ok(());
    }
    xce_daemon::runtime()?.block_on(xce_scheduler::run(config, xce_client::shutdown::signal()))
}
