//! `xce-scheduler`: flags, logging, signals; the daemon itself is `xce_scheduler::run`.

use std::path::PathBuf;

use anyhow::Context;
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
    /// YAML file with the same settings (flags and XCE_* environment win).
    #[arg(long, env = "XCE_CONFIG")]
    config: Option<PathBuf>,
    /// How long the scheduler lease lasts unless renewed, in milliseconds.
    #[arg(long, env = "XCE_LEASE_TTL_MS")]
    lease_ttl_ms: Option<u64>,
    /// Full re-read of the cluster this often, in milliseconds (a safety net under events).
    #[arg(long, env = "XCE_REREAD_MS")]
    reread_ms: Option<u64>,
    /// Attempts in one retry budget (decisions are retried with fresh budgets regardless).
    #[arg(long, env = "XCE_RETRY_ATTEMPTS")]
    retry_attempts: Option<u32>,
    #[command(flatten)]
    log: xce_client::logging::LogArgs,
    #[command(flatten)]
    tls: xce_client::tls::TlsArgs,
    /// Run without TLS to controllers beyond loopback (no authentication at all).
    #[arg(long, env = "XCE_INSECURE")]
    insecure: bool,
    /// Serve Prometheus metrics at http://ADDR/metrics (host:port).
    #[arg(long, env = "XCE_METRICS_LISTEN")]
    metrics_listen: Option<String>,
    /// Validate the configuration and exit.
    #[arg(long)]
    check_config: bool,
}

fn main() {
    xce_client::systemd::init();
    if let Err(e) = real_main() {
        eprintln!("xce-scheduler: {e:#}");
        std::process::exit(1);
    }
}

fn real_main() -> anyhow::Result<()> {
    let args = Args::parse();
    let file = match &args.config {
        Some(path) => config::read_file(path)?,
        None => FileConfig::default(),
    };
    args.log.resolve(&file.log, "info").install()?;
    let over = Overrides {
        peers: args.peers,
        name: args.name,
        lease_ttl_ms: args.lease_ttl_ms,
        reread_ms: args.reread_ms,
        retry_attempts: args.retry_attempts,
        metrics_listen: args.metrics_listen,
        tls: args.tls,
    };
    let config = config::resolve(over, file)?;
    match &config.tls {
        // Loaded by the daemon itself; here only to report a bad file without starting.
        Some(paths) if args.check_config => drop(xce_client::tls::Tls::load(paths.clone())?),
        Some(_) => {}
        None => {
            let addrs: Vec<String> = config.peers.iter().map(|c| c.addr()).collect();
            xce_client::tls::allow_plaintext(
                "xce-scheduler",
                addrs.iter().map(String::as_str),
                args.insecure,
            )?;
        }
    }
    if args.check_config {
        println!("configuration ok: scheduler {}", config.name);
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start runtime")?;
    runtime.block_on(xce_scheduler::run(config, xce_client::shutdown::signal()))
}
