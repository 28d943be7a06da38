//! `xce-apiserver`: flags, logging, signals; the server itself is `xce_apiserver::run`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use xce_apiserver::config::{self, FileConfig, Overrides};

/// The xce HTTP API server.
#[derive(Debug, Parser)]
#[command(name = "xce-apiserver", version)]
struct Args {
    /// Where to serve HTTP (host:port; default 127.0.0.1:8080).
    #[arg(long, env = "XCE_LISTEN")]
    listen: Option<String>,
    /// Controller candidates: name=host:port,...
    #[arg(long, env = "XCE_PEERS")]
    peers: Option<String>,
    /// HTTPS certificate for the listener.
    #[arg(long, env = "XCE_HTTPS_CERT")]
    https_cert: Option<PathBuf>,
    /// HTTPS private key for the listener.
    #[arg(long, env = "XCE_HTTPS_KEY")]
    https_key: Option<PathBuf>,
    #[command(flatten)]
    daemon: xce_daemon::DaemonArgs,
}

fn main() {
    xce_daemon::main("xce-apiserver", real_main);
}

fn real_main() -> anyhow::Result<()> {
    let args = Args::parse();
    let d = args.daemon;
    let file: FileConfig = xce_daemon::config::read_optional(d.config.as_deref())?;
    d.log.resolve(&file.log, "info").install()?;
    let over = Overrides {
        listen: args.listen,
        peers: args.peers,
        tls: d.tls,
        https_cert: args.https_cert,
        https_key: args.https_key,
        insecure: d.insecure,
    };
    let config = config::resolve(over, file)?;
    // Beyond loopback: bearer tokens never cross a network in plaintext, and the backend
    // connection needs TLS, unless --insecure.
    let listen = config.listen.to_string();
    if config.https.is_none() {
        xce_client::tls::allow_plaintext(
            "xce-apiserver (HTTP)",
            [listen.as_str()],
            config.insecure,
        )?;
    }
    let addrs: Vec<String> = config.peers.iter().map(|c| c.addr()).collect();
    xce_daemon::check_transport(
        "xce-apiserver",
        config.tls.as_ref(),
        addrs.iter().map(String::as_str),
        config.insecure,
        d.check_config,
    )?;
    if let Some(https) = &config.https {
        if d.check_config {
            drop(xce_apiserver::server::HttpsAcceptor::load(https.clone())?);
        }
    }
    if d.check_config {
        println!("configuration ok: apiserver on {listen}");
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("start runtime")?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("listen on {listen}"))?;
        // On a worker thread, not this one: the watchdog sees the worker threads only.
        let serving = xce_apiserver::run(listener, config, xce_client::shutdown::signal());
        tokio::spawn(serving)
            .await
            .context("the apiserver's task")?
    })
}
