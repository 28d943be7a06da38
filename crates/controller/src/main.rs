//! `xce-controller`: flags, logging, signals; the daemon itself is `xce_controller::run`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use xce_controller::Config;

/// An xce controller candidate: one of 1 to 7 that replicate the cluster state with Raft.
#[derive(Debug, Parser)]
#[command(name = "xce-controller", version)]
struct Args {
    /// This controller's name in --peers (or `name:` in the config file).
    #[arg(long, env = "XCE_NAME")]
    name: Option<String>,
    /// Every candidate, the same list on each: name=host:port,... (or `peers:`).
    #[arg(long, env = "XCE_PEERS")]
    peers: Option<String>,
    /// Where the Raft log, vote and snapshots live (or `data_dir:`).
    #[arg(long, env = "XCE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Address to listen on instead of this controller's own --peers address
    /// (for example 0.0.0.0:7101).
    #[arg(long, env = "XCE_LISTEN")]
    listen: Option<String>,
    /// Where to reach other controllers for Raft when not at their --peers address:
    /// name=host:port,... (a separate peer network, NAT, or a test's fault links).
    #[arg(long, env = "XCE_RAFT_ADDRS")]
    raft_addrs: Option<String>,
    /// A new controller for a running cluster: wait to be added (`xce admin members add`)
    /// instead of forming a cluster; keep it on every start of this controller.
    #[arg(long, env = "XCE_JOIN")]
    join: bool,
    /// Serve Prometheus metrics at http://ADDR/metrics (host:port).
    #[arg(long, env = "XCE_METRICS_LISTEN")]
    metrics_listen: Option<String>,
    #[command(flatten)]
    daemon: xce_daemon::DaemonArgs,
}

fn main() {
    xce_daemon::main("xce-controller", real_main);
}

fn real_main() -> anyhow::Result<()> {
    let args = Args::parse();
    let d = &args.daemon;
    let mut config = Config::load(
        args.name.as_deref(),
        args.peers.as_deref(),
        args.data_dir.as_deref(),
        d.config.as_deref(),
    )?;
    d.log.resolve(&config.log, "info,openraft=warn").install()?;
    if args.join {
        config = config.joining();
    }
    if let Some(spec) = &args.raft_addrs {
        config = config.with_raft_addrs(spec)?;
    }
    config = config.with_tls(&d.tls)?;
    if let Some(addr) = &args.metrics_listen {
        config = config.with_metrics_listen(addr)?;
    }
    let listen = args.listen.unwrap_or_else(|| config.me().addr());
    let peers: Vec<String> = config.peers.iter().map(|c| c.addr()).collect();
    let addrs = peers
        .iter()
        .chain(config.raft_addrs.values())
        .chain([&listen]);
    xce_daemon::check_transport(
        "xce-controller",
        config.tls.as_ref(),
        addrs.map(String::as_str),
        d.insecure,
        d.check_config,
    )?;
    config.openraft()?;
    if d.check_config {
        println!("configuration is valid");
        return Ok(());
    }
    xce_daemon::runtime()?.block_on(async {
        let listener = tokio::net::TcpListener::bind(&listen)
            .await
            .with_context(|| format!("listen on {listen}"))?;
        xce_controller::run_local(listener, config, xce_client::shutdown::signal()).await
    })
}
